#!/usr/bin/env bash
# Build the attention test and benchmark of one flash-kernel variant (compile-time switches of
# attention/flash.cu and flash_sm90.cu) beside the default build, for timing them in one GPU call:
#   scripts/flash_variant.sh NAME FLAG...      e.g. scripts/flash_variant.sh nopp -DFLASH_SM90_PINGPONG=0
# Copies build/cuda-flash (built first with `make BACKEND=cuda cuda-build` or its two targets) to
# build/flash-NAME, rebuilds only the flash objects with FLASH_FLAGS="FLAG...", and links
# build/flash-NAME/bench/attention and build/flash-NAME/tests/gpu/test_attention_gpu (and
# build/flash-NAME/train_gpt2 with TRAIN=1 in the environment).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/flash_variant.sh NAME FLAG..." >&2; exit 2; }
name=$1; shift
base=build/cuda-flash dst=build/flash-$name
[ -d "$base/attention" ] || { echo "flash_variant.sh: build $base first (make BACKEND=cuda cuda-build)" >&2; exit 1; }
rm -rf "$dst"
cp -a "$base" "$dst"
rm -f "$dst"/attention/flash*.o "$dst"/prefixed/attention/flash*.o "$dst"/bench/attention \
      "$dst"/tests/gpu/test_attention_gpu "$dst"/train_gpt2
targets=("$dst/bench/attention" "$dst/tests/gpu/test_attention_gpu")
[ "${TRAIN:-0}" = 1 ] && targets+=("$dst/train_gpt2")
make -j2 --no-print-directory BACKEND=cuda ATTENTION=flash BUILD="$dst" FLASH_FLAGS="$*" \
    "${targets[@]}" > "$dst.log" 2>&1 ||
    { tail -n 20 "$dst.log" >&2; exit 1; }
echo "flash_variant.sh: $dst ($*)"
