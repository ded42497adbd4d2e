"""Every check with a numeric threshold, exactly at its threshold and just past it.

A pre-registered "at most X" (or "at least X") passes at X and fails (or flags) one step beyond it, so a
boundary written the wrong way round (``>=`` for ``>``), or a threshold read from the wrong field, fails here.
Crafted records (tests/analysis_records.py) are built once, in memory; each case edits one or two cells' columns in
that frame, re-pairs it with the real aggregate and runs the one check. The boundary values are chosen so
that the quantity the check computes lands exactly on the threshold in binary floating point (the
arithmetic is written out in each case), and the expected verdicts are the config's documented rules.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import analysis_records as ar
import polars as pl
import pytest

from specjoule.analysis import aggregate, checks

TH = checks.Thresholds.from_config({})
C, O = ar.CLOSED, ar.OPEN


@pytest.fixture(scope="module")
def raw() -> pl.DataFrame:
    return ar.frame_campaigns()


def test_the_records_in_memory_are_the_records_on_disk(raw, tmp_path):
    on_disk = aggregate.scan_records(ar.write_campaigns(tmp_path)).collect()
    assert raw.sort("record_path").equals(on_disk.with_columns(
        pl.col("record_path").str.replace(f"{tmp_path}/", "", literal=True)).sort("record_path"))


def _judge(raw: pl.DataFrame, check: str, edits: dict[str, dict[str, Any]], th: checks.Thresholds = TH,
           campaign: str = C, after: dict[str, dict[str, Any]] | None = None) -> dict:
    """The check's row for ``campaign`` after ``edits`` {cell: {column: value}} to the records (``after``: to the
    paired frame, for columns the analysis adds)."""
    def edit(df: pl.DataFrame, changes: dict[str, dict[str, Any]]) -> pl.DataFrame:
        for cell, values in changes.items():
            mask = (pl.col("campaign_id") == campaign) & (pl.col("cell_name") == cell)
            df = df.with_columns(pl.when(mask).then(pl.lit(v, dtype=df.schema.get(k))).otherwise(pl.col(k)).alias(k)
                                 if k in df.columns else
                                 pl.when(mask).then(pl.lit(v)).alias(k) for k, v in values.items())
        return df

    paired = edit(aggregate.aggregate_frame(edit(raw, edits)), after or {})
    rows = checks.run_checks(paired, th, ar.CONFIG_HASH, only=[check]).filter(
        pl.col("campaign_id") == campaign).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


def _status(raw, check, edits, **kw) -> str:
    return _judge(raw, check, edits, **kw)["status"]


def test_the_clean_frame_passes_the_checks_used_here(raw):
    for check in ("baseline_drift", "window_length", "temperature", "power_range", "failed_requests"):
        assert _status(raw, check, {}) == checks.PASS, check


def test_baseline_drift_at_and_past_its_threshold(raw):
    th = dataclasses.replace(TH, baseline_drift_max=0.5)
    # |1.25 − 0.75| / ((1.25 + 0.75) / 2) = 0.5 / 1.0, exact in binary
    at = _judge(raw, "baseline_drift", {"baseline--open": {"mj_per_committed_token": 1.25},
                                        "baseline--close": {"mj_per_committed_token": 0.75}}, th=th)
    assert at["status"] == checks.PASS and at["value"] == 0.5 and at["threshold"] == 0.5
    past = {"baseline--open": {"mj_per_committed_token": 1.25}, "baseline--close": {"mj_per_committed_token": 0.7499}}
    assert _status(raw, "baseline_drift", past, th=th) == checks.FAIL
    # The same drift in the other direction (closing above opening) is the same verdict.
    flipped = {"baseline--open": {"mj_per_committed_token": 0.7499}, "baseline--close": {"mj_per_committed_token": 1.25}}
    assert _status(raw, "baseline_drift", flipped, th=th) == checks.FAIL


@pytest.mark.parametrize("dropped, names, detail", [
    ("baseline--close", ["baseline--open"], "no closing baseline in this campaign: drift not measurable"),
    ("baseline--open", [], "no opening baseline"),
])
def test_baseline_drift_without_one_baseline_does_not_apply(dropped, names, detail):
    """One baseline missing: no drift can be measured, so the check does not apply (not a failure of a drift
    nobody measured). The row's cell list (a list, never null) holds the baselines the check read: the sides are
    read from the opening windows' rows, so without an opening baseline it is empty."""
    row = _judge(ar.frame_campaigns(drop={(C, dropped)}), "baseline_drift", {})
    assert (row["status"], row["value"], row["cell_names"], row["detail"]) == (checks.NA, None, names, detail)


