"""tools/slim_evidence.py: committed evidence in its committed form, nothing it says changed (ADR 0212)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specjoule import logtext, runner
from tools import slim_evidence as S

REPO = Path(__file__).resolve().parents[2]
# A stand-in for the Vega bundle: large enough to be stored apart, and it carries the renderer's "<\/script".
VEGA = "function vega(){return '<\\/script>';}\n" * 4000
LOG = "INFO starting\nTraceback (most recent call last):\nModuleNotFoundError: No module named 'cutlass'\n"


def report_html(*specs: str, script: str = VEGA) -> str:
    embedded = "".join(f'<script type="application/json" id="spec-{s}">{{"mark":"line"}}</script>' for s in specs)
    return f"<html><head><script>{script}</script></head><body>{embedded}<script>draw();</script></body></html>"


def session(tmp_path: Path, *, drawn: tuple[str, ...] = ("power_timeline",)) -> Path:
    """A session folder as a campaign leaves it: plain logs, the report, its figures folder."""
    results = tmp_path / "session" / "results"
    (results / "logs" / "engines" / "fam").mkdir(parents=True)
    (results / "logs" / "engines" / "fam" / "g00-opening.log").write_text(LOG)
    (results / "logs" / "aggregate.log").write_text("aggregate: 12 records\n")
    (results / "report.html").write_text(report_html(*drawn))
    figures = results / "figures"
    figures.mkdir()
    manifest = [{"name": n, "drawn": True, "files": [f"{n}.svg"]} for n in drawn]
    manifest.append({"name": "cuda_graphs", "drawn": False, "files": ["cuda_graphs.svg"]})
    (figures / "figures.json").write_text(json.dumps({"figures": manifest}))
    for f in manifest:
        (figures / f"{f['name']}.svg").write_text("<svg/>")
    (figures / "power_timeline.html").write_text(report_html("power_timeline"))
    (results / "checks.md").write_text("| check | verdict |\n")
    return tmp_path / "session"


def test_a_session_folder_is_slimmed_and_reads_as_before(tmp_path):
    folder = session(tmp_path)
    scripts = tmp_path / "scripts"
    before = (folder / "results" / "report.html").read_text()

    plan, _ = S.slim([folder], scripts_dir=scripts)
    results = folder / "results"
    # logs: gzipped, plain copies gone, the same text through the reader every log reader uses
    assert sorted(p.name for p in results.rglob("*.log*")) == ["aggregate.log.gz", "g00-opening.log.gz"]
    assert logtext.read_log(results / "logs" / "engines" / "fam" / "g00-opening.log") == LOG
    assert runner.logged_exceptions(results / "logs" / "engines" / "fam" / "g00-opening.log") == [
        "ModuleNotFoundError: No module named 'cutlass'"
    ]
    # the report: gzipped, its Vega bundle stored once by hash, and it opens byte for byte as written
    assert not (results / "report.html").exists() and not (results / "figures").exists()
    digest = hashlib.sha256(VEGA.encode()).hexdigest()
    assert [p.name for p in scripts.iterdir()] == [f"{digest}.js.gz"]
    slimmed = gzip.decompress((results / "report.html.gz").read_bytes()).decode()
    assert VEGA not in slimmed and S.marker(digest) in slimmed and "draw();" in slimmed
    assert S.open_report(results / "report.html.gz", scripts) == before
    # kept as they were
    assert (results / "checks.md").read_text() == "| check | verdict |\n"
    assert plan.bytes_saved > 0
    # a second run finds nothing to do
    again, records = S.slim([folder], check=True, scripts_dir=scripts)
    assert again.empty() and records == []


def test_the_same_bundle_in_two_reports_is_stored_once(tmp_path):
    scripts = tmp_path / "scripts"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.html").write_text(report_html(name))
    S.slim([tmp_path / "a", tmp_path / "b"], scripts_dir=scripts)
    assert len(list(scripts.iterdir())) == 1
    for name in ("a", "b"):
        assert S.open_report(tmp_path / name / "report.html.gz", scripts) == report_html(name)


def test_small_inline_scripts_stay_in_the_report(tmp_path):
    (tmp_path / "report.html").write_text(report_html("x", script="small();"))
    S.slim([tmp_path], scripts_dir=tmp_path / "scripts")
    assert gzip.decompress((tmp_path / "report.html.gz").read_bytes()).decode() == report_html("x", script="small();")
    assert not (tmp_path / "scripts").exists()


def test_figures_the_report_does_not_embed_are_kept(tmp_path):
    folder = session(tmp_path, drawn=("power_timeline", "saving_vs_batch"))
    results = folder / "results"
    (results / "report.html").write_text(report_html("power_timeline"))  # saving_vs_batch drawn, not embedded
    plan, _ = S.slim([folder], scripts_dir=tmp_path / "scripts")
    assert (results / "figures" / "saving_vs_batch.svg").exists()
    assert any("saving_vs_batch" in n for n in plan.notes)


def test_figures_without_a_committed_report_are_kept(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "figures.json").write_text(json.dumps({"figures": [{"name": "x", "drawn": True}]}))
    (tmp_path / "energy_decomposition.svg").write_text("<svg/>")
    assert S.slim([tmp_path], check=True, scripts_dir=tmp_path / "scripts")[0].empty()


def test_a_loose_svg_beside_a_report_that_embeds_it_goes(tmp_path):
    (tmp_path / "families-report.html").write_text(report_html("energy_decomposition"))
    (tmp_path / "energy_decomposition.svg").write_text("<svg/>")
    (tmp_path / "other.svg").write_text("<svg/>")
    S.slim([tmp_path], scripts_dir=tmp_path / "scripts")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["families-report.html.gz", "other.svg"]


def test_a_rewrite_that_would_not_open_as_the_original_is_refused(tmp_path, monkeypatch):
    (tmp_path / "report.html").write_text(report_html("x"))

    def fault_marker_that_loses_a_byte(digest: str) -> str:
        # FAULT INJECTION: a marker the restore does not recognise, so the report would open without its charts.
        return f"/*slim_evidence script sha256:{digest[:-1]}*/"

    monkeypatch.setattr(S, "marker", fault_marker_that_loses_a_byte)
    with pytest.raises(S.SlimError, match="does not open as the original"):
        S.slim([tmp_path], scripts_dir=tmp_path / "scripts")
    assert (tmp_path / "report.html").read_text() == report_html("x")
    assert not (tmp_path / "report.html.gz").exists() and not (tmp_path / "scripts").exists()


def test_a_log_whose_gzip_holds_another_text_is_refused(tmp_path, capsys):
    (tmp_path / "cell.log").write_text(LOG)
    (tmp_path / "cell.log.gz").write_bytes(S.gz(b"another run\n"))
    assert S.main([str(tmp_path)]) == 1
    assert "cell.log.gz exists and holds another text" in capsys.readouterr().err
    assert (tmp_path / "cell.log").read_text() == LOG


def test_a_stored_script_that_does_not_match_its_name_is_refused(tmp_path):
    (tmp_path / "report.html").write_text(report_html("x"))
    scripts = tmp_path / "scripts"
    S.slim([tmp_path], scripts_dir=scripts)
    stored = next(scripts.iterdir())
    stored.write_bytes(S.gz(b"tampered"))
    with pytest.raises(S.SlimError, match="does not hash to its name"):
        S.open_report(tmp_path / "report.html.gz", scripts)


def test_open_writes_the_report_whole(tmp_path, capsys):
    # the command the evidence README gives a reader, on a committed report
    report = REPO / "validation/h200-2026-12/session-2026-12-02d/gemma4/results/report.html.gz"
    out = tmp_path / "report.html"
    assert S.main(["open", str(report), "-o", str(out)]) == 0
    html = out.read_text()
    assert "/*slim_evidence script" not in html and len(html) > 900_000
    assert 'id="spec-power_timeline"' in html


def test_committed_evidence_is_in_its_committed_form():
    # Each device call carries the repository (ADR 0190, 0212): plain logs, whole reports and derived figures in
    # committed evidence make it travel larger than it needs to. Every step runs on the whole tree, except that
    # the ~780 Parquet files are rewritten in memory (zstd -19: ~10 s of the ~11 s here) only where their footer
    # is not in the committed form, and in the newest session (the one most likely committed unslimmed), whole.
    validation = REPO / "validation"
    newest = S.newest_session(validation)

    def worth_rewriting(path: Path) -> bool:
        return newest in path.parents or S.committed_footer_shortfall(path) is not None

    plan, records = S.slim([validation], check=True, parquet=worth_rewriting)
    assert plan.empty() and records == [], (
        f"committed evidence would be {plan.bytes_saved:,} bytes smaller: run "
        f"`python tools/slim_evidence.py validation/` (first: {[*plan.writes, *plan.removals, *records][:1]})"
    )


def _table() -> pa.Table:
    schema = pa.schema(
        [pa.field("t_s", pa.float64(), metadata={b"doc": b"seconds"}), pa.field("gpu", pa.string())],
        metadata={b"kind": b"timeline"},
    )
    return pa.table({"t_s": [0.0, 0.1, float("nan"), None] * 500, "gpu": ["GPU-0"] * 2000}, schema=schema)


def test_a_table_is_rewritten_smaller_with_the_same_values_and_metadata(tmp_path):
    path = tmp_path / "loose" / "c" / "draft--mv3.parquet"  # a timeline outside a run's tree, which is packed
    path.parent.mkdir(parents=True)
    pq.write_table(_table(), path)  # as the pipeline writes it: snappy, statistics, dictionary pages
    before = path.stat().st_size
    # the screen the whole-tree check reads
    assert S.committed_footer_shortfall(path) == "column t_s is SNAPPY, not ZSTD"
    S.slim([tmp_path], scripts_dir=tmp_path / "scripts")
    assert path.stat().st_size < before and S.committed_footer_shortfall(path) is None
    back = pq.read_table(path)
    assert S.same_table(back, _table()) and not back.equals(_table())  # the NaN: Arrow's equals alone would refuse
    assert back.schema.field("t_s").metadata == {b"doc": b"seconds"} and back.schema.metadata == {b"kind": b"timeline"}
    assert S.slim([tmp_path], check=True, scripts_dir=tmp_path / "scripts")[0].empty()


def test_a_table_rewrite_that_loses_its_schema_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "curves.parquet"
    pq.write_table(_table(), path)
    before = path.read_bytes()
    # FAULT INJECTION: a writer that leaves out the Arrow schema, so the field docs do not come back
    monkeypatch.setattr(S, "TABLE_PARQUET_OPTIONS", {**S.TABLE_PARQUET_OPTIONS, "store_schema": False})
    with pytest.raises(S.SlimError, match="does not equal the original"):
        S.slim([tmp_path], scripts_dir=tmp_path / "scripts")
    assert path.read_bytes() == before


def test_same_table_tells_a_changed_value_apart():
    changed = _table().set_column(0, "t_s", pa.array([0.0, 0.2, float("nan"), None] * 500))
    assert S.same_table(_table(), _table()) and not S.same_table(_table(), changed)


def _record_as_adr_0190_wrote_it(path: Path, **over: object) -> pa.Table:
    """A cell record with the Arrow schema stored in its footer (ADR 0190's form, before ADR 0221)."""
    import datetime as dt

    from specjoule import records

    row = records.derive(
        {
            "cell_id": "c0ffee", "campaign_id": "k", "cell_name": "draft--mv3", "role": "point", "method": "eagle3",
            "meter": "nvml", "energy_j": 812.5, "committed_tokens": 4096, "drafts": 1000, "accepted_tokens": 2000,
            "window_s": 20.0, "acceptance_rates": [0.9, 0.7, 0.4], "gpu_names": ["NVIDIA H200"],
            "window_start": dt.datetime(2026, 12, 2, 7, 0, tzinfo=dt.UTC), **over,
        }
    )  # fmt: skip
    table = records.to_table([row])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, write_statistics=False, use_dictionary=False)
    return table


