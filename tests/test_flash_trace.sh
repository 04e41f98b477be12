#!/usr/bin/env bash
# tests/test_flash_trace.sh: scripts/flash_trace.py (the Hopper backward's FLASH_SM90_TRACE
# timeline) on a made-up trace whose stage times are known, without a GPU: one CTA, both
# consumers doing 4 items of 2 steps at a clock of 1 GHz (a cycle is a nanosecond), the writer's
# waits. Ends like the C tests: "tests/test_flash_trace.sh: N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
name=tests/test_flash_trace.sh
. tests/shell_test.sh
need_python3 "scripts/flash_trace.py"

# the file attention/flash_sm90.cu writes: int32 {ctas, roles, head, events, HS, T, B, NH, items,
# deterministic}, then uint64 [ctas][roles][head + events]: count, globaltimer and clock64 at
# the start and the end, events clock << 16 | payload << 8 | event
python3 - "$tmp/trace" <<'PY'
import struct, sys
ctas, roles, head, nev = 132, 4, 5, 768
words = [0] * (ctas * roles * (head + nev))
def put(role, events):
    o = role * (head + nev)
    end = events[-1][0] + 1000
    words[o:o + 5] = [len(events), 0, 0, end, end]          # 1 cycle a ns
    for i, (c, p, e) in enumerate(events):
        words[o + head + i] = c << 16 | p << 8 | e
# a step's stages (event, cycles since the last one): full, turn, issued, P, dS, barrier, dQ,
# staging wait, step end
stages = [(3, 200), (4, 10), (5, 20), (6, 300), (7, 40), (8, 50), (9, 60), (10, 70), (11, 80)]
for role in (1, 2):
    t, ev = 0, []
    for item in range(4):
        ev.append((t, 2, 1)); t += 100; ev.append((t, 0, 2))          # item (2 steps), K, V
        for step in range(2):
            for e, dt in stages:
                t += dt; ev.append((t, step, e))
        t += 500; ev.append((t, 0, 12))                                # dK, dV round 0
        t += 90; ev.append((t, 0, 13))                                 # item end
        t += 30
    ev.append((t, 0, 14))
    put(role, ev)
t, ev = 0, []
for item in range(4):
    ev.append((t, 0, 30))
    for step in range(2):
        t += 400; ev.append((t, step, 31)); t += 300; ev.append((t, step, 32)); t += 200; ev.append((t, step, 33))
    t += 10
put(3, ev)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("10i", ctas, roles, head, nev, 64, 1024, 64, 12, 6144, 1))
    f.write(struct.pack("%dQ" % len(words), *words))
PY
python3 scripts/flash_trace.py "$tmp/trace" > "$tmp/out.md" 2> "$tmp/err"
check "flash_trace.py runs" test $? -eq 0
check "the header: shape, mode, CTAs, clock" has "$tmp/out.md" "HS=64 T=1024 B=64 NH=12, 6144 items, deterministic, 1 CTAs traced, clock 1.000 GHz"
# items 2 and 3 of each consumer (the first two are skipped): 100 + 2 x 830 + 500 + 90 cycles
check "an item: its steps and its time" has "$tmp/out.md" "2 items, 2.00 steps an item, 2.35 us an item"
check "a stage of the first step and the others" has "$tmp/out.md" "| wait for Q, dO (full) | 0.200 | 0.200 |"
check "the longest stage" has "$tmp/out.md" "| wait S^T; P^T = exp2 | 0.300 | 0.300 |"
check "a step, the stages' sum" has "$tmp/out.md" "| **a step** | 0.830 | 0.830 | |"
check "the item boundary: K, V" has "$tmp/out.md" "| wait for K, V (kv_full) | 0.100 |"
check "the item boundary: dK, dV's wait" has "$tmp/out.md" "| dK, dV: wait for the staging (round 0) | 0.500 |"
check "the item boundary: taking the next item" has "$tmp/out.md" "| take the next item | 0.030 |"
check "the writer's flag wait" has "$tmp/out.md" "| wait for the tile's flag (deterministic) | 0.400 |"
check "the writer's reduction read" has "$tmp/out.md" "| TMA reduce: staging read | 0.200 |"
python3 scripts/flash_trace.py > /dev/null 2>&1
check "no file: usage, non-zero exit" test $? -ne 0
finish
