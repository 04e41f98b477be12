#!/usr/bin/env bash
# scripts/compare.sh (`make compare`): the two attention backends end to end, in one command.
# Builds train_gpt2 with ATTENTION=naive and with ATTENTION=flash, trains the same model on
# TinyShakespeare with each (same seed, same data order), runs the attention microbenchmark over
# T, and writes into one folder (default compare/<UTC date-time>/):
#   train_naive.csv, train_flash.csv  the training logs: step,kind,loss,grad_norm,lr,ms,tokens_per_s
#   train_naive.log, train_flash.log  what the two training runs printed
#   attention.csv, attention.log      the attention microbenchmark's CSV and output
#   sweep.csv, sweep_<attn>_T<T>.log  short training runs of both backends across T with B*T
#                                     held constant: T,B,backend,status,ms_per_step,tokens_per_s,
#                                     peak_bytes (status ok, or oom where the run could not allocate)
#   torch_attention.csv, .log         PyTorch SDPA's cuDNN and FlashAttention-2 over T, when
#                                     python3 with torch and a GPU are there (the same call)
#   table.md                          ms/step, tokens/s, peak memory, final losses, speedup, the
#                                     sweep, machine and commit (also printed at the end)
#   loss.png, step_ms.png             training loss and time per step against step
#   sweep_tokens.png, sweep_memory.png   training tokens/s and peak memory against T, both backends
#   attention_time.png, attention_memory.png   attention time and memory against T, log-log
#   receipt.csv, receipt.md, receipt_step.csv, receipt_bars.csv, receipt.png, ncu/
#                                     on the GPU: scripts/receipt.sh, FLOPs, DRAM bytes (counted,
#                                     and measured by Nsight Compute where ncu is) and time of each
#                                     attention pass, and attention's share of a training step's
#                                     DRAM traffic; receipt.md is added to table.md
# Where a GPU is visible it runs on it (BACKEND=cuda, GPT-2 small); elsewhere on the CPU with a
# small model, and says so.
#
# usage: scripts/compare.sh [--steps N] [-b B] [-t T] [--model dN|CHECKPOINT] [--out DIR]
#                           [--backend cpu|cuda] [--tiny] [--sweep T,T,...|none]
#                           [--sweep-tokens N] [--sweep-steps N] [--torch-bench FILE|none]
#                           [--prebuilt]
#   defaults: on the GPU d12 (GPT-2 small), B=16, T=1024, 100 steps, a sweep over
#   T = 1024,4096,16384,32768 at B*T = 16384 tokens (B at least 1), 20 steps each, and
#   ../shared/bench/torch_attention.py (or .carry/bench/) beside the microbenchmark; on the CPU
#   d4, B=4, T=128, 20 steps, sweep T = 64,128,256 at 256 tokens, 4 steps; --tiny (the CI mode):
#   d2, B=2, T=64, 6 steps, sweep T = 32,64 at 64 tokens, 3 steps, the shortest microbenchmark;
#   --prebuilt: use the binaries and data already in build/ and data/ (built on another machine
#   and copied here), without running make
set -euo pipefail
caller_dir=$PWD   # a relative --out is taken from where the script was called
cd "$(dirname "$0")/.."

usage() { sed -n '/^# usage:/,/^#   20 steps/p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: compare.sh: $*" >&2; exit 1; }
# a figure of a run's summary line ("summary: N steps, final train loss X, final val loss X,
# X ms/step, X tok/s (mean over steps after the first), ..., peak <backend> memory X UNIT"),
# or stop where the log has none: ms, tok_s, memory, train, val
figure() {   # figure LOG WHAT
    local line v
    line=$(grep '^summary:' "$1" | tail -n 1)
    [ -n "$line" ] || die "no summary line in $1"
    case "$2" in
        ms)     v=$(echo "$line" | sed -nE 's/.* ([0-9.]+) ms\/step.*/\1/p') ;;
        tok_s)  v=$(echo "$line" | sed -nE 's/.* ([0-9.]+) tok\/s.*/\1/p') ;;
        memory) v=$(echo "$line" | sed -nE 's/.*peak [a-z]+ memory ([0-9.]+ [KMGT]?i?B).*/\1/p') ;;
        train)  v=$(echo "$line" | sed -nE 's/.*final train loss ([0-9.naif-]+),.*/\1/p') ;;
        val)    v=$(echo "$line" | sed -nE 's/.*final val loss ([0-9.naif-]+),.*/\1/p') ;;
    esac
    [ -n "$v" ] || die "no '$2' figure in the summary line of $1"
    echo "$v"
}
to_bytes() {   # "131.8 MiB" -> bytes
    echo "$1" | awk '{ m = 1; u = $2
        if (u == "KiB") m = 1024; else if (u == "MiB") m = 1048576
        else if (u == "GiB") m = 1073741824; else if (u == "TiB") m = 1099511627776
        printf "%.0f\n", $1 * m }'
}

