"""Every number with its spread (issue 17, analysis side; ADR 0080-0083).

Crafted records (tests/analysis_records.py) with the wave-2 replicate columns: windows pair as side
means, unsupported records stay out of pairing, checks and curves, intervals resample the highest
replicate level (paired for ratios), the acceptance check allows for sampling, and runs are compared
with a reference. Expected values are computed here from the raw record files or by brute force,
not by the code under test.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import statistics
from pathlib import Path

import analysis_records as ar
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from specjoule import acceptance as acc
from specjoule import config as sj_config
from specjoule.analysis import AnalysisError, aggregate, checks, compare_evidence, derive, evidence, packed, spread

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "validation" / "h200-2026-12"
TH = checks.Thresholds.from_config({})

# One closed-batch workload, three seeds: the opening and closing baselines, min-var L = 2 and geometric L = 4.
SPREAD = {**ar.GPU_CONFIG, "workloads": {"closed": ar.GPU_CONFIG["workloads"]["closed"]},
          "schemes": {"baseline": {"method": "baseline"}, "syn": {"method": "draft_model", "k": 4, "synthetic": True}}}
CAMPAIGNS = [f"vllm-p-closed-b8-code-s{s}-cg1" for s in (0, 1, 2)]


def _raw(paths: list[Path]) -> dict[tuple[str, str], dict]:
    """Each written record as the runner wrote it, read with pyarrow (not through the analysis)."""
    out = {}
    for p in paths:
        row = pq.read_table(p).to_pylist()[0]
        out[(row["campaign_id"], row["cell_name"])] = row
    return out


def _checks(df: pl.DataFrame, th: checks.Thresholds = TH, **kw) -> pl.DataFrame:
    return checks.run_checks(df, th, ar.CONFIG_HASH, **kw)


def _row(result: pl.DataFrame, check: str, campaign: str) -> dict:
    rows = result.filter((pl.col("check") == check) & (pl.col("campaign_id") == campaign)).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


# ----------------------------------------------------------------------------------------------
# pairing with windows

def _bracket_drift(row: dict, cell, r: int, w: int) -> None:
    if cell.role == "opening_baseline":
        ar.scale_energy(row, 1 + 0.01 * w)
    elif cell.role == "closing_baseline":
        ar.scale_energy(row, 1 + 0.004 * w)


def test_windows_pair_each_point_with_the_mean_of_each_side(tmp_path):
    paths = ar.write_replicated(tmp_path, windows=3, cfg=SPREAD, effect=_bracket_drift)
    raw = _raw(paths)
    df = aggregate.aggregate(paths)
    names = {side: [f"baseline--{side}"] + [f"baseline--{side}--w{w}" for w in (1, 2)] for side in ("open", "close")}
    result = _checks(df)
    for c in CAMPAIGNS:
        o = sum(raw[(c, n)]["mj_per_committed_token"] for n in names["open"]) / 3
        cl = sum(raw[(c, n)]["mj_per_committed_token"] for n in names["close"]) / 3
        # _bracket_drift scales the opening windows by 1, 1.01, 1.02 (mean 1.01), the closing ones by 1, 1.004,
        # 1.008 (mean 1.004), from one unscaled value m: baseline m × 1.007, drift 0.006 / 1.007.
        m = raw[(c, "baseline--open")]["mj_per_committed_token"]
        assert (o, cl) == pytest.approx((m * 1.01, m * 1.004))
        for point in ("syn--L2", "syn--L2--w2", "syn--L4--w1"):
            r = df.filter((pl.col("campaign_id") == c) & (pl.col("cell_name") == point)).row(0, named=True)
            assert r["baseline_mj_per_committed_token"] == pytest.approx(m * 1.007)
            assert r["opening_mj_per_committed_token"] == pytest.approx(m * 1.01)
            assert (r["opening_n"], r["closing_n"], r["baseline_n"]) == (3, 3, 6)
            assert r["opening_cell_name"] == "baseline--open" and r["opening_cell_names"] == names["open"]
            assert r["closing_cell_names"] == names["close"] and not r["pair_cross_gpu"]
        drift = _row(result, "baseline_drift", c)
        assert drift["value"] == pytest.approx(0.006 / 1.007)
        assert "means of 3 opening and 3 closing windows" in drift["detail"]
        assert drift["cell_names"] == names["open"] + names["close"]
    assert set(result["status"]) <= {checks.PASS, checks.NA}, result.filter(pl.col("status") != checks.PASS)


def test_a_flagged_baseline_window_concerns_every_ratio_built_on_it(tmp_path):
    def idle_window(row, cell, r, w):
        if cell.role == "opening_baseline" and w == 2 and cell.seed == 1:
            row["mean_power_w"] = 84.0  # below idle × 1.15: power_regime flags this window only
    paths = ar.write_replicated(tmp_path, windows=3, cfg=SPREAD, effect=idle_window)
    df = aggregate.aggregate(paths)
    result = _checks(df)
    flag = _row(result, "power_regime", CAMPAIGNS[1])
    assert flag["status"] == checks.FLAG and flag["cell_names"] == ["baseline--open--w2"]
    curves = derive.derive(df, result)
    for r in curves.iter_rows(named=True):
        assert ("power_regime" in r["flags"]) == (r["campaign_id"] == CAMPAIGNS[1]), r["cell_name"]


def test_two_records_for_one_baseline_window_are_an_error(tmp_path):
    def same_window(row, cell, r, w):
        if cell.role == "opening_baseline" and w == 1 and cell.seed == 0:
            row["window_index"] = 0
    paths = ar.write_replicated(tmp_path, windows=2, cfg=SPREAD, effect=same_window)
    with pytest.raises(AnalysisError, match=r"2 opening_baseline records for window 0 \(baseline--open, baseline--open--w1\)"):
        aggregate.aggregate(paths)


def test_single_window_records_give_identical_results():
    """The committed one-GPU evidence (written before windows existed) re-derives to its committed tables:
    every pairing column, check, curve and summary column of that time, value for value."""
    from polars.testing import assert_frame_equal

    folder = EVIDENCE / "session-2026-12-01b"
    cfg = sj_config.load(folder / "h200-engines-one-gpu.yaml")
    df = aggregate.aggregate(packed.tree_files(folder / "results" / "cells", "*/*.parquet"))
    old = pl.read_parquet(folder / "results" / "records.parquet")
    cols = [c for c in old.columns if c != "record_path"]  # paths are relative there
    assert_frame_equal(old.select(cols), df.select(cols))
    # The schema's later keys are hash_neutral at their defaults: the file hashes as it did when it ran.
    assert sj_config.config_hash(cfg) == df["config_hash"][0]
    result = checks.run_checks(df, checks.Thresholds.from_config(cfg["checks"], cfg["report"]), sj_config.config_hash(cfg))
    committed = pl.read_parquet(folder / "results" / "checks.parquet")
    joined = committed.join(result, on=["check", "campaign_id"], how="left", suffix="_now")
    for col in ("status", "value", "threshold", "detail", "cell_names"):
        assert joined.filter(pl.col(col).ne_missing(pl.col(f"{col}_now"))).height == 0, col
    new_checks = result.filter(~pl.col("check").is_in(committed["check"].unique().implode()))
    assert set(new_checks["check"]) == {"interval_width", "reproduces_reference", "model_residual", "steady_state",
                                        "send_lag", "latency_reliable", "gpu_energy_balance", "window_drift"}
    # one window, one seed, no reference, no tensor_parallel_size, no window_drift_max pre-registered
    assert set(new_checks["status"]) == {checks.NA}
    curves = derive.derive(df, result)
    old_curves = pl.read_parquet(folder / "results" / "curves.parquet")
    assert_frame_equal(old_curves.sort("campaign_id", "cell_name"),
                       curves.select(old_curves.columns).sort("campaign_id", "cell_name"))
    old_summary = pl.read_parquet(folder / "results" / "curves_summary.parquet")
    assert_frame_equal(old_summary, derive.summarize(curves).select(old_summary.columns))


def test_unsupported_records_are_kept_but_never_paired_checked_or_derived(tmp_path):
    paths = ar.write_replicated(tmp_path, windows=2, cfg=SPREAD, unsupported={"syn--L4"})
    df = aggregate.aggregate(paths)
    uns = df.filter(pl.col("status") == "unsupported")
    assert uns.height == 3 * 2 and set(uns["cell_name"]) == {"syn--L4", "syn--L4--w1"}
    for col in ("opening_cell_name", "baseline_mj_per_committed_token", "baseline_n", "pair_cross_gpu"):
        assert uns[col].is_null().all(), col
    result = _checks(df)
    assert not result.filter(pl.col("cell_names").list.eval(pl.element().str.starts_with("syn--L4")).list.any()).height
    assert checks.FAIL not in set(result["status"])  # committed_spread, baseline_present, ... ignore them
    curves = derive.derive(df, result)
    assert set(curves["point_name"]) == {"syn--L2"} and curves.height == 3 * 2


# ----------------------------------------------------------------------------------------------
# intervals

def _brute_force(num: list[float], den: list[float], level: float) -> tuple[float, float]:
    """Every ordered resample (n^n, equally likely): the percentile interval of Σnum / Σden."""
    n = len(num)
    stats = sorted(sum(num[i] for i in idx) / sum(den[i] for i in idx) for idx in itertools.product(range(n), repeat=n))
    alpha = (1 - level) / 2
    m = len(stats)
    return stats[math.ceil(alpha * m - 1e-9) - 1], stats[math.ceil((1 - alpha) * m - 1e-9) - 1]


@pytest.mark.parametrize("n", [3, 4, 5])
def test_paired_ratio_interval_is_the_exact_bootstrap(n):
    rng = np.random.default_rng(n)
    den = rng.uniform(50, 60, size=n)
    num = den * rng.uniform(0.7, 0.9, size=n)
    lo, hi = spread.resample_interval(num[None, :], den[None, :], np.random.default_rng(0))
    assert (lo[0], hi[0]) == pytest.approx(_brute_force(list(num), list(den), 0.95), rel=1e-12)


def test_paired_resampling_cancels_what_point_and_baseline_share():
    # Each unit's point is 0.8 × its own baseline, the baselines spread 20 %: resampled jointly the ratio
    # never moves; resampled apart it would.
    den = np.array([[50.0, 55.0, 60.0, 52.0]])
    lo, hi = spread.resample_interval(0.8 * den, den, np.random.default_rng(0))
    assert lo[0] == pytest.approx(0.8) and hi[0] == pytest.approx(0.8)
    num_alone, _ = spread.exact_distribution(0.8 * den)
    assert num_alone.max() / num_alone.min() > 1.1  # the point alone does spread


def _nested_frame() -> pl.DataFrame:
    rows = []
    for r, s, w in itertools.product((0, 1), (0, 1, 2), (0, 1)):
        if (r, s) == (1, 2) or (r, s, w) == (0, 0, 1):
            continue  # unbalanced: replicate 1 lost seed 2, seed 0 of replicate 0 has one window
        rows.append({"g": "a", "engine_replicate": r, "seed": s, "window_index": w, "v": 1 + r + 0.1 * s + 0.01 * w})
    return pl.DataFrame(rows)


def test_the_highest_replicate_level_is_resampled_and_the_levels_below_averaged():
    frame = _nested_frame()
    m = [spread.Metric("v", "v")]
    # by hand: replicate 0 = mean of seed means (1.0, 1.105, 1.205); replicate 1 = mean of (2.005, 2.105)
    r0, r1 = (1.0 + 1.105 + 1.205) / 3, (2.005 + 2.105) / 2
    s = spread.summarize(frame, ["g"], m).row(0, named=True)
    assert (s["interval_level"], s["v_n"]) == ("engine_replicate", 2)
    assert s["v_mean"] == pytest.approx((r0 + r1) / 2)
    assert (s["v_ci_low"], s["v_ci_high"]) == pytest.approx((r0, r1))  # two units: each extreme has p = 1/4
    seeds = spread.summarize(frame.filter(pl.col("engine_replicate") == 0), ["g"], m).row(0, named=True)
    assert (seeds["interval_level"], seeds["v_n"]) == ("seed", 3) and seeds["v_mean"] == pytest.approx(r0)
    windows = spread.summarize(frame.filter((pl.col("engine_replicate") == 0) & (pl.col("seed") == 1)), ["g"], m)
    assert windows.row(0, named=True)["interval_level"] == "window"
    one = spread.summarize(frame.filter((pl.col("engine_replicate") == 0) & (pl.col("seed") == 0)), ["g"], m)
    one = one.row(0, named=True)
    assert one["interval_level"] is None and one["v_n"] == 1 and one["v_ci_low"] is None and one["v_mean"] == 1.0


def _replicate_effect(row, cell, r, w):
    # Points and baselines move together per engine replicate (a board-like factor), points alone per window.
    ar.scale_energy(row, (1.0 + 0.03 * r) * (1.0 + (0.02 * w if cell.role == "point" else 0.005 * w)))


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    root = tmp_path_factory.mktemp("replicated")
    paths = ar.write_replicated(root, windows=3, engine_replicates=2, cfg=SPREAD, effect=_replicate_effect)
    df = aggregate.aggregate(paths)
    result = _checks(df)
    return paths, df, result, derive.derive(df, result)


def test_every_curve_row_carries_its_configuration_interval(replicated):
    paths, df, result, curves = replicated
    assert set(result["status"]) <= {checks.PASS, checks.NA}, result.filter(pl.col("status") != checks.PASS)
    assert curves.height == 2 * 3 * 3 * 2  # vectors × seeds × windows × replicates
    assert set(curves["interval_level"]) == {"engine_replicate"} and set(curves["energy_ratio_n"]) == {2}
    per_config = curves.group_by("point_name").agg(
        *(pl.col(c).n_unique() for c in ("energy_ratio_mean", "energy_ratio_ci_low", "tbt_ratio_ci_high")))
    assert (per_config.drop("point_name").to_numpy() == 1).all()
    # Independently: per replicate, the point's mean over seeds and windows over the mean of its own campaigns'
    # window baselines ((opening_w + closing_w) / 2), then the ratio of the replicate means.
    raw = _raw(paths)
    for vec in ("syn--L2", "syn--L4"):
        p_r, b_r = [], []
        for r in (0, 1):
            camps = [c + (f"-r{r}" if r else "") for c in CAMPAIGNS]
            sfx = ["", "--w1", "--w2"]
            p_r.append(np.mean([np.mean([raw[(c, vec + x)]["mj_per_committed_token"] for x in sfx]) for c in camps]))
            b_r.append(np.mean([np.mean([(raw[(c, "baseline--open" + x)]["mj_per_committed_token"]
                                          + raw[(c, "baseline--close" + x)]["mj_per_committed_token"]) / 2 for x in sfx])
                                for c in camps]))
        row = curves.filter(pl.col("point_name") == vec).row(0, named=True)
        assert row["energy_ratio_mean"] == pytest.approx(sum(p_r) / sum(b_r))
        ratios = sorted(p / b for p, b in zip(p_r, b_r))  # two units: the interval spans the two replicate ratios
        assert (row["energy_ratio_ci_low"], row["energy_ratio_ci_high"]) == pytest.approx(tuple(ratios))


def test_summary_has_one_row_per_configuration_and_documents_its_interval(replicated, tmp_path):
    paths, df, result, curves = replicated
    summary = derive.summarize(curves)
    assert summary.height == 2 and set(summary["cell_name"]) == {"syn--L2", "syn--L4"}
    r = summary.row(0, named=True)
    assert (r["n_seeds"], r["n_windows"], r["n_engine_replicates"], r["n_records"]) == (3, 3, 2, 18)
    assert r["interval_level"] == "engine_replicate" and r["energy_ratio_n"] == 2
    derive.write(curves, summary, tmp_path / "c.parquet", tmp_path / "s.parquet", "h", level=0.9)
    schema = pq.read_schema(tmp_path / "s.parquet")
    meta = {k.decode(): v.decode() for k, v in schema.metadata.items()}
    assert meta[derive.META_INTERVAL_LEVEL] == "0.9" and "engine_replicate, else seed, else window" in meta["specjoule_bootstrap"]
    doc = schema.field("energy_ratio_ci_low").metadata[b"doc"].decode()
    assert "interval_level" in doc and "bootstrap" in doc
    assert schema.field("seeds").metadata[b"doc"] == derive.SUMMARY_DOCS["seeds"].encode()
    curve_doc = pq.read_schema(tmp_path / "c.parquet").field("interval_level").metadata[b"doc"].decode()
    assert "engine_replicate if > 1, else seed if > 1, else window if > 1" in curve_doc


def test_the_interval_level_is_the_configured_one(replicated):
    _, df, result, _ = replicated
    # Seeds only (replicate 0): three units, so the levels give different intervals.
    one = df.filter(~pl.col("campaign_id").str.ends_with("-r1"))
    wide = derive.derive(one, result.filter(pl.col("campaign_id").is_in(one["campaign_id"].unique().implode())))
    narrow = derive.derive(one, result.filter(pl.col("campaign_id").is_in(one["campaign_id"].unique().implode())),
                           level=0.5)
    w = wide["energy_ratio_ci_high"] - wide["energy_ratio_ci_low"]
    n = narrow["energy_ratio_ci_high"] - narrow["energy_ratio_ci_low"]
    assert (n <= w + 1e-15).all() and (n < w).any()
    with pytest.raises(sj_config.ConfigError, match="report.interval_level"):
        sj_config.validate({**ar.GPU_CONFIG, "report": {"interval_level": 1.0}})
    # Replicate counts below 1 are parse-time errors too (the schema's minimum, ADR 0064).
    for key, bad in (("windows", 0), ("engine_replicates", -1)):
        with pytest.raises(sj_config.ConfigError, match=rf"config error at {key} = {bad}: .*minimum of 1"):
            sj_config.validate({**ar.GPU_CONFIG, key: bad})
    for bad in (0, -0.5, 95):
        with pytest.raises(sj_config.ConfigError, match="report.interval_level"):
            sj_config.validate({**ar.GPU_CONFIG, "report": {"interval_level": bad}})


# ----------------------------------------------------------------------------------------------
# interval_width

def _noisy_l2(row, cell, r, w):
    if cell.name == "syn--L2":
        ar.scale_energy(row, (0.8, 1.0, 1.25)[cell.seed])


def test_interval_width_flags_a_point_too_wide_to_rank_against_its_neighbour(tmp_path):
    df = aggregate.aggregate(ar.write_replicated(tmp_path, cfg=SPREAD, effect=_noisy_l2))
    result = _checks(df)
    for c in CAMPAIGNS:
        row = _row(result, "interval_width", c)
        assert row["status"] == checks.FLAG and row["cell_names"] == ["syn--L2"]
        assert "reaches" in row["detail"] and "syn--L4" in row["detail"]
        assert row["threshold"] == TH.interval_width_max == 1.0
    flagged = {(r[1], r[0]) for r in result.filter(pl.col("status") == checks.FLAG).select("check", "campaign_id").rows()}
    assert flagged == {(c, "interval_width") for c in CAMPAIGNS}
    curves = derive.derive(df, result)  # a flag, not a refusal
    assert all(("interval_width" in f) == (n == "syn--L2") for n, f in zip(curves["point_name"], curves["flags"]))
    loose = _checks(df, dataclasses.replace(TH, interval_width_max=float(row["value"]) * 1.01))
    assert set(loose.filter(pl.col("check") == "interval_width")["status"]) == {checks.PASS}
    # Exactly at the threshold passes, just past it flags (the value is the worst extent of the campaign).
    worst = max(_row(result, "interval_width", c)["value"] for c in CAMPAIGNS)
    at = _checks(df, dataclasses.replace(TH, interval_width_max=worst), only=["interval_width"])
    assert set(at["status"]) == {checks.PASS}
    past = _checks(df, dataclasses.replace(TH, interval_width_max=worst * 0.999), only=["interval_width"])
    assert checks.FLAG in set(past["status"])


# ----------------------------------------------------------------------------------------------
# acceptance_length with a sampling tolerance

ACC = {**SPREAD, "batch_sizes": [1], "seeds": [0], "acceptance": {"G3": {"geometric": 3.0}},
       "schemes": {"baseline": {"method": "baseline"}, "syn": {"method": "draft_model", "k": 5, "synthetic": True}}}


def _accepted_counts(rates: list[float], drafts: int, seed: int) -> np.ndarray:
    """Per draft, the accepted count as vLLM draws it: a uniform per position against the conditional rate."""
    r = np.asarray(rates)
    cond = r / np.concatenate([[1.0], r[:-1]])
    u = np.random.default_rng(seed).random((drafts, len(r)))
    return np.cumprod(u < cond, axis=1).sum(axis=1)


def _acceptance_check(tmp_path: Path, drawn_from: dict, drafts: int, seed: int, **row_values) -> tuple[dict, float]:
    _, rates = acc.resolve(drawn_from, 5)
    a = _accepted_counts(rates, drafts, seed)

    def realized(row, cell, r, w):
        if cell.role == "point":
            row.update(drafts=drafts, draft_tokens=drafts * 5, accepted_tokens=int(a.sum()),
                       accepted_per_position=[int((a > i).sum()) for i in range(5)], **row_values)
    df = aggregate.aggregate(ar.write_replicated(tmp_path, cfg=ACC, effect=realized))
    result = _checks(df, only=["acceptance_length"])
    return result.row(0, named=True), 1 + a.mean()


def test_a_geometric_vector_at_b1_passes_within_its_sampling_error(tmp_path):
    row, realized = _acceptance_check(tmp_path, {"geometric": 3.0}, drafts=400, seed=12)
    # The draw lies outside the absolute tolerance: only the standard error lets it pass.
    assert abs(realized - 3.0) > TH.acceptance_length_tolerance
    assert row["status"] == checks.PASS, row
    # The SE in the detail, against the spread of many simulated drafts (not the rate formula).
    se = float(re.search(r"SE ([0-9.]+) from 400", row["detail"]).group(1))
    sd = _accepted_counts(acc.resolve({"geometric": 3.0}, 5)[1], 400_000, 1).std()
    assert se == pytest.approx(sd / math.sqrt(400), rel=0.02)
    assert abs(realized - 3.0) / se < TH.acceptance_length_z


def test_a_wrong_vector_fails(tmp_path):
    row, realized = _acceptance_check(tmp_path, {"geometric": 2.0}, drafts=400, seed=12)
    assert row["status"] == checks.FAIL and row["cell_names"] == ["syn--G3"]
    assert "SE 0.09" in row["detail"] and "beyond 4" in row["detail"]
    assert row["value"] == pytest.approx(abs(realized - 3.0))


def test_sglang_draws_once_per_verify_step(tmp_path):
    # SGLang's simulated length is one draw per step for the whole batch: at B = 32, 300 steps are 300 draws,
    # not 9,600, and a gap of 0.1 in L is 3.5 SE (passes) there, 20 SE (fails) for vLLM's per-request draws.
    cfg = {**ACC, "batch_sizes": [32], "acceptance": {"M25": {"minvar": 2.5}}}

    def run(mechanism: str, sub: str) -> dict:
        def realized(row, cell, r, w):
            if cell.role == "point":
                drafts = 300 * 32
                acc_tokens = int(round(drafts * 1.6))  # realized L 2.6 against 2.5
                row.update(acceptance_mechanism=mechanism, drafts=drafts, draft_tokens=drafts * 5,
                           accepted_tokens=acc_tokens, accepted_per_position=[drafts, acc_tokens - drafts, 0, 0, 0])
        df = aggregate.aggregate(ar.write_replicated(tmp_path / sub, cfg=cfg, effect=realized))
        return _checks(df, only=["acceptance_length"]).row(0, named=True)
    sglang, vllm = run("sglang_simulate_acc_len", "s"), run("vllm_synthetic_rates", "v")
    assert sglang["status"] == checks.PASS and "from 300 draws" in sglang["detail"]
    assert vllm["status"] == checks.FAIL and "from 9600 draws" in vllm["detail"]


# ----------------------------------------------------------------------------------------------
# reproducibility

def _cheaper_l4(row, cell, r, w):
    if cell.name == "syn--L4":
        ar.scale_energy(row, 0.8)


def test_reproduces_reference_flags_only_the_configuration_that_moved(tmp_path):
    ar.write_replicated(tmp_path / "reference", cfg=SPREAD, effect=_cheaper_l4)
    df = aggregate.aggregate(ar.write_replicated(tmp_path / "run", cfg=SPREAD))
    th = dataclasses.replace(TH, reference_evidence=str(tmp_path / "reference"))
    result = _checks(df, th)
    for c in CAMPAIGNS:
        row = _row(result, "reproduces_reference", c)
        assert row["status"] == checks.FLAG and row["cell_names"] == ["syn--L4"], row
        assert row["value"] == pytest.approx(0.25) and "interval" in row["detail"]
    # A shift exactly at reference_shift_max reproduces; just past it (its interval excluding 0) it does not.
    shift = max(_row(result, "reproduces_reference", c)["value"] for c in CAMPAIGNS)
    at = _checks(df, dataclasses.replace(th, reference_shift_max=shift), only=["reproduces_reference"])
    assert set(at["status"]) == {checks.PASS}
    past = _checks(df, dataclasses.replace(th, reference_shift_max=shift * 0.999), only=["reproduces_reference"])
    assert set(past["status"]) == {checks.FLAG}
    # The same run against itself, and against a reference 3 % off (inside the tolerance), reproduces.
    ar.write_replicated(tmp_path / "near", cfg=SPREAD, effect=lambda row, cell, r, w: ar.scale_energy(
        row, 1.03 if cell.role == "point" else 1.0))
    for ref in ("run", "near"):
        again = _checks(df, dataclasses.replace(TH, reference_evidence=str(tmp_path / ref)))
        assert set(again.filter(pl.col("check") == "reproduces_reference")["status"]) == {checks.PASS}, ref


def test_reference_evidence_errors_at_parse_time(tmp_path):
    cfg = sj_config.validate(SPREAD)
    table = ar.cell_table(SPREAD)
    with pytest.raises(sj_config.ConfigError, match=r"report.reference_evidence = '/no/such/folder': no such file"):
        evidence.check_reference({**cfg, "report": {**cfg["report"], "reference_evidence": "/no/such/folder"}}, table)
    (tmp_path / "empty").mkdir()
    with pytest.raises(sj_config.ConfigError, match="no cell records"):
        evidence.check_reference({**cfg, "report": {**cfg["report"], "reference_evidence": str(tmp_path / "empty")}}, table)
    other = {**SPREAD, "batch_sizes": [16]}
    ar.write_replicated(tmp_path / "other", cfg=other)
    with pytest.raises(sj_config.ConfigError, match="none with the measured parameters of a cell of this config"):
        evidence.check_reference({**cfg, "report": {**cfg["report"], "reference_evidence": str(tmp_path / "other")}}, table)
    ar.write_replicated(tmp_path / "same", cfg=SPREAD)
    evidence.check_reference({**cfg, "report": {**cfg["report"], "reference_evidence": str(tmp_path / "same")}}, table)


def test_compare_evidence_on_the_committed_h200_sessions(capsys):
    a = EVIDENCE / "session-2026-12-01" / "closed" / "results" / "cells"
    b = EVIDENCE / "session-2026-12-01b" / "results" / "cells"
    assert compare_evidence.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    table = compare_evidence.compare_sources(a, b)
    assert table.height == 6 and set(table["engine"]) == {"vllm"}
    mv6 = table.filter((pl.col("configured_L") == 6) & (pl.col("batch_size") == 1)).row(0, named=True)
    # The cell of issue 17: 0.928× on GPU f2030c47, 0.759× on GPU c0b62778, one window each.
    assert mv6["energy_ratio_a"] == pytest.approx(0.9282, abs=5e-4) and mv6["energy_ratio_b"] == pytest.approx(0.7588, abs=5e-4)
    assert mv6["shift"] == pytest.approx(0.7588 / 0.9282 - 1, abs=1e-3)
    assert (mv6["n_a"], mv6["n_b"], mv6["shift_ci_low"], mv6["reproduces"]) == (1, 1, None, False)
    assert not mv6["same_cell_id"] and "tolerance only" in mv6["basis"]
    mv3 = table.filter((pl.col("configured_L") == 3) & (pl.col("batch_size") == 1)).row(0, named=True)
    assert mv3["reproduces"] is True and abs(mv3["shift"]) < 0.005
    # L = 1 ran with its rates set at engine start in one session and swapped in place in the other: a condition
    # (ADR 0039), shown and still judged.
    mv1 = table.filter((pl.col("configured_L") == 1) & (pl.col("batch_size") == 1)).row(0, named=True)
    assert mv1["comparable"] and mv1["reproduces"] is False
    assert any("speculative_synthetic_rates_swapped" in d and "condition" in d for d in mv1["differences"])
    assert "does NOT reproduce" in out and "-18.3%" in out


def test_an_evidence_folder_whose_results_is_a_symlink_reads_its_records(tmp_path):
    """A session folder often links ``results`` to the run's tree: the records behind the link are found, once,
    and a link back up the tree does not loop."""
    run = EVIDENCE / "session-2026-12-01b" / "results"
    session = tmp_path / "session"
    session.mkdir()
    (session / "results").symlink_to(run, target_is_directory=True)
    (session / "loop").symlink_to(session, target_is_directory=True)
    direct = evidence.record_files(run / "cells")
    assert len(direct) >= 6
    linked = evidence.record_files(session)
    assert sorted(f.relative_to(session / "results") for f in linked if "loop" not in f.parts) == sorted(
        f.relative_to(run) for f in direct
    )
    assert len(linked) == len(direct)  # the loop adds nothing: each real folder once
    # a committed marked/ link to a sibling run: its records are read under their real path, not the link's
    marked = EVIDENCE / "session-2026-11-30c"
    assert (marked / "marked" / "results" / "cells.parquet").is_symlink()  # packed, its link too (ADR 0246)
    files = evidence.record_files(marked)
    assert files and not [f for f in files if "marked" in f.relative_to(marked).parts]
    table = compare_evidence.compare_sources(run / "cells", session)  # a run against itself, through the link
    assert table.height == 12 and set(table["engine"]) == {"vllm", "sglang"}  # both engines of that run
    assert table["reproduces"].all() and (table["shift"].abs() < 1e-12).all()


def test_a_field_one_side_never_recorded_is_said_but_does_not_block_the_verdict(capsys):
    """MTP on MiMo-7B on two boards (sessions 2026-12-01d and 2026-12-02b): the older records predate the
    engine_config field fuse_allreduce_rms (ADR 0155), the newer say false. Not a difference (ADR 0181): judged."""
    a = EVIDENCE / "session-2026-12-01d" / "mimo-mtp" / "results" / "cells"
    b = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"
    table = compare_evidence.compare_sources(a, b)
    assert sorted(table["configured_L"]) == [3.0, 4.0]
    for row in table.iter_rows(named=True):
        assert row["comparable"] and row["reproduces"] is True and abs(row["shift"]) < 0.01, row
        said = [d for d in row["differences"] if d.startswith("not recorded by A")]
        assert said == ["not recorded by A (a field its records predate): engine_config.fuse_allreduce_rms = false"]
        assert not any(d.startswith("engine_config.fuse_allreduce_rms") for d in row["differences"])


def test_a_field_both_sides_recorded_with_different_values_still_blocks(tmp_path):
    """The same pair with the newer records' value changed: now both recorded it, and they differ."""
    import json as _json

    src = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"
    out = tmp_path / "cells"
    for f in packed.tree_files(src):
        df = packed.read_frame(f)
        cfg = [_json.loads(t) if t else None for t in df["engine_config"]]
        for c in cfg:
            if c is not None:
                c["fuse_allreduce_rms"] = True
        df = df.with_columns(pl.Series("engine_config", [_json.dumps(c) if c else None for c in cfg]))
        (out / f.parent.name).mkdir(parents=True, exist_ok=True)
        df.write_parquet(out / f.parent.name / f.name)
    table = compare_evidence.compare_sources(src, out)
    assert table.height == 3 and not any(table["comparable"])
    for diffs in table["differences"].to_list():
        assert "engine_config.fuse_allreduce_rms: false vs true" in diffs, diffs