def test_baseline_drift_compares_the_baselines_when_the_first_arm_is_unsupported(raw):
    """An arm the engine refused (an unsupported record, unpaired) right after the opening baseline changes
    nothing: the drift is still the two baselines' (|1.25 − 0.75| / 1.0 = 0.5)."""
    first_arm = _points_in_run_order(raw)[0]
    row = _judge(raw, "baseline_drift", {"baseline--open": {"mj_per_committed_token": 1.25},
                                         "baseline--close": {"mj_per_committed_token": 0.75},
                                         first_arm: {"status": "unsupported"}})
    assert (row["status"], row["value"]) == (checks.FAIL, 0.5)
    assert row["cell_names"] == ["baseline--open", "baseline--close"]


def test_baseline_drift_without_energy_uses_seconds_per_token_at_the_same_threshold(raw):
    th = dataclasses.replace(TH, baseline_drift_max=0.5)
    # window / committed: 20 s / 16 tokens = 1.25 and 12 s / 16 = 0.75 → drift 0.5; 11.9 s → just past
    none = {"mj_per_committed_token": None, "energy_j": None, "meter": "none"}
    at = {"baseline--open": {**none, "window_s": 20.0, "committed_tokens": 16},
          "baseline--close": {**none, "window_s": 12.0, "committed_tokens": 16}}
    assert _status(raw, "baseline_drift", at, th=th) == checks.PASS
    at["baseline--close"]["window_s"] = 11.9
    assert _status(raw, "baseline_drift", at, th=th) == checks.FAIL


def test_committed_spread_at_and_past_its_threshold(raw):
    th = dataclasses.replace(TH, committed_spread_max=0.25)
    # Closed batch, per generation (10 repeats): 512 − 64 and 512 + 64 around 512 → (576 − 448) / 512 = 0.25
    at = {"syn--L2": {"committed_tokens": 4480}, "ngram": {"committed_tokens": 5760}}
    assert _judge(raw, "committed_spread", at, th=th)["value"] == 0.25
    assert _status(raw, "committed_spread", at, th=th) == checks.PASS
    past = {"syn--L2": {"committed_tokens": 4470}, "ngram": {"committed_tokens": 5770}}  # 130 / 512 > 0.25
    assert _status(raw, "committed_spread", past, th=th) == checks.FAIL
    # Open loop counts committed tokens as they are: 5760 ± 720 → 1440 / 5760 = 0.25
    at_open = {"syn--L2": {"committed_tokens": 5040}, "ngram": {"committed_tokens": 6480}}
    assert _status(raw, "committed_spread", at_open, th=th, campaign=O) == checks.PASS
    past_open = {"syn--L2": {"committed_tokens": 5039}, "ngram": {"committed_tokens": 6480}}
    assert _status(raw, "committed_spread", past_open, th=th, campaign=O) == checks.FAIL


def test_batch_shape_at_and_past_its_threshold(raw):
    th = dataclasses.replace(TH, concurrency_spread_max=0.25)
    # Open loop: the baselines ran 6.0 requests on average; 7.5 is 1.5 / 6 = 0.25 above, 4.5 as far below
    for running in (7.5, 4.5):
        assert _status(raw, "batch_shape", {"syn--L4": {"mean_running_requests": running}}, th=th,
                       campaign=O) == checks.PASS
    for running in (7.5001, 4.4999):
        assert _status(raw, "batch_shape", {"syn--L4": {"mean_running_requests": running}}, th=th,
                       campaign=O) == checks.FAIL
    # Closed batch: exactly repeats × B requests (10 × 8), nothing either side
    assert _status(raw, "batch_shape", {"syn--L4": {"requests_completed": 80}}) == checks.PASS
    for n in (79, 81):
        assert _status(raw, "batch_shape", {"syn--L4": {"requests_completed": n}}) == checks.FAIL


