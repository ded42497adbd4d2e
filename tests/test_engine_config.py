"""Effective engine configuration per cell (ADR 0029): the record columns, round_time_ms, the
pre-registered ``engine_config_matched`` check and the curve columns.

Crafted records (tests/analysis_records.py) carry the baseline's engine configuration on every arm;
each test injects one difference into one cell and requires the check to name it exactly. The real
engine's side is asserted in tests/test_runner_cpu.py (no engine starts here).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import analysis_records as ar
import polars as pl
import pytest

from specjoule import cells, config, records, runner
from specjoule.analysis import aggregate, checks, derive
from specjoule.engines import vllm as vllm_engine

REPO = Path(__file__).resolve().parent.parent

C = ar.CLOSED


def _cfg_edit(**changes) -> ar.Mutation:
    """Change keys of a crafted record's engine_config (None removes the key) and its flat columns."""
    def apply(row: ar.Row) -> None:
        cfg = json.loads(row["engine_config"])
        for k, v in changes.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        row.update(runner.engine_config_columns(cfg))
    return apply


def _checks(tmp: Path, th: checks.Thresholds | None = None, **kw) -> pl.DataFrame:
    paths = ar.write_campaigns(tmp, **kw)
    return checks.run_checks(aggregate.aggregate(paths), th or checks.Thresholds.from_config({}), ar.CONFIG_HASH)


def _row(result: pl.DataFrame, check: str, campaign: str) -> dict:
    rows = result.filter((pl.col("check") == check) & (pl.col("campaign_id") == campaign)).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


def _loud(result: pl.DataFrame) -> set[tuple[str, str]]:
    return {(r["check"], r["campaign_id"])
            for r in result.filter(pl.col("status").is_in([checks.FAIL, checks.FLAG])).iter_rows(named=True)}


def test_check_is_registered_as_a_campaign_check():
    assert checks.CHECKS["engine_config_matched"].level == "campaign"
    assert checks.Thresholds.from_config({}).engine_config_may_differ == []


def test_matched_configs_pass_and_arm_keys_are_ignored(tmp_path):
    # The crafted points differ from the baseline in speculative / speculative_* keys only.
    result = _checks(tmp_path)
    row = _row(result, "engine_config_matched", C)
    assert row["status"] == checks.PASS and row["value"] == 0.0
    assert row["cell_names"] == [c.name for c in sorted(ar.cell_table().campaigns[C], key=lambda c: c.run_order_index)]
    assert checks.engine_config_diff({"speculative": False, "max_num_seqs": 8},
                                     {"speculative": True, "speculative_method": "ngram", "max_num_seqs": 8,
                                      "max_num_scheduled_tokens": 2040}) == []


def test_difference_fails_with_exact_detail(tmp_path):
    """The H200 case: the draft arm ran without async scheduling and on the V1 runner."""
    result = _checks(tmp_path, mutate={(C, "syn--L2"): _cfg_edit(async_scheduling=False, model_runner="v1")})
    row = _row(result, "engine_config_matched", C)
    assert row["status"] == checks.FAIL
    assert row["cell_names"] == ["syn--L2"] and row["value"] == 1.0
    assert row["detail"] == 'syn--L2 vs baseline--open: async_scheduling: true → false, model_runner: "v2" → "v1"'
    assert _loud(result) == {("engine_config_matched", C)}, "only this check may fire"


def test_long_lists_and_absent_keys_in_the_detail(tmp_path):
    sizes = [1, 2, 4, 8, 16, 24, 32, 40, 48]
    result = _checks(tmp_path, mutate={(C, "baseline--close"): _cfg_edit(cudagraph_capture_sizes=sizes, model_runner=None)})
    row = _row(result, "engine_config_matched", C)
    assert row["status"] == checks.FAIL and row["cell_names"] == ["baseline--close"]
    assert row["detail"] == ("baseline--close vs baseline--open: cudagraph_capture_sizes: [1, 2, 4, 8] → "
                             '[1, 2, 4, 8, 16, …, 48] (9 items), model_runner: "v2" → absent')


