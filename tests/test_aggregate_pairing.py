"""Pairing (ADR 0020, 0021, 0080) on small hand-built record frames, in memory: every number below is worked
out by hand from the rows written here. tests/test_analysis_aggregate.py does the same through written Parquet
files and the crafted grid; this file pins the arithmetic and the edge cases quickly enough to mutate."""

from __future__ import annotations

import polars as pl
import pytest

from specjoule import records
from specjoule.analysis import AnalysisError, aggregate

OPEN, CLOSE, POINT = "opening_baseline", "closing_baseline", "point"


def rec(cell: str, role: str, idx: int, **kw) -> dict:
    base = dict(campaign_id="c1", cell_name=cell, role=role, run_order_index=idx, engine="vllm", model_pair="p",
                batch_size=8, corpus="code", seed=0, cuda_graphs=True, workload="closed", gpu_uuid="GPU-a",
                hostname="n1", window_s=20.0, committed_tokens=1000, mj_per_committed_token=10.0, tpot_mean_s=0.010,
                tokens_per_s=50.0, mean_running_requests=8.0, round_time_ms=10.0, status="measured", window_index=0)
    return base | kw


def frame(*rows: dict) -> pl.DataFrame:
    df = pl.from_arrow(records.to_table(list(rows)))
    return df.with_columns(pl.format("results/cells/{}/{}.parquet", "campaign_id", "cell_name").alias("record_path"))


def pair(*rows: dict) -> dict[tuple[str, str], dict]:
    out = aggregate.aggregate_frame(frame(*rows))
    return {(r["campaign_id"], r["cell_name"]): r for r in out.iter_rows(named=True)}


CAMPAIGN = (
    rec("baseline--open", OPEN, 0),
    rec("draft", POINT, 1, mj_per_committed_token=6.0, tpot_mean_s=0.02, round_time_ms=30.0),
    rec("baseline--close", CLOSE, 2, mj_per_committed_token=14.0, tpot_mean_s=0.014, tokens_per_s=70.0,
        mean_running_requests=7.0, round_time_ms=12.0, window_s=25.0),
)


def test_a_point_gets_each_baseline_and_their_mean():
    p = pair(*CAMPAIGN)[("c1", "draft")]
    assert (p["opening_cell_name"], p["closing_cell_name"]) == ("baseline--open", "baseline--close")
    assert (p["opening_mj_per_committed_token"], p["closing_mj_per_committed_token"]) == (10.0, 14.0)
    assert p["baseline_mj_per_committed_token"] == 12.0 and p["mj_per_committed_token"] == 6.0
    assert p["baseline_tpot_mean_s"] == pytest.approx(0.012)
    assert (p["baseline_tokens_per_s"], p["baseline_mean_running_requests"], p["baseline_round_time_ms"]) == (
        60.0, 7.5, 11.0)
    # seconds per committed token: 20 s / 1000 opening, 25 s / 1000 closing
    assert p["s_per_committed_token"] == 0.02 and p["closing_s_per_committed_token"] == 0.025
    assert p["baseline_s_per_committed_token"] == 0.0225
    assert (p["opening_n"], p["closing_n"], p["baseline_n"]) == (1, 1, 2)
    assert p["opening_cell_names"] == ["baseline--open"] and p["closing_cell_names"] == ["baseline--close"]
    assert p["device_key"] == p["opening_device_key"] == p["closing_device_key"] == "GPU-a"
    assert p["pair_cross_gpu"] is False


def test_output_columns_and_order():
    rows = [rec("b", POINT, 1, campaign_id="c2"), rec("baseline--open", OPEN, 0, campaign_id="c2"), *CAMPAIGN[::-1]]
    out = aggregate.aggregate_frame(frame(*rows))
    assert out.columns == [*aggregate.RECORD_POLARS_SCHEMA.names(), *aggregate.PAIRING_COLUMNS, *aggregate.TIMELINE_COLUMNS]
    assert list(zip(out["campaign_id"], out["cell_name"])) == [
        ("c1", "baseline--open"), ("c1", "draft"), ("c1", "baseline--close"), ("c2", "baseline--open"), ("c2", "b")]
    # Records without a run order (written by hand, or before it was recorded) sort by name within it.
    tied = aggregate.aggregate_frame(frame(rec("zeta", POINT, None), rec("alpha", POINT, None)))
    assert tied["cell_name"].to_list() == ["alpha", "zeta"]


