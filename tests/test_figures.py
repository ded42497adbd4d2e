"""Figures and report, without a browser: specs validate and compile, numbers match the tables,
a grid that cannot fill a figure gets one line, the rules run under real Snakemake.

Inputs are FIXTURE tables (tests/report_fixtures.py): realistic shapes, made-up numbers.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import vl_convert as vlc
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import report_fixtures as rf  # noqa: E402
from conftest import GPU_EXPORT_PNG, seed_vega_bundle  # noqa: E402

from specjoule.report import figures as F  # noqa: E402
from specjoule.report import render as R  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


# --- fixtures: gpu, cpu, engines (the scenarios) and gpu_figs, cpu_figs, eng_figs (their figures) are conftest's ---

inputs_for = rf.figure_inputs


def datasets(spec: dict) -> list[list[dict]]:
    """Every inline dataset of a spec (Altair consolidates them under ``datasets``; CSV parsed)."""
    out = []

    def rows(values):
        if isinstance(values, str):
            return list(csv.DictReader(io.StringIO(values)))
        return values

    for values in spec.get("datasets", {}).values():
        out.append(rows(values))

    def walk(node):
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict) and "values" in data:
                out.append(rows(data["values"]))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk({k: v for k, v in spec.items() if k != "datasets"})
    return out


def rows_with(spec: dict, *columns: str) -> list[dict]:
    found = [r for d in datasets(spec) for r in d if isinstance(r, dict) and all(c in r for c in columns)]
    assert found, f"no dataset with columns {columns}"
    return found


# --- every figure on a full GPU-like grid ---------------------------------------------------------------

def test_gpu_grid_draws_every_figure_and_specs_validate_and_compile(gpu_figs):
    assert set(gpu_figs) == set(F.FIGURE_NAMES)
    for name, fig in gpu_figs.items():
        if name == "engine_comparison":  # one engine in this grid (tested below)
            continue
        assert fig.drawn, f"{name}: {fig.reason}"
        spec = fig.spec()  # Altair validates against the Vega-Lite schema here
        assert spec["$schema"].endswith(f"v{F.alt.SCHEMA_VERSION.lstrip('v')}.json")
        # And it compiles to Vega (field names, params and transforms resolve).
        vega = vlc.vegalite_to_vega(spec, vl_version=F.VEGALITE_VERSION)
        assert vega["marks"], name


def test_energy_vs_acceptance_has_both_arms_and_the_blog_numbers(gpu, gpu_figs):
    spec = gpu_figs["energy_vs_acceptance"].spec()
    pts = rows_with(spec, "arm", "realized_L", "mj_per_committed_token")
    arms = {r["arm"] for r in pts}
    assert {"minimum-variance", "geometric"} <= arms
    # The blog slice (open loop, B=1, graphs on): L=1 min-var is within 1 % of 294.855 mJ.
    blog = [r for r in pts if r["sel_workload"] == "open" and r["sel_batch_size"] == "B=1" and r["sel_cuda_graphs"] == "on"
            and r["arm"] == "minimum-variance" and r["configured_L"] == 1.0]
    assert blog, "no L=1 min-var point in the open-loop B=1 slice"
    for r in blog:
        assert r["mj_per_committed_token"] == pytest.approx(294.855, rel=0.01)
        # The ratio the reader sees: the tooltip's "0.897 [lo, hi]" (the bare ratio is not drawn, so not shipped).
        assert float(r["ratio_text"].split()[0]) == pytest.approx(0.897, abs=0.01)
    # The point is the seed mean of the curves.
    c = gpu.curves.filter((pl.col("workload") == "open") & (pl.col("batch_size") == 1) & pl.col("cuda_graphs")
                          & (pl.col("acceptance_name") == "mv1") & (pl.col("corpus") == blog[0]["sel_corpus"]))
    assert blog[0]["mj_per_committed_token"] == pytest.approx(c["mj_per_committed_token"].mean(), rel=1e-5)
    assert c.height == 2 and "× 2 seeds" in blog[0]["support"]


def test_baseline_band_spans_opening_and_closing(gpu, gpu_figs):
    spec = gpu_figs["energy_vs_acceptance"].spec()
    band = [r for r in rows_with(spec, "base_lo", "base_hi") if r["sel_workload"] == "closed" and r["sel_batch_size"] == "B=8"
            and r["sel_corpus"] == "code" and r["sel_cuda_graphs"] == "on"]
    assert len(band) == 1
    recs = gpu.records.filter((pl.col("role") != "point") & (pl.col("workload") == "closed") & (pl.col("batch_size") == 8)
                              & (pl.col("corpus") == "code") & pl.col("cuda_graphs"))
    assert recs.height == 4  # opening + closing, two seeds
    assert band[0]["base_lo"] == pytest.approx(recs["mj_per_committed_token"].min(), rel=1e-5)
    assert band[0]["base_hi"] == pytest.approx(recs["mj_per_committed_token"].max(), rel=1e-5)
    assert band[0]["base_lo"] < band[0]["base_hi"]


def test_failed_campaign_is_in_no_figure(gpu, gpu_figs):
    failed = gpu.curves.filter(pl.col("failed_checks").list.len() > 0)
    assert failed.height and set(failed["campaign_id"]) == {rf.FAILED_CAMPAIGN}
    spec = gpu_figs["saving_vs_batch"].spec()
    # The failed campaign is seed 1 (second H200), closed, B=64, chat, graphs on: that panel has no B=64 point there.
    gpu2 = [r for r in rows_with(spec, "gpu", "batch_size", "saving_pct") if "91a0b3c4" in r["gpu"]
            and r["sel_workload"] == "closed" and r["sel_corpus"] == "chat" and r["sel_cuda_graphs"] == "on"]
    assert gpu2 and 64 not in {r["batch_size"] for r in gpu2}
    gpu1 = [r for r in rows_with(spec, "gpu", "batch_size") if "6f1c2a7e" in r["gpu"] and r["sel_workload"] == "closed"
            and r["sel_corpus"] == "chat" and r["sel_cuda_graphs"] == "on"]
    assert 64 in {r["batch_size"] for r in gpu1}


def test_saving_vs_batch_has_one_panel_per_gpu(gpu_figs):
    spec = gpu_figs["saving_vs_batch"].spec()
    titles = json.dumps(spec, ensure_ascii=False)
    assert "NVIDIA H200 · 6f1c2a7e" in titles and "NVIDIA H200 · 91a0b3c4" in titles
    body = spec["vconcat"][1]  # [slice header, panels]
    assert len(body["concat"]) == 2


def _panel(title: str, values: list[float], **props: object) -> F.alt.LayerChart:
    data = pl.DataFrame({"x": values, "y": [v * 2 for v in values]})
    return F.alt.layer(F.alt.Chart(data).mark_point().encode(x=F.alt.X("x:Q"), y=F.alt.Y("y:Q")), title=title, **props)


def test_composed_figure_validates_every_distinct_panel():
    """Validation checks each distinct panel shape once (issue 22): an invalid panel after many valid ones of
    another shape still fails, and without validation the same spec is returned."""
    slicer = F.Slicer([], [], None, [])
    good = [_panel(f"pair {i}", [1.0 + i, 2.0]) for i in range(5)]
    fine = F.ComposedChart(good, slicer, "t", ["sub"]).to_dict()
    assert len(fine["concat"]) == 5 and fine["title"]["subtitle"] == ["sub"]
    assert len(fine["datasets"]) == 5  # one dataset per panel, named as Altair names them
    bad = F.ComposedChart([*good, _panel("bad", [3.0], height="very tall")], slicer, "t", [])
    with pytest.raises(Exception, match="very tall"):
        bad.to_dict()
    assert len(bad.to_dict(validate=False)["concat"]) == 6


def test_a_valid_shape_is_checked_once_and_an_invalid_one_every_time(monkeypatch):
    """A spec's shape found valid is not checked again in the process (ADR 0238): the same figure under other
    titles, subtitles and data is one check; another mark is another; an invalid spec raises on every draw."""
    checked: list[str] = []
    real = F._TOP_LEVEL_SPECS["concat"]

    class Counting:
        @staticmethod
        def validate(views):
            checked.append(json.dumps(views, sort_keys=True))
            return real.validate(views)

    monkeypatch.setitem(F._TOP_LEVEL_SPECS, "concat", Counting)
    monkeypatch.setattr(F, "_VALID_SHAPES", set())
    slicer = F.Slicer([], [], None, [])

    def figure(title: str, mark: str = "point", **props: object) -> F.ComposedChart:
        values = [1.0 + len(title), 2.0]
        data = pl.DataFrame({"x": values, "y": [v * 2 for v in values]})
        chart = F.alt.Chart(data).encode(x=F.alt.X("x:Q"), y=F.alt.Y("y:Q"))
        chart = chart.mark_point() if mark == "point" else chart.mark_line()
        panels = [F.alt.layer(chart, title=f"{title} {i}", **props) for i in range(2)]
        return F.ComposedChart(panels, slicer, title, [f"sub {title}", "grid"])

    first = figure("pair a").to_dict()
    again = figure("pair a").to_dict()
    assert first == again and len(checked) == 1
    figure("another pair, other rows").to_dict()
    assert len(checked) == 1  # titles and data names are any string: the same shape
    figure("pair a", mark="line").to_dict()
    assert len(checked) == 2
    for _ in range(2):
        with pytest.raises(Exception, match="very tall"):
            figure("pair a", height="very tall").to_dict()
    assert len(checked) == 4  # checked, and raised, both times


def test_distinct_views_keep_one_view_per_shape():
    view = {"data": {"name": "data-a"}, "mark": "point", "title": "pair a"}
    same_shape = {"data": {"name": "data-b"}, "mark": "point", "title": "pair b"}
    other = {"data": {"name": "data-c"}, "mark": "line", "title": "pair c"}
    cut = F._distinct_views({"concat": [view, same_shape, other], "title": "t"})
    assert cut["concat"] == [same_shape, other] and cut["title"] == "t"


def test_static_exports_draw_the_default_slice_from_its_rows_alone(gpu_figs):
    """SVG and PNG show the selectors' default slice: rendered from only its rows (issue 22) they are the same
    pictures as from the whole spec, and the cut is real (the grid varies corpus, workload and graphs)."""
    dropped = 0
    for name, fig in gpu_figs.items():
        if not fig.drawn:
            continue
        spec = fig.spec()
        static = F.static_view(spec)
        rows = lambda s: sum(len(v) for v in s.get("datasets", {}).values() if isinstance(v, list))  # noqa: E731
        dropped += rows(spec) - rows(static)
        assert vlc.vegalite_to_svg(static, vl_version=F.VEGALITE_VERSION) == \
            vlc.vegalite_to_svg(spec, vl_version=F.VEGALITE_VERSION), name
    assert dropped > 0


def test_static_view_keeps_rows_a_view_reads_unfiltered():
    spec = {"params": [{"name": "p_corpus", "value": "code", "bind": {"input": "select"}}],
            "vconcat": [{"data": {"name": "a"}, "mark": "point", "transform": [{"filter": "(datum['sel_corpus'] === p_corpus)"}]},
                        {"data": {"name": "b"}, "mark": "point", "transform": [{"filter": "(datum['sel_corpus'] === p_corpus)"}]},
                        {"data": {"name": "b"}, "mark": "rule"}],
            "datasets": {"a": [{"sel_corpus": "code"}, {"sel_corpus": "news"}], "b": [{"sel_corpus": "code"}, {"sel_corpus": "news"}]}}
    static = F.static_view(spec)
    assert static["datasets"] == {"a": [{"sel_corpus": "code"}], "b": spec["datasets"]["b"]}


def test_saving_vs_batch_over_many_gpus_selects_the_gpu_instead_of_a_panel_each(gpu, monkeypatch):
    """A cluster run spreads campaigns over hundreds of GPUs: one panel per (GPU, pair) would lay out thousands of
    charts (minutes to build, issue 22); above MAX_GPU_PANELS the GPU is a drop-down, the per-GPU means unchanged."""
    few, = F.build_all(inputs_for(gpu), names=["saving_vs_batch"])
    monkeypatch.setattr(F, "MAX_GPU_PANELS", 1)  # this grid has 2 (GPU, pair) panels: now "many"
    many, = F.build_all(inputs_for(gpu), names=["saving_vs_batch"])
    spec = many.spec()
    body = spec["vconcat"][1]
    assert "concat" not in body  # one pair: one panel
    assert any(p["name"] == "sb_gpu" for p in spec["params"])
    key = ("gpu", "batch_size", "arm", "sel_workload", "sel_corpus", "sel_cuda_graphs")
    rows = lambda s: sorted((tuple(r[k] for k in key), r["saving_pct"]) for r in rows_with(s, *key, "saving_pct"))  # noqa: E731
    assert rows(spec) == rows(few.spec()) and rows(spec)


def test_tbt_targets_marked_with_lowest_energy_configuration(gpu, gpu_figs):
    spec = gpu_figs["tbt_vs_energy"].spec()
    targets = gpu.config["report"]["tbt_targets_ms"]
    rules = rows_with(spec, "target_ms", "tlabel")
    assert sorted({r["target_ms"] for r in rules}) == sorted(float(t) for t in targets)
    marks = [r for r in rows_with(spec, "label", "target_ms") if r["label"].startswith("≤")]  # a met target's label
    # Independent check on one slice: brute force over seed means of points and baselines.
    sl = gpu.curves.filter((pl.col("workload") == "closed") & (pl.col("corpus") == "code") & pl.col("cuda_graphs")
                           & (pl.col("failed_checks").list.len() == 0))
    arm = pl.when(pl.col("acceptance_name").is_null()).then(pl.col("scheme")).otherwise(pl.col("scheme") + " · " + pl.col("acceptance_name"))
    pts = sl.group_by(arm.alias("arm"), "batch_size").agg((pl.col("tpot_mean_s") * 1000).mean().alias("tbt"),
                                                          pl.col("mj_per_committed_token").mean().alias("mj"))
    base = (sl.group_by("campaign_id").agg(pl.col("batch_size").first(), (pl.col("baseline_tpot_mean_s") * 1000).first().alias("tbt"),
                                           pl.col("baseline_mj_per_committed_token").first().alias("mj"))
            .group_by("batch_size").agg(pl.col("tbt").mean(), pl.col("mj").mean()).with_columns(arm=pl.lit("baseline")))
    allc = pl.concat([pts, base.select(pts.columns)])
    for t in targets:
        best = allc.filter(pl.col("tbt") <= t).sort("mj").row(0, named=True)
        mine = [r for r in marks if r["target_ms"] == t and r["sel_workload"] == "closed" and r["sel_corpus"] == "code"
                and r["sel_cuda_graphs"] == "on"]
        assert len(mine) == 1
        assert mine[0]["mj_per_committed_token"] == pytest.approx(best["mj"], rel=1e-5)
        assert f"{best['arm']} B={best['batch_size']}" in mine[0]["label"]


def test_unmet_tbt_target_is_said_in_words(gpu):
    cfg = {**gpu.config, "report": {**gpu.config["report"], "tbt_targets_ms": [0.5]}}
    fi = F.FigureInputs.from_config(cfg, curves=gpu.curves, records=gpu.records, checks=gpu.checks)
    spec = F.tbt_vs_energy(fi).to_dict()
    labels = {r["label"] for r in rows_with(spec, "label") if "sel_workload" in r}
    assert labels == {"no configuration meets 0.5 ms"}


def test_roofline_marks_the_configured_balance_point(gpu, gpu_figs):
    spec = gpu_figs["saving_vs_tokens_per_pass"].spec()
    bp = [r for r in rows_with(spec, "x", "label") if "balance point" in r["label"]]
    assert bp and bp[0]["x"] == gpu.config["report"]["balance_point_op_per_byte"] == 206
    pts = rows_with(spec, "tokens_per_verify_pass", "saving_pct")
    # The fixture's physics: past the balance point speculation costs energy; well below it, it saves.
    past = [r["saving_pct"] for r in pts if r["tokens_per_verify_pass"] > 300]
    below = [r["saving_pct"] for r in pts if r["tokens_per_verify_pass"] < 50 and r["sel_cuda_graphs"] == "on"]
    assert past and all(s < 0 for s in past)  # non-empty: an empty selection would pass vacuously
    assert below and all(s > 0 for s in below)


def test_roofline_marks_the_measured_balance_point_of_the_gpu_that_ran_the_cells(gpu):
    """Issue 18: where rule roofline found a calibration of the GPU, its measured balance point is marked, not the
    config's 206 (the 2026-12-02 report drew 206 beside a measured 154)."""
    curves = gpu.curves.with_columns(pl.lit(154.2).alias("balance_point_op_per_byte"),
                                     pl.format("measured calibration of {}", pl.col("gpu_uuid")).alias("balance_point_source"))
    inputs = F.FigureInputs.from_config(gpu.config, curves=curves, records=gpu.records, checks=gpu.checks)
    fig = next(f for f in F.build_all(inputs, names=["saving_vs_tokens_per_pass"]))
    spec = fig.spec()
    marks = [r for r in rows_with(spec, "x", "label") if "balance point" in r["label"]]
    assert [r["x"] for r in marks] == [154.2] and marks[0]["label"] == "balance point 154 op/B"
    assert "from the hardware calibration" in json.dumps(spec) and "= 206" not in json.dumps(spec)


