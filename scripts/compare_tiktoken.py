#!/usr/bin/env python3
"""Check the C tokenizer against tiktoken, token for token, and time tiktoken.

A development aid, not a dependency of the project: needs `pip install tiktoken` and the GPT-2
files (vocab.bpe, encoder.json), from which tiktoken's GPT-2 Encoding is built by hand, so no
download happens.

  python3 scripts/compare_tiktoken.py --vocab data/gpt2 --input data/tinyshakespeare/input.txt \
      --bins data/tinyshakespeare/tiny_shakespeare --tokenize ./tokenize [--random 2000] [--time]

  --bins PREFIX   compare PREFIX_{val,train}.bin with llm.c's tinyshakespeare.py preparation
  --tokenizer-file FILE   compare FILE byte for byte with the file llm.c's train_gpt2.py writes
  --random N      N random strings (ASCII, Unicode, whitespace soup) through ./tokenize vs tiktoken
  --time          tiktoken's single-thread encode_ordinary MB/s on --input (median of 5 runs)
"""
import argparse, os, random, statistics, struct, subprocess, sys, time

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def gpt2_encoding(vocab_dir):
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(vocab_dir, "vocab.bpe"),
        encoder_json_file=os.path.join(vocab_dir, "encoder.json"))
    return tiktoken.Encoding(name="gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


def read_bin(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520 and header[1] == 1, path
        data = f.read()
    assert len(data) == 2 * header[2], path
    return list(struct.unpack("<%dH" % header[2], data))


def llmc_tinyshakespeare(enc, text):
    # llm.c dev/data/tinyshakespeare.py
    eot = enc._special_tokens["<|endoftext|>"]
    sections = text.split("\n\n")
    tokens = []
    for i, s in enumerate(sections):
        tokens.append(eot)
        spad = s + "\n\n" if i != len(sections) - 1 else s
        tokens.extend(enc.encode_ordinary(spad))
    return tokens[:32768], tokens[32768:]


def random_text(rng):
    pools = [
        "abcXYZ '\"sStTdDmM", "0123456789", " \t\n\r\n\x0b\x0c", "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'LL",
        "éàüßçøñ", "Привет мир", "你好世界，。", "こんにちは", "مرحبا", "שלום", "नमस्ते", "\u0301\u0308\u20dd",
        "😀🎉👍🏽🇫🇷👨‍👩‍👧", "\u00a0\u2000\u3000\u180e\u2028\u0085", "!?.,;:-()[]{}<>@#$%^&*_=+|/\\~`",
        "<|endoftext|>", "١٢٣½²Ⅻ",
    ]
    n = rng.randint(0, 40)
    out = []
    for _ in range(n):
        pool = rng.choice(pools)
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
    return "".join(out)


def llmc_tokenizer_file(enc):
    # llm.c train_gpt2.py write_tokenizer: version 2, then a length byte and the bytes of each token
    n = enc.max_token_value + 1
    header = struct.pack("<256i", *([20240328, 2, n, enc.eot_token] + [0] * 252))
    body = b"".join(bytes([len(b)]) + b for b in (enc.decode_bytes([i]) for i in range(n)))
    return header + body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default="data/gpt2")
    ap.add_argument("--input", default="data/tinyshakespeare/input.txt")
    ap.add_argument("--bins")
    ap.add_argument("--tokenize", default="./tokenize")
    ap.add_argument("--tokenizer-file")
    ap.add_argument("--random", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args()
    enc = gpt2_encoding(args.vocab)
    text = open(args.input, encoding="utf-8").read()
    failures = 0

    if args.bins:
        val, train = llmc_tinyshakespeare(enc, text)
        for name, want in (("val", val), ("train", train)):
            got = read_bin("%s_%s.bin" % (args.bins, name))
            same = got == want
            print("%s: tiktoken %d tokens, C %d tokens: %s" % (name, len(want), len(got),
                  "identical" if same else "DIFFERENT"))
            failures += not same

    if args.tokenizer_file:
        same = open(args.tokenizer_file, "rb").read() == llmc_tokenizer_file(enc)
        print("%s: %s llm.c's" % (args.tokenizer_file, "identical to" if same else "DIFFERENT from"))
        failures += not same

    if args.random:
        rng = random.Random(args.seed)
        texts = [random_text(rng) for _ in range(args.random)]
        bad = 0
        for t in texts:
            want = enc.encode_ordinary(t)
            out = subprocess.run([args.tokenize, "--vocab", args.vocab, "encode"], input=t.encode(),
                                 capture_output=True, check=True).stdout.decode()
            got = [int(x) for x in out.split()]
            if got != want:
                bad += 1
                if bad <= 5:
                    print("DIFFERENT for %r:\n  tiktoken %s\n  C        %s" % (t, want, got))
        print("random strings: %d of %d identical" % (len(texts) - bad, len(texts)))
        failures += bad

    if args.time:
        data = text.encode()
        enc.encode_ordinary(text)  # warm-up
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            enc.encode_ordinary(text)
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        print("tiktoken %s encode_ordinary, 1 thread: %.1f MB/s (%d bytes, median of 5: %.4f s)" % (
            tiktoken.__version__, len(data) / t / 1e6, len(data), t))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
