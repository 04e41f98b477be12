#!/usr/bin/env bash
# tests/test_gpu_clock.sh: scripts/gpu_clock.sh with a fake nvidia-smi whose samples are known,
# without a GPU: the summary's figures, the command's exit status passed through, the samples
# kept, and the clear failures (no command, bad options, no nvidia-smi, fields it cannot
# report). Ends like the C tests: "tests/test_gpu_clock.sh: N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
name=tests/test_gpu_clock.sh
. tests/shell_test.sh

# the fake: one sample for the probe; with -lms, SAMPLES' lines at once, then sleeps until killed
cat > "$tmp/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
[ -n "${FAKE_SMI_FAIL:-}" ] && { echo "Field \"power.draw.instant\" is not a valid field to query."; exit 2; }
case " $* " in
*" -lms "*) printf '%b' "$SAMPLES"; exec sleep 30 ;;
*) echo "2026/12/03 17:00:00.000, 0, 345, 78.36, 0x0000000000000001" ;;
esac
EOF
chmod +x "$tmp/nvidia-smi"
export NVIDIA_SMI=$tmp/nvidia-smi
# an idle sample, three busy ones (1,700-1,900 MHz, 600-800 W; reasons: power cap; none; power
# cap + hardware thermal + hardware power brake) and one whose utilization is not reported
export SAMPLES='2026/12/03 17:00:00.000, 0, 345, 78.00, 0x0000000000000001
2026/12/03 17:00:00.050, 100, 1700, 600.00, 0x0000000000000004
2026/12/03 17:00:00.100, 99, 1800, 700.00, 0x0000000000000000
2026/12/03 17:00:00.150, 100, 1900, 800.00, 0x00000000000000C4
2026/12/03 17:00:00.200, [N/A], 1980, 810.00, 0x0000000000000000
'
run() {   # run EXPECTED_EXIT ARG...: gpu_clock.sh's exit and output (in $tmp/out)
    local want=$1; shift
    bash scripts/gpu_clock.sh "$@" > "$tmp/out" 2>&1
    local rc=$?
    [ "$rc" -eq "$want" ] || { echo "  exit $rc, expected $want:"; cat "$tmp/out"; false; }
}

check "a command: its output, then the summary" run 0 -- bash -c 'echo hello; sleep 0.3'
check "  the command's output passes through" has "$tmp/out" "hello"
check "  busy samples counted (utilization >= 50%, unreported ones left out)" has "$tmp/out" \
    "gpu_clock: 3 of 4 samples busy (utilization >= 50%)"
check "  the clock's mean and range" has "$tmp/out" "SM clock mean 1800 MHz (1700-1900)"
check "  the power's mean and maximum" has "$tmp/out" "power mean 700 W (max 800)"
check "  the reasons from nvidia-smi's mask" has "$tmp/out" \
    "power cap in 2, thermal in 1, hardware slowdown in 1"
check "the command's exit status passes through" run 3 -- bash -c 'sleep 0.3; exit 3'
check "  with the summary still printed" has "$tmp/out" "gpu_clock: 3 of 4 samples busy"
check "--samples keeps the samples" run 0 --interval 20 --samples "$tmp/kept.csv" -- sleep 0.3
check "  all of them" bash -c "[ \$(wc -l < '$tmp/kept.csv') -eq 5 ]"
SAMPLES='2026/12/03 17:00:00.000, 0, 345, 78.00, 0x0000000000000001
' check "no busy sample: said so" run 0 -- sleep 0.3
check "  in words" has "$tmp/out" "gpu_clock: no busy samples among 1"

check "no command: usage, exit 2" run 2
check "  says why" has "$tmp/out" "no command given"
check "an option without its value: exit 2" run 2 --interval
check "a non-numeric interval: exit 2" run 2 --interval fast -- true
check "  says why" has "$tmp/out" "--interval takes milliseconds, not 'fast'"
check "a zero interval: exit 2" run 2 --interval 0 -- true
check "a non-numeric GPU index: exit 2" run 2 --gpu first -- true
check "an unknown option: exit 2" run 2 --period 5 -- true
check "  says the command goes after --" has "$tmp/out" "the command goes after --"
check "no nvidia-smi: exit 1" env NVIDIA_SMI="$tmp/missing" bash -c \
    "bash scripts/gpu_clock.sh -- echo hello > '$tmp/out' 2>&1; [ \$? -eq 1 ]"
check "  says so" has "$tmp/out" "not found: this script samples an NVIDIA GPU through nvidia-smi"
check "  and the command did not run" bash -c "! grep -q hello '$tmp/out'"
check "fields the driver cannot report: exit 1 before the command" env FAKE_SMI_FAIL=1 bash -c \
    "bash scripts/gpu_clock.sh -- echo ran > '$tmp/out' 2>&1; [ \$? -eq 1 ]"
check "  with nvidia-smi's words" has "$tmp/out" "is not a valid field to query"
check "  and the command did not run" bash -c "! grep -q '^ran' '$tmp/out'"
check "an unwritable --samples file: exit 1" bash -c \
    "bash scripts/gpu_clock.sh --samples '$tmp/no/such/dir/s.csv' -- true > '$tmp/out' 2>&1; [ \$? -eq 1 ]"
finish
