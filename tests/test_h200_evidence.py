"""The committed H200 evidence (validation/h200-2026-12/): real SGLang (session-2026-11-30c) and vLLM
(session-2026-12-01) records.

Re-deriving the checks from the committed records must give the committed verdicts (a check that fired
stays fired), and the records' known latency error must not reach the analysis as a number.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from specjoule import config as sj_config
from specjoule.analysis import aggregate
from specjoule.analysis.checks import Thresholds, run_checks

ROOT = Path(__file__).resolve().parent.parent
SESSION = ROOT / "validation" / "h200-2026-12" / "session-2026-11-30c"
RECORDS = sorted((SESSION / "results" / "cells").glob("*/*.parquet"))
SESSION_1201 = ROOT / "validation" / "h200-2026-12" / "session-2026-12-01"
CLOSED = SESSION_1201 / "closed"
OPEN_LOOP = SESSION_1201 / "openloop"


def test_records_are_committed():
    assert len(RECORDS) == 10, [p.name for p in RECORDS]


def test_sglang_latency_from_decode_throughput_is_nulled_not_shown():
    raw = pl.concat([pl.read_parquet(p) for p in RECORDS], how="diagonal_relaxed")
    mv6 = raw.filter(pl.col("cell_name") == "draft--mv6")
    # the trap, as recorded on the H200: TPOT ≈ 1e-8 s at L = 6 (ADR 0016)
    assert (mv6["tpot_mean_s"] < 1e-6).all() and (mv6["latency_source"] == "request_metrics").all()
    messages: list[str] = []
    df = aggregate.aggregate(RECORDS, log=messages.append)
    assert df.filter(pl.col("engine") == "sglang").height == 10
    for col in aggregate.LATENCY_COLUMNS:
        assert df[col].is_null().all(), col
    assert (df["latency_source"] == aggregate.UNTRUSTED_LATENCY_SOURCE).all()
    assert df["baseline_tpot_mean_s"].is_null().all()
    assert any("10 SGLang record(s)" in m for m in messages)
    # everything else is untouched: the energy figures are the records'
    assert df["mj_per_committed_token"].sort().to_list() == pytest.approx(raw["mj_per_committed_token"].sort().to_list())


def _verdict(folder: Path, config_name: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Checks re-derived from a session's committed records; every fail must be in its committed checks.md."""
    records = sorted((folder / "results" / "cells").glob("*/*.parquet"))
    cfg = sj_config.load(folder / config_name)
    df = aggregate.aggregate(records)
    checks = run_checks(df, Thresholds.from_config(cfg["checks"]), sj_config.config_hash(cfg))
    committed = (folder / "results" / "checks.md").read_text()
    for row in checks.filter(pl.col("status") == "fail").iter_rows(named=True):
        assert f"| fail | {row['check']} | {row['campaign_id']} |" in committed
    return df, checks


def test_checks_rederived_from_the_records_match_the_committed_verdicts():
    _, checks = _verdict(SESSION, "config-analysis.yaml")
    failed = set(checks.filter(pl.col("status") == "fail")["check"])
    # two H200 machines in one family, and the baseline moved with them (README of the session)
    assert failed == {"same_gpu", "baseline_drift", "engine_config_matched"}
    drift = checks.filter(pl.col("check") == "baseline_drift").sort("campaign_id")["value"].to_list()
    assert drift == pytest.approx([0.08455, 0.04827], rel=1e-3)  # b1, b32
    acc = checks.filter(pl.col("check") == "acceptance_length")
    assert (acc["status"] == "pass").all()


def test_analysis_config_differs_from_the_campaign_config_only_in_engines():
    measured = yaml.safe_load((ROOT / "config" / "h200-engines.yaml").read_text())
    analysed = yaml.safe_load((SESSION / "config-analysis.yaml").read_text())
    assert measured["engines"] == ["vllm", "sglang"] and analysed["engines"] == ["sglang"]
    measured.pop("engines"), analysed.pop("engines")
    assert measured == analysed


# --- session of 2026-12-01: the vLLM closed grid on 4 engine starts (swap, ADR 0039) and the open loop -------------


def test_1201_configs_are_the_preregistered_ones():
    for folder, name in ((CLOSED, "h200-validation-swap.yaml"), (OPEN_LOOP, "h200-openloop-short.yaml")):
        assert (folder / name).read_bytes() == (ROOT / "config" / name).read_bytes(), name


def test_1201_closed_grid_swap_took_and_only_the_ngram_l6_arm_fails():
    df, checks = _verdict(CLOSED, "h200-validation-swap.yaml")
    assert df.height == 24 and df["gpu_uuid"].n_unique() == 1
    # 4 engine starts for 24 cells: one per baseline and one per synthetic arm, shared across B and vectors
    assert df["engine_instance"].n_unique() == 4
    assert df.filter(pl.col("scheme") == "draft")["engine_instance"].n_unique() == 1
    failed = checks.filter(pl.col("status") == "fail")
    assert set(failed["check"]) == {"acceptance_length"} and failed["cell_names"].to_list() == [["ngram--mv6"]] * 2
    # every draft-model vector, swapped in place or set at start, realized its configured L
    draft = df.filter(pl.col("scheme") == "draft")
    assert ((draft["realized_L"] - draft["configured_L"]).abs() < 0.05).all()
    assert draft.filter(pl.col("acceptance_kind") == "minvar")["realized_L"].to_list() == \
        draft.filter(pl.col("acceptance_kind") == "minvar")["configured_L"].to_list()
    # ngram at L = 6: every proposed token is accepted, but the proposer sometimes proposes fewer than k
    # (vLLM's n-gram match has fewer than k tokens after it): the sampler is not what falls short
    ng6 = df.filter(pl.col("cell_name") == "ngram--mv6")
    assert (ng6["accepted_tokens"] == ng6["draft_tokens"]).all()
    assert (ng6["draft_tokens"] < ng6["drafts"] * ng6["k"]).all()
    details = checks.filter(pl.col("check") == "acceptance_length")["detail"].to_list()
    assert sum("vs configured 6.0; the proposer drafted 4.906 of k = 5 tokens per draft"
               in (d or "") for d in details) == 2, details
    drift = checks.filter(pl.col("check") == "baseline_drift").sort("campaign_id")["value"].to_list()
    assert drift == pytest.approx([0.01126, 0.005414], rel=1e-3)  # b1, b32: both under 2 %


def test_1201_open_loop_failures_stay_failed():
    df, checks = _verdict(OPEN_LOOP, "h200-openloop-short.yaml")
    assert df.height == 4
    failed = set(checks.filter(pl.col("status") == "fail")["check"])
    assert failed == {"baseline_drift", "committed_spread", "batch_shape", "engine_config_matched", "window_length"}
    # the concurrency that the open loop records: L = 1 cannot keep up with 3 requests/s and queues
    running = dict(zip(df["cell_name"], df["mean_running_requests"]))
    assert running["draft--mv1"] > 5 * running["baseline--open"]