def test_difference_accepted_in_advance_is_flagged(tmp_path):
    th = checks.Thresholds.from_config({"engine_config_may_differ": ["async_scheduling"]})
    result = _checks(tmp_path / "a", th, mutate={(C, "syn--L4"): _cfg_edit(async_scheduling=False)})
    row = _row(result, "engine_config_matched", C)
    assert row["status"] == checks.FLAG and row["cell_names"] == ["syn--L4"]
    assert row["detail"] == ("differences accepted in advance (checks.engine_config_may_differ): "
                             "syn--L4 vs baseline--open: async_scheduling: true → false")
    # An accepted difference beside an unaccepted one still fails, and says which was accepted.
    result = _checks(tmp_path / "b", th, mutate={(C, "syn--L4"): _cfg_edit(async_scheduling=False, max_num_seqs=64)})
    row = _row(result, "engine_config_matched", C)
    assert row["status"] == checks.FAIL
    assert row["detail"] == ("syn--L4 vs baseline--open: async_scheduling: true → false (accepted in advance), "
                             "max_num_seqs: 8 → 64")
    # A flag reaches the curve row it concerns, not its siblings.
    recs = aggregate.aggregate(ar.write_campaigns(tmp_path / "c", mutate={(C, "syn--L4"): _cfg_edit(async_scheduling=False)}))
    curves = derive.derive(recs, checks.run_checks(recs, th, ar.CONFIG_HASH))
    flagged = curves.filter(pl.col("flags").list.contains("engine_config_matched"))
    assert set(zip(flagged["campaign_id"], flagged["cell_name"])) == {(C, "syn--L4")}


def test_not_applicable_without_engine_config_and_fail_when_mixed(tmp_path):
    old = {(c.campaign_id, c.name): ar.setter(engine_config=None, async_scheduling=None, cuda_graph_sizes=None)
           for c in ar.cell_table()}
    row = _row(_checks(tmp_path / "old", mutate=old), "engine_config_matched", C)
    assert row["status"] == checks.NA and "no record carries engine_config" in row["detail"]
    # One baseline without it: every arm compared with that baseline cannot be judged.
    mixed = {(C, "baseline--open"): old[(C, "baseline--open")]}
    row = _row(_checks(tmp_path / "mixed", mutate=mixed), "engine_config_matched", C)
    assert row["status"] == checks.FAIL and len(row["cell_names"]) == 4
    assert "syn--L2: engine_config not recorded for baseline--open" in row["detail"]


def test_may_differ_is_validated_by_the_schema():
    cfg = dict(ar.GPU_CONFIG, checks={"engine_config_may_differ": "async_scheduling"})
    with pytest.raises(config.ConfigError):
        config.validate(cfg)
    ok = config.validate(dict(ar.GPU_CONFIG, checks={"engine_config_may_differ": ["async_scheduling"]}))
    assert ok["checks"]["engine_config_may_differ"] == ["async_scheduling"]


def test_round_time_ms_definition():
    base = {"method": "baseline", "workload_kind": "closed_batch", "batch_size": 8, "window_s": 20.0,
            "committed_tokens": 5120, "accepted_tokens": 0}
    assert records.round_time_ms(base) == pytest.approx(31.25)  # 5120 tokens / 8 requests = 640 steps in 20 s
    # A round that accepts 3 of its drafts commits 4 tokens per request: a quarter of the steps (160), 4 × as long.
    spec = base | {"method": "draft_model", "accepted_tokens": 3840}
    assert records.round_time_ms(spec) == pytest.approx(125.0)
    # Open loop: the sampled concurrency is B_eff: 5120 / 2.5 = 2048 steps in 20 s.
    open_ = base | {"workload_kind": "open_loop", "mean_running_requests": 2.5}
    assert records.round_time_ms(open_) == pytest.approx(9.765625)
    assert records.round_time_ms(spec | {"accepted_tokens": None}) is None  # not measured: null, not a guess
    assert records.round_time_ms(open_ | {"mean_running_requests": None}) is None
    assert records.derive(base)["round_time_ms"] == pytest.approx(31.25)


def test_curves_carry_engine_config_columns(tmp_path):
    mutate = {(C, "syn--L2"): _cfg_edit(async_scheduling=False, cudagraph_capture_sizes=[6])}
    recs = aggregate.aggregate(ar.write_campaigns(tmp_path, mutate=mutate))
    th = checks.Thresholds.from_config({"engine_config_may_differ": ["async_scheduling", "cudagraph_capture_sizes"]})
    curves = derive.derive(recs, checks.run_checks(recs, th, ar.CONFIG_HASH))
    r = curves.filter((pl.col("campaign_id") == C) & (pl.col("cell_name") == "syn--L2")).to_dicts()[0]
    assert r["async_scheduling"] is False and r["baseline_async_scheduling"] is True
    assert r["cuda_graph_sizes"] == 1 and r["baseline_cuda_graph_sizes"] == 4
    rec = recs.filter((pl.col("campaign_id") == C) & (pl.col("cell_name") == "syn--L2")).to_dicts()[0]
    assert r["round_time_ms"] == pytest.approx(records.round_time_ms(rec))
    base = recs.filter((pl.col("campaign_id") == C) & (pl.col("role") != "point"))
    assert r["baseline_round_time_ms"] == pytest.approx(base["round_time_ms"].mean())
    assert r["round_time_ms"] > r["baseline_round_time_ms"]  # fewer, longer steps when speculating


