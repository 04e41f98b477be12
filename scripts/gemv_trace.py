#!/usr/bin/env python3
"""gemv_trace.py FILE [--steps N]: the decode GEMV's timeline from a FUSED_TRACE=FILE run of a
build with -DFUSED_TRACE=1 (layers/fused.cu says what each block records).

A launch is the blocks of one call (the same weight pointer and grid) that start together; a
decode step is the launches between two LM heads (the one call with the most blocks, or the
call whose weights are the last read). For the last N whole steps, per call of a layer (in the
order the layer runs them) and for the LM head, in us, mean over layers and steps:
  start -> wait     the first block's start to the first block past pdl_wait (the launch under
                    the kernel before: PDL)
  wait spread       the first to the last block past pdl_wait
  staged, normed    a block's input staged, its layernorm done (after its wait), mean of blocks
  tiles             a block's tiles after the layernorm, to its last warp's end, mean of blocks
  last end          the first block past the wait to the last warp of the launch done
  to next wait      this launch's last end to the next launch's first block past its wait (the
                    kernel boundary; after the QKV call it also holds the attention kernel)
  path              first wait to the next launch's first wait: the call's share of the step
"""
import argparse
import struct
import sys

ENDS = slice(6, 10)   # a record's words of the block's 4 warps' ends (layers/fused.cu, kWarps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--steps", type=int, default=4, help="whole steps to average (the last ones)")
    ap.add_argument("--split", type=int, default=10_000,
                    help="ns between two blocks' starts that separate launches of one call")
    args = ap.parse_args()
    data = open(args.file, "rb").read()
    if len(data) < 24:
        sys.exit(f"{args.file}: no trace header")
    records, words, count = struct.unpack_from("<3Q", data, 0)
    if len(data) != 24 + records * words * 8:
        sys.exit(f"{args.file}: {len(data)} bytes, not a ring of {records} x {words}")
    recs = []
    for i in range(min(records, count)):
        r = struct.unpack_from(f"<{words}Q", data, 24 + i * words * 8)
        if r[0] == 0 or r[2] == 0:
            continue
        recs.append(r)
    if not recs:
        sys.exit(f"{args.file}: no records")
    # launches: per (weight, grid), records sorted by start, cut where a block starts more than
    # --split ns after the one before (a call's next launch is a whole step later); a launch
    # the ring's wrap cut short (not every block of its grid) is left out
    by_key = {}
    for r in recs:
        by_key.setdefault((r[0], r[1] >> 32), []).append(r)
    launches = []
    for (weight, grid), rs in by_key.items():
        rs.sort(key=lambda r: r[2])
        group = [rs[0]]
        for r in rs[1:] + [None]:
            if r is not None and r[2] - group[-1][2] <= args.split:
                group.append(r)
                continue
            if len(group) == grid and len({g[1] & 0xffffffff for g in group}) == grid:
                launches.append((weight, grid, group))
            group = [r]
    launches.sort(key=lambda l: min(r[3] for r in l[2]))
    lm_grid = max(g for _, g, _ in launches)
    heads = [i for i, l in enumerate(launches) if l[1] == lm_grid]
    if len(heads) < 2:
        sys.exit("fewer than two LM heads in the trace: no whole step")
    steps = [launches[heads[k] + 1:heads[k + 1] + 1] for k in range(len(heads) - 1)]
    steps = [s for s in steps if len(s) == len(steps[-1])][-args.steps:]
    calls = len(steps[0]) - 1   # layer calls a step, then the LM head
    period = next((p for p in (4, 5, 3, 2, 1) if calls % p == 0), 1)
    names = ["start -> wait", "wait spread", "staged", "normed", "tiles", "last end", "to next wait", "path"]
    sums = {}
    for s in steps:
        for i, (_, grid, group) in enumerate(s):
            start = min(r[2] for r in group)
            wait0 = min(r[3] for r in group)
            wait1 = max(r[3] for r in group)
            end = max(max(r[ENDS]) for r in group)
            staged = sum(r[4] - r[3] for r in group) / grid
            normed = sum(r[5] - r[4] for r in group) / grid
            tiles = sum(max(r[ENDS]) - r[5] for r in group) / grid
            nxt = s[i + 1][2] if i + 1 < len(s) else None
            next_wait = min(r[3] for r in nxt) if nxt else None
            vals = [wait0 - start, wait1 - wait0, staged, normed, tiles, end - wait0,
                    next_wait - end if nxt else None, next_wait - wait0 if nxt else None]
            key = "LM head" if i == len(s) - 1 else f"call {i % period + 1} of {period} (grid {grid})"
            acc = sums.setdefault(key, [[0.0, 0] for _ in names])
            for j, v in enumerate(vals):
                if v is not None:
                    acc[j][0] += v
                    acc[j][1] += 1
    print(f"{len(steps)} steps of {calls} layer calls and the LM head; us, mean over layers and steps")
    print("| call | " + " | ".join(names) + " |")
    print("|---|" + "--:|" * len(names))
    for key, acc in sums.items():
        cells = [f"{a / n / 1e3:.2f}" if n else "" for a, n in acc]
        print(f"| {key} | " + " | ".join(cells) + " |")
    first = min(r[3] for r in steps[-1][0][2])
    last = max(max(r[ENDS]) for l in steps[-1] for r in l[2])
    print(f"\nthe last step: {(last - first) / 1e3:.1f} us from the first call's wait to the LM head's tiles done")


if __name__ == "__main__":
    main()
