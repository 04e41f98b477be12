#!/usr/bin/env bash
# decode_check.sh: issue 20's check on a GPU, from binaries already built (make BACKEND=cuda
# cuda-build; nothing is rebuilt here), in about 4 minutes:
#   1. tests/gpu/test_infer_gpu: the fused decode kernels against the plain layers, the decode
#      attention against fp64, cached against recomputed logits at B = 1, 3, 4, 9, 16, 64, greedy
#      with the tokens on the device against greedy through the host
#   2. tests/gpu/hf_parity.sh: greedy generation against Hugging Face (skips itself without
#      torch and transformers; HF_PARITY=0 skips it here)
#   3. bench_infer four ways in the same run: the fused step (default), the same without PDL
#      (CUDA_PDL=0), greedy's tokens through the host every step (GREEDY_ON_DEVICE=0), the
#      plain layers of before (DECODE_FUSED=0), and a table of the four
#   4. with ncu on the PATH (NCU=0 skips it): the per-kernel account of one decode step at
#      batch 1, fused and plain: ncu times each kernel alone (serialised: no PDL overlap, no
#      launch gaps), so the sum is the kernels' own time, not the step's
#   5. with $BUILD/bench/libkernel_timeline.so built (TIMELINE=0 skips it): the step as it runs,
#      at batch 1 and 64 (CUPTI; scripts/timeline.py --cut encoder_forward): each kernel's
#      share of the step's critical path, and the idle gaps; at batch 1 also each of a layer's
#      calls (timeline.py --period 2 on Hopper, 5 elsewhere); and the decode attention's time a step against the
#      context, one position longer each step (--trend: its fixed part and a position's cost)
#   6. with compute-sanitizer on the PATH (SANITIZE=0 skips it): memcheck, racecheck and
#      synccheck on test_infer_gpu --sanitize (the fused calls at a few shapes and 1, 9, 16 rows)
# Everything also lands in $OUT_DIR (default $BUILD/decode_check).
set -uo pipefail
BUILD=${BUILD:-build/cuda-flash}
OUT_DIR=${OUT_DIR:-$BUILD/decode_check}
mkdir -p "$OUT_DIR"
for bin in tests/gpu/test_infer_gpu bench/bench_infer infer_gpt2; do
    [ -x "$BUILD/$bin" ] || { echo "error: $BUILD/$bin is not built (make BACKEND=cuda cuda-build)" >&2; exit 1; }
done

echo "== 1. tests/gpu/test_infer_gpu"
"$BUILD/tests/gpu/test_infer_gpu" > "$OUT_DIR/test_infer_gpu.txt" 2>&1
echo "exit $?" >> "$OUT_DIR/test_infer_gpu.txt"
grep -v '^PASS' "$OUT_DIR/test_infer_gpu.txt" | tail -n 25

if [ "${HF_PARITY:-1}" != 0 ]; then
    echo "== 2. tests/gpu/hf_parity.sh"
    BUILD=$BUILD bash tests/gpu/hf_parity.sh 2>&1 | tee "$OUT_DIR/hf_parity.txt" | tail -n 8
fi

echo "== 3. bench_infer: fused with PDL, fused without PDL, tokens through the host, the plain layers"
bench() {   # name, env assignments...
    local name=$1; shift
    env "$@" "$BUILD/bench/bench_infer" -c d12 --ttft-prompt 1000 --prompt 128 -n 256 -b 64 -r 5 \
        > "$OUT_DIR/bench_$name.txt" 2>&1 || { echo "bench_infer ($name) failed:"; tail -n 5 "$OUT_DIR/bench_$name.txt"; }
}
bench fused
bench nopdl CUDA_PDL=0
bench host GREEDY_ON_DEVICE=0
bench plain DECODE_FUSED=0
value() { awk -v k="$1" '$1 == k { print $2 }' "$OUT_DIR/bench_$2.txt"; }
{
    echo "| measure | fused + PDL | fused, no PDL | tokens through the host (GREEDY_ON_DEVICE=0) | plain layers (DECODE_FUSED=0) |"
    echo "|---|--:|--:|--:|--:|"
    for key in decode_b1_tok_s decode_b1_nograph_tok_s decode_b1_long_tok_s decode_bB_tok_s ttft_ms bound_b1_tok_s bound_bB_tok_s; do
        echo "| $key | $(value $key fused) | $(value $key nopdl) | $(value $key host) | $(value $key plain) |"
    done
    b1=$(value decode_b1_tok_s fused)
    [ -n "$b1" ] && awk -v r="$b1" 'BEGIN { printf "\nbatch 1, fused: %.1f us a token\n", 1e6 / r }'
} | tee "$OUT_DIR/bench_table.md"

