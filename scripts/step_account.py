#!/usr/bin/env python3
# scripts/step_account.py: the account of one training step (issue 19), from the CSVs of
# `ncu --csv --print-units base --metrics ...` over a 2-step run of each program, made by
# scripts/step_account.sh. Plain Python (no numpy): the GPU machine and the dev machine both run it.
#
# usage: step_account.py --ours OURS.csv [--llmc LLMC.csv] --model L:C:NH:Vp --B B --T T
#                        [--wall-ours MS] [--wall-llmc MS] [--clock-ours MHZ] [--clock-llmc MHZ]
#                        [--gemm-tflops X] [--copy-gbs X]
#
# The step: a run's kernels are cut at the optimizer's (AdamW) kernels; the second step is the
# kernels after the first step's last AdamW kernel up to the second step's last one, so that
# start-up and the warm-up step (and llm.c's validation pass) fall outside it.
import argparse, csv, re, sys

# (group, regular expression on the kernel name), first match wins; the order matters (e.g.
# the flash kernels before the GEMM patterns, layernorm before "forward").
GROUPS = [
    ("attention: flash backward", r"flash_backward(_sm90)?_kernel|bprop(?!.*dq)"),
    ("attention: flash forward", r"flash_forward(_sm90)?_kernel|fprop"),
    ("attention: prep", r"flash_backward_prep|permute|softmax_autoregressive|softmax_forward|dot_?do|_dO_|reduce_dO"),
    ("attention: dQ convert", r"flash_dq_convert|dq|dQ"),
    ("attention: other cuDNN", r"cudnn|sdpa|fmha"),
    ("GEMMs", r"nvjet|gemm|cutlass|sm90_xmma|ampere_|Kernel2"),
    ("GELU", r"(?i)gelu"),   # ours: the backward is column_partial_sums_kernel<8, GeluBackwardRows>
    ("layernorm", r"layernorm"),
    ("LM head softmax / cross-entropy", r"crossentropy|fused_classifier|loss_mean"),
    ("bias gradients", r"bias|column_sums|column_partial_sums|reduce_add_sum"),
    ("residual", r"residual"),
    ("AdamW, norm, encoder, other", r"."),
]
ORDER = [g for g, _ in GROUPS]


def read_ncu(path):
    """[(name, ms, dram bytes, sm clock MHz)] in launch order, from ncu's --csv --page raw or
    the per-metric rows of --page details."""
    rows = list(csv.reader(open(path, newline="")))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Name" in r), None)
    if head is None:
        sys.exit("%s: no ncu CSV header (Kernel Name, Metric Name) found" % path)
    h = rows[head]
    col = {k: h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
    kernels = {}
    for r in rows[head + 1:]:
        if len(r) < len(h):
            continue
        kid = int(r[col["ID"]])
        k = kernels.setdefault(kid, {"name": r[col["Kernel Name"]]})
        unit, value = r[col["Metric Unit"]], float(r[col["Metric Value"]].replace(",", ""))
        scale = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
                 "nsecond": 1e-6, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
                 "hz": 1e-6, "Khz": 1e-3, "Mhz": 1.0, "Ghz": 1e3, "cycle/second": 1e-6,
                 "cycle/nsecond": 1e3, "cycle/usecond": 1.0}.get(unit)
        if scale is None:
            sys.exit("%s: unknown unit %r of %s" % (path, unit, r[col["Metric Name"]]))
        k[r[col["Metric Name"]]] = value * scale
    out = []
    for kid in sorted(kernels):
        k = kernels[kid]
        out.append((k["name"], k.get("gpu__time_duration.sum", 0.0),
                    k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0),
                    k.get("sm__cycles_elapsed.avg.per_second", 0.0)))
    return out


def optimizer_ends(names):
    """The index in a run's names (kernels; "" for anything else) of each optimizer step's last
    AdamW kernel: an optimizer step is a cluster of AdamW kernels, in llm.c with other small
    kernels between them (a few apart at most). scripts/timeline.py cuts its steps here too."""
    opt = [i for i, n in enumerate(names) if re.search(r"adamw", n, re.I)]
    return [i for j, i in enumerate(opt) if j + 1 == len(opt) or opt[j + 1] - i > 8]


def second_step(kernels, path):
    ends = optimizer_ends([n for n, *_ in kernels])
    if len(ends) < 2:
        sys.exit("%s: %d optimizer step(s) found, 2 needed (a run of 2 training steps)" % (path, len(ends)))
    return kernels[ends[0] + 1:ends[1] + 1]


def group_of(name):
    for g, rx in GROUPS:
        if re.search(rx, name):
            return g