def test_acceptance_length_tolerance_at_and_past_it_for_a_deterministic_vector(raw):
    th = dataclasses.replace(TH, acceptance_length_tolerance=0.25)
    # L2 is minvar [1, 0, 0, 0]: every draft accepts exactly one token, so only the tolerance judges
    assert _status(raw, "acceptance_length", {"syn--L2": {"realized_L": 2.25}}, th=th) == checks.PASS
    assert _status(raw, "acceptance_length", {"syn--L2": {"realized_L": 1.75}}, th=th) == checks.PASS
    assert _status(raw, "acceptance_length", {"syn--L2": {"realized_L": 2.2501}}, th=th) == checks.FAIL
    assert _status(raw, "acceptance_length", {"syn--L2": {"realized_L": 1.7499}}, th=th) == checks.FAIL


def _accepted_count_se(rates: list[float], draws: int) -> float:
    """Standard error of the mean accepted count per draft, from the count's distribution written out:
    P(A = j) = r_j − r_{j+1} (r_0 = 1, r_{k+1} = 0), since acceptance stops at the first rejection."""
    r = [1.0, *rates, 0.0]
    p = [r[j] - r[j + 1] for j in range(len(rates) + 1)]
    mean = sum(j * pj for j, pj in enumerate(p))
    var = sum((j - mean) ** 2 * pj for j, pj in enumerate(p))
    return math.sqrt(var / draws)


def test_acceptance_length_z_rule_at_and_past_it_for_a_stochastic_vector(raw):
    cell = raw.filter((pl.col("campaign_id") == C) & (pl.col("cell_name") == "syn--L4")).row(0, named=True)
    se = _accepted_count_se(cell["acceptance_rates"], cell["drafts"])  # vLLM: one draw per draft
    assert 0 < se < 0.1
    th = dataclasses.replace(TH, acceptance_length_tolerance=0.0, acceptance_length_z=4.0)
    L = cell["configured_L"]
    assert _status(raw, "acceptance_length", {"syn--L4": {"realized_L": L + 4.0 * se}}, th=th) == checks.PASS
    assert _status(raw, "acceptance_length", {"syn--L4": {"realized_L": L - 4.0 * se}}, th=th) == checks.PASS
    assert _status(raw, "acceptance_length", {"syn--L4": {"realized_L": L + 4.0 * se * 1.001}}, th=th) == checks.FAIL
    # Beyond z SE but within the tolerance: both are needed for a failure
    wide = dataclasses.replace(th, acceptance_length_tolerance=4.0 * se * 1.01)
    assert _status(raw, "acceptance_length", {"syn--L4": {"realized_L": L + 4.0 * se * 1.001}}, th=wide) == checks.PASS