def test_a_record_is_rewritten_without_its_arrow_schema_and_reads_back_equal(tmp_path, capsys):
    folder = session(tmp_path)
    record = folder / "results" / "smoke" / "g" / "draft--mv3.parquet"  # outside results/cells, which is packed
    written = _record_as_adr_0190_wrote_it(record)
    before = record.read_bytes()
    assert b"ARROW:schema" in pq.ParquetFile(record).metadata.metadata

    assert S.main(["--check", str(folder)]) == 1  # --check names it and writes nothing
    assert str(record) in capsys.readouterr().out and record.read_bytes() == before
    assert S.committed_footer_shortfall(record) == "it stores its Arrow schema"
    # a selection that leaves the record out plans nothing for it; one that picks it, its rewrite
    assert record not in S.slim([folder], check=True, parquet=lambda p: False, scripts_dir=tmp_path / "s")[0].writes
    plan, rewritten = S.slim([folder], scripts_dir=tmp_path / "scripts", parquet=lambda p: p == record)
    assert rewritten == [record] and record in plan.writes
    assert pq.ParquetFile(record).metadata.metadata == {b"record_version": b"1"}
    back = pq.read_table(record)
    assert back.equals(written) and back.schema.equals(pq.read_table(pa.BufferReader(before)).schema, True)
    assert back.column("energy_j").to_pylist() == [812.5]
    assert len(record.read_bytes()) < 0.75 * len(before) and S.committed_footer_shortfall(record) is None
    assert S.slim([folder], check=True, scripts_dir=tmp_path / "scripts") == (S.Plan(), [])