def test_a_metric_missing_on_one_side_gives_no_baseline_value():
    closing = rec("baseline--close", CLOSE, 2, tpot_mean_s=None)
    p = pair(CAMPAIGN[0], CAMPAIGN[1], closing)[("c1", "draft")]
    assert p["baseline_tpot_mean_s"] is None and p["opening_tpot_mean_s"] == 0.010  # not the one-sided 0.010
    assert p["baseline_mj_per_committed_token"] == 10.0  # the other metrics still pair


def test_without_a_closing_baseline_the_opening_is_the_baseline():
    p = pair(*CAMPAIGN[:2])[("c1", "draft")]
    assert p["closing_cell_name"] is None and p["closing_cell_names"] is None
    assert p["baseline_mj_per_committed_token"] == 10.0 and p["baseline_tpot_mean_s"] == 0.010
    assert (p["opening_n"], p["closing_n"], p["baseline_n"]) == (1, 0, 1) and p["pair_cross_gpu"] is False


@pytest.mark.parametrize("key, value", [("batch_size", 16), ("engine", "sglang"), ("model_pair", "q"),
                                        ("corpus", "chat"), ("seed", 1), ("cuda_graphs", False),
                                        ("workload", "open")])
def test_a_point_that_differs_in_any_pairing_key_is_left_unpaired(key, value):
    p = pair(CAMPAIGN[0], rec("draft", POINT, 1, **{key: value}), CAMPAIGN[2])[("c1", "draft")]
    assert p["opening_cell_name"] is None and p["baseline_mj_per_committed_token"] is None
    assert (p["opening_n"], p["closing_n"], p["baseline_n"]) == (0, 0, 0)


def test_device_is_the_gpu_or_else_the_host():
    out = pair(rec("baseline--open", OPEN, 0, gpu_uuid=None), rec("draft", POINT, 1, gpu_uuid=""),
               rec("baseline--close", CLOSE, 2, gpu_uuid=None, hostname="n2"))
    assert out[("c1", "baseline--open")]["device_key"] == "host:n1"
    assert out[("c1", "draft")]["device_key"] == "host:n1"  # an empty UUID is no UUID
    assert out[("c1", "draft")]["pair_cross_gpu"] is True  # its closing baseline ran on host n2
    assert out[("c1", "draft")]["closing_device_key"] == "host:n2"
    assert pair(rec("x", OPEN, 0, gpu_uuid="7"))[("c1", "x")]["device_key"] == "7"  # any non-empty UUID is one
    # A cell on several GPUs (tensor parallel): the same set of GPUs is the same device, in whatever order listed
    tp = pair(rec("baseline--open", OPEN, 0, gpu_uuid="GPU-b,GPU-a"), rec("draft", POINT, 1, gpu_uuid="GPU-a,GPU-b"))
    assert tp[("c1", "draft")]["device_key"] == "GPU-a,GPU-b" and tp[("c1", "draft")]["pair_cross_gpu"] is False


def test_a_pair_across_gpus_is_marked_on_either_side():
    point_elsewhere = pair(CAMPAIGN[0], rec("draft", POINT, 1, gpu_uuid="GPU-b"), CAMPAIGN[2])
    assert point_elsewhere[("c1", "draft")]["pair_cross_gpu"] is True
    assert point_elsewhere[("c1", "baseline--open")]["pair_cross_gpu"] is False
    closing_elsewhere = pair(*CAMPAIGN[:2], rec("baseline--close", CLOSE, 2, gpu_uuid="GPU-b"))
    assert closing_elsewhere[("c1", "draft")]["pair_cross_gpu"] is True
    assert closing_elsewhere[("c1", "baseline--open")]["pair_cross_gpu"] is True  # its closing twin too