def _drafter_frame(rows: list[dict]) -> pl.DataFrame:
    schema = {"method": pl.String, "draft_model": pl.String, "engine_config": pl.String}
    return pl.DataFrame(rows, schema=schema)


def test_a_drafter_the_record_predates_is_the_one_its_engine_named():
    """ADR 0229: before 2026-12-02b the runner wrote draft_model for the draft_model method only; an EAGLE3, DFlash
    or DSpark record of then has it null, and its engine configuration names the drafter (vLLM and SGLang keys)."""
    vllm = json.dumps({"speculative_draft_model": "/tmp/work/eng/config/models/qwen3-8b-eagle3"})
    sglang = json.dumps({"speculative_draft_model_path": "/tmp/work/eng/config/models/qwen3-8b-dflash"})
    target = json.dumps({"speculative_draft_model": "/tmp/work/eng/config/models/glm-4.7-flash"})
    df = _drafter_frame(
        [
            {"method": "eagle3", "draft_model": None, "engine_config": vllm},  # 2026-12-01d
            {"method": "eagle3", "draft_model": "config/models/qwen3-8b-eagle3", "engine_config": vllm},  # later
            {"method": "dflash", "draft_model": None, "engine_config": sglang},
            {"method": "mtp", "draft_model": None, "engine_config": target},  # MTP: the engine names the target
            {"method": "ngram", "draft_model": None, "engine_config": "{}"},
            {"method": "eagle3", "draft_model": None, "engine_config": None},  # nothing to read: stays unknown
            {"method": "draft_model", "draft_model": "Qwen/Qwen2.5-0.5B-Instruct", "engine_config": None},
        ]
    )
    got = df.select(evidence.drafter_name(df))["draft_model"].to_list()
    assert got == ["qwen3-8b-eagle3", "qwen3-8b-eagle3", "qwen3-8b-dflash", "∅", "∅", "∅", "Qwen2.5-0.5B-Instruct"]
    # a planned cell (no engine configuration yet) keys its drafter the same way
    planned = pl.DataFrame({"draft_model": ["config/models/qwen3-8b-eagle3", None]})
    assert planned.select(evidence.drafter_name(planned))["draft_model"].to_list() == ["qwen3-8b-eagle3", "∅"]


