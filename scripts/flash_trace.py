#!/usr/bin/env python3
"""The Hopper backward's timeline, stage by stage, from a FLASH_TRACE file.

Build with `scripts/flash_variant.sh trace -DFLASH_SM90_TRACE=1`, run the backward once with
FLASH_TRACE=FILE (e.g. build/flash-trace/bench/attention --backend flash --receipt fwdbwd ...),
then:  scripts/flash_trace.py FILE [--skip N]

Prints, for each consumer warpgroup, the mean time of each stage of a step (cycles and us at
the clock the trace measured), split into an item's first step (the diagonal tile) and the
others, and the item boundary (the dK/dV epilogue, taking the next item, waiting for its K, V);
then the writer's waits. The first --skip items of each CTA (default 2) are left out: the
start, where every CTA loads at once. Only complete items count (a role's buffer holds 768
events; attention/flash_sm90.cu, Trace).
"""
import struct
import sys
from collections import defaultdict

# attention/flash_sm90.cu, enum TraceEvent
ITEM, KV, FULL, TURN, ISSUED, P, DS, BAR, DQ, DQEMPTY, STEPEND, DKVROUND, ITEMEND, EXIT = range(1, 15)
W_ITEM, W_FLAG, W_FULL, W_READ, W_DKVFULL, W_DKVREAD = range(30, 36)

# a step's stages: (name, event that ends it); each starts where the one before ended
STEP_STAGES = [
    ("wait for Q, dO (full)", FULL),
    ("wait for my turn", TURN),
    ("issue S^T, dP^T; hand over dQ", ISSUED),
    ("wait S^T; P^T = exp2", P),
    ("wait dP^T; dS^T", DS),
    ("issue dV, dK; dS^T store; barrier", BAR),
    ("dQ = dS K; wait all", DQ),
    ("wait for the staging", DQEMPTY),
    ("dQ part -> staging", STEPEND),
]


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    head = struct.unpack_from("10i", data, 0)
    ctas, roles, nhead, nevents, HS, T, B, NH, items, det = head
    words = struct.unpack_from("%dQ" % (ctas * roles * (nhead + nevents)), data, 40)
    traces = {}
    for cta in range(ctas):
        for role in range(roles):
            o = (cta * roles + role) * (nhead + nevents)
            n = words[o]
            if n == 0:
                continue
            t0, c0, t1, c1 = words[o + 1 : o + 5]
            ev = [(w >> 16, (w >> 8) & 255, w & 255) for w in words[o + nhead : o + nhead + n]]
            traces[cta, role] = (t0, c0, t1, c1, ev)
    return dict(HS=HS, T=T, B=B, NH=NH, items=items, det=det, ctas=ctas), traces


def consumer_items(ev):
    """Split a consumer's events into items: [(steps, [events of the item], complete)]; the last
    one may be cut short by the end of the buffer (its steps still count, its boundary not)."""
    out, cur = [], None
    for clk, pay, e in ev:
        if e == ITEM:
            cur = (pay, [(clk, pay, e)])
            out.append(cur)
        elif cur is not None:
            cur[1].append((clk, pay, e))
            if e == ITEMEND:
                cur = None
    return [(steps, evs, evs[-1][2] == ITEMEND) for steps, evs in out]


