#!/usr/bin/env bash
# scripts/step_account.sh: where the time of one training step goes, kernel group by kernel
# group, ours beside llm.c's (issue 19), in one command on a GPU machine from prebuilt binaries
# (no make, no network):
#   build/cuda-flash/train_gpt2, build/cuda-flash/bench/bench_layers_gpu  (make BACKEND=cuda cuda-build)
#   .carry/llmc/train_gpt2cu  llm.c with cuDNN attention (.carry/llmc/NOTE.md); absent: ours only
#   data/tinyshakespeare/tiny_shakespeare_train.bin
#
# usage: scripts/step_account.sh [OUTDIR] (default out/step_account)
#   environment: MODEL (d12), B (64), T (1024), STEPS (12: the timed run; steps 4.. are averaged),
#   NCU (ncu on the PATH, else /usr/local/cuda/bin/ncu), OURS, LLMC, DATA (the binaries and the
#   token file above), LLMC_CUDNN (a folder with libcudnn.so.9; default torch's nvidia.cudnn)
#
# For each program: a timed run of STEPS steps with nvidia-smi sampling the SM clock (the wall
# time of a step from the program's own step lines, the mean of steps 4..STEPS), then a run of 2
# steps under `ncu --csv --clock-control none` with each kernel's time, DRAM bytes and SM clock;
# scripts/step_account.py cuts the second step out of it (at the optimizer's kernels), groups
# its kernels by name and prints the table (markdown) with the GEMM and copy ceilings that
# bench_layers_gpu --ceilings measures in the same call. ncu's default cache control flushes the
# caches before each kernel, as in the issue's account. About 2-3 minutes for d12 at B=64.
set -euo pipefail
out=${1:-out/step_account}
MODEL=${MODEL:-d12} B=${B:-64} T=${T:-1024} STEPS=${STEPS:-12}
OURS=${OURS:-build/cuda-flash/train_gpt2}
LLMC=${LLMC:-.carry/llmc/train_gpt2cu}
DATA=${DATA:-data/tinyshakespeare/tiny_shakespeare_train.bin}
BENCH=${BENCH:-build/cuda-flash/bench/bench_layers_gpu}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$OURS" ] || { echo "step_account: $OURS not built (make BACKEND=cuda cuda-build)" >&2; exit 1; }
[ -f "$DATA" ] || { echo "step_account: $DATA missing (scripts/get_data.sh)" >&2; exit 1; }
[ -x "$NCU" ] || { echo "step_account: Nsight Compute (ncu) not found" >&2; exit 1; }
mkdir -p "$out"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second

have_llmc=0
if [ -x "$LLMC" ]; then
    have_llmc=1
    cudnn=${LLMC_CUDNN:-$(python3 -c "import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])" 2>/dev/null || true)/lib}
    export LD_LIBRARY_PATH=$cudnn${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
    echo "step_account: no llm.c binary at $LLMC: ours only"
fi

# the command line of each program for n steps (llm.c: -j the train file, its val file being
# smaller than a B=64 batch; -v and -s past the end, -m 1: one validation batch at the ends)
llmc_cmd() { echo "$LLMC -e $MODEL -i $DATA -j $DATA -b $B -t $T -x $1 -v 100000 -s 0 -m 1"; }
ours_cmd() { echo "$OURS -e $MODEL -i $DATA -b $B -t $T -x $1 -v 0 -s 0"; }

# mean ms of steps 4.. from "step N/M | ... | X ms | ..." lines (both programs print them)
step_ms() { awk '/^step +[0-9]+\/[0-9]+ \|/ { split($2, s, "/"); if (s[1] + 0 >= 4 && match($0, /\| *[0-9.]+ ms/)) { v = substr($0, RSTART + 1, RLENGTH - 3); sum += v; n++ } }
                 END { if (n) printf "%.2f", sum / n; else print "" }' "$1"; }
# mean SM clock (MHz) over the samples while the GPU drew more than 150 W (the steps, not start-up)
clock_mhz() { awk -F', *' '$2 + 0 > 150 { s += $1; n++ } END { if (n) printf "%.0f", s / n }' "$1"; }

timed_run() {   # name, command
    nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$out/$1_clock.csv" &
    local smi=$!
    $2 > "$out/$1_run.txt" 2>&1 || { kill $smi; echo "step_account: $1 failed: $out/$1_run.txt" >&2; tail -5 "$out/$1_run.txt" >&2; exit 1; }
    kill $smi; wait $smi 2>/dev/null || true
}
profiled_run() {   # name, command
    "$NCU" --csv --print-units base --clock-control none --metrics $metrics $2 > "$out/$1_ncu.csv" 2> "$out/$1_ncu.err" ||
        { echo "step_account: ncu on $1 failed: $out/$1_ncu.err" >&2; tail -5 "$out/$1_ncu.err" >&2; exit 1; }
}

ceilings=()
if [ -x "$BENCH" ]; then
    "$BENCH" --ceilings > "$out/ceilings.txt" 2>&1
    gbs=$(sed -n 's/.*device copy \([0-9]*\) GB\/s.*/\1/p' "$out/ceilings.txt")
    tf=$(sed -n 's/.* \([0-9]*\) TFLOP\/s.*/\1/p' "$out/ceilings.txt")
    [ -n "$gbs" ] && [ -n "$tf" ] && ceilings=(--copy-gbs "$gbs" --gemm-tflops "$tf")
fi

timed_run ours "$(ours_cmd "$STEPS")"
profiled_run ours "$(ours_cmd 2)"
args=(--ours "$out/ours_ncu.csv" --wall-ours "$(step_ms "$out/ours_run.txt")")
c=$(clock_mhz "$out/ours_clock.csv"); [ -n "$c" ] && args+=(--clock-ours "$c")
if [ $have_llmc = 1 ]; then
    timed_run llmc "$(llmc_cmd "$STEPS")"
    profiled_run llmc "$(llmc_cmd 2)"
    args+=(--llmc "$out/llmc_ncu.csv" --wall-llmc "$(step_ms "$out/llmc_run.txt")")
    c=$(clock_mhz "$out/llmc_clock.csv"); [ -n "$c" ] && args+=(--clock-llmc "$c")
fi
# L:C:NH:Vp of the model, from our run table ("| model | L=12 NH=12 C=768 maxT=1024 V=50257 Vp=50304 |")
shape=$(sed -n 's/.*L=\([0-9]*\) NH=\([0-9]*\) C=\([0-9]*\) .*Vp=\([0-9]*\).*/\1:\3:\2:\4/p' "$out/ours_run.txt" | head -1)
python3 "$here/step_account.py" "${args[@]}" "${ceilings[@]}" --model "$shape" --B "$B" --T "$T" \
    --details "$out/kernels.csv" | tee "$out/account.md"
echo "(commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); files in $out)" | tee -a "$out/account.md"