steps="" B="" T="" model="" out="" backend="" tiny=0 prebuilt=0 sweep="" sweep_tokens="" sweep_steps="" torch_bench=""
while [ $# -gt 0 ]; do
    case "$1" in
        --steps|-x)         steps=${2:?$1 needs a value}; shift 2 ;;
        -b|--batch)         B=${2:?$1 needs a value}; shift 2 ;;
        -t|--seq-len)       T=${2:?$1 needs a value}; shift 2 ;;
        --model|-e)         model=${2:?$1 needs a value}; shift 2 ;;
        --out|-o)           out=${2:?$1 needs a value}; shift 2 ;;
        --backend)          backend=${2:?$1 needs a value}; shift 2 ;;
        --tiny)             tiny=1; shift ;;
        --prebuilt)         prebuilt=1; shift ;;
        --sweep)            sweep=${2:?$1 needs a value}; shift 2 ;;
        --sweep-tokens)     sweep_tokens=${2:?$1 needs a value}; shift 2 ;;
        --sweep-steps)      sweep_steps=${2:?$1 needs a value}; shift 2 ;;
        --torch-bench)      torch_bench=${2:?$1 needs a value}; shift 2 ;;
        -h|--help)          usage; exit 0 ;;
        *)                  usage >&2; die "unknown option '$1'" ;;
    esac