def test_cuda_graphs_pairs_each_configuration(gpu_figs):
    rows = rows_with(gpu_figs["cuda_graphs"].spec(), "saving_on", "saving_off", "bias_pp")
    assert len(rows) > 20
    # The fixture credits graphs-off runs with 6 points of launch overhead.
    for r in rows:
        assert r["bias_pp"] == pytest.approx(r["saving_off"] - r["saving_on"], abs=1e-3)
        assert 4 < r["bias_pp"] < 8


def test_concurrency_defaults_to_the_campaign_with_the_largest_spread(gpu_figs):
    spec = gpu_figs["concurrency_per_arm"].spec()
    params = {p["name"]: p for p in spec["params"]}
    (p,) = [p for n, p in params.items() if n.startswith("cc_")]
    assert p["value"] == rf.CONCURRENCY_DRIFT_CAMPAIGN
    rows = [r for r in rows_with(spec, "diff_pct") if r["sel_campaign_id"] == rf.CONCURRENCY_DRIFT_CAMPAIGN]
    assert {round(r["diff_pct"], 1) for r in rows if r["role"] == "point"} == {-4.0}


def test_power_timeline_shows_failed_campaign_first_and_caps_points(gpu, gpu_figs):
    spec = gpu_figs["power_timeline"].spec()
    params = [p for p in spec["params"] if p["name"].startswith("pt_")]
    assert params[0]["value"] == rf.FAILED_CAMPAIGN
    assert params[0]["bind"]["options"][0] == rf.FAILED_CAMPAIGN
    rows = rows_with(spec, "cell", "t_rel_s", "power_w")
    per_cell: dict[tuple, int] = {}
    for r in rows:
        key = (r["sel_campaign_id"], r["cell"])
        per_cell[key] = per_cell.get(key, 0) + 1
    assert max(per_cell.values()) <= F.TIMELINE_POINTS_PER_CELL + 1
    assert len({k[0] for k in per_cell}) == F.TIMELINE_MAX_CAMPAIGNS
    assert "showing 4 of 48 campaigns" in json.dumps(spec, ensure_ascii=False)