def test_depth_matches_the_breadth_run_whose_records_predate_the_drafter_column_and_is_not_judged():
    """2026-12-03d's depth and 2026-12-01d's breadth measured five equal B = 1 points on Qwen3-8B; the older records
    have no draft_model. Matched now, and not judged: their schedulers differ (max_num_seqs 1 and 32)."""
    a = EVIDENCE / "session-2026-12-03d" / "depth" / "results" / "cells"
    b = EVIDENCE / "session-2026-12-01d" / "qwen3-8b" / "results" / "cells"
    table = compare_evidence.compare_sources(a, b)
    assert sorted(zip(table["method"], table["configured_L"])) == [
        ("dflash", 1.0), ("dflash", 16.0), ("eagle3", 1.0), ("eagle3", 3.0), ("eagle3", 4.0)
    ]
    for row in table.iter_rows(named=True):
        assert row["comparable"] is False and row["reproduces"] is None, row
        assert any(d.startswith("engine_config.max_num_seqs: 32 vs 1") for d in row["differences"]), row


def _records_with(src, out, *columns: pl.Expr):
    """A copy of an evidence folder's records (one file a record, the pipeline's layout) with ``columns`` set."""
    for f in packed.tree_files(src):
        (out / f.parent.name).mkdir(parents=True, exist_ok=True)
        packed.read_frame(f).with_columns(*columns).write_parquet(out / f.parent.name / f.name)
    return out


