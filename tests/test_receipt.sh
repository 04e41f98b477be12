#!/usr/bin/env bash
# tests/test_receipt.sh: the receipt's GPU-side script without a GPU. scripts/receipt_ncu.awk on
# made-up Nsight Compute CSVs (units, thousands separators, quoted kernel names with commas,
# ncu's own lines; and every malformed file it must refuse), then scripts/receipt.sh end to end
# with stand-ins for nvidia-smi, ncu, bench/attention and train_gpt2 on the PATH and in a
# made-up build folder, checking that the sums it reports are the ones in the CSVs it was given.
# Ends like the C tests: "tests/test_receipt.sh: N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
name=tests/test_receipt.sh
. tests/shell_test.sh

header='"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"'
units='"","","","","","","","","","","","byte","byte","nsecond"'
row() {   # row ID NAME READ WRITE NS
    printf '"%s","4242","attention","gpu1","%s","1","7","(256, 1, 1)","(96, 1, 1)","0","9.0","%s","%s","%s"\n' "$@"
}
sums() { awk -f scripts/receipt_ncu.awk "$@" 2>"$tmp/err"; }

# ---- receipt_ncu.awk: sums --------------------------------------------------------------------
{
    echo "==PROF== Connected to process 4242 (bench/attention)"
    echo "$header"; echo "$units"
    row 0 'void permute_heads_kernel<8, true>(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, int, int, int, int, int)' "1,048,576" "2,097,152" "5,120"
    row 1 'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas' "3000" "4000.25" "1000"
    echo "==PROF== Disconnected from process 4242"
} >"$tmp/base.csv"
check "sums over two kernels, separators dropped, names with commas" test "$(sums "$tmp/base.csv")" = "2,1051576,2101152,6120"
sed -e 's/"byte","byte","nsecond"/"Kbyte","Mbyte","usecond"/' "$tmp/base.csv" >"$tmp/units.csv"
check "units scale the values (Kbyte, Mbyte, usecond)" test "$(sums "$tmp/units.csv")" = "2,1051576000,2101152250000,6120000"
tr -d '\r' <"$tmp/base.csv" | sed 's/$/\r/' >"$tmp/crlf.csv"
check "CRLF line ends" test "$(sums "$tmp/crlf.csv")" = "2,1051576,2101152,6120"
# columns found by name, wherever ncu puts them
awk -F'","' -v OFS='","' '{ t = $12; $12 = $13; $13 = t; print }' "$tmp/base.csv" >"$tmp/swapped.csv"
check "columns found by name, not position" test "$(sums "$tmp/swapped.csv")" = "2,1051576,2101152,6120"

refused() {   # refused DESCRIPTION FILE PATTERN: exit 1 and PATTERN in the message
    local what=$1 file=$2 pattern=$3 rc
    awk -f scripts/receipt_ncu.awk "$file" >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "$what: refused" test "$rc" -eq 1
    check "$what: says why" grep -q "$pattern" "$tmp/err"
    check "$what: prints no sums" test ! -s "$tmp/out"
}
sed 's/,"dram__bytes_write.sum"//; s/,"byte","nsecond"/,"nsecond"/' "$tmp/base.csv" >"$tmp/nocol.csv"
refused "a metric column missing" "$tmp/nocol.csv" "no column dram__bytes_write.sum"
grep -v '^"","' "$tmp/base.csv" >"$tmp/nounits.csv"
refused "no units row" "$tmp/nounits.csv" "no units row"
sed 's/"byte","byte","nsecond"/"byte","parsec","nsecond"/' "$tmp/base.csv" >"$tmp/badunit.csv"
refused "an unknown unit" "$tmp/badunit.csv" "unit 'parsec'"
sed 's/"3000"/"n\/a"/' "$tmp/base.csv" >"$tmp/na.csv"
refused "a value n/a" "$tmp/na.csv" "'n/a', not a number"
{ echo "$header"; echo "$units"; } >"$tmp/empty.csv"
refused "no kernel rows" "$tmp/empty.csv" "no kernel rows"
echo "Kernel Name,Duration" >"$tmp/other.csv"
refused "not an ncu raw page" "$tmp/other.csv" "no header row"
sed 's/"(96, 1, 1)"/"(96, 1, 1)/' "$tmp/base.csv" | head -n 4 >"$tmp/quote.csv"
refused "an unclosed quote" "$tmp/quote.csv" "quote is not closed"

