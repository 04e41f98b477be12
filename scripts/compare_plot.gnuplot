# scripts/compare_plot.gnuplot: the plots of scripts/compare.sh, drawn from the files it wrote.
#   gnuplot -c scripts/compare_plot.gnuplot DIR [MACHINE] [RUN]
# MACHINE (e.g. "cuda: NVIDIA H200; commit abc1234") goes under every title, RUN (the training
# configuration) under the training plots' titles.
# DIR holds train_naive.csv and train_flash.csv (train_gpt2's log.csv: step,kind,loss,grad_norm,
# lr,ms,tokens_per_s) and, when the microbenchmark ran, attention.csv (bench/attention.cu's
# --csv: T,B,NH,HS,backend,status,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops,counted_bytes,
# measured_bytes; status is ok or oom). Writes into DIR:
#   loss.png               training loss against step, both backends, and flash minus naive
#   step_ms.png            time per training step against step (the warm-up step left out)
#   sweep_tokens.png       training tokens/s against T, both backends (when sweep.csv is there:
#                          T,B,backend,status,ms_per_step,tokens_per_s,peak_bytes)
#   sweep_memory.png       training peak memory against T, both backends, log-log
#   attention_time.png     attention forward and forward+backward time against T, log-log, with
#                          PyTorch's cuDNN and FlashAttention-2 when torch_attention.csv is there
#                          (T,B,backend,fwd_ms,fwdbwd_ms)
#   attention_memory.png   attention memory against T, log-log
#   receipt.png            the receipt's bars (scripts/receipt_plot.gnuplot, when receipt_bars.csv
#                          is there: scripts/receipt.sh ran on a GPU)
# On the sweep and attention plots a red cross marks each T where naive could not allocate.
# Rows are picked with grep and awk, so DIR must not contain a single quote.

if (ARGC < 1) { print "usage: gnuplot -c scripts/compare_plot.gnuplot DIR [MACHINE] [RUN]"; exit status 2 }
dir = ARG1
machine = ARGC >= 2 ? ARG2 : ""
run = ARGC >= 3 ? ARG3 : ""
naive_csv = dir . "/train_naive.csv"
flash_csv = dir . "/train_flash.csv"
attention_csv = dir . "/attention.csv"
sweep_csv = dir . "/sweep.csv"
torch_csv = dir . "/torch_attention.csv"
file_exists(f) = system(sprintf("test -s '%s' && echo yes || echo no", f)) eq "yes"

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1000,620 font "sans,11" noenhanced
} else {
    set terminal png size 1000,620 noenhanced
}
set datafile separator ","
set grid lc rgb "#dddddd"
set key top right box opaque
set border lc rgb "#444444"
naive_color = "#d62728"
flash_color = "#1f77b4"
cudnn_color = "#2ca02c"
fa2_color = "#9467bd"
# a title, and under it what the plot was measured on
title(main, sub) = sub eq "" ? main : main . "\n" . sub
training_sub = machine . (machine ne "" && run ne "" ? "; " : "") . run

# rows of a training log of one kind (train or val), without the header
rows(file, kind) = sprintf("< grep ',%s,' '%s'", kind, file)
# train loss of flash minus naive at each step both logs have: "step difference"
loss_diff = sprintf("< awk -F, '$2 == \"train\" { if (FILENAME == ARGV[1]) n[$1] = $3; else if ($1 in n) print $1 \",\" ($3 - n[$1]) }' '%s' '%s'", naive_csv, flash_csv)

# integer tics on the step axis, about 5 to 10 of them: a 1, 2 or 5 times a power of ten
tic_step(n) = (d = 10**floor(log10(n > 8 ? n / 8.0 : 1)), n / d <= 8 ? d : n / d <= 16 ? 2 * d : 5 * d)
stats rows(naive_csv, "train") using 1 name "steps" nooutput
last_step = steps_max

# ---- loss.png: the two loss curves, and below them their difference ------------------------------
set output dir . "/loss.png"
stats loss_diff using 2 name "diff" nooutput
diff_span = abs(diff_min) > abs(diff_max) ? abs(diff_min) : abs(diff_max)
diff_span = diff_span > 0 ? 1.2 * diff_span : 1e-6
set multiplot
set lmargin 14
set rmargin 3
set xrange [0:last_step]
set xtics tic_step(last_step)
set size 1, 0.70
set origin 0, 0.30
set bmargin 0.5
set title title("Training loss, naive vs flash attention (same seed, same batches)", training_sub)
set ylabel "cross-entropy loss (nats/token)"
set format x ""
set xlabel ""
plot rows(naive_csv, "train") using 1:3 with lines lw 3 lc rgb naive_color title "naive, train", \
     rows(flash_csv, "train") using 1:3 with lines lw 1.5 dt 2 lc rgb flash_color title "flash, train", \
     rows(naive_csv, "val") using 1:3 with points pt 7 ps 1.6 lc rgb naive_color title "naive, validation", \
     rows(flash_csv, "val") using 1:3 with points pt 2 ps 1.6 lw 2 lc rgb flash_color title "flash, validation"
