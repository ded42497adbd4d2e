"""Figures + report faster, outputs unchanged (ADR 0237). The SVGs drawn in a child process beside the specs'
building: every file, the manifest and the log the same as when this process draws them; a spec vl-convert cannot
draw fails the export as it does in-process. The report inlining the specs' JSON text as export wrote it: the same
report as from the parsed specs."""

from __future__ import annotations

import json
import re

import altair as alt
import polars as pl
import pytest
from conftest import GPU_EXPORT_PNG

from specjoule.report import figures as F
from specjoule.report import render as R


def _files(root) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.name != "figures.json"}


def _without_seconds(manifest: dict) -> dict:
    # export_s holds the seconds each export took: which exports were made is compared, not how long they took.
    return {**manifest, "figures": [{**f, "export_s": list(f["export_s"])} for f in manifest["figures"]]}


@pytest.mark.parametrize("grid", ["gpu", "engines"])
def test_the_drawer_writes_the_files_manifest_and_log_lines_of_the_in_process_export(grid, request, tmp_path):
    figs = list(request.getfixturevalue(f"{'eng' if grid == 'engines' else grid}_figs").values())
    assert any(f.drawn for f in figs) and any(not f.drawn for f in figs), "both kinds, interleaved in the log"
    png = GPU_EXPORT_PNG
    logs: dict[str, list[str]] = {"inline": [], "drawer": []}
    if grid == "gpu":  # conftest's in-process export of these figures with these PNGs, its log (test_figures reads it)
        inline_dir, inline, _, logs["inline"] = request.getfixturevalue("gpu_export")
    else:
        inline_dir = tmp_path / "inline"
        inline = F.export(figs, inline_dir, png=png, log=logs["inline"].append)
    with F.StaticDrawer() as drawer:
        drawn = F.export(figs, tmp_path / "drawer", png=png, log=logs["drawer"].append, drawer=drawer)
    a, b = _files(inline_dir), _files(tmp_path / "drawer")
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


def test_the_report_from_the_specs_text_is_the_report_from_the_parsed_specs(gpu, gpu_figs, tmp_path):
    # A spec with what JSON escapes or might not round-trip: a quote, "</script>", non-ASCII, a small float.
    df = pl.DataFrame({"x": [1.0, 2.5e-7, 3.0], "y": [2.0, -0.0, 5.0], "label": ['a "b"', "</script>", "é ☃"]})
    odd = alt.Chart(df).mark_point().encode(x="x:Q", y="y:Q", tooltip=["label:N"]).properties(title="t </b>")
    F.export([*gpu_figs.values(), F.Figure("odd", "odd", "caption", chart=odd)], tmp_path, html=False)
    manifest, parsed = F.read_manifest(tmp_path)
    again, text = F.read_manifest(tmp_path, as_text=True)
    assert again == manifest and set(text) == set(parsed) and "odd" in text
    assert all(isinstance(t, str) and json.loads(t) == parsed[n] for n, t in text.items())

    def report(specs: dict) -> str:
        return R.render(R.ReportInputs(config=gpu.config, config_hash="fixture0000hash", records=gpu.records,
                                       checks=gpu.checks, curves=gpu.curves, manifest=manifest, specs=specs,
                                       summary=gpu.summary, generated_at="2026-12-04T00:00:00+00:00",
                                       javascript_bundle="/* bundle */"))

    html = report(text)
    assert html == report(parsed) and "<\\/script>" in html
