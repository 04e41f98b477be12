# tests/shell_test.sh: what the shell tests share, sourced once they have set `name`: the counts,
# check, has, need_python3, a temporary folder $tmp (removed at exit unless KEEP_TMP is set),
# and finish, which prints the line tests/run_tests.sh adds up ("NAME: N passed, N failed, N
# skipped") and exits non-zero when a check failed.
passed=0; failed=0; skipped=0
check() {   # check DESCRIPTION COMMAND...: passes when COMMAND succeeds
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $name: $what"; fi
}
has() {   # has FILE TEXT: passes when FILE holds TEXT (a fixed string)
    grep -qF -- "$2" "$1" || { echo "  expected in $1: $2"; false; }
}
finish() {
    echo "$name: $passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]
    exit
}
need_python3() {   # need_python3 WHAT: without python3, the whole test is one skip (WHAT is Python)
    command -v python3 > /dev/null && return
    echo "SKIP: no python3 ($1 is Python)"; skipped=1; finish
}
tmp=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