# ---- receipt_ncu.awk: a training step --------------------------------------------------------------
# LAYERS layers of each backend's kernels per step, with a byte count per kernel kind: attention
# kernels read 100 and write 10, every other kernel reads 1000 and writes 1; 1 ns each
step_csv() {   # step_csv BACKEND LAYERS STEPS
    local be=$1 L=$2 S=$3 id=0 s l
    echo "$header"; echo "$units"
    k() { row $id "$1" "$2" "$3" 1; id=$((id + 1)); }
    o() { k "$1" 1000 1; }           # not attention
    a() { k "$1" 100 10; }           # attention
    o "void init_weights_kernel(float *, int)"
    for s in $(seq 1 "$S"); do
        o "void encoder_forward_kernel<8>(__nv_bfloat16 *, const int *)"
        for l in $(seq 1 "$L"); do
            o "void layernorm_forward_kernel(__nv_bfloat16 *)"
            if [ "$be" = naive ]; then
                a "void permute_heads_kernel<8, true>(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, int, int, int, int, int)"
                a "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"
                a "void causal_softmax_kernel<8>(__nv_bfloat16 *, unsigned long, int)"
                a "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x64x64_cublas"
                a "void permute_heads_kernel<8, false>(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, int, int, int, int, int)"
            else
                a "void (anonymous namespace)::flash_forward_sm90_kernel<64, 2>(CUtensorMap, CUtensorMap, __nv_bfloat16 *, float *, int, int, int, int, float)"
            fi
            o "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublasLt"
        done
        o "void crossentropy_kernel(float *)"
        for l in $(seq 1 "$L"); do
            o "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_cublasLt"
            if [ "$be" = naive ]; then
                a "void permute_heads_kernel<8, true>(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, int, int, int, int, int)"
                a "void permute_heads_kernel<8, true>(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, int, int, int, int, int)"
                a "sm90_xmma_gemm_a"; a "sm90_xmma_gemm_b"
                a "void causal_softmax_backward_kernel<8>(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, int)"
                a "sm90_xmma_gemm_c"; a "sm90_xmma_gemm_d"
                a "void permute_heads_kernel<8, false>(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, int, int, int, int, int)"
            else
                a "void (anonymous namespace)::flash_backward_prep_kernel<64>(float *, float *, float *, unsigned int *, int, const __nv_bfloat16 *, const __nv_bfloat16 *, const float *, int, int, int, int)"
                a "void (anonymous namespace)::flash_backward_sm90_kernel<64, false>(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, __nv_bfloat16 *, const float *, const float *, unsigned int *, int, int, int, int, float, float)"
                a "void (anonymous namespace)::flash_dq_convert_kernel<64>(__nv_bfloat16 *, const float *, int, int, float)"
            fi
            o "void layernorm_backward_kernel(__nv_bfloat16 *)"
        done
        o "void grad_sumsq_kernel(float *)"
        o "void adamw_kernel<4, true>(__nv_bfloat16 *, float *, const __nv_bfloat16 *, float *, float *, unsigned long, AdamArgs)"
        o "void adamw_kernel<4, true>(__nv_bfloat16 *, float *, const __nv_bfloat16 *, float *, float *, unsigned long, AdamArgs)"
    done
    o "void float_to_bf16_kernel(__nv_bfloat16 *)"
}
expect_step() {   # expect_step BACKEND LAYERS: step 2's sums by the rule above
    awk -v be="$1" -v L="$2" 'BEGIN {
        a = be == "naive" ? L * (5 + 8) : L * (1 + 3)   # attention kernels per step
        o = 1 + L * 2 + 1 + L * 2 + 3                    # the others
        printf "%d,%d,%d,%d,%d,%d,%d,%d\n", a + o, 100 * a + 1000 * o, 10 * a + o, a + o, a, 100 * a, 10 * a, a }'
}
for be in naive flash; do
    step_csv "$be" 3 3 >"$tmp/step_$be.csv"
    got=$(awk -v step=2 -v attention=$be -v layers=3 -f scripts/receipt_ncu.awk "$tmp/step_$be.csv" 2>"$tmp/err")
    check "$be step 2: the step's and attention's sums ($got)" test "$got" = "$(expect_step $be 3)"
    awk -v step=2 -v attention=$be -v layers=4 -f scripts/receipt_ncu.awk "$tmp/step_$be.csv" >/dev/null 2>"$tmp/err"
    check "$be: the wrong number of layers is refused" grep -q "not 4 and 4" "$tmp/err"
    awk -v step=4 -v attention=$be -v layers=3 -f scripts/receipt_ncu.awk "$tmp/step_$be.csv" >/dev/null 2>"$tmp/err"
    check "$be: a step past the profile is refused" grep -q "fewer than step 4" "$tmp/err"
