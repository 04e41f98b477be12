#!/usr/bin/env bash
# tests/test_step_scripts.sh: the training step's GPU-side scripts without a GPU, on made-up
# inputs whose answers are known:
#   scripts/timeline.py      (bench/kernel_timeline.c's CSV) the steps cut at the optimizer, the
#                            wall time split into kernels, copies and gaps, the groups, the gaps
#   scripts/step_account.py  (ncu's CSV) the second step cut out, llm.c's AdamW kernels with other
#                            kernels between them taken as one optimizer step
#   scripts/gemv_trace.py    (a FUSED_TRACE ring) whole decode steps, each call's stages and gaps
#   scripts/vs_llmc.sh       (--parse: the logs of ours and llm.c) the mean ms of the steps asked
#                            for, each program's line format, failed and missing runs
# and that they refuse a run with too few steps or bad options. Ends like the C tests:
# "tests/test_step_scripts.sh: N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
name=tests/test_step_scripts.sh
. tests/shell_test.sh
need_python3 "timeline.py, step_account.py"

# ---- timeline.py ------------------------------------------------------------------------------
# 5 steps (so 3 measured after --skip 2), each: 20 x (layernorm 5 us, 2 us gap, GEMM 50 us,
# 1 us gap), an upload of 3 us, a 97 us gap, then the optimizer: 3 AdamW kernels with a 1 us
# memset between the first two (llm.c puts small work between them) and 0.5 us gaps.
# (GEMM_NS and LN in the environment: another program's timeline for --against.)
made_up_timeline() {
    python3 - <<'PY'
import os
gemm, ln = int(os.environ.get("GEMM_NS", 50000)), os.environ.get("LN", "_Z24layernorm_forward_kernelPf")
print("kind,start_ns,end_ns,stream,name")
t = 0
for step in range(5):
    for k in range(20):
        print(f'kernel,{t},{t + 5000},7,"{ln}"'); t += 7000
        print(f'kernel,{t},{t + gemm},7,"nvjet_sm90_tst_256x128"'); t += 51000
    print(f"memcpy,{t},{t + 3000},7,HtoD 262144 bytes"); t += 100000
    for k in range(3):
        print(f'kernel,{t},{t + 2000},7,"_Z12adamw_kernelPf"'); t += 2500
        if k == 0:
            print(f"memset,{t},{t + 1000},7,64 bytes"); t += 1500
PY
}
made_up_timeline > "$tmp/tl.csv"
python3 scripts/timeline.py "$tmp/tl.csv" --name made-up > "$tmp/tl.md" 2> "$tmp/tl.err"
check "timeline.py runs" test $? -eq 0
# a step: 0.5 us after the last AdamW, 20 x 58 us, 100 us (upload + gap), 8.5 us of optimizer:
# 1,269 us; kernels 20 x 55 + 3 x 2 = 1,106 us; copies 4 us; gaps 159 us (12.5%)
check "timeline: 3 steps measured" has "$tmp/tl.md" "mean of 3 steps"
check "timeline: wall time" has "$tmp/tl.md" "| wall time of a step | 1.27 |"
check "timeline: kernels" has "$tmp/tl.md" "| kernels running | 1.11 |"
check "timeline: gaps" has "$tmp/tl.md" "| nothing running (gaps) | 0.16 | 12.5% |"
check "timeline: groups" has "$tmp/tl.md" "| GEMMs | 1.00 |"
check "timeline: layernorm group" has "$tmp/tl.md" "| layernorm | 0.10 |"
check "timeline: the largest gap named" has "$tmp/tl.md" "- 97.0: HtoD 262144 bytes -> _Z12adamw_kernelPf"
# --against: the same steps with the GEMM 10% faster (45 us a call) and another layernorm kernel
GEMM_NS=45000 LN=_Z18layernorm_kernel2Pf made_up_timeline > "$tmp/tl2.csv"
python3 scripts/timeline.py "$tmp/tl.csv" --name ours --against "$tmp/tl2.csv" --against-name other \
    > "$tmp/vs.md" 2> "$tmp/vs.err"
