"""The SVGs drawn in a child process beside the specs' building (ADR 0237): every file, the manifest and the log
the same as when this process draws them; a spec vl-convert cannot draw fails the export as it does in-process."""

from __future__ import annotations

import json
import re

import altair as alt
import polars as pl
import pytest

from specjoule.report import figures as F


def _files(root) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.name != "figures.json"}


def _without_seconds(manifest: dict) -> dict:
    # export_s holds the seconds each export took: which exports were made is compared, not how long they took.
    return {**manifest, "figures": [{**f, "export_s": list(f["export_s"])} for f in manifest["figures"]]}


@pytest.mark.parametrize("grid", ["gpu", "engines"])
def test_the_drawer_writes_the_files_manifest_and_log_lines_of_the_in_process_export(grid, request, tmp_path):
    figs = list(request.getfixturevalue(f"{'eng' if grid == 'engines' else grid}_figs").values())
    assert any(f.drawn for f in figs) and any(not f.drawn for f in figs), "both kinds, interleaved in the log"
    png = ("energy_vs_acceptance", "acceptance_by_corpus")
    logs: dict[str, list[str]] = {"inline": [], "drawer": []}
    inline = F.export(figs, tmp_path / "inline", png=png, log=logs["inline"].append)
    with F.StaticDrawer() as drawer:
        drawn = F.export(figs, tmp_path / "drawer", png=png, log=logs["drawer"].append, drawer=drawer)
    a, b = _files(tmp_path / "inline"), _files(tmp_path / "drawer")
    assert sorted(a) == sorted(b) and any(n.endswith(".png") for n in a)
    assert [n for n in a if a[n] != b[n]] == []
    assert _without_seconds(drawn) == _without_seconds(inline)
    assert json.loads((tmp_path / "drawer/figures.json").read_text()) == drawn
    seconds = re.compile(r"\{[^{}]*\}$")  # a drawn figure's line ends with its exports' seconds
    assert [seconds.sub("", s) for s in logs["drawer"]] == [seconds.sub("", s) for s in logs["inline"]]
    assert len(logs["inline"]) == len(figs)


def test_a_spec_vl_convert_cannot_draw_fails_the_export_as_in_process(tmp_path):
    chart = alt.Chart(pl.DataFrame({"x": [1.0]})).mark_point().encode(x="x:Q")
    good = F.Figure("good", "title", "caption", chart=chart)
    bad = F.Figure("bad", "title", "caption", chart=chart)
    bad.spec = lambda: {**good.spec(), "transform": [{"calculate": "(", "as": "y"}]}  # type: ignore[method-assign]
    with pytest.raises(ValueError) as inline:
        F.export([good, bad], tmp_path / "inline", html=False)
    with F.StaticDrawer() as drawer:
        with pytest.raises(ValueError) as drawn:
            F.export([good, bad], tmp_path / "drawer", html=False, drawer=drawer)
        assert str(drawn.value) == str(inline.value)
        # The child goes on: a later spec is drawn.
        drawer.submit(F.static_view(good.spec()))
        assert drawer.take()[0].startswith("<svg")