def _with_host(src, out, signature: str | None, speed: float | None):
    """The records with the host columns set (ADR 0254), as newer records carry them."""
    return _records_with(src, out, pl.lit(signature, pl.String).alias("host_cpu_signature"),
                         pl.lit(speed, pl.Float64).alias("host_speed_mops"))


def test_the_host_cpu_and_its_speed_are_said_beside_the_shift_and_never_block(tmp_path, capsys):
    src = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"
    a = _with_host(src, tmp_path / "a" / "cells", "GenuineIntel, family/model/stepping 6/143/8", 8.0)
    b = _with_host(src, tmp_path / "b" / "cells", "GenuineIntel, family/model/stepping 6/207/2", 6.0)
    table = compare_evidence.compare_sources(a, b)
    assert table.height == 3 and all(table["comparable"]) and all(table["reproduces"])  # the same records
    assert table["host_speed_a"].to_list() == [8.0] * 3 and table["host_speed_b"].to_list() == [6.0] * 3
    assert table["host_speed_ratio"].to_list() == pytest.approx([0.75] * 3)
    for diffs in table["differences"].to_list():
        assert "host CPU: GenuineIntel, family/model/stepping 6/143/8 vs GenuineIntel, family/model/stepping 6/207/2" in diffs
    assert compare_evidence.main([str(a), str(b)]) == 0
    assert capsys.readouterr().out.count("host speed 8.00 → 6.00 M probe iterations/s (-25.0%)") == 3


