#!/usr/bin/env bash
# fuzz/run.sh [SECONDS [HARNESS...]]: build the libFuzzer harnesses (`make fuzz`, clang with
# AddressSanitizer and UBSan; their list is data/data.mk's FUZZ_TARGETS) and run each, or only
# the HARNESSes named (fuzz_vocab ...), for SECONDS (default 10), starting from
# fuzz/seeds/<name> and the corpus kept in build/fuzz/corpus/<name> by earlier runs. A crash
# leaves its input in build/fuzz/crash-<harness>-*. Ends with "N passed, N failed, N skipped",
# one count a harness.
# fuzz_encode needs the GPT-2 vocabulary: $FUZZ_VOCAB_DIR, $DATA_SRC/gpt2, ../shared/data/gpt2
# or data/gpt2; it is skipped when there is none.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
make -s fuzz || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
targets=$(make -s --no-print-directory print-fuzz-targets)
if [ $# -gt 1 ]; then
    for target in "${@:2}"; do
        case " $targets " in
            *" $target "*) ;;
            *) echo "fuzz/run.sh: no harness $target (there are: $targets)"; exit 2 ;;
        esac
    done
    targets="${*:2}"
fi

vocab=""
for d in "${FUZZ_VOCAB_DIR:-}" "${DATA_SRC:+$DATA_SRC/gpt2}" ../shared/data/gpt2 data/gpt2; do
    if [ -n "$d" ] && [ -f "$d/vocab.bpe" ]; then vocab=$d; break; fi
done

passed=0; failed=0; skipped=0
for target in $targets; do
    name=${target#fuzz_}
    harness=build/fuzz/$target
    if [ "$name" = encode ] && [ -z "$vocab" ]; then
        echo "=== fuzz_$name: skipped, no GPT-2 vocabulary (set DATA_SRC=../shared/data)"
        skipped=$((skipped + 1)); continue
    fi
    corpus=build/fuzz/corpus/$name
    mkdir -p "$corpus"
    log=build/fuzz/fuzz_$name.log
    echo "=== fuzz_$name: $secs s"
    if FUZZ_VOCAB_DIR="$vocab" "$harness" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
           -max_len=8192 -print_final_stats=1 -artifact_prefix="build/fuzz/crash-fuzz_$name-" \
           "$corpus" "fuzz/seeds/$name" >"$log" 2>&1; then
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "$log" | tr '\n' ' '
        echo "(corpus: $(ls "$corpus" | wc -l) inputs)"
        passed=$((passed + 1))
    else
        tail -n 40 "$log"
        echo "!!! fuzz_$name failed: the input is in build/fuzz/crash-fuzz_$name-*, the log in $log"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
