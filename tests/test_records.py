"""The record contract: null (never 0 or NaN) energy without a meter, atomic writes, versioning."""

import contextlib
import math
import os
import stat

import pyarrow as pa
import pytest

from specjoule import records


def row(**over):
    base = {"cell_id": "c", "campaign_id": "k", "cell_name": "n", "meter": "none", "committed_tokens": 128,
            "drafts": 10, "accepted_tokens": 25, "window_s": 2.0, "method": "draft_model"}
    return records.derive({**base, **over})


def test_derive_realized_length_and_null_energy_without_meter():
    r = row()
    assert r["realized_L"] == pytest.approx(3.5) and r["accepted_per_verification"] == pytest.approx(2.5)
    assert r["mj_per_committed_token"] is None and r["tokens_per_s"] == pytest.approx(64.0)
    assert records.to_table([r]).column("energy_j").null_count == 1


def test_energy_with_meter_none_is_refused():
    with pytest.raises(records.RecordError, match="energy must be null"):
        records.to_table([row(energy_j=0.0)])


def test_nan_and_zero_energy_are_refused():
    with pytest.raises(records.RecordError, match="NaN"):
        records.to_table([row(tpot_mean_s=math.nan)])
    with pytest.raises(records.RecordError, match="energy_j"):
        records.to_table([row(meter="nvml", energy_j=0.0)])


def test_mj_per_token_from_measured_energy():
    assert row(meter="nvml", energy_j=3.2)["mj_per_committed_token"] == pytest.approx(25.0)


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "cells" / "x.parquet"
    with pytest.raises(RuntimeError):
        with records.atomic_path(target) as tmp:
            open(tmp, "w").write("half a file")
            raise RuntimeError("cell died")
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_written_record_round_trips_with_shared_permissions(tmp_path):
    target = tmp_path / "r.parquet"
    records.write_record(row(), target)
    table = records.read_records([target])
    assert table.num_rows == 1 and table.column("record_version")[0].as_py() == records.RECORD_VERSION
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_unknown_record_version_is_refused(tmp_path):
    import pyarrow.parquet as pq

    table = records.to_table([row()]).replace_schema_metadata({"record_version": "999"})
    pq.write_table(table, tmp_path / "old.parquet")
    with pytest.raises(records.RecordError, match="record_version 999"):
        records.read_records([tmp_path / "old.parquet"])


def test_unknown_column_is_refused():
    with pytest.raises(records.RecordError, match="unknown record columns"):
        records.to_table([{**row(), "joules": 1.0}])
    assert isinstance(records.RECORD_SCHEMA, pa.Schema)


# ------------------------------------------------------------------------------------------------
# a write that fails partway (fault injection at the filesystem layer)

def _leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _measured_row(**over):
    return row(**{"meter": "nvml", "energy_j": 12.5, "cell_name": "m", **over})


@contextlib.contextmanager
def _file_size_limit(limit: int):
    """The kernel refuses writes past ``limit`` bytes (RLIMIT_FSIZE → EFBIG, SIGXFSZ ignored), then lets go."""
    import resource
    import signal

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


def test_a_record_write_cut_off_by_the_kernel_keeps_the_old_record_and_leaves_no_temp_file(tmp_path, monkeypatch):
    """The file system refuses the Parquet write partway: the temp file was there beside the target, the rename
    never happens, nothing is left behind and the record already there stays whole."""
    target = tmp_path / "cells" / "c.parquet"
    records.write_record(_measured_row(), target)
    old_bytes = target.read_bytes()
    temps: list[str] = []
    real_writer = records.pq.ParquetWriter

    def watch(where, schema, **kw):  # the real writer; only notes that the temp file exists before it opens
        assert os.path.exists(where) and os.path.dirname(where) == str(target.parent)
        temps.append(str(where))
        return real_writer(where, schema, **kw)

    monkeypatch.setattr(records.pq, "ParquetWriter", watch)
    renames: list[tuple] = []
    real_replace = os.replace
    monkeypatch.setattr(records.os, "replace", lambda a, b: (renames.append((a, b)), real_replace(a, b)))
    bigger = _measured_row(engine_config=os.urandom(20_000).hex())  # 40 kB that no codec shrinks
    with _file_size_limit(len(old_bytes) + 4096), pytest.raises(OSError):  # the old record fits, this one does not
        records.write_record(bigger, target)
    assert len(temps) == 1 and renames == [] and not os.path.exists(temps[0]) and _leftovers(target.parent) == []
    assert target.read_bytes() == old_bytes
    assert records.read_records([target]).column("energy_j").to_pylist() == [12.5]


