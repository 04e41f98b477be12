# scripts/receipt_ncu.awk: sums Nsight Compute's per-kernel DRAM bytes and time, from the raw CSV
#   ncu --import R.ncu-rep --csv --page raw --print-units base
# of a report holding dram__bytes_read.sum, dram__bytes_write.sum and gpu__time_duration.sum, for
# scripts/receipt.sh (tests/test_receipt.sh feeds it made-up files).
#
#   awk -f scripts/receipt_ncu.awk FILE
#       every kernel of FILE: prints "kernels,read_bytes,write_bytes,time_ns"
#   awk -v step=S -v attention=naive|flash -v layers=L -f scripts/receipt_ncu.awk FILE
#       optimizer step S (1-based) of a training run: steps end with a run of adamw_kernel
#       launches (gpt2_update), so step S is what follows the (S-1)th run, up to and including
#       the Sth. Prints "kernels,read_bytes,write_bytes,time_ns,attn_kernels,attn_read_bytes,
#       attn_write_bytes,attn_time_ns": the step, and its attention kernels:
#         flash  the kernels named flash_*kernel (forward, backward prep, main, dQ convert)
#         naive  each run from a permute_heads_kernel (the split of qkv) to the permute after the
#                softmax kernel (the merge of O, or of dQ, dK, dV), cuBLAS products between
#                included: cuBLAS kernels have no name of their own to tell them by
#       and checks that it found L forward and L backward passes of attention, else fails.
#
# The file is read by column names, not positions: the header row has "ID", "Kernel Name" and the
# three metrics; the row after it their units (byte, Kbyte, ..., nsecond, usecond, ...), which
# scale the values; thousands separators in values are dropped. Anything else (a missing column
# or unit, a value that is not a number, no kernels, fewer steps than asked) is an error on
# stderr and exit status 1: a receipt must not be built from a file read wrongly.

# split one CSV line into f[1..n], quotes and doubled quotes handled; returns n
function csv_split(line, f,    n, i, c, field, quoted) {
    n = 0; field = ""; quoted = 0
    for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (quoted) {
            if (c == "\"" && substr(line, i + 1, 1) == "\"") { field = field "\""; i++ }
            else if (c == "\"") quoted = 0
            else field = field c
        } else if (c == "\"") quoted = 1
        else if (c == ",") { f[++n] = field; field = "" }
        else field = field c
    }
    if (quoted) fail("line " FNR ": a quote is not closed")
    f[++n] = field
    return n
}
function fail(msg) {
    printf "error: receipt_ncu.awk: %s: %s\n", FILENAME, msg > "/dev/stderr"
    failed = 1
    exit 1
}
function scale_of(unit, metric) {
    if (unit == "byte") return 1
    if (unit == "Kbyte" || unit == "KB") return 1e3
    if (unit == "Mbyte" || unit == "MB") return 1e6
    if (unit == "Gbyte" || unit == "GB") return 1e9
    if (unit == "Tbyte" || unit == "TB") return 1e12
    if (unit == "KiB" || unit == "Kibyte") return 1024
    if (unit == "MiB" || unit == "Mibyte") return 1048576
    if (unit == "GiB" || unit == "Gibyte") return 1073741824
    if (unit == "nsecond" || unit == "ns") return 1
    if (unit == "usecond" || unit == "us") return 1e3
    if (unit == "msecond" || unit == "ms") return 1e6
    if (unit == "second" || unit == "s") return 1e9
    fail("unit '" unit "' of " metric " is not one this script knows (export with --print-units base)")
}
function value(s, what,    v) {
    v = s
    gsub(/,/, "", v)
    if (v !~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/)
        fail("kernel " id " (" name "): " what " is '" s "', not a number")
    return v + 0
}

