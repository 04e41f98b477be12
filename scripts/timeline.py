#!/usr/bin/env python3
# scripts/timeline.py: where a training step's wall time goes on the GPU, from the timeline that
# bench/kernel_timeline.c (a CUPTI injection library) recorded while the program ran as it
# always runs: kernels back to back, no replay, the clocks of a sustained run. Plain Python.
#
# usage: timeline.py RUN.csv [--name NAME] [--skip N] [--cut REGEX] [--last N] [--period P [--layers N]]
#                            [--trend REGEX] [--against OTHER.csv [--against-name NAME]] [--top N]
#   steps are cut at the optimizer: a cluster of AdamW kernels (others a few apart between them,
#   as in llm.c) ends a step; the first --skip steps (default 2: start-up and warm-up) are left out.
#   --cut REGEX: a step starts instead at each kernel whose name matches (a decode step: its
#   embedding kernel), and the table of kernels by name is added; --last N: only the last N steps
#   (a decode benchmark's last phase); --period P (with --cut): the step's activities after the
#   cut kernel are layers of P calls each (a decode step's five fused calls), and a table gives
#   each call of a layer its mean over the layers and steps, the activities after the last
#   whole layer one by one; --layers N (with --period): N layers, not as many as fit (where the
#   step's tail after them would make one more); --trend REGEX (with --cut): the running time a step of the kernels
#   whose name matches, fitted by least squares as a + b * k over the steps k = 0, 1, ... (a
#   decode benchmark's steps, each one position longer than the one before: b is what a
#   position more costs, a the fixed part)
#   --against OTHER.csv [--against-name NAME]: the same steps of another program's timeline (e.g.
#   llm.c's), and a table of every kernel by name beside it, count and ms a step in each and the
#   time a call of one over the other's (--top N rows, the largest first; default 30): where the
#   two run the same kernel (cuBLAS's nvjet GEMMs), whether it runs as fast in both steps (one
#   name may stand for other shapes in each program: compare counts before times)
#
# For each step: its wall time (from the end of the step before's last AdamW kernel to the end of
# its own), the time some kernel ran, the time only copies or memsets ran, and the gaps where the
# GPU ran nothing, with the largest gaps and what came before and after each; and the kernels'
# time by step_account.py's groups, as run (not alone, as Nsight Compute times them). Printed as
# markdown: the mean over the steps, then the largest gaps of the last step.
import argparse, csv, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_account import ORDER, group_of, optimizer_ends  # noqa: E402


def read(path):
    acts = []   # (start, end, kind, name), ns
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            acts.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]))
    acts.sort()
    return acts


def steps(acts, cut=None):
    """[(t0, t1)]: each step's window, from one optimizer cluster's end to the next's, or with
    cut from the start of one kernel whose name matches it to the next one's"""
    if cut:
        starts = [a[0] for a in acts if a[2] == "kernel" and re.search(cut, a[3])]
        return list(zip(starts, starts[1:]))
    ends = optimizer_ends([a[3] if a[2] == "kernel" else "" for a in acts])
    return [(acts[ends[k - 1]][1], acts[ends[k]][1]) for k in range(1, len(ends))]


def account(acts, t0, t1):
    inside = [a for a in acts if a[0] >= t0 and a[1] <= t1]
    kernel = copy = 0
    busy_end = t0
    gaps = []   # (ns, before, after)
    before = "(step start)"
    groups = {g: 0 for g in ORDER}
    # by kernel name: [count, time running, critical path]. The critical path of a kernel is
    # how far its end moves the step's end (its end less the latest end before it): with
    # programmatic dependent launch kernels overlap, and this is what each one costs the step.
    names = {}
    seq = []   # (name, running, critical path) of each activity, in order
    for s, e, kind, name in inside:
        seq.append((name, e - s, max(0, e - max(busy_end, s))))
        k = names.setdefault(short(name), [0, 0, 0])
        k[0] += 1
        k[1] += e - s
        k[2] += max(0, e - max(busy_end, s))
        if s > busy_end:
            gaps.append((s - busy_end, before, name))
        if kind == "kernel":
            kernel += e - s
            groups[group_of(name)] += e - s
        else:
            copy += e - s
        if e > busy_end:
            busy_end, before = e, name
    return {"wall": t1 - t0, "kernel": kernel, "copy": copy, "gap": sum(g[0] for g in gaps),
            "gaps": gaps, "n": len(inside), "groups": groups, "names": names, "seq": seq}