# --- what the grid cannot fill says so in one line ---------------------------------------------------

def test_cpu_demo_replaces_energy_figures_with_one_line(cpu_figs):
    for name in F.ENERGY_FIGURES:
        fig = cpu_figs[name]
        if name == "cuda_graphs":
            assert not fig.drawn and fig.reason.startswith("CUDA graphs were not varied")
            continue
        assert not fig.drawn, name
        assert fig.reason.startswith("meter: none"), (name, fig.reason)
    assert cpu_figs["acceptance_by_corpus"].drawn
    assert "open-loop" in cpu_figs["concurrency_per_arm"].reason
    for fig in cpu_figs.values():
        assert fig.drawn or (fig.reason and "\n" not in fig.reason and len(fig.reason) < 160)


def test_single_batch_size_says_so(gpu):
    c = gpu.curves.filter(pl.col("batch_size") == 8)
    fig, = F.build_all(inputs_for(gpu, curves=c), names=["saving_vs_batch"])
    assert not fig.drawn and fig.reason == "one batch size in the grid (B=8): saving vs batch needs two or more"


def test_only_synthetic_acceptance_says_so(gpu):
    c = gpu.curves.filter(pl.col("acceptance_kind").is_not_null())
    fig, = F.build_all(inputs_for(gpu, curves=c), names=["acceptance_by_corpus"])
    assert not fig.drawn and "synthetic acceptance" in fig.reason


