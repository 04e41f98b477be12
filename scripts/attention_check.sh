#!/usr/bin/env bash
# The flash-attention kernels on a GPU in one call: correctness, sanitizers, and the speed of
# every backward variant beside cuDNN and FlashAttention-2 (PyTorch SDPA) at both head sizes.
#   scripts/attention_check.sh [STAGE ...]        (default: test sanitize bench train; also: profile)
# Runs the binaries of BUILD (default build/cuda-flash, made by `make BACKEND=cuda cuda-build`
# here or on the GPU machine); BENCH points at ../shared/bench's scripts (default .carry/bench).
# Variants, chosen by the environment (attention/flash_sm90.h):
#   hopper   the Hopper forward and backward (the default on sm_90)
#   det      the same with --deterministic (dQ summed in a fixed key-block order; train_gpt2's
#            default, where hopper is its --nondeterministic)
#   mma      FLASH_SM90_BWD=0: the Hopper forward with the mma.sync backward (the old one)
# and VARIANTS="NAME ..." adds build/flash-NAME (scripts/flash_variant.sh: compile-time
# switches) to the test and bench stages, each with a column beside hopper.
# The profile stage runs Nsight Compute on the backward at T=16,384 (both head sizes) and writes
# its per-instruction stall samples ($OUT/source-HS.csv) and its sections ($OUT/ncu-HS.txt).
# Logs and CSVs go to $OUT (default out/attention_check); the table printed last is
# $OUT/summary.md: per head size and T, forward and forward+backward ms of each, the backward
# alone (fwd+bwd - fwd) with its TFLOP/s (2.5x the causal forward's FLOPs), and the ratios to cuDNN.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/attention_check}
BUILD=${BUILD:-build/cuda-flash}
BENCH=${BENCH:-.carry/bench}
mkdir -p "$OUT"
failures=0
run() {   # run NAME CMD...: output to $OUT/NAME.log and the screen; counts failures
    local name=$1; shift
    echo "### $name: $*"
    timeout "${RUN_TIMEOUT:-300}" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 3 "$OUT/$name.log"
    echo "### $name: exit $rc"
    echo "| $name | $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") |" >> "$OUT/checks.md"
    [ "$rc" -eq 0 ] || failures=$((failures + 1))
}

stage_test() {
    local t=$BUILD/tests/gpu/test_attention_gpu
    run test-hopper "$t"   # every case with both backward modes
    run test-mma env FLASH_SM90_BWD=0 "$t" --max-t 1025
    for v in ${VARIANTS:-}; do
        run "test-$v" build/flash-$v/tests/gpu/test_attention_gpu --max-t 4097
    done
}