if [ "${NCU:-1}" != 0 ] && command -v ncu > /dev/null; then
    echo "== 4. ncu: the kernels of one decode step at batch 1 (each timed alone)"
    prompt=$(seq -s, 100 131)   # 32 tokens
    # kernels of a run of n new tokens (n - 1 decode steps); the last step's kernels are the
    # ones the run with one more token adds at its end
    kernels() {   # n, env assignments...
        local n=$1; shift
        env "$@" ncu --csv --metrics gpu__time_duration.sum --print-units base \
            --print-kernel-base function \
            "$BUILD/infer_gpt2" -c d12 --prompt-ids "$prompt" -n "$n" --temperature 0 --ids --no-stop 2>/dev/null |
            awk -F'","' '{ sub(/^"/, ""); sub(/"\r?$/, "") }   # the outer quotes: fields split on ","
                         $1 == "ID" { for (i = 1; i <= NF; i++) col[$i] = i; next }
                         col["Metric Name"] && $col["Metric Name"] == "gpu__time_duration.sum" {
                             v = $col["Metric Value"]; gsub(/,/, "", v); print $col["Kernel Name"] "\t" v }'
    }
    account() {   # name, env assignments...
        local name=$1; shift
        kernels 3 "$@" > "$OUT_DIR/ncu_${name}_3.tsv"
        kernels 4 "$@" > "$OUT_DIR/ncu_${name}_4.tsv"
        local a b
        a=$(wc -l < "$OUT_DIR/ncu_${name}_3.tsv"); b=$(wc -l < "$OUT_DIR/ncu_${name}_4.tsv")
        tail -n $((b - a)) "$OUT_DIR/ncu_${name}_4.tsv" > "$OUT_DIR/ncu_${name}_step.tsv"
        echo "-- $name: $((b - a)) kernels in one step"
        # per kernel name (shortened to before its template arguments): count, total us
        # ncu reports ns; per kernel: total us, count, name (before its template arguments)
        awk -F'\t' '{ n = $1; gsub(/\(anonymous namespace\)::/, "", n); sub(/^void /, "", n);
                       sub(/[<(].*/, "", n); c[n]++; t[n] += $2; s += $2 }
            END { for (k in c) printf "  %8.1f us %4d  %s\n", t[k] / 1e3, c[k], k;
                  printf "  %8.1f us %4d  %s\n", s / 1e3, NR, "total (each kernel alone)" }' \
            "$OUT_DIR/ncu_${name}_step.tsv" | sort -n -r
    }
    account fused | tee "$OUT_DIR/ncu_account.txt"
    account plain DECODE_FUSED=0 | tee -a "$OUT_DIR/ncu_account.txt"
else
    echo "== 4. skipped (no ncu on the PATH, or NCU=0)"
fi
TL=$BUILD/bench/libkernel_timeline.so
if [ "${TIMELINE:-1}" != 0 ] && [ -f "$TL" ] && command -v python3 > /dev/null; then
    echo "== 5. the decode step as it runs (CUPTI timeline), batch 1 and 64"
    for b in 1 64; do
        CUDA_INJECTION64_PATH=$(cd "$(dirname "$TL")" && pwd)/$(basename "$TL") \
            KERNEL_TIMELINE_OUT="$OUT_DIR/timeline_b$b.csv" "$BUILD/bench/bench_infer" -c d12 \
            --ttft-prompt 200 --prompt 128 -n 256 -b "$b" -r 1 > "$OUT_DIR/timeline_b$b.txt" 2>&1 ||
            { echo "bench_infer under the timeline (b=$b) failed:"; tail -n 5 "$OUT_DIR/timeline_b$b.txt"; continue; }
        # at batch 1 the fused step: a line per call of a layer (d12: 12 layers), two on Hopper
        # (decode_layers_sm90.cu), five elsewhere
        period=0; [ "$b" = 1 ] && period=5
        [ "$b" = 1 ] && nvidia-smi --query-gpu=compute_cap --format=csv,noheader | grep -q '^9\.0' && period=2
        python3 scripts/timeline.py "$OUT_DIR/timeline_b$b.csv" --cut encoder_forward --skip 1 \
            --last 100 --period $period --layers 12 --trend 'decode_attention|qkv_attention' --name "decode, batch $b" |
            tee "$OUT_DIR/timeline_b$b.md" |
            sed -n '/kernel (a step)/,/^$/p; /call of a layer/,/^$/p; /kernels named like/,/^$/p' | cut -c1-150
    done
else
    echo "== 5. skipped (TIMELINE=0, no $TL, or no python3)"
fi
if [ "${SANITIZE:-1}" != 0 ] && command -v compute-sanitizer > /dev/null; then
    echo "== 6. compute-sanitizer on test_infer_gpu --sanitize"
    for tool in memcheck synccheck; do
        compute-sanitizer --tool $tool --error-exitcode 1 "$BUILD/tests/gpu/test_infer_gpu" --sanitize \
            > "$OUT_DIR/sanitize_$tool.txt" 2>&1
        echo "$tool: exit $? ($(grep -E 'ERROR SUMMARY' "$OUT_DIR/sanitize_$tool.txt"))"
    done
    # racecheck also reports hazards inside cuBLAS's kernels (the plain layers the test compares
    # against): racecheck_verdict.sh judges the log
    compute-sanitizer --tool racecheck "$BUILD/tests/gpu/test_infer_gpu" --sanitize \
        > "$OUT_DIR/sanitize_racecheck.txt" 2>&1
    echo "racecheck: $(bash scripts/racecheck_verdict.sh "$OUT_DIR/sanitize_racecheck.txt" | tail -n 1)"
else
    echo "== 6. skipped (SANITIZE=0, or no compute-sanitizer on the PATH)"
fi
echo "results in $OUT_DIR"
