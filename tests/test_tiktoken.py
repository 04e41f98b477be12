#!/usr/bin/env python3
"""tests/test_tiktoken.py: the C GPT-2 encoder (data/bpe.c) against tiktoken, id for id, on

  1. every code point, U+0000..U+10FFFF less the surrogates, each in a few short contexts that
     show the class GPT-2's split regex gives it (letter, number, white space, other): e.g.
     "x" + c + "'s" ends in the token "'s" only when c is a letter or a number, because any other
     character takes the apostrophe into its own piece. One check per plane.
  2. text generated from every script that Python's `regex` module knows (words of the script's
     letters and marks, its digits and punctuation, apostrophe suffixes, spaces of several kinds,
     CJK and Latin neighbours, numbers). One check per script.
  3. TinyShakespeare: prepare_data's token files and tokenize's tokenizer file, byte for byte
     against llm.c's preparation with tiktoken (scripts/compare_tiktoken.py).

tiktoken's Unicode tables are version 16.0 (BPE_UNICODE_VERSION in data/bpe.h), so this passes
only when the linked PCRE2's are too (scripts/build_pcre2.sh). The texts of 1 and 2 stream with
tiktoken's ids into BUILD/tiktoken_compare, which encodes them and counts the differences.
Texts 2 are random, from a fresh seed each run (printed; TEST_SEED=N replays it).

  tests/test_tiktoken.py --build build/cpu-flash --vocab DIR --input tinyshakespeare/input.txt
Ends with "test_tiktoken: N passed, N failed, N skipped"; exits 1 when anything failed.
"""
import argparse, os, random, struct, subprocess, sys, tempfile, time

import regex
import regex._regex_core
import tiktoken

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from compare_tiktoken import gpt2_encoding, llmc_tinyshakespeare, llmc_tokenizer_file, read_bin

TEXTS_PER_SCRIPT = 60
SUFFIXES = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'LL", "'"]
SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", " \n", "\n\n", "\u00a0", "\u3000", "\u2009",
          "\u180e", "\u200b", "\u2028", "\x0b"]