def test_windows_of_a_side_are_averaged_and_named_in_window_order():
    rows = (rec("baseline--open--w1", OPEN, 1, window_index=1, mj_per_committed_token=12.0),
            rec("baseline--open", OPEN, 0, mj_per_committed_token=10.0),
            rec("draft", POINT, 2, mj_per_committed_token=6.0),
            rec("baseline--close", CLOSE, 3, mj_per_committed_token=14.0),
            rec("baseline--close--w1", CLOSE, 4, window_index=1, mj_per_committed_token=16.0))
    p = pair(*rows)[("c1", "draft")]
    assert (p["opening_mj_per_committed_token"], p["closing_mj_per_committed_token"]) == (11.0, 15.0)
    assert p["baseline_mj_per_committed_token"] == 13.0  # the mean of the two side means
    assert p["opening_cell_name"] == "baseline--open"  # the first window's name
    assert p["opening_cell_names"] == ["baseline--open", "baseline--open--w1"]
    assert (p["opening_n"], p["closing_n"], p["baseline_n"]) == (2, 2, 4)


def test_windows_are_ordered_by_index_not_by_name():
    # w10 sorts before w2 as text; the side lists its windows by index and names the first window's cell
    rows = [rec(f"baseline--open--w{w}" if w else "baseline--open", OPEN, w, window_index=w,
                mj_per_committed_token=float(w)) for w in range(11)]
    p = pair(*rows, rec("draft", POINT, 11))[("c1", "draft")]
    assert p["opening_cell_names"] == ["baseline--open", *(f"baseline--open--w{w}" for w in range(1, 11))]
    assert p["opening_cell_name"] == "baseline--open" and p["opening_mj_per_committed_token"] == 5.0
    late_first = [rec("baseline--open--w1", OPEN, 0, window_index=1), rec("a-first-by-name", OPEN, 1, window_index=0)]
    assert pair(*late_first, rec("draft", POINT, 2))[("c1", "draft")]["opening_cell_name"] == "a-first-by-name"


def test_records_with_a_null_pairing_key_still_pair_with_each_other():
    # e.g. records written before a key existed: null on every arm is the same campaign, not a mismatch
    rows = [dict(r, corpus=None, cuda_graphs=None) for r in CAMPAIGN]
    p = pair(*rows)[("c1", "draft")]
    assert p["baseline_mj_per_committed_token"] == 12.0 and p["baseline_n"] == 2


def test_a_window_missing_a_metric_leaves_its_side_without_one():
    rows = (rec("baseline--open", OPEN, 0), rec("baseline--open--w1", OPEN, 1, window_index=1, tpot_mean_s=None),
            rec("draft", POINT, 2))
    p = pair(*rows)[("c1", "draft")]
    assert p["opening_tpot_mean_s"] is None and p["baseline_tpot_mean_s"] is None
    assert p["opening_mj_per_committed_token"] == 10.0


def test_windows_of_a_side_on_two_gpus_mark_every_pair_built_on_it():
    rows = (rec("baseline--open", OPEN, 0), rec("baseline--open--w1", OPEN, 1, window_index=1, gpu_uuid="GPU-b"),
            rec("draft", POINT, 2))
    p = pair(*rows)[("c1", "draft")]
    assert p["opening_device_key"] == "mixed:GPU-a,GPU-b" and p["pair_cross_gpu"] is True


def test_unsupported_records_are_kept_but_neither_paired_nor_a_baseline():
    refused = dict(status="unsupported", unsupported_reason="not supported", mj_per_committed_token=None,
                   window_s=None, committed_tokens=None, tpot_mean_s=None)
    out = pair(CAMPAIGN[0], rec("draft", POINT, 1, **refused), rec("baseline--close", CLOSE, 2, **refused),
               rec("ngram", POINT, 3))
    d = out[("c1", "draft")]
    assert d["status"] == "unsupported" and d["device_key"] == "GPU-a"
    assert d["record_path"] == "results/cells/c1/draft.parquet"  # its own columns stay
    assert all(d[c] is None for c in ("opening_cell_name", "baseline_mj_per_committed_token", "baseline_n",
                                      "pair_cross_gpu", "opening_n"))
    n = out[("c1", "ngram")]  # the unsupported closing baseline is not a baseline
    assert n["closing_cell_name"] is None and n["baseline_mj_per_committed_token"] == 10.0 and n["baseline_n"] == 1


