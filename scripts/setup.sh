#!/usr/bin/env bash
# Installs what the build, the tests and the plots need, from Debian's packages, when it is
# missing: a C compiler and make, clang with its libFuzzer runtime (fuzzing), gnuplot (the
# comparison plots), curl (make data when online), Python's venv. Run as root or with sudo.
# Then, as the user who runs it and into deps/ (git-ignored; kept by make clean):
#   deps/pcre2  PCRE2 10.46 with Unicode 16 tables, the GPT-2 pre-tokenizer's regex engine
#               (scripts/build_pcre2.sh; Debian 12's own PCRE2 has Unicode 14)
#   deps/venv   tiktoken, the reference that tests/test_tiktoken.py checks the tokenizer against,
#               at the versions tests/requirements.txt pins
# Each is done once: a second run finds them and returns at once.
# The CUDA toolkit is not installed here: BACKEND=cuda needs nvcc on the PATH (NVIDIA's
# packages); without it the CPU backend is built and tested alone (and under CI=true, whose
# image has the toolkit, scripts/check.sh counts the CUDA build failed).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(build-essential clang libclang-rt-14-dev gnuplot-nox curl ca-certificates python3-venv)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present (${packages[*]})"
else
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

bash scripts/build_pcre2.sh deps/pcre2

venv=deps/venv
if cmp -s tests/requirements.txt "$venv/requirements.txt"; then
    echo "setup: $venv has tests/requirements.txt ($(grep -v '^#' tests/requirements.txt | tr '\n' ' '))"
else
    echo "setup: installing tests/requirements.txt into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    # wheels only: a version without one for this platform fails here, naming it, rather than
    # starting a Rust build of tiktoken
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: -r tests/requirements.txt
    cp tests/requirements.txt "$venv/requirements.txt"
fi
