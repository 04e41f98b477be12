#!/usr/bin/env bash
# Runs each test program given on the command line, shows its output, and adds up the
# "<name>: N passed, N failed, N skipped" lines they print into one closing summary line.
# Exits non-zero when any test failed or a program crashed.
set -u
passed=0; failed=0; skipped=0; crashed=0
for t in "$@"; do
    echo "=== $t"
    out=$("$t" 2>&1); rc=$?
    echo "$out"
    line=$(echo "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "!!! $t exited with $rc and printed no summary"
        crashed=$((crashed + 1)); continue
    fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p')
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "!!! $t exited with $rc"; crashed=$((crashed + 1))
    fi
done
failed=$((failed + crashed))
echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