check "timeline --against runs" test $? -eq 0
check "timeline --against: the header" has "$tmp/vs.md" \
    "| kernel (a step, as run) | ours count | ours ms | other count | other ms | ms a call, ours / other |"
check "timeline --against: a kernel of both, 50 against 45 us a call" has "$tmp/vs.md" \
    "| nvjet_sm90_tst_256x128 | 20.0 | 1.00 | 20.0 | 0.90 | 1.11 |"
check "timeline --against: a kernel of one" has "$tmp/vs.md" \
    "| _Z24layernorm_forward_kernelPf | 20.0 | 0.10 | - | - | - |"
check "timeline --against: the other's own" has "$tmp/vs.md" \
    "| _Z18layernorm_kernel2Pf | - | - | 20.0 | 0.10 | - |"
head -n 8 "$tmp/tl.csv" > "$tmp/short.csv"
python3 scripts/timeline.py "$tmp/short.csv" > /dev/null 2> "$tmp/short.err"
check "timeline: too few steps is an error" test $? -ne 0
check "timeline: says why" has "$tmp/short.err" "fewer than 3 optimizer steps"


# made_up_decode NAME D0 DK OVERLAP: 6 decode steps, each an embedding kernel (1 us), then 3
# kernels NAME of D0 + DK * step ns, each starting OVERLAP ns before the one before ends (as
# under PDL), then a 4 us gap to the next step's embedding
made_up_decode() {
    python3 - "$@" <<'PY'
import sys
name, d0, dk, overlap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("kind,start_ns,end_ns,stream,name")
t = 0
for step in range(6):
    print(f'kernel,{t},{t + 1000},7,"_Z14encoder_kernelPf"'); t += 1000
    d = d0 + dk * step
    for k in range(3):
        print(f'kernel,{t},{t + d},7,"{name}"'); t += d - overlap
    t += overlap + 4000
PY
}
# --cut: 3 kernels of 5 us a step, each starting 2 us before the one before ends
made_up_decode _Z11gemv_kernelPf 5000 0 2000 > "$tmp/dec.csv"
python3 scripts/timeline.py "$tmp/dec.csv" --cut encoder --skip 1 --last 3 > "$tmp/dec.md" 2> "$tmp/dec.err"
check "timeline --cut runs" test $? -eq 0
# a step: 1 us embedding, 3 gemv ending 3 us apart (the first 5 us after the embedding), 4 us gap
check "timeline --cut: the last 3 steps" has "$tmp/dec.md" "mean of 3 steps"
check "timeline --cut: wall time" has "$tmp/dec.md" "| wall time of a step | 0.02 |"
check "timeline --cut: per kernel, running and critical path" has "$tmp/dec.md" \
    "| _Z11gemv_kernelPf | 3.0 | 15.0 | 11.0 |"