def test_a_record_rewrite_that_changes_a_value_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from specjoule import records

    folder = session(tmp_path)
    good, bad = (folder / "results" / "smoke" / "g" / f"{n}.parquet" for n in ("a", "b"))
    _record_as_adr_0190_wrote_it(good)
    _record_as_adr_0190_wrote_it(bad, energy_j=900.0)
    files = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    real = records.record_parquet

    def fault_writer_that_changes_energy(table: pa.Table, where: object) -> None:
        # FAULT INJECTION: a real writer does not alter values; this one does, for the second record only.
        if table.column("energy_j")[0].as_py() == 900.0:
            i = table.schema.get_field_index("energy_j")
            table = table.set_column(i, table.schema.field(i), pa.array([901.0]))
        real(table, where)

    monkeypatch.setattr(records, "record_parquet", fault_writer_that_changes_energy)
    with pytest.raises(S.SlimError, match=f"{bad}: the rewritten record does not equal the original"):
        S.slim([folder], scripts_dir=tmp_path / "scripts")
    # nothing was written: not the good record, not the logs or the report planned beside them
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == files


def test_the_tool_writes_tables_as_the_library_does():
    """The tool keeps its own copy of the committed-table options (it imports no polars at load); the library's
    packed files use the same (ADR 0212, 0246). A change to one without the other would commit two table forms."""
    from specjoule.analysis import packed

    assert S.TABLE_PARQUET_OPTIONS == packed.TABLE_PARQUET_OPTIONS
    assert packed.PACK_PARQUET_OPTIONS == {**S.TABLE_PARQUET_OPTIONS, "store_schema": False}