@pytest.mark.parametrize("campaign, running", [(C, 6.0), (O, 4.0)])
def test_acceptance_length_z_rule_counts_sglang_draws_per_verify_step(raw, campaign, running):
    """SGLang draws its simulated length once per verify step for the whole batch (ADR 0082), so its draws are the
    steps: drafts / B, B the batch size in a closed batch (whatever the mean running count says) and the mean
    running requests in open loop. The vector [1, 0.5, 0, …] has a count that varies by less than one token
    (A is 1 or 2, Var A = 0.25): the SE is its own, not floored."""
    cell = raw.filter((pl.col("campaign_id") == campaign) & (pl.col("cell_name") == "syn--L4")).row(0, named=True)
    rates = [1.0, 0.5] + [0.0] * (len(cell["acceptance_rates"]) - 2)
    b = cell["batch_size"] if campaign == C else running
    assert b != running or campaign == O
    steps = cell["drafts"] / b
    se = math.sqrt(0.25 / steps)
    assert se == pytest.approx(_accepted_count_se(rates, 1) / math.sqrt(steps))
    th = dataclasses.replace(TH, acceptance_length_tolerance=0.0, acceptance_length_z=4.0)
    sglang = {"acceptance_rates": rates, "configured_L": 2.5, "acceptance_mechanism": "sglang_simulate_acc_len",
              "mean_running_requests": running}
    for realized, status in ((2.5 + 4.0 * se * 0.999, checks.PASS), (2.5 + 4.0 * se * 1.001, checks.FAIL)):
        row = _judge(raw, "acceptance_length", {"syn--L4": {**sglang, "realized_L": realized}}, th=th,
                     campaign=campaign)
        assert row["status"] == status, (realized, row)


def test_acceptance_length_reports_the_worst_gap_against_the_tolerance(raw):
    """The campaign's row shows the largest |realized − configured| of its points (here 0.25, on syn--L2, exact in
    binary) and the tolerance it was held to."""
    th = dataclasses.replace(TH, acceptance_length_tolerance=0.5)
    configured = raw.filter((pl.col("campaign_id") == C) & (pl.col("cell_name") == "syn--L2"))["configured_L"][0]
    row = _judge(raw, "acceptance_length", {"syn--L2": {"realized_L": configured - 0.25}}, th=th)
    assert (row["status"], row["value"], row["threshold"]) == (checks.PASS, 0.25, 0.5)


def test_window_length_at_and_below_its_minimum(raw):
    assert TH.min_window_s == 1.0
    assert _status(raw, "window_length", {"syn--L4": {"window_s": 1.0}}) == checks.PASS
    assert _status(raw, "window_length", {"syn--L4": {"window_s": 0.999}}) == checks.FAIL


def test_energy_counter_updates_at_and_below_their_minimum(raw):
    assert TH.min_energy_updates == 5
    assert _status(raw, "energy_counter_advance", {"syn--L4": {"energy_counter_updates": 5}}) == checks.PASS
    assert _status(raw, "energy_counter_advance", {"syn--L4": {"energy_counter_updates": 4}}) == checks.FAIL
    assert _status(raw, "energy_counter_advance", {"syn--L4": {"energy_j": 0.0}}) == checks.FAIL  # > 0, not >= 0


def test_temperature_at_and_past_its_maximum(raw):
    assert TH.max_temperature_c == 85
    assert _status(raw, "temperature", {"ngram": {"max_temperature_c": 85.0}}) == checks.PASS
    assert _status(raw, "temperature", {"ngram": {"max_temperature_c": 85.5}}) == checks.FAIL


def test_failed_requests_at_and_past_their_maximum(raw):
    assert _status(raw, "failed_requests", {"syn--L2": {"requests_failed": 0}}, campaign=O) == checks.PASS
    assert _status(raw, "failed_requests", {"syn--L2": {"requests_failed": 1}}, campaign=O) == checks.FAIL
    th = dataclasses.replace(TH, max_failed_requests=2)
    assert _status(raw, "failed_requests", {"syn--L2": {"requests_failed": 2}}, th=th, campaign=O) == checks.PASS
    assert _status(raw, "failed_requests", {"syn--L2": {"requests_failed": 3}}, th=th, campaign=O) == checks.FAIL


def test_power_range_at_both_edges_and_past_them(raw):
    # idle 80 W, limit 700 W, slack 5 W: [75, 705] W
    assert TH.power_slack_w == 5
    for p in (75.0, 705.0):
        assert _status(raw, "power_range", {"syn--L4": {"mean_power_w": p}}) == checks.PASS, p
    for p in (74.99, 705.01):
        assert _status(raw, "power_range", {"syn--L4": {"mean_power_w": p}}) == checks.FAIL, p