set size 1, 0.30
set origin 0, 0
set tmargin 0.5
set bmargin 3.5
unset title
set format x "%g"
set xlabel "optimizer step"
set ylabel "flash - naive"
set format y "%.0e"
set ytics diff_span / 2
set yrange [-diff_span:diff_span]
set key top left
plot loss_diff using 1:2 with linespoints pt 7 ps 0.5 lc rgb "#555555" title "train loss, flash minus naive (nats/token)", \
     0 with lines lc rgb "#999999" dt 3 notitle
unset multiplot
set size 1, 1
set origin 0, 0
set tmargin
set bmargin
set lmargin
set rmargin
set format y "%g"
set ytics autofreq
set yrange [*:*]
set key top right

# ---- step_ms.png: time per step -------------------------------------------------------------------
# step 1 is left out: it includes one-time work (first touches of memory, library set-up)
set output dir . "/step_ms.png"
stats rows(naive_csv, "train") every ::1 using 6 name "naive_ms" nooutput
stats rows(flash_csv, "train") every ::1 using 6 name "flash_ms" nooutput
set title title("Time per training step (step 1, a warm-up, left out)", training_sub)
set xlabel "optimizer step"
set ylabel "time per step (ms)"
set xrange [1:last_step]
set yrange [0:*]
set key bottom right
plot rows(naive_csv, "train") every ::1 using 1:6 with linespoints pt 7 ps 0.6 lc rgb naive_color title "naive", \
     rows(flash_csv, "train") every ::1 using 1:6 with linespoints pt 5 ps 0.6 lc rgb flash_color title "flash", \
     naive_ms_mean with lines dt 2 lc rgb naive_color title sprintf("naive mean %.1f ms", naive_ms_mean), \
     flash_ms_mean with lines dt 2 lc rgb flash_color title sprintf("flash mean %.1f ms", flash_ms_mean)
set xrange [*:*]
set yrange [*:*]
set xtics autofreq
set key top right

# ---- sweep plots: training across T, B*T held (only where the sweep ran) ----------------------------
# (inside a bracketed block @macros are expanded before the block runs, so its plot commands are
# built as strings and eval'ed)
if (file_exists(sweep_csv)) {
    sweep(backend, status) = sprintf("< grep ',%s,%s,' '%s'", backend, status, sweep_csv)
    sweep_ok = sprintf("< grep ',ok,' '%s'", sweep_csv)
    sweep_oom = int(system(sprintf("grep -c ',naive,oom,' '%s' || true", sweep_csv)))
    sweep_tokens = system(sprintf("awk -F, 'NR == 2 { printf \"%%d\", $1 * $2 }' '%s'", sweep_csv))
    stats sweep_csv every ::1 using 1 name "sw" nooutput
    set logscale x 2
    set format x "%.0f"
    set xrange [sw_min / 1.25 : sw_max * 1.25]
    set xtics autofreq
    set xlabel "sequence length T (tokens); B*T = " . sweep_tokens . " tokens per step (B at least 1)"
    set key top right

    set output dir . "/sweep_tokens.png"
    stats sweep_ok using 6 name "swt" nooutput
    set title title("Training throughput against sequence length, naive vs flash attention", machine)
    set ylabel "tokens/s (mean over the steps after the first)"
    sweep_oom_y = swt_max * 0.05
    set yrange [0:swt_max * 1.15]
    sweep_oom_tok = sweep_oom == 0 ? "" : \
        ", sweep(\"naive\", \"oom\") using 1:(sweep_oom_y) with points pt 2 ps 3 lw 3 lc rgb naive_color title \"naive: out of memory\""
    eval 'plot sweep("naive", "ok") using 1:6 with linespoints lw 2 pt 7 lc rgb naive_color title "naive", ' . \
         'sweep("flash", "ok") using 1:6 with linespoints lw 2 pt 5 lc rgb flash_color title "flash"' . sweep_oom_tok

    set output dir . "/sweep_memory.png"
    set yrange [*:*]
    stats sweep_ok using 7 name "swm" nooutput
    sweep_unit = swm_max >= 2**30 ? 2**30 : 2**20
    sweep_unit_name = swm_max >= 2**30 ? "GiB" : "MiB"
    set logscale y 2
    set key top left
    set title title("Peak training memory against sequence length, naive vs flash attention", machine)
    set ylabel sprintf("peak memory (%s, the program's own count)", sweep_unit_name)
    sweep_oom_m = swm_max / sweep_unit * 2
    sweep_oom_mem = sweep_oom == 0 ? "" : \
        ", sweep(\"naive\", \"oom\") using 1:(sweep_oom_m) with points pt 2 ps 3 lw 3 lc rgb naive_color title \"naive: out of memory\""
    eval 'plot sweep("naive", "ok") using 1:($7 / sweep_unit) with linespoints lw 2 pt 7 lc rgb naive_color title "naive", ' . \
         'sweep("flash", "ok") using 1:($7 / sweep_unit) with linespoints lw 2 pt 5 lc rgb flash_color title "flash"' . sweep_oom_mem
    unset logscale
    set xrange [*:*]
    set yrange [*:*]
    set key top right
}

