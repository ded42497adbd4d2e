#!/usr/bin/env bash
# Install this offline bundle of wheels on a node without network (specjoule, ADR 0060/0061).
#
#   ./install.sh [--target DIR] [--python PY] [--standins auto|on|off]
#   source DIR/specjoule-env.sh        # then: python3 -c 'import vllm' / snakemake ...
#
# --target    where the packages go (default /tmp/site); nothing outside it is touched
# --python    the node's interpreter, the one that has torch (default: $PYTHON or python3)
# --standins  auto: a stand-in module is put first on the path only for a structured-output package whose real
#             wheel does not import or lacks what vLLM evaluates at import; on: always; off: never (default auto)
#
# The wheels go in with `pip install --no-index --no-deps --target`: the node's own packages (torch, CUDA, numpy
# ...) are left as they are, and the bundle was resolved against them (manifest.json says how).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target=/tmp/site
python="${PYTHON:-python3}"
standins=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target="${2:?--target needs a directory}"; shift 2 ;;
    --python) python="${2:?--python needs an interpreter}"; shift 2 ;;
    --standins) standins="${2:?--standins needs auto, on or off}"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$standins" in auto|on|off) ;; *) echo "install.sh: --standins '$standins': must be auto, on or off" >&2; exit 2 ;; esac
command -v "$python" >/dev/null || { echo "install.sh: --python '$python' not found" >&2; exit 2; }
target="$(mkdir -p "$target" && cd "$target" && pwd)"

# 1. Every wheel is the one the manifest lists (hashlib, not sha256sum: nothing beyond Python is assumed).
"$python" - "$here" <<'PY'
import hashlib, sys
from pathlib import Path
here = Path(sys.argv[1])
bad = []
for line in (here / "SHA256SUMS").read_text().splitlines():
    digest, _, rel = line.partition("  ")
    p = here / rel
    if not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != digest:
        bad.append(rel)
if bad:
    sys.exit(f"install.sh: {len(bad)} wheel(s) missing or corrupt: {', '.join(bad[:5])}")
PY

# 2. The node's Python is the one the bundle was resolved for.
want="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["python_version"])' "$here/manifest.json")"
have="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ "$want" != "$have" ]; then
  echo "install.sh: this bundle is for Python $want; $python is Python $have" >&2
  exit 1
fi

# ... and its C library is new enough for the newest manylinux tag among the wheels.
"$python" - "$here/manifest.json" <<'PY'
import json, platform, sys
need = json.load(open(sys.argv[1])).get("min_glibc", "2.5")
lib, have = platform.libc_ver()
if lib == "glibc" and tuple(map(int, have.split("."))) < tuple(map(int, need.split("."))):
    sys.exit(f"install.sh: the wheels need glibc >= {need}; this node has {have}: rebuild with --glibc {have}")
print(f"install.sh: glibc {have or '?'} (wheels need >= {need})", file=sys.stderr)
PY

# 3. Install. --upgrade replaces what an earlier install left in the target.
n_wheels=$(ls "$here"/wheels/*.whl | wc -l)
echo "install.sh: installing $n_wheels wheels into $target with $python ($have)"
"$python" -m pip install --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --disable-pip-version-check --quiet --target "$target" "$here"/wheels/*.whl

# 4. Stand-ins for structured-output packages that do not import (ADR 0061).
standin_dir="$target/_specjoule_standins"
rm -rf "$standin_dir"
used="$(PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$python" - "$here/manifest.json" "$standins" <<'PY'
import importlib, json, sys, traceback
manifest, mode = json.load(open(sys.argv[1])), sys.argv[2]
used = []
for mod, attrs in manifest.get("standins", {}).items():
    if mode == "on":
        used.append(mod)
        continue
    if mode == "off":
        continue
    try:
        m = importlib.import_module(mod)
        missing = [a for a in attrs if not hasattr(m, a)]
        if missing:
            raise ImportError(f"{mod} lacks {missing}")
        print(f"install.sh: {mod}: real package imports ({getattr(m, '__version__', '?')})", file=sys.stderr)
    except Exception as exc:  # any failure at import is what the stand-in is for
        print(f"install.sh: {mod}: real package fails ({type(exc).__name__}: {exc}); using its STAND-IN",
              file=sys.stderr)
        traceback.print_exc(limit=3, file=sys.stderr)
        used.append(mod)
print(" ".join(used))
PY
)"
if [ -n "$used" ]; then
  mkdir -p "$standin_dir"
  for m in $used; do cp -r "$here/standins/$m" "$standin_dir/"; done
  echo "install.sh: STAND-INS in use (structured output unavailable): $used"
fi

# 5. The environment, as a file to source in every later shell (engine workers are separate processes, so
#    PYTHONPATH, not sys.path, carries the packages to them).
# A directory on PYTHONPATH is no site directory: Python ignores the .pth files in it. nvidia-cutlass-dsl puts its
# `cutlass` package on sys.path through one (ADR 0193), so the entries the target's .pth files add go on PYTHONPATH.
pth_dirs="$(PYTHONPATH= "$python" - "$target" <<'PY'
import site, sys
before = set(sys.path)
site.addsitedir(sys.argv[1])
print(":".join(p for p in sys.path if p not in before and p != sys.argv[1]))
PY
)"
[ -n "$pth_dirs" ] && echo "install.sh: from the target's .pth files, on PYTHONPATH: $pth_dirs"
pypath="$target${pth_dirs:+:$pth_dirs}"
[ -n "$used" ] && pypath="$standin_dir:$pypath"
env_file="$target/specjoule-env.sh"
{
  echo "# written by $here/install.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ); source it"
  echo "if [ ! -d '$target' ]; then echo 'specjoule bundle: $target is gone (fresh machine?): install again' >&2; return 3 2>/dev/null || exit 3; fi"
  echo "export PYTHONPATH='$pypath'\${PYTHONPATH:+:\$PYTHONPATH}"
  echo "export PATH='$target/bin':\$PATH"
  echo "export SPECJOULE_BUNDLE='$here'"
  echo "export SPECJOULE_SITE='$target'"
  echo "export SPECJOULE_BUNDLE_STANDINS='$used'"
  cat "$here/exports.sh"
} >"$env_file"

echo "install.sh: done. Environment ($env_file):"
grep '^export' "$env_file" | sed 's/^/  /'
echo "install.sh: now run: source $env_file"
