#!/usr/bin/env bash
# A single-node SLURM on this machine, by hand (the tests bring up the same one themselves).
#
#   sudo scripts/slurm_local.sh up       # munged, slurmctld, slurmd; /etc/slurm/slurm.conf (old one backed up)
#   scripts/slurm_local.sh status        # sinfo
#   SPECJOULE_SLURM_PARTITION=debug SPECJOULE_SLURM_GPUS=0 SPECJOULE_SLURM_MEM_MB=8000 \
#     .venv/bin/snakemake --profile profiles/slurm --set-threads run_cell=2   # the CPU demo via sbatch
#   sudo scripts/slurm_local.sh down     # stop the daemons by PID, restore /etc/slurm
#
# Needs root and the Debian packages from scripts/install_system_deps.sh. See ADR 0054.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec "$PY" tests/slurm_cluster.py "${1:-status}"
