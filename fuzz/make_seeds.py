#!/usr/bin/env python3
"""Write the fuzzers' seed inputs into fuzz/seeds/ (run once; the files are committed).

Development aid only, not needed to build or fuzz: it records how the seeds were made.
  python3 fuzz/make_seeds.py
"""
import json, os, struct

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def put(kind, name, data):
    os.makedirs(os.path.join(root, kind), exist_ok=True)
    with open(os.path.join(root, kind, name), "wb") as f:
        f.write(data)


def alphabet():  # GPT-2's byte -> character map
    printable = [b for b in range(256) if (33 <= b <= 126) or (161 <= b <= 172) or b >= 174]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# encoder: a flag byte, then text
texts = {
    "shakespeare": "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n",
    "contractions": "I'm you're we've he'll she'd it's don't I'M YOU'RE 'S'T",
    "whitespace": "a   b\n\n\nc\r\n\td\t\t  \n  e   ",
    "unicode": "Привет мир 你好世界 नमस्ते e\u0301 é 👍🏽 👨\u200d👩\u200d👧 a\u180e b x\u3000y 12345 3.14",
    "special": "text<|endoftext|>more\n<|endoftext|><|endoftext|>",
}
for i, (name, t) in enumerate(texts.items()):
    put("encode", name, bytes([i * 37 % 256]) + t.encode())
put("encode", "invalid_utf8", b"\x01a\xff\xfe b\xc3\n\xed\xa0\x80x\xf4\x90\x80\x80\xc0\xaf!")

# vocabulary: 2-byte length of vocab.bpe, vocab.bpe, encoder.json
A = alphabet()
spell = lambda bs: "".join(A[b] for b in bs)
merges = [(b"a", b"a"), (b"aa", b"a"), (b"b", b"c"), (b"a", b"bc"), (b" ", b"t"), (b"\n", b"\n")]
vocab_bpe = "#version: 0.2\n" + "".join("%s %s\n" % (spell(l), spell(r)) for l, r in merges)
enc = {spell(bytes([b])): b for b in range(256)}
for i, (l, r) in enumerate(merges):
    enc[spell(l + r)] = 256 + i
enc["<|endoftext|>"] = 256 + len(merges)
for name, ascii_only in (("toy_utf8", False), ("toy_escaped", True)):
    m = vocab_bpe.encode()
    j = json.dumps(enc, ensure_ascii=ascii_only).encode()
    put("vocab", name, struct.pack("<H", len(m)) + m + j)

# tokenizer file: version 2, 4 tokens, end-of-text 3
toks = [b"\0", b"hello", b"x" * 255, b"<|e|>"]
body = b"".join(bytes([len(t)]) + t for t in toks)
put("tokenizer_file", "small_v2", struct.pack("<256I", *([20240328, 2, len(toks), 3] + [0] * 252)) + body)

# token file: version 1
for name, ids in (("three", [50256, 15496, 995]), ("empty", [])):
    hdr = struct.pack("<256i", *([20240520, 1, len(ids)] + [0] * 253))
    put("token_file", name, hdr + struct.pack("<%dH" % len(ids), *ids))

# safetensors: a tiny GPT-2 (L=1, C=4, V=5, maxT=3) in HF's layout, the dtypes import_hf reads,
# a mask of another dtype; then the same with metadata, escaped names and padding; config.json
def safetensors(tensors, metadata=None, pad=0):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        size = {"F32": 4, "F16": 2, "BF16": 2, "BOOL": 1}[dtype]
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes((i * 7) % 61 for i in range(size))   # small finite values in every dtype
    text = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + data


C = 4
gpt2 = [("wte.weight", "F32", [5, C]), ("wpe.weight", "F16", [3, C])]
for suffix, shape in (("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
                      ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
                      ("ln_2.weight", [C]), ("ln_2.bias", [C]), ("mlp.c_fc.weight", [C, 4 * C]),
                      ("mlp.c_fc.bias", [4 * C]), ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])):
    gpt2.append(("h.0." + suffix, "BF16", shape))
gpt2 += [("ln_f.weight", "F32", [C]), ("ln_f.bias", "F32", [C]), ("h.0.attn.bias", "BOOL", [1, 1, 3, 3])]
put("safetensors", "gpt2_tiny", safetensors(gpt2))
put("safetensors", "metadata_padded", safetensors([("transformer.wte.weight", "F32", [2, 2]), ("a\"\\\n\u00e9\U0001F600", "F16", [0]),
                                                   ("scalar", "BF16", [])], {"format": "pt"}, pad=5))
put("safetensors", "empty", safetensors([]))
put("safetensors", "config_gpt2", json.dumps({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257, "n_inner": None}, indent=2).encode())

# training state (train_state.h): version 1's header (8 int32, 3 int64 data position, uint64
# rng, uint64 parameters), then first moments, second moments, and master weights when
# header[6] is 1; version 2 adds, after the same 72 bytes with header[7] the shuffle flag, the
# seed, the training tokens, their hash (uint64 each), the training files and a zero (int32)
for name, master, params in (("fp32", 0, 4), ("bf16_master", 1, 3)):
    hdr = struct.pack("<8i3qQQ", 20241129, 1, 7, 2, 16, 3, master, 0, 1, 0, 5, 12345, params)
    values = [0.01 * i for i in range(params)] * (2 + master)
    put("train_state", name, hdr + struct.pack("<%df" % len(values), *values))
for name, master, shuffle, params in (("v2_fp32", 0, 0, 4), ("v2_bf16_master_shuffled", 1, 1, 3)):
    hdr = struct.pack("<8i3qQQ3Q2i", 20241129, 2, 7, 2, 16, 3, master, shuffle, 1, 0, 5, 12345, params,
                      1337, 305260, 0x9E3779B97F4A7C15, 1, 0)
    values = [0.01 * i for i in range(params)] * (2 + master)
    put("train_state", name, hdr + struct.pack("<%df" % len(values), *values))