def test_every_campaign_failed_says_so(gpu):
    c = gpu.curves.with_columns(failed_checks=pl.lit(["baseline_drift"]))
    figs = F.build_all(inputs_for(gpu, curves=c))
    for f in figs:
        if f.name in ("concurrency_per_arm", "power_timeline"):  # diagnostics read the records
            assert f.drawn
        else:
            assert not f.drawn and "failed" in f.reason, (f.name, f.reason)


# --- export ------------------------------------------------------------------------------------------

def test_export_writes_svg_for_all_png_where_asked_and_offline_html(gpu_export, cpu_figs, tmp_path):
    # conftest's export of the GPU scenario's figures, PNGs asked for GPU_EXPORT_PNG (test_figure_drawer's too)
    out, manifest, seconds, _ = gpu_export
    print(f"static + HTML export of {len(manifest['figures'])} figures: {seconds:.1f} s")
    assert "energy_vs_acceptance" in GPU_EXPORT_PNG
    for f in manifest["figures"]:
        svg = (out / f"{f['name']}.svg").read_text()
        assert svg.startswith("<svg") and "<text" in svg
        assert (out / f"{f['name']}.png").exists() == (f["name"] in GPU_EXPORT_PNG)
        if not f["drawn"]:  # the engine comparison, one engine in this grid: its one-line SVG only
            assert f["name"] == "engine_comparison" and f["files"] == ["engine_comparison.svg"]
            continue
        html = (out / f"{f['name']}.html").read_text()
        assert not re.search(r"<script[^>]+src=", html), "figure HTML must inline its scripts"
        assert "vegaEmbed" in html
    png = (out / "energy_vs_acceptance.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # Rasterized from the written SVG: the bytes vl-convert gives when it draws the static view itself.
    static = F.static_view(json.loads((out / "energy_vs_acceptance.vl.json").read_text()))
    assert png == vlc.vegalite_to_png(static, vl_version=F.VEGALITE_VERSION, scale=2)
    # A figure that could not be drawn still gets an SVG: its one line.
    m = F.export(list(cpu_figs.values()), tmp_path)
    skipped = [f for f in m["figures"] if not f["drawn"]]
    assert skipped and all(f["files"] == [f"{f['name']}.svg"] for f in skipped)
    assert "meter: none" in (tmp_path / "energy_vs_acceptance.svg").read_text()
    back, specs = F.read_manifest(tmp_path)
    assert set(specs) == {"acceptance_by_corpus"} and back == m


# --- the report, rendered (the browser test looks at it drawn) ------------------------------------

def report_inputs(s: rf.Scenario, figdir: Path) -> R.ReportInputs:
    manifest, specs = F.read_manifest(figdir)
    return R.ReportInputs(config=s.config, config_hash="fixture0000hash", records=s.records, checks=s.checks,
                          curves=s.curves, manifest=manifest, specs=specs, summary=s.summary)


@pytest.fixture(scope="module")
def gpu_report(gpu, gpu_export) -> str:
    """The GPU scenario's report from its exported figures, rendered once for the two tests that read it (the same
    call each made, about 0.6 s; the HTML is a string, read only)."""
    return R.render(report_inputs(gpu, gpu_export[0]))


def test_report_lists_failures_first_and_generated_caveats(gpu_report):
    html = gpu_report
    assert html.count('<script type="application/json" id="spec-') == 10
    assert not re.search(r"""(src|href)=["']https?:""", html), "the report must not reference the network"
    fail_at = html.index('<tr class="fail">')
    flag_at = html.index('<tr class="flag">')
    pass_at = html.index('<tr class="pass">')
    assert fail_at < flag_at < pass_at
    assert "open-loop arms differ in concurrency by up to 4.0 %" in html
    assert "1 campaign(s) failed pre-registered checks (baseline_drift)" in html
    assert "energy is the GPU board&#39;s NVML counter only" in html
    assert "NVIDIA H200 GPU-6f1c2a7e" in html and "580.105.08" in html and "vllm 0.26.0" in html
    assert "shuffled under seed 20261130" in html
    assert "624 recorded of 624 planned" in html
    # the device-time account (ADR 0038): one launch per fixture cell, each with its held time
    assert "Device time: held vs inside energy windows" in html and "held by 624 engine launch(es)" in html


def test_cpu_report_says_energy_not_measured(cpu, tmp_path):
    F.export(F.build_all(inputs_for(cpu)), tmp_path / "figures", html=False)
    html = R.render(report_inputs(cpu, tmp_path / "figures"))
    assert "meter: none — energy not measured on this machine" in html
    assert html.count('class="not-drawn" data-not-drawn=') == 10
    assert "device: cpu" in html
    assert "energy_measured failed on 1 campaign(s)" in html
    # energy_measured refuses only energy: the glance must not call that "all passed" nor a refusal.
    assert "no campaign refused" in html and "all passed" not in html


def test_report_expands_the_cell_table_once_per_config(gpu):
    """The report asks three times for the planned cells (issue 22): one expansion per config content."""
    import copy

    from specjoule.report import schemes

    table = schemes.planned_cells(gpu.config)
    assert schemes.planned_cells(copy.deepcopy(gpu.config)) is table
    fewer = {**copy.deepcopy(gpu.config), "seeds": gpu.config["seeds"][:1]}
    assert len(gpu.config["seeds"]) > 1 and 0 < len(schemes.planned_cells(fewer)) < len(table)


def test_fmt_never_prints_nan_as_a_number():
    assert R.fmt(float("nan")) == "NaN" and R.fmt(None) == "—" and R.fmt(0.0) == "0" and R.fmt(1234.5) == "1,234"


# --- against the real analysis code (aggregate → checks → derive → summary) --------------------------

@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_figures_and_report_from_the_real_analysis(kind, tmp_path):
    from specjoule import records as rec_mod
    from specjoule.analysis import aggregate, checks, derive

    s = rf.build(kind, tmp_path, timelines=False)
    import pyarrow.parquet as pq

    paths = []
    rows = list(s.records.drop([c for c in s.records.columns if c not in rec_mod.RECORD_COLUMNS]).iter_rows(named=True))
    # One file a record, each row of one validated table (to_table once: 624 one-row tables took 0.6 s, ADR 0257
    # addendum 3); a one-row slice is the table to_table([row]) makes (same schema, same values).
    table = rec_mod.to_table(rows)
    for i, row in enumerate(rows):
        p = tmp_path / "cells" / row["campaign_id"] / f"{row['cell_name']}.parquet"
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(i, 1), p)
        paths.append(p)
    records = aggregate.aggregate(paths)
    th = checks.Thresholds.from_config(s.config["checks"])
    chk = checks.run_checks(records, th)
    curves = derive.derive(records, chk, allow_failed_checks=True)
    summary = derive.summarize_seeds(curves, resamples=200)
    fi = F.FigureInputs.from_config(s.config, curves=curves, records=records, checks=chk)
    figs = rf.shared_figures(F.build_all(fi))  # each spec made (and validated) below, and read again by export
    for f in figs.values():
        if f.drawn:
            f.spec()
    if kind == "gpu":
        drawn = {n for n, f in figs.items() if f.drawn}
        # No rule roofline in this chain (no calibration): the decomposition says so instead of drawing.
        assert drawn == set(F.FIGURE_NAMES) - {"power_timeline", "engine_comparison", "energy_decomposition"}, \
            {n: f.reason for n, f in figs.items()}
        assert "no roofline columns" in figs["energy_decomposition"].reason
    else:
        assert figs["acceptance_by_corpus"].drawn and figs["energy_vs_acceptance"].reason.startswith("meter: none")
    F.export(list(figs.values()), tmp_path / "figures", html=False)
    manifest, specs = F.read_manifest(tmp_path / "figures")
    html = R.render(R.ReportInputs(config=s.config, config_hash="x", records=records, checks=chk, curves=curves,
                                   manifest=manifest, specs=specs, summary=summary))
    assert "<h2 id=\"checks\">" in html


