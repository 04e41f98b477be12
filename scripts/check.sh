#!/usr/bin/env bash
# The whole check CI runs (`make check`): the CPU test suite with each attention backend, the
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer, the tokenizer against tiktoken
# on all of Unicode 16, the CUDA sources compiled for both backends (no GPU needed; skipped
# without nvcc, but failed under CI=true, whose image has it), and a short fuzzing run (skipped
# without clang). Ends with one summary line, "N passed, N failed, N skipped", adding up every stage.
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
passed=0; failed=0; skipped=0
log=$(mktemp)

# add the counts of the last summary line printed by a stage to the totals
count() {   # count <stage name> <exit code>
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        local p f s
        p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
        s=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p')
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
        [ "$2" -ne 0 ] && [ "$f" -eq 0 ] && failed=$((failed + 1))
    elif [ "$2" -eq 0 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
    echo "--- $1: exit $2"
}

stage() {   # stage <name> <command...>
    local name=$1; shift
    echo "=== $name: $*"
    "$@" 2>&1 | tee "$log"
    count "$name" "${PIPESTATUS[0]}"
}

stage "tests, flash"            make -j"$JOBS" test ATTENTION=flash
stage "tests, naive"            make -j"$JOBS" test ATTENTION=naive
stage "tests under ASan+UBSan"  make -j"$JOBS" test SANITIZE=1
stage "tokenizer vs tiktoken"   make -j"$JOBS" BACKEND=cpu test-tiktoken
if command -v nvcc >/dev/null 2>&1; then
    stage "CUDA build, flash"   make -j"$JOBS" BACKEND=cuda ATTENTION=flash cuda-build
    stage "CUDA build, naive"   make -j"$JOBS" BACKEND=cuda ATTENTION=naive cuda-build
    # the A100 target: flash.cu's mma.sync kernels for sm_80 beside flash_sm90.cu's sm_90a code
    stage "CUDA build, flash, sm_80" make -j"$JOBS" BACKEND=cuda ATTENTION=flash CUDA_ARCH=sm_80 \
                                BUILD=build/cuda-flash-sm80 cuda-build
elif [ "${CI:-}" = true ]; then
    echo "=== CUDA build: FAILED, nvcc is not on the PATH (CI=true, whose image has the CUDA toolkit)"
    failed=$((failed + 3))
else
    echo "=== CUDA build: skipped, nvcc is not on the PATH"
    skipped=$((skipped + 3))
fi
stage "comparison, tiny (CPU)"  bash tests/run_tests.sh tests/test_compare.sh
stage "receipt script (no GPU)" bash tests/run_tests.sh tests/test_receipt.sh
stage "step scripts (no GPU)"   bash tests/run_tests.sh tests/test_step_scripts.sh
stage "racecheck verdict (no GPU)" bash tests/run_tests.sh tests/test_racecheck_verdict.sh
stage "GPU clock script (no GPU)" bash tests/run_tests.sh tests/test_gpu_clock.sh
stage "flash trace script (no GPU)" bash tests/run_tests.sh tests/test_flash_trace.sh
stage "decode A/B script (CPU)" bash tests/run_tests.sh tests/test_decode_ab.sh
if [ ! -x fuzz/run.sh ]; then
    echo "=== fuzzing: skipped, fuzz/run.sh is missing or not executable"
    skipped=$((skipped + 1))
elif ! command -v clang >/dev/null 2>&1; then
    echo "=== fuzzing: skipped, clang is not on the PATH (scripts/setup.sh installs it)"
    skipped=$((skipped + 1))
else
    stage "fuzzing (short)"     fuzz/run.sh "${FUZZ_SECONDS:-10}"
fi
rm -f "$log"
echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