done
for v in steps B T sweep_tokens sweep_steps; do
    val=${!v}
    [ -z "$val" ] || [[ "$val" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '$val'"
done
[ -z "$steps" ] || [ "$steps" -ge 2 ] || die "steps must be at least 2 (the first step is a warm-up, left out of the means)"
[ -z "$sweep_steps" ] || [ "$sweep_steps" -ge 2 ] || die "sweep-steps must be at least 2 (the first step is a warm-up)"
[ -z "$sweep" ] || [ "$sweep" = none ] || [[ "$sweep" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    die "sweep must be a comma-separated list of sequence lengths (e.g. 1024,4096) or none, not '$sweep'"
[ -z "$torch_bench" ] || [ "$torch_bench" = none ] || [ -f "$torch_bench" ] ||
    die "torch-bench must be a file (PyTorch's torch_attention.py) or none, not '$torch_bench'"
[ -z "$model" ] || [[ "$model" =~ ^d[1-9][0-9]*$ ]] || [ -f "$model" ] ||
    die "model must be dN (a new model of N layers) or a checkpoint file, not '$model'"

# ---- backend: cuda where a GPU is visible, else cpu -------------------------------------------
if [ -z "$backend" ]; then
    if nvidia-smi -L 2>/dev/null | grep -q GPU; then
        backend=cuda
        echo "compare: a GPU is visible ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)): comparing on the GPU (BACKEND=cuda)"
    else
        backend=cpu
        echo "compare: no GPU visible: comparing on the CPU (BACKEND=cpu) with a small model; the GPU figures come from a machine with a GPU"
    fi
else
    case "$backend" in cpu|cuda) echo "compare: BACKEND=$backend, as asked" ;;
                       *) die "backend must be cpu or cuda, not '$backend'" ;; esac
fi

# ---- configuration: the GPU runs GPT-2 small; the CPU a small model; --tiny the least -----------
if [ "$tiny" -eq 1 ]; then
    d_model=d2; d_B=2; d_T=64; d_steps=6; val_every=3; val_batches=1
    d_sweep=32,64; d_sweep_tokens=64; d_sweep_steps=3
elif [ "$backend" = cuda ]; then
    d_model=d12; d_B=16; d_T=1024; d_steps=100; val_every=25; val_batches=4
    d_sweep=1024,4096,16384,32768; d_sweep_tokens=16384; d_sweep_steps=20
else
    d_model=d4; d_B=4; d_T=128; d_steps=20; val_every=10; val_batches=2
    d_sweep=64,128,256; d_sweep_tokens=256; d_sweep_steps=4
fi
model=${model:-$d_model}; B=${B:-$d_B}; T=${T:-$d_T}; steps=${steps:-$d_steps}
sweep=${sweep:-$d_sweep}; sweep_tokens=${sweep_tokens:-$d_sweep_tokens}; sweep_steps=${sweep_steps:-$d_sweep_steps}
[ "$sweep" = none ] || [[ "$model" =~ ^d[1-9][0-9]*$ ]] ||
    die "the sweep over T trains new models (--model dN); with a checkpoint, pass --sweep none"
# PyTorch's attention baselines: where python3 has torch and sees a GPU, on the CUDA backend
if [ -z "$torch_bench" ]; then
    torch_bench=none
    for f in .carry/bench/torch_attention.py ../shared/bench/torch_attention.py; do
        [ -f "$f" ] && { torch_bench=$f; break; }
    done
fi
if [ "$torch_bench" != none ] && { [ "$backend" != cuda ] ||
        ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; }; then
    echo "compare: no PyTorch with a GPU here (or the CPU backend): no PyTorch attention baselines"
    torch_bench=none
fi
[ "$val_every" -le "$steps" ] || val_every=$steps
warmup=$(( steps / 10 ))
seed=1337
train_flags=(-e "$model" -b "$B" -t "$T" -x "$steps" -l 6e-4 -u "$warmup" -q 0.1
             -v "$val_every" -m "$val_batches" -s 0 --seed "$seed")

if [ -z "$out" ]; then
    out=compare/$(date -u +%Y%m%d-%H%M%S)    # in the repository
elif [[ "$out" != /* ]]; then
    out="$caller_dir/$out"
fi
[[ "$out" != *\'* ]] || die "the output folder's name must not contain a single quote (the plots read it through the shell)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "compare: model $model, B=$B, T=$T, $steps steps, seed $seed; results in $out"

# ---- build and data ------------------------------------------------------------------------------
# Every make variable is given on the command line, so that values inherited from a calling make
# (ATTENTION, SANITIZE in `make check`) do not leak in.
MAKE_CMD=${MAKE:-make}
JOBS=${JOBS:-$(nproc)}
makevars=(BACKEND="$backend" SANITIZE=0)
build() {   # build ATTENTION TARGET...: quiet unless it fails; with --prebuilt, check they exist
    local attn=$1; shift
    if [ "$prebuilt" -eq 1 ]; then
        local t
        for t in "$@"; do
            [ "$t" = data ] && t=data/tinyshakespeare/tiny_shakespeare_val.bin
            [ -e "$t" ] || die "--prebuilt, but $t is missing (build it, or leave out --prebuilt)"
        done
        return 0
    fi
    "$MAKE_CMD" --no-print-directory -j"$JOBS" "${makevars[@]}" ATTENTION="$attn" "$@" >"$out/build.log" 2>&1 ||
        { tail -n 30 "$out/build.log" >&2; die "build failed: make ${makevars[*]} ATTENTION=$attn $* (whole log: $out/build.log)"; }
    rm -f "$out/build.log"
}
echo "compare: make data"
build flash data
for attn in naive flash; do
    echo "compare: building build/$backend-$attn/train_gpt2"
    build "$attn" "build/$backend-$attn/train_gpt2"
done

# ---- training: the same run with each backend ------------------------------------------------------
for attn in naive flash; do
    echo "compare: training with $attn attention: build/$backend-$attn/train_gpt2 ${train_flags[*]}"
    scratch="$out/.run-$attn"    # -o also writes a final checkpoint, which is not kept
    rm -rf "$scratch"
    # everything to train_<attn>.log; on the screen the first step, every tenth, and the summary
    if ! "build/$backend-$attn/train_gpt2" "${train_flags[@]}" -o "$scratch" 2>&1 | tee "$out/train_$attn.log" |
            awk '/^step +[0-9]+\// && (++n == 1 || n % 10 == 0) || /^summary:/ { print "  " $0; fflush() }'; then
        tail -n 20 "$out/train_$attn.log" >&2
        die "training with $attn attention failed (whole output: $out/train_$attn.log)"
    fi
    mv "$scratch/log.csv" "$out/train_$attn.csv"
    rm -rf "$scratch"
done

# ---- the sweep: both backends across T, B*T held at sweep_tokens -----------------------------------------
# Short runs (no validation, no samples): tokens/s and the program's peak memory at each T. A run
# that cannot allocate (naive's B*NH*T*T probabilities at long T) is recorded as oom with the
# program's own message in its log; any other failure stops the comparison.
sweep_cmd=""
if [ "$sweep" != none ]; then
    echo "T,B,backend,status,ms_per_step,tokens_per_s,peak_bytes" >"$out/sweep.csv"
    for t in ${sweep//,/ }; do
        b=$(( sweep_tokens / t )); [ "$b" -ge 1 ] || b=1
        maxT=$(( t > 1024 ? t : 1024 ))
        for attn in naive flash; do
            flags=(-e "$model" --max-seq-len "$maxT" -b "$b" -t "$t" -x "$sweep_steps" -l 6e-4 -v 0 -s 0 --seed "$seed")
            sweep_cmd="build/$backend-<attention>/train_gpt2 -e $model --max-seq-len max(T,1024) -b max(1,$sweep_tokens/T) -t T -x $sweep_steps -l 6e-4 -v 0 -s 0 --seed $seed"
            log="$out/sweep_${attn}_T$t.log"
            echo "compare: sweep T=$t B=$b, $attn: build/$backend-$attn/train_gpt2 ${flags[*]}"
            if "build/$backend-$attn/train_gpt2" "${flags[@]}" >"$log" 2>&1; then
                ms=$(figure "$log" ms)   # one a line: set -e stops at a missing one
                tok=$(figure "$log" tok_s)
                mem=$(figure "$log" memory)
                echo "$t,$b,$attn,ok,$ms,$tok,$(to_bytes "$mem")" >>"$out/sweep.csv"
                echo "  $ms ms/step, $tok tok/s, peak $mem"
            elif grep -qE 'error: out of [A-Za-z ]*memory' "$log"; then
                echo "$t,$b,$attn,oom,,," >>"$out/sweep.csv"
                echo "  out of memory: $(grep -E 'error: out of' "$log" | head -n 1)"
            else
                tail -n 20 "$log" >&2
                die "sweep run T=$t with $attn attention failed (whole output: $log)"
            fi
        done
    done
fi

# ---- attention microbenchmark ------------------------------------------------------------------------
# Both backends in one program, timed over T; attention.csv has one row per (T, backend), with the
# columns of bench/attention.cu's --csv:
# T,B,NH,HS,backend,status,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops,counted_bytes,measured_bytes
# (status: ok, or oom where the backend could not allocate; counted_bytes: q,k,v, out, dout, dqkv,
# what the backend saves for backward, its scratch; measured_bytes: the drop in free GPU memory).
attention_cmd=""

run_attention_bench() {
    local bin args=()
    if [ "$backend" = cuda ]; then
        bin=build/cuda-flash/bench/attention
        if [ "$tiny" -eq 1 ]; then args+=(--tmax 4096); fi
        build flash "$bin"
    else
        bin=build/cpu-flash/bench/bench_attention_cpu
        build flash "$bin"
        if [ "$tiny" -eq 1 ]; then args+=(--tmax 512); fi
    fi
    attention_cmd="$bin --csv attention.csv${args[*]:+ ${args[*]}}"
    echo "compare: attention microbenchmark: $attention_cmd"
    "$bin" --csv "$out/attention.csv" "${args[@]}" >"$out/attention.log" 2>&1 ||
        { tail -n 20 "$out/attention.log" >&2; die "$bin failed (whole output: $out/attention.log)"; }
    [ "$(wc -l <"$out/attention.csv")" -gt 1 ] || die "$bin wrote no rows (its output: $out/attention.log)"
    grep '^|' "$out/attention.log" | sed 's/^/  /'
}
run_attention_bench

# ---- the receipt: FLOPs, DRAM bytes, time of each attention pass (GPU only) ---------------------------
# scripts/receipt.sh measures with Nsight Compute where ncu is (else counts alone, and says so);
# its plot is drawn with the others below (compare_plot.gnuplot calls receipt_plot.gnuplot).
if [ "$backend" = cuda ]; then
    receipt_args=(--no-plot)
    [ "$tiny" -eq 1 ] && receipt_args+=(--shapes 12:64:1024:16 --no-step)
    echo "compare: the receipt: scripts/receipt.sh ${receipt_args[*]}"
    scripts/receipt.sh "$out" "${receipt_args[@]}" 2>&1 | sed 's/^/  /'
    [ "${PIPESTATUS[0]}" -eq 0 ] || die "scripts/receipt.sh failed (its output is above; ncu's in $out/ncu/)"
else
    echo "compare: the receipt (FLOPs, DRAM bytes and time of each attention pass): skipped, it measures on a GPU (scripts/receipt.sh OUTDIR there)"
fi

# PyTorch SDPA in the same call: its cuDNN and FlashAttention-2 backends, as
# torch_attention.csv: T,B,backend,fwd_ms,fwdbwd_ms (backend cudnn or flash; failed rows left out)
torch_cmd=""
if [ "$torch_bench" != none ]; then
    torch_cmd="python3 $torch_bench"
    echo "compare: PyTorch attention baselines: $torch_cmd"
    PYTHONUNBUFFERED=1 python3 "$torch_bench" >"$out/torch_attention.log" 2>&1 ||
        { tail -n 20 "$out/torch_attention.log" >&2; die "$torch_cmd failed (whole output: $out/torch_attention.log)"; }
    echo "T,B,backend,fwd_ms,fwdbwd_ms" >"$out/torch_attention.csv"
    awk '$1 ~ /^[0-9]+$/ && ($3 == "cudnn" || $3 == "flash") && $4 ~ /^[0-9.]+$/ {
        print $1 "," $2 "," $3 "," $4 "," $5 }' "$out/torch_attention.log" >>"$out/torch_attention.csv"
    [ "$(wc -l <"$out/torch_attention.csv")" -gt 1 ] || die "no cudnn or flash rows in $out/torch_attention.log"
fi

# ---- the table ---------------------------------------------------------------------------------------
# from a run's summary line: "summary: N steps, final train loss X, final val loss X,
# X ms/step, X tok/s (mean over steps after the first), peak <backend> memory X UNIT"
# one assignment a line, so that set -e stops at a missing figure
ms_naive=$(figure "$out/train_naive.log" ms)
ms_flash=$(figure "$out/train_flash.log" ms)
tok_s_naive=$(figure "$out/train_naive.log" tok_s)
tok_s_flash=$(figure "$out/train_flash.log" tok_s)
memory_naive=$(figure "$out/train_naive.log" memory)
memory_flash=$(figure "$out/train_flash.log" memory)
train_naive=$(figure "$out/train_naive.log" train)
train_flash=$(figure "$out/train_flash.log" train)
val_naive=$(figure "$out/train_naive.log" val)
val_flash=$(figure "$out/train_flash.log" val)

# the machine: the program's own "| device |" line (the GPU's name first), and on the CPU its model
device=$(sed -nE 's/^\| device +\| (.*)$/\1/p' "$out/train_flash.log" | head -n 1)
if [ "$backend" = cuda ]; then
    machine=$device
    machine_short=${device%%,*}
else
    cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
    machine_short="${cpu_model:-unknown CPU}, $(nproc) cores"
    machine="$machine_short; $device"
fi
# COMMIT names it where the checkout has no .git of its own (a copy on another machine)
if [ -n "${COMMIT:-}" ]; then
    commit=$COMMIT
else
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit with uncommitted changes"
fi
params=$(sed -nE 's/^\| parameters +\| ([0-9]+) \(([^)]*)\).*/\2/p' "$out/train_flash.log" | head -n 1)
tokens_per_step=$(( B * T ))
date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')

# "causal, NH=12, HS=64, B=1" or, where B changes with T, "B*T = 16384 tokens (B at least 1)"
attention_shape() {
    awk -F, 'NR == 1 { next }
        NR == 2 { nh = $3; hs = $4; b = $2; tokens = $1 * $2 }
        $2 != b { varies = 1 }
        END { printf "causal, NH=%s, HS=%s, ", nh, hs
              if (varies) printf "B*T = %d tokens (B at least 1)", tokens; else printf "B=%s", b }' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
difference() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.6f", a - b }'; }
{
    echo "## Attention backends, naive vs flash: training ($backend, model $model)"
    echo
    echo "- machine: $machine"
    echo "- commit: $commit, measured $date_utc"
    echo "- run: \`build/$backend-<attention>/train_gpt2 ${train_flags[*]}\`: $params parameters, $tokens_per_step tokens/step, same seed and data order for both"
    echo "- ms/step and tokens/s: mean over the steps after the first (a warm-up); peak memory: the program's own count of the $backend memory it allocated"
    echo "- last row: naive ms / flash ms, flash tokens/s / naive tokens/s, naive memory / flash memory (above 1: flash is ahead), and flash loss minus naive loss"
    echo
    echo "| attention | ms/step | tokens/s | peak $backend memory | final train loss | final val loss |"
    echo "|---|--:|--:|--:|--:|--:|"
    echo "| naive | $ms_naive | $tok_s_naive | $memory_naive | $train_naive | $val_naive |"
    echo "| flash | $ms_flash | $tok_s_flash | $memory_flash | $train_flash | $val_flash |"
    echo "| flash vs naive | $(ratio "$ms_naive" "$ms_flash") | $(ratio "$tok_s_flash" "$tok_s_naive") | $(ratio "$(to_bytes "$memory_naive")" "$(to_bytes "$memory_flash")") | $(difference "$train_flash" "$train_naive") | $(difference "$val_flash" "$val_naive") |"
    if [ -s "$out/sweep.csv" ]; then
        echo
        echo "## Training across T ($backend, model $model, B*T = $sweep_tokens tokens)"
        echo
        echo "- run: \`$sweep_cmd\`: $sweep_steps steps at each T; ms/step and tokens/s: mean over the steps after the first; peak memory: the program's own count"
        echo "- flash vs naive: flash tokens/s over naive's, and naive's peak memory over flash's"
        echo
        echo "| T | B | naive tokens/s | flash tokens/s | flash vs naive | naive peak memory | flash peak memory | memory, naive / flash |"
        echo "|--:|--:|--:|--:|--:|--:|--:|--:|"
        awk -F, '
            function bytes(x,   u, i) { split("B KiB MiB GiB TiB", u, " "); i = 1
                while (x >= 1024 && i < 5) { x /= 1024; i++ }
                return sprintf(i == 1 ? "%.0f %s" : "%.1f %s", x, u[i]) }
            NR == 1 { next }
            { if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1; batch[$1] = $2 }
              ok[$1, $3] = $4 == "ok"; tok[$1, $3] = $6; mem[$1, $3] = $7 }
            END {
                for (i = 1; i <= n; i++) {
                    k = order[i]
                    nt = ok[k, "naive"] ? sprintf("%.0f", tok[k, "naive"]) : "out of memory"
                    ft = ok[k, "flash"] ? sprintf("%.0f", tok[k, "flash"]) : "out of memory"
                    both = ok[k, "naive"] && ok[k, "flash"]
                    sp = both ? sprintf("%.2fx", tok[k, "flash"] / tok[k, "naive"]) : "-"
                    nm = ok[k, "naive"] ? bytes(mem[k, "naive"]) : "out of memory"
                    fm = ok[k, "flash"] ? bytes(mem[k, "flash"]) : "out of memory"
                    mr = both ? sprintf("%.2fx", mem[k, "naive"] / mem[k, "flash"]) : "-"
                    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", k, batch[k], nt, ft, sp, nm, fm, mr
                }
            }' "$out/sweep.csv"
    fi
    if [ -s "$out/attention.csv" ]; then
        echo
        echo "## Attention alone, over T ($backend)"
        echo
        echo "- $(attention_shape "$out/attention.csv"); median time per call; memory: the bytes the backend allocates (q,k,v, out, their gradients, what it saves for backward, scratch); FLOPs: forward 2*B*NH*T^2*HS (causal), forward+backward 3.5x that"
        echo "- command: \`$attention_cmd\`"
        local_flops=TFLOP/s; flops_scale=1
        [ "$backend" = cpu ] && { local_flops=GFLOP/s; flops_scale=1000; }
        torch_csv=/dev/null
        if [ -s "$out/torch_attention.csv" ]; then
            torch_csv="$out/torch_attention.csv"
            echo "- PyTorch SDPA in the same call (\`$torch_cmd\`, the same shapes): cuDNN's fused attention and FlashAttention-2; 'flash vs cuDNN' is cuDNN's forward+backward time over ours (above 1: ours is faster)"
            echo
            echo "| T | B | fwd ms naive | fwd ms flash | fwd ms cuDNN | fwd ms FA2 | fwd+bwd ms naive | fwd+bwd ms flash | fwd+bwd ms cuDNN | fwd+bwd ms FA2 | flash vs naive | flash vs cuDNN | flash fwd+bwd $local_flops | memory naive | memory flash |"
            echo "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
        else
            echo
            echo "| T | B | fwd ms naive | fwd ms flash | fwd+bwd ms naive | fwd+bwd ms flash | fwd+bwd speedup | flash fwd+bwd $local_flops | memory naive | memory flash |"
            echo "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
        fi
        awk -F, -v flops_scale="$flops_scale" -v torch="$([ "$torch_csv" = /dev/null ] && echo 0 || echo 1)" '
            function bytes(x,   u, i) { split("B KiB MiB GiB TiB", u, " "); i = 1
                while (x >= 1024 && i < 5) { x /= 1024; i++ }
                return sprintf(i == 1 ? "%.0f %s" : "%.1f %s", x, u[i]) }
            FNR == 1 { next }
            FILENAME != ARGV[1] { tfwd[$1, $3] = $4; tfb[$1, $3] = $5; next }   # torch_attention.csv
            { key = $1; if (!(key in seen)) { seen[key] = 1; order[++n] = key; batch[key] = $2 }
              ok[key, $5] = $6 == "ok"; fwd[key, $5] = $7; fb[key, $5] = $9; tf[key, $5] = $10; mem[key, $5] = $11 }
            END {
                for (i = 1; i <= n; i++) {
                    k = order[i]
                    nf = ok[k, "naive"] ? sprintf("%.3f", fwd[k, "naive"]) : "out of memory"
                    nb = ok[k, "naive"] ? sprintf("%.3f", fb[k, "naive"]) : "out of memory"
                    ff = ok[k, "flash"] ? sprintf("%.3f", fwd[k, "flash"]) : "out of memory"
                    fbs = ok[k, "flash"] ? sprintf("%.3f", fb[k, "flash"]) : "out of memory"
                    sp = ok[k, "naive"] && ok[k, "flash"] ? sprintf("%.2fx", fb[k, "naive"] / fb[k, "flash"]) : "-"
                    tfl = ok[k, "flash"] ? sprintf("%.3g", tf[k, "flash"] * flops_scale) : "-"
                    mn = bytes(mem[k, "naive"]) (ok[k, "naive"] ? "" : " (needed)")
                    if (!torch) {
                        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k, batch[k], nf, ff, nb, fbs, sp, tfl, mn, bytes(mem[k, "flash"])
                        continue
                    }
                    cf = (k, "cudnn") in tfwd ? tfwd[k, "cudnn"] : "-"; cb = (k, "cudnn") in tfb ? tfb[k, "cudnn"] : "-"
                    af = (k, "flash") in tfwd ? tfwd[k, "flash"] : "-"; ab = (k, "flash") in tfb ? tfb[k, "flash"] : "-"
                    vc = ok[k, "flash"] && cb != "-" ? sprintf("%.2fx", cb / fb[k, "flash"]) : "-"
                    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k, batch[k], nf, ff, cf, af, nb, fbs, cb, ab, sp, vc, tfl, mn, bytes(mem[k, "flash"])
                }
            }' "$out/attention.csv" "$torch_csv"
    fi
    if [ -s "$out/receipt.md" ]; then
        echo
        cat "$out/receipt.md"
    fi
} >"$out/table.md"

# ---- plots -------------------------------------------------------------------------------------------
# The plots need only the folder, so they can be drawn again elsewhere (e.g. where the GPU machine
# has no gnuplot): the command is printed either way.
plot_args=("$out" "$backend: $machine_short; commit ${commit%% *}" "model $model, B=$B, T=$T, $steps steps")
plot_cmd="gnuplot -c scripts/compare_plot.gnuplot"
for a in "${plot_args[@]}"; do plot_cmd+=" '${a//\'/\'\\\'\'}'"; done
echo
cat "$out/table.md"
echo
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "error: compare.sh: gnuplot is not installed (scripts/setup.sh installs Debian's gnuplot-nox):" >&2
    echo "no plots; draw them where it is, from a copy of $out, with: $plot_cmd" >&2
    exit 1
fi
gnuplot -c scripts/compare_plot.gnuplot "${plot_args[@]}" || die "gnuplot failed: $plot_cmd"
echo "compare: plots drawn with: $plot_cmd"
echo "compare: wrote $(cd "$out" && echo *)"
echo "compare: into $out"
