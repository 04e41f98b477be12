#!/usr/bin/env bash
# tests/test_tiktoken.sh: tests/test_tiktoken.py (the tokenizer against tiktoken on every code
# point and script of Unicode 16, and on TinyShakespeare), with the Python that scripts/setup.sh
# gave tiktoken (deps/venv) and the GPT-2 files and TinyShakespeare from $DATA_SRC,
# ../shared/data or data/ (the first that has them). BUILD: the folder of tiktoken_compare,
# prepare_data and tokenize (make test-tiktoken sets it). What is missing fails, never skips.
set -u
cd "$(dirname "$0")/.."
fail() { echo "FAIL: $*"; echo "test_tiktoken: 0 passed, 1 failed, 0 skipped"; exit 1; }
py=deps/venv/bin/python
[ -n "${BUILD:-}" ] || fail "BUILD is not set (run make test-tiktoken)"
[ -x "$py" ] || fail "$py not found: run scripts/setup.sh (it installs tests/requirements.txt there)"
"$py" -c 'import tiktoken, regex' || fail "$py cannot import tiktoken and regex: run scripts/setup.sh"
data=""
for root in "${DATA_SRC:-}" ../shared/data data; do
    if [ -n "$root" ] && [ -f "$root/gpt2/vocab.bpe" ] && [ -f "$root/gpt2/encoder.json" ] &&
       [ -f "$root/tinyshakespeare/input.txt" ]; then
        data=$root; break
    fi
done
[ -n "$data" ] || fail "gpt2/vocab.bpe, gpt2/encoder.json and tinyshakespeare/input.txt are in none of" \
    "\$DATA_SRC (${DATA_SRC:-unset}), ../shared/data, data/ (make data fetches them)"
exec "$py" tests/test_tiktoken.py --build "$BUILD" --vocab "$data/gpt2" --input "$data/tinyshakespeare/input.txt"