def _with_busy(src, out, busy: float | None):
    """The records with gpu_busy_fraction set (their rounds and power unchanged)."""
    return _records_with(src, out, pl.lit(busy, pl.Float64).alias("gpu_busy_fraction"))


def test_a_round_is_split_into_the_part_the_gpu_ran_and_the_part_it_waited(tmp_path, capsys):
    """ADR 0258: the same rounds at busy 0.9 and 0.6 — the busy part shrinks by a third, the idle part quadruples, and
    the round itself does not move; a side without the fraction leaves the split null and unprinted."""
    src = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"
    a = _with_busy(src, tmp_path / "a" / "cells", 0.9)
    b = _with_busy(src, tmp_path / "b" / "cells", 0.6)
    table = compare_evidence.compare_sources(a, b)
    assert table.height == 3 and table["round_shift"].to_list() == pytest.approx([0.0] * 3)
    baselines = pl.concat([packed.read_frame(f) for f in packed.tree_files(src)], how="diagonal_relaxed").filter(
        pl.col("role").is_in(["opening_baseline", "closing_baseline"])
    )
    base_steps = dict(baselines.group_by("campaign_id").agg(pl.col("round_time_ms").mean()).iter_rows())
    for r in table.iter_rows(named=True):
        assert (r["gpu_busy_a"], r["gpu_busy_b"]) == pytest.approx((0.9, 0.6))
        assert r["busy_ms_a"] == pytest.approx(0.9 * r["round_time_ms_a"])
        assert r["busy_ms_b"] == pytest.approx(0.6 * r["round_time_ms_b"])
        assert r["idle_ms_b"] == pytest.approx(4 * r["idle_ms_a"]) and r["busy_shift"] == pytest.approx(-1 / 3)
        assert r["busy_ms_a"] + r["idle_ms_a"] == pytest.approx(r["round_time_ms_a"])
        # the paired baselines' wait per step, from the same records: 0.1 and 0.4 of their mean step
        step = statistics.mean(base_steps[c] for c in r["campaigns_a"])
        assert r["baseline_idle_ms_a"] == pytest.approx(0.1 * step) and r["baseline_idle_ms_b"] == pytest.approx(0.4 * step)
    assert compare_evidence.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    first = table.sort("batch_size", "configured_L").row(0, named=True)
    assert (f"GPU busy 0.900 → 0.600 of the window: busy part of a round {first['busy_ms_a']:.2f} → "
            f"{first['busy_ms_b']:.2f} ms (-33.3%), idle part {first['idle_ms_a']:.2f} → {first['idle_ms_b']:.2f} ms; the "
            f"baseline step's idle part {first['baseline_idle_ms_a']:.2f} → {first['baseline_idle_ms_b']:.2f} ms") in out
    unmetered = compare_evidence.compare_sources(a, _with_busy(src, tmp_path / "c" / "cells", None))
    assert unmetered["busy_shift"].to_list() == [None] * 3 and unmetered["gpu_busy_b"].to_list() == [None] * 3
    assert "GPU busy" not in compare_evidence.to_text(unmetered, "A", "C")


