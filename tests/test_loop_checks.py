"""The load generator's checks (ADR 0110, 0111) on crafted records: steady_state, send_lag, latency_reliable, and
committed_spread standing aside for a closed loop. Each violation changes exactly its check, in its cell."""

from __future__ import annotations

import copy
from pathlib import Path

import analysis_records as ar
import polars as pl
import pytest

from specjoule.analysis import aggregate, checks

TH = checks.Thresholds.from_config({})
LOOP_CONFIG = copy.deepcopy(ar.GPU_CONFIG)
LOOP_CONFIG["workloads"] = {"conc": {"kind": "closed_loop", "prompt_len": 64, "output_len": 64, "concurrency": 6,
                                     "window_s": 30}}
CL = "vllm-p-conc-b8-code-s0-cg1"
OL = ar.OPEN


def _run(tmp: Path, cfg: dict, mutate: dict | None = None, th: checks.Thresholds = TH) -> pl.DataFrame:
    paths = ar.write_campaigns(tmp, cfg=cfg, mutate=mutate)
    return checks.run_checks(aggregate.aggregate(paths), th, ar.CONFIG_HASH)


def _row(result: pl.DataFrame, check: str, campaign: str) -> dict:
    (row,) = result.filter((pl.col("check") == check) & (pl.col("campaign_id") == campaign)).to_dicts()
    return row


def test_clean_closed_loop_passes_and_committed_spread_stands_aside(tmp_path):
    result = _run(tmp_path, LOOP_CONFIG, mutate={(CL, "ngram"): ar.setter(committed_tokens=90 * 64 * 2)})
    loud = result.filter(pl.col("status").is_in([checks.FAIL, checks.FLAG]))
    assert loud.height == 0, loud
    row = _row(result, "committed_spread", CL)  # twice the tokens of its baseline: throughput is the outcome
    assert row["status"] == checks.NA and "closed loop" in row["detail"]
    assert row["value"] is None  # no spread shown against a threshold the check does not apply
    for check in ("steady_state", "send_lag", "latency_reliable", "batch_shape"):
        assert _row(result, check, CL)["status"] == checks.PASS, check


@pytest.mark.parametrize("segments,waiting,inflight,status,cause", [
    ([6.0, 6.0, 5.5, 6.0], 0.0, 5.99, checks.PASS, None),      # 8.3 % off in one quarter: inside 10 %
    ([6.0, 6.0, 5.3, 6.0], 0.0, 5.99, checks.FAIL, "moved"),     # 11.7 % off
    ([4.0, 4.0, 4.0, 4.0], 2.0, 5.99, checks.FAIL, "waiting"),   # the engine queued two
    ([5.0, 5.0, 5.0, 5.0], 0.0, 5.0, checks.FAIL, "in flight"),   # the clients idled between requests
    ([6.0, None, 6.0, 6.0], 0.0, 5.99, checks.FAIL, "3 of 4"),    # a quarter without a reading: not shown
    ([1.0, 0.0, 3.0, 0.0], 0.0, 5.99, checks.FAIL, "front end"),  # N in flight, none queued, few running (CPU)
])
def test_closed_loop_steady_state(tmp_path, segments, waiting, inflight, status, cause):
    running = sum(s for s in segments if s is not None) / len([s for s in segments if s is not None])
    mutate = {(CL, "syn--L2"): ar.setter(running_requests_segments=segments, waiting_requests_mean=waiting,
                                         mean_inflight=inflight, mean_running_requests=running)}
    row = _row(_run(tmp_path, LOOP_CONFIG, mutate), "steady_state", CL)
    assert row["status"] == status, row
    known = [s for s in segments if s is not None]
    assert row["value"] == pytest.approx(max(abs(s - 6) for s in known) / 6)  # the worst quarter, relative to N
    if cause:
        assert row["cell_names"] == ["syn--L2"] and cause in row["detail"], row


def test_open_loop_backlog_growth_fails_and_names_the_rate(tmp_path):
    # 90 sent in the window; in flight 6 at its start and 20 at its end: +15.6 % of the sent, beyond 10 %
    mutate = {(OL, "syn--L4"): ar.setter(inflight_at_start=6, inflight_at_end=20, requests_sent=90)}
    row = _row(_run(tmp_path, None, mutate), "steady_state", OL)
    assert row["status"] == checks.FAIL and row["cell_names"] == ["syn--L4"]
    assert row["value"] == pytest.approx(14 / 90) and "does not sustain 3.0 requests/s" in row["detail"]


def test_send_lag_bound_and_records_before_the_load_generator(tmp_path):
    mutate = {(OL, "ngram"): ar.setter(send_lag_p99_s=0.4, send_lag_max_s=1.2),
              # an open-loop record written before ADR 0110: none of the load generator's columns
              (OL, "syn--L2"): ar.setter(**dict.fromkeys(("requests_sent", "realized_request_rate", "send_lag_p50_s", "send_lag_p99_s", "send_lag_max_s", "inflight_at_start", "inflight_at_end", "mean_inflight", "running_requests_segments", "starved_requests", "arrival_schedule", "burstiness")))}
    result = _run(tmp_path, None, mutate)
    row = _row(result, "send_lag", OL)
    assert row["status"] == checks.FAIL and row["cell_names"] == ["ngram"] and row["value"] == pytest.approx(0.4)
    assert "p99 0.4 s, max 1.2 s" in row["detail"]
    assert _row(result, "steady_state", OL)["status"] == checks.PASS  # the old record is not applicable, others pass
    stricter = checks.Thresholds.from_config({"max_send_lag_s": 0.001})  # pre-registered tighter: the clean ones fail
    assert _row(_run(tmp_path / "b", None, None, stricter), "send_lag", OL)["status"] == checks.FAIL


def test_starved_latency_is_flagged_not_failed(tmp_path):
    reason = "stream read in bursts: 40 of 90 requests"
    mutate = {(OL, "ngram"): ar.setter(starved_requests=40, latency_unreliable_reason=reason, tpot_mean_s=None,
                                       tpot_p50_s=None, tpot_p99_s=None)}
    row = _row(_run(tmp_path, None, mutate), "latency_reliable", OL)
    assert row["status"] == checks.FLAG and row["cell_names"] == ["ngram"] and reason in row["detail"]


def test_late_thresholds_default_without_entering_the_config():
    from specjoule import config

    cfg = config.validate(ar.GPU_CONFIG)
    assert not {"steady_state_band", "max_backlog_growth", "max_send_lag_s"} & set(cfg["checks"])
    assert (TH.steady_state_band, TH.max_backlog_growth, TH.max_send_lag_s) == (0.1, 0.1, 0.05)
    given = checks.Thresholds.from_config({"steady_state_band": 0.2})
    assert given.steady_state_band == 0.2
