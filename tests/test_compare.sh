#!/usr/bin/env bash
# tests/test_compare.sh: runs the attention comparison (scripts/compare.sh) on the CPU in its
# tiny mode, in a temporary folder, and checks what it wrote: both training logs with the right
# columns and the same steps, the markdown table with both backends and their numbers, the
# microbenchmark's CSV, and every PNG (signature, size, dimensions read from its IHDR chunk).
# Ends like the C tests (tests/test.h): "tests/test_compare.sh: N passed, N failed, N skipped",
# and exits non-zero when anything failed. Needs gnuplot (scripts/setup.sh) and the data
# (`make data`, which compare.sh runs; CI sets DATA_SRC).
set -u
cd "$(dirname "$0")/.." || exit 1
name=tests/test_compare.sh
. tests/shell_test.sh
out="$tmp/compare"
steps=6   # what --tiny runs

# ---- the run ----------------------------------------------------------------------------------------
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "FAIL $name: gnuplot is not installed (scripts/setup.sh installs Debian's gnuplot-nox)"
    failed=$((failed + 1)); finish
fi
scripts/compare.sh --tiny --backend cpu --out "$out" >"$tmp/run.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    tail -n 40 "$tmp/run.log"
    echo "FAIL $name: scripts/compare.sh --tiny --backend cpu exited with $rc"
    failed=$((failed + 1)); finish
fi
passed=$((passed + 1))
check "the run says it compares on the CPU" grep -q 'BACKEND=cpu' "$tmp/run.log"

# ---- training logs ------------------------------------------------------------------------------------
header="step,kind,loss,grad_norm,lr,ms,tokens_per_s"
# well-formed: the header, then rows of 7 fields, kind train or val, numeric step and loss, and
# on train rows numeric grad_norm, lr, ms, tokens_per_s
well_formed() {
    [ "$(head -n 1 "$1")" = "$header" ] || { echo "  $1: header is '$(head -n 1 "$1")'"; return 1; }
    awk -F, 'NR == 1 { next }
        function num(x) { return x ~ /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ }
        NF != 7 || $1 !~ /^[0-9]+$/ || !num($3) || ($2 != "train" && $2 != "val") ||
        ($2 == "train" && !(num($4) && num($5) && num($6) && num($7))) {
            printf "  %s line %d: %s\n", FILENAME, NR, $0; bad = 1 }
        END { exit bad }' "$1"
}
for attn in naive flash; do
    f="$out/train_$attn.csv"
    check "train_$attn.csv exists" test -s "$f"
    [ -s "$f" ] || continue
    check "train_$attn.csv: header and rows well formed" well_formed "$f"
    check "train_$attn.csv: $steps train rows, steps 1..$steps" \
        test "$(grep ',train,' "$f" | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 1 $steps) "
    check "train_$attn.csv: validation rows" grep -q ',val,' "$f"
done
if [ -s "$out/train_naive.csv" ] && [ -s "$out/train_flash.csv" ]; then
    check "both logs have the same steps and kinds" \
        test "$(cut -d, -f1,2 "$out/train_naive.csv")" = "$(cut -d, -f1,2 "$out/train_flash.csv")"
    # same seed, same batches, fp32: the two backends agree closely on every loss
    check "naive and flash losses agree within 1e-3" awk -F, '
        FNR == 1 { next }
        FILENAME == ARGV[1] { n[$1 "," $2] = $3; next }
        { d = $3 - n[$1 "," $2]; if (d < 0) d = -d; if (d > 1e-3) { print "  step " $1 " " $2 ": |difference| " d; bad = 1 } }
        END { exit bad }' "$out/train_naive.csv" "$out/train_flash.csv"
fi

# ---- table.md --------------------------------------------------------------------------------------------
table="$out/table.md"
check "table.md exists" test -s "$table"
row_has_numbers() {   # row_has_numbers ATTN: "| attn | ms | tok/s | mem UNIT | train | val |"
    grep -qE "^\| $1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ [KMGT]?i?B \| [0-9.]+ \| [0-9.]+ \|$" "$table"
}
if [ -s "$table" ]; then
    check "table.md: a naive row with its numbers" row_has_numbers naive
    check "table.md: a flash row with its numbers" row_has_numbers flash
    check "table.md: the flash vs naive row with speedups" grep -qE '^\| flash vs naive \| [0-9.]+x' "$table"
    check "table.md: the machine" grep -qE '^- machine: .+' "$table"
    check "table.md: the commit" grep -qE '^- commit: [0-9a-f]{7,}|^- commit: unknown' "$table"
