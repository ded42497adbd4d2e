#!/usr/bin/env bash
# Run campaign families of one config on the device machine, one Snakemake invocation per family, in order.
#   [GPUS=2] bash tools/device/campaign.sh CONFIG [FAMILY|TARGET ...]
# FAMILY: a campaign family's name (`python3 tools/device/family_targets.py --names CONFIG`), resolved right
# before it runs to what closes its chain (tools/device/family_targets.py): with engine sharing the done file of
# its last planned group job, results/.specjoule/groups/<family>/gNN-<phase>-<key>.done (a record path is no
# rule's output there: "MissingRuleException", ADR 0140); without, the last record of each of its campaigns.
# TARGET: anything with a "/" is passed to Snakemake as it is. None: every family of CONFIG, in plan order.
# One invocation per family keeps a family's engine groups back to back (its baselines bracket only its own
# points). A failed family does not stop the next (its records so far stay; --rerun-incomplete resumes it later).
# env: GPUS (below), CALIBRATE=0 (skip the calibration), SNAKEMAKE_ARGS (added to each Snakemake call, e.g. "-n"
# to see what each family would run), SITE_ENV (default /tmp/site/specjoule-env.sh, what install_bundle.sh wrote; the
# SGLang site alone: /tmp/site-sglang/specjoule-env.sh, ADR 0235).
set -uo pipefail
config="${1:?CONFIG}"; shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
site_env="${SITE_ENV:-/tmp/site/specjoule-env.sh}"
# A missing site would leave the node's bare Python to fail later with an unrelated import error: say which file.
if [ ! -f "$site_env" ]; then
  echo "campaign: no site environment $site_env (SITE_ENV): install a bundle first (tools/device/install_bundle.sh);" \
       "an SGLang-only session sets SITE_ENV=/tmp/site-sglang/specjoule-env.sh (ADR 0235)" >&2
  exit 2
fi
# shellcheck disable=SC1090
source "$site_env"
export SPECJOULE_SGLANG_PYTHONPATH="${SPECJOULE_SGLANG_PYTHONPATH:-/tmp/site-sglang}" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
# No .git travels to the device: name the commit here (SPECJOULE_GIT_COMMIT=<sha> bash …) or records say "unknown".
[ -n "${SPECJOULE_GIT_COMMIT:-}" ] || git rev-parse HEAD >/dev/null 2>&1 \
  || echo "campaign: WARNING no git checkout and no SPECJOULE_GIT_COMMIT: records will say git_commit unknown" >&2
# The config plans and every family named exists, before any GPU time (exit 2 names the problem).
families="$(python3 "$here/family_targets.py" --names "$config")" || exit 2
# shellcheck disable=SC2086  # one family name per line, no spaces in a name: split on purpose
[ $# -gt 0 ] || set -- $families
for target in "$@"; do
  case "$target" in
    */*) ;;
    *) grep -qxF -- "$target" <<<"$families" \
         || { echo "campaign: no family $target in $config; its families: $(echo $families)" >&2; exit 2; } ;;
  esac
done
rc=0
# Hardware constants of this GPU first, while it is idle (ADR 0100; ~25 s, skipped when this GPU and driver
# already have results/hardware/<uuid>-<driver>.json). CALIBRATE=0 skips it; a failure does not stop the run.
if [ "${CALIBRATE:-1}" != 0 ]; then
  echo "campaign: $(date -u +%FT%TZ) calibrate"
  python3 -m specjoule.hardware calibrate --out results/hardware || echo "campaign: calibration failed (rc=$?)" >&2
fi
for target in "$@"; do
  paths="$target"
  if [[ "$target" != */* ]]; then
    # Resolved now, not at the start: the done file's name depends on what is left to measure of the family.
    line="$(python3 "$here/family_targets.py" "$config" "$target")" || { rc=2; continue; }
    paths="${line#"$target"}"
    paths="${paths# }"
    if [ -z "$paths" ]; then
      echo "campaign: $(date -u +%FT%TZ) $target: nothing left to measure"
      continue
    fi
    echo "campaign: $(date -u +%FT%TZ) family $target: $paths"
  fi
  echo "campaign: $(date -u +%FT%TZ) start $target"
  # GPUS: what Snakemake may hand out at once (2 on a two-GPU machine, so that a tensor-parallel campaign can
  # run: its cells ask for tensor_parallel_size GPUs, ADR 0155); one target is one chain, so cells still run one
  # at a time.
  # shellcheck disable=SC2086
  family_rc=0
  python3 -m snakemake $paths ${SNAKEMAKE_ARGS:-} --cores 4 --resources gpu="${GPUS:-1}" --nolock --rerun-incomplete --keep-going \
    --configfile "$config" || family_rc=$?
  [ "$family_rc" = 0 ] || rc=$family_rc
  echo "campaign: $(date -u +%FT%TZ) end $target rc=$family_rc"
  if [ "$family_rc" != 0 ] && [[ "$target" != */* ]]; then
    # The engine's own reason in this log, which comes back with every poll: reading it must not need the
    # machine to be held (2026-12-02c spent 175 s of device time keeping it while two failures were read).
    for log in $(ls -t "results/logs/engines/$target/"*.log 2>/dev/null | head -n 3); do
      # The runner's own rule (ADR 0197): the root cause first, past the engine's wrappers, then the other lines.
      echo "campaign: $target failed; the errors in $log, root cause first:"
      PYTHONPATH="$here/../..${PYTHONPATH:+:$PYTHONPATH}" python3 -c 'import sys
from specjoule.runner import logged_exceptions, root_cause
found = logged_exceptions(sys.argv[1])
cause = root_cause(found)
for line in ([cause] if cause else []) + [e for e in found if e != cause]:
    print("campaign:   " + line[:300])' "$log" || tail -n 5 "$log" | sed 's/^/campaign:   /'
    done
  fi
done
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,memory.used --format=csv || true
exit $rc