done
# naive attention kernels read as flash's: none found, refused
awk -v step=2 -v attention=flash -v layers=3 -f scripts/receipt_ncu.awk "$tmp/step_naive.csv" >/dev/null 2>"$tmp/err"
check "naive's kernels read as flash's are refused" grep -q "attention kernels not recognised" "$tmp/err"
awk -v step=x -f scripts/receipt_ncu.awk "$tmp/base.csv" >/dev/null 2>"$tmp/err"
check "a step that is not a number is refused" grep -q "step must be a positive integer" "$tmp/err"

# ---- receipt.sh end to end, with stand-ins ------------------------------------------------------------
fake=$tmp/fake; bin=$fake/bin; build=$fake/build
mkdir -p "$bin" "$build/cuda-flash/bench" "$build/cuda-naive" "$fake/data"
printf 'x' >"$fake/data/tiny_shakespeare_train.bin"; printf 'x' >"$fake/data/tiny_shakespeare_val.bin"
cat >"$bin/nvidia-smi" <<'EOF'
#!/bin/sh
echo "GPU 0: Fake H200 (UUID: GPU-0)"
EOF
# the bench: the receipt line, its numbers made from the shape so that each row is told apart
cat >"$build/cuda-flash/bench/attention" <<'EOF'
#!/usr/bin/env bash
while [ $# -gt 0 ]; do case "$1" in --receipt) pass=$2;; --backend) be=$2;; --nh) nh=$2;; --hs) hs=$2;; --tmin) t=$2;; --tokens) tok=$2;; esac; shift 2; done
echo "# Fake H200, 132 SMs"
if [ "$pass" = fwd ]; then f=$((nh * t)); else f=$((nh * t * 3)); fi
echo "receipt: backend=$be pass=$pass B=$((tok / t)) T=$t NH=$nh HS=$hs path=fake tiles=- flops=$((f * 1000)) counted_read=$((f * 10)) counted_write=$f event_ms=0.5000"
EOF
for be in naive flash; do
    printf '#!/bin/sh\necho "train_gpt2 stand-in: $*"\n' >"$build/cuda-$be/train_gpt2"
done
# ncu: profiling runs the program and notes what ran; --import writes a CSV for it (attention
# passes: two kernels of 1,000 + 2,000 bytes read per NH, 500 written, 1 us each; the training
# step: step_csv above with 12 layers)
cat >"$bin/ncu" <<EOF
#!/usr/bin/env bash
[ "\$1" = --version ] && { echo "NVIDIA (R) Nsight Compute Command Line Profiler"; echo "Version 2025.3.0.0 (fake)"; exit 0; }
if [ "\$1" = --import ]; then
    rep=\$2
    if grep -q train_gpt2 "\$rep"; then
        be=\$(sed -n 's/.*cuda-\([a-z]*\)\/train_gpt2.*/\1/p' "\$rep")
        source "$tmp/step_fn.sh"; step_csv "\$be" 12 2
    else
        nh=\$(tr ' ' '\n' <"\$rep" | grep -A1 -- '^--nh\$' | tail -n 1)
        echo '$header'; echo '$units'
        printf '"0","1","a","h","kernel_a(int, int)","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","%s","500","1,000"\n' "\$((nh * 1000))"
        printf '"1","1","a","h","kernel_b","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","%s","500","1,000"\n' "\$((nh * 2000))"
    fi
    exit 0
fi
while [ \$# -gt 0 ]; do
    case "\$1" in
        --export) rep=\$2.ncu-rep; shift 2 ;;
        --force-overwrite) shift ;;
        --profile-from-start|--metrics|--clock-control) shift 2 ;;
        *) break ;;
    esac
done
echo "\$*" >"\$rep"
echo "==PROF== Connected"
"\$@"
EOF
{ declare -f row; declare -f step_csv; echo "header='$header'"; echo "units='$units'"; } >"$tmp/step_fn.sh"
chmod +x "$bin"/* "$build/cuda-flash/bench/attention" "$build"/cuda-*/train_gpt2
rout=$tmp/receipt
PATH="$bin:$PATH" COMMIT=abc1234 scripts/receipt.sh "$rout" --build "$build" --data "$fake/data" \
    --shapes 12:64:1024:16,16:64:4096:16 >"$tmp/run.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || tail -n 30 "$tmp/run.log"
