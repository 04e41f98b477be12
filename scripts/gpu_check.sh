#!/usr/bin/env bash
# Everything that needs the GPU, in one script: build, GPU tests, parity with Hugging Face,
# memcheck, training runs and benchmarks, with the PyTorch baselines in the same run.
#   scripts/gpu_check.sh [STAGE ...]     (default: all stages, in order)
# Stages: env build test curves sanitize interrupt parity train long bench-attn bench-layers bench-infer
# Logs go to $OUT (or out/gpu_check); a short table of results is printed last. Exits non-zero
# when anything failed; after a failed build the stages that run its programs are skipped.
# The tokenizer links the project's own PCRE2 (deps/pcre2, built by scripts/setup.sh); where
# setup cannot run (no network), carry deps/pcre2 from a machine where it did.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
JOBS=$(nproc)
SUMMARY="$OUT/summary.md"
: > "$SUMMARY"
MAKEVARS=()
BENCH=${BENCH:-.carry/bench}      # ../shared/bench copied into the checkout
TRAIN_DATA="-i data/tinyshakespeare/tiny_shakespeare_train.bin -j data/tinyshakespeare/tiny_shakespeare_val.bin"
failures=0
note() { echo "$*" | tee -a "$SUMMARY"; }
run_logged() {   # run_logged NAME CMD...: output to $OUT/NAME.log and the screen; records pass/fail
    local name=$1; shift
    echo "### $name: $*"
    "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    note "| $name | $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") |"
    [ "$rc" -eq 0 ] || failures=$((failures + 1))
    return "$rc"
}

stage_env() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    nvcc --version | tail -n 2
    ls /usr/local/cuda/lib64 | grep -E '^lib(cublas|cublasLt|nccl|cudnn)\.so' | tr '\n' ' '; echo
    ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h 2>/dev/null
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
    which compute-sanitizer ncu 2>&1
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
}

# Builds both CUDA variants and a portable CPU build (the fp32 reference of the parity
# checks). make is incremental: binaries built elsewhere and carried here are kept as long as
# make finds them up to date with the sources, and rebuilt otherwise.
stage_build() {
    local cpu=build/cpu-portable rc=0
    for attn in flash naive; do
        run_logged "build-$attn" make -j"$JOBS" BACKEND=cuda ATTENTION=$attn OPT=-O3 "${MAKEVARS[@]}" \
            cuda-build build/cuda-$attn/import_hf || rc=1
    done
    run_logged "build-cpu" make -j"$JOBS" BACKEND=cpu BUILD=$cpu OPT=-O3 "${MAKEVARS[@]}" \
        $cpu/infer_gpt2 $cpu/parity_dump || rc=1
    return "$rc"
}

stage_test() {
    local b=build/cuda-flash/tests/gpu
    run_logged "test_layers_gpu" $b/test_layers_gpu
    run_logged "test_attention_gpu" $b/test_attention_gpu
    run_logged "test_infer_gpu" $b/test_infer_gpu
    # the training pass as a CUDA graph against kernel by kernel, with either attention
    run_logged "test_train_gpu" $b/test_train_gpu
    run_logged "test_train_gpu-naive" build/cuda-naive/tests/gpu/test_train_gpu
    run_logged "hf-infer-parity" env BUILD=build/cuda-flash CPU_BUILD=build/cpu-portable bash tests/gpu/hf_parity.sh
}

stage_sanitize() {
    for attn in flash naive; do
        run_logged "memcheck-train-$attn" compute-sanitizer --tool memcheck --error-exitcode 1 \
            build/cuda-$attn/train_gpt2 $TRAIN_DATA -e d2 -b 2 -t 96 -x 2 -v 1 -m 1 -s 2 -g 4
    done
    run_logged "memcheck-attention" compute-sanitizer --tool memcheck --error-exitcode 1 \
        build/cuda-flash/tests/gpu/test_attention_gpu --sanitize
    run_logged "racecheck-attention" compute-sanitizer --tool racecheck --error-exitcode 1 \
        build/cuda-flash/tests/gpu/test_attention_gpu --sanitize
    run_logged "synccheck-attention" compute-sanitizer --tool synccheck --error-exitcode 1 \
        build/cuda-flash/tests/gpu/test_attention_gpu --sanitize
    # generation from a checkpoint of its own (2 steps of d2), so the stage runs alone too
    rm -rf "$OUT/sanitize-model"
    build/cuda-flash/train_gpt2 $TRAIN_DATA -e d2 -b 2 -t 64 -x 2 -v 0 -s 0 -o "$OUT/sanitize-model" \
        >"$OUT/sanitize-model.log" 2>&1
    run_logged "memcheck-infer" compute-sanitizer --tool memcheck --error-exitcode 1 \
        build/cuda-flash/infer_gpt2 -c "$OUT/sanitize-model/model_00000002.bin" -p "ROMEO:" -n 8 --seed 1
}