def short(name, n=60):
    m = re.search(r"(flash_\w+?_kernel|\w+_kernel\w*|nvjet\w*|\w*gemm\w*|cutlass\w*)", name)
    name = m.group(1) if m else name
    return name if len(name) <= n else name[:n] + "..."


def per_kernel(accs):
    """{short name: (count, ns running, ns on the critical path)}, each the mean a step"""
    total = {}
    for x in accs:
        for k, v in x["names"].items():
            t = total.setdefault(k, [0, 0, 0])
            for i in range(3):
                t[i] += v[i]
    return {k: tuple(x / len(accs) for x in v) for k, v in total.items()}


def against_table(accs, other, name, other_name, top):
    """each kernel name of either timeline: count and ms a step in both, and a call's time
    in the first over the second's where both run it"""
    mine, theirs = per_kernel(accs), per_kernel(other)
    none = (0, 0, 0)
    rows = sorted(set(mine) | set(theirs), key=lambda k: -max(mine.get(k, none)[1],
                                                               theirs.get(k, none)[1]))
    print("| kernel (a step, as run) | %s count | %s ms | %s count | %s ms | ms a call, %s / %s |"
          % (name, name, other_name, other_name, name, other_name))
    print("|---|--:|--:|--:|--:|--:|")
    for k in rows[:top]:
        c1, m1 = mine.get(k, none)[:2]
        c2, m2 = theirs.get(k, none)[:2]
        m1, m2 = m1 / 1e6, m2 / 1e6
        ratio = "%.2f" % ((m1 / c1) / (m2 / c2)) if c1 and c2 and m2 else "-"
        cell = lambda c, m: ("%.1f" % c, "%.2f" % m) if c else ("-", "-")
        print("| %s | %s | %s | %s | %s | %s |" % ((k,) + cell(c1, m1) + cell(c2, m2) + (ratio,)))
    print()


