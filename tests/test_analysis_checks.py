"""Each pre-registered check fails (or flags) on its own violation and passes otherwise.

Crafted records (tests/analysis_records.py) go through the pipeline's schema path (records.derive, to_table)
and the real aggregate; the clean grid passes every check — not merely "not applicable": each one is exercised.
Each violation is injected into one cell of one campaign; the test then requires that exactly that
check, in exactly that campaign, changes status, naming exactly the cells concerned.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import analysis_records as ar
import polars as pl
import pytest

from specjoule.analysis import AnalysisError, aggregate, checks
from specjoule.config import ConfigError

TH = checks.Thresholds.from_config({})


def _run(tmp: Path, cfg: dict | None = None, th: checks.Thresholds = TH, config_hash: str | None = ar.CONFIG_HASH,
         **kw) -> pl.DataFrame:
    """The checks over the crafted records, paired by the real aggregate. In memory (ar.frame_campaigns: the same
    rows write_campaigns writes, tests/test_check_thresholds.py shows them equal), so that a mutation run can
    afford these tests; ``tmp`` is kept for the tests that write files of their own."""
    return checks.run_checks(_predicted(aggregate.aggregate_frame(ar.frame_campaigns(cfg, **kw))), th, config_hash)


def _predicted(records: pl.DataFrame) -> pl.DataFrame:
    """The roofline rule's columns (ADR 0102) as if every measured cell were predicted exactly, so that the
    clean grid exercises model_residual too (its own violations: tests/test_roofline.py); and, under a meter,
    the timeline's activity columns of a steady window (ADR 0227), so that a pre-registered window_drift_max is
    exercised (its own cases: tests/test_window_drift.py)."""
    mj = pl.col("mj_per_committed_token")
    metered = pl.col("meter") != "none"
    steady = {f"window_activity_{c}": 40.0 for c in ("mean", "first_third", "middle_third", "last_third")}
    return records.with_columns(pl.lit("modelled").alias("roofline_status"), pl.lit(None, pl.String).alias("roofline_reason"),
                                pl.when(mj.is_not_null()).then(0.0).alias("roofline_residual"),
                                mj.alias("roofline_predicted_mj"),
                                pl.when(metered).then(pl.lit("sm_active_pct")).alias("window_activity_signal"),
                                pl.when(metered).then(200).alias("window_activity_samples"),
                                *(pl.when(metered).then(v).alias(c) for c, v in steady.items()),
                                pl.when(metered).then(0.0).alias("window_activity_drift"))


def _status(result: pl.DataFrame, check: str, campaign: str) -> dict:
    rows = result.filter((pl.col("check") == check) & (pl.col("campaign_id") == campaign)).to_dicts()
    assert len(rows) == 1, (check, campaign, rows)
    return rows[0]


def _loud(result: pl.DataFrame) -> set[tuple[str, str, str]]:
    return {(r["check"], r["campaign_id"], r["status"])
            for r in result.filter(pl.col("status").is_in([checks.FAIL, checks.FLAG])).iter_rows(named=True)}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> pl.DataFrame:
    root = tmp_path_factory.mktemp("clean")
    # An earlier run of the same grid as the reference evidence, so reproduces_reference is exercised
    # (an identical run reproduces; tests/test_analysis_spread.py shows it flag a shifted one).
    ar.write_campaigns(root / "reference")
    return _run(root / "run", th=dataclasses.replace(TH, reference_evidence=str(root / "reference"),
                                                     window_drift_max=0.25))


def test_clean_grid_passes_every_check(clean):
    assert set(clean["check"]) == set(checks.CHECKS)
    n_campaigns = len(ar.cell_table().campaigns)
    # One row per (check, campaign), and every check is actually evaluated somewhere.
    assert clean.height == len(checks.CHECKS) * n_campaigns
    # The load generator's checks (ADR 0110, 0111) judge loop workloads only: on the closed-batch campaigns they
    # are not applicable, and nowhere else is anything short of a pass.
    loop_only = {"steady_state", "send_lag", "latency_reliable"}
    na = clean.filter(pl.col("status") == checks.NA)
    assert set(na["check"]) == loop_only and all("-closed-" in c for c in na["campaign_id"]), na
    assert set(clean.filter(pl.col("status") != checks.NA)["status"]) == {checks.PASS}, \
        clean.filter(~pl.col("status").is_in([checks.PASS, checks.NA]))
    assert set(clean.filter(pl.col("status") == checks.PASS)["check"]) == set(checks.CHECKS)  # each one exercised
    drift = _status(clean, "baseline_drift", ar.CLOSED)
    assert drift["value"] == pytest.approx(0.0) and drift["cell_names"] == ["baseline--open", "baseline--close"]


C, O = ar.CLOSED, ar.OPEN
# (check, campaign, cell, mutation, expected status, expected cells concerned)
VIOLATIONS = [
    ("baseline_drift", C, "baseline--close",
     lambda r: r.update(energy_j=r["energy_j"] * 1.05, mean_power_w=r["mean_power_w"] * 1.05),
     checks.FAIL, ["baseline--open", "baseline--close"]),
    ("acceptance_length", C, "syn--L2", lambda r: r.update(accepted_tokens=int(r["drafts"] * 0.9),
                                                            accepted_per_position=[int(r["drafts"] * 0.9), 0, 0, 0]),
     checks.FAIL, ["syn--L2"]),
    ("committed_spread", C, "ngram",
     lambda r: r.update(committed_tokens=int(r["committed_tokens"] * 0.9)), checks.FAIL, None),
    ("committed_spread", O, "ngram",
     lambda r: r.update(committed_tokens=int(r["committed_tokens"] * 0.9)), checks.FAIL, None),
    ("batch_shape", O, "syn--L4", lambda r: r.update(mean_running_requests=6.5), checks.FAIL, ["syn--L4"]),
    ("batch_shape", C, "syn--L4", lambda r: r.update(requests_completed=r["requests_completed"] - 1),
     checks.FAIL, ["syn--L4"]),
    ("window_length", C, "syn--L4", lambda r: r.update(window_s=0.5), checks.FAIL, ["syn--L4"]),
    ("energy_counter_advance", C, "syn--L4", lambda r: r.update(energy_counter_updates=2), checks.FAIL, ["syn--L4"]),
    ("power_range", C, "syn--L4", lambda r: r.update(mean_power_w=720.0), checks.FAIL, ["syn--L4"]),
    # Below idle is also far below idle × 1.15: the regime flag rightly fires beside the failure.
    ("power_range", C, "syn--L2", lambda r: r.update(mean_power_w=60.0), checks.FAIL, ["syn--L2"], {"power_regime"}),
    ("power_regime", O, "ngram", lambda r: r.update(mean_power_w=84.0), checks.FLAG, ["ngram"]),
    ("temperature", C, "ngram", lambda r: r.update(max_temperature_c=91.0), checks.FAIL, ["ngram"]),
    ("throttle_reasons", C, "ngram", lambda r: r.update(throttle_reasons_mask=0x40 | 0x4), checks.FAIL, ["ngram"]),
    ("failed_requests", O, "syn--L2", lambda r: r.update(requests_failed=1), checks.FAIL, ["syn--L2"]),
    ("other_gpu_processes", O, "syn--L2", lambda r: r.update(other_gpu_processes=2), checks.FAIL, ["syn--L2"]),
    ("same_gpu", C, "syn--L2", lambda r: r.update(gpu_uuid="GPU-bbbb", gpu_uuids=["GPU-bbbb"]), checks.FAIL, ["syn--L2"]),
    ("spec_counters", C, "baseline--open", lambda r: r.update(drafts=10, draft_tokens=40), checks.FAIL, ["baseline--open"]),
    ("spec_counters", C, "syn--L4", lambda r: r.update(draft_tokens=r["drafts"] * 5), checks.FAIL, ["syn--L4"]),
    ("drafts_proposed", O, "ngram", lambda r: r.update(drafts=0, draft_tokens=0, accepted_tokens=0, accepted_per_position=[0, 0, 0]),
     checks.FLAG, ["ngram"]),
    ("energy_measured", O, "syn--L4",
     lambda r: r.update(dict.fromkeys(("energy_j", "energy_j_per_gpu", "mean_power_w", "idle_power_w")) | {"meter": "none"}),
     checks.FAIL, ["syn--L4"]),
    ("preregistration", O, "ngram", lambda r: r.update(config_hash="older0000hash"), checks.FLAG, ["ngram"]),
]


@pytest.mark.parametrize("violation", VIOLATIONS, ids=[f"{v[0]}-{v[1].split('-')[2]}-{v[2]}" for v in VIOLATIONS])
def test_check_catches_its_violation(tmp_path, violation):
    check, campaign, cell, mutation, status, cells, *rest = violation
    also = rest[0] if rest else set()
    result = _run(tmp_path, mutate={(campaign, cell): mutation})
    row = _status(result, check, campaign)
    assert row["status"] == status, row
    if cells is not None:
        assert row["cell_names"] == cells, row
    else:  # a spread is a property of all arms
        assert cell in row["cell_names"] and len(row["cell_names"]) == 5
    assert row["detail"]
    loud = {(c, cmp) for c, cmp, _ in _loud(result)}
    assert loud == {(check, campaign)} | {(a, campaign) for a in also}, f"expected only {check}; got {sorted(loud)}"


def test_missing_baseline_and_mismatched_pairing(tmp_path):
    r1 = _run(tmp_path / "a", drop={(C, "baseline--open")})
    row = _status(r1, "baseline_present", C)
    assert row["status"] == checks.FAIL and "no opening baseline" in row["detail"]
    assert _status(r1, "baseline_drift", C)["status"] == checks.NA
    # A point that claims the campaign but ran at another batch size does not pair.
    r2 = _run(tmp_path / "b", mutate={(C, "syn--L4"): ar.setter(batch_size=16)})
    row = _status(r2, "baseline_present", C)
    assert row["status"] == checks.FAIL and row["cell_names"] == ["syn--L4"] and "syn--L4" in row["detail"]


def test_throttle_mask_allows_power_cap(tmp_path):
    # 0x4 (SW power cap) is the power limit doing its job; only the configured bits discard.
    result = _run(tmp_path, mutate={(C, "ngram"): ar.setter(throttle_reasons_mask=0x4)})
    assert _status(result, "throttle_reasons", C)["status"] == checks.PASS


def test_thresholds_come_from_config(tmp_path):
    mut = {(C, "baseline--close"): lambda r: r.update(energy_j=r["energy_j"] * 1.05)}
    strict = _run(tmp_path / "a", mutate=mut)
    loose = _run(tmp_path / "b", mutate=mut, th=checks.Thresholds.from_config({"baseline_drift_max": 0.1}))
    assert _status(strict, "baseline_drift", C)["status"] == checks.FAIL
    row = _status(loose, "baseline_drift", C)
    assert row["status"] == checks.PASS and row["threshold"] == 0.1
    assert row["value"] == pytest.approx(0.05 / 1.025)
    with pytest.raises(ConfigError, match="checks.drift_max"):
        checks.Thresholds.from_config({"drift_max": 0.1})


def test_missing_telemetry_fails_under_nvml(tmp_path):
    result = _run(tmp_path, mutate={(O, "ngram"): ar.setter(max_temperature_c=None, requests_failed=None)})
    t = _status(result, "temperature", O)
    assert t["status"] == checks.FAIL and "not recorded" in t["detail"]
    assert _status(result, "failed_requests", O)["status"] == checks.FAIL


def test_cpu_records_meter_none(tmp_path):
    """Without a meter: energy checks not applicable, energy_measured fails, drift on s/token."""
    cfg = {**ar.GPU_CONFIG, "device": "cpu", "cuda_graphs": [False], "meter": "none",
           "schemes": {"baseline": {"method": "baseline"}, "ngram": {"method": "ngram", "k": 3}}}
    cmp = "vllm-p-closed-b8-code-s0-cg0"
    slow = {(cmp, "baseline--close"): lambda r: r.update(window_s=r["window_s"] * 1.5)}
    result = _run(tmp_path, cfg=cfg, meter="none", mutate=slow,
                  th=checks.Thresholds.from_config({"baseline_drift_max": 0.25}))
    for name in ("energy_counter_advance", "power_range", "power_regime", "temperature", "throttle_reasons",
                 "other_gpu_processes", "acceptance_length"):
        assert set(result.filter(pl.col("check") == name)["status"]) == {checks.NA}, name
    em = _status(result, "energy_measured", cmp)
    assert em["status"] == checks.FAIL and "meter: none" in em["detail"]
    drift = _status(result, "baseline_drift", cmp)
    assert drift["status"] == checks.FAIL and "seconds per committed token" in drift["detail"]
    assert drift["value"] == pytest.approx(0.4)
    assert _status(result, "baseline_drift", "vllm-p-closed-b8-code-s1-cg0")["status"] == checks.PASS
    same = _status(result, "same_gpu", cmp)
    assert same["status"] == checks.PASS and "host:node01" in same["detail"]


def test_markdown_puts_failures_first(tmp_path):
    result = _run(tmp_path, mutate={(O, "syn--L2"): ar.setter(requests_failed=3),
                                    (O, "ngram"): ar.setter(config_hash="other")})
    md = checks.to_markdown(result, TH, ar.CONFIG_HASH)
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| status")]
    assert table[0].startswith("| fail | failed_requests | " + O)
    assert table[1].startswith("| flag | preregistration | " + O)
    assert all(not ln.startswith(("| fail", "| flag")) for ln in table[2:])
    assert ar.CONFIG_HASH in md and "`baseline_drift_max` = 0.02" in md
    assert md.count("\n| ") == len(table) + 1  # one table


def test_unknown_check_name_is_an_error(clean):
    with pytest.raises(AnalysisError, match="unknown check"):
        checks.run_checks(pl.DataFrame(), TH, only=["no_such_check"])


def test_markdown_summarises_passes_of_a_large_grid(clean, monkeypatch):
    monkeypatch.setattr(checks, "MD_FULL_ROWS", 10)
    md = checks.to_markdown(clean, TH, ar.CONFIG_HASH)
    rows = [ln for ln in md.splitlines() if ln.startswith("| pass")]
    assert len(rows) == len(checks.CHECKS)  # one summary row per check
    n = len(ar.cell_table().campaigns)
    assert f"| pass | window_length | ({n} campaigns) | | | 1 | summarised: {n} campaign(s) pass; values 20 .. 30 |" in rows