stage_profile() {
    local hs nh
    for cfg in 64:12 128:6; do
        hs=${cfg%%:*}; nh=${cfg##*:}
        # the set, and the L2's reductions (the dQ sums' TMA reduce-adds) and atomics
        run "profile-$hs" ncu --set full --import-source no --clock-control none \
            --metrics lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,lts__t_bytes.sum \
            -k regex:flash_backward_sm90 -c 1 -f -o "$OUT/prof-$hs" \
            $BUILD/bench/attention --backend flash --hs $hs --nh $nh --tmin 16384 --tmax 16384
        ncu -i "$OUT/prof-$hs.ncu-rep" --page source --csv --print-source sass > "$OUT/source-$hs.csv" 2>&1
        ncu -i "$OUT/prof-$hs.ncu-rep" --page details > "$OUT/ncu-$hs.txt" 2>&1
    done
}

stage_sanitize() {
    local t=$BUILD/tests/gpu/test_attention_gpu
    for tool in memcheck synccheck; do
        run "$tool" compute-sanitizer --tool $tool --error-exitcode 1 "$t" --sanitize
    done
    # every kernel, judged by scripts/racecheck_verdict.sh: hazards in cuBLAS's are not ours
    run racecheck-all compute-sanitizer --tool racecheck --print-limit 100000 "$t" --sanitize
    run racecheck bash scripts/racecheck_verdict.sh "$OUT/racecheck-all.log"
}

stage_bench() {
    local hs nh
    for cfg in 64:12 128:6; do
        hs=${cfg%%:*}; nh=${cfg##*:}
        run "bench-hopper-$hs" $BUILD/bench/attention --backend flash --hs $hs --nh $nh \
            --csv "$OUT/hopper-$hs.csv"
        run "bench-det-$hs" $BUILD/bench/attention --backend flash --deterministic \
            --hs $hs --nh $nh --csv "$OUT/det-$hs.csv"
        run "bench-mma-$hs" env FLASH_SM90_BWD=0 $BUILD/bench/attention --backend flash \
            --hs $hs --nh $nh --csv "$OUT/mma-$hs.csv"
        for v in ${VARIANTS:-}; do
            run "bench-$v-$hs" build/flash-$v/bench/attention --backend flash --hs $hs --nh $nh \
                --csv "$OUT/v-$v-$hs.csv"
        done
        run "torch-$hs" env H=$nh D=$hs BACKENDS=cudnn,flash python3 "$BENCH/torch_attention.py"
    done
    python3 - "$OUT" ${VARIANTS:-} <<'PY' > "$OUT/bench.md"
import csv, sys, os
out = sys.argv[1]
def ours(name):
    rows = {}
    p = f"{out}/{name}.csv"
    if os.path.exists(p):
        for r in csv.DictReader(open(p)):
            if r["status"] == "ok":
                rows[int(r["T"])] = (float(r["fwd_ms"]), float(r["fwdbwd_ms"]), int(r["B"]), int(r["NH"]))
    return rows
def torch(hs):
    rows = {}
    p = f"{out}/torch-{hs}.log"
    for line in open(p) if os.path.exists(p) else []:
        f = line.split()
        if len(f) >= 5 and f[0].isdigit() and f[2] in ("cudnn", "flash") and f[3] != "FAILED":
            rows[(int(f[0]), f[2])] = (float(f[3]), float(f[4]))
    return rows
def bwd_tflops(flop, fwd_ms, fwdbwd_ms):   # the backward alone: fwd+bwd - fwd
    return flop / ((fwdbwd_ms - fwd_ms) * 1e-3) / 1e12
for hs in (64, 128):
    v = {k: ours(f"{k}-{hs}") for k in ("hopper", "det", "mma")}
    t = torch(hs)
    print(f"\nHS={hs}: ms, forward / forward+backward; bwd = fwd+bwd - fwd (TFLOP/s: 2.5x the causal forward's FLOPs)\n")
    print("| T | ours hopper | bwd (TFLOP/s) | det | det bwd | mma.sync bwd (old) | bwd | cuDNN | cuDNN bwd | FA2 | hopper vs cuDNN fwd+bwd | det vs cuDNN |")
    print("|--:|--|--|--|--|--|--|--|--|--|--:|--:|")
    for T in sorted(v["hopper"]):
        f, fb, B, NH = v["hopper"][T]
        flop = 2.0 * B * NH * T * T * hs * 2.5
        def cell(k):
            if T not in v[k]: return "", ""
            a, b = v[k][T][0], v[k][T][1]
            return f"{a:.3f} / {b:.3f}", f"{b - a:.3f} ({bwd_tflops(flop, a, b):.0f})"
        h, hb = cell("hopper"); d, db = cell("det"); m, mb = cell("mma")
        c = t.get((T, "cudnn")); fa = t.get((T, "flash"))
        cs = f"{c[0]:.3f} / {c[1]:.3f}" if c else ""
        cb = f"{c[1] - c[0]:.3f} ({bwd_tflops(flop, c[0], c[1]):.0f})" if c else ""
        fas = f"{fa[0]:.3f} / {fa[1]:.3f}" if fa else ""
        r1 = f"{c[1] / fb:.2f}x" if c else ""
        r2 = f"{c[1] / v['det'][T][1]:.2f}x" if c and T in v["det"] else ""
        print(f"| {T:,} | {h} | {hb} | {d} | {db} | {m} | {mb} | {cs} | {cb} | {fas} | {r1} | {r2} |")
    variants = sys.argv[2:]
    if variants:
        w = {n: ours(f"v-{n}-{hs}") for n in variants}
        print(f"\nHS={hs}, variants (scripts/flash_variant.sh): forward / forward+backward ms, bwd TFLOP/s, vs hopper and vs cuDNN fwd+bwd\n")
        print("| T | hopper | " + " | ".join(variants) + " |")
        print("|--:|--|" + "--|" * len(variants))
        for T in sorted(v["hopper"]):
            f, fb, B, NH = v["hopper"][T]
            flop = 2.0 * B * NH * T * T * hs * 2.5
            c = t.get((T, "cudnn"))
            cells = [f"{f:.3f} / {fb:.3f} ({bwd_tflops(flop, f, fb):.0f})"]
            for n in variants:
                if T not in w[n]:
                    cells.append("")
                    continue
                a, b = w[n][T][0], w[n][T][1]
                cells.append(f"{a:.3f} / {b:.3f} ({bwd_tflops(flop, a, b):.0f}) {fb / b:.3f}x"
                             + (f", {c[1] / b:.2f}x cuDNN" if c else ""))
            print(f"| {T:,} | " + " | ".join(cells) + " |")
PY
}

# GPT-2 124M training steps with each backward variant (token files from `make data`)
stage_train() {
    local data="-i data/tinyshakespeare/tiny_shakespeare_train.bin -j data/tinyshakespeare/tiny_shakespeare_val.bin"
    for shape in 64:1024:12 4:4096:10 1:16384:8; do
        IFS=: read -r b t x <<< "$shape"
        for v in hopper det mma; do
            local envs=() flags=()
            [ $v = hopper ] && flags=(--nondeterministic)
            [ $v = det ] && flags=(--deterministic)
            [ $v = mma ] && envs=(FLASH_SM90_BWD=0)
            run "train-$v-B$b-T$t" env "${envs[@]}" $BUILD/train_gpt2 $data -e d12 \
                -b $b -t $t -x $x -v 0 -s 0 "${flags[@]}"
            echo "| train $v B=$b T=$t | $(grep -oE 'summary:.*|error:.*' "$OUT/train-$v-B$b-T$t.log" | head -n 1) |" \
                >> "$OUT/train.md"
        done
    done
}

all_stages=(test sanitize bench train profile)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(test sanitize bench train)
: > "$OUT/checks.md"
rm -f "$OUT/bench.md" "$OUT/train.md"
for s in "${stages[@]}"; do
    case " ${all_stages[*]} " in *" $s "*) ;; *) echo "attention_check.sh: unknown stage '$s'" >&2; exit 2 ;; esac
    echo "===================== $s"
    "stage_$s"
done
echo
echo "===================== summary"
cat "$OUT/checks.md"
[ -f "$OUT/bench.md" ] && cat "$OUT/bench.md"
[ -f "$OUT/train.md" ] && cat "$OUT/train.md"
grep -h "passed, .* failed" "$OUT"/test-*.log 2>/dev/null | sed 's/^/tests: /'
[ "$failures" -eq 0 ] || { echo "attention_check.sh: $failures step(s) failed (logs in $OUT)"; exit 1; }