# Ctrl-C on the GPU: SIGINT ends the step in flight, writes a checkpoint and exits 130; the run
# resumed from it (-y 1) ends with the same losses and the same final model file as an
# uninterrupted run, bit for bit: with naive attention (every reduction in a fixed order) and
# with flash on Hopper (its backward adds dQ in a fixed key-block order: the default there)
interrupt_run() {   # interrupt_run DIR: the cut run, signalled once its log reaches step 20
    $INTERRUPT_BIN "${INTERRUPT_FLAGS[@]}" -o "$1" >"$1.log" 2>&1 &
    local pid=$! i
    for i in $(seq 600); do grep -q '^step   20/' "$1.log" && break; sleep 0.05; done
    kill -INT "$pid"
    wait "$pid"
}
same_losses() {   # same_losses A B: two log.csv files, step, kind, loss and gradient norm equal
    [ -s "$1" ] && [ -s "$2" ] || { echo "missing: $1 or $2"; return 1; }
    [ "$(wc -l <"$1")" -gt 1 ] || { echo "$1 has no steps"; return 1; }
    cmp <(cut -d, -f1-4 "$1") <(cut -d, -f1-4 "$2")
}
interrupt_check() {   # interrupt_check NAME STEPS BINARY FLAG...: uninterrupted, cut, resumed
    local name=$1 steps=$2 d="$OUT/$1"
    INTERRUPT_BIN=$3
    shift 3
    rm -rf "$d"; mkdir -p "$d"
    INTERRUPT_FLAGS=($TRAIN_DATA -e d12 -b 8 -t 1024 -x "$steps" -v 0 -s 0 "$@")
    run_logged "$name-whole" $INTERRUPT_BIN "${INTERRUPT_FLAGS[@]}" -o "$d/whole"
    interrupt_run "$d/cut"
    local rc=$?
    note "| $name: SIGINT at step $(grep -c '^step ' "$d/cut.log") of $steps | exit $rc (expected 130), checkpoints: $(cd "$d/cut" && ls model_*.bin 2>/dev/null | tr '\n' ' ') |"
    [ "$rc" -eq 130 ] || failures=$((failures + 1))
    local last
    last=$(printf 'model_%08d.bin' "$steps")
    run_logged "$name-resume" $INTERRUPT_BIN "${INTERRUPT_FLAGS[@]}" -o "$d/cut" -y 1
    run_logged "$name-same-model" cmp "$d/whole/$last" "$d/cut/$last"
    run_logged "$name-same-losses" same_losses "$d/whole/log.csv" "$d/cut/log.csv"
}
stage_interrupt() {
    interrupt_check interrupt 200 build/cuda-naive/train_gpt2
    # --deterministic: the run stops with a clear message on a GPU whose flash backward cannot
    # (the default would go on without it there, and the comparison would fail at the bits)
    interrupt_check interrupt-flash 60 build/cuda-flash/train_gpt2 --deterministic
}

# GPT2LMHeadModel (12 layers, random weights) against our CUDA builds (bf16) and CPU (fp32)
stage_parity() {
    for attn in flash naive; do
        run_logged "hf-parity-$attn" python3 scripts/hf_parity.py build/cuda-$attn/parity_dump
    done
    run_logged "hf-parity-cpu" python3 scripts/hf_parity.py build/cpu-portable/parity_dump \
        --tol-logits 1e-4 --tol-grads 1e-3 --tol-loss 1e-5 --fp32
}