check "timeline --cut: the embedding's share" has "$tmp/dec.md" "| _Z14encoder_kernelPf | 1.0 | 1.0 | 1.0 |"
# --period 2: a layer of two gemvs (one whole layer), the third gemv after it
python3 scripts/timeline.py "$tmp/dec.csv" --cut encoder --skip 1 --last 3 --period 2 > "$tmp/per.md" 2> "$tmp/dec.err"
check "timeline --period runs" test $? -eq 0
# the first gemv ends 5 us after the embedding, each next one 3 us after the one before
check "timeline --period: a layer's first call" has "$tmp/per.md" "| 1: _Z11gemv_kernelPf | 5.00 | 5.00 |"
check "timeline --period: a layer's second call" has "$tmp/per.md" "| 2: _Z11gemv_kernelPf | 5.00 | 3.00 |"
check "timeline --period: the cut kernel" has "$tmp/per.md" "| cut: _Z14encoder_kernelPf | 1.00 | 1.00 |"
check "timeline --period: after the layers" has "$tmp/per.md" "| after: _Z11gemv_kernelPf | 5.00 | 3.00 |"
# --trend: decode steps whose three attention kernels each take 300 ns more than the step
# before's (2,000 ns at step 0): 6,000 + 900 k ns a step
made_up_decode _Z11attn_kernelPf 2000 300 0 > "$tmp/trend.csv"
python3 scripts/timeline.py "$tmp/trend.csv" --cut encoder --skip 1 --trend attn > "$tmp/trend.md" 2> "$tmp/trend.err"
check "timeline --trend runs" test $? -eq 0
check "timeline --trend: the first step" has "$tmp/trend.md" "| at the first step | 6.0 |"
check "timeline --trend: the last step" has "$tmp/trend.md" "| at the last step (4) | 9.6 |"
check "timeline --trend: the fixed part" has "$tmp/trend.md" "| fitted: at step 0 (a) | 6.0 |"
check "timeline --trend: the cost a step more" has "$tmp/trend.md" "| fitted: a step more (b) | 0.9000 |"
python3 scripts/timeline.py "$tmp/trend.csv" --trend attn > /dev/null 2> "$tmp/trend.err"
check "timeline --trend without --cut is an error" test $? -ne 0
check "timeline --trend: says why" has "$tmp/trend.err" "--trend needs --cut"
python3 scripts/timeline.py "$tmp/dec.csv" --cut nosuchkernel > /dev/null 2> "$tmp/dec.err"
check "timeline --cut: no such kernel is an error" test $? -ne 0
check "timeline --cut: says why" has "$tmp/dec.err" "kernels named like 'nosuchkernel'"
# ---- the groups: this project's kernel names as compiled (mangled), each in its group ----------
python3 - > "$tmp/groups.txt" <<'PY'
import sys
sys.path.insert(0, "scripts")
from step_account import group_of
for name in ["_Z26column_partial_sums_kernelILi8E16GeluBackwardRowsEvPfT0_iii",
             "_Z26column_partial_sums_kernelILi8E10StoredRowsEvPfT0_iii",
             "_Z22add_column_sums_kernel13ColumnSumsDstiPKfii",
             "_Z25layernorm_backward_kernelILi8ELi3EEvPfP13__nv_bfloat16PKS1_S4_S4_PKfS6_ii",
             "_Z19gelu_forward_kernelILi8EEvP13__nv_bfloat16PKS0_m"]:
    print(f"{name}: {group_of(name)}")
PY
check "groups: the GELU backward (with fc's bias) is GELU" has "$tmp/groups.txt" "GeluBackwardRowsEvPfT0_iii: GELU"
check "groups: a stored dout's column sums are bias gradients" has "$tmp/groups.txt" "StoredRowsEvPfT0_iii: bias gradients"
check "groups: the column sums' adds are bias gradients" has "$tmp/groups.txt" "ColumnSumsDstiPKfii: bias gradients"
check "groups: the layernorm backward" has "$tmp/groups.txt" "S6_ii: layernorm"
check "groups: the GELU forward" has "$tmp/groups.txt" "PKS0_m: GELU"

# ---- step_account.py --------------------------------------------------------------------------
# ncu's CSV, one row per (kernel, metric): 2 steps of ours (encoder, GEMM, AdamW x 2) and of an
# llm.c-like run whose AdamW kernels have a copy kernel between each two
ncu_csv() {   # ncu_csv KERNEL...: time 1000 ns + 100 ns x position, DRAM 1 MB, 1.5 GHz
    echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    local i=0 k
    for k in "$@"; do
        for m in "gpu__time_duration.sum,ns,$((1000 + 100 * i))" "dram__bytes_read.sum,byte,1000000" \
                 "dram__bytes_write.sum,byte,0" "sm__cycles_elapsed.avg.per_second,hz,1500000000"; do
            IFS=, read -r metric unit value <<< "$m"
            printf '"%d","1","p","h","%s","1","7","(1,1,1)","(1,1,1)","0","9.0","s","%s","%s","%s"\n' \
                "$i" "$k" "$metric" "$unit" "$value"
        done
        i=$((i + 1))
    done
}
gemms=(nvjet_sm90_tst nvjet_sm90_tst nvjet_sm90_tst nvjet_sm90_tst nvjet_sm90_tst nvjet_sm90_tst
       nvjet_sm90_tst nvjet_sm90_tst nvjet_sm90_tst nvjet_sm90_tst)   # steps longer than a cluster's span
