#!/usr/bin/env bash
# scripts/vs_llmc.sh: train_gpt2 beside llm.c, ms a training step at several model sizes, in one
# call (issue 19's table). For each MODEL:B of --configs, --rounds times in turn, ours (BUILD's
# train_gpt2) then llm.c (LLMC: llm.c's train_gpt2cu with cuDNN attention, built as
# .carry/llmc/NOTE.md and ../shared/bench/llmc.md say; without it, ours alone) train a new
# model for --steps steps at T=1024 on DATA. DATA is given to both as the validation file too:
# llm.c's loader stops when the validation file holds less than one batch, and validation is
# off anyway. A run's ms a step is the mean over steps --from..--steps of the lines
#   step    i/n | ... | X ms | ...
# that both programs print. The table (printed, and DIR/table.md): each round's ms, the means'
# tokens/s, and ours against llm.c (llm.c's ms over ours: above 1, ours is faster).
#
# usage: scripts/vs_llmc.sh [--configs d12:16,d12:64,d24:16,d36:16,d48:8] [--steps 20]
#                           [--from 4] [--rounds 2] [--out DIR] [--parse DIR]
#   --parse DIR   only the table, from the logs a run left in DIR (no GPU needed)
# environment: BUILD (default build/cuda-flash), LLMC (default .carry/llmc/train_gpt2cu),
#   DATA (default data/tinyshakespeare/tiny_shakespeare_train.bin)
set -uo pipefail
cd "$(dirname "$0")/.."
die() { echo "error: vs_llmc.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^#   DATA/p' "$0" | sed 's/^# \{0,1\}//'; }

configs=d12:16,d12:64,d24:16,d36:16,d48:8 steps=20 from=4 rounds=2 out="" parse=""
while [ $# -gt 0 ]; do
    case "$1" in
        --configs) configs=${2:?$1 needs a value}; shift 2 ;;
        --steps)   steps=${2:?$1 needs a value}; shift 2 ;;
        --from)    from=${2:?$1 needs a value}; shift 2 ;;
        --rounds)  rounds=${2:?$1 needs a value}; shift 2 ;;
        --out)     out=${2:?$1 needs a value}; shift 2 ;;
        --parse)   parse=${2:?$1 needs a value}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *)         usage >&2; die "unknown option '$1'" ;;
    esac
done
[[ "$configs" =~ ^d[1-9][0-9]*:[1-9][0-9]*(,d[1-9][0-9]*:[1-9][0-9]*)*$ ]] ||
    die "--configs must be MODEL:B pairs like d12:16,d48:8, not '$configs'"
for v in steps from rounds; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--$v must be a positive integer, not '${!v}'"
done
[ "$from" -le "$steps" ] || die "--from ($from) is past --steps ($steps)"
BUILD=${BUILD:-build/cuda-flash}
LLMC=${LLMC:-.carry/llmc/train_gpt2cu}
DATA=${DATA:-data/tinyshakespeare/tiny_shakespeare_train.bin}

# the mean ms of steps from..n of a log, or nothing where it has none of them
step_ms() {
    awk -v from="$from" '/^step +[0-9]+\/[0-9]+ \|/ {
            split($2, s, "/"); if (s[1] + 0 < from) next
            for (i = 1; i <= NF; i++) if ($i == "ms" && $(i - 1) ~ /^[0-9.]+$/) { t += $(i - 1); n++; break } }
        END { if (n) printf "%.2f\n", t / n }' "$1" 2>/dev/null
}

if [ -n "$parse" ]; then
    out=$parse
    [ -d "$out" ] || die "--parse: no folder $out"
else
    [ -x "$BUILD/train_gpt2" ] || die "$BUILD/train_gpt2 is missing (make BACKEND=cuda cuda-build)"
    [ -f "$DATA" ] || die "no token file $DATA (make data, or DATA=...)"
    out=${out:-out/vs_llmc}
    mkdir -p "$out" || die "cannot make $out"
    have_llmc=0
    [ -x "$LLMC" ] && have_llmc=1
    [ $have_llmc = 1 ] || echo "vs_llmc: no llm.c binary at $LLMC: ours alone"
    # llmc.md step 6: torch's cuDNN on the library path, where there is one (nvidia.cudnn is a
    # namespace package: its folder is __path__, not __file__'s)
    cudnn=$(python3 -c "import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])" 2>/dev/null)/lib
    [ $have_llmc = 1 ] && [ -d "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
    for r in $(seq 1 "$rounds"); do
        for c in ${configs//,/ }; do
            model=${c%%:*}; b=${c##*:}
            log=$out/ours_${model}_b${b}_r$r.log
            echo "vs_llmc: round $r, $model B=$b: ours"
            "$BUILD/train_gpt2" -e "$model" -i "$DATA" -j "$DATA" -b "$b" -t 1024 -x "$steps" -v 0 -s 0 \
                > "$log" 2>&1 || echo "  failed (exit $?): $log"
            [ $have_llmc = 1 ] || continue
            log=$out/llmc_${model}_b${b}_r$r.log
            echo "vs_llmc: round $r, $model B=$b: llm.c"
            "$LLMC" -e "$model" -i "$DATA" -j "$DATA" -b "$b" -t 1024 -x "$steps" -v 100000 -s 0 -m 1 \
                > "$log" 2>&1 || echo "  failed (exit $?): $log"
        done
    done
fi

# ---- the table -------------------------------------------------------------------------------
cell() { local v; v=$(step_ms "$1"); [ -n "$v" ] && echo "$v" || { [ -e "$1" ] && echo failed || echo -; }; }
{
    echo "ms a step (mean of steps $from-$steps, T=1024), each round; tokens/s from the rounds' mean;"
    echo "ours vs llm.c: llm.c's ms over ours (above 1: ours is faster)"
    echo
    echo "| model | B | ours ms | llm.c ms | ours tokens/s | llm.c tokens/s | ours vs llm.c |"
    echo "|---|--:|--:|--:|--:|--:|--:|"
    for c in ${configs//,/ }; do
        model=${c%%:*}; b=${c##*:}
        ours=() theirs=()
        for r in $(seq 1 "$rounds"); do
            ours+=("$(cell "$out/ours_${model}_b${b}_r$r.log")")
            theirs+=("$(cell "$out/llmc_${model}_b${b}_r$r.log")")
        done
        awk -v m="$model" -v b="$b" -v o="${ours[*]}" -v l="${theirs[*]}" 'BEGIN {
            no = split(o, os, " "); nl = split(l, ls, " ")
            for (i = 1; i <= no; i++) if (os[i] ~ /^[0-9.]+$/) { so += os[i]; co++ }
            for (i = 1; i <= nl; i++) if (ls[i] ~ /^[0-9.]+$/) { sl += ls[i]; cl++ }
            gsub(/ /, " / ", o); gsub(/ /, " / ", l)
            tok = b * 1024
            to = co ? sprintf("%.0f", tok * 1000 / (so / co)) : "-"
            tl = cl ? sprintf("%.0f", tok * 1000 / (sl / cl)) : "-"
            vs = co && cl ? sprintf("%.2fx", (sl / cl) / (so / co)) : "-"
            printf "| %s | %s | %s | %s | %s | %s | %s |\n", m, b, o, l, to, tl, vs }'
    done
} > "$out/table.md"
cat "$out/table.md"