def layer_calls(accs, period, layers=0):
    """the activities after the cut kernel as `layers` layers (0: as many as fit) of `period` calls:
    per call of a layer, its mean running time and critical path over layers and steps; then the
    rest one by one"""
    n = min(len(x["seq"]) for x in accs)
    layers = min(layers, (n - 1) // period) if layers else (n - 1) // period
    print("| call of a layer (%d layers) | us running | us on the critical path |" % layers)
    print("|---|--:|--:|")
    for k in range(period):
        idx = [1 + l * period + k for l in range(layers)]
        run = sum(x["seq"][i][1] for x in accs for i in idx) / len(accs) / layers / 1e3
        crit = sum(x["seq"][i][2] for x in accs for i in idx) / len(accs) / layers / 1e3
        print("| %d: %s | %.2f | %.2f |" % (k + 1, short(accs[0]["seq"][idx[0]][0]), run, crit))
    for i in [0] + list(range(1 + layers * period, n)):
        run = sum(x["seq"][i][1] for x in accs) / len(accs) / 1e3
        crit = sum(x["seq"][i][2] for x in accs) / len(accs) / 1e3
        print("| %s: %s | %.2f | %.2f |" % ("cut" if i == 0 else "after", short(accs[0]["seq"][i][0]),
                                           run, crit))
    print()


def trend(acts, windows, regex):
    """[(k, ns)]: the running time of the kernels named like regex in each step window"""
    pat = re.compile(regex)
    out = []
    for k, (t0, t1) in enumerate(windows):
        out.append((k, sum(a[1] - a[0] for a in acts
                           if a[2] == "kernel" and a[0] >= t0 and a[1] <= t1 and pat.search(a[3]))))
    return out


def trend_table(points, regex):
    n = len(points)
    mk = sum(k for k, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((k - mk) ** 2 for k, _ in points)
    slope = sum((k - mk) * (y - my) for k, y in points) / sxx if sxx else 0.0
    print("| kernels named like '%s', a step | us |" % regex)
    print("|---|--:|")
    print("| at the first step | %.1f |" % (points[0][1] / 1e3))
    print("| at the last step (%d) | %.1f |" % (points[-1][0], points[-1][1] / 1e3))
    print("| fitted: at step 0 (a) | %.1f |" % ((my - slope * mk) / 1e3))
    print("| fitted: a step more (b) | %.4f |" % (slope / 1e3))
    print()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--name", default="")
    p.add_argument("--skip", type=int, default=2)
    p.add_argument("--cut", default="")
    p.add_argument("--last", type=int, default=0)
    p.add_argument("--period", type=int, default=0)
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--against")
    p.add_argument("--against-name", default="")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--trend", default="")
    a = p.parse_args()
    if a.trend and not a.cut:
        sys.exit("--trend needs --cut (steps cut at a kernel)")

    def windows_of(path):
        acts = read(path)
        windows = steps(acts, a.cut)
        windows = windows[a.skip - 1:] if a.skip > 0 else windows
        if a.last > 0:
            windows = windows[-a.last:]
        if not windows:
            sys.exit("%s: fewer than %d %s in the timeline" % (
                path, a.skip + 1, "kernels named like '%s'" % a.cut if a.cut else "optimizer steps"))
        return acts, windows

    def accounts(acts, windows):
        return [account(acts, t0, t1) for t0, t1 in windows]

    acts, windows = windows_of(a.csv)
    accs = accounts(acts, windows)
    other = accounts(*windows_of(a.against)) if a.against else None
    ms = lambda key: sum(x[key] for x in accs) / len(accs) / 1e6
    print("### %s: GPU timeline of a step (CUPTI, as run), mean of %d steps" % (a.name or a.csv, len(accs)))
    print()
    print("| | ms | share of the step |")
    print("|---|--:|--:|")
    wall = ms("wall")
    for label, key in (("wall time of a step", "wall"), ("kernels running", "kernel"),
                       ("copies and memsets running", "copy"), ("nothing running (gaps)", "gap")):
        print("| %s | %.2f | %.1f%% |" % (label, ms(key), 100 * ms(key) / wall))
    n = sum(x["n"] for x in accs) / len(accs)
    ngaps = sum(len(x["gaps"]) for x in accs) / len(accs)
    print("| activities a step; gaps a step | %.0f; %.0f | |" % (n, ngaps))
    print()
    print("| kernel group, as run | ms |")
    print("|---|--:|")
    for g in ORDER:
        v = sum(x["groups"][g] for x in accs) / len(accs) / 1e6
        if v > 0:
            print("| %s | %.2f |" % (g, v))
    print()
    if a.cut:
        print("| kernel (a step) | count | us running | us on the critical path |")
        print("|---|--:|--:|--:|")
        for k, v in sorted(per_kernel(accs).items(), key=lambda kv: -kv[1][2]):
            print("| %s | %.1f | %.1f | %.1f |" % (k, v[0], v[1] / 1e3, v[2] / 1e3))
        print()
    if a.cut and a.period > 0:
        layer_calls(accs, a.period, a.layers)
    if a.trend:
        if len(windows) < 2:
            sys.exit("--trend needs at least 2 steps")
        trend_table(trend(acts, windows, a.trend), a.trend)
    if other:
        against_table(accs, other, a.name or "this", a.against_name or "other", a.top)
    last = accs[-1]
    print("Largest gaps of the last step (us: the activity before -> the one after):")
    print()
    for ns, before, after in sorted(last["gaps"], reverse=True)[:8]:
        print("- %.1f: %s -> %s" % (ns / 1e3, short(before), short(after)))
    small = [g for g in last["gaps"] if g[0] < 10000]
    print("- gaps under 10 us: %d, %.2f ms in all" % (len(small), sum(g[0] for g in small) / 1e6))


if __name__ == "__main__":
    main()
