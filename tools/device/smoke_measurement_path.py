"""Import smoke of the measurement path, in about a second (issue 22): install_bundle.sh runs it always, CHECK=0 too.

    python3 tools/device/smoke_measurement_path.py [--config CONFIG]

Imports what Snakemake needs to parse the workflow and plan the run rules, the cell runner, the engine adapters,
the meter and the GPU calibration, with this node's site; then plans CONFIG (default the demo,
config/config.yaml) as the workflow's parse does (``specjoule.config.plan``: every parse-time check and the cells)
and cuts its engine-group jobs (``specjoule.engine_jobs``). No engine starts, no GPU is touched, nothing is written.
The offline bundle's ``pipeline`` profile ships no polars: a module of the analysis extra reached from here is the
fault this catches (on 2026-12-02 `snakemake` failed at parse time on the H200 after an install with CHECK=0).
Prints ``MEASUREMENT PATH: OK …``; exit 1 naming what failed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

# The workflow's parse (rules/common.smk), `python -m specjoule.runner`, `python -m specjoule.resolve_models`,
# `python -m specjoule.hardware calibrate` and what the runner starts (the adapters import their engine lazily).
MODULES: tuple[str, ...] = (
    "snakemake.api",
    "specjoule.config",
    "specjoule.cells",
    "specjoule.engine_jobs",
    "specjoule.resolve_models",
    "specjoule.corpora",
    "specjoule.runner",
    "specjoule.engines",
    "specjoule.engines.vllm",
    "specjoule.engines.sglang",
    "specjoule.meter",
    "specjoule.meter.nvml",
    "specjoule.hardware",
    "specjoule.loadgen",
)


def smoke(config_path: Path) -> str:
    """Import MODULES and plan ``config_path``; the one-line summary. Raises what the import or plan raised."""
    for name in MODULES:
        importlib.import_module(name)
    from specjoule import config, engine_jobs

    cfg, table = config.plan(config.read_yaml(config_path), str(config_path))
    jobs = engine_jobs.plan_jobs(table, cfg["version"])
    return (
        f"{len(MODULES)} modules, {config_path}: {len(table.cells)} cells, {len(jobs.jobs)} engine-group jobs if shared"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        summary = smoke(args.config)
    except ModuleNotFoundError as exc:
        print(
            f"MEASUREMENT PATH: FAILED: no module named {exc.name!r} on this node's path ({exc}); the measurement "
            f"path must import with the installed site alone (bundle/profiles.toml, profile pipeline)",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # noqa: BLE001 - any failure here would stop Snakemake too: say it before the GPU run
        print(f"MEASUREMENT PATH: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"MEASUREMENT PATH: OK ({summary}) in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
