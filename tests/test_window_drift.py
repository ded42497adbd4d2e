"""GPU activity over the thirds of a window, its drift, and the pre-registered window_drift check (ADR 0227).

Synthetic timelines are written in the runner's timeline schema (records.TIMELINE_SCHEMA) and read by the
analysis as it reads committed ones; the expected thirds and drifts are worked out by hand in each case. The
committed 2026-12-03c evidence holds the one window that prompted the check (README of that session, section
"Within the window, the slowdown grew").
"""

from __future__ import annotations

import copy
from pathlib import Path

import analysis_records as ar
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from specjoule import config, records
from specjoule.analysis import aggregate, checks, packed
from specjoule.analysis import window_activity as wa

ROOT = Path(__file__).resolve().parents[1]
GDN_PINNED_1203C = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03c" / "gdn-pinned"
DFLASH_CAMPAIGN = "vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1"


def timeline(series: dict[int, list[float | None]], *, signal: str = "sm_active_pct", hz: float = 10.0,
             before: int = 0, after: int = 0) -> pa.Table:
    """A timeline of the given in-window samples per GPU (rows interleaved by time, as the meter writes them),
    with ``before``/``after`` samples outside the window at 99 %, which no window quantity may see."""
    cols: dict[str, list] = {name: [] for name in records.TIMELINE_SCHEMA.names}
    for gpu, values in series.items():
        outside = [(False, 99.0)] * before + [(True, v) for v in values] + [(False, 99.0)] * after
        for i, (inside, v) in enumerate(outside):
            t = (i + 0.5 * gpu / len(series)) / hz
            row = dict.fromkeys(records.TIMELINE_SCHEMA.names) | {
                "t_monotonic": 1000.0 + t, "t_rel_s": t, "gpu_index": gpu, "gpu_uuid": f"GPU-{gpu}", "in_window": inside,
                "gpu_util_pct": 77.0 if signal == "sm_active_pct" else v,
            }
            if signal == "sm_active_pct":
                row["sm_active_pct"] = v
            for k, x in row.items():
                cols[k].append(x)
    table = pa.table(cols, schema=records.TIMELINE_SCHEMA)
    order = pc.sort_indices(table, [("t_monotonic", "ascending")])
    return table.take(order)


def activity_of(tmp_path: Path, table: pa.Table) -> dict:
    path = tmp_path / "cells" / "c" / "x.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    records.write_atomic(table, path)
    rows = wa.of_timelines([path]).to_dicts()
    assert len(rows) == 1
    return rows[0]


# --------------------------------------------------------------------------------------------- the column


def test_a_steady_window_has_no_drift(tmp_path):
    # 60 samples alternating 39 / 41: each third holds 10 of each, so every third's mean is 40.
    a = activity_of(tmp_path, timeline({0: [39.0, 41.0] * 30}, before=5, after=5))
    assert a["window_activity_signal"] == "sm_active_pct" and a["window_activity_samples"] == 60
    assert (a["window_activity_first_third"], a["window_activity_middle_third"], a["window_activity_last_third"]) \
        == pytest.approx((40.0, 40.0, 40.0))
    assert a["window_activity_mean"] == pytest.approx(40.0) and a["window_activity_drift"] == pytest.approx(0.0)


def test_a_step_down_at_mid_window_gives_the_drift_worked_out_by_hand(tmp_path):
    # 30 samples at 50 % then 30 at 20 %; n = 60, a third = 20 samples: first 20 × 50 = 50; middle 10 × 50 +
    # 10 × 20 = 35; last 20 × 20 = 20; window mean (30 × 50 + 30 × 20) / 60 = 35; drift (20 - 50) / 35.
    a = activity_of(tmp_path, timeline({0: [50.0] * 30 + [20.0] * 30}, before=3, after=3))
    assert (a["window_activity_first_third"], a["window_activity_middle_third"], a["window_activity_last_third"]) \
        == pytest.approx((50.0, 35.0, 20.0))
    assert a["window_activity_drift"] == pytest.approx(-30.0 / 35.0)