def test_power_regime_at_and_below_its_ratio(raw):
    assert TH.idle_regime_ratio == 1.15
    # 92 / 80 is the double nearest 1.15, the same double the threshold is
    assert _status(raw, "power_regime", {"ngram": {"mean_power_w": 92.0}}) == checks.PASS
    assert _status(raw, "power_regime", {"ngram": {"mean_power_w": 91.99}}) == checks.FLAG


def test_other_processes_zero_passes_one_fails(raw):
    assert _status(raw, "other_gpu_processes", {"ngram": {"other_gpu_processes": 0}}) == checks.PASS
    assert _status(raw, "other_gpu_processes", {"ngram": {"other_gpu_processes": 1}}) == checks.FAIL


def test_throttle_mask_fails_on_each_forbidden_bit_and_on_no_other(raw):
    forbidden = TH.forbidden_throttle_mask
    assert forbidden == 0xE8  # HW slowdown, SW thermal, HW thermal, HW power brake
    allowed = 0xFFFF & ~forbidden
    assert _status(raw, "throttle_reasons", {"ngram": {"throttle_reasons_mask": allowed}}) == checks.PASS
    for bit in (0x8, 0x20, 0x40, 0x80):
        row = _judge(raw, "throttle_reasons", {"ngram": {"throttle_reasons_mask": allowed | bit}})
        assert row["status"] == checks.FAIL and row["value"] == bit, bit


def test_spec_counters_at_their_bounds(raw):
    cell = raw.filter((pl.col("campaign_id") == C) & (pl.col("cell_name") == "ngram")).row(0, named=True)
    k, drafts, per_pos = cell["k"], cell["drafts"], cell["accepted_per_position"]
    accepted = sum(per_pos)
    # draft tokens up to k per draft; accepted up to the draft tokens; per position summing to accepted
    assert _status(raw, "spec_counters", {"ngram": {"draft_tokens": k * drafts}}) == checks.PASS
    assert _status(raw, "spec_counters", {"ngram": {"draft_tokens": k * drafts + 1}}) == checks.FAIL
    tight = {"draft_tokens": accepted, "accepted_tokens": accepted}
    assert _status(raw, "spec_counters", {"ngram": tight}) == checks.PASS
    assert _status(raw, "spec_counters", {"ngram": {**tight, "draft_tokens": accepted - 1}}) == checks.FAIL
    assert _status(raw, "spec_counters", {"ngram": {"accepted_per_position": [*per_pos[:-1], per_pos[-1] + 1]}}) \
        == checks.FAIL


def test_model_residual_at_and_past_its_maximum(raw):
    assert TH.model_residual_max == 0.25
    priced = {"roofline_status": "modelled", "roofline_reason": None, "roofline_predicted_mj": 1.0}
    for residual, status in ((0.25, checks.PASS), (-0.25, checks.PASS), (0.2501, checks.FLAG), (-0.2501, checks.FLAG)):
        after = {name: {**priced, "roofline_residual": 0.0} for name in ("baseline--open", "baseline--close", "ngram",
                                                                         "syn--L2")}
        after["syn--L4"] = {**priced, "roofline_residual": residual}
        row = _judge(raw, "model_residual", {}, after=after)
        assert row["status"] == status and row["value"] == abs(residual) and row["threshold"] == 0.25, residual
    unpriced = {name: {"roofline_status": "no_calibration", "roofline_reason": "no calibration",
                       "roofline_residual": 0.0, "roofline_predicted_mj": 1.0} for name in ARMS}
    assert _judge(raw, "model_residual", {}, after=unpriced)["status"] == checks.NA