check "receipt.sh with stand-ins exits 0" test "$rc" -eq 0
check "receipt.csv: header" test "$(head -n 1 "$rout/receipt.csv" 2>/dev/null)" = \
    "NH,HS,T,B,backend,pass,path,tiles,flops,counted_read_bytes,counted_write_bytes,measured_read_bytes,measured_write_bytes,kernels,ncu_ms,event_ms"
check "receipt.csv: 8 rows (2 shapes x 2 passes x 2 backends)" test "$(tail -n +2 "$rout/receipt.csv" | wc -l)" -eq 8
# NH=16 T=4096 fwdbwd flash: counts from the bench's line, sums from ncu's CSV
check "receipt.csv: a row's counted and measured figures" grep -qx \
    "16,64,4096,16,flash,fwdbwd,fake,-,196608000,1966080,196608,48000,1000,2,0.0020,0.5000" "$rout/receipt.csv"
check "receipt.md: the attention table" grep -qE '^\| NH=12 HS=64 T=1024 B=16 \| fwd\+bwd \| flash \|' "$rout/receipt.md"
check "receipt.md: the paper's A100 figures" grep -q "66.6 GFLOPs, 40.3 GB" "$rout/receipt.md"
check "receipt.md: commit and device" grep -q "commit: abc1234" "$rout/receipt.md"
check "receipt_step.csv: both backends" test "$(cut -d, -f1 "$rout/receipt_step.csv" 2>/dev/null | tr '\n' ' ')" = "backend naive flash "
# the step: step_csv with 12 layers, its step 2 by expect_step; counted = 12 x the bench's fwdbwd
for be in naive flash; do
    IFS=, read -r k r w ns ak ar aw ans <<<"$(expect_step $be 12)"
    check "receipt_step.csv: $be's step 2" grep -q "^$be,$k,$r,$w,[0-9.]*,$ak,$ar,$aw,[0-9.]*,$((12 * (12 * 1024 * 3) * 11))\$" "$rout/receipt_step.csv"
done
check "receipt.md: the step table" grep -qE '^\| naive \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \|' "$rout/receipt.md"
check "receipt_bars.csv: one row per shape and pass" test "$(tail -n +2 "$rout/receipt_bars.csv" | wc -l)" -eq 4
if command -v gnuplot >/dev/null 2>&1; then
    check "receipt.png drawn" test -s "$rout/receipt.png"
else
    skipped=$((skipped + 1)); echo "SKIP $name: no gnuplot, receipt.png not checked"
fi

# without ncu: the counted figures, measured columns empty, no step
PATH="$bin:$PATH" scripts/receipt.sh "$tmp/noncu" --ncu none --no-plot --build "$build" --data "$fake/data" \
    --shapes 12:64:1024:16 >"$tmp/noncu.log" 2>&1
check "without ncu: exits 0" test $? -eq 0
check "without ncu: says so" grep -q "ncu) not found" "$tmp/noncu.log"
check "without ncu: measured columns empty" grep -q "^12,64,1024,16,naive,fwd,fake,-,12288000,122880,12288,,,,,0.5000$" "$tmp/noncu/receipt.csv"
check "without ncu: the step left out, and said so" grep -q "training step needs ncu" "$tmp/noncu.log"
# refusals: bad shapes, no bench, no GPU
PATH="$bin:$PATH" scripts/receipt.sh "$tmp/bad" --shapes 12:64 --build "$build" >"$tmp/bad.log" 2>&1
check "bad --shapes refused" grep -q "shapes must be NH:HS:T:B" "$tmp/bad.log"
PATH="$bin:$PATH" scripts/receipt.sh "$tmp/bad" --build "$tmp/nowhere" >"$tmp/bad.log" 2>&1
check "a missing bench refused, naming it" grep -q "nowhere/cuda-flash/bench/attention is missing" "$tmp/bad.log"
mkdir -p "$tmp/nogpu"; printf '#!/bin/sh\nexit 9\n' >"$tmp/nogpu/nvidia-smi"; chmod +x "$tmp/nogpu/nvidia-smi"
PATH="$tmp/nogpu:$PATH" scripts/receipt.sh "$tmp/bad" --build "$build" >"$tmp/bad.log" 2>&1
check "no GPU: refused with a reason" grep -q "no GPU visible" "$tmp/bad.log"

finish