def test_thirds_of_a_count_not_divisible_by_three_leave_the_remainder_in_the_middle(tmp_path):
    # n = 31, a third = 10: first 10 samples, last 10, the 11 between are the middle.
    values = [10.0] * 10 + [30.0] * 11 + [20.0] * 10
    a = activity_of(tmp_path, timeline({0: values}))
    assert (a["window_activity_first_third"], a["window_activity_middle_third"], a["window_activity_last_third"]) \
        == pytest.approx((10.0, 30.0, 20.0))
    assert a["window_activity_drift"] == pytest.approx((20.0 - 10.0) / (sum(values) / 31))


def test_too_few_samples_give_null_never_zero(tmp_path):
    short = activity_of(tmp_path, timeline({0: [50.0] * 15 + [20.0] * 14}))  # 29 < MIN_SAMPLES
    assert wa.MIN_SAMPLES == 30 and short["window_activity_samples"] == 29
    assert short["window_activity_drift"] is None and short["window_activity_first_third"] is None
    enough = activity_of(tmp_path, timeline({0: [50.0] * 15 + [20.0] * 15}))  # 30: a third = 10 samples
    assert enough["window_activity_drift"] == pytest.approx((20.0 - 50.0) / 35.0)


def test_an_idle_window_and_an_empty_timeline_give_null(tmp_path):
    idle = activity_of(tmp_path, timeline({0: [0.2] * 30 + [0.9] * 30}))  # mean 0.55 % < MIN_MEAN_PCT
    assert idle["window_activity_mean"] == pytest.approx(0.55) and idle["window_activity_drift"] is None
    empty = activity_of(tmp_path, records.TIMELINE_SCHEMA.empty_table())  # what meter none writes
    assert set(empty.values()) == {None, empty["timeline_path"]}


def test_nvml_utilization_is_the_signal_where_the_gpu_reports_no_sm_activity(tmp_path):
    a = activity_of(tmp_path, timeline({0: [60.0] * 30 + [30.0] * 30}, signal="gpu_util_pct"))
    assert a["window_activity_signal"] == "gpu_util_pct"
    assert a["window_activity_drift"] == pytest.approx((30.0 - 60.0) / 45.0)
    # …and SM activity wins where it exists (the fixture then holds gpu_util_pct at a constant 77 %).
    b = activity_of(tmp_path, timeline({0: [60.0] * 30 + [30.0] * 30}))
    assert b["window_activity_signal"] == "sm_active_pct" and b["window_activity_mean"] == pytest.approx(45.0)


def test_a_tensor_parallel_window_takes_each_gpus_thirds_then_their_mean(tmp_path):
    # GPU 0 steps 50 → 20 (thirds 50 / 35 / 20), GPU 1 holds 40; 60 samples each, interleaved in time.
    a = activity_of(tmp_path, timeline({0: [50.0] * 30 + [20.0] * 30, 1: [40.0] * 60}))
    assert a["window_activity_samples"] == 60
    assert (a["window_activity_first_third"], a["window_activity_last_third"]) == pytest.approx((45.0, 30.0))
    assert a["window_activity_drift"] == pytest.approx((30.0 - 45.0) / ((35.0 + 40.0) / 2))


def test_aggregate_carries_the_columns_from_the_timeline_beside_each_record(tmp_path):
    paths = ar.write_campaigns(tmp_path)
    stepped = tmp_path / "results" / "timelines" / ar.CLOSED / "syn--L4.parquet"
    records.write_atomic(timeline({0: [50.0] * 30 + [20.0] * 30}), stepped)
    steady = tmp_path / "results" / "timelines" / ar.CLOSED / "baseline--open.parquet"
    records.write_atomic(timeline({0: [40.0] * 60}), steady)
    assert wa.timeline_of(tmp_path / "results" / "cells" / ar.CLOSED / "syn--L4.parquet") == stepped
    df = aggregate.aggregate(paths)
    assert df.columns[-len(aggregate.TIMELINE_COLUMNS):] == list(wa.ACTIVITY_COLUMNS)
    drift = dict(df.filter(pl.col("campaign_id") == ar.CLOSED).select("cell_name", "window_activity_drift").iter_rows())
    assert drift.pop("syn--L4") == pytest.approx(-30.0 / 35.0) and drift.pop("baseline--open") == 0.0
    assert set(drift.values()) == {None}  # no timeline beside these records
    # The record cache keeps the columns (ADR 0028): a second read from it gives the same table.
    cache = tmp_path / "cache.parquet"
    assert aggregate.aggregate(paths, cache=cache).equals(df)  # every record read from disk, cache written
    assert aggregate.aggregate(paths, cache=cache).equals(df)  # every record from the cache