# Each check's row on the clean frame: the threshold it reports is the configured one, and its value is the worst
# of the campaign's cells, worked out from tests/analysis_records.py (closed campaign, seed 0: 300 W baselines,
# the L4 point at 0.7 × 300 = 210 W, 80 W idle, 20 s windows of 10 × 8 × 64 tokens, 62 °C, no failures).
CLEAN_ROWS = {
    "window_length": (1.0, 20.0),  # the shortest window
    "energy_counter_advance": (5.0, 200.0),  # the fewest counter updates: 10 per second of window
    "power_regime": (1.15, 2.625),  # the lowest ratio: 210 W / 80 W
    "power_range": (5.0, 300.0),  # the highest mean power
    "temperature": (85.0, 62.0),
    "throttle_reasons": (232.0, 0.0),  # the forbidden bits seen
    "other_gpu_processes": (0.0, 0.0),
    "failed_requests": (0.0, 0.0),
    "committed_spread": (0.05, 0.0),
    "baseline_drift": (0.02, 0.0),
    "batch_shape": (0.0, 0.0),  # closed batch: exactly B per generation
    "spec_counters": (0.0, 0.0),
    "drafts_proposed": (0.0, 1706.0),  # the fewest drafts of a point: 5120 // 3
}


@pytest.mark.parametrize("check", sorted(CLEAN_ROWS))
def test_each_check_reports_its_threshold_and_worst_value(raw, check):
    row = _judge(raw, check, {})
    assert (row["threshold"], row["value"]) == pytest.approx(CLEAN_ROWS[check]), row
    assert row["status"] == checks.PASS


def test_open_loop_batch_shape_reports_the_concurrency_threshold(raw):
    assert _judge(raw, "batch_shape", {}, campaign=O)["threshold"] == TH.concurrency_spread_max


def test_committed_spread_is_per_generation_in_a_closed_batch_and_names_every_arm(raw):
    # A faster arm repeats the batch twice as often in the window: twice the tokens, the same per generation.
    row = _judge(raw, "committed_spread", {"syn--L2": {"committed_tokens": 10240, "repeats": 20}})
    assert row["status"] == checks.PASS and row["value"] == 0.0
    assert row["cell_names"] == ["baseline--open", *_points_in_run_order(raw), "baseline--close"]
    missing = _judge(raw, "committed_spread", {"ngram": {"committed_tokens": None}})
    assert missing["status"] == checks.FAIL  # one arm without the count is enough


def test_committed_spread_without_a_workload_kind_is_judged_not_waved_through(raw):
    """Records that do not say their workload kind are not taken for a closed loop (whose committed tokens are an
    outcome, so the check stands aside): the spread is judged, and a spread past the threshold fails."""
    th = dataclasses.replace(TH, committed_spread_max=0.25)
    cells = raw.filter(pl.col("campaign_id") == O)["cell_name"].to_list()
    unknown = {cell: {"workload_kind": None} for cell in cells}
    assert _status(raw, "committed_spread", unknown, th=th, campaign=O) == checks.PASS
    unknown["ngram"] = {"workload_kind": None, "committed_tokens": 2 * 5760}  # twice the others' 5,760 tokens
    row = _judge(raw, "committed_spread", unknown, th=th, campaign=O)
    assert row["status"] == checks.FAIL and row["value"] > 0.25


def test_checks_do_not_depend_on_the_order_of_the_records(raw):
    """run_checks takes any frame of paired records: shuffled rows give the same rows, cells named in run order."""
    paired = aggregate.aggregate_frame(raw)
    expected = checks.run_checks(paired, TH, ar.CONFIG_HASH)
    spread = expected.filter((pl.col("check") == "committed_spread") & (pl.col("campaign_id") == C))
    assert spread["cell_names"].to_list() == [["baseline--open", *_points_in_run_order(raw), "baseline--close"]]
    shuffled = paired.sample(fraction=1.0, shuffle=True, seed=1)
    assert not shuffled["cell_name"].equals(paired["cell_name"])
    assert checks.run_checks(shuffled, TH, ar.CONFIG_HASH).equals(expected)


def _points_in_run_order(raw) -> list[str]:
    points = raw.filter((pl.col("campaign_id") == C) & (pl.col("role") == "point")).sort("run_order_index")
    return points["cell_name"].to_list()