step=(encoder_forward_kernel "${gemms[@]}" gelu_forward_kernel adamw_kernel adamw_kernel)
ncu_csv "${step[@]}" "${step[@]}" > "$tmp/ours.csv"
lstep=(encoder_forward_kernel3 "${gemms[@]}" gelu_forward_kernel2 adamw_kernel3 copy_kernel
       adamw_kernel3 copy_kernel adamw_kernel3)
ncu_csv "${lstep[@]}" "${lstep[@]}" > "$tmp/llmc.csv"
python3 scripts/step_account.py --ours "$tmp/ours.csv" --llmc "$tmp/llmc.csv" --model 1:64:1:128 \
    --B 1 --T 64 --details "$tmp/kernels.csv" > "$tmp/account.md" 2> "$tmp/account.err"
check "step_account.py runs" test $? -eq 0
# ours' second step: kernels 14..27 (2.4 .. 3.7 us, 43 us in all); llm.c's: 17..33 (2.7 .. 4.3
# us, 59 us)
check "step_account: ours' second step, 14 kernels" \
    grep -qE "^\| all kernels \| 0\.04 \| 14 \|" "$tmp/account.md"
check "step_account: llm.c's second step, 17 kernels" \
    grep -qE "^\| all kernels \| 0\.04 \| 14 \| .* \| 0\.06 \| 17 \|" "$tmp/account.md"
check "step_account: llm.c's GELU in its step" grep -q '^llm.c,"GELU",1,' "$tmp/kernels.csv"
ncu_csv "${step[@]}" > "$tmp/one.csv"
python3 scripts/step_account.py --ours "$tmp/one.csv" --model 1:64:1:128 --B 1 --T 64 \
    > /dev/null 2> "$tmp/one.err"
check "step_account: one step is an error" test $? -ne 0
check "step_account: says why" has "$tmp/one.err" "1 optimizer step(s) found, 2 needed"


# ---- vs_llmc.sh --parse -----------------------------------------------------------------------
# logs in both programs' formats: ours' step lines, llm.c's (its loss column differs); steps
# 1-3 are slow (left out by --from 4); one round of d24 failed before any step; no llm.c d24 log
mkdir -p "$tmp/vs"
ours_log() {   # ours_log FILE MS...: steps 1..n
    local f=$1 i=0; shift
    : > "$f"
    for ms in "$@"; do i=$((i + 1))
        echo "step    $i/$# | loss 9.1 | norm 1.2 | lr 1.00e-04 | $ms ms | 1000 tok/s | MFU 40.0%" >> "$f"
    done
    echo "summary: $# steps, ..." >> "$f"
}
llmc_log() {
    local f=$1 i=0; shift
    echo "| model | d12 |" > "$f"
    for ms in "$@"; do i=$((i + 1))
        echo "step $(printf %4d $i)/$# | loss 9.100000 (+nanz)| norm 1.2000 (+nanz)| lr 1.00e-04 | $ms ms | -100.0% bf16 MFU | 1000 tok/s" >> "$f"
    done
}
ours_log "$tmp/vs/ours_d12_b16_r1.log" 500 300 300 100 100 100
ours_log "$tmp/vs/ours_d12_b16_r2.log" 500 300 300 110 110 110
llmc_log "$tmp/vs/llmc_d12_b16_r1.log" 500 300 300 120 120 120
llmc_log "$tmp/vs/llmc_d12_b16_r2.log" 500 300 300 120 120 120
ours_log "$tmp/vs/ours_d24_b8_r1.log" 900 200 200 200 200 200
echo "out of memory" > "$tmp/vs/ours_d24_b8_r2.log"
scripts/vs_llmc.sh --parse "$tmp/vs" --configs d12:16,d24:8 --steps 6 > "$tmp/vs.md" 2> "$tmp/vs.err"
check "vs_llmc.sh --parse runs" test $? -eq 0
# d12 B=16: ours 100 and 110 (mean 105: 16,384 tokens in 105 ms), llm.c 120 twice: 1.14x
check "vs_llmc: both formats, steps 4-6" has "$tmp/vs.md" "| d12 | 16 | 100.00 / 110.00 | 120.00 / 120.00 | 156038 | 136533 | 1.14x |"
check "vs_llmc: a failed run and a missing one" has "$tmp/vs.md" "| d24 | 8 | 200.00 / failed | - / - | 40960 | - | - |"
check "vs_llmc: the table is kept" has "$tmp/vs/table.md" "| d12 | 16 |"
scripts/vs_llmc.sh --parse "$tmp/vs" --configs d12 > /dev/null 2> "$tmp/vs.err"
check "vs_llmc: a config without its batch is an error" test $? -ne 0
check "vs_llmc: says why" has "$tmp/vs.err" "--configs must be MODEL:B pairs"
scripts/vs_llmc.sh --parse "$tmp/vs" --steps 3 --from 4 > /dev/null 2> "$tmp/vs.err"
check "vs_llmc: --from past --steps is an error" has "$tmp/vs.err" "--from (4) is past --steps (3)"