def test_every_activity_column_is_documented():
    assert wa.ACTIVITY_COLUMNS == tuple(wa.ACTIVITY_SCHEMA) and all(wa.ACTIVITY_DOCS[c] for c in wa.ACTIVITY_COLUMNS)
    assert "null" in wa.ACTIVITY_DOCS["window_activity_drift"].lower()


# --------------------------------------------------------------------------------------------- the check

TH = checks.Thresholds.from_config({})


def _judge(drifts: dict[str, float | None], th: checks.Thresholds) -> dict:
    """window_drift's row for the closed campaign, its cells given these drifts (the rest a steady 0)."""
    df = aggregate.aggregate_frame(ar.frame_campaigns())
    df = df.with_columns(pl.lit("sm_active_pct").alias("window_activity_signal"),
                         pl.lit(90).alias("window_activity_samples"),
                         pl.lit(40.0).alias("window_activity_mean"),
                         pl.lit(0.0).alias("window_activity_drift"))
    for cell, d in drifts.items():
        at = (pl.col("campaign_id") == ar.CLOSED) & (pl.col("cell_name") == cell)
        thirds = (None, None, None) if d is None else (40.0 - 20.0 * d, 40.0, 40.0 + 20.0 * d)
        df = df.with_columns(pl.when(at).then(pl.lit(v, pl.Float64)).otherwise(pl.col(c)).alias(c) for c, v in (
            ("window_activity_drift", d), ("window_activity_first_third", thirds[0]),
            ("window_activity_middle_third", thirds[1]), ("window_activity_last_third", thirds[2])))
    rows = checks.run_checks(df, th, ar.CONFIG_HASH, only=["window_drift"]).filter(
        pl.col("campaign_id") == ar.CLOSED).to_dicts()
    assert len(rows) == 1
    return rows[0]


def test_unset_the_check_is_not_applicable_whatever_the_drift():
    assert TH.window_drift_max is None
    row = _judge({"syn--L4": -0.9}, TH)
    assert (row["status"], row["detail"], row["threshold"]) == (checks.NA, "no window_drift_max pre-registered", None)


def test_set_it_passes_at_the_threshold_and_flags_past_it_naming_cell_thirds_and_value():
    th = checks.Thresholds.from_config({"window_drift_max": 0.5})
    assert _judge({"syn--L4": -0.5, "ngram": 0.25}, th)["status"] == checks.PASS  # "at most": 0.5 passes
    row = _judge({"syn--L4": -0.625, "ngram": 0.25}, th)
    assert (row["status"], row["cell_names"], row["value"], row["threshold"]) == (checks.FLAG, ["syn--L4"], 0.625, 0.5)
    # thirds 40 ∓ 20 × drift: 52.5 / 40.0 / 27.5
    assert row["detail"] == ("syn--L4: sm_active_pct over the window's thirds 52.5 / 40.0 / 27.5 %, drift -0.625 of "
                             "the window mean 40.0 %")
    up = _judge({"ngram": 0.75}, th)  # a window that gained activity moved as much
    assert up["status"] == checks.FLAG and up["cell_names"] == ["ngram"]