def test_power_regime_needs_an_idle_reading(raw):
    row = _judge(raw, "power_regime", {"ngram": {"idle_power_w": None}, "syn--L2": {"idle_power_w": None},
                                       "syn--L4": {"idle_power_w": None}, "baseline--open": {"idle_power_w": None},
                                       "baseline--close": {"idle_power_w": None}})
    assert row["status"] == checks.NA and row["value"] is None


def test_gpu_energy_balance_at_and_past_its_threshold(raw):
    th = dataclasses.replace(TH, gpu_energy_imbalance_max=0.5)
    # Two ranks: (2.5 − 1.5) / mean 2.0 = 0.5 exactly; a third reading where two GPUs were asked for fails
    two = {"tensor_parallel_size": 2, "energy_j": 4.0}
    at = _judge(raw, "gpu_energy_balance", {"syn--L4": {**two, "energy_j_per_gpu": [2.5, 1.5]}}, th=th)
    assert (at["status"], at["value"], at["threshold"]) == (checks.PASS, 0.5, 0.5)
    past = {"syn--L4": {**two, "energy_j_per_gpu": [2.5002, 1.5]}}
    assert _status(raw, "gpu_energy_balance", past, th=th) == checks.FLAG
    extra = {"syn--L4": {**two, "energy_j_per_gpu": [1.0, 0.5, 0.5]}}
    assert _status(raw, "gpu_energy_balance", extra, th=th) == checks.FAIL


# ------------------------------------------------------------------------------------------------
# what a check says when its reading is missing: not applicable without a meter, a failure with one

ARMS = ("baseline--open", "syn--L2", "syn--L4", "ngram", "baseline--close")
NO_METER = {"meter": "none", "energy_j": None, "energy_j_per_gpu": None, "mean_power_w": None, "idle_power_w": None,
            "mj_per_committed_token": None}


def _every_arm(**values) -> dict[str, dict]:
    return {arm: dict(values) for arm in ARMS}


@pytest.mark.parametrize("check, column", [("temperature", "max_temperature_c"),
                                           ("throttle_reasons", "throttle_reasons_mask"),
                                           ("other_gpu_processes", "other_gpu_processes")])
def test_telemetry_missing_fails_with_a_meter_and_is_not_applicable_without(raw, check, column):
    assert _status(raw, check, {"ngram": {column: None}}) == checks.FAIL
    row = _judge(raw, check, _every_arm(**NO_METER, **{column: None}))
    assert row["status"] == checks.NA and row["value"] is None


def test_energy_and_power_checks_without_a_meter_or_a_reading(raw):
    assert _status(raw, "energy_counter_advance", _every_arm(**NO_METER)) == checks.NA
    assert _status(raw, "energy_counter_advance", {"ngram": {"energy_counter_updates": None}}) == checks.FAIL
    assert _status(raw, "power_range", _every_arm(**NO_METER)) == checks.NA
    assert _status(raw, "power_range", {"ngram": {"power_limit_w": None}}) == checks.FAIL
    assert _status(raw, "power_range", {"ngram": {"idle_power_w": None, "mean_power_w": 10.0}}) == checks.PASS
    assert _status(raw, "power_regime", _every_arm(**NO_METER)) == checks.NA


def test_baseline_drift_without_a_pair_or_with_energy_on_one_side(raw):
    assert _status(raw, "baseline_drift", {}, campaign=O) == checks.PASS
    one_sided = {"baseline--close": {**NO_METER}}
    row = _judge(raw, "baseline_drift", one_sided)
    assert row["status"] == checks.FAIL and row["cell_names"] == ["baseline--open", "baseline--close"]
    missing = {"baseline--close": {"mj_per_committed_token": None, "window_s": None, "energy_j": None,
                                   "meter": "none"}, "baseline--open": {**NO_METER}}
    assert _status(raw, "baseline_drift", missing) == checks.FAIL  # neither energy nor time on a baseline


