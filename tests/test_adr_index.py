"""docs/adr/README.md lists every ADR, one line each, and cannot go stale (issue 22)."""

from __future__ import annotations

from pathlib import Path

from tools import adr_index

ADR_DIR = Path(__file__).resolve().parents[1] / "docs" / "adr"


def test_index_is_current():
    assert (ADR_DIR / "README.md").read_text(encoding="utf-8") == adr_index.index_text(ADR_DIR), \
        "docs/adr/README.md is stale: run python tools/adr_index.py"


def test_index_names_every_record_once_with_its_title():
    records = sorted(p.name for p in ADR_DIR.glob("[0-9][0-9][0-9][0-9]-*.md"))
    lines = [line for line in (ADR_DIR / "README.md").read_text(encoding="utf-8").splitlines() if line.startswith("- [")]
    assert [line.split("(", 1)[1].split(")", 1)[0] for line in lines] == records
    first = (ADR_DIR / records[0]).read_text(encoding="utf-8").splitlines()[0]
    assert lines[0].endswith(first.split(" ", 3)[-1])  # the title as the record spells it


def test_a_record_without_a_title_line_is_refused(tmp_path):
    (tmp_path / "0001-x.md").write_text("no title\n")
    try:
        adr_index.index_text(tmp_path)
    except ValueError as exc:
        assert "0001-x.md" in str(exc)
    else:
        raise AssertionError("a record without '# NNNN — Title' must be refused")
