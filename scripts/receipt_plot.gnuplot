# scripts/receipt_plot.gnuplot: the receipt's bars (scripts/receipt.sh), naive beside flash for
# each attention shape and pass: GFLOP counted, GB moved (counted, and measured by Nsight Compute
# where it ran), ms.
#   gnuplot -c scripts/receipt_plot.gnuplot DIR [MACHINE]
# DIR holds receipt_bars.csv (label,naive_gflop,flash_gflop,naive_counted_gb,flash_counted_gb,
# naive_measured_gb,flash_measured_gb,naive_ms,flash_ms; the measured columns empty without ncu).
# Writes DIR/receipt.png. scripts/compare_plot.gnuplot calls it when receipt_bars.csv is there, so
# a comparison folder from a GPU machine without gnuplot is drawn later in one go.

if (ARGC < 1) { print "usage: gnuplot -c scripts/receipt_plot.gnuplot DIR [MACHINE]"; exit status 2 }
receipt_dir = ARG1
receipt_machine = ARGC >= 2 ? ARG2 : ""
bars = receipt_dir . "/receipt_bars.csv"
if (system(sprintf("test -s '%s' && echo yes || echo no", bars)) ne "yes") {
    print "receipt_plot.gnuplot: " . bars . " is missing or empty"; exit status 1
}
# the measured columns hold numbers only where ncu ran
measured = int(system(sprintf("awk -F, 'NR > 1 && $6 != \"\" { n++ } END { print n + 0 }' '%s'", bars))) > 0

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1300,1200 font "sans,11" noenhanced
} else {
    set terminal png size 1300,1200 noenhanced
}
set output receipt_dir . "/receipt.png"
set datafile separator ","
set datafile missing ""
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics lc rgb "#dddddd"
set key top left box opaque
set xtics rotate by -20 nomirror
set rmargin 12   # the last rotated label runs right of its bar
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0   # room above the tallest bar
naive_color = "#d62728"
flash_color = "#1f77b4"

set multiplot layout 3,1 title "The exchange, attention alone: flash does more arithmetic and moves fewer bytes" . \
    (receipt_machine eq "" ? "" : "\n" . receipt_machine)
set title "FLOPs (counted: matrix products, causal, flash's backward recomputation included)"
set ylabel "GFLOP"
plot bars every ::1 using 2:xtic(1) lc rgb naive_color title "naive", \
     '' every ::1 using 3 lc rgb flash_color title "flash"

if (measured) {
    set title "DRAM bytes read + written (measured: Nsight Compute dram__bytes, hatched: pencil count with no cache)"
    set ylabel "GB"
    plot bars every ::1 using 6:xtic(1) lc rgb naive_color title "naive, measured", \
         '' every ::1 using 4 lc rgb naive_color fill pattern 4 title "naive, counted", \
         '' every ::1 using 7 lc rgb flash_color title "flash, measured", \
         '' every ::1 using 5 lc rgb flash_color fill pattern 4 title "flash, counted"
} else {
    set title "DRAM bytes read + written (pencil count with no cache; no Nsight Compute to measure)"
    set ylabel "GB"
    plot bars every ::1 using 4:xtic(1) lc rgb naive_color title "naive, counted", \
         '' every ::1 using 5 lc rgb flash_color title "flash, counted"
}

set title "Time" . (measured ? " (sum of the pass's kernel durations, ncu)" : " (median of 21 passes, CUDA events)")
set ylabel "ms"
plot bars every ::1 using 8:xtic(1) lc rgb naive_color title "naive", \
     '' every ::1 using 9 lc rgb flash_color title "flash"
unset multiplot