def test_counters_and_drafts_at_their_edges(raw):
    assert _status(raw, "spec_counters", {"baseline--open": {"accepted_tokens": 1}}) == checks.FAIL
    assert _status(raw, "spec_counters", {"ngram": {"drafts": None}}) == checks.FAIL
    assert _status(raw, "spec_counters", {"ngram": {"accepted_per_position": []}}) == checks.PASS  # not recorded
    assert _status(raw, "drafts_proposed", {"ngram": {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0,
                                                      "accepted_per_position": [0, 0, 0]}}) == checks.FLAG
    assert _status(raw, "drafts_proposed", _every_arm(drafts=None)) == checks.NA
    assert _status(raw, "batch_shape", {"syn--L4": {"repeats": None}}) == checks.FAIL
    assert _status(raw, "batch_shape", {"syn--L4": {"mean_running_requests": None}}, campaign=O) == checks.FAIL
    assert _status(raw, "acceptance_length", {"syn--L2": {"realized_L": None}}) == checks.FAIL
    assert _status(raw, "window_length", {"syn--L2": {"window_s": None}}) == checks.FAIL
    assert _status(raw, "failed_requests", {"syn--L2": {"requests_failed": None}}) == checks.FAIL


def test_gpu_energy_balance_is_not_applicable_without_a_tp_size_and_counter_advance_needs_only_some_energy(raw):
    assert _status(raw, "gpu_energy_balance", _every_arm(tensor_parallel_size=None)) == checks.NA
    assert _status(raw, "gpu_energy_balance", {}) == checks.PASS  # one GPU: its reading alone
    # Energy above 0 is enough, however little (a short window on an idle GPU): the update count judges the rest.
    assert _status(raw, "energy_counter_advance", {"ngram": {"energy_j": 0.5}}) == checks.PASS


def test_telemetry_failures_say_what_was_seen(raw):
    """The detail of a telemetry failure names the cell and the reading (checks.md shows it to the reader)."""
    assert _judge(raw, "temperature", {"ngram": {"max_temperature_c": 85.5}})["detail"] == "ngram: 85.5 °C"
    assert _judge(raw, "other_gpu_processes", {"ngram": {"other_gpu_processes": 2}})["detail"] == \
        "ngram: 2 other process(es) on the GPU"
    row = _judge(raw, "throttle_reasons", {"ngram": {"throttle_reasons_mask": 0x4 | 0x8}})
    assert row["detail"] == "ngram: clock-event reasons mask 12 has forbidden bits 8 (forbidden mask 232)"
    missing = _judge(raw, "temperature", {"ngram": {"max_temperature_c": None}})
    assert missing["detail"] == "ngram: max_temperature_c not recorded under meter nvml"


def test_spec_counters_each_way_a_record_can_be_inconsistent(raw):
    for counter in ("drafts", "draft_tokens", "accepted_tokens"):  # any one counter shows a baseline drafted
        assert _status(raw, "spec_counters", {"baseline--open": {counter: 1}}) == checks.FAIL, counter
        assert _status(raw, "spec_counters", {"ngram": {counter: None}}) == checks.FAIL, counter  # a point's missing
    nothing = {"drafts": None, "draft_tokens": None, "accepted_tokens": None}
    assert _status(raw, "spec_counters", {"baseline--open": nothing}) == checks.PASS  # a baseline without counters
    assert _status(raw, "spec_counters", {"ngram": {"k": None}}) == checks.PASS  # no k: no bound to check against
    assert _status(raw, "spec_counters", {"ngram": {"accepted_per_position": None}}) == checks.PASS
    cell = raw.filter((pl.col("campaign_id") == C) & (pl.col("cell_name") == "ngram")).row(0, named=True)
    assert _status(raw, "spec_counters", {"ngram": {"accepted_per_position": [cell["accepted_tokens"] + 1]}}) \
        == checks.FAIL  # one position only, and it does not add up


def test_power_range_fails_without_a_mean_power_under_a_meter(raw):
    assert _status(raw, "power_range", {"ngram": {"mean_power_w": None}}) == checks.FAIL


def test_batch_shape_reports_the_relative_deviation(raw):
    assert _judge(raw, "batch_shape", {"syn--L4": {"requests_completed": 79}})["value"] == 1 / 80
