#!/usr/bin/env bash
# tests/test_decode_ab.sh: scripts/decode_ab.sh on the CPU build, against itself (everything the
# same) and against a wrapper of it that changes one greedy id, one sampled id, one logit, or
# fails, so that each report and exit status is known; and its refusals of bad usage. Ends like
# the C tests: "tests/test_decode_ab.sh: N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
name=tests/test_decode_ab.sh
. tests/shell_test.sh
need_python3 "decode_ab.sh's comparisons"
build=${BUILD:-build/cpu-flash}
if [ ! -x "$build/infer_gpt2" ]; then
    make -s -j2 BACKEND=cpu ATTENTION=flash BUILD="$build" "$build/infer_gpt2" > "$tmp/make.log" 2>&1 ||
        { tail -n 20 "$tmp/make.log"; echo "FAIL $name: cannot build $build/infer_gpt2"; failed=1; finish; }
fi
build=$(cd "$build" && pwd)
ab() {   # ab OUT NEW_DIR extra-options...: decode_ab.sh of d2, 12 tokens, no bench
    local o=$1 n=$2; shift 2
    scripts/decode_ab.sh "$build" "$n" --model d2 --tokens 12 --rounds 0 --out "$tmp/$o.d" "$@" > "$tmp/$o.txt" 2>&1
}

# ---- the same build twice --------------------------------------------------------------------------
ab same "$build" --logits
check "same: exit 0" test $? -eq 0
check "same: greedy" has "$tmp/same.txt" "greedy ids: the same (12 tokens)"
check "same: sampled" has "$tmp/same.txt" "sampled ids: the same (12 tokens)"
check "same: logits" has "$tmp/same.txt" "logits: the same at every step (12)"

# ---- a wrapper that changes what it is told to -------------------------------------------------------
# FAKE_GREEDY=k / FAKE_SAMPLED=k: id k of a greedy / sampled run + 1; FAKE_LOGIT=s: the first
# logit of step s + 0.5 in the --logits file; FAKE_FAIL=1: exit 1 after saying why
mkdir -p "$tmp/fake"
cat > "$tmp/fake/infer_gpt2" <<EOF
#!/usr/bin/env bash
[ -n "\${FAKE_FAIL:-}" ] && { echo "error: made to fail" >&2; exit 1; }
args=("\$@"); greedy=0; logits=""
for ((i = 0; i < \$#; i++)); do
    [ "\${args[i]}" = --temperature ] && [ "\${args[i+1]}" = 0 ] && greedy=1
    [ "\${args[i]}" = --logits ] && logits=\${args[i+1]}
done
"$build/infer_gpt2" "\$@" > "$tmp/fake/out" || exit
at=\${FAKE_SAMPLED:-}; [ "\$greedy" = 1 ] && at=\${FAKE_GREEDY:-}
python3 - "$tmp/fake/out" "\$at" "\$logits" "\${FAKE_LOGIT:-}" <<'PY'
import struct, sys
ids = open(sys.argv[1]).read().split()
if sys.argv[2]:
    k = int(sys.argv[2]); ids[k] = str(int(ids[k]) + 1)
print(" ".join(ids))
if sys.argv[3] and sys.argv[4]:
    with open(sys.argv[3], "r+b") as f:
        f.seek(int(sys.argv[4]) * 50257 * 4)
        v = struct.unpack("<f", f.read(4))[0]
        f.seek(-4, 1)
        f.write(struct.pack("<f", v + 0.5))
PY
EOF
chmod +x "$tmp/fake/infer_gpt2"

FAKE_SAMPLED=5 ab sampled "$tmp/fake"
check "sampled parts: exit 0 (greedy the same)" test $? -eq 0
check "sampled parts: greedy" has "$tmp/sampled.txt" "greedy ids: the same (12 tokens)"
check "sampled parts: where" has "$tmp/sampled.txt" "sampled ids: part at token 5"

FAKE_GREEDY=3 ab greedy "$tmp/fake"
check "greedy parts: exit 1" test $? -eq 1
check "greedy parts: where" has "$tmp/greedy.txt" "greedy ids: part at token 3"

FAKE_LOGIT=7 ab logit "$tmp/fake" --logits
check "a logit changed: exit 0 (the ids the same)" test $? -eq 0
check "a logit changed: where and by how much" has "$tmp/logit.txt" \
    "logits: first differ at step 7 of 12: 1 of 50257 differ, by at most 0.5"

FAKE_FAIL=1 ab fail "$tmp/fake"
check "a failed run: exit 1" test $? -eq 1
check "a failed run: says which and why" has "$tmp/fail.txt" "FAILED: $tmp/fake/infer_gpt2 (greedy_new): error: made to fail"

scripts/decode_ab.sh "$build" "$build" --model d2 --tokens 4 --rounds 1 --out "$tmp/nb.d" > "$tmp/nb.txt" 2>&1
check "no bench_infer: exit 0" test $? -eq 0
check "no bench_infer: skipped, says why" has "$tmp/nb.txt" "bench_infer: skipped (no bench/bench_infer in both builds"

# ---- bad usage ---------------------------------------------------------------------------------------
scripts/decode_ab.sh "$build" > /dev/null 2> "$tmp/u1.err"
check "one directory: exit 2" test $? -eq 2
check "one directory: usage" has "$tmp/u1.err" "usage: scripts/decode_ab.sh BASE_DIR NEW_DIR"
scripts/decode_ab.sh "$build" "$tmp/nowhere" > /dev/null 2> "$tmp/u2.err"
check "a directory without infer_gpt2: exit 2" test $? -eq 2
check "a directory without infer_gpt2: says so" has "$tmp/u2.err" "$tmp/nowhere/infer_gpt2 is not an executable"
scripts/decode_ab.sh "$build" "$build" --tokens many > /dev/null 2> "$tmp/u3.err"
check "--tokens not a number: exit 2" test $? -eq 2
check "--tokens not a number: says so" has "$tmp/u3.err" "take whole numbers (got 'many')"
scripts/decode_ab.sh "$build" "$build" --fast > /dev/null 2> "$tmp/u4.err"
check "an unknown option: exit 2" test $? -eq 2
check "an unknown option: names it" has "$tmp/u4.err" "unknown option --fast"

finish