def test_set_it_a_window_without_a_drift_is_not_applicable_and_says_why():
    th = checks.Thresholds.from_config({"window_drift_max": 0.5})
    df = aggregate.aggregate_frame(ar.frame_campaigns())  # no timelines read: every activity column null
    rows = checks.run_checks(df, th, ar.CONFIG_HASH, only=["window_drift"])
    assert set(rows["status"]) == {checks.NA}
    assert set(rows["detail"]) == {"no in-window timeline samples (no timeline beside the record, or meter none)"}
    few = df.with_columns(pl.lit("gpu_util_pct").alias("window_activity_signal"), pl.lit(12).alias("window_activity_samples"))
    row = checks.run_checks(few, th, only=["window_drift"]).row(0, named=True)
    assert (row["status"], row["detail"]) == (checks.NA, "fewer than 30 in-window samples of gpu_util_pct: no drift")
    idle = few.with_columns(pl.lit(300).alias("window_activity_samples"), pl.lit(0.4).alias("window_activity_mean"))
    row = checks.run_checks(idle, th, only=["window_drift"]).row(0, named=True)
    assert (row["status"], row["detail"]) == (
        checks.NA, "gpu_util_pct below 1 % over the window: an idle GPU has no relative drift")


def test_the_threshold_is_preregistered_without_a_default_and_bad_values_are_config_errors():
    props = config._schema()["properties"]["checks"]["properties"]
    assert "window_drift_max" in props and "default" not in props["window_drift_max"]
    demo = config.read_yaml(ROOT / "config" / "config.yaml")
    assert "window_drift_max" not in config.validate(copy.deepcopy(demo))["checks"]  # hash of every config as it was
    for bad in (-0.1, 0, "0.3", True):
        raw = copy.deepcopy(demo)
        raw["checks"]["window_drift_max"] = bad
        with pytest.raises(config.ConfigError) as info:
            config.plan(raw)
        assert str(info.value).startswith(f"config error at checks.window_drift_max = {bad!r}:"), str(info.value)
    raw = copy.deepcopy(demo)
    raw["checks"]["window_drift_max"] = 0.3
    assert checks.Thresholds.from_config(config.validate(raw)["checks"]).window_drift_max == 0.3


# --------------------------------------------------------------------------------------------- committed evidence


def test_on_the_committed_1203c_evidence_a_preregistered_half_flags_exactly_the_dflash_window():
    paths = packed.tree_files(GDN_PINNED_1203C / "results" / "cells", "*/*.parquet")
    cfg = config.load(GDN_PINNED_1203C / "h200-schemes-gdn-pinned.yaml")
    assert "window_drift_max" not in cfg["checks"]
    df = aggregate.aggregate(paths)
    dflash = df.filter((pl.col("campaign_id") == DFLASH_CAMPAIGN) & (pl.col("cell_name") == "dflash--mv1")).row(
        0, named=True)
    # The README's thirds of this window, and its drift as tests/test_h200_evidence.py computes it.
    thirds = (dflash["window_activity_first_third"], dflash["window_activity_middle_third"],
              dflash["window_activity_last_third"])
    assert [round(t, 1) for t in thirds] == [43.0, 35.8, 22.4]
    assert round(dflash["window_activity_drift"], 2) == -0.61

    unset = checks.run_checks(df, checks.Thresholds.from_config(cfg["checks"], cfg["report"]), only=["window_drift"])
    assert set(unset["status"]) == {checks.NA}
    th = checks.Thresholds.from_config({**cfg["checks"], "window_drift_max": 0.5}, cfg["report"])
    judged = checks.run_checks(df, th, only=["window_drift"])
    flagged = judged.filter(pl.col("status") == checks.FLAG)
    assert [(r["campaign_id"], r["cell_names"]) for r in flagged.iter_rows(named=True)] == [
        (DFLASH_CAMPAIGN, ["dflash--mv1"])]
    assert "dflash--mv1: sm_active_pct over the window's thirds 43.0 / 35.8 / 22.4 %, drift -0.609" in \
        flagged["detail"][0]
    assert set(judged.filter(pl.col("status") != checks.FLAG)["status"]) <= {checks.PASS, checks.NA}


def test_the_distribution_command_ranks_the_committed_windows(capsys):
    assert wa.main([str(ROOT / "validation" / "h200-2026-12")]) == 0
    out = capsys.readouterr().out
    first = out.split("largest |drift|:\n", 1)[1].splitlines()[0]
    assert first.strip().startswith("-0.609") and first.endswith(f"{DFLASH_CAMPAIGN}/dflash--mv1.parquet")
    assert wa.main([str(ROOT / "no-such-folder")]) == 2
