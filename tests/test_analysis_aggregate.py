"""aggregate: every record read against the record schema, each cell paired with its baselines."""

from __future__ import annotations

import analysis_records as ar
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specjoule import records
from specjoule.analysis import AnalysisError, aggregate, config_hash_of


def _row(df: pl.DataFrame, campaign: str, cell: str) -> dict:
    rows = df.filter((pl.col("campaign_id") == campaign) & (pl.col("cell_name") == cell)).to_dicts()
    assert len(rows) == 1
    return rows[0]


def test_pairs_every_cell_with_opening_and_closing(tmp_path):
    paths = ar.write_campaigns(tmp_path, mutate={
        (ar.CLOSED, "baseline--close"): lambda r: r.update(energy_j=r["energy_j"] * 1.1, tpot_mean_s=0.012)})
    df = aggregate.aggregate(paths)
    assert df.height == len(paths) == len(ar.cell_table())
    assert list(df.columns) == [*aggregate.RECORD_POLARS_SCHEMA.names(), *aggregate.PAIRING_COLUMNS, *aggregate.TIMELINE_COLUMNS]
    point = _row(df, ar.CLOSED, "syn--L2")
    opening = _row(df, ar.CLOSED, "baseline--open")
    closing = _row(df, ar.CLOSED, "baseline--close")
    assert (point["opening_cell_name"], point["closing_cell_name"], point["baseline_n"]) == ("baseline--open", "baseline--close", 2)
    # The baseline a point is compared with is the mean of opening and closing (ADR 0021).
    # Crafted: 300 W × 20 s over 5120 tokens = 1171.875 mJ per token opening, 10 % more closing (1289.0625).
    assert opening["mj_per_committed_token"] == pytest.approx(1171.875)
    assert closing["mj_per_committed_token"] == pytest.approx(1289.0625)
    assert point["baseline_mj_per_committed_token"] == pytest.approx(1230.46875)
    assert point["baseline_tpot_mean_s"] == pytest.approx(0.011)  # 0.010 s opening, 0.012 s closing
    assert point["s_per_committed_token"] == pytest.approx(0.00390625)  # 20 s / 5120 tokens
    assert not df["pair_cross_gpu"].any()
    assert df["record_path"].str.ends_with(".parquet").all()


def test_opening_only_campaign_uses_the_opening_baseline(tmp_path):
    paths = ar.write_campaigns(tmp_path, drop={(ar.OPEN, "baseline--close")})
    df = aggregate.aggregate(paths)
    point = _row(df, ar.OPEN, "ngram")
    assert point["closing_cell_name"] is None and point["baseline_n"] == 1
    assert point["baseline_mj_per_committed_token"] == point["opening_mj_per_committed_token"]


def test_pair_across_gpus_is_marked_not_dropped(tmp_path):
    paths = ar.write_campaigns(tmp_path, mutate={(ar.CLOSED, "ngram"): ar.setter(gpu_uuid="GPU-zzzz", gpu_uuids=["GPU-zzzz"])})
    df = aggregate.aggregate(paths)
    crossed = df.filter(pl.col("pair_cross_gpu"))
    assert crossed.select("campaign_id", "cell_name").rows() == [(ar.CLOSED, "ngram")]
    assert crossed["opening_cell_name"][0] == "baseline--open"


def test_pairing_key_mismatch_leaves_the_cell_unpaired(tmp_path):
    paths = ar.write_campaigns(tmp_path, mutate={(ar.CLOSED, "syn--L4"): ar.setter(corpus="other")})
    point = _row(aggregate.aggregate(paths), ar.CLOSED, "syn--L4")
    assert point["opening_cell_name"] is None and point["baseline_n"] == 0
    assert point["baseline_mj_per_committed_token"] is None


def test_older_record_without_an_appended_column_reads_as_null(tmp_path):
    paths = ar.write_campaigns(tmp_path)
    last = records.RECORD_COLUMNS[-1]
    old = pq.read_table(paths[0])
    pq.write_table(old.drop_columns([last, "latency_source"] if "latency_source" in old.column_names else [last]), paths[0])
    df = aggregate.aggregate(paths)
    assert df.height == len(paths)
    assert df.filter(pl.col("record_path") == str(paths[0]))[last][0] is None


def test_unknown_column_and_version_are_refused(tmp_path):
    paths = ar.write_campaigns(tmp_path)
    t = pq.read_table(paths[1])
    pq.write_table(t.append_column("mystery", pa.array([1.0])), paths[1])
    with pytest.raises(AnalysisError, match="mystery"):
        aggregate.aggregate(paths)
    pq.write_table(t.set_column(0, "record_version", pa.array([99], pa.int32())), paths[1])
    with pytest.raises(AnalysisError, match=f"record_version 99 in {paths[1]}"):
        aggregate.aggregate(paths)


def test_duplicate_cell_records_are_refused(tmp_path):
    paths = ar.write_campaigns(tmp_path)
    dup = tmp_path / "copy.parquet"
    dup.write_bytes(paths[0].read_bytes())
    with pytest.raises(AnalysisError, match="has 2 records"):
        aggregate.aggregate([*paths, dup])


def test_written_table_keeps_the_config_hash(tmp_path):
    df = aggregate.aggregate(ar.write_campaigns(tmp_path / "r"))
    out = tmp_path / "records.parquet"
    aggregate.write(df, out, "abc123")
    assert config_hash_of(out) == "abc123"
    assert pl.read_parquet(out).equals(df)


def test_no_records_gives_an_empty_table():
    df = aggregate.aggregate([])
    assert df.height == 0 and "baseline_mj_per_committed_token" in df.columns


def test_outputs_are_readable_like_any_written_file(tmp_path):
    import os
    import stat

    out = tmp_path / "records.parquet"
    aggregate.write(aggregate.aggregate([]), out, "h")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


def test_cache_reuses_unchanged_files_and_rereads_changed_ones(tmp_path):
    paths = ar.write_campaigns(tmp_path / "r")
    cache = tmp_path / "cache.parquet"
    msgs: list[str] = []
    cold = aggregate.aggregate(paths, cache=cache, log=msgs.append)
    assert msgs[-1] == f"0 record(s) from cache, {len(paths)} read from disk"
    assert cold.equals(aggregate.aggregate(paths))
    warm = aggregate.aggregate(paths, cache=cache, log=msgs.append)
    assert msgs[-1] == f"{len(paths)} record(s) from cache, 0 read from disk" and warm.equals(cold)
    # A record rewritten (atomically, as the runner does) is read again, and its new value used.
    changed = next(p for p in paths if p.name == "ngram.parquet")
    row = pq.read_table(changed).to_pylist()[0]
    row["max_temperature_c"] = 77.0
    records.write_record(row, changed)
    again = aggregate.aggregate(paths, cache=cache, log=msgs.append)
    assert msgs[-1] == f"{len(paths) - 1} record(s) from cache, 1 read from disk"
    assert _row(again, *changed.parts[-2:-1], "ngram")["max_temperature_c"] == 77.0
    # Dropped inputs leave the table; a cache of another schema is ignored, not trusted.
    fewer = aggregate.aggregate(paths[1:], cache=cache, log=msgs.append)
    assert fewer.height == len(paths) - 1
    pl.DataFrame({"x": [1]}).write_parquet(cache)
    assert aggregate.aggregate(paths, cache=cache, log=msgs.append).equals(again)
    assert "another schema" in msgs[-2]