def test_a_streamed_write_cut_off_by_the_kernel_is_removed_by_atomic_path(tmp_path):
    """A writer that does not clean up after itself (a plain stream, unlike pyarrow's write_table): the partial
    temp file is atomic_path's to remove."""
    target = tmp_path / "report.html"
    target.write_text("old report")
    partial: dict[str, int] = {}
    with _file_size_limit(10_000), pytest.raises(OSError):
        with records.atomic_path(target) as tmp:
            try:
                with open(tmp, "wb") as fh:
                    for _ in range(100):
                        fh.write(b"x" * 1000)
                        fh.flush()
            finally:
                partial[tmp] = os.path.getsize(tmp)
    (tmp, size), = partial.items()
    assert 0 < size <= 10_000 and not os.path.exists(tmp)
    assert target.read_text() == "old report" and _leftovers(tmp_path) == []


@pytest.mark.parametrize("failing", ["fsync", "chmod", "replace"])
def test_a_failure_after_the_data_is_written_leaves_nothing_behind(tmp_path, monkeypatch, failing):
    """fsync (a full disk shows up at flush), chmod or the rename itself fails: the whole temp file was there
    beside the target, the target is untouched, the temp file is gone and the error reaches the caller."""
    import errno

    target = tmp_path / "c.parquet"
    records.write_record(_measured_row(), target)
    old_bytes = target.read_bytes()
    temps: list[str] = []
    real = getattr(os, failing)

    def fail(first, *args, **kw):
        tmp = first if isinstance(first, str) else None
        if failing == "fsync":  # called with a descriptor: find the temp file beside the target
            tmp = str(next(p for p in target.parent.iterdir() if p.name.endswith(".tmp")))
        assert os.path.getsize(tmp) > 0 and os.path.dirname(tmp) == str(target.parent)
        temps.append(tmp)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.os, failing, fail)
    with pytest.raises(OSError, match="No space left"):
        records.write_record(_measured_row(energy_j=99.0), target)
    monkeypatch.setattr(records.os, failing, real)
    assert len(temps) == 1 and not os.path.exists(temps[0]) and _leftovers(tmp_path) == []
    assert target.read_bytes() == old_bytes


