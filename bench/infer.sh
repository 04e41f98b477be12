#!/usr/bin/env bash
# bench/infer.sh [OUT.md]: generation speed of GPT-2 124M (random weights, bf16) beside
# Hugging Face transformers' generate() on the same GPU in the same run, as a markdown table.
#   ours: $BUILD/bench/bench_infer (make BACKEND=cuda bench-infer builds it and runs this)
#   HF:   scripts/hf_reference.py bench (torch + transformers; the row is left out without them)
# Same measures on both sides, greedy, median of 5 runs after a warm-up: time to first token
# for a 1000-token prompt at batch 1; decode tokens/s over 256 steps after a 128-token prompt at
# batch 1 and 64; decode at long context (after the 1000-token prompt, to the 1024 limit).
set -euo pipefail
BUILD=${BUILD:-build/cuda-flash}
out=${1:-$BUILD/bench/infer.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$BUILD/bench/bench_infer" ]; then
    echo "error: $BUILD/bench/bench_infer is not built (make BACKEND=cuda bench-infer)" >&2; exit 1
fi
"$BUILD/bench/bench_infer" -c d12 --ttft-prompt 1000 --prompt 128 -n 256 -b 64 -r 5 | tee "$tmp/ours.txt"
if python3 -c "import torch, transformers" 2>/dev/null; then
    # HF_N, HF_R: fewer steps and repeats for HF's side, whose decode rate does not depend on
    # them at this context length, to keep a GPU run short (HF decodes at tens of tokens/s)
    python3 scripts/hf_reference.py bench --ttft-prompt 1000 --prompt 128 -n "${HF_N:-256}" -b 64 \
        -r "${HF_R:-5}" | tee "$tmp/hf.txt"
else
    echo "note: no torch/transformers here: the Hugging Face column is left empty"
    : > "$tmp/hf.txt"
fi

value() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }
row() {   # label, key, unit, higher-is-better (1) or lower (0)
    local ours hf ratio
    ours=$(value "$2" "$tmp/ours.txt"); hf=$(value "$2" "$tmp/hf.txt")
    if [ -n "$hf" ] && [ -n "$ours" ]; then
        ratio=$(awk -v a="$ours" -v b="$hf" -v up="$4" 'BEGIN { printf "%.1fx", up ? a / b : b / a }')
    else
        ratio="-"; hf=${hf:--}
    fi
    echo "| $1 | $ours $3 | $hf $3 | $ratio |"
}
{
    echo "Generation, GPT-2 124M, bf16, greedy, random weights, $(awk '$1 == "device" { $1 = ""; print substr($0, 2) }' "$tmp/ours.txt"), $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "| measure | infer_gpt2 | HF generate() | speed-up |"
    echo "|---|---|---|---|"
    row "time to first token, 1000-token prompt, batch 1" ttft_ms ms 0
    row "decode, batch 1, 256 steps after 128 tokens" decode_b1_tok_s tok/s 1
    row "decode, batch 1, kernel by kernel (no CUDA graph)" decode_b1_nograph_tok_s tok/s 1
    row "decode, batch 1, 24 steps after 1000 tokens" decode_b1_long_tok_s tok/s 1
    row "decode, batch 64, 256 steps after 128 tokens" decode_bB_tok_s tok/s 1
    echo "| memory bound at 4.3 TB/s, batch 1 (weights + cache read once a step) | $(value bound_b1_tok_s "$tmp/ours.txt") tok/s | | |"
    echo "| memory bound at 4.3 TB/s, batch 64 | $(value bound_bB_tok_s "$tmp/ours.txt") tok/s | | |"
} > "$out"
echo
cat "$out"
