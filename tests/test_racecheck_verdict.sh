#!/usr/bin/env bash
# tests/test_racecheck_verdict.sh: scripts/racecheck_verdict.sh on made-up racecheck logs whose
# verdicts are known (both of the tool's report formats), without a GPU. Ends like the C tests:
# "tests/test_racecheck_verdict.sh: N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
name=tests/test_racecheck_verdict.sh
. tests/shell_test.sh
verdict() {   # verdict EXPECTED_EXIT LOG_TEXT: the script's exit on a log holding LOG_TEXT
    printf '%b' "$2" > "$tmp/log"
    bash scripts/racecheck_verdict.sh "$tmp/log" > "$tmp/out" 2>&1
    local rc=$?
    [ "$rc" -eq "$1" ] || { echo "  exit $rc, expected $1, on:"; cat "$tmp/log" "$tmp/out"; false; }
}
S='========= RACECHECK SUMMARY'
race() { echo "========= Error: Race reported between Read access at $1+0xa00\\n=========     and Write access at $1+0x3b10 [408 hazards]\\n"; }
hazard() { echo "========= Error: Potential WAR hazard detected at __shared__ 0x30428 in block (0,39,0) :\\n=========     Read Thread (95,0,0) at $1+0x980\\n=========     Write Thread (256,0,0) at $1+0x3770\\n"; }

check "no hazard: ok" verdict 0 "$S: 0 hazards displayed (0 errors, 0 warnings)\n"
check "hazards only in cuBLAS's kernels (default format): ok" \
    verdict 0 "$(race nvjet_sm90_tst_64x192_64x6_1x2_h_bz_NNN)$(race nvjet_sm90_tst_256x96_TNT)$S: 2 hazards displayed (2 errors, 0 warnings)\n"
check "hazards only in cuBLAS's kernels (--racecheck-report hazard): ok" \
    verdict 0 "$(hazard nvjet_sm90_tst_256x96_TNT)$S: 1 hazard displayed (1 error, 0 warnings)\n"
# our kernels as the tool prints them: demangled, templates with "void " before the namespace
flash='void (anonymous namespace)::flash_backward_sm90_kernel<(int)64, (bool)0>(CUtensorMap_st, int, float)'
check "a hazard in a flash kernel among cuBLAS's: failed" \
    verdict 1 "$(race nvjet_sm90_tst_256x96_TNT)$(race "$flash")$S: 2 hazards displayed (2 errors, 0 warnings)\n"
check "a hazard in a kernel of an anonymous namespace, not a template: failed" \
    verdict 1 "$(race nvjet_sm90_tst_256x96_TNT)$(race '(anonymous namespace)::causal_softmax_kernel(float *, int)')$S: 2 hazards displayed (2 errors, 0 warnings)\n"
check "a hazard in naive's softmax (hazard format): failed" \
    verdict 1 "$(hazard 'causal_softmax_kernel(float *, int)')$S: 1 hazard displayed (1 error, 0 warnings)\n"
check "hazards counted but no kernel named: failed" \
    verdict 1 "$S: 1 hazard displayed (1 error, 0 warnings)\n"
check "the tool's internal error, even with 0 hazards counted: failed" \
    verdict 1 "========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.\n$S: 0 hazards displayed (0 errors, 0 warnings)\n"
check "no summary (the run did not finish): failed" verdict 1 "$(race nvjet_sm90_tst_256x96_TNT)"
# distributed shared memory written in a cluster block that has not started (session 9, call 9)
check "a potential invalid shared write, with a clean summary: failed" \
    verdict 1 "========= Potential invalid __shared__ write of size 8 bytes\n=========     at void (anonymous namespace)::gemm_rows_kernel<(int)1, (int)12>(GemvArgs, int)+0x5c00\n=========     Address 0x1003800 is located in a block that might not have entered yet\n$S: 0 hazards displayed (0 errors, 0 warnings)\n"
check "no log given: usage, exit 2" bash -c 'bash scripts/racecheck_verdict.sh 2>/dev/null; [ $? -eq 2 ]'
check "an unreadable log: usage, exit 2" bash -c "bash scripts/racecheck_verdict.sh $tmp/missing 2>/dev/null; [ \$? -eq 2 ]"
finish
