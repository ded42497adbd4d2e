#!/usr/bin/env bash
# Run campaign families of one config on the device machine, one Snakemake invocation per target, in order.
#   [GPUS=2] bash tools/device/campaign.sh CONFIG TARGET [TARGET ...]
# Each TARGET is usually a family's last closing-baseline record: Snakemake builds the chain before it. One
# invocation per family keeps a family's engine groups back to back (its baselines bracket only its own points).
# A failed family does not stop the next (its records so far stay; --rerun-incomplete resumes it later).
set -uo pipefail
config="${1:?CONFIG}"; shift
# shellcheck disable=SC1091
source /tmp/site/specjoule-env.sh
export SPECJOULE_SGLANG_PYTHONPATH="${SPECJOULE_SGLANG_PYTHONPATH:-/tmp/site-sglang}" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
# No .git travels to the device: name the commit here (SPECJOULE_GIT_COMMIT=<sha> bash …) or records say "unknown".
[ -n "${SPECJOULE_GIT_COMMIT:-}" ] || git rev-parse HEAD >/dev/null 2>&1 \
  || echo "campaign: WARNING no git checkout and no SPECJOULE_GIT_COMMIT: records will say git_commit unknown" >&2
rc=0
# Hardware constants of this GPU first, while it is idle (ADR 0100; ~25 s, skipped when this GPU and driver
# already have results/hardware/<uuid>-<driver>.json). CALIBRATE=0 skips it; a failure does not stop the run.
if [ "${CALIBRATE:-1}" != 0 ]; then
  echo "campaign: $(date -u +%FT%TZ) calibrate"
  python3 -m specjoule.hardware calibrate --out results/hardware || echo "campaign: calibration failed (rc=$?)" >&2
fi
for target in "$@"; do
  echo "campaign: $(date -u +%FT%TZ) start $target"
  # GPUS: what Snakemake may hand out at once (2 on a two-GPU machine, so that a tensor-parallel campaign can
  # run: its cells ask for tensor_parallel_size GPUs, ADR 0155); one target is one chain, so cells still run one
  # at a time.
  python3 -m snakemake "$target" --cores 4 --resources gpu="${GPUS:-1}" --nolock --rerun-incomplete --keep-going \
    --configfile "$config" || rc=$?
  echo "campaign: $(date -u +%FT%TZ) end $target rc=$rc"
done
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,memory.used --format=csv || true
exit $rc