def test_engine_config_columns():
    cols = runner.engine_config_columns({"async_scheduling": True, "cudagraph_capture_sizes": [1, 2, 4],
                                         "cudagraph_mode": "FULL_AND_PIECEWISE", "b": 1, "a": [2]})
    assert cols["async_scheduling"] is True and cols["cuda_graph_sizes"] == 3
    assert list(json.loads(cols["engine_config"])) == sorted(json.loads(cols["engine_config"]))
    assert runner.engine_config_columns({"enforce_eager": True, "cudagraph_capture_sizes": [1]})["cuda_graph_sizes"] == 0
    assert runner.engine_config_columns({"cudagraph_mode": "NONE"})["cuda_graph_sizes"] == 0
    assert runner.engine_config_columns({"async_scheduling": None}) == {
        "engine_config": '{"async_scheduling": null}', "async_scheduling": None, "cuda_graph_sizes": None}
    assert runner.engine_config_columns(None)["engine_config"] is None


def test_async_scheduling_passes_through_engine_options():
    raw = config.read_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")
    raw["engine_options"]["vllm"]["async_scheduling"] = False
    cell = next(c for c in cells.build(config.validate(raw)) if c.name == "draft")
    kw = vllm_engine.engine_kwargs(cell.spec)
    assert kw["async_scheduling"] is False
    cmd = vllm_engine.server_command(cell.spec, "127.0.0.1", 8000, kw)
    assert "--no-async-scheduling" in cmd
    # Without a server dump, the record says what the command set, and says that it is only that.
    cfg = vllm_engine.config_from_kwargs(kw)
    assert cfg["async_scheduling"] is False and cfg["max_num_seqs"] == 4
    assert cfg["speculative_method"] == "draft_model" and cfg["engine_config_source"] == "server_command"


def test_config_reader_tolerates_missing_and_raising_attributes():
    class Raises:
        @property
        def async_scheduling(self):
            raise RuntimeError("not on this build")

    class Vc:
        scheduler_config = Raises()
        speculative_config = None

    out = vllm_engine.config_from_vllm_config(Vc())
    assert "async_scheduling" not in out and out["speculative"] is False


def test_server_dump_reads_like_the_offline_path():
    """/server_info?config_format=json gives enum values; the record keeps names, as offline."""
    dump = {"vllm_config": {"scheduler_config": {"async_scheduling": True, "max_num_seqs": 4},
                            "compilation_config": {"cudagraph_mode": [2, 1], "mode": 3, "cudagraph_capture_sizes": [1, 2]},
                            "speculative_config": None},
            "vllm_env": {"VLLM_USE_V2_MODEL_RUNNER": False}}
    cfg = vllm_engine.config_from_server_info(dump)
    assert cfg == {"async_scheduling": True, "max_num_seqs": 4, "compilation_mode": "VLLM_COMPILE",
                   "cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2], "speculative": False,
                   "engine_config_source": "server_info"} | {
        f"env_{n}": os.environ[n] for n in vllm_engine.ENGINE_ENV_VARS if n in os.environ}
    assert vllm_engine.config_from_server_info({"detail": "Not Found"}) == {}


# -- engine_options.<engine>.env: settings that exist only as environment variables -----------------


def test_engine_env_reaches_the_engine_process_and_not_its_arguments() -> None:
    from specjoule import cells
    from specjoule import config as config_mod
    from specjoule.engines import vllm as vllm_adapter

    cfg = config_mod.load(REPO / "config" / "config.yaml")
    cfg["engine_options"]["vllm"]["env"] = {"VLLM_USE_V2_MODEL_RUNNER": 0}
    cell = cells.build(config_mod.validate(cfg)).cells[0]
    env = vllm_adapter.engine_env(cell.spec)
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert "env" not in vllm_adapter.engine_kwargs(cell.spec)


@pytest.mark.parametrize("env, message", [
    (["VLLM_USE_V2_MODEL_RUNNER=0"], "engine_options.vllm.env = ['VLLM_USE_V2_MODEL_RUNNER=0']"),
    ({"not a name": "1"}, "engine_options.vllm.env = 'not a name'"),
    ({"VLLM_X": {"nested": 1}}, "engine_options.vllm.env.VLLM_X"),
])
def test_engine_env_errors_name_key_and_value(env, message) -> None:
    from specjoule import config as config_mod

    cfg = config_mod.load(REPO / "config" / "config.yaml")
    cfg["engine_options"]["vllm"]["env"] = env
    with pytest.raises(config_mod.ConfigError) as exc:
        config_mod.validate(cfg)
    assert message in str(exc.value)
