#!/usr/bin/env bash
# gpu_clock.sh: run a command while nvidia-smi samples the GPU, then say what clock the GPU ran
# at and why: the SM clock, the instant power and the clock-event reasons (power cap, thermal,
# hardware slowdown) over the samples where the GPU was busy.
#
# Why: from T = 16,384 on, our flash kernels and cuDNN's both run under the H200's power cap
# (docs/PERF.md, twenty-first session), so a kernel's time depends on the energy it spends as
# well as on its cycles, and a change that saves cycles but not energy runs at a lower clock.
# This puts the clock beside the time.
#
#   scripts/gpu_clock.sh [--interval MS] [--gpu N] [--samples FILE] -- COMMAND [ARG...]
#     e.g. scripts/gpu_clock.sh -- build/cuda-flash/bench/attention --backend flash --tmin 65536
#
# COMMAND's output passes through; then one line on stdout:
#   gpu_clock: B of N samples busy (utilization >= 50%): SM clock mean M MHz (min-max),
#   power mean W (max), power cap in P, thermal in Q, hardware slowdown in R
# --interval: milliseconds between samples (default 50); --gpu: nvidia-smi's index (default 0);
# --samples: keep the samples there (CSV: timestamp, utilization %, SM MHz, instant power W,
# clock-event reasons as nvidia-smi's hex mask).
# Exit status: COMMAND's; 2 for a bad command line; 1 when nvidia-smi is missing or cannot
# report these fields (it needs a driver with power.draw.instant and clocks_event_reasons).
# NVIDIA_SMI names another nvidia-smi (tests/test_gpu_clock.sh uses a fake one).
set -u

usage() {
    echo "usage: scripts/gpu_clock.sh [--interval MS] [--gpu N] [--samples FILE] -- COMMAND [ARG...]" >&2
    exit 2
}
interval=50 gpu=0 samples=""
while [ $# -gt 0 ]; do
    case $1 in
    --interval) [ $# -ge 2 ] || usage; interval=$2; shift 2 ;;
    --gpu) [ $# -ge 2 ] || usage; gpu=$2; shift 2 ;;
    --samples) [ $# -ge 2 ] || usage; samples=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "gpu_clock.sh: unknown option '$1' (the command goes after --)" >&2; usage ;;
    esac
done
[ $# -ge 1 ] || { echo "gpu_clock.sh: no command given" >&2; usage; }
case $interval in '' | *[!0-9]*) echo "gpu_clock.sh: --interval takes milliseconds, not '$interval'" >&2; usage ;; esac
[ "$interval" -ge 1 ] || { echo "gpu_clock.sh: --interval must be at least 1 ms" >&2; usage; }
case $gpu in '' | *[!0-9]*) echo "gpu_clock.sh: --gpu takes nvidia-smi's index, not '$gpu'" >&2; usage ;; esac

smi=${NVIDIA_SMI:-nvidia-smi}
command -v "$smi" > /dev/null 2>&1 ||
    { echo "gpu_clock.sh: '$smi' not found: this script samples an NVIDIA GPU through nvidia-smi" >&2; exit 1; }
fields=timestamp,utilization.gpu,clocks.sm,power.draw.instant,clocks_event_reasons.active
# one sample first: a driver without these fields (or no GPU) says so here, not after the command
if ! probe=$("$smi" -i "$gpu" --query-gpu=$fields --format=csv,noheader,nounits 2>&1); then
    echo "gpu_clock.sh: nvidia-smi cannot report $fields on GPU $gpu:" >&2
    echo "$probe" | head -n 3 >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${samples:-$tmp/samples.csv}
: > "$out" || { echo "gpu_clock.sh: cannot write the samples to '$out'" >&2; exit 1; }
"$smi" -i "$gpu" --query-gpu=$fields --format=csv,noheader,nounits -lms "$interval" > "$out" 2> "$tmp/smi.err" &
sampler=$!
"$@"
rc=$?
kill "$sampler" 2> /dev/null
wait "$sampler" 2> /dev/null

# reasons: nvidia-smi's mask (nvmlClocksEventReasons): 0x4 software power cap, 0x8 hardware
# slowdown, 0x20 software thermal, 0x40 hardware thermal, 0x80 hardware power brake
awk -F', *' '
function hexval(s,   i, c, v) {   # the low 16 bits of "0x..." (mawk has no strtonum)
    sub(/^0[xX]/, "", s); s = substr(s, length(s) > 4 ? length(s) - 3 : 1); v = 0
    for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", tolower(substr(s, i, 1))); v = v * 16 + (c ? c - 1 : 0) }
    return v
}
function bit(v, b) { return int(v / b) % 2 }
NF >= 5 && $2 ~ /^[0-9.]+$/ {
    n++
    if ($2 + 0 < 50 || $3 !~ /^[0-9.]+$/) next
    busy++; mhz = $3 + 0; sum += mhz
    if (busy == 1 || mhz < lo) lo = mhz
    if (busy == 1 || mhz > hi) hi = mhz
    if ($4 ~ /^[0-9.]+$/) { pw += $4; np++; if ($4 + 0 > pmax) pmax = $4 + 0 }
    r = hexval($5)
    cap += bit(r, 4); thermal += (bit(r, 32) || bit(r, 64)); slow += (bit(r, 8) || bit(r, 128))
}
END {
    if (!busy) { printf "gpu_clock: no busy samples among %d (the command ran for less than an interval, or not on this GPU)\n", n; exit }
    power = np ? sprintf("power mean %.0f W (max %.0f)", pw / np, pmax) : "power not reported"
    printf "gpu_clock: %d of %d samples busy (utilization >= 50%%): SM clock mean %.0f MHz (%.0f-%.0f), %s, power cap in %d, thermal in %d, hardware slowdown in %d\n",
        busy, n, sum / busy, lo, hi, power, cap, thermal, slow
}' "$out"
[ -s "$tmp/smi.err" ] && { echo "gpu_clock.sh: nvidia-smi said:" >&2; head -n 3 "$tmp/smi.err" >&2; }
exit "$rc"