# ---- the receipt's bars: only where scripts/receipt.sh ran ----------------------------------------
if (file_exists(dir . "/receipt_bars.csv")) {
    call "scripts/receipt_plot.gnuplot" dir machine
    reset
    set datafile separator ","
    if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
        set terminal pngcairo size 1000,620 font "sans,11" noenhanced
    } else {
        set terminal png size 1000,620 noenhanced
    }
    set grid lc rgb "#dddddd"
    set border lc rgb "#444444"
}

# ---- attention plots: only where the microbenchmark ran --------------------------------------------
if (!file_exists(attention_csv)) { exit }
attn(backend, status) = sprintf("< grep ',%s,%s,' '%s'", backend, status, attention_csv)
oom_count = int(system(sprintf("grep -c ',naive,oom,' '%s' || true", attention_csv)))
# the out-of-memory crosses, a plot element only where there are some (@ expands the string)
oom_time = oom_count == 0 ? "" : \
    ", attn(\"naive\", \"oom\") using 1:(oom_y) with points pt 2 ps 3 lw 3 lc rgb naive_color title \"naive: out of memory (not timed)\""
oom_memory = oom_count == 0 ? "" : \
    ", attn(\"naive\", \"oom\") using 1:($11 / mem_unit) with points pt 2 ps 3 lw 3 lc rgb naive_color title \"naive: out of memory (what it would need)\""
shape = system(sprintf("awk -F, 'NR == 1 { next } NR == 2 { nh = $3; hs = $4; b = $2; tokens = $1 * $2 } $2 != b { varies = 1 } END { printf \"NH=%%s, HS=%%s, \", nh, hs; if (varies) printf \"B*T = %%d tokens, B at least 1\", tokens; else printf \"B=%%s\", b }' '%s'", attention_csv))
set logscale xy 2
set logscale y 10
set format x "%.0f"
set xlabel "sequence length T (tokens)"
set key top left
stats attention_csv every ::1 using 1 name "seq" nooutput
set xrange [seq_min / 1.25 : seq_max * 1.25]

# time
set output dir . "/attention_time.png"
stats attention_csv every ::1 using 9 name "t" nooutput
set title title("Causal attention time against sequence length (" . shape . ")", machine)
set ylabel "time per call (ms, median)"
oom_y = t_max * 2   # the crosses sit above every timed point
if (oom_count > 0) { set yrange [*:oom_y * 2] }
# PyTorch SDPA's cuDNN and FlashAttention-2, measured in the same call, where they ran
torch_rows(backend) = sprintf("< grep ',%s,' '%s'", backend, torch_csv)
torch_lines = !file_exists(torch_csv) ? "" : \
    ", torch_rows(\"cudnn\") using 1:5 with linespoints lw 2 pt 9 lc rgb cudnn_color title \"PyTorch SDPA cuDNN, forward+backward\"" . \
    ", torch_rows(\"cudnn\") using 1:4 with linespoints lw 2 dt 2 pt 8 lc rgb cudnn_color title \"PyTorch SDPA cuDNN, forward\"" . \
    ", torch_rows(\"flash\") using 1:5 with linespoints lw 2 pt 11 lc rgb fa2_color title \"PyTorch SDPA FlashAttention-2, forward+backward\"" . \
    ", torch_rows(\"flash\") using 1:4 with linespoints lw 2 dt 2 pt 10 lc rgb fa2_color title \"PyTorch SDPA FlashAttention-2, forward\""
plot attn("naive", "ok") using 1:9 with linespoints lw 2 pt 7 lc rgb naive_color title "naive, forward+backward", \
     attn("naive", "ok") using 1:7 with linespoints lw 2 dt 2 pt 6 lc rgb naive_color title "naive, forward", \
     attn("flash", "ok") using 1:9 with linespoints lw 2 pt 5 lc rgb flash_color title "flash, forward+backward", \
     attn("flash", "ok") using 1:7 with linespoints lw 2 dt 2 pt 4 lc rgb flash_color title "flash, forward" \
     @oom_time @torch_lines
set yrange [*:*]

# memory: the bytes each backend allocates (qkv, out, dout, dqkv, what it saves for backward,
# scratch); where naive ran out of memory, what it would have needed
set output dir . "/attention_memory.png"
stats attention_csv every ::1 using 11 name "m" nooutput
mem_unit = m_max >= 2**30 ? 2**30 : 2**20
mem_name = m_max >= 2**30 ? "GiB" : "MiB"
set title title("Attention memory against sequence length (" . shape . ")", machine)
set ylabel sprintf("memory allocated (%s): q,k,v, out, gradients, saved, scratch", mem_name)
plot attn("naive", "ok") using 1:($11 / mem_unit) with linespoints lw 2 pt 7 lc rgb naive_color title "naive (saves P: B*NH*T^2)", \
     attn("flash", "ok") using 1:($11 / mem_unit) with linespoints lw 2 pt 5 lc rgb flash_color title "flash (saves logsumexp: B*NH*T)" \
     @oom_memory