def test_an_interrupt_mid_write_is_cleaned_up_too(tmp_path):
    """KeyboardInterrupt / SystemExit (SIGINT, a SLURM job ending) are not Exceptions: still no temp file."""
    target = tmp_path / "c.parquet"
    with pytest.raises(KeyboardInterrupt):
        with records.atomic_path(target) as tmp:
            open(tmp, "wb").write(b"PAR1 half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------
# the derived columns, each worked out by hand from the counters

SPEC = {"method": "draft_model", "workload_kind": "closed_batch", "batch_size": 4, "committed_tokens": 1100,
        "drafts": 200, "accepted_tokens": 300, "draft_tokens": 880, "window_s": 4.0, "energy_j": 55.0}


def test_derive_a_speculative_point():
    d = records.derive(SPEC)
    assert d["mj_per_committed_token"] == 50.0  # 55 J = 55 000 mJ over 1100 tokens
    assert d["accepted_per_verification"] == 1.5 and d["realized_L"] == 2.5  # 300 accepted in 200 drafts
    assert d["verify_width"] == 5.4  # 1 bonus slot + 880 / 200 drafted per draft
    assert d["drafted_per_committed"] == 0.8 and d["tokens_per_s"] == 275.0 and d["mean_power_w"] == 13.75
    # 1100 − 300 = 800 request-steps of B = 4 → 200 engine steps in 4 s: 20 ms each
    assert d["round_time_ms"] == 20.0
    assert {k: SPEC[k] for k in SPEC} == {k: d[k] for k in SPEC}  # inputs untouched


def test_derive_a_baseline_and_a_point_that_never_drafted():
    base = records.derive({**SPEC, "method": "baseline", "drafts": None, "accepted_tokens": None,
                           "draft_tokens": None, "committed_tokens": 1000})
    assert base["realized_L"] == 1.0 and base["accepted_per_verification"] is None and base["verify_width"] is None
    assert base["drafted_per_committed"] is None
    assert base["round_time_ms"] == 16.0  # 1000 request-steps of B = 4 → 250 steps in 4 s: 16 ms each
    idle = records.derive({**SPEC, "method": "ngram", "drafts": 0, "accepted_tokens": 0, "draft_tokens": 0})
    assert idle["realized_L"] is None and idle["accepted_per_verification"] is None and idle["verify_width"] is None
    assert records.derive({**SPEC, "method": None, "drafts": None})["realized_L"] == 1.0  # older record: baseline
    no_acc = records.derive({**SPEC, "accepted_tokens": None})
    assert no_acc["realized_L"] is None and no_acc["accepted_per_verification"] is None
    assert no_acc["round_time_ms"] is None  # a point's accepted count is needed for its steps


def test_derive_without_energy_or_tokens_gives_nulls_never_zero():
    d = records.derive({**SPEC, "energy_j": None})
    assert d["mj_per_committed_token"] is None and "mean_power_w" not in d
    z = records.derive({**SPEC, "committed_tokens": 0, "accepted_tokens": 0, "draft_tokens": 0})
    assert z["mj_per_committed_token"] is None and z["drafted_per_committed"] is None
    assert z["tokens_per_s"] == 0.0 and z["round_time_ms"] is None
    assert records.derive({**SPEC, "window_s": None})["tokens_per_s"] is None
    assert records.derive({**SPEC, "committed_tokens": None})["tokens_per_s"] is None
    assert records.derive({**SPEC, "draft_tokens": None})["verify_width"] is None
    assert records.derive({**SPEC, "draft_tokens": None})["drafted_per_committed"] is None
    assert records.derive({**SPEC, "mean_power_w": 12.0})["mean_power_w"] == 12.0  # a measured value is kept
    assert "mean_power_w" not in records.derive({**SPEC, "window_s": 0.0})


def test_round_time_uses_the_mean_running_requests_in_open_loop():
    open_loop = {**SPEC, "workload_kind": "open_loop", "batch_size": 64, "mean_running_requests": 2.5}
    assert records.round_time_ms(open_loop) == 12.5  # 800 request-steps / 2.5 → 320 steps in 4 s
    assert records.round_time_ms({**open_loop, "mean_running_requests": None}) is None
    assert records.round_time_ms({**SPEC, "batch_size": 0}) is None
    assert records.round_time_ms({**SPEC, "window_s": 0.0}) is None
    assert records.round_time_ms({**SPEC, "committed_tokens": None}) is None
    assert records.round_time_ms({**SPEC, "accepted_tokens": 1100}) is None  # no step left: not a time of 0 or ∞
    assert records.round_time_ms({**SPEC, "accepted_tokens": 1099}) == 16000.0  # one request-step: 4 s × 4 / 1


def test_read_records_concatenates_and_names_a_file_without_a_version(tmp_path):
    import pyarrow.parquet as pq

    assert records.read_records([]).schema.equals(records.RECORD_SCHEMA) and records.read_records([]).num_rows == 0
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    records.write_record(row(cell_name="a"), a)
    records.write_record(row(cell_name="b"), b)
    assert records.read_records([a, b]).column("cell_name").to_pylist() == ["a", "b"]
    bare = tmp_path / "bare.parquet"
    pq.write_table(records.to_table([row()]).replace_schema_metadata(None), bare)
    with pytest.raises(records.RecordError, match=r"bare.parquet: record_version \?, this reader knows 1$"):
        records.read_records([a, bare])


def test_validate_row_messages_name_the_column():
    with pytest.raises(records.RecordError, match=r"^unknown record columns: \['joules', 'watts'\]$"):
        records.validate_row({"watts": 1, "joules": 2})
    with pytest.raises(records.RecordError, match=r"^status = 'skipped'; known: measured, unsupported$"):
        records.validate_row({"status": "skipped"})
    with pytest.raises(records.RecordError, match=r"^tpot_mean_s is NaN; write null for 'not measured'$"):
        records.validate_row({"tpot_mean_s": math.nan})
    with pytest.raises(records.RecordError, match=r"^meter is 'none' but energy_j_per_gpu = \[1\.0\]; energy must be null$"):
        records.validate_row({"meter": "none", "energy_j_per_gpu": [1.0]})
    with pytest.raises(records.RecordError, match=r"^meter is 'nvml' but energy_j = None$"):
        records.validate_row({"meter": "nvml"})
    with pytest.raises(records.RecordError, match=r"^meter is 'nvml' but energy_j = -1\.0$"):
        records.validate_row({"meter": "nvml", "energy_j": -1.0})
    records.validate_row({"meter": "none", "energy_j_per_gpu": []})  # an empty list is "none measured" too
    records.validate_row({"meter": "nvml", "energy_j": 1e-3})
    records.validate_row({"status": "measured", "meter": None, "energy_j": None})


def test_an_unsupported_record_measures_nothing_and_says_why():
    ok = {"status": "unsupported", "unsupported_reason": "Model architectures ['X'] are not supported"}
    records.validate_row(ok)
    with pytest.raises(records.RecordError, match=r"^an unsupported record must say why \(unsupported_reason\)$"):
        records.validate_row({"status": "unsupported", "unsupported_reason": ""})  # empty is not a reason
    for col in ("energy_j", "committed_tokens", "window_s", "mj_per_committed_token", "drafts"):
        with pytest.raises(records.RecordError, match=f"measured nothing, but has {col}$"):
            records.validate_row({**ok, col: 0})
    with pytest.raises(records.RecordError, match="but has energy_j, drafts$"):
        records.validate_row({**ok, "energy_j": 1.0, "drafts": 3})


def test_to_table_stamps_the_version_and_fills_every_column():
    t = records.to_table([{"cell_name": "x", "record_version": 7}])
    assert t.schema.equals(records.RECORD_SCHEMA) and t.column("record_version").to_pylist() == [records.RECORD_VERSION]
    assert t.column("energy_j").to_pylist() == [None] and t.schema.metadata[b"record_version"] == b"1"


def test_a_written_record_carries_no_column_docs_and_reads_back_equal(tmp_path):
    import pyarrow.parquet as pq

    target = tmp_path / "r.parquet"
    written = records.to_table([row(meter="nvml", energy_j=3.2)])
    records.write_record(row(meter="nvml", energy_j=3.2), target)
    on_disk = pq.read_schema(target)
    assert [f.name for f in on_disk if f.metadata] == []  # the docs stay in code (ADR 0190)
    assert on_disk.metadata == {b"record_version": b"1"}
    back = records.read_records([target])
    assert back.equals(written) and back.column("energy_j").to_pylist() == [3.2]
    # One row: no min/max statistics or dictionary pages that would only repeat its values.
    meta = pq.ParquetFile(target).metadata
    chunks = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
    assert [c.path_in_schema for c in chunks if c.is_stats_set or c.has_dictionary_page] == []


def _every_type_row():
    """A record that fills a column of each Arrow type a record has: int32, int64, float64, bool, string,
    timestamp[us, UTC], list<float64>, list<int64>, list<string>."""
    import datetime as dt

    return row(
        meter="nvml", energy_j=3.2, synthetic=True, acceptance_rates=[0.9, 0.5], accepted_per_position=[7, 3],
        gpu_names=["NVIDIA H200"], window_start=dt.datetime(2026, 12, 3, 5, 0, 1, 250, tzinfo=dt.UTC),
        engine_config='{"async_scheduling": true}',
    )


def test_a_written_record_stores_no_arrow_schema_and_reads_back_as_one_that_did(tmp_path):
    """ADR 0221: the footer carries Parquet's schema and record_version, not Arrow's copy of the schema; every
    reader (pyarrow, polars, the aggregate's scan against the record schema) sees what it saw when it did."""
    import polars as pl
    import pyarrow.parquet as pq

    from specjoule.analysis import aggregate

    written = records.to_table([_every_type_row()])
    slim, stored = tmp_path / "slim.parquet", tmp_path / "stored.parquet"
    records.write_record(_every_type_row(), slim)
    pq.write_table(written, stored, write_statistics=False, use_dictionary=False)  # ADR 0190's form
    meta = pq.ParquetFile(slim).metadata
    assert meta.metadata == {b"record_version": b"1"}  # no b"ARROW:schema"
    assert b"ARROW:schema" in pq.ParquetFile(stored).metadata.metadata
    back = pq.read_table(slim)
    assert back.schema.equals(pq.read_table(stored).schema, check_metadata=True)
    # (with check_metadata, Arrow also compares list item names: Parquet's "element" in both files, "item" in code)
    assert back.schema.equals(records.RECORD_SCHEMA) and back.schema.metadata == records.RECORD_SCHEMA.metadata
    assert back.equals(written)
    assert back.column("window_start").type == pa.timestamp("us", tz="UTC")
    assert pl.read_parquet(slim).equals(pl.read_parquet(stored))
    scanned = aggregate.scan_records([slim, stored]).collect().drop("record_path")
    assert scanned.row(0) == scanned.row(1) and scanned["acceptance_rates"][0].to_list() == [0.9, 0.5]
    # The Arrow schema was most of the footer: a record is about 60 % of its former size.
    assert slim.stat().st_size < 0.7 * stored.stat().st_size


def test_every_record_column_keeps_its_doc_in_code():
    assert list(records.RECORD_DOCS) == records.RECORD_COLUMNS
    assert records.RECORD_DOCS["window_s"] == "energy window length"
    assert records.RECORD_DOCS["workload_kind"] == "closed_batch | open_loop | closed_loop"


def test_the_window_mean_temperature_is_the_in_window_samples_mean_on_recorded_nvml_windows():
    """ADR 0083 addendum 4: a record's mean_temperature_c from its timeline. On ten windows NVML recorded on an H100
    (2026-12-07h) it is the mean polars takes of the in-window samples alone, between their least and the record's
    maximum; warm-up and cool-down samples (outside the window) would move it; without samples it is null."""
    from pathlib import Path

    import polars as pl

    folder = Path(__file__).resolve().parents[1] / "validation" / "h100-2026-12" / "session-2026-12-07h" / "depth-moe-sglang" / "results"
    timelines = pl.read_parquet(folder / "timelines.parquet")
    maxima = {(r["campaign_id"], r["cell_name"]): r["max_temperature_c"]
              for r in pl.read_parquet(folder / "records.parquet").iter_rows(named=True)}
    assert len(maxima) == 10
    moved = 0
    for (packed_file,), window in timelines.group_by(["packed_file"]):
        campaign, name = packed_file.removesuffix(".parquet").split("/")[1:]
        inside = window.filter(pl.col("in_window"))["temperature_c"]
        mean = records.window_mean_temperature_c(window.drop("packed_file").to_arrow())
        assert mean == pytest.approx(inside.mean(), rel=1e-12)
        assert inside.min() <= mean <= maxima[(campaign, name)] == inside.max()
        moved += window["temperature_c"].mean() != pytest.approx(mean, abs=0.05)
    assert moved > 0  # the samples outside the window differ, so reading them would be wrong here
    empty = pa.table({"temperature_c": pa.array([40.0], pa.float64()), "in_window": pa.array([False])})
    assert records.window_mean_temperature_c(empty) is None and records.window_mean_temperature_c(None) is None
    crafted = pa.table({"temperature_c": pa.array([30.0, 50.0, None, 54.0], pa.float64()),
                        "in_window": pa.array([False, True, True, True])})
    assert records.window_mean_temperature_c(crafted) == pytest.approx(52.0)  # (50 + 54) / 2: null and outside left out