def _with_temperature(src, out, point_c: float | None, baseline_c: float | None):
    """The records with each window's maximum temperature set, points and baselines apart."""
    return _records_with(src, out, pl.when(pl.col("role") == "point").then(pl.lit(point_c, pl.Float64))
                         .otherwise(pl.lit(baseline_c, pl.Float64)).alias("max_temperature_c"))


def test_the_windows_temperatures_are_said_beside_the_power_points_and_baselines_apart(tmp_path, capsys):
    """ADR 0083 addendum 3: each side's points' and baselines' mean window maximum temperature, printed under the power
    line; the verdict does not read them (the same records judge the same); a side without a meter prints nothing."""
    src = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"
    a = _with_temperature(src, tmp_path / "a" / "cells", 50.0, 48.0)
    b = _with_temperature(src, tmp_path / "b" / "cells", 56.0, 49.0)
    table = compare_evidence.compare_sources(a, b)
    assert table.height == 3 and all(table["reproduces"])
    assert table["max_temperature_c_a"].to_list() == [50.0] * 3 and table["max_temperature_c_b"].to_list() == [56.0] * 3
    assert table["baseline_max_temperature_c_a"].to_list() == [48.0] * 3
    assert table["baseline_max_temperature_c_b"].to_list() == [49.0] * 3
    assert compare_evidence.main([str(a), str(b)]) == 0
    assert capsys.readouterr().out.count("window maximum temperature 50 → 56 °C; its baselines' 48 → 49 °C") == 3
    unmetered = compare_evidence.compare_sources(a, _with_temperature(src, tmp_path / "c" / "cells", None, None))
    assert unmetered["max_temperature_c_b"].to_list() == [None] * 3
    assert "temperature" not in compare_evidence.to_text(unmetered, "A", "C")


