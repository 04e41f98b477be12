#!/usr/bin/env bash
# scripts/receipt.sh: the exchange flash attention makes, on this GPU: FLOPs, DRAM bytes and time
# of one attention pass of each backend, counted and measured (issue 23); `make compare` runs it
# where there is a GPU. One command, from a checkout with prebuilt binaries (no make, no network):
#   build/cuda-flash/bench/attention              (make BACKEND=cuda gpu-bench)
#   build/cuda-naive/train_gpt2, build/cuda-flash/train_gpt2, data/tinyshakespeare/*.bin
#     (only for the training step)
#
# usage: scripts/receipt.sh OUTDIR [--shapes NH:HS:T:B,...] [--no-step] [--ncu PATH|none]
#                           [--build DIR] [--data DIR] [--no-plot]
#   --shapes   attention shapes (default 12:64:1024:16,16:64:1024:64,12:64:4096:4,16:64:4096:16:
#              GPT-2 small at the training shape, GPT-2 medium at the FlashAttention paper's
#              Fig. 2 shape (B=64), each again at T=4096)
#   --no-step  leave out the training step (d12, B=16, T=1024, of each backend)
#   --ncu      Nsight Compute (default: ncu on the PATH, else /usr/local/cuda/bin/ncu); none, or
#              none found: no measured bytes, the counted ones and event-timed ms alone
#   --build    where build/cuda-{naive,flash} are (default build); --data: the token files
#              (default data/tinyshakespeare); --no-plot: no gnuplot (compare.sh draws later)
#
# Each pass is `bench/attention --receipt fwd|fwdbwd` (one pass between cudaProfilerStart and
# Stop) under `ncu --profile-from-start off --clock-control none` with the metrics
# dram__bytes_read.sum, dram__bytes_write.sum, gpu__time_duration.sum, summed over the pass's
# kernels by scripts/receipt_ncu.awk. ncu's default cache control flushes the caches before every
# kernel: each kernel starts from a cold L2. RECEIPT_NCU_FLAGS adds ncu flags (e.g.
# "--cache-control none"). The training step: train_gpt2 -x 2 under ncu, every kernel; step 2
# (the one after the warm-up step) is split off at the optimizer's adamw kernels and attention's
# kernels told apart by name. Writes into OUTDIR:
#   receipt.csv       one row per (shape, backend, pass): NH,HS,T,B,backend,pass,path,tiles,flops,
#                     counted_read_bytes,counted_write_bytes,measured_read_bytes,
#                     measured_write_bytes,kernels,ncu_ms,event_ms (measured_*, kernels, ncu_ms
#                     empty without ncu)
#   receipt_step.csv  backend,kernels,read_bytes,write_bytes,ms,attn_kernels,attn_read_bytes,
#                     attn_write_bytes,attn_ms,counted_attn_bytes (with ncu and the step)
#   receipt_bars.csv  what receipt.png draws: label,naive_gflop,flash_gflop,naive_counted_gb,
#                     flash_counted_gb,naive_measured_gb,flash_measured_gb,naive_ms,flash_ms
#   receipt.md        the tables, the paper's A100 figures beside them, device, commit, date
#   receipt.png       bars of GFLOP, GB moved and ms, naive beside flash (where gnuplot is)
#   ncu/              the ncu reports (.ncu-rep), their CSVs and every program's output
set -euo pipefail
caller_dir=$PWD
cd "$(dirname "$0")/.."

usage() { sed -n '/^# usage:/,/^#              (default data/s' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: receipt.sh: $*" >&2; exit 1; }

out="" shapes="12:64:1024:16,16:64:1024:64,12:64:4096:4,16:64:4096:16" step=1 ncu="" build=build
data=data/tinyshakespeare plot=1
while [ $# -gt 0 ]; do
    case "$1" in
        --shapes)   shapes=${2:?$1 needs a value}; shift 2 ;;
        --no-step)  step=0; shift ;;
        --ncu)      ncu=${2:?$1 needs a value}; shift 2 ;;
        --build)    build=${2:?$1 needs a value}; shift 2 ;;
        --data)     data=${2:?$1 needs a value}; shift 2 ;;
        --no-plot)  plot=0; shift ;;
        -h|--help)  usage; exit 0 ;;
        -*)         usage >&2; die "unknown option '$1'" ;;
        *)          [ -z "$out" ] || die "one output folder, not '$out' and '$1'"; out=$1; shift ;;
    esac
