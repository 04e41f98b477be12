#!/usr/bin/env bash
# Builds the PCRE2 that data/bpe.c links: 10.46, whose Unicode tables are version 16.0.0, the
# version tiktoken's regex engine has, so that the GPT-2 pre-tokenizer sees the same letters and
# numbers as tiktoken (Debian 12's own PCRE2, 10.42, has Unicode 14: the 9,392 letters and digits
# added in Unicode 15 and 16 would split differently). Run by scripts/setup.sh; no root needed.
#
#   scripts/build_pcre2.sh [PREFIX]     (default deps/pcre2; the Makefile looks there)
#
# The source is Debian 13 (trixie)'s package, with Debian's backported security fixes: apt reads
# trixie's source index into a private folder (the system's apt configuration is not touched),
# checking the index's signature against Debian's archive keyring, and apt downloads each file
# checking it against the sha256 the signed index gives. The upstream tarball's sha256 is also
# pinned here, so that a new upstream version is a deliberate change. Built static (so the
# programs carry it, e.g. to a machine without PCRE2), 8-bit library only, with JIT, generic
# x86-64 code (-O2, no -march=native). A second run finds PREFIX/BUILT and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=10.46
ORIG_SHA256=8d28d7f2c3b970c3a4bf3776bcbb5adfc923183ce74bc8df1ebaad8c1985bd07
UNICODE_VERSION=16.0.0
PREFIX=${1:-deps/pcre2}
die() { echo "build_pcre2: $*" >&2; exit 1; }

if [ -f "$PREFIX/BUILT" ] && grep -q "^pcre2 $VERSION " "$PREFIX/BUILT" &&
   [ -f "$PREFIX/lib/libpcre2-8.a" ] && [ -f "$PREFIX/include/pcre2.h" ]; then
    echo "build_pcre2: $(cat "$PREFIX/BUILT") already in $PREFIX"
    exit 0
fi
for tool in apt-get /usr/lib/apt/apt-helper patch make cc; do
    command -v "$tool" >/dev/null || die "$tool not found (scripts/setup.sh installs build-essential)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/build_pcre2.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"

# ---- the source, through apt ----------------------------------------------------------------
# Two archives carry trixie's sources: the release and its security updates. A mirror may lack a
# file in one of them (seen: the .diff.gz only under debian-security, the tarball only under
# debian), so each file that the first archive's index lists is taken from whichever archive
# has it with the same sha256.
archives=("http://deb.debian.org/debian trixie" "http://deb.debian.org/debian-security trixie-security")
apt_opts() {   # apt_opts SOURCES-FILE: apt options that use only that file and the private folder
    echo "-o Dir::Etc::SourceList=$1 -o Dir::Etc::SourceParts=- -o Dir::State::Lists=$work/lists" \
         "-o Dir::Cache=$work/cache -o APT::Sandbox::User=$(id -un) -qq"
}
: >"$work/uris"
for archive in "${archives[@]}"; do
    read -r uri suite <<<"$archive"
    list="$work/$suite.sources"
    printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
        "$uri" "$suite" /usr/share/keyrings/debian-archive-keyring.gpg >"$list"
    # shellcheck disable=SC2046
    if ! apt-get $(apt_opts "$list") update >"$work/apt.log" 2>&1; then
        cat "$work/apt.log" >&2
        echo "build_pcre2: apt-get update failed for $archive" >&2
        continue
    fi
    # lines: URI NAME SIZE SHA256:HASH for the .dsc, the upstream tarball and Debian's diff; the
    # .dsc is left out, being the list of hashes that the signed index already gave
    # shellcheck disable=SC2046
    apt-get $(apt_opts "$list") source --print-uris pcre2 2>/dev/null | tr -d "'" |
        awk '$2 ~ /^pcre2_/ && $2 !~ /\.dsc$/' >"$work/uris.$suite" || true
    [ -s "$work/uris.$suite" ] || { echo "build_pcre2: no pcre2 source in $archive" >&2; continue; }
    [ -s "$work/wanted" ] || awk '{ print $2, $4 }' "$work/uris.$suite" >"$work/wanted"
    cat "$work/uris.$suite" >>"$work/uris"
done
[ -s "$work/uris" ] || die "apt found no pcre2 source in Debian trixie (network?)"
while read -r name hash; do
    got=0
    while read -r url; do
        # shellcheck disable=SC2046
        if /usr/lib/apt/apt-helper $(apt_opts /dev/null) download-file "$url" "$work/$name" "$hash" \
                >"$work/apt.log" 2>&1; then
            got=1; break
        fi
        echo "build_pcre2: not fetched, trying the next archive: $(grep -m1 '^E:' "$work/apt.log" ||
            tail -n1 "$work/apt.log")" >&2
    done < <(awk -v n="$name" -v h="$hash" '$2 == n && $4 == h { print $1 }' "$work/uris")
    [ "$got" -eq 1 ] || die "could not fetch $name (${hash}) from any of: ${archives[*]}"
done <"$work/wanted"
orig="$work/pcre2_$VERSION.orig.tar.gz"
diff=$(ls "$work"/pcre2_*.diff.gz 2>/dev/null || true)
[ -f "$orig" ] && [[ "$diff" == "$work/pcre2_$VERSION-"* ]] ||
    die "Debian trixie's pcre2 is not $VERSION but: $(awk '{ printf "%s ", $1 }' "$work/wanted")"
echo "$ORIG_SHA256  $orig" | sha256sum --quiet -c - ||
    die "pcre2_$VERSION.orig.tar.gz does not have the pinned sha256 $ORIG_SHA256"
debian_version=$(basename "$diff" .diff.gz); debian_version=${debian_version#pcre2_}
echo "build_pcre2: building PCRE2 $VERSION (Debian $debian_version) into $PREFIX"

# ---- build ------------------------------------------------------------------------------------
tar -xzf "$orig" -C "$work"
src="$work/pcre2-$VERSION"
zcat "$diff" | patch -s -p1 -d "$src"
(cd "$src" && ./configure -q --disable-shared --enable-static --with-pic --enable-jit \
    --disable-pcre2grep-libz --disable-pcre2grep-libbz2 --disable-pcre2test-libreadline \
    --disable-dependency-tracking CFLAGS=-O2 >/dev/null &&
 make -s -j"$(nproc)" libpcre2-8.la >/dev/null) || die "configure or make failed in $src"

# The library must say Unicode $UNICODE_VERSION and JIT, or it is not what we came for.
cat >"$work/probe.c" <<'EOF'
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
int main(void) {
    char unicode[32];
    uint32_t jit = 0;
    pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, unicode);
    pcre2_config(PCRE2_CONFIG_JIT, &jit);
    printf("%s %s\n", unicode, jit ? "jit" : "nojit");
    return 0;
}
EOF
cc -I"$src/src" "$work/probe.c" "$src/.libs/libpcre2-8.a" -o "$work/probe"
got=$("$work/probe")
[ "$got" = "$UNICODE_VERSION jit" ] || die "the built library says '$got', expected '$UNICODE_VERSION jit'"

rm -rf "$PREFIX"
mkdir -p "$PREFIX/lib" "$PREFIX/include"
cp "$src/.libs/libpcre2-8.a" "$PREFIX/lib/"
cp "$src/src/pcre2.h" "$PREFIX/include/"
cp "$src/LICENCE.md" "$PREFIX/"
echo "pcre2 $VERSION (Debian $debian_version), Unicode $UNICODE_VERSION, JIT" >"$PREFIX/BUILT"
echo "build_pcre2: $(cat "$PREFIX/BUILT") in $PREFIX"