BEGIN {
    metric[1] = "dram__bytes_read.sum"; metric[2] = "dram__bytes_write.sum"
    metric[3] = "gpu__time_duration.sum"
    if (step != "" && step !~ /^[1-9][0-9]*$/) { printf "error: receipt_ncu.awk: step must be a positive integer, not '%s'\n", step > "/dev/stderr"; failed = 1; exit 1 }
    if (step != "" && attention != "naive" && attention != "flash") { printf "error: receipt_ncu.awk: attention must be naive or flash, not '%s'\n", attention > "/dev/stderr"; failed = 1; exit 1 }
    if (step != "" && layers !~ /^[1-9][0-9]*$/) { printf "error: receipt_ncu.awk: layers must be a positive integer, not '%s'\n", layers > "/dev/stderr"; failed = 1; exit 1 }
    state = "before"   # before the header, units (the row after it), rows
    cur = 1; in_adam = 0; adam_runs = 0
}

/^==/ || /^[ \t\r]*$/ { next }   # ncu's own ==PROF== / ==WARNING== lines, blank lines
{
    sub(/\r$/, "")
    n = csv_split($0, f)
    if (state == "before") {
        for (i = 1; i <= n; i++) col[f[i]] = i
        if (!("ID" in col) || !("Kernel Name" in col)) { delete col; next }
        for (m = 1; m <= 3; m++)
            if (!(metric[m] in col)) fail("no column " metric[m] " in the header (was it in --metrics?)")
        state = "units"; next
    }
    id = f[col["ID"]]; name = f[col["Kernel Name"]]
    if (state == "units") {
        if (id != "") fail("no units row after the header (export with --page raw --print-units base)")
        for (m = 1; m <= 3; m++) {
            if (f[col[metric[m]]] == "") fail("no unit for " metric[m])
            scale[m] = scale_of(f[col[metric[m]]], metric[m])
        }
        state = "rows"; next
    }
    if (id !~ /^[0-9]+$/) fail("line " FNR ": not a kernel row (ID '" id "')")
    for (m = 1; m <= 3; m++) v[m] = value(f[col[metric[m]]], metric[m]) * scale[m]
    kernels_all++
    if (step == "") { k++; r += v[1]; w += v[2]; t += v[3]; next }

    # steps: a kernel after a run of adamw_kernel launches begins the next step
    is_adam = name ~ /adamw_kernel/
    if (in_adam && !is_adam) cur++
    if (is_adam && !in_adam) adam_runs++
    in_adam = is_adam
    if (cur != step + 0) next
    k++; r += v[1]; w += v[2]; t += v[3]
    attn = 0
    if (attention == "flash") {
        attn = name ~ /flash_[A-Za-z0-9_]*kernel/
        if (name ~ /flash_forward/) fwd_passes++
        if (name ~ /flash_dq_convert/) bwd_passes++
    } else {
        if (!inside && name ~ /permute_heads_kernel/) { inside = 1; seen_softmax = 0 }
        attn = inside
        if (inside && name ~ /causal_softmax_backward/) { seen_softmax = 1; bwd_passes++ }
        else if (inside && name ~ /causal_softmax/) { seen_softmax = 1; fwd_passes++ }
        else if (inside && seen_softmax && name ~ /permute_heads_kernel/) inside = 0
    }
    if (attn) { ak++; ar += v[1]; aw += v[2]; at += v[3] }
}

END {
    if (failed) exit 1
    if (state != "rows") fail("no header row with ID, Kernel Name and the metrics (is this ncu --csv --page raw output?)")
    if (kernels_all == 0) fail("no kernel rows: the profiled range held no kernels")
    if (step == "") { printf "%d,%.0f,%.0f,%.0f\n", k, r, w, t; exit 0 }
    if (adam_runs < step + 0)
        fail(sprintf("%d optimizer updates (runs of adamw_kernel) in the profile, fewer than step %d", adam_runs, step))
    if (inside) fail("an attention run from permute_heads_kernel never ended (no permute after its softmax)")
    if (fwd_passes != layers || bwd_passes != layers)
        fail(sprintf("step %d has %d forward and %d backward attention passes, not %d and %d (the model's layers): attention kernels not recognised", step, fwd_passes, bwd_passes, layers, layers))
    printf "%d,%.0f,%.0f,%.0f,%d,%.0f,%.0f,%.0f\n", k, r, w, t, ak, ar, aw, at
}