def account(kernels):
    acc = {g: [0.0, 0.0, 0, 0.0] for g in ORDER}   # ms, bytes, kernels, clock x ms
    for name, ms, nbytes, mhz in kernels:
        a = acc[group_of(name)]
        a[0] += ms; a[1] += nbytes; a[2] += 1; a[3] += mhz * ms
    return acc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ours", required=True)
    p.add_argument("--llmc")
    p.add_argument("--details", help="also write each kernel name's group, count and ms here")
    p.add_argument("--model", required=True, help="L:C:NH:Vp")
    p.add_argument("--B", type=int, required=True)
    p.add_argument("--T", type=int, required=True)
    for k in ("wall-ours", "wall-llmc", "clock-ours", "clock-llmc", "gemm-tflops", "copy-gbs"):
        p.add_argument("--" + k, type=float)
    o = p.parse_args()
    L, C, NH, Vp = (int(x) for x in o.model.split(":"))
    N = o.B * o.T
    # FLOPs of a step: the GEMMs forward + backward (3x forward: dinp and dweight), the LM head
    # included; attention forward 2 products over the causal half, flash backward 5 (S recomputed)
    gemm_flops = 3 * (L * 2 * N * 12 * C * C + 2 * N * C * Vp)
    att_fwd = L * 2 * 2 * o.B * NH * (C // NH) * o.T * o.T / 2
    flops = {"GEMMs": gemm_flops, "attention: flash forward": att_fwd,
             "attention: flash backward": 2.5 * att_fwd}

    steps = {"ours": second_step(read_ncu(o.ours), o.ours)}
    if o.llmc:
        steps["llm.c"] = second_step(read_ncu(o.llmc), o.llmc)
    if o.details:   # every kernel name with its group: where a grouping rule needs a look
        with open(o.details, "w") as f:
            f.write("program,group,kernels,ms,kernel\n")
            for who, ks in steps.items():
                by = {}
                for name, ms, *_ in ks:
                    b = by.setdefault(name, [0, 0.0]); b[0] += 1; b[1] += ms
                for name, (n, ms) in sorted(by.items(), key=lambda kv: -kv[1][1]):
                    f.write('%s,"%s",%d,%.4f,"%s"\n' % (who, group_of(name), n, ms, name.replace('"', "'")))
    ours = account(steps["ours"])
    llmc = account(steps["llm.c"]) if o.llmc else None
    print("### One training step, kernel by kernel (Nsight Compute, kernels serialised)\n")
    print("d%d B=%d T=%d; llm.c: %s. Ceilings: GEMM %s TFLOP/s, copy %s GB/s (%s).\n" % (
        L, o.B, o.T, "beside ours" if llmc else "not run (no binary): ours only",
        "%.0f" % o.gemm_tflops if o.gemm_tflops else "808", "%.0f" % o.copy_gbs if o.copy_gbs else "4233",
        "measured in this run by bench_layers_gpu --ceilings" if o.gemm_tflops else "earlier H200 measurements"))
    gemm_ceiling = o.gemm_tflops or 808.0
    copy_ceiling = o.copy_gbs or 4233.0
    head = "| group | ours ms | kernels | achieved (ours) | of ceiling | SM MHz (ours) |"
    if llmc: head += " llm.c ms | kernels | ours - llm.c |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    tot = [0.0, 0.0]
    for g in ORDER:
        ms, nbytes, n, clk = ours[g]
        if n == 0 and not (llmc and llmc[g][2]):
            continue
        if g in flops and ms > 0:
            rate = flops[g] / (ms * 1e-3) / 1e12
            achieved, share = "%.0f TFLOP/s" % rate, "%.0f%%" % (100 * rate / gemm_ceiling)
        elif ms > 0:
            rate = nbytes / (ms * 1e-3) / 1e9
            achieved, share = "%.0f GB/s" % rate, "%.0f%%" % (100 * rate / copy_ceiling)
        else:
            achieved = share = ""
        row = "| %s | %.2f | %d | %s | %s | %s |" % (g, ms, n, achieved, share, "%.0f" % (clk / ms) if ms else "")
        if llmc:
            row += " %.2f | %d | %+.2f |" % (llmc[g][0], llmc[g][2], ms - llmc[g][0])
        print(row)
        tot[0] += ms
        tot[1] += llmc[g][0] if llmc else 0.0
    row = "| all kernels | %.2f | %d | | | %.0f |" % (tot[0], sum(a[2] for a in ours.values()),
                                                     sum(a[3] for a in ours.values()) / tot[0])
    if llmc: row += " %.2f | %d | %+.2f |" % (tot[1], sum(a[2] for a in llmc.values()), tot[0] - tot[1])
    print(row)
    for who, wall, ksum, clock in (("ours", o.wall_ours, tot[0], o.clock_ours),
                                   ("llm.c", o.wall_llmc, tot[1], o.clock_llmc)):
        if wall is None or (who == "llm.c" and not llmc):
            continue
        print("| wall time of a step, %s (its own step lines, no ncu) | %.2f | | | | %s |" %
              (who, wall, "%.0f (during the run)" % clock if clock else ""))
        print("| wall - kernels, %s: time outside kernels, or kernels slower than alone | %.2f | | | | |" %
              (who, wall - ksum))
    print("\nSM MHz: the clock each group ran at under ncu (kernel-time weighted), against the mean "
          "SM clock sampled by nvidia-smi during the timed run: a lower clock in the run makes its "
          "kernels slower than ncu's, which shows up as wall - kernels without being a gap.")


if __name__ == "__main__":
    main()