def test_the_windows_mean_temperatures_are_said_where_both_sides_recorded_them(tmp_path, capsys):
    """ADR 0083 addendum 4: records from 2026-12-07h carry each window's mean temperature; compare-evidence gives each
    side's points' and baselines' mean of it and prints it under the maximum; a side whose records predate the column
    (only the maximum) leaves the mean columns null and prints the maximum's line alone."""
    src = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"

    def warm(out, point_c, baseline_c):
        return _records_with(_with_temperature(src, out.parent / "max" / "cells", point_c + 4, baseline_c + 4), out,
                             pl.when(pl.col("role") == "point").then(pl.lit(point_c, pl.Float64))
                             .otherwise(pl.lit(baseline_c, pl.Float64)).alias("mean_temperature_c"))

    a, b = warm(tmp_path / "a" / "cells", 46.25, 44.0), warm(tmp_path / "b" / "cells", 52.5, 45.0)
    table = compare_evidence.compare_sources(a, b)
    assert table.height == 3 and all(table["reproduces"])
    assert table["mean_temperature_c_a"].to_list() == [46.25] * 3 and table["mean_temperature_c_b"].to_list() == [52.5] * 3
    assert table["baseline_mean_temperature_c_a"].to_list() == [44.0] * 3
    assert table["baseline_mean_temperature_c_b"].to_list() == [45.0] * 3
    assert table["max_temperature_c_a"].to_list() == [50.25] * 3  # the maximum stays its own column
    assert compare_evidence.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.count("window mean temperature 46.2 → 52.5 °C; its baselines' 44.0 → 45.0 °C") == 3
    assert out.count("window maximum temperature 50 → 56 °C") == 3
    older = compare_evidence.compare_sources(a, _with_temperature(src, tmp_path / "c" / "cells", 56.0, 49.0))
    assert older["mean_temperature_c_b"].to_list() == [None] * 3 and older["mean_temperature_c_a"].to_list() == [46.25] * 3
    text = compare_evidence.to_text(older, "A", "C")
    assert "window mean temperature" not in text and "window maximum temperature" in text


