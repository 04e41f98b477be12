#!/usr/bin/env bash
# Installs what the build, the tests and the plots need, from Debian's packages, when it is
# missing: a C compiler and make, PCRE2 (the GPT-2 pre-tokenizer's regex), clang with its
# libFuzzer runtime (fuzzing), gnuplot (the comparison plots), curl (make data when online). Run as root or with sudo.
# The CUDA toolkit is not installed here: BACKEND=cuda needs nvcc on the PATH (NVIDIA's
# packages); without it the CPU backend is built and tested alone.
set -euo pipefail
packages=(build-essential libpcre2-dev clang libclang-rt-14-dev gnuplot-nox curl ca-certificates)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present (${packages[*]})"
    exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