done
[ -n "$out" ] || { usage >&2; die "no output folder given"; }
[[ "$shapes" =~ ^[1-9][0-9]*:[1-9][0-9]*:[1-9][0-9]*:[1-9][0-9]*(,[1-9][0-9]*:[1-9][0-9]*:[1-9][0-9]*:[1-9][0-9]*)*$ ]] ||
    die "--shapes must be NH:HS:T:B[,NH:HS:T:B...] of positive integers, not '$shapes'"
[[ "$out" == /* ]] || out="$caller_dir/$out"
[[ "$build" == /* ]] || [ -d "$build" ] || build="$caller_dir/$build"
[[ "$data" == /* ]] || [ -d "$data" ] || data="$caller_dir/$data"

bench=$build/cuda-flash/bench/attention
[ -x "$bench" ] || die "$bench is missing: build it with make BACKEND=cuda gpu-bench (or copy a prebuilt build/ here)"
nvidia-smi -L 2>/dev/null | grep -q GPU ||
    die "no GPU visible (nvidia-smi -L): the receipt measures attention on a GPU; its counts alone are in README.md"
if [ -z "$ncu" ]; then
    ncu=$(command -v ncu || true)
    [ -n "$ncu" ] || { [ -x /usr/local/cuda/bin/ncu ] && ncu=/usr/local/cuda/bin/ncu; } || true
    [ -n "$ncu" ] || ncu=none
elif [ "$ncu" != none ]; then
    command -v "$ncu" >/dev/null 2>&1 || die "--ncu $ncu: no such program"
fi
if [ "$step" -eq 1 ]; then
    for f in "$build/cuda-naive/train_gpt2" "$build/cuda-flash/train_gpt2"; do
        [ -x "$f" ] || die "$f is missing (make BACKEND=cuda ATTENTION=naive|flash), or pass --no-step"
    done
    for f in "$data/tiny_shakespeare_train.bin" "$data/tiny_shakespeare_val.bin"; do
        [ -s "$f" ] || die "$f is missing (make data), or pass --no-step"
    done
fi
mkdir -p "$out/ncu"
out=$(cd "$out" && pwd)
metrics=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
read -r -a extra_flags <<<"${RECEIPT_NCU_FLAGS:-}"
if [ "$ncu" = none ]; then
    echo "receipt: Nsight Compute (ncu) not found: no measured DRAM bytes; counted FLOPs and bytes, event-timed ms alone"
else
    echo "receipt: measuring with $ncu ($("$ncu" --version 2>/dev/null | tail -n 1)); results in $out"
fi

# profile CMD... into $out/ncu/$tag.{ncu-rep,csv,log}; ncu's --import writes the raw CSV
profile() {   # profile TAG FROM_START(on|off) CMD...
    local tag=$1 from=$2; shift 2
    if ! "$ncu" --profile-from-start "$from" --metrics "$metrics" --clock-control none \
            "${extra_flags[@]}" --export "$out/ncu/$tag" --force-overwrite "$@" >"$out/ncu/$tag.log" 2>&1; then
        tail -n 20 "$out/ncu/$tag.log" >&2
        die "ncu failed on: $* (whole output: $out/ncu/$tag.log)"
    fi
    # every metric of the report (receipt_ncu.awk picks its three columns by name)
    "$ncu" --import "$out/ncu/$tag.ncu-rep" --csv --page raw --print-units base \
        >"$out/ncu/$tag.csv" 2>"$out/ncu/$tag.import.log" ||
        die "ncu --import $out/ncu/$tag.ncu-rep failed (see $out/ncu/$tag.import.log)"
}
field() {   # field KEY LINE: the value of key=value in a receipt: line
    local v
    v=$(echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p")
    [ -n "$v" ] || die "no $1= in the bench's receipt line: $2"
    echo "$v"
}

# ---- attention alone: each shape, backend, pass -------------------------------------------------
csv=$out/receipt.csv
echo "NH,HS,T,B,backend,pass,path,tiles,flops,counted_read_bytes,counted_write_bytes,measured_read_bytes,measured_write_bytes,kernels,ncu_ms,event_ms" >"$csv"
for shape in ${shapes//,/ }; do
    IFS=: read -r NH HS T B <<<"$shape"
    for pass in fwd fwdbwd; do
        for be in naive flash; do
            tag=attn_${be}_${pass}_NH${NH}_HS${HS}_T${T}_B${B}
            cmd=("$bench" --receipt "$pass" --backend "$be" --nh "$NH" --hs "$HS" --tmin "$T" --tmax "$T" --tokens $((B * T)))
            echo "receipt: $be $pass NH=$NH HS=$HS T=$T B=$B"
            measured=",,,"
            if [ "$ncu" = none ]; then
                "${cmd[@]}" >"$out/ncu/$tag.log" 2>&1 ||
                    { tail -n 20 "$out/ncu/$tag.log" >&2; die "${cmd[*]} failed (whole output: $out/ncu/$tag.log)"; }
            else
                profile "$tag" off "${cmd[@]}"
                sums=$(awk -f scripts/receipt_ncu.awk "$out/ncu/$tag.csv") || die "could not read $out/ncu/$tag.csv"
                IFS=, read -r k r w ns <<<"$sums"
                measured="$r,$w,$k,$(awk -v ns="$ns" 'BEGIN { printf "%.4f", ns / 1e6 }')"
            fi
            line=$(awk '/^receipt: / { l = $0 } END { print l }' "$out/ncu/$tag.log")
            [ -n "$line" ] || die "no receipt: line in $out/ncu/$tag.log"
            echo "$NH,$HS,$T,$B,$be,$pass,$(field path "$line"),$(field tiles "$line"),$(field flops "$line"),$(field counted_read "$line"),$(field counted_write "$line"),$measured,$(field event_ms "$line")" >>"$csv"
            tail -n 1 "$csv" | awk -F, '{ printf "  %.2f GFLOP, counted %.3f GB", $9 / 1e9, ($10 + $11) / 1e9
                if ($12 != "") printf ", measured %.3f GB in %d kernels, %.3f ms (ncu)", ($12 + $13) / 1e9, $14, $15
                printf ", %.3f ms (events)\n", $16 }'
        done
    done
done

# ---- one training step, d12 B=16 T=1024, each backend ----------------------------------------------
step_csv=$out/receipt_step.csv
rm -f "$step_csv"
layers=12
if [ "$step" -eq 1 ] && [ "$ncu" = none ]; then
    echo "receipt: the training step needs ncu (its DRAM bytes are measured, not counted): left out"
elif [ "$step" -eq 1 ]; then
    echo "backend,kernels,read_bytes,write_bytes,ms,attn_kernels,attn_read_bytes,attn_write_bytes,attn_ms,counted_attn_bytes" >"$step_csv"
    for be in naive flash; do
        # attention's counted bytes in a step: every layer's forward and backward at this shape
        cline=$("$bench" --receipt fwdbwd --backend "$be" --nh 12 --hs 64 --tmin 1024 --tmax 1024 --tokens 16384 2>&1 | grep '^receipt: ') ||
            die "$bench --receipt fwdbwd --backend $be failed"
        counted=$(awk -v r="$(field counted_read "$cline")" -v w="$(field counted_write "$cline")" -v l=$layers \
            'BEGIN { printf "%.0f", l * (r + w) }')
        tcmd=("$build/cuda-$be/train_gpt2" -e d12 -b 16 -t 1024 -x 2 -l 6e-4 -v 0 -s 0 --seed 1337
              -i "$data/tiny_shakespeare_train.bin" -j "$data/tiny_shakespeare_val.bin")
        echo "receipt: one training step with $be attention: ncu ${tcmd[*]} (every kernel of 2 steps: minutes)"
        profile "step_$be" on "${tcmd[@]}"
        sums=$(awk -v step=2 -v attention="$be" -v layers=$layers -f scripts/receipt_ncu.awk "$out/ncu/step_$be.csv") ||
            die "could not split step 2 of $out/ncu/step_$be.csv"
        IFS=, read -r k r w ns ak ar aw ans <<<"$sums"
        awk -v be="$be" -v k="$k" -v r="$r" -v w="$w" -v ns="$ns" -v ak="$ak" -v ar="$ar" -v aw="$aw" \
            -v ans="$ans" -v c="$counted" 'BEGIN {
            printf "%s,%d,%s,%s,%.4f,%d,%s,%s,%.4f,%s\n", be, k, r, w, ns / 1e6, ak, ar, aw, ans / 1e6, c }' >>"$step_csv"
        tail -n 1 "$step_csv" | awk -F, '{ printf "  step: %.2f GB in %d kernels, %.2f ms; attention %.2f GB (%.1f%%), counted %.2f GB\n",
            ($3 + $4) / 1e9, $2, $5, ($7 + $8) / 1e9, 100 * ($7 + $8) / ($3 + $4), $10 / 1e9 }'
    done
fi

# ---- the bars and the tables ------------------------------------------------------------------------
awk -F, 'NR == 1 { next }
    { key = "NH=" $1 " T=" $3 " B=" $4 " " ($6 == "fwd" ? "fwd" : "fwd+bwd")
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      gf[key, $5] = $9 / 1e9; cg[key, $5] = ($10 + $11) / 1e9
      mg[key, $5] = $12 == "" ? "" : sprintf("%.4f", ($12 + $13) / 1e9); ms[key, $5] = $15 == "" ? $16 : $15 }
    END { print "label,naive_gflop,flash_gflop,naive_counted_gb,flash_counted_gb,naive_measured_gb,flash_measured_gb,naive_ms,flash_ms"
          for (i = 1; i <= n; i++) { k = order[i]
              printf "%s,%.3f,%.3f,%.4f,%.4f,%s,%s,%.4f,%.4f\n", k, gf[k, "naive"], gf[k, "flash"], cg[k, "naive"],
                  cg[k, "flash"], mg[k, "naive"], mg[k, "flash"], ms[k, "naive"], ms[k, "flash"] } }' "$csv" >"$out/receipt_bars.csv"

# the device as the bench describes it (its first "# " line; no head in a pipe: set -o pipefail)
device=$(awk '/^# / { sub(/^# /, ""); print; exit }' "$out"/ncu/attn_*.log)
[ -n "$device" ] || device=$(nvidia-smi --query-gpu=name --format=csv,noheader | awk 'NR == 1')
if [ -n "${COMMIT:-}" ]; then
    commit=$COMMIT
else
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit with uncommitted changes"
fi
{
    echo "## The receipt: FLOPs, DRAM bytes and time of attention, naive vs flash"
    echo
    echo "- device: $device"
    echo "- commit: $commit, measured $(date -u '+%Y-%m-%d %H:%M UTC')"
    if [ "$ncu" = none ]; then
        echo "- Nsight Compute not found: measured columns empty; time: median of 21 passes (CUDA events)"
    else
        echo "- measured: \`$ncu --profile-from-start off --clock-control none --metrics $metrics${RECEIPT_NCU_FLAGS:+ $RECEIPT_NCU_FLAGS}\` over \`bench/attention --receipt PASS\` (one pass; ncu flushes the caches before each kernel), summed over the pass's kernels; ms: the kernels' summed gpu__time_duration"
    fi
    echo "- counted (bench/attention_counts.h): GFLOP of the matrix products, 2 per multiply-add, causal halves, flash's backward recomputation of S included; GB: every load and store the kernels issue, as if no cache stood between them and DRAM"
    echo "- causal, bf16, HS and NH as listed; fwd+bwd is one forward and one backward"
    echo
    echo "| shape | pass | backend | kernels path | GFLOP (counted) | GB counted | GB measured (read + write) | ms | flash vs naive: FLOPs, bytes measured, time |"
    echo "|---|---|---|---|--:|--:|--:|--:|---|"
    awk -F, 'NR == 1 { next }
        { shape = "NH=" $1 " HS=" $2 " T=" $3 " B=" $4; pass = $6 == "fwd" ? "fwd" : "fwd+bwd"
          meas = $12 == "" ? "-" : sprintf("%.3f (%.3f + %.3f)", ($12 + $13) / 1e9, $12 / 1e9, $13 / 1e9)
          ms = $15 == "" ? $16 : $15
          cmp = ""
          if ($5 == "naive") { nf = $9; nb = $12 + $13; nm = ms; hasm = $12 != "" }
          else cmp = sprintf("%.2fx, %s, %.2fx faster", $9 / nf, hasm ? sprintf("%.1fx fewer", nb / ($12 + $13)) : "-", nm / ms)
          printf "| %s | %s | %s | %s | %.2f | %.3f | %s | %.3f | %s |\n", shape, pass, $5, $7 ($8 == "-" ? "" : " " $8),
              $9 / 1e9, ($10 + $11) / 1e9, meas, ms, cmp }' "$csv"
    echo
    echo "The FlashAttention paper's figures (Dao et al. 2022, *FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness*, Fig. 2 left; A100, GPT-2 medium, sequence length 1024, head dimension 64, 16 heads, batch size 64, forward + backward): standard attention 66.6 GFLOPs, 40.3 GB of HBM reads and writes, 41.7 ms; FlashAttention 75.2 GFLOPs, 4.4 GB, 7.3 ms. The paper does not state its FLOP convention; compare ratios."
    if [ -s "$step_csv" ]; then
        echo
        echo "### One training step (d12, B=16, T=1024): attention's share of DRAM traffic"
        echo
        echo "- \`train_gpt2 -e d12 -b 16 -t 1024 -x 2 ...\` under ncu, every kernel; step 2 (after the warm-up step), split off at the optimizer's adamw kernels; attention kernels by name (flash_*; naive: the permute, cuBLAS, softmax, cuBLAS, permute runs); memsets and copies are not kernels and not counted"
        echo "- counted attention bytes: $layers layers x one forward and one backward at NH=12 HS=64 T=1024 B=16"
        echo
        echo "| attention | step GB (read + write) | step ms (kernels) | attention GB measured | attention share of step bytes | attention ms | attention GB counted |"
        echo "|---|--:|--:|--:|--:|--:|--:|"
        awk -F, 'NR == 1 { next }
            { printf "| %s | %.2f | %.2f | %.2f | %.1f%% | %.2f | %.2f |\n", $1, ($3 + $4) / 1e9, $5, ($7 + $8) / 1e9,
                  100 * ($7 + $8) / ($3 + $4), $9, $10 / 1e9 }' "$step_csv"
    fi
} >"$out/receipt.md"
echo
cat "$out/receipt.md"

plot_cmd="gnuplot -c scripts/receipt_plot.gnuplot '$out' '$device; commit ${commit%% *}'"
if [ "$plot" -eq 0 ]; then
    exit 0
elif ! command -v gnuplot >/dev/null 2>&1; then
    echo "receipt: gnuplot is not installed: no receipt.png; draw it where gnuplot is, from a copy of $out, with: $plot_cmd"
else
    gnuplot -c scripts/receipt_plot.gnuplot "$out" "$device; commit ${commit%% *}" || die "gnuplot failed: $plot_cmd"
    echo "receipt: drew $out/receipt.png"
fi