# same seed, same data order: the loss curves of the two attention backends over 100 steps
stage_curves() {
    for attn in flash naive; do
        rm -rf "$OUT/curve-$attn"
        run_logged "curve-$attn" build/cuda-$attn/train_gpt2 $TRAIN_DATA -e d12 -b 8 -t 1024 -x 100 \
            -l 6e-4 -u 10 -q 0.1 -v 25 -m 4 -s 100 -g 64 -o "$OUT/curve-$attn"
    done
    python3 - "$OUT" <<'PY' | tee -a "$SUMMARY"
import csv, sys
out = sys.argv[1]
def losses(a):
    rows = list(csv.DictReader(open(f"{out}/curve-{a}/log.csv")))
    return {(r["kind"], r["step"]): float(r["loss"]) for r in rows}
f, n = losses("flash"), losses("naive")
d = max(abs(f[k] - n[k]) for k in f if k in n and k[0] == "train")
print(f"| loss curves flash vs naive, 100 steps | largest |difference| {d:.4f} |")
PY
    [ "${PIPESTATUS[0]}" -eq 0 ] || { note "| loss curves | FAILED (no log.csv to compare) |"; failures=$((failures + 1)); }
}

stage_train() {
    for B in 16 64; do
        for attn in naive flash; do
            run_logged "speed-$attn-B$B" build/cuda-$attn/train_gpt2 $TRAIN_DATA -e d12 -b $B -t 1024 \
                -x 12 -v 0 -s 0
            note "| train $attn B=$B | $(grep -o 'summary:.*' "$OUT/speed-$attn-B$B.log") |"
        done
    done
    run_logged "torch-gpt2" python3 "$BENCH/torch_gpt2.py" 16:1024:0:FLASH_ATTENTION \
        16:1024:1:FLASH_ATTENTION 64:1024:1:CUDNN_ATTENTION
    grep -E 'ms/step' "$OUT/torch-gpt2.log" | sed 's/^/| torch | /; s/$/ |/' >> "$SUMMARY"
}

# a from-scratch model with max_seq_len 16384: flash trains at T=8192 and T=16384; naive is
# slower at 8192 and cannot allocate its B*NH*T*T probabilities at 16384
stage_long() {
    for T in 8192 16384; do
        for attn in flash naive; do
            run_logged "long-$attn-T$T" build/cuda-$attn/train_gpt2 $TRAIN_DATA -e d12 --max-seq-len 16384 \
                -b 2 -t $T -x 6 -v 0 -s 0
            note "| long context $attn T=$T B=2 | $(grep -oE 'summary:.*|error:.*' "$OUT/long-$attn-T$T.log" | head -n 1) |"
        done
    done
}

stage_bench_attn() {
    run_logged "bench-attention" build/cuda-flash/bench/attention --csv "$OUT/attention.csv"
    run_logged "torch-attention" python3 "$BENCH/torch_attention.py"
}

stage_bench_layers() {
    run_logged "bench-layers-B16" build/cuda-naive/bench/bench_layers_gpu 16
    run_logged "bench-layers-B64" build/cuda-naive/bench/bench_layers_gpu 64
}

stage_bench_infer() {
    run_logged "bench-infer" env BUILD=build/cuda-flash HF_N=64 HF_R=2 bash bench/infer.sh "$OUT/infer.md"
}

all_stages=(env build test curves sanitize interrupt parity train long bench-attn bench-layers bench-infer)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=("${all_stages[@]}")
for s in "${stages[@]}"; do
    if ! printf '%s\n' "${all_stages[@]}" | grep -qx -- "$s"; then
        echo "gpu_check.sh: unknown stage '$s' (stages: ${all_stages[*]})" >&2
        exit 2
    fi
done
build_failed=0
for s in "${stages[@]}"; do
    echo "===================== $s"
    if [ "$build_failed" -eq 1 ] && [ "$s" != env ]; then
        note "| $s | skipped: the build failed |"
        continue
    fi
    "stage_${s//-/_}"
    [ "$s" = build ] && [ "$failures" -gt 0 ] && build_failed=1
done
echo
echo "===================== summary"
cat "$SUMMARY"
if [ "$failures" -gt 0 ]; then
    echo "gpu_check.sh: $failures step(s) failed (logs in $OUT)"
    exit 1
fi
