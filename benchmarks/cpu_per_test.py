"""CPU seconds per test, for tuning `make test` (ADR 0223). A pytest plugin, loaded by name:

    PYTHONPATH=$PWD:$PWD/benchmarks PYTEST_PLUGINS=cpu_per_test TEST_CPU_OUT=cpu.jsonl TEST_CPU_CGROUP=/sys/... pytest ...

Each test (setup, call and teardown, so a module or session fixture counts in the first test that uses it) adds one
JSON line to TEST_CPU_OUT: node id, xdist worker, start, wall seconds, and CPU seconds two ways: ``rusage`` (this
process and its reaped children: misses engine processes that outlive their parent or are killed as a group) and,
where TEST_CPU_CGROUP names a cgroup-v1 cpuacct directory this process may write, ``cgroup`` (every descendant: each
xdist worker moves itself into a sub-group of its own, named TEST_CPU_PHASE-worker). `benchmarks/make_test_cpu.sh`
runs `make test`'s recipe this way.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest

_group: Path | None = None


def pytest_configure(config) -> None:
    """An xdist worker moves itself into a cpuacct group of its own (the controller runs no test)."""
    global _group
    base, worker = os.environ.get("TEST_CPU_CGROUP"), os.environ.get("PYTEST_XDIST_WORKER")
    if base and worker:
        _group = Path(base) / f"{os.environ.get('TEST_CPU_PHASE', 'pytest')}-{worker}"
        _group.mkdir(parents=True, exist_ok=True)
        (_group / "cgroup.procs").write_text(str(os.getpid()))


def _cpu() -> tuple[float, float | None]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rusage = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    cgroup = int((_group / "cpuacct.usage").read_text()) / 1e9 if _group else None
    return rusage, cgroup


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    r0, g0 = _cpu()
    t0 = time.time()
    yield
    r1, g1 = _cpu()
    out = os.environ.get("TEST_CPU_OUT")
    if out:
        row = {
            "id": item.nodeid,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "start": t0,
            "wall_s": time.time() - t0,
            "rusage_s": r1 - r0,
            "cgroup_s": None if g0 is None else g1 - g0,
        }
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
