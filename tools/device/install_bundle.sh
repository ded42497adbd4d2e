#!/usr/bin/env bash
# Reassemble, verify and install the offline bundle on the device machine, then check it (ADR 0060).
#
#   bash tools/device/install_bundle.sh [PARTS_DIR] [SITE]     (defaults /tmp/bundle-parts, /tmp/site)
#   env: STANDINS=auto|on|off (default auto), PYTHON (default python3), OUT (the device tool's output folder),
#        CHECK=0 to skip the full import check (the measurement path's import smoke always runs), SMOKE=1 to also run tools/device/smoke_vllm.py
#
# Afterwards, in every later call on the same (warm) machine:   source /tmp/site/specjoule-env.sh
# Exit 3: parts missing (a fresh machine, or not all carried yet); 1: corrupt or failed install/check.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
parts="${1:-/tmp/bundle-parts}"
site="${2:-/tmp/site}"
python="${PYTHON:-python3}"
out="${OUT:-}"
unpack="${UNPACK_DIR:-/tmp/specjoule-bundle-unpacked}"
t0=$(date +%s)

# 0. The image as it is, before anything of ours: what bundle/gpu-image-packages.txt should hold.
if [ -n "$out" ] && [ -d "$out" ]; then
  {
    echo "# pip list --format=freeze of $("$python" -c 'import sys; print(sys.executable)') ($("$python" -V 2>&1)), $(date -u +%Y-%m-%d)"
    PYTHONPATH= "$python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null
  } >"$out/gpu-image-freeze.txt" || echo "install_bundle: could not write the image's freeze (continuing)"
fi

# 1. Every part present and intact.
if [ ! -f "$parts/PARTS.sha256" ]; then
  echo "install_bundle: no parts in $parts (a fresh machine? carry every .bundle/parts/NN with receive_part.sh first)" >&2
  exit 3
fi
missing=""
while read -r _sum name; do [ -f "$parts/$name" ] || missing="$missing $name"; done <"$parts/PARTS.sha256"
if [ -n "$missing" ]; then
  echo "install_bundle: parts missing in $parts:$missing (carry them with receive_part.sh)" >&2
  exit 3
fi
(cd "$parts" && sha256sum --check --strict --quiet PARTS.sha256) || { echo "install_bundle: a part is corrupt" >&2; exit 1; }
names="$(awk '{print $2}' "$parts/PARTS.sha256" | sort)"
want="$(cut -d' ' -f1 "$parts/ARCHIVE.sha256")"
have="$(cd "$parts" && cat $names | sha256sum | cut -d' ' -f1)"
if [ "$want" != "$have" ]; then
  echo "install_bundle: reassembled archive sha256 $have != $want" >&2
  exit 1
fi
echo "install_bundle: $(echo $names | wc -w) parts verified, archive sha256 $want"

# 2. Unpack with Python's own lzma + tarfile: nothing else is assumed on the node.
rm -rf "$unpack"
mkdir -p "$unpack"
(cd "$parts" && cat $names) | "$python" -c '
import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz") as tar:
    if hasattr(tarfile, "data_filter"):
        tar.extractall(sys.argv[1], filter="data")
    else:
        tar.extractall(sys.argv[1])
' "$unpack"
bundle="$unpack/specjoule-bundle"
echo "install_bundle: unpacked to $bundle ($(du -sh "$bundle" | cut -f1)) in $(( $(date +%s) - t0 )) s"

# 3. Install.
bash "$bundle/install.sh" --target "$site" --python "$python" --standins "${STANDINS:-auto}"

# 4. This checkout first on the path: the measurement code that runs is this commit's, not the bundled wheel's.
{
  echo "export SPECJOULE_REPO='$repo'"
  echo "export PYTHONPATH='$repo':\$PYTHONPATH"
} >>"$site/specjoule-env.sh"
[ -n "$out" ] && [ -d "$out" ] && cp "$bundle/manifest.json" "$out/bundle-manifest.json"
echo "install_bundle: installed in $(( $(date +%s) - t0 )) s; in later calls: source $site/specjoule-env.sh"

# 5. Check what was installed, on this node's Python and GPU.
# shellcheck disable=SC1090,SC1091
source "$site/specjoule-env.sh"
# Always, CHECK=0 too (about a second): the measurement path imports and plans with this site alone. An install
# that skipped the full check once left Snakemake to find a missing module at parse time, on device time (issue 22).
if ! "$python" "$repo/tools/device/smoke_measurement_path.py"; then
  echo "install_bundle: the measurement path does not import with $site (above: the module); Snakemake would fail" \
       "at parse time. Fix the import, or the bundle's profile, and install again" >&2
  exit 1
fi
if [ "${CHECK:-1}" != "0" ]; then
  "$python" "$repo/tools/device/check_env.py" --manifest "$bundle/manifest.json" ${out:+--out "$out"}
fi
if [ "${SMOKE:-0}" = "1" ]; then
  "$python" "$repo/tools/device/smoke_vllm.py" ${out:+--out "$out"}
fi
echo "install_bundle: finished in $(( $(date +%s) - t0 )) s"