def main():
    args = sys.argv[1:]
    skip = 2
    if "--skip" in args:
        i = args.index("--skip")
        skip = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    info, traces = read(args[0])
    # the clock: cycles per ns over each role's whole run
    rates = [(c1 - c0) / (t1 - t0) for (t0, c0, t1, c1, _) in traces.values() if t1 > t0]
    ghz = sum(rates) / len(rates)
    us = lambda cyc: cyc / ghz / 1000.0
    print("# flash backward trace: HS=%d T=%d B=%d NH=%d, %d items, %s, %d CTAs traced, "
          "clock %.3f GHz" % (info["HS"], info["T"], info["B"], info["NH"], info["items"],
                               "deterministic" if info["det"] else "not deterministic",
                               len({k[0] for k in traces}), ghz))
    for role in (1, 2):
        first = defaultdict(list)    # stage -> cycles, an item's first step
        other = defaultdict(list)    # the other steps
        boundary = defaultdict(list)
        item_cycles, item_steps, step_cycles = [], [], []
        partial_cycles, partial_steps = [], 0
        for (cta, r), (_, _, _, _, ev) in traces.items():
            if r != role:
                continue
            its = consumer_items(ev)
            for k, (steps, evs, complete) in enumerate(its):
                # the first items are the start; a CTA whose buffer holds fewer (long items at
                # large T) keeps its last one
                if k < min(skip, len(its) - 1):
                    continue
                prev = None   # clock where the current stage began
                step_start = None
                for clk, pay, e in evs:
                    if e == ITEM:
                        item_start = clk
                        prev = clk
                    elif e == KV:
                        boundary["wait for K, V (kv_full)"].append(clk - prev)
                        prev = clk
                    elif e in dict((ev_, n) for n, ev_ in STEP_STAGES):
                        name = [n for n, ev_ in STEP_STAGES if ev_ == e][0]
                        (first if pay == 0 else other)[name].append(clk - prev)
                        if e == FULL:
                            step_start = prev
                        if e == STEPEND:
                            step_cycles.append((pay == 0, clk - step_start))
                            last_step_end = clk
                        prev = clk
                    elif e == DKVROUND:
                        boundary["dK, dV: wait for the staging (round %d)" % pay].append(clk - prev)
                        prev = clk
                    elif e == ITEMEND:
                        boundary["dK, dV: staging writes, hand-over"].append(clk - prev)
                        item_cycles.append(clk - item_start)
                        item_steps.append(steps)
                        prev = clk
                if not complete:   # its steps only
                    partial_cycles.append(prev - item_start)
                    partial_steps += sum(1 for _, _, e in evs if e == STEPEND)
                # the gap to the next item's start
                elif k + 1 < len(its):
                    boundary["take the next item"].append(its[k + 1][1][0][0] - evs[-1][0])
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
        n_items = len(item_cycles)
        if n_items:
            print("\n## consumer %d: %d items, %.2f steps an item, %.2f us an item (%.2f us a "
                  "step in the item's time)" % (role - 1, n_items, mean(item_steps),
                                                us(mean(item_cycles)),
                                                us(sum(item_cycles) / sum(item_steps))))
        else:
            print("\n## consumer %d: no complete item in the buffers; %d steps of items cut "
                  "short" % (role - 1, partial_steps))
        print("\n| stage | first step (diagonal) us | other steps us | share of the traced time |")
        print("|---|--:|--:|--:|")
        total_item = sum(item_cycles) + sum(partial_cycles)
        for name, _ in STEP_STAGES:
            f, o = first[name], other[name]
            share = (sum(f) + sum(o)) / total_item
            print("| %s | %.3f | %.3f | %.1f%% |" % (name, us(mean(f)), us(mean(o)), 100 * share))
        steps_first = [c for is_first, c in step_cycles if is_first]
        steps_other = [c for is_first, c in step_cycles if not is_first]
        print("| **a step** | %.3f | %.3f | |" % (us(mean(steps_first)), us(mean(steps_other))))
        print("\n| item boundary | us an item | share of the item's time |")
        print("|---|--:|--:|")
        for name, xs in boundary.items():
            print("| %s | %.3f | %.1f%% |" % (name, us(mean(xs)), 100 * sum(xs) / total_item))
    # the writer
    waits = defaultdict(list)
    for (cta, r), (_, _, _, _, ev) in traces.items():
        if r != 3:
            continue
        prev = None
        for clk, pay, e in ev:
            if prev is not None:
                name = {W_FLAG: "wait for the tile's flag (deterministic)",
                        W_FULL: "wait for both dQ parts", W_READ: "TMA reduce: staging read",
                        W_DKVFULL: "wait for dK, dV parts", W_DKVREAD: "TMA store: staging read",
                        W_ITEM: "take the next item"}.get(e)
                if name:
                    waits[name].append(clk - prev)
            prev = clk
    if waits:
        print("\n## writer\n\n| stage | mean us | count |\n|---|--:|--:|")
        for name, xs in waits.items():
            print("| %s | %.3f | %d |" % (name, us(sum(xs) / len(xs)), len(xs)))


if __name__ == "__main__":
    main()
