"""tools/slim_records.py: records rewritten without per-field docs, values untouched, or refused (ADR 0190)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specjoule import records
from tools import slim_evidence
from tools import slim_records as S

REPO = Path(__file__).resolve().parents[2]

ROW = records.derive(
    {
        "cell_id": "c0ffee",
        "campaign_id": "k",
        "cell_name": "draft--mv3",
        "role": "point",
        "method": "eagle3",
        "meter": "nvml",
        "energy_j": 812.5,
        "committed_tokens": 4096,
        "drafts": 1000,
        "accepted_tokens": 2000,
        "window_s": 20.0,
        "acceptance_rates": [0.9, 0.7, 0.4],
        "gpu_names": ["NVIDIA H200"],
        "window_start": dt.datetime(2026, 12, 2, 7, 0, tzinfo=dt.UTC),
        "engine_config": '{"async_scheduling": true}',
    }
)


def write_documented_record(path: Path, **over: object) -> pa.Table:
    """A record as the runner wrote them before ADR 0190: every column's doc in the file's field metadata."""
    table = records.to_table([{**ROW, **over}])
    documented = pa.schema(
        [f.with_metadata({"doc": records.RECORD_DOCS[f.name] or "-"}) for f in table.schema],
        metadata=table.schema.metadata,
    )
    pq.write_table(pa.Table.from_arrays(table.columns, schema=documented), path)
    return table


def test_a_documented_record_loses_its_docs_and_nothing_else(tmp_path):
    path = tmp_path / "cells" / "g" / "draft--mv3.parquet"
    path.parent.mkdir(parents=True)
    written = write_documented_record(path)
    assert all(f.metadata for f in pq.read_schema(path))
    assert S.record_footer_shortfall(path) == "it stores its Arrow schema"  # the screen the whole-tree check reads
    before = path.stat().st_size

    assert S.main([str(tmp_path)]) == 0
    schema = pq.read_schema(path)
    assert [f.name for f in schema if f.metadata] == [] and schema.metadata == {b"record_version": b"1"}
    back = records.read_records([path])
    assert back.equals(written) and back.column("energy_j").to_pylist() == [812.5]
    assert back.column("acceptance_rates").to_pylist() == [[0.9, 0.7, 0.4]]
    assert path.stat().st_size < before
    # What the runner writes now is already slim: a second pass finds nothing to rewrite.
    assert S.record_footer_shortfall(path) is None
    again = path.read_bytes()
    assert S.slim([tmp_path]) == ([], 0) and path.read_bytes() == again


def test_a_record_written_by_the_runner_is_already_slim(tmp_path):
    path = tmp_path / "r.parquet"
    records.write_record(ROW, path)
    assert S.slim([path], check=True) == ([], 0) and S.record_footer_shortfall(path) is None


def test_the_footer_screen_names_each_way_a_record_was_written_otherwise(tmp_path):
    table = records.to_table([ROW])
    for options, shortfall in [
        ({"write_statistics": False, "use_dictionary": False}, "it stores its Arrow schema"),
        ({**records.RECORD_PARQUET_OPTIONS, "write_statistics": True}, "column record_version has statistics"),
        ({**records.RECORD_PARQUET_OPTIONS, "use_dictionary": True}, "column record_version has a dictionary page"),
        ({**records.RECORD_PARQUET_OPTIONS, "compression": "zstd"}, "column record_version is ZSTD, not SNAPPY"),
    ]:
        path = tmp_path / "r.parquet"
        pq.write_table(table, path, **options)
        assert S.record_footer_shortfall(path) == shortfall, options


def test_only_records_are_touched_under_a_directory_and_a_named_non_record_is_refused(tmp_path, capsys):
    timeline = tmp_path / "timeline.parquet"
    pq.write_table(records.TIMELINE_SCHEMA.empty_table(), timeline)
    aggregate = tmp_path / "records.parquet"  # the analysis's aggregate says specjoule_record_version, not a record
    pq.write_table(
        pa.table(
            {"x": pa.array([1], pa.int64())}, schema=pa.schema([pa.field("x", pa.int64(), metadata={"doc": "d"})])
        ).replace_schema_metadata({"specjoule_record_version": "1"}),
        aggregate,
    )
    untouched = {p: p.read_bytes() for p in (timeline, aggregate)}
    assert S.slim([tmp_path]) == ([], 0)
    assert {p: p.read_bytes() for p in untouched} == untouched

    assert S.main([str(aggregate)]) == 1
    assert f"{aggregate}: not a cell record" in capsys.readouterr().err
    (tmp_path / "junk.parquet").write_text("not parquet")
    assert S.main([str(tmp_path)]) == 1
    assert f"{tmp_path / 'junk.parquet'}: not readable as Parquet" in capsys.readouterr().err


def test_check_writes_nothing_and_fails_while_a_record_would_change(tmp_path, capsys):
    path = tmp_path / "r.parquet"
    write_documented_record(path)
    original = path.read_bytes()
    assert S.main(["--check", str(tmp_path)]) == 1
    assert path.read_bytes() == original and str(path) in capsys.readouterr().out


def test_a_rewrite_that_changes_a_value_is_refused_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_documented_record(first)
    write_documented_record(second, energy_j=900.0)
    original = {p: p.read_bytes() for p in (first, second)}

    def fault_writer_that_changes_energy(table: pa.Table, where: object) -> None:
        # FAULT INJECTION: a real writer does not alter values; this one does, for the second record only.
        if table.column("energy_j")[0].as_py() == 900.0:
            i = table.schema.get_field_index("energy_j")
            table = table.set_column(i, table.schema.field(i), pa.array([901.0]))
        pq.write_table(table, where)

    monkeypatch.setattr(records, "record_parquet", fault_writer_that_changes_energy)
    assert S.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{second}: the rewritten record does not equal the original" in err
    assert {p: p.read_bytes() for p in original} == original  # the good one is not rewritten either


def test_a_rewrite_that_drops_the_record_version_is_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / "a.parquet"
    write_documented_record(path)

    def fault_writer_that_drops_file_metadata(table: pa.Table, where: object) -> None:
        # FAULT INJECTION: loses the file-level metadata that says the file is a record of version 1.
        pq.write_table(table.replace_schema_metadata(None), where)

    monkeypatch.setattr(records, "record_parquet", fault_writer_that_drops_file_metadata)
    assert S.main([str(path)]) == 1
    assert f"{path}: the rewrite changed the file metadata" in capsys.readouterr().err


def test_committed_evidence_records_travel_as_the_runner_writes_them():
    # Each device call carries the repository; a record with its docs and statistics is twice the size (ADR 0190).
    # Every committed record's footer is read; rewriting each in memory (--check) took ~5 s here, so the rewrite
    # checks those whose footer is not the runner's form, and the newest session's whole.
    validation = REPO / "validation"
    screened = [p for p in S.record_files([validation]) if S.record_footer_shortfall(p)]
    newest = slim_evidence.newest_session(validation)
    changed, saved = S.slim([*screened, newest], check=True)
    assert changed == [], (
        f"{len(changed)} committed record(s) would be {saved:,} bytes smaller: "
        f"run `python tools/slim_records.py validation/` (first: {changed[:1]})"
    )
