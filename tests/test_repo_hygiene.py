"""The repository keeps what it claims to keep.

An earlier `.gitignore` line `results/` matched every `results/` folder, also the ones under
`validation/`, so H200 records that the notes called "committed" never reached git. The evidence
folders must stay trackable; only the top-level workspace `results/` is scratch.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _ignored(rel: str) -> bool:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail("git and a git checkout are needed to check .gitignore (CI runs on a clone)")
    proc = subprocess.run(["git", "check-ignore", "-q", "--no-index", rel], cwd=REPO)
    assert proc.returncode in (0, 1), f"git check-ignore failed on {rel}"
    return proc.returncode == 0


@pytest.mark.parametrize("rel", [
    "validation/h200-2026-12/engines/results/cells/vllm-x/baseline--open.parquet",
    "validation/h200-2026-12/engines/results/checks.md",
    "validation/h200-2026-12/engines/results/report.html",
])
def test_validation_evidence_is_not_ignored(rel: str) -> None:
    assert not _ignored(rel), f"{rel} would be silently left out of git by .gitignore"


@pytest.mark.parametrize("rel", ["results/cells/c/x.parquet", ".snakemake/log/x.log", ".venv/bin/python"])
def test_workspace_outputs_are_ignored(rel: str) -> None:
    assert _ignored(rel), f"{rel} should be ignored (scratch output)"
