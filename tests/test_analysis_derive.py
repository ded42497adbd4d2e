"""derive: curves against the baseline, strict refusal, energy refusal without a meter, seeds."""

from __future__ import annotations

import analysis_records as ar
import polars as pl
import pytest

from specjoule.analysis import AnalysisError, aggregate, checks, derive

TH = checks.Thresholds.from_config({})


def _tables(tmp, cfg=None, meter="nvml", **kw) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Paired records and their checks. The crafted records are built in memory (ar.frame_campaigns: the rows
    write_campaigns writes, shown equal in tests/test_check_thresholds.py); ``tmp`` is unused, kept for callers."""
    recs = aggregate.aggregate_frame(ar.frame_campaigns(cfg, meter=meter, **kw))
    return recs, checks.run_checks(recs, TH, ar.CONFIG_HASH)


def _row(df: pl.DataFrame, campaign: str, cell: str) -> dict:
    rows = df.filter((pl.col("campaign_id") == campaign) & (pl.col("cell_name") == cell)).to_dicts()
    assert len(rows) == 1
    return rows[0]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return _tables(tmp_path_factory.mktemp("clean"))


def test_curves_columns_and_numbers(clean):
    recs, ck = clean
    curves = derive.derive(recs, ck)
    assert tuple(curves.columns) == derive.CURVE_COLUMNS
    assert curves.height == recs.filter(pl.col("role") == "point").height
    assert set(curves["cell_name"]) == {"ngram", "syn--L2", "syn--L4"}
    r = _row(curves, ar.CLOSED, "syn--L4")
    point, opening, closing = (_row(recs, ar.CLOSED, n) for n in ("syn--L4", "baseline--open", "baseline--close"))
    # The crafted baselines: 300 W for 20 s over 10 × 8 × 64 = 5120 tokens → 6 000 000 mJ / 5120 = 1171.875 mJ
    assert opening["mj_per_committed_token"] == closing["mj_per_committed_token"] == 1171.875
    assert r["baseline_mj_per_committed_token"] == pytest.approx(1171.875)
    assert r["energy_ratio"] == pytest.approx(0.7)  # the L4 point draws 0.7 × 300 W (seed 0)
    # Per accepted token: the same energy over the accepted tokens instead of the committed ones.
    assert r["mj_per_accepted_token"] == pytest.approx(0.7 * 1171.875 * 5120 / point["accepted_tokens"])
    assert r["realized_L"] == pytest.approx(4.0) and r["accepted_per_verification"] == pytest.approx(3.0)
    # draft_model proposes k every round: B × (k + 1) tokens per verification pass.
    assert r["tokens_per_verify_pass"] == pytest.approx(8 * (4 + 1))
    assert r["tbt_ratio"] == pytest.approx(0.7)
    # ngram proposes fewer than k: the measured width, not the configured one.
    ng = _row(curves, ar.CLOSED, "ngram")
    assert ng["tokens_per_verify_pass"] == pytest.approx(8 * (1 + 2))
    # Open loop: the batch is the measured concurrency.
    assert _row(curves, ar.OPEN, "syn--L4")["tokens_per_verify_pass"] == pytest.approx(6.0 * 5)
    assert curves["energy_refused_reason"].is_null().all()
    assert curves["failed_checks"].list.len().sum() == 0 and curves["flags"].list.len().sum() == 0


def test_failed_check_refuses_naming_campaign_and_check(tmp_path):
    recs, ck = _tables(tmp_path, mutate={(ar.OPEN, "syn--L2"): ar.setter(max_temperature_c=95.0)})
    with pytest.raises(derive.DeriveRefused) as exc:
        derive.derive(recs, ck)
    msg = str(exc.value)
    assert f"campaign {ar.OPEN}: failed check(s) temperature" in msg
    assert ar.CLOSED not in msg and "allow_failed_checks" in msg


def test_allow_failed_checks_marks_every_row_of_a_failed_campaign(tmp_path):
    recs, ck = _tables(tmp_path, mutate={
        (ar.OPEN, "syn--L2"): ar.setter(max_temperature_c=95.0),
        (ar.CLOSED, "baseline--close"): lambda r: r.update(energy_j=r["energy_j"] * 1.2),
    })
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    # The refusal is per campaign, so is the mark: every row of a refused campaign carries its failures,
    # and dropping marked rows leaves exactly what strict mode would have derived.
    for cell in ("ngram", "syn--L2", "syn--L4"):
        assert _row(curves, ar.OPEN, cell)["failed_checks"] == ["temperature"]
        assert _row(curves, ar.CLOSED, cell)["failed_checks"] == ["baseline_drift"]
    clean_rows = curves.filter(pl.col("failed_checks").list.len() == 0)
    assert set(clean_rows["campaign_id"]) == set(curves["campaign_id"]) - {ar.OPEN, ar.CLOSED}


def test_flags_are_carried_not_refused(tmp_path):
    recs, ck = _tables(tmp_path, mutate={(ar.OPEN, "ngram"): ar.setter(mean_power_w=84.0)})
    curves = derive.derive(recs, ck)
    assert _row(curves, ar.OPEN, "ngram")["flags"] == ["power_regime"]
    assert _row(curves, ar.OPEN, "syn--L2")["flags"] == []


def test_meter_none_refuses_energy_columns_only(tmp_path):
    cfg = {**ar.GPU_CONFIG, "device": "cpu", "cuda_graphs": [False], "meter": "none",
           "schemes": {"baseline": {"method": "baseline"}, "ngram": {"method": "ngram", "k": 3}}}
    recs, ck = _tables(tmp_path, cfg=cfg, meter="none")
    assert set(ck.filter(pl.col("check") == "energy_measured")["status"]) == {checks.FAIL}
    curves = derive.derive(recs, ck)  # strict, and still no refusal: energy_measured refuses energy only
    assert curves.height == recs.filter(pl.col("role") == "point").height > 0
    for col in derive.ENERGY_CURVE_COLUMNS:
        assert curves[col].is_null().all(), col
    assert curves["energy_refused_reason"].str.starts_with("energy_measured fail: energy not measured").all()
    assert curves["tbt_ratio"].is_not_null().all() and curves["realized_L"].is_not_null().all()
    assert curves["failed_checks"].list.len().sum() == 0


def test_mixed_meter_campaign_gets_no_energy(tmp_path):
    recs, ck = _tables(tmp_path, mutate={(ar.CLOSED, "ngram"): lambda r: r.update(
        dict.fromkeys(("energy_j", "energy_j_per_gpu", "mean_power_w", "idle_power_w")) | {"meter": "none"})})
    curves = derive.derive(recs, ck)
    closed = curves.filter(pl.col("campaign_id") == ar.CLOSED)
    assert closed["energy_ratio"].is_null().all() and closed["energy_refused_reason"].is_not_null().all()
    # Every energy column of the refused campaign's rows, including the points that did measure energy (the
    # configuration's mean and interval on the row come from the seeds whose campaigns passed: n = 2 of 3).
    syn = _row(curves, ar.CLOSED, "syn--L4")
    row_level = ("mj_per_committed_token", "baseline_mj_per_committed_token", "energy_ratio", "mj_per_accepted_token",
                 "baseline_window_mj_per_committed_token")
    assert all(syn[c] is None for c in row_level), {c: syn[c] for c in row_level}
    assert syn["energy_ratio_n"] == 2
    assert _row(recs, ar.CLOSED, "syn--L4")["mj_per_committed_token"] is not None  # measured, then refused
    assert curves.filter(pl.col("campaign_id") == ar.OPEN)["energy_ratio"].is_not_null().all()


def test_stale_checks_are_refused(clean):
    recs, ck = clean
    with pytest.raises(derive.AnalysisError, match="no check results for campaign"):
        derive.derive(recs, ck.filter(pl.col("campaign_id") != ar.OPEN))


def test_seed_summary_mean_and_bootstrap(clean):
    recs, ck = clean
    curves = derive.derive(recs, ck)
    summary = derive.summarize_seeds(curves)
    assert summary.height == curves.height // 3
    r = summary.filter((pl.col("workload") == "closed") & (pl.col("cell_name") == "syn--L4")).to_dicts()[0]
    vals = curves.filter((pl.col("workload") == "closed") & (pl.col("cell_name") == "syn--L4"))["energy_ratio"].to_list()
    assert r["n_seeds"] == 3 and r["seeds"] == [0, 1, 2] and r["energy_ratio_n"] == 3
    assert r["energy_ratio_mean"] == pytest.approx(sum(vals) / 3)
    eps = 1e-12
    assert min(vals) - eps <= r["energy_ratio_ci_low"] <= r["energy_ratio_mean"] <= r["energy_ratio_ci_high"] <= max(vals) + eps
    assert r["energy_ratio_ci_low"] < r["energy_ratio_ci_high"]  # seeds differ, so the interval has width
    assert summary.equals(derive.summarize_seeds(curves))  # seeded: reproducible


def test_seed_summary_single_seed_has_no_interval(clean):
    recs, ck = clean
    one = derive.derive(recs, ck).filter(pl.col("seed") == 0)
    s = derive.summarize_seeds(one)
    assert (s["n_seeds"] == 1).all()
    assert s["energy_ratio_ci_low"].is_null().all() and s["energy_ratio_mean"].is_not_null().all()


def test_bootstrap_interval_covers_the_mean_at_the_nominal_rate():
    """The percentile bootstrap of a mean over n = 10 normal draws covers the true mean roughly 95 %
    of the time (a little less: the percentile interval is known to undercover at small n)."""
    import numpy as np

    rng = np.random.default_rng(1)
    vals = rng.normal(1.0, 0.1, size=(400, 10))
    lo, hi = derive._bootstrap_means(vals, np.random.default_rng(2), 1000)
    coverage = float(((lo <= 1.0) & (1.0 <= hi)).mean())
    assert 0.85 <= coverage <= 0.99, coverage


def test_exact_bootstrap_matches_monte_carlo():
    """The enumerated (ideal) bootstrap used for few seeds agrees with a large Monte Carlo one."""
    import numpy as np

    vals = np.random.default_rng(3).normal(1.0, 0.1, size=(50, 5))
    lo, hi = derive._exact_bootstrap_means(vals, 0.025)
    mlo, mhi = derive._bootstrap_means(vals, np.random.default_rng(4), 20000)
    spread = vals.max(axis=1) - vals.min(axis=1)
    assert np.all(np.abs(lo - mlo) <= 0.05 * spread) and np.all(np.abs(hi - mhi) <= 0.05 * spread)
    # Three seeds: 1/27 of resamples repeat the smallest value, more than 2.5 %, so the 95 % interval
    # is exactly the seeds' range — three seeds cannot support a tighter one.
    three = np.array([[1.0, 2.0, 4.0]])
    assert [x[0] for x in derive._exact_bootstrap_means(three, 0.025)] == [1.0, 4.0]
    # Weights of the enumerated resamples are a probability distribution.
    counts, w = derive._compositions(4)
    assert len(counts) == 35 and w.sum() == pytest.approx(1.0) and (counts.sum(axis=1) == 4).all()


# ------------------------------------------------------------------------------------------------
# the refusal message, flags that concern a row, and the edges of derive

def test_the_refusal_names_each_campaign_and_its_checks_in_order_and_counts_the_rest():
    fails = pl.DataFrame({"campaign_id": [f"camp{i:02d}" for i in range(22, 0, -1)] + ["camp05"],
                          "check": ["temperature"] * 22 + ["baseline_drift"]})
    msg = derive._refusal_message(fails)
    lines = msg.split("\n")
    assert lines[0] == ("derive refuses 22 campaign(s) with a failed pre-registered check (see results/checks.md; "
                        "set checks.allow_failed_checks: true to derive them anyway, marked):")
    assert lines[1] == "  campaign camp01: failed check(s) temperature"
    assert lines[5] == "  campaign camp05: failed check(s) temperature, baseline_drift"  # in the order they failed
    assert lines[20] == "  campaign camp20: failed check(s) temperature"
    assert lines[21:] == ["  … and 2 more campaign(s)"]
    exactly_20 = derive._refusal_message(fails.filter(pl.col("campaign_id") <= "camp20"))
    assert "more campaign" not in exactly_20 and len(exactly_20.split("\n")) == 21
    assert derive._refusal_message(fails.filter(pl.col("campaign_id") <= "camp21")).endswith(
        "  campaign camp20: failed check(s) temperature\n  … and 1 more campaign(s)")


def test_a_flag_on_a_baseline_concerns_every_point_of_its_campaign_and_no_other(tmp_path):
    # The opening baseline of the closed campaign draws too little power: power_regime flags it (ADR 0022).
    recs, ck = _tables(tmp_path, drop={(ar.OPEN, "baseline--close")},
                       mutate={(ar.CLOSED, "baseline--open"): ar.setter(mean_power_w=84.0),
                               (ar.OPEN, "baseline--open"): ar.setter(mean_power_w=84.0)})
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    for cell in ("ngram", "syn--L2", "syn--L4"):
        assert "power_regime" in _row(curves, ar.CLOSED, cell)["flags"]
        assert "power_regime" in _row(curves, ar.OPEN, cell)["flags"]  # a campaign without a closing baseline
    others = curves.filter(~pl.col("campaign_id").is_in([ar.CLOSED, ar.OPEN]))
    assert others.height and others["flags"].list.len().sum() == 0


def test_a_flag_on_a_closing_baseline_concerns_the_points_too(tmp_path):
    recs, ck = _tables(tmp_path, mutate={(ar.CLOSED, "baseline--close"): ar.setter(mean_power_w=84.0)})
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    assert all("power_regime" in _row(curves, ar.CLOSED, c)["flags"] for c in ("ngram", "syn--L2", "syn--L4"))


def test_stale_checks_name_at_most_five_campaigns(clean):
    recs, ck = clean
    missing = sorted(set(recs["campaign_id"]))[:6]
    with pytest.raises(AnalysisError) as err:
        derive.derive(recs, ck.filter(~pl.col("campaign_id").is_in(missing)))
    assert str(err.value) == (f"no check results for campaign(s) {', '.join(missing[:5])}: checks.parquet is stale "
                              f"or from another records.parquet")


def test_records_without_points_give_an_empty_table_with_the_curve_columns(clean):
    recs, ck = clean
    curves = derive.derive(recs.filter(pl.col("role") != "point"), ck)
    assert curves.height == 0 and tuple(curves.columns) == derive.CURVE_COLUMNS
    assert dict(curves.schema) == derive.curve_schema()


def test_a_campaign_the_energy_check_never_ran_on_keeps_its_rows_without_energy(clean):
    recs, ck = clean
    curves = derive.derive(recs, ck.filter(~((pl.col("check") == checks.ENERGY_CHECK)
                                              & (pl.col("campaign_id") == ar.CLOSED))))
    closed = curves.filter(pl.col("campaign_id") == ar.CLOSED)
    assert closed.height == 3 and closed["energy_ratio"].is_null().all()
    assert set(closed["energy_refused_reason"]) == {"energy_measured not evaluated for this campaign"}
    assert curves.filter(pl.col("campaign_id") == ar.OPEN)["energy_refused_reason"].is_null().all()


def test_an_unpaired_point_stays_a_curve_row_without_a_baseline(tmp_path):
    recs, ck = _tables(tmp_path, mutate={(ar.CLOSED, "syn--L4"): ar.setter(batch_size=16)})
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    r = _row(curves, ar.CLOSED, "syn--L4")
    assert r["baseline_mj_per_committed_token"] is None and r["energy_ratio"] is None
    assert r["baseline_async_scheduling"] is None and "baseline_present" in r["failed_checks"]


def test_a_closed_batch_verifies_its_batch_size_whatever_concurrency_was_sampled(tmp_path):
    # Closed batch: B is fixed by construction (8), the sampled 7.5 is not the batch; 8 × (1 + 4 drafted) = 40.
    recs, ck = _tables(tmp_path, mutate={(ar.CLOSED, "syn--L4"): ar.setter(mean_running_requests=7.5)})
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    assert _row(curves, ar.CLOSED, "syn--L4")["tokens_per_verify_pass"] == pytest.approx(40.0)


def test_per_pass_and_per_accepted_columns_need_drafts_and_accepted_tokens(tmp_path):
    no_drafts = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": [0, 0, 0]}
    one = {"drafts": 1, "draft_tokens": 2, "accepted_tokens": 1, "accepted_per_position": [1, 0, 0]}
    recs, ck = _tables(tmp_path, mutate={(ar.CLOSED, "ngram"): ar.setter(**no_drafts),
                                         (ar.OPEN, "ngram"): ar.setter(**one)})
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    idle = _row(curves, ar.CLOSED, "ngram")
    assert idle["tokens_per_verify_pass"] is None and idle["mj_per_accepted_token"] is None  # null, not NaN or inf
    single = _row(curves, ar.OPEN, "ngram")
    assert single["tokens_per_verify_pass"] == pytest.approx(6.0 * 3)  # one draft of 2 tokens, B_eff 6
    assert single["mj_per_accepted_token"] == pytest.approx(single["mj_per_committed_token"] * 5760)  # 1 accepted


def test_drafted_step_share_and_committed_per_step_count_the_request_steps_without_a_draft(tmp_path):
    """ADR 0256: request-steps = committed − accepted (each commits 1 + what it accepted); a proposer that drafts in
    1000 of 4000 steps and has 1120 accepted of 5120 committed drafted in 25 % and commits 1.28 tokens a step, while
    realized_L (per verification) reads 2.12. No drafts counter (null, or the 0 an engine writes for one it did not
    read) and no counted step give null, never 0 or NaN; a baseline drafts nothing: null."""
    partial = {"drafts": 1000, "draft_tokens": 2000, "accepted_tokens": 1120, "accepted_per_position": [800, 320, 0]}
    zero = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": [0, 0, 0]}
    absent = {"drafts": None, "draft_tokens": None, "accepted_tokens": None, "accepted_per_position": None}
    recs, ck = _tables(tmp_path, mutate={(ar.CLOSED, "ngram"): ar.setter(**partial),
                                         (ar.CLOSED, "syn--L2"): ar.setter(**zero),
                                         (ar.OPEN, "ngram"): ar.setter(**absent)})
    assert _row(recs, ar.CLOSED, "ngram")["committed_tokens"] == 5120
    # The crafted synthetic L4 accepts every drafted token (3 × 1920 of 5760 committed): no step left to count.
    assert _row(recs, ar.OPEN, "syn--L4")["accepted_tokens"] == _row(recs, ar.OPEN, "syn--L4")["committed_tokens"]
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    ng = _row(curves, ar.CLOSED, "ngram")
    assert ng["drafted_step_share"] == pytest.approx(1000 / 4000) and ng["committed_per_step"] == pytest.approx(1.28)
    assert ng["realized_L"] == pytest.approx(1 + 1120 / 1000) and ng["committed_per_step"] < ng["realized_L"]
    for campaign, cell in ((ar.CLOSED, "syn--L2"), (ar.OPEN, "ngram"), (ar.OPEN, "syn--L4")):
        r = _row(curves, campaign, cell)
        assert r["drafted_step_share"] is None and r["committed_per_step"] is None, (campaign, cell)
    baselines = recs.filter(pl.col("role") != "point").with_columns(derive.request_step_columns())
    assert baselines.height and baselines["drafts"].eq(0).all()
    assert baselines["drafted_step_share"].is_null().all() and baselines["committed_per_step"].is_null().all()


def test_drafted_decode_share_bounds_the_decode_steps_between_a_requests_two_ends(tmp_path):
    """ADR 0256 addendum 2, counted by hand: 40 whole requests of 128 tokens (5120 committed), 1120 accepted, 3000
    drafts. Each request's prefill is a step without a draft (4000 − 40 = 3960 decode steps at the fewest) and its
    last step may accept past its end, at most as many tokens as a step can accept: the positive rates (2 of
    [0.8, 0.4, 0.0]: 4040 steps at the most) or, with no rates, k (3: 4080). Rates that accept nothing make the bounds
    one number; a proposer that drafts every step reads at most 1; open loop (requests cross the window) is null."""
    closed = {"committed_tokens": 5120, "accepted_tokens": 1120, "drafts": 3000, "requests_completed": 40, "k": 3}
    recs, ck = _tables(tmp_path, mutate={
        (ar.CLOSED, "ngram"): ar.setter(**closed, acceptance_rates=None),
        (ar.CLOSED, "syn--L2"): ar.setter(**closed, acceptance_rates=[0.8, 0.4, 0.0]),
        (ar.CLOSED, "syn--L4"): ar.setter(**{**closed, "accepted_tokens": 0, "drafts": 5000},
                                          acceptance_rates=[0.0, 0.0, 0.0]),
    })
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    fewest = 5120 - 1120 - 40
    no_rates, two_positions = _row(curves, ar.CLOSED, "ngram"), _row(curves, ar.CLOSED, "syn--L2")
    assert no_rates["drafted_decode_share_low"] == pytest.approx(3000 / (fewest + 3 * 40))
    assert two_positions["drafted_decode_share_low"] == pytest.approx(3000 / (fewest + 2 * 40))
    for r in (no_rates, two_positions):
        assert r["drafted_decode_share_high"] == pytest.approx(3000 / fewest)
        assert r["drafted_decode_share_low"] < r["drafted_step_share"] < r["drafted_decode_share_high"]
    # nothing accepted: 5120 − 40 decode steps exactly, 5000 of them drafted
    exact = _row(curves, ar.CLOSED, "syn--L4")
    assert exact["drafted_decode_share_low"] == exact["drafted_decode_share_high"] == pytest.approx(5000 / 5080)
    for cell in ("ngram", "syn--L2", "syn--L4"):  # open loop: a window's requests are not whole
        r = _row(curves, ar.OPEN, cell)
        assert _row(recs, ar.OPEN, cell)["drafts"] > 0
        assert r["drafted_decode_share_low"] is None and r["drafted_decode_share_high"] is None
    every = recs.filter(pl.col("campaign_id") == ar.CLOSED, pl.col("cell_name") == "ngram").with_columns(
        pl.lit(4000).alias("drafts")).with_columns(derive.decode_step_columns())
    assert every["drafted_decode_share_high"].to_list() == [1.0]
    assert every["drafted_decode_share_low"].to_list() == pytest.approx([4000 / (fewest + 3 * 40)])
    baselines = recs.filter(pl.col("role") != "point").with_columns(derive.decode_step_columns())
    assert baselines["drafted_decode_share_low"].is_null().all() and baselines["drafted_decode_share_high"].is_null().all()


def test_curves_are_sorted_and_their_intervals_use_the_level_asked_for(clean):
    recs, ck = clean
    curves = derive.derive(recs, ck)
    keys = list(zip(curves["campaign_id"], curves["cell_name"]))
    assert keys == sorted(keys)
    narrow = derive.derive(recs, ck, level=0.5)
    r95, r50 = _row(curves, ar.CLOSED, "syn--L4"), _row(narrow, ar.CLOSED, "syn--L4")
    assert r50["energy_ratio_ci_high"] - r50["energy_ratio_ci_low"] < r95["energy_ratio_ci_high"] - r95["energy_ratio_ci_low"]
