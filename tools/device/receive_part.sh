#!/usr/bin/env bash
# Receive one carried part of the offline bundle on the device machine (ADR 0060).
#
#   bash tools/device/receive_part.sh .bundle/parts/NN [DEST]      (DEST default /tmp/bundle-parts)
#
# The device tool carries one part folder per call (`carry: [".bundle/parts/NN"]`): the folder holds the part,
# PARTS.sha256 (every part's sum) and ARCHIVE.sha256 (the whole archive's). This copies the part out of the
# repository copy to DEST, which outlives the call while the machine stays warm, checks its sum, and says which
# parts DEST still lacks. Exit 0: part stored and verified; 1: checksum mismatch; 2: usage / part not carried.
set -euo pipefail

src="${1:-}"
dest="${2:-/tmp/bundle-parts}"
if [ -z "$src" ]; then
  echo "usage: receive_part.sh PART_DIR [DEST]   e.g. receive_part.sh .bundle/parts/00" >&2
  exit 2
fi
if [ ! -f "$src/PARTS.sha256" ] || ! ls "$src"/*.part[0-9][0-9] >/dev/null 2>&1; then
  echo "receive_part: no part in '$src' (was it named in the call's carry?)" >&2
  exit 2
fi
mkdir -p "$dest"

# Parts of another bundle must not mix with this one's.
if [ -f "$dest/ARCHIVE.sha256" ] && ! cmp -s "$dest/ARCHIVE.sha256" "$src/ARCHIVE.sha256"; then
  echo "receive_part: $dest held parts of another bundle; clearing it"
  rm -f "$dest"/*.part[0-9][0-9] "$dest"/PARTS.sha256 "$dest"/ARCHIVE.sha256
fi
cp "$src/PARTS.sha256" "$src/ARCHIVE.sha256" "$dest/"

for f in "$src"/*.part[0-9][0-9]; do
  name="$(basename "$f")"
  cp "$f" "$dest/$name.tmp"
  if ! (cd "$dest" && grep "  $name\$" PARTS.sha256 | sed "s/  $name\$/  $name.tmp/" | sha256sum --check --status); then
    rm -f "$dest/$name.tmp"
    echo "receive_part: $name: sha256 does not match PARTS.sha256 (transfer damaged?)" >&2
    exit 1
  fi
  mv "$dest/$name.tmp" "$dest/$name"
  echo "receive_part: $name verified ($(stat -c %s "$dest/$name") bytes) -> $dest"
done

total=0
have=0
missing=""
while read -r _sum name; do
  total=$((total + 1))
  if [ -f "$dest/$name" ]; then have=$((have + 1)); else missing="$missing $name"; fi
done <"$dest/PARTS.sha256"
if [ -z "$missing" ]; then
  echo "receive_part: all $total parts in $dest: run tools/device/install_bundle.sh"
else
  echo "receive_part: $have of $total parts in $dest; still to carry:$missing"
fi