def test_records_that_predate_the_host_columns_leave_them_null_and_say_so(tmp_path):
    src = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"
    b = _with_host(src, tmp_path / "b" / "cells", "GenuineIntel, family/model/stepping 6/207/2", 6.0)
    table = compare_evidence.compare_sources(src, b)
    assert table.height == 3 and all(table["comparable"])
    assert table["host_speed_a"].to_list() == [None] * 3 and table["host_speed_ratio"].to_list() == [None] * 3
    for diffs in table["differences"].to_list():
        assert "not recorded by A (a field its records predate): host CPU signature" in diffs
        assert not any(d.startswith("host CPU:") for d in diffs)
    same = compare_evidence.compare_sources(src, src)
    assert same["host_speed_ratio"].to_list() == [None] * 3
    assert not any("host CPU" in d for diffs in same["differences"].to_list() for d in diffs)


def test_a_reported_field_one_side_predates_is_said_not_printed_as_none(tmp_path):
    src = EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells"
    a = tmp_path / "a" / "cells"
    for f in packed.tree_files(src):
        df = packed.read_frame(f).with_columns(pl.lit(None, pl.String).alias("cuda_version"))
        (a / f.parent.name).mkdir(parents=True, exist_ok=True)
        df.write_parquet(a / f.parent.name / f.name)
    table = compare_evidence.compare_sources(a, src)
    assert table.height == 3 and all(table["comparable"])
    for diffs in table["differences"].to_list():
        assert "not recorded by A (a field its records predate): cuda_version" in diffs
        assert not any(d.startswith("cuda_version:") or "None" in d for d in diffs), diffs