# ---- gemv_trace.py ----------------------------------------------------------------------------
# a FUSED_TRACE ring (layers/fused.cu) of 4 decode steps, each 2 layers of 4 calls (grids 4, 2,
# 4, 2 blocks) and an LM head (grid 6), one call every 2,500 ns: every block starts at the call's
# time, waits 1,000 ns, stages in 150, normalises in 300 (calls 1 and 3 and the LM head: the
# layernorm ones), its warps end 400 ns later, the last block's 200 ns after that.
made_up_trace() {
    python3 - "$1" <<'PY'
import struct, sys
records, words = 100, 12
ring, t = [], 1_000_000
for step in range(4):
    for i, g in enumerate([4, 2, 4, 2] * 2 + [6]):
        for b in range(g):
            wait = t + 1000
            normed = wait + 150 + (300 if i % 2 == 0 else 0)
            end = normed + 400 + (200 if b == g - 1 else 0)
            ring.append([0x1000 * (i + 1), b | g << 32, t, wait, wait + 150, normed] + [end] * 4 + [0, 0])
        t += 2500
n = len(ring)   # 120 records in a ring of 100: the first 20 overwritten, as the kernel's modulo does
slots = [[0] * words for _ in range(records)]
for k, r in enumerate(ring):
    slots[k % records] = r
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<3Q", records, words, n))
    for r in slots:
        f.write(struct.pack(f"<{words}Q", *r))
PY
}
made_up_trace "$tmp/gemv.trace"
python3 scripts/gemv_trace.py "$tmp/gemv.trace" --steps 2 > "$tmp/gemv.md" 2> "$tmp/gemv.err"
check "gemv_trace.py runs" test $? -eq 0
check "gemv_trace: whole steps in the ring" has "$tmp/gemv.md" "2 steps of 8 layer calls and the LM head"
# (the ring holds the last 3 1/3 steps: 3 LM heads, 2 whole steps between them, the partial
# first LM head left out) call 1: wait 1.00 after the start, staged 0.15, normed 0.30, tiles
# 0.40 + 0.2 / 4 blocks, last end 0.15 + 0.30 + 0.60 = 1.05, the next call's wait 1.45 later
check "gemv_trace: a layernorm call's stages" has "$tmp/gemv.md" \
    "| call 1 of 4 (grid 4) | 1.00 | 0.00 | 0.15 | 0.30 | 0.45 | 1.05 | 1.45 | 2.50 |"
check "gemv_trace: a call without a layernorm" has "$tmp/gemv.md" \
    "| call 2 of 4 (grid 2) | 1.00 | 0.00 | 0.15 | 0.00 | 0.50 | 0.75 | 1.75 | 2.50 |"
check "gemv_trace: the LM head, the step's last" has "$tmp/gemv.md" \
    "| LM head | 1.00 | 0.00 | 0.15 | 0.30 | 0.43 | 1.05 |  |  |"
python3 - "$tmp/empty.trace" <<'PY'
import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<3Q", 4, 12, 0) + bytes(4 * 12 * 8))
PY
python3 scripts/gemv_trace.py "$tmp/empty.trace" > /dev/null 2> "$tmp/gemv.err"
check "gemv_trace: an empty ring is an error" test $? -ne 0
check "gemv_trace: says why" has "$tmp/gemv.err" "no records"

finish