PUNCTUATION = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`") + ["...", "--", "!!", "?!", "\u2014", "\u00ab",
                                                            "\u3002", "\u300c", "\uff0c"]
NEIGHBOURS = ["\u4e2d", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4", "\u3072\u3089\u304c\u306a",
              "\u30ab\u30bf\u30ab\u30ca", "\U00020000", "\U00031350", "the", "and", "The", "x",
              "\u00e9t\u00e9", "\u0416\u0438", "\U0001f600", "\U0001f44d\U0001f3fd"]
NUMBERS = ["0", "1", "42", "2024", "3.14", "1,000", "\u0661\u0662", "\u00bd", "\u2167"]


def contexts(c):
    """Short texts, joined by newlines (each starts a piece), in which c's class changes the ids:
    an apostrophe suffix (joined by a non-letter), a digit, a letter, a CJK neighbour each side,
    a leading space or two (a lone space joins any non-space that follows), c repeated."""
    return "\n".join([
        "x" + c + "'s", c + "'t", c + c + "'re", " " + c + "1", "1" + c + "1", "  " + c, c + "  x",
        "a" + c + "b", c + "\u4e2d", "\u4e2d" + c, " " + c + c, "'" + c + "s"])


def script_code_points():
    """{script name: its code points}, from the `regex` module's tables (the scripts of its
    Unicode version, 17 for regex 2026.5.9: a superset of Unicode 16's, whose own new scripts
    are unassigned to tiktoken and to PCRE2 alike and are checked as such)."""
    names = {}
    for name, value in regex._regex_core.PROPERTIES["SCRIPT"][1].items():
        names.setdefault(value, []).append(name)
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    scripts = {}
    for value, aliases in sorted(names.items()):
        name = max(aliases, key=len)
        cps = regex.findall(r"\p{Script=%s}" % name, every)
        if cps:
            scripts[name] = cps
    return scripts


def script_texts(name, cps, rng):
    """Random texts of one script's letters, marks, digits and punctuation among the rest."""
    def of(pattern):
        return [c for c in cps if regex.match(pattern, c)]
    letters, marks, digits, punct = of(r"\p{L}"), of(r"\p{M}"), of(r"\p{N}"), of(r"[\p{P}\p{S}]")
    if len(cps) > 5000:   # Han, Unknown...: a sample of each class keeps the texts varied
        letters, marks, digits, punct = (rng.sample(x, min(len(x), 5000)) for x in (letters, marks, digits, punct))
    any_cp = letters + marks + digits + punct or cps[:5000]

    def word():
        pool = letters or any_cp
        w = ""
        for _ in range(rng.randint(1, 8)):
            w += rng.choice(pool)
            if marks and rng.random() < 0.3:
                w += "".join(rng.choice(marks) for _ in range(rng.randint(1, 2)))
        return w

    def number():
        if digits and rng.random() < 0.6:
            return "".join(rng.choice(digits) for _ in range(rng.randint(1, 4)))
        return rng.choice(NUMBERS)

    def piece():
        r = rng.random()
        if r < 0.35:
            return word() + (rng.choice(SUFFIXES) if rng.random() < 0.3 else "")
        if r < 0.55:
            return rng.choice(SPACES)
        if r < 0.65:
            return number()
        if r < 0.75:
            return rng.choice(punct) if punct and rng.random() < 0.5 else rng.choice(PUNCTUATION)
        if r < 0.85:
            return rng.choice(NEIGHBOURS)
        return rng.choice(any_cp)

    return ["".join(piece() for _ in range(rng.randint(1, 30))) for _ in range(TEXTS_PER_SCRIPT)]


def field(b):
    return struct.pack("<I", len(b)) + b


def record(group, item, text, ids):
    return (field(group.encode()) + field(item.encode()) + field(text.encode()) +
            struct.pack("<I%dI" % len(ids), len(ids), *ids))


def compare_streams(enc, args, seed):
    """Parts 1 and 2 through tiktoken_compare; returns its (passed, failed) counts."""
    scripts = script_code_points()
    out = tempfile.TemporaryFile(mode="w+")
    driver = subprocess.Popen([os.path.join(args.build, "tiktoken_compare"), args.vocab],
                              stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
    t0 = time.time()
    try:
        with driver.stdin as pipe:
            for plane in range(17):
                group = "code points U+%04X..U+%04X" % (plane << 16, (plane << 16) | 0xFFFF)
                for c in range(plane << 16, (plane + 1) << 16):
                    if 0xD800 <= c < 0xE000:
                        continue
                    text = contexts(chr(c))
                    pipe.write(record(group, "U+%04X" % c, text, enc.encode_ordinary(text)))
            for name, cps in scripts.items():
                rng = random.Random("%d %s" % (seed, name))
                for i, text in enumerate(script_texts(name, cps, rng)):
                    pipe.write(record("script " + name, "text %d" % i, text, enc.encode_ordinary(text)))
    except BrokenPipeError:
        pass   # the driver ended early: its output says why
    rc = driver.wait()
    out.seek(0)
    report = out.read()
    print(report, end="")
    print("(%d scripts; %.1f s)" % (len(scripts), time.time() - t0))
    summary = regex.search(r"^tiktoken_compare: (\d+) passed, (\d+) failed", report, regex.M)
    if not summary:
        print("FAIL: tiktoken_compare exited with %d and printed no summary" % rc)
        return 0, 1
    passed, failed = int(summary.group(1)), int(summary.group(2))
    if rc != 0 and failed == 0:
        print("FAIL: tiktoken_compare exited with %d" % rc)
        failed = 1
    return passed, failed


def compare_tinyshakespeare(enc, args):
    """Part 3: prepare_data's .bin files and the tokenizer file against llm.c's; (passed, failed)."""
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "tiny_shakespeare")
        tokenizer_file = os.path.join(tmp, "gpt2_tokenizer.bin")
        for cmd in ([os.path.join(args.build, "prepare_data"), "--tinyshakespeare", "--vocab", args.vocab,
                     args.input, prefix],
                    [os.path.join(args.build, "tokenize"), "--vocab", args.vocab, "export-tokenizer",
                     tokenizer_file]):
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                print("FAIL: %s exited with %d:\n%s" % (" ".join(cmd), run.returncode, run.stdout + run.stderr))
                return 0, 1
        val, train = llmc_tinyshakespeare(enc, open(args.input, encoding="utf-8").read())
        for name, want in (("val", val), ("train", train)):
            same = read_bin("%s_%s.bin" % (prefix, name)) == want
            print("%s TinyShakespeare %s.bin (%d tokens) is llm.c's with tiktoken" % (
                "ok:" if same else "FAIL:", name, len(want)))
            passed, failed = passed + same, failed + (not same)
        same = open(tokenizer_file, "rb").read() == llmc_tokenizer_file(enc)
        print("%s the tokenizer file is llm.c's" % ("ok:" if same else "FAIL:"))
        passed, failed = passed + same, failed + (not same)
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="folder with tiktoken_compare, prepare_data, tokenize")
    ap.add_argument("--vocab", required=True, help="folder with vocab.bpe and encoder.json")
    ap.add_argument("--input", required=True, help="TinyShakespeare's input.txt")
    args = ap.parse_args()
    seed = int(os.environ.get("TEST_SEED") or time.time_ns() % 1000000007)
    print("tiktoken %s, regex %s; random seed %d (replay with TEST_SEED=%d)" % (
        tiktoken.__version__, regex.__version__, seed, seed))
    enc = gpt2_encoding(args.vocab)
    p1, f1 = compare_streams(enc, args, seed)
    p2, f2 = compare_tinyshakespeare(enc, args)
    print("test_tiktoken: %d passed, %d failed, 0 skipped" % (p1 + p2, f1 + f2))
    sys.exit(1 if f1 + f2 else 0)


if __name__ == "__main__":
    main()
