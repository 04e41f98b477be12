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

# training state: header (8 int32, 3 int64 data position, uint64 rng, uint64 parameters), then
# first moments, second moments, and master weights when header[6] is 1
for name, master, params in (("fp32", 0, 4), ("bf16_master", 1, 3)):
    hdr = struct.pack("<8i3qQQ", 20241129, 1, 7, 2, 16, 3, master, 0, 1, 0, 5, 12345, params)
    values = [0.01 * i for i in range(params)] * (2 + master)
    put("train_state", name, hdr + struct.pack("<%df" % len(values), *values))
