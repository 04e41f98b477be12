#!/usr/bin/env bash
# scripts/decode_ab.sh BASE NEW [options]: a change to generation checked and timed against its
# baseline in one run, from two build directories (each with infer_gpt2; on a GPU also
# bench/bench_infer), as issue 20's calls need it:
#   1. ids: N greedy tokens (temperature 0) and N sampled ones (temperature 0.8, seed 7) from one
#      fixed 32-token prompt, by each build: "the same", or the first token where they part
#   2. logits (--logits): each build's logits of the greedy run, step by step: the first step
#      where they differ, how many of its logits, and the largest difference
#   3. speed (both builds with bench/bench_infer, --rounds R > 0): bench_infer, base then new,
#      R rounds; per measure each round and the ratio of the means, new / base
# Everything also lands in --out DIR (default a temporary folder, printed at the end).
# Exit status: 0 when the greedy ids are the same and every run finished, 1 otherwise, 2 on bad
# usage. Sampled ids and logits may part with greedy still the same (a change of rounding):
# reported, not failed.
set -u
usage() {
    echo "usage: scripts/decode_ab.sh BASE_DIR NEW_DIR [--model M] [--tokens N] [--rounds R]" >&2
    echo "       [--batch B] [--logits] [--out DIR]   (defaults: d12, 300, 3, 64)" >&2
    exit 2
}
[ $# -ge 2 ] || usage
base=$1 new=$2; shift 2
model=d12 tokens=300 rounds=3 batch=64 logits=0 out=""
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=${2:?}; shift 2 ;;
    --tokens) tokens=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    --logits) logits=1; shift ;;
    --out) out=${2:?}; shift 2 ;;
    *) echo "decode_ab.sh: unknown option $1" >&2; usage ;;
    esac
done
for n in "$tokens" "$rounds" "$batch"; do
    [[ $n =~ ^[0-9]+$ ]] || { echo "decode_ab.sh: --tokens, --rounds and --batch take whole numbers (got '$n')" >&2; exit 2; }
done
for d in "$base" "$new"; do
    [ -x "$d/infer_gpt2" ] || { echo "decode_ab.sh: $d/infer_gpt2 is not an executable (build it first)" >&2; exit 2; }
done
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out" || exit 2
status=0
prompt=$(seq -s, 100 131)

echo "== ids: $tokens tokens of $model from a 32-token prompt, $base against $new"
run() {   # dir name extra-args...
    local dir=$1 name=$2; shift 2
    if ! "$dir/infer_gpt2" -c "$model" --prompt-ids "$prompt" -n "$tokens" --ids --no-stop "$@" \
        > "$out/$name.ids" 2> "$out/$name.err"; then
        echo "FAILED: $dir/infer_gpt2 ($name): $(tail -n 1 "$out/$name.err")"
        status=1
        return 1
    fi
}
# the first token index where two id files part, or nothing when they are the same
first_difference() {
    python3 - "$1" "$2" <<'PY'
import sys
a, b = (open(f).read().split() for f in sys.argv[1:3])
i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
if i is None and len(a) != len(b):
    i = min(len(a), len(b))
print("" if i is None else i)
PY
}
for kind in greedy sampled; do
    args=(--temperature 0)
    [ "$kind" = sampled ] && args=(--temperature 0.8 --seed 7)
    [ "$kind" = greedy ] && [ "$logits" = 1 ] && extra=1 || extra=0
    ok=1
    for side in base new; do
        dir=$base; [ "$side" = new ] && dir=$new
        a=("${args[@]}")
        [ "$extra" = 1 ] && a+=(--logits "$out/${kind}_$side.logits")
        run "$dir" "${kind}_$side" "${a[@]}" || ok=0
    done
    [ "$ok" = 1 ] || continue
    at=$(first_difference "$out/${kind}_base.ids" "$out/${kind}_new.ids")
    if [ -z "$at" ]; then
        echo "$kind ids: the same ($(wc -w < "$out/${kind}_base.ids") tokens)"
    else
        echo "$kind ids: part at token $at"
        [ "$kind" = greedy ] && status=1
    fi
done

if [ "$logits" = 1 ] && [ -f "$out/greedy_base.logits" ] && [ -f "$out/greedy_new.logits" ]; then
    echo "== logits of the greedy run"
    python3 - "$out/greedy_base.logits" "$out/greedy_new.logits" <<'PY' || status=1
import sys
from array import array
a, b = array("f"), array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
if len(a) != len(b):
    print(f"logits: {len(a)} values against {len(b)}: not the same run"); sys.exit(1)
V = 50257   # GPT-2's vocabulary: infer_gpt2 writes (steps, samples, V)
if len(a) % V:
    print(f"logits: {len(a)} values, not a multiple of the vocabulary ({V})"); sys.exit(1)
for step in range(len(a) // V):
    x, y = a[step * V:(step + 1) * V], b[step * V:(step + 1) * V]
    if x != y:
        d = [abs(p - q) for p, q in zip(x, y)]
        n = sum(1 for v in d if v > 0)
        print(f"logits: first differ at step {step} of {len(a) // V}: {n} of {V} differ, by at most {max(d):.3g}")
        break
else:
    print(f"logits: the same at every step ({len(a) // V})")
PY
fi

if [ "$rounds" -gt 0 ] && [ -x "$base/bench/bench_infer" ] && [ -x "$new/bench/bench_infer" ]; then
    echo "== bench_infer -c $model -b $batch, $rounds rounds alternating"
    for r in $(seq "$rounds"); do
        for side in base new; do
            dir=$base; [ "$side" = new ] && dir=$new
            "$dir/bench/bench_infer" -c "$model" --ttft-prompt 1000 --prompt 128 -n 256 -b "$batch" -r 3 \
                > "$out/bench_${side}_$r.txt" 2>&1 || { echo "FAILED: $dir/bench/bench_infer, round $r"; status=1; }
        done
    done
    python3 - "$out" "$rounds" <<'PY'
import sys
out, rounds = sys.argv[1], int(sys.argv[2])
keys = ["decode_b1_tok_s", "decode_b1_long_tok_s", "decode_bB_tok_s", "ttft_ms"]
def read(side, r):
    vals = {}
    try:
        for line in open(f"{out}/bench_{side}_{r}.txt"):
            f = line.split()
            if len(f) >= 2 and f[0] in keys:
                vals[f[0]] = float(f[1])
    except OSError:
        pass
    return vals
runs = {s: [read(s, r) for r in range(1, rounds + 1)] for s in ("base", "new")}
print("| measure | base | new | new / base |")
print("|---|--:|--:|--:|")
for k in keys:
    cols, means = [], []
    for s in ("base", "new"):
        v = [x[k] for x in runs[s] if k in x]
        cols.append(" / ".join(f"{x:,.1f}" if x > 100 else f"{x:.3f}" for x in v) or "-")
        means.append(sum(v) / len(v) if v else None)
    ratio = f"{means[1] / means[0]:.3f}" if all(means) else "-"
    print(f"| {k} | {cols[0]} | {cols[1]} | {ratio} |")
PY
elif [ "$rounds" -gt 0 ]; then
    echo "== bench_infer: skipped (no bench/bench_infer in both builds: make BACKEND=cuda cuda-build)"
fi
echo "results in $out"
exit $status