def test_two_records_of_one_side_and_window_are_an_error():
    with pytest.raises(AnalysisError, match=r"^campaign c1 has 2 opening_baseline records for window 0 "
                                            r"\(baseline--open, baseline--open-again\); a side holds one record"):
        aggregate.aggregate_frame(frame(CAMPAIGN[0], rec("baseline--open-again", OPEN, 1)))
    two_campaigns = [rec(n, OPEN, i, campaign_id=c) for c in ("c1", "c2") for i, n in enumerate(("o1", "o2"))]
    with pytest.raises(AnalysisError, match=r"^campaign c[12] has 2 opening_baseline records for window 0"):
        aggregate.aggregate_frame(frame(*two_campaigns))
    # An unsupported twin is not a second measurement.
    aggregate.aggregate_frame(frame(CAMPAIGN[0], rec("baseline--open-again", OPEN, 1, status="unsupported",
                                                     unsupported_reason="no", mj_per_committed_token=None,
                                                     window_s=None, committed_tokens=None)))


def test_malformed_records_are_refused_by_name():
    df = frame(*CAMPAIGN)
    path = "results/cells/c1/draft.parquet"
    with pytest.raises(AnalysisError, match=rf"^record_version 2 in {path} \(1 record\(s\)\); this reader knows 1$"):
        aggregate.aggregate_frame(df.with_columns(pl.when(pl.col("cell_name") == "draft").then(2)
                                                  .otherwise(pl.col("record_version")).cast(pl.Int32)
                                                  .alias("record_version")))
    for col in ("campaign_id", "cell_name", "role"):
        bad = df.with_columns(pl.when(pl.col("record_path") == path).then(None).otherwise(pl.col(col)).alias(col))
        with pytest.raises(AnalysisError, match=rf"^{col} is null in {path}$"):
            aggregate.aggregate_frame(bad)
    with pytest.raises(AnalysisError, match=rf"^role = 'pointy' in {path}; known: opening_baseline, point, "
                                            r"closing_baseline$"):
        aggregate.aggregate_frame(df.with_columns(pl.when(pl.col("cell_name") == "draft").then(pl.lit("pointy"))
                                                  .otherwise(pl.col("role")).alias("role")))
    twice = pl.concat([df, df.filter(pl.col("cell_name") == "draft").with_columns(pl.lit("elsewhere/draft.parquet")
                                                                                  .alias("record_path"))])
    with pytest.raises(AnalysisError, match=rf"^cell c1/draft has 2 records: elsewhere/draft.parquet, {path}$"):
        aggregate.aggregate_frame(twice)
    both = pl.concat([df, df.with_columns((pl.lit("copy/") + pl.col("record_path")).alias("record_path"))])  # all twice
    with pytest.raises(AnalysisError, match=r"^cell c1/\S+ has 2 records: "):  # several duplicated: one is named
        aggregate.aggregate_frame(both)


def test_sglang_latency_from_decode_throughput_is_nulled_with_the_reason():
    rows = (rec("baseline--open", OPEN, 0, engine="sglang", latency_source="request_metrics", ttft_mean_s=0.5,
                tpot_p99_s=1e-8),
            rec("draft", POINT, 1, engine="sglang", latency_source="request_timestamps"),
            rec("baseline--close", CLOSE, 2, engine="sglang", latency_source=None))
    logged: list[str] = []
    out = aggregate.aggregate_frame(frame(*rows), logged.append)
    by = {r["cell_name"]: r for r in out.iter_rows(named=True)}
    bad = by["baseline--open"]
    assert all(bad[c] is None for c in aggregate.LATENCY_COLUMNS)
    assert bad["latency_source"] == "request_metrics (nulled: SGLang decode_throughput, ADR 0016)"
    assert by["draft"]["tpot_mean_s"] == 0.010 and by["draft"]["latency_source"] == "request_timestamps"
    assert by["baseline--close"]["tpot_mean_s"] == 0.010 and by["baseline--close"]["latency_source"] is None
    assert logged == ["1 SGLang record(s) with latency_source request_metrics: TTFT/TPOT nulled (ADR 0016)"]
    vllm = aggregate.aggregate_frame(frame(rec("x", OPEN, 0, latency_source="request_metrics")), logged.append)
    assert vllm["tpot_mean_s"].to_list() == [0.010] and len(logged) == 1


def test_window_index_of_records_written_before_the_column():
    old = pl.DataFrame({"x": [1, 2]})
    assert old.with_columns(aggregate.window_index_expr(old))["_window"].to_list() == [0, 0]
    df = pl.DataFrame({"window_index": [None, 2]}, schema={"window_index": pl.Int64})
    assert df.select(aggregate.window_index_expr(df))["_window"].to_list() == [0, 2]
