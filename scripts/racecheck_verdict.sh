#!/usr/bin/env bash
# scripts/racecheck_verdict.sh LOG: the verdict on a `compute-sanitizer --tool racecheck` log of
# test_attention_gpu or test_infer_gpu --sanitize (attention_check.sh's and decode_check.sh's
# sanitize stages). Racecheck reports hazards inside cuBLAS's own GEMM kernels (nvjet_*, which
# the naive reference and the plain layers call), and with a kernel filter (--kernel-name) it
# fails to run at all (an internal error of the tool, seen with compute-sanitizer 2025 on an
# H200), so it checks every kernel and this script judges: it
# prints the kernels named in hazards (both report formats: "Read access at KERNEL+0x.." and,
# with --racecheck-report hazard, "Thread (x,y,z) at KERNEL+0x.."), then exits 0 when every
# access named in a hazard is in a cuBLAS kernel, 1 when one is anywhere else (ours, or a line
# it cannot read), when a shared-memory access was reported potentially invalid, when hazards
# were counted but none named, when the tool reported an internal error, or when the log has no
# racecheck summary (the run did not finish).
set -u
[ $# -eq 1 ] && [ -r "$1" ] || { echo "usage: scripts/racecheck_verdict.sh RACECHECK_LOG (a readable file)" >&2; exit 2; }
log=$1
# every line that names where a hazard's access was: "... access at KERNEL+0x.." or
# "... Thread (x,y,z) at KERNEL+0x.." (KERNEL demangled: "void (anonymous namespace)::k<64>(..)")
accesses=$(grep -E '(access|Thread \([0-9,]+\)) at ' "$log")
echo "kernels named in hazards: $(echo "$accesses" | sed -nE 's/.* at (.*)\+0x[0-9a-f]+.*/\1/p' | sort | uniq -c |
    awk '{$1=$1; print}' | paste -sd ';' -)"
if ! grep -q 'RACECHECK SUMMARY' "$log"; then
    echo "FAILED: no racecheck summary in $log (the run did not finish)"; exit 1
fi
if grep -q 'Potential invalid' "$log"; then   # e.g. distributed shared memory of a block not yet running
    echo "FAILED: $(grep -m1 -A1 'Potential invalid' "$log" | tr -s ' =' ' ')"; exit 1
fi
if grep -q 'Internal Sanitizer Error' "$log"; then
    echo "FAILED: the tool reported an internal error: not every kernel was checked"; exit 1
fi
if ! grep -q 'RACECHECK SUMMARY: 0 hazards' "$log"; then
    if [ -z "$accesses" ]; then echo "FAILED: hazards counted, no kernel named"; exit 1; fi
    if echo "$accesses" | grep -vq ' at nvjet_'; then
        echo "FAILED: a hazard in a kernel that is not cuBLAS's:"
        echo "$accesses" | grep -v ' at nvjet_' | head -n 5
        exit 1
    fi
fi
echo "ok: no hazard in this project's kernels"