# --- the rules under real Snakemake, and snakemake --report -----------------------------------------

def test_snakemake_figures_report_and_snakemake_report(tmp_path):
    s = rf.build("cpu", tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(rf.config_mod.read_yaml(REPO / "config" / "config.yaml")))
    base = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--configfile",
            str(tmp_path / "config.yaml"), "--cores", "1", "--allowed-rules", "figures", "variance", "report",
            "matched_latency"]
    seed_vega_bundle(tmp_path)  # read as a second run reads it: compiling it is test_figure_bundle_cache's
    t0 = time.perf_counter()
    # One Snakemake process runs the rules and then writes its own report of the run (--report-after-run): the
    # outputs and the zip a second `snakemake --report` process gave, without a second Snakemake start and plan.
    run = subprocess.run([*base, "--report", str(tmp_path / "smk.zip"), "--report-after-run", "results/report.html"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    print(f"snakemake figures + report + snakemake --report: {time.perf_counter() - t0:.1f} s")
    html = (tmp_path / "results" / "report.html").read_text()
    assert "meter: none" in html and len(s.records) == 4
    assert "wrote results/report.html" in (tmp_path / "results" / "logs" / "report.log").read_text()
    assert "acceptance_by_corpus: drawn" in (tmp_path / "results" / "logs" / "figures.log").read_text()
    import zipfile

    names = zipfile.ZipFile(tmp_path / "smk.zip").namelist()
    assert any(n.endswith("/report.html") and "/data/raw/" in n for n in names)
    assert sum(n.endswith(".svg") for n in names) == len(F.FIGURE_NAMES)


def test_the_report_inlines_the_bundle_the_figures_rule_wrote_and_compiles_its_own_otherwise(gpu, gpu_export, tmp_path):
    """The figures rule hands its compiled JavaScript bundle to the report (another process): the report is the
    same file with it as without it, and a bundle from another vl-convert version is not used."""
    figdir = gpu_export[0]
    manifest, _ = F.read_manifest(figdir)
    assert manifest["javascript_bundle"] == {"file": F.JS_BUNDLE_FILE, "vl_convert_version": vlc.__version__}
    handed = F.read_javascript_bundle(figdir, manifest)
    assert handed == vlc.javascript_bundle(vl_version=F.VEGALITE_VERSION)
    inputs = report_inputs(gpu, figdir)
    inputs.generated_at = "2026-12-02T00:00:00+00:00"  # the one line that differs between two renders
    compiled_here = R.render(inputs)
    inputs.javascript_bundle = handed
    assert R.render(inputs) == compiled_here
    inputs.javascript_bundle = "/* handed over */"
    assert "/* handed over */" in R.render(inputs)  # inlined as given, not compiled again
    older = {**manifest, "javascript_bundle": {**manifest["javascript_bundle"], "vl_convert_version": "0.0.1"}}
    assert F.read_javascript_bundle(figdir, older) is None
    assert F.read_javascript_bundle(tmp_path, manifest) is None  # the file is not there
    # An export with nothing drawn (or no HTML asked for) compiles no bundle and names none.
    assert "javascript_bundle" not in F.export(F.build_all(F.FigureInputs.from_config(
        gpu.config, curves=gpu.curves.clear(), records=gpu.records.clear(), checks=gpu.checks.clear())), tmp_path)


def test_empty_tables_give_reasons_not_crashes(gpu, tmp_path):
    empty = F.FigureInputs.from_config(gpu.config, curves=gpu.curves.clear(), records=gpu.records.clear(),
                                       checks=gpu.checks.clear())
    figs = F.build_all(empty)
    assert not any(f.drawn for f in figs)
    assert all(f.reason and "\n" not in f.reason for f in figs)
    F.export(figs, tmp_path, html=False)
    manifest, specs = F.read_manifest(tmp_path)
    html = R.render(R.ReportInputs(config=gpu.config, config_hash="x", records=gpu.records.clear(),
                                   checks=gpu.checks.clear(), curves=gpu.curves.clear(), manifest=manifest, specs=specs))
    assert "no records: nothing was measured" in html and f"0 of {len(F.FIGURE_NAMES)} drawn" in html


# --- engine as an axis (ADR 0037): FIXTURE scenario `engines`, vLLM and SGLang on one H200 -------------

MATCH = ["model_pair", "workload", "corpus", "cuda_graphs", "batch_size", "seed", "scheme", "acceptance_name"]


def test_engine_table_has_only_points_both_engines_measured(engines):
    fi = inputs_for(engines)
    t = F.engine_comparison_table(fi)
    c = engines.curves
    v, sg = c.filter(pl.col("engine") == "vllm"), c.filter(pl.col("engine") == "sglang")
    assert (v.height, sg.height) == (12, 11)  # one SGLang point left without a record
    both = v.join(sg, on=MATCH, how="semi")
    assert t.height == both.height == 11
    assert set(t["engine_a"]) == {"vllm"} and set(t["engine_b"]) == {"sglang"}
    unmatched = {r["seed"]: r["acceptance_name"] for r in
                 v.join(sg, on=MATCH, how="anti").iter_rows(named=True)}
    assert unmatched == {1: "mv5"}
    assert t.filter((pl.col("seed") == 1) & (pl.col("batch_size") == 32) & (pl.col("acceptance_name") == "mv5")).height == 0
    # Each side says which mechanism produced its acceptance, and that they differ.
    assert set(t["acceptance_mechanism_a"]) == {"vllm_synthetic_rates"}
    assert set(t["acceptance_mechanism_b"]) == {"sglang_simulate_acc_len"}
    assert not t["same_mechanism"].any()
    assert set(t["gpu_model"]) == {"NVIDIA H200"}


def test_engine_table_arithmetic(engines):
    t = F.engine_comparison_table(inputs_for(engines))
    c = engines.curves
    for r in t.iter_rows(named=True):
        for side in ("a", "b"):
            (pt,) = c.filter((pl.col("campaign_id") == r[f"campaign_id_{side}"])
                             & (pl.col("acceptance_name") == r["acceptance_name"])).iter_rows(named=True)
            assert pt["engine"] == r[f"engine_{side}"]
            base = engines.records.filter((pl.col("campaign_id") == pt["campaign_id"]) & (pl.col("role") != "point"))
            assert r[f"baseline_mj_per_committed_token_{side}"] == pytest.approx(base["mj_per_committed_token"].mean(), rel=1e-9)
            assert r[f"mj_per_committed_token_{side}"] == pytest.approx(pt["mj_per_committed_token"], rel=1e-12)
            assert r[f"energy_ratio_{side}"] == pytest.approx(
                r[f"mj_per_committed_token_{side}"] / r[f"baseline_mj_per_committed_token_{side}"], rel=1e-9)
            assert r[f"tbt_ms_{side}"] == pytest.approx(pt["tpot_mean_s"] * 1000, rel=1e-12)
            assert r[f"realized_L_{side}"] == pytest.approx(pt["realized_L"], rel=1e-12)
            assert r[f"round_time_ms_{side}"] == pytest.approx(pt["round_time_ms"], rel=1e-12)
        assert r["mj_ratio_b_over_a"] == pytest.approx(r["mj_per_committed_token_b"] / r["mj_per_committed_token_a"], rel=1e-9)
        assert r["energy_ratio_b_over_a"] == pytest.approx(r["energy_ratio_b"] / r["energy_ratio_a"], rel=1e-9)
        # The fixture's made-up engine difference comes back out (within its noise and L jitter).
        assert r["energy_ratio_b_over_a"] == pytest.approx(rf.SGLANG_RATIO_SCALE, abs=0.012)
        assert r["mj_ratio_b_over_a"] == pytest.approx(rf.SGLANG_RATIO_SCALE * rf.SGLANG_BASELINE_SCALE, abs=0.012)


def test_single_engine_grid_gives_the_reason_line(gpu, gpu_figs, cpu_figs):
    for figs in (gpu_figs, cpu_figs):
        fig = figs["engine_comparison"]
        assert not fig.drawn and fig.reason == "one engine in the grid (vllm): nothing to compare across engines"
    assert F.engine_comparison_table(inputs_for(gpu)).height == 0


def test_two_engines_without_a_matched_point_say_so(engines):
    # Drop every SGLang B=1 point and every vLLM B=32 point: both engines present, nothing matched.
    c = engines.curves.filter(((pl.col("engine") == "sglang") & (pl.col("batch_size") == 32))
                              | ((pl.col("engine") == "vllm") & (pl.col("batch_size") == 1)))
    fig, = F.build_all(inputs_for(engines, curves=c), names=["engine_comparison"])
    assert not fig.drawn and fig.reason.startswith("no point was measured on vllm and sglang")


def _layers(node) -> list[dict]:
    out = []
    if isinstance(node, dict):
        if "mark" in node:
            out.append(node)
        for v in node.values():
            out += _layers(v)
    elif isinstance(node, list):
        for v in node:
            out += _layers(v)
    return out


def _layers_and_views(node) -> list[dict]:
    """Every dict of a spec that is a view or a layer (has a mark or layers), outside the datasets."""
    out = []
    if isinstance(node, dict):
        if "mark" in node or "layer" in node:
            out.append(node)
        for k, v in node.items():
            if k != "datasets":
                out += _layers_and_views(v)
    elif isinstance(node, list):
        for v in node:
            out += _layers_and_views(v)
    return out


def test_engine_figure_draws_one_line_per_engine_per_batch(engines, eng_figs):
    fig = eng_figs["engine_comparison"]
    assert fig.drawn, fig.reason
    spec = fig.spec()
    vlc.vegalite_to_vega(spec, vl_version=F.VEGALITE_VERSION)
    lines = [l for l in _layers(spec) if (l["mark"] if isinstance(l["mark"], str) else l["mark"]["type"]) == "line"]
    assert len(lines) == 4  # (ratio, mJ/token) × (B=1, B=32)
    for l in lines:
        assert l["encoding"]["color"]["field"] == "engine" and l["encoding"]["detail"]["field"] == "engine"
        assert l["encoding"]["x"]["field"] == "configured_L"
    assert {l["encoding"]["y"]["field"] for l in lines} == {"energy_ratio", "mj_per_committed_token"}
    # A panel's batch size is in its title ("B=32"); its rows are the dataset its layers read.
    panels = [(int(node["title"].removeprefix("B=")), {v["data"]["name"] for v in [node, *node["layer"]] if "name" in v.get("data", {})})
              for node in _layers_and_views(spec) if str(node.get("title", "")).startswith("B=") and "layer" in node]
    assert len(panels) == 4 and all(len(names) == 1 for _, names in panels)
    rows = list({json.dumps(r, sort_keys=True): r for batch, names in panels for r in
                 ({**r, "batch_size": batch} for name in names for r in spec["datasets"][name])}.values())
    per_line: dict[tuple, list] = {}
    for r in rows:
        per_line.setdefault((r["batch_size"], r["engine"]), []).append(r["configured_L"])
    assert len(rows) == sum(len(v) for v in per_line.values()) == 12
    assert set(per_line) == {(b, e) for b in (1, 32) for e in ("vllm", "sglang")}
    # B=32 seed 1 has no SGLang L=5 point, so that point is the mean of one seed, on both engines.
    assert all(sorted(v) == [1.0, 3.0, 5.0] for v in per_line.values())
    for r in rows:
        exp = F.engine_comparison_table(inputs_for(engines)).filter(
            (pl.col("batch_size") == r["batch_size"]) & (pl.col("configured_L") == r["configured_L"]))
        side = "a" if r["engine"] == "vllm" else "b"
        assert r["energy_ratio"] == pytest.approx(exp[f"energy_ratio_{side}"].mean(), rel=1e-5)
        assert r["n_seeds"] == exp.height
    text = json.dumps(spec)
    assert "not the same mechanism" in text and "sglang_simulate_acc_len" in text


def test_every_figure_keeps_engines_apart(eng_figs):
    """No figure overlays two engines' curves undistinguished: each either encodes engine, selects
    one engine at a time (a bound selector), or is per campaign (the campaign id names the engine)."""
    drawn = {n: f for n, f in eng_figs.items() if f.drawn}
    assert set(drawn) == {"energy_vs_accepted_per_pass", "energy_vs_acceptance", "saving_vs_batch", "tbt_vs_energy",
                          "saving_vs_tokens_per_pass", "power_timeline", "engine_comparison", "energy_decomposition"}
    for name, fig in drawn.items():
        spec = fig.spec()
        params = {p["name"] for p in spec.get("params", [])}
        channels = [c for l in _layers(spec) for ch in l.get("encoding", {}).values()
                    for c in (ch if isinstance(ch, list) else [ch]) if isinstance(c, dict)]
        encodes = any(c.get("field") == "engine" for c in channels)
        selects = any(p.endswith("_engine") for p in params)
        per_campaign = any(p.endswith("_campaign_id") for p in params)
        assert encodes or selects or per_campaign, name
        if selects:
            (p,) = [p for p in spec["params"] if p["name"].endswith("_engine")]
            assert p["bind"]["options"] == ["vllm", "sglang"]
            # Every drawn row carries its engine slice: nothing is averaged across engines.
            data = [r for d in datasets(spec) for r in d if isinstance(r, dict) and "sel_engine" in r]
            assert {r["sel_engine"] for r in data} == {"vllm", "sglang"}, name


def test_engines_report_has_the_engines_section(engines, eng_figs, tmp_path):
    F.export(list(eng_figs.values()), tmp_path / "figures", html=False)
    html = R.render(report_inputs(engines, tmp_path / "figures"))
    drawn = sum(f.drawn for f in eng_figs.values())
    assert html.count('<script type="application/json" id="spec-') == drawn == 8
    assert html.index('<h2 id="figures">') < html.index('<h2 id="engines">') < html.index('id="fig-engine_comparison"') \
        < html.index('id="engine-comparison"') < html.index('<h2 id="tables">')
    table = html[html.index('id="engine-comparison"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 1 + 11
    assert "vllm acceptance mechanism" in table and "sglang_simulate_acc_len" in table and "vllm round ms" in table
    assert "not the same mechanism" in html
    assert "synthetic acceptance is produced differently per engine" in html
    assert "vllm 0.26.0; sglang 0.5.17" in html
    assert "engines in the records: vllm, sglang" in html  # the config's order
    # The per-configuration table keeps engines apart (an engine column, both engines in it).
    conf = html[html.index("Per configuration"):]
    conf = conf[:conf.index("</table>")]
    assert "<th>engine</th>" in conf and "<td class=\"num\">sglang</td>" in conf and "<td class=\"num\">vllm</td>" in conf


def test_single_engine_report_says_why_there_is_no_comparison(gpu_report):
    html = gpu_report
    sec = html[html.index('<h2 id="engines">'):html.index('<h2 id="tables">')]
    assert "one engine in the grid (vllm): nothing to compare across engines" in sec
    assert 'data-no-engine-table="1"' in sec


def test_derive_keeps_two_engines_with_identical_cells_apart(engines, tmp_path):
    """Real aggregate → checks → derive: cells that differ only in engine give separate curves, each
    paired with its own engine's baselines (pairing is within a campaign; the campaign id names the engine)."""
    import pyarrow.parquet as pq

    from specjoule import records as rec_mod
    from specjoule.analysis import aggregate, checks, derive

    paths = []
    for row in engines.records.drop([c for c in engines.records.columns if c not in rec_mod.RECORD_COLUMNS]).iter_rows(named=True):
        p = tmp_path / "cells" / row["campaign_id"] / f"{row['cell_name']}.parquet"
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rec_mod.to_table([row]), p)
        paths.append(p)
    records = aggregate.aggregate(paths)
    chk = checks.run_checks(records, checks.Thresholds.from_config(engines.config["checks"]))
    curves = derive.derive(records, chk, allow_failed_checks=True)
    assert curves.height == 23
    assert all(cid.startswith(eng + "-") for cid, eng in curves.select("campaign_id", "engine").iter_rows())
    for r in curves.iter_rows(named=True):
        base = records.filter((pl.col("campaign_id") == r["campaign_id"]) & (pl.col("role") != "point"))
        assert set(base["engine"]) == {r["engine"]}
        assert r["baseline_mj_per_committed_token"] == pytest.approx(base["mj_per_committed_token"].mean(), rel=1e-9)
    # Same cell on both engines: two rows, two different baselines (SGLang's fixture baseline is 6 % lower).
    twin = curves.filter((pl.col("batch_size") == 1) & (pl.col("seed") == 0) & (pl.col("acceptance_name") == "mv3"))
    assert sorted(twin["engine"]) == ["sglang", "vllm"]
    b = dict(twin.select("engine", "baseline_mj_per_committed_token").iter_rows())
    assert b["sglang"] / b["vllm"] == pytest.approx(rf.SGLANG_BASELINE_SCALE, abs=0.01)
    summary = derive.summarize_seeds(curves, resamples=200)
    assert summary.filter(pl.col("engine") == "sglang").height == summary.filter(pl.col("engine") == "vllm").height == 6
    # And the figures built from the real derive match the table built from it.
    fi = F.FigureInputs.from_config(engines.config, curves=curves, records=records, checks=chk)
    assert F.engine_comparison_table(fi).height == 11


def test_acceptance_by_corpus_over_several_pairs_exports(cpu):
    """Several pairs whose panels are sized by step: the panels keep their own category axis (a shared one failed
    Vega-Lite's layout on the 11-pair benchmark, issue 22) and the figure converts to SVG."""
    import vl_convert as vlc

    def widen(df: pl.DataFrame) -> pl.DataFrame:  # four pairs, the same cells under each name
        return pl.concat([df.with_columns(model_pair=pl.lit(f"pair{i}")) for i in range(4)], how="vertical_relaxed")

    corpora = {f"c{i}" for i in range(4)}
    many = [df.with_columns(corpus=pl.lit(c)) for df in (cpu.curves,) for c in sorted(corpora)]
    curves = widen(pl.concat(many, how="vertical_relaxed"))
    fig, = F.build_all(inputs_for(cpu, curves=curves, records=widen(cpu.records)), names=["acceptance_by_corpus"])
    assert fig.drawn, fig.reason
    spec = fig.spec()
    body = spec["vconcat"][1] if "vconcat" in spec else spec  # [slice header, panels] when a slicer shows
    assert body["resolve"]["scale"]["x"] == "independent"
    assert vlc.vegalite_to_svg(spec, vl_version=F.VEGALITE_VERSION).startswith("<svg")


# --- the data a spec ships: only the columns it reads (issue 22) ----------------------------------------

def _derived(transform: dict) -> set[str]:
    """Field names a transform creates (every ``as``, and fold's default key/value)."""
    out: set[str] = {"key", "value"} if "fold" in transform and "as" not in transform else set()

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "as":
                    out.update([v] if isinstance(v, str) else v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(transform)
    return out


def encoded_fields(spec: dict) -> list[tuple[str, str]]:
    """(dataset name, field) for every field a view reads from a named dataset: encodings, tooltips, sort keys
    (fields its own or an ancestor's transforms derive left out)."""
    out = []

    def walk(node, data, derived):
        if isinstance(node, list):
            for n in node:
                walk(n, data, derived)
            return
        if not isinstance(node, dict):
            return
        own = node.get("data")
        if isinstance(own, dict):
            data = own.get("name")
        derived = derived | {a for t in node.get("transform", []) for a in _derived(t)}
        for enc in node.get("encoding", {}).values():
            for e in enc if isinstance(enc, list) else [enc]:
                for f in (e.get("field"), (e.get("sort") or {}).get("field") if isinstance(e.get("sort"), dict) else None) \
                        if isinstance(e, dict) else ():
                    if isinstance(f, str) and data and f not in derived:
                        out.append((data, f))
        for key in ("layer", "concat", "vconcat", "hconcat", "spec"):
            if key in node:
                walk(node[key], data, derived)

    walk({k: v for k, v in spec.items() if k != "datasets"}, None, frozenset())
    return out


def test_every_encoded_field_is_in_the_data_and_the_cut_columns_draw_the_same_svg(gpu_figs, cpu_figs, eng_figs):
    cut_any = 0
    for figs in (gpu_figs, cpu_figs, eng_figs):
        for name, fig in figs.items():
            if not fig.drawn:
                continue
            spec = fig.spec()
            fields = encoded_fields(spec)
            assert fields or not spec.get("datasets"), name  # the power timeline inlines its CSV: no named data
            for data, f in fields:
                rows = spec["datasets"][data]
                assert rows and all(f in r for r in rows), (name, data, f)
            whole = fig.chart.to_dict(validate=False)  # what Altair inlines: every column it was given
            cols = lambda s: {(n, c) for n, rows in s.get("datasets", {}).items() for r in rows for c in r}  # noqa: E731
            assert cols(spec) <= cols(whole) and whole.keys() == spec.keys(), name
            assert {k: v for k, v in whole.items() if k != "datasets"} == {k: v for k, v in spec.items() if k != "datasets"}
            cut_any += len(cols(whole) - cols(spec))
    assert cut_any > 0  # the fixtures have columns no figure reads (n_seeds, energy_ratio beside ratio_text …)
    # The static pictures are byte-identical with and without the unread columns.
    for figs, name in ((gpu_figs, "energy_vs_acceptance"), (gpu_figs, "tbt_vs_energy"), (eng_figs, "engine_comparison")):
        whole = figs[name].chart.to_dict(validate=False)
        cut = F.without_unused_columns(whole)
        assert cut["datasets"] != whole["datasets"], name
        svg = lambda s: vlc.vegalite_to_svg(F.static_view(s), vl_version=F.VEGALITE_VERSION)  # noqa: E731
        assert svg(cut) == svg(whole), name


def test_a_tooltip_of_whole_rows_keeps_every_column():
    df = pl.DataFrame({"x": [1.0, 2.0], "y": [3.0, 4.0], "note": ["a", "b"]})
    plain = F.without_unused_columns(alt_chart(df).mark_point().encode(x="x:Q", y="y:Q").to_dict())
    assert {c for rows in plain["datasets"].values() for r in rows for c in r} == {"x", "y"}
    whole_rows = F.without_unused_columns(alt_chart(df).mark_point(tooltip={"content": "data"}).encode(x="x:Q", y="y:Q").to_dict())
    assert {c for rows in whole_rows["datasets"].values() for r in rows for c in r} == {"x", "y", "note"}


def alt_chart(df: pl.DataFrame):
    import altair as alt

    return alt.Chart(df)


def test_build_all_restores_altair_debug_mode_and_spec_still_validates(gpu):
    import altair as alt
    from altair.utils import schemapi

    assert schemapi.DEBUG_MODE
    F.build_all(inputs_for(gpu), names=["energy_vs_acceptance"])
    assert schemapi.DEBUG_MODE  # built without Altair's per-object validation, and the switch put back
    with schemapi.debug_mode(False):  # as build_all builds: an invalid property is not caught when made …
        chart = alt.Chart(pl.DataFrame({"x": [1.0]})).mark_point(size="big").encode(x="x:Q")
    with pytest.raises(schemapi.SchemaValidationError):  # … but when the figure's spec is made
        F.Figure("bad", "Bad", "", chart=chart).spec()
