"""Packed evidence (ADR 0246): a run's per-cell records and timelines as one Parquet file each, read as before."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from specjoule import config, records
from specjoule.analysis import aggregate, compare_evidence, evidence, packed, window_activity
from tools import slim_evidence as S

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = "vllm-tiny-closed-b4-random-s0-cg1"


def _record(cell: str, role: str, energy_j: float, **over: object) -> dict:
    return records.derive(
        {
            "cell_id": f"id-{cell}", "campaign_id": CAMPAIGN, "cell_name": cell, "role": role,
            "method": "eagle3" if role == "point" else "baseline", "engine": "vllm", "meter": "nvml",
            "energy_j": energy_j, "committed_tokens": 4096, "drafts": 1000 if role == "point" else None,
            "accepted_tokens": 2000 if role == "point" else None, "window_s": 20.0, "batch_size": 4,
            "gpu_names": ["NVIDIA H200"], "gpu_uuids": ["GPU-0"], "run_order_index": {"baseline--open": 0,
            "eagle3--mv3": 1, "baseline--close": 2}[cell], "seed": 0,
            "window_start": dt.datetime(2026, 12, 5, 20, 0, tzinfo=dt.UTC) + dt.timedelta(minutes=len(cell)),
            **over,
        }
    )  # fmt: skip


def _timeline(power: float, n: int = 300) -> pa.Table:
    """A 10 Hz timeline as the runner writes one (field docs, NaN where a signal was not read)."""
    schema = pa.schema(
        [
            pa.field("gpu_index", pa.int32()),
            pa.field("t_monotonic", pa.float64(), metadata={b"doc": b"seconds, the engine's clock"}),
            pa.field("in_window", pa.bool_()),
            pa.field("power_w", pa.float64()),
            pa.field("gpu_util_pct", pa.float64()),
        ],
        metadata={b"kind": b"timeline"},
    )
    t = [i / 10 for i in range(n)]
    util = [float("nan") if i == 7 else 50.0 + (i % 10) for i in range(n)]
    return pa.table({"gpu_index": [0] * n, "t_monotonic": t, "in_window": [10 <= i < n - 10 for i in range(n)],
                     "power_w": [power] * n, "gpu_util_pct": util}, schema=schema)  # fmt: skip


def _run(tmp_path: Path) -> Path:
    """A committed session as a campaign leaves it: records and timelines per cell, and a marked/ view
    that links to them."""
    session = tmp_path / "session"
    results = session / "results"
    for cell, role, energy in (("baseline--open", "opening_baseline", 400.0), ("eagle3--mv3", "point", 300.0),
                               ("baseline--close", "closing_baseline", 404.0)):  # fmt: skip
        records.write_record(_record(cell, role, energy), results / "cells" / CAMPAIGN / f"{cell}.parquet")
        path = results / "timelines" / CAMPAIGN / f"{cell}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_timeline(energy / 20.0), path)
    marked = session / "marked" / "results"
    marked.mkdir(parents=True)
    (marked / "cells").symlink_to("../../results/cells")
    (marked / "timelines").symlink_to("../../results/timelines")
    return session


def _files(tree: Path) -> dict[str, pa.Table]:
    return {p.relative_to(tree.parent).as_posix(): pq.read_table(p) for p in sorted(tree.glob("*/*.parquet"))}


def test_a_run_is_packed_and_every_reader_reads_what_it_read_before(tmp_path):
    session = _run(tmp_path)
    results = session / "results"
    before = {t: _files(results / t) for t in packed.TREES}
    paths_before = sorted((results / "cells").glob("*/*.parquet"))
    agg_before = aggregate.aggregate(paths_before)
    source_before = evidence.read_source(results / "cells")
    activity_before = window_activity.of_records([str(p) for p in paths_before])

    plan, _ = S.slim([session], scripts_dir=tmp_path / "scripts")
    # one file per tree, the trees gone, the marked/ view's links now name the packed files
    assert sorted(p.name for p in results.iterdir()) == ["cells.parquet", "timelines.parquet"]
    assert packed.is_packed(results / "cells.parquet") and packed.is_packed(results / "timelines.parquet")
    for t in packed.TREES:
        link = session / "marked" / "results" / f"{t}.parquet"
        assert link.is_symlink() and link.resolve() == (results / f"{t}.parquet").resolve()
        assert not (session / "marked" / "results" / t).is_symlink()
    assert plan.bytes_saved > 0

    # each member unpacks to its file's table: schema, field and file metadata, values (NaN too)
    for t in packed.TREES:
        back = packed.unpack_tables(results / f"{t}.parquet")
        assert back.keys() == before[t].keys()
        for member, table in before[t].items():
            assert S.same_table(back[member], table), member
            assert S.same_table(packed.read_file(results / member), table)
    # the readers, by the paths the files had
    members = packed.tree_files(results / "cells")
    assert members == paths_before and not any(p.exists() for p in members)
    assert_frame_equal(aggregate.aggregate(members), agg_before)
    assert_frame_equal(evidence.read_source(results / "cells"), source_before)
    assert_frame_equal(window_activity.of_records([str(p) for p in members]), activity_before)
    assert activity_before["window_activity_mean"].is_not_null().all()  # the timelines were read, not nulls
    assert [p.name for p in packed.tree_files(results / "cells", "*/baseline--*.parquet")] == [
        "baseline--close.parquet",
        "baseline--open.parquet",
    ]
    # a session read whole: its records once, under their real paths (not the marked/ link's)
    assert evidence.record_files(session) == paths_before
    assert compare_evidence.compare_sources(results / "cells", session).height == 1
    # and nothing is left to do
    again, recs = S.slim([session], check=True, scripts_dir=tmp_path / "scripts")
    assert again.empty() and recs == []


def test_unpack_writes_the_files_back_for_a_pipeline_run(tmp_path, capsys):
    session = _run(tmp_path)
    results = session / "results"
    before = {t: _files(results / t) for t in packed.TREES}
    S.slim([session], scripts_dir=tmp_path / "scripts")
    out = tmp_path / "again" / "results"
    assert S.main(["unpack", str(results), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    for t in packed.TREES:
        assert not (out / f"{t}.parquet").exists()
        assert _files(out / t).keys() == before[t].keys()
        assert all(S.same_table(_files(out / t)[m], before[t][m]) for m in before[t])
    # a record comes back in the runner's form (ADR 0221): no stored Arrow schema, its record_version
    record = out / "cells" / CAMPAIGN / "eagle3--mv3.parquet"
    assert pq.ParquetFile(record).metadata.metadata == {b"record_version": b"1"}
    assert S.main(["unpack", str(tmp_path / "nowhere")]) == 1


def test_a_pack_that_does_not_read_back_equal_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    session = _run(tmp_path)
    files = {p: p.read_bytes() for p in session.rglob("*") if p.is_file() and not p.is_symlink()}
    real = packed.pack_table

    def fault_pack_that_changes_energy(tree, members):
        # FAULT INJECTION: a real packer does not alter values; this one changes the first record's energy.
        table = real(tree, members)
        if "energy_j" not in table.column_names:
            return table
        i = table.schema.get_field_index("energy_j")
        energy = table.column(i).to_pylist()
        return table.set_column(i, table.schema.field(i), pa.array([energy[0] + 1.0, *energy[1:]]))

    monkeypatch.setattr(packed, "pack_table", fault_pack_that_changes_energy)
    with pytest.raises(S.SlimError, match="its packed copy does not read back equal"):
        S.slim([session], scripts_dir=tmp_path / "scripts")
    assert {p: p.read_bytes() for p in session.rglob("*") if p.is_file() and not p.is_symlink()} == files
    assert (session / "marked" / "results" / "cells").is_symlink()


def test_a_tree_holding_anything_else_stays_files_and_is_named(tmp_path):
    session = _run(tmp_path)
    (session / "results" / "cells" / CAMPAIGN / "notes.txt").write_text("a reader's note\n")
    plan, _ = S.slim([session], scripts_dir=tmp_path / "scripts")
    assert (session / "results" / "cells").is_dir() and not (session / "results" / "cells.parquet").exists()
    assert any("results/cells: kept as files" in n for n in plan.notes)
    assert packed.is_packed(session / "results" / "timelines.parquet")  # the other tree is packed
    # a tree packed beside a folder of the same name is refused, not overwritten
    (session / "results" / "cells" / CAMPAIGN / "notes.txt").unlink()
    (session / "results" / "cells.parquet").write_bytes(b"PAR1")
    with pytest.raises(S.SlimError, match="cells.parquet exists beside it"):
        S.slim([session], scripts_dir=tmp_path / "scripts")


def test_a_packed_file_says_what_it_is_and_a_stranger_is_refused_by_name(tmp_path):
    session = _run(tmp_path)
    S.slim([session], scripts_dir=tmp_path / "scripts")
    pack = session / "results" / "cells.parquet"
    meta = pq.read_schema(pack).metadata
    body = json.loads(meta[packed.METADATA_KEY])
    assert body["version"] == packed.FORMAT_VERSION and len(body["files"]) == 3 and len(body["schemas"]) == 1
    plain = tmp_path / "cells.parquet"
    pq.write_table(pa.table({"x": [1]}), plain)
    assert not packed.is_packed(plain)
    with pytest.raises(packed.PackError, match="not a packed evidence file"):
        packed.unpack_tables(plain)
    with pytest.raises(packed.PackError, match="holds no member"):
        packed.read_members(pack, [str(session / "results" / "cells" / CAMPAIGN / "nope.parquet")], path_column="p")
    future = tmp_path / "future" / "cells.parquet"
    future.parent.mkdir()
    pq.write_table(pa.table({"x": [1]}).replace_schema_metadata({packed.METADATA_KEY: b'{"version": 99}'}), future)
    with pytest.raises(packed.PackError, match="packed format version 99"):
        packed.members(future)
    # a path that exists is never read as a member; one outside any packed tree is not one either
    assert packed.locate(pack) is None and packed.locate(tmp_path / "x" / "cells" / "c" / "n.parquet") is None


def test_a_configured_reference_to_a_packed_cells_folder_resolves_and_a_missing_one_is_refused(tmp_path):
    session = _run(tmp_path)
    S.slim([session], scripts_dir=tmp_path / "scripts")
    cells = session / "results" / "cells"
    assert not cells.exists() and config.evidence_exists(cells)
    assert config.reference_evidence_path({"report": {"reference_evidence": str(cells)}}) == cells
    with pytest.raises(config.ConfigError, match="report.reference_evidence"):
        config.reference_evidence_path({"report": {"reference_evidence": str(session / "other" / "cells")}})


def test_the_committed_evidence_is_packed_and_reads_as_its_aggregated_tables():
    """Every committed run's records are members of its packed cells.parquet, and one run read through them
    gives the records.parquet its own analysis wrote when the files were files."""
    validation = ROOT / "validation"
    assert not [d for d in validation.rglob("cells") if d.is_dir() and any(d.glob("*/*.parquet"))]
    packs = [p for p in validation.rglob("cells.parquet") if not p.is_symlink()]
    assert len(packs) >= 40 and all(packed.is_packed(p) for p in packs)
    run = validation / "h100-2026-12" / "session-2026-12-05f" / "depth-moe-vllm" / "results"
    df = aggregate.aggregate(packed.tree_files(run / "cells"))
    old = pl.read_parquet(run / "records.parquet")
    cols = [c for c in old.columns if c != "record_path"]
    assert df.height == old.height == 10
    assert_frame_equal(old.select(cols), df.select(cols))


def test_only_a_readable_packed_file_under_a_tree_name_is_packed(tmp_path):
    session = _run(tmp_path)
    S.slim([session], scripts_dir=tmp_path / "scripts")
    pack = session / "results" / "cells.parquet"
    assert packed.is_packed(pack)
    other = tmp_path / "other.parquet"
    other.write_bytes(pack.read_bytes())  # the same bytes under another name: not a tree's pack
    garbage = tmp_path / "g" / "cells.parquet"
    garbage.parent.mkdir()
    garbage.write_bytes(b"PAR1 not parquet")
    folder = tmp_path / "d" / "timelines.parquet"
    folder.mkdir(parents=True)
    assert not packed.is_packed(other) and not packed.is_packed(garbage) and not packed.is_packed(folder)


def test_pack_table_refuses_what_it_cannot_pack_by_name_and_packs_records_of_two_schema_ages(tmp_path):
    tree = tmp_path / "results" / "cells"
    with pytest.raises(packed.PackError, match=r"cells: no files to pack"):
        packed.pack_table(tree, [])
    (tree / "c").mkdir(parents=True)
    clash = tree / "c" / "x.parquet"
    pq.write_table(pa.table({"packed_file": ["y"]}), clash)
    with pytest.raises(packed.PackError, match=r"x.parquet: already has a column 'packed_file'"):
        packed.pack_table(tree, [clash])
    a, b = tree / "c" / "a.parquet", tree / "c" / "b.parquet"
    pq.write_table(pa.table({"v": [1, 2]}), a)
    pq.write_table(pa.table({"v": [pa.scalar({"k": 1})]}), b)  # a struct where the other file has integers
    with pytest.raises(packed.PackError, match=r"cells: its files do not share column types"):
        packed.pack_table(tree, [a, b])
    # an older record (written before a column was added) beside a newer one: each comes back with its own columns
    older = tree / "c" / "older.parquet"
    newer = tree / "c" / "newer.parquet"
    pq.write_table(pa.table({"energy_j": [1.5]}, metadata={b"record_version": b"1"}), older)
    pq.write_table(pa.table({"energy_j": [2.5], "added": ["x"]}, metadata={b"record_version": b"1"}), newer)
    table = packed.pack_table(tree, [newer, older])
    back = packed.unpack_tables(_bytes(table))
    assert back["cells/c/older.parquet"].column_names == ["energy_j"]
    assert back["cells/c/newer.parquet"].column_names == ["energy_j", "added"]
    assert S.same_table(back["cells/c/older.parquet"], pq.read_table(older))


def _bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    packed.write_pack(table, sink)
    return sink.getvalue().to_pybytes()


def test_a_damaged_index_is_refused_naming_the_file_and_the_member(tmp_path):
    session = _run(tmp_path)
    tree = session / "results" / "cells"
    members = sorted(tree.glob("*/*.parquet"))
    table = packed.pack_table(tree, members)
    body = json.loads(table.schema.metadata[packed.METADATA_KEY])

    def with_body(changed: dict) -> bytes:
        return _bytes(table.replace_schema_metadata({packed.METADATA_KEY: json.dumps(changed).encode()}))

    extra = {**body, "files": [*body["files"][:-1], {**body["files"][-1], "rows": 2}]}
    with pytest.raises(packed.PackError, match=r"a packed file in memory: its index counts 4 rows, the table holds 3"):
        packed.unpack_tables(with_body(extra))
    one_column = pa.schema([pa.field("energy_j", pa.struct([("x", pa.int8())]))])
    schemas = [*body["schemas"], base64.b64encode(one_column.serialize().to_pybytes()).decode()]
    wrong = {**body, "schemas": schemas, "files": [{**body["files"][0], "schema": 1}, *body["files"][1:]]}
    bad = tmp_path / "cells.parquet"
    bad.write_bytes(with_body(wrong))
    first = body["files"][0]["path"]
    with pytest.raises(packed.PackError, match=rf"{bad}: member {first} does not cast back to its schema"):
        packed.unpack_tables(bad)


def test_one_member_is_read_alone_under_the_path_it_is_asked_by(tmp_path):
    session = _run(tmp_path)
    results = session / "results"
    files = sorted((results / "cells").glob("*/*.parquet"))
    assert packed.tree_files(results / "cells") == files  # a folder: its files, as glob finds them
    assert packed.tree_files(results / "cells", "*/eagle3--*.parquet") == [f for f in files if "eagle3" in f.name]
    original = {f: pq.read_table(f) for f in files}
    assert S.same_table(packed.read_file(files[0]), original[files[0]])  # a file on disk is read as it is
    assert_frame_equal(packed.read_frame(files[0]), pl.read_parquet(files[0]))
    S.slim([session], scripts_dir=tmp_path / "scripts")
    member = files[1]
    assert S.same_table(packed.read_file(member), original[member])
    assert_frame_equal(packed.read_frame(member), pl.from_arrow(original[member]))
    rows = packed.read_members(results / "cells.parquet", [str(member)], path_column="where")
    assert rows.height == 1 and rows["where"].to_list() == [str(member)] and "packed_file" not in rows.columns
    assert aggregate.scan_records([member]).collect()["cell_name"].to_list() == [original[member]["cell_name"][0].as_py()]
    assert packed.tree_files(results / "nothing") == []


def test_unpack_copies_into_an_existing_folder_and_follows_links_and_timelines_come_back_committed(tmp_path):
    session = _run(tmp_path)
    results = session / "results"
    (tmp_path / "checks.md").write_text("| check |\n")
    (results / "checks.md").symlink_to(tmp_path / "checks.md")
    S.slim([session], scripts_dir=tmp_path / "scripts")
    out = tmp_path / "out"
    out.mkdir()
    packed.unpack(results, out)
    assert (out / "checks.md").is_file() and not (out / "checks.md").is_symlink()
    timeline = out / "timelines" / CAMPAIGN / "eagle3--mv3.parquet"
    assert S.committed_footer_shortfall(timeline) is None  # zstd, no statistics or dictionary pages


def test_copy_tree_writes_a_trees_files_from_its_folder_or_its_pack(tmp_path):
    session = _run(tmp_path)
    results = session / "results"
    before = _files(results / "timelines")
    from_folder = packed.copy_tree(results / "timelines", tmp_path / "a" / "timelines")
    assert _files(from_folder).keys() == before.keys()
    S.slim([session], scripts_dir=tmp_path / "scripts")
    from_pack = packed.copy_tree(results / "timelines", tmp_path / "b" / "timelines")
    assert from_pack == tmp_path / "b" / "timelines"
    assert all(S.same_table(_files(from_pack)[m], t) for m, t in before.items())
    with pytest.raises(packed.PackError, match=r"cells: neither a folder nor packed \(cells.parquet\)"):
        packed.copy_tree(tmp_path / "nowhere" / "cells", tmp_path / "c")


def test_a_column_the_record_schema_does_not_know_is_refused_from_a_pack_as_from_a_file(tmp_path):
    from specjoule.analysis import AnalysisError

    session = _run(tmp_path)
    record = session / "results" / "cells" / CAMPAIGN / "eagle3--mv3.parquet"
    table = pq.read_table(record)
    records.write_record_table(table.append_column("bogus", pa.array([1])), record)
    with pytest.raises(AnalysisError, match="bogus"):
        aggregate.aggregate(packed.tree_files(session / "results" / "cells"))
    S.slim([session], scripts_dir=tmp_path / "scripts")
    with pytest.raises(AnalysisError, match=r"cells.parquet: column\(s\) \['bogus'\] are not in the schema read"):
        aggregate.aggregate(packed.tree_files(session / "results" / "cells"))
