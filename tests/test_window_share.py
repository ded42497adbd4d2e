"""Device time inside energy windows (issue 22): warm-up only where the engine's state changed (ADR 0188), engine
starts from the campaign's compile cache (ADR 0189), and the plan's estimate of both.

The warm-up rule is one function the runner and the planner share (cells.warmup_planned); the expectations below
are derived from the cells' own attributes, not from that function. The compile cache is read on real directories
laid out as vLLM lays them out. The runner's side on a real CPU engine is in tests/test_runner_cpu.py."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from specjoule import cells, config
from specjoule.cellspec import CellSpec
from specjoule.engines import compile_cache, vllm

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "h200-paper-campaign.yaml"


def _raw(path: Path = PAPER) -> dict:
    return config.read_yaml(path)


def _table(raw: dict) -> cells.CellTable:
    return cells.build(config.validate(raw))


def _pairs(group: cells.EngineGroup):
    return zip((None, *group.cells[:-1]), group.cells)


# -- the warm-up decision (ADR 0188) ---------------------------------------------------------------------------------


def test_a_cell_warms_up_exactly_where_a_configuration_axis_changed():
    table = _table(_raw())
    checked = 0
    for group in table.engine_groups().values():
        for previous, cell in _pairs(group):
            # Same configuration = everything but the seed (a replicate): acceptance vector, batch, corpus, workload.
            repeat = previous is not None and (previous.acceptance_rates, previous.batch_size, previous.corpus,
                                               previous.workload) == (cell.acceptance_rates, cell.batch_size,
                                                                      cell.corpus, cell.workload)
            assert cells.warmup_planned(previous, cell) is (not repeat), (group.group_id, cell.campaign_id, cell.name)
            checked += not repeat
    # 2 batch sizes per vector: the opening and closing baselines warm up twice, each of the 13 vectors twice.
    assert checked == 2 * (1 + 13 + 1)


def test_another_seed_or_window_keeps_the_engine_warm_and_nothing_else_does():
    raw = _raw()
    raw.update(windows=2, batch_sizes=[1], seeds=[0, 1], corpora={"random": {"source": "random"},
                                                                   "other": {"source": "random"}})
    table = _table(raw)
    by = {(c.campaign_id, c.name): c for c in table}
    camp = "vllm-qwen3_8b-closed-b1-random-s0-cg1"
    first = by[(camp, "eagle3--mv2")]
    assert cells.same_engine_state(first, by[(camp, "eagle3--mv2--w1")])  # window replicate
    assert cells.same_engine_state(first, by[(camp.replace("-s0-", "-s1-"), "eagle3--mv2")])  # seed replicate
    assert not cells.same_engine_state(first, by[(camp, "eagle3--mv3")])  # a swapped vector
    assert not cells.same_engine_state(first, by[(camp.replace("random", "other"), "eagle3--mv2")])  # corpus
    assert not cells.same_engine_state(first, by[(camp, "dflash--mv2")])  # another engine
    assert not cells.same_engine_state(first, first)  # the same cell again is not a repeat of it
    assert cells.warmup_planned(None, first)  # an engine's first cell


def test_loop_cells_and_configs_without_warm_up():
    raw = _raw()
    raw["workloads"] = {"ol": {"kind": "open_loop", "prompt_len": 512, "output_len": 512, "rate": 3.0,
                               "window_s": 20, "warmup_s": 5, "cooldown_s": 3}}
    table = _table(raw)
    for group in table.engine_groups().values():
        # After the previous loop drained, the engine is empty: arrivals must reach their steady state again.
        assert all(cells.warmup_planned(p, c) for p, c in _pairs(group))
    raw = _raw()
    raw["workloads"]["closed"]["warmup_s"] = 0
    table = _table(raw)
    assert not any(cells.warmup_planned(p, c) for g in table.engine_groups().values() for p, c in _pairs(g))
    assert all(table.group_estimate(g).warmups_skipped == 0 for g in table.engine_groups().values())


# -- the compile cache the engine gets (ADR 0189) --------------------------------------------------------------------


def _spec(table: cells.CellTable) -> CellSpec:
    return next(iter(table)).setup


def test_vllm_engines_compile_into_the_results_tree_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    spec = _spec(_table(_raw()))
    want = os.path.join(os.getcwd(), "results", ".specjoule", "engine-cache", "vllm")
    assert vllm.engine_env(spec)["VLLM_CACHE_ROOT"] == want
    assert vllm.VllmOfflineEngine(spec).compile_cache_root() == Path(want)
    assert vllm.VllmServerEngine(spec).compile_cache_root() == Path(want)
    # A server attached by URL compiled with its own environment.
    assert vllm.VllmServerEngine(spec, url="http://127.0.0.1:1").compile_cache_root() is None
    # A root the config names, or the environment, wins.
    raw = _raw()
    raw["engine_options"]["vllm"]["env"] = {"VLLM_CACHE_ROOT": "/scratch/vllm-cache"}
    assert vllm.engine_env(_spec(_table(raw)))["VLLM_CACHE_ROOT"] == "/scratch/vllm-cache"
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/site/cache")
    assert vllm.engine_env(spec)["VLLM_CACHE_ROOT"] == "/site/cache"


def test_no_cache_to_read_for_an_eager_engine_or_a_cache_turned_off(monkeypatch):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    demo = _spec(_table(_raw(REPO / "config" / "config.yaml")))  # cpu, graphs off: vLLM runs eager
    assert vllm.VllmOfflineEngine(demo).compile_cache_root() is None
    raw = _raw()
    raw["engine_options"]["vllm"]["env"] = {"VLLM_DISABLE_COMPILE_CACHE": "1"}
    assert vllm.VllmOfflineEngine(_spec(_table(raw))).compile_cache_root() is None


def _compiled(root: Path, key: str, aot: bool = False) -> None:
    base = root / "torch_compile_cache" / ("torch_aot_compile" if aot else "")
    (base / key / "rank_0_0").mkdir(parents=True)
    (base / key / "rank_0_0" / "model").write_bytes(b"x")


def test_a_start_is_warm_when_it_added_no_compiled_graph_entry(tmp_path):
    root = tmp_path / "vllm"
    empty = compile_cache.keys(root)  # no cache directory yet
    assert empty == frozenset() and compile_cache.started_warm(empty, compile_cache.keys(root)) is None
    _compiled(root, "5cab4eadf4")
    _compiled(root, "3659ac8b", aot=True)
    first = compile_cache.keys(root)
    assert first == {"torch_compile_cache/5cab4eadf4", "torch_aot_compile/3659ac8b"}
    assert compile_cache.started_warm(empty, first) is False  # the first start compiled
    # A later start of the same configuration writes inside its existing entries only: warm.
    (root / "torch_compile_cache" / "5cab4eadf4" / "rank_0_0" / "eagle_head").mkdir()
    assert compile_cache.started_warm(first, compile_cache.keys(root)) is True
    # Another configuration adds its own key: cold, although the cache held others.
    _compiled(root, "246cce84a6")
    assert compile_cache.started_warm(first, compile_cache.keys(root)) is False


def test_vllm_root_follows_the_engine_environment():
    assert compile_cache.vllm_root({"VLLM_CACHE_ROOT": "/c"}) == Path("/c")
    assert compile_cache.vllm_root({"VLLM_CACHE_ROOT": "/c", "VLLM_DISABLE_COMPILE_CACHE": "1"}) is None
    assert compile_cache.vllm_root({"VLLM_CACHE_ROOT": "/c", "TORCH_COMPILE_DISABLE": "1"}) is None
    assert compile_cache.vllm_root({"VLLM_CACHE_ROOT": "/c", "VLLM_DISABLE_COMPILE_CACHE": "0"}) == Path("/c")


# -- the plan's estimate ---------------------------------------------------------------------------------------------


def test_the_closing_baseline_starts_warm_and_the_estimate_adds_up(tmp_path):
    raw = _raw()
    table = _table(raw)
    protocol = raw["protocol"]
    groups = list(table.engine_groups().values())
    # Only the closing baseline repeats an engine already started (the opening one's): the drafters differ.
    assert table.warm_start_groups() == {groups[-1].group_id} and groups[-1].phase == cells.ROLE_CLOSING
    window, warmup = raw["workloads"]["closed"]["min_window_s"], raw["workloads"]["closed"]["warmup_s"]
    expected = 0.0
    for i, g in enumerate(groups):
        # One warm-up per (vector, batch size) block of the group's run order, whatever the seeds.
        blocks = len({(c.acceptance_rates, c.batch_size) for c in g.cells})
        start = protocol["engine_start_warm_s"] if i == len(groups) - 1 else protocol["engine_start_s"]
        expected += start + protocol["idle_s"] + blocks * warmup + len(g.cells) * window
    assert table.estimated_device_s() == pytest.approx(expected)
    share = table.estimated_window_s() / expected
    assert f"≈ {100 * share:.0f} % of it inside energy windows" in table.summary()
    assert "1 of them from a warm compile cache" in table.summary()
    # A job's time limit plans its start cold.
    assert table.group_estimated_s(groups[-1], warm_cache=False) - table.group_estimated_s(groups[-1]) == \
        pytest.approx(protocol["engine_start_s"] - protocol["engine_start_warm_s"])
    table.write_plan(tmp_path / "plan.tsv")
    import polars as pl

    plan = pl.read_csv(tmp_path / "plan.tsv", separator="\t")
    assert plan["estimated_gpu_s"].sum() == pytest.approx(table.estimated_gpu_s(), abs=plan.height)
    assert plan["warmup"].sum() == sum(len({(c.acceptance_rates, c.batch_size) for c in g.cells}) for g in groups)
    assert plan["warm_start"].sum() == 1 and plan.filter(pl.col("warm_start") == 1)["role"].to_list() == [
        cells.ROLE_CLOSING]


def test_warm_starts_are_planned_only_where_the_runner_gets_them():
    raw = _raw()
    del raw["protocol"]["engine_start_warm_s"]  # unset: planned cold, and the summary says what it could be
    table = _table(raw)
    assert all(not table.group_estimate(g).warm_start for g in table.engine_groups().values())
    assert "1 of them could load their compiled graphs" in table.summary()
    raw = _raw()
    raw["engine_options"]["vllm"]["env"] = {"VLLM_DISABLE_COMPILE_CACHE": "1"}
    assert _table(raw).warm_start_groups() == frozenset()
    # SGLang keeps no vLLM compile cache: of the spread campaign's replicate families only vLLM's start warm.
    spread = _table(_raw(REPO / "config" / "h200-spread.yaml"))
    warm = spread.warm_start_groups()
    assert warm and all(spread.engine_groups()[g].cells[0].engine == "vllm" for g in warm)
    # Each vLLM engine configuration compiles once; every later start of it is warm.
    signatures = [cells.start_signature(g.cells) for g in spread.engine_groups().values()]
    assert len(warm) == sum(s is not None for s in signatures) - len({s for s in signatures if s is not None})


def test_without_sharing_a_repeated_engine_start_is_warm_too():
    raw = _raw()
    raw["protocol"].update(share_engines=False, swap_synthetic_acceptance=False)
    raw["schemes"] = {"baseline": {"method": "baseline"}}
    table = _table(raw)
    # One engine per cell: the baseline at B = 1 and 32, three seeds, opening and closing: 2 signatures, 12 starts.
    assert table.engine_starts() == 12 and len(table.warm_start_groups()) == 12 - 2


def test_a_warm_start_planned_longer_than_a_cold_one_is_refused():
    raw = copy.deepcopy(_raw())
    raw["protocol"]["engine_start_warm_s"] = 120
    with pytest.raises(config.ConfigError) as info:
        config.validate(raw)
    assert str(info.value).startswith("config error at protocol.engine_start_warm_s = 120: above "
                                      "protocol.engine_start_s = 100")