fi
check "the table is printed at the end of the run" grep -q '^| flash vs naive |' "$tmp/run.log"

# ---- attention microbenchmark ----------------------------------------------------------------------------
acsv="$out/attention.csv"
check "attention.csv exists" test -s "$acsv"
check "attention.csv: its header" test "$(head -n 1 "$acsv" 2>/dev/null)" = \
    "T,B,NH,HS,backend,status,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops,counted_bytes,measured_bytes"
check "attention.csv: naive and flash rows" \
    test "$(cut -d, -f5 "$acsv" 2>/dev/null | sort -u | tr '\n' ' ')" = "backend flash naive "
check "attention.csv: every row ok or oom, ok rows with numeric times" awk -F, '
    NR == 1 { next }
    $6 != "oom" && !($6 == "ok" && $7 ~ /^[0-9.]+$/ && $9 ~ /^[0-9.]+$/ && $11 ~ /^[0-9]+$/) {
        print "  attention.csv line " NR ": " $0; bad = 1 }
    END { exit bad }' "$acsv"
check "table.md: the attention table" grep -qE '^\| T \|' "$table"

# ---- the sweep across T (--tiny: T = 32, 64 at B*T = 64 tokens) ---------------------------------------------
scsv="$out/sweep.csv"
check "sweep.csv exists" test -s "$scsv"
check "sweep.csv: its header" test "$(head -n 1 "$scsv" 2>/dev/null)" = \
    "T,B,backend,status,ms_per_step,tokens_per_s,peak_bytes"
check "sweep.csv: T and B of each row, naive then flash" test "$(tail -n +2 "$scsv" | cut -d, -f1-3 | tr '\n' ' ')" = \
    "32,2,naive 32,2,flash 64,1,naive 64,1,flash "
check "sweep.csv: every row ok with numeric ms, tokens/s and bytes" awk -F, '
    NR == 1 { next }
    !($4 == "ok" && $5 ~ /^[0-9.]+$/ && $6 ~ /^[0-9.]+$/ && $7 ~ /^[0-9]+$/ && $7 > 0) {
        print "  sweep.csv line " NR ": " $0; bad = 1 }
    END { exit bad }' "$scsv"
check "table.md: the sweep table with both T" grep -qE '^\| 64 \| 1 \| [0-9]+ \| [0-9]+ \| [0-9.]+x \|' "$table"
check "every sweep run left its log" test -s "$out/sweep_naive_T32.log" -a -s "$out/sweep_flash_T64.log"

# ---- PNGs: signature, IHDR, a plausible size and dimensions ---------------------------------------------
png_ok() {
    local f=$1 size sig w h
    [ -f "$f" ] || { echo "  $f: missing"; return 1; }
    size=$(wc -c <"$f")
    [ "$size" -gt 10000 ] || { echo "  $f: $size bytes, too small for a plot"; return 1; }
    sig=$(od -An -tx1 -N16 "$f" | tr -d ' \n')
    # 8-byte PNG signature, then the IHDR chunk: length 13, type "IHDR"
    [ "$sig" = "89504e470d0a1a0a0000000d49484452" ] || { echo "  $f: not a PNG (starts $sig)"; return 1; }
    # complete: it ends with the empty IEND chunk
    [ "$(tail -c 12 "$f" | od -An -tx1 | tr -d ' \n')" = "0000000049454e44ae426082" ] ||
        { echo "  $f: truncated (no IEND chunk at the end)"; return 1; }
    w=$((16#$(od -An -tx1 -j16 -N4 "$f" | tr -d ' \n')))
    h=$((16#$(od -An -tx1 -j20 -N4 "$f" | tr -d ' \n')))
    [ "$w" -ge 400 ] && [ "$w" -le 4000 ] && [ "$h" -ge 300 ] && [ "$h" -le 4000 ] ||
        { echo "  $f: ${w}x$h pixels"; return 1; }
}
for p in loss.png step_ms.png sweep_tokens.png sweep_memory.png attention_time.png attention_memory.png; do
    check "$p is a well-formed PNG" png_ok "$out/$p"
done

finish
