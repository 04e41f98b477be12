#!/usr/bin/env bash
# scripts/get_data.sh REL DEST: put the public file REL (a path in the data mirror's layout:
# tinyshakespeare/input.txt, gpt2/vocab.bpe, gpt2/encoder.json) at DEST, checking its sha256.
# Source: $DATA_SRC/REL when DATA_SRC is set (an offline mirror such as ../shared/data), else the
# file's canonical URL. DEST appears only once complete and verified.
set -euo pipefail

rel=${1:?usage: get_data.sh REL DEST}
dest=${2:?usage: get_data.sh REL DEST}

case "$rel" in
  tinyshakespeare/input.txt)
    url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
    sha=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed ;;
  gpt2/vocab.bpe)
    url=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe
    sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 ;;
  gpt2/encoder.json)
    url=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json
    sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 ;;
  *) echo "error: get_data.sh: unknown file '$rel'" >&2; exit 1 ;;
esac

mkdir -p "$(dirname "$dest")"
tmp="$dest.tmp.$$"
trap 'rm -f "$tmp"' EXIT

if [ -n "${DATA_SRC:-}" ]; then
  if [ ! -f "$DATA_SRC/$rel" ]; then
    echo "error: $DATA_SRC/$rel: no such file (DATA_SRC must be a folder laid out like ../shared/data)" >&2
    exit 1
  fi
  echo "copying $DATA_SRC/$rel -> $dest"
  cp "$DATA_SRC/$rel" "$tmp"
  chmod 644 "$tmp"
else
  echo "downloading $url -> $dest"
  if ! curl -fsSL --retry 2 --connect-timeout 10 -o "$tmp" "$url"; then
    echo "error: cannot download $url (offline?). Use a local copy of the data files instead:" >&2
    echo "       make data DATA_SRC=../shared/data   (a folder holding $rel)" >&2
    exit 1
  fi
fi

got=$(sha256sum "$tmp" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  echo "error: ${DATA_SRC:+$DATA_SRC/}$rel has sha256 $got, expected $sha (corrupt or a different version)" >&2
  exit 1
fi
mv "$tmp" "$dest"
trap - EXIT
