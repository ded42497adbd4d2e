"""The report drawn by a real headless Chromium (Debian ``chromium``, installed by
scripts/install_system_deps.sh): no console errors, every drawable chart drawn, nothing fetched from
the network, a screenshot that is not blank. Screenshots land in a temporary directory (printed),
or in $SPECJOULE_ARTIFACTS when set.

Inputs are FIXTURE tables (tests/report_fixtures.py): realistic shapes, made-up numbers.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import report_fixtures as rf  # noqa: E402

from specjoule.report import figures as F  # noqa: E402
from specjoule.report import render as R  # noqa: E402
from tools import browser as B  # noqa: E402

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium():
    # No skip: `make test` installs chromium first; without it this fails saying how to install it.
    B.find_chromium()
    with B.Chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    env = os.environ.get("SPECJOULE_ARTIFACTS")
    out = Path(env) if env else tmp_path_factory.mktemp("report-artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


def build_report(kind: str, root: Path) -> tuple[Path, dict]:
    s = rf.build(kind, root)
    tl, note = F.load_timelines(s.timeline_paths, s.records, s.checks)
    fi = F.FigureInputs.from_config(s.config, curves=s.curves, records=s.records, checks=s.checks, timelines=tl,
                                    timeline_note=note, summary=s.summary)
    F.export(F.build_all(fi), root / "results" / "figures", png=("energy_vs_acceptance",))
    manifest, specs = F.read_manifest(root / "results" / "figures")
    html = R.render(R.ReportInputs(config=s.config, config_hash="fixture0000hash", records=s.records, checks=s.checks,
                                   curves=s.curves, manifest=manifest, specs=specs, summary=s.summary,
                                   variance=s.variance))
    path = root / "results" / "report.html"
    R.write_atomic(path, html)
    return path, manifest


def assert_not_blank(png: bytes, boxes: list[dict]) -> None:
    whole = B.blankness(png)
    assert whole["non_white"] > 0.03 and whole["colors"] > 30, whole
    for box in boxes:
        part = B.blankness(png, box)
        # A drawn chart has axes, marks and text: well above a blank box's 0 %.
        assert part["non_white"] > 0.02 and part["colors"] > 8, (box["name"], part)


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory) -> tuple[Path, dict]:
    return build_report("gpu", tmp_path_factory.mktemp("gpu"))


def test_gpu_report_draws_every_chart_without_errors(chromium, gpu_report, artifacts):
    path, manifest = gpu_report
    result = chromium.open(path)
    shot = artifacts / "report-gpu.png"
    shot.write_bytes(result.screenshot)
    print(f"\nreport {path.stat().st_size} bytes, drawn in {result.elapsed_s:.1f} s; screenshot {shot}")
    assert result.render_done, "the page never set data-render-done"
    assert result.all_errors == []
    assert result.external_requests == []
    assert len(manifest["figures"]) == len(F.FIGURE_NAMES) == 11
    assert result.charts_expected == result.charts_drawn == result.svg_charts == 10
    assert result.not_drawn == ["engine_comparison"]  # one engine in this grid
    assert len(result.chart_boxes) == 10 and all(b["height"] > 100 for b in result.chart_boxes)
    assert_not_blank(result.screenshot, result.chart_boxes)


def test_cpu_report_draws_one_chart_and_says_why_not_the_others(chromium, tmp_path, artifacts):
    path, manifest = build_report("cpu", tmp_path)
    result = chromium.open(path)
    (artifacts / "report-cpu.png").write_bytes(result.screenshot)
    assert result.render_done and result.all_errors == [] and result.external_requests == []
    assert result.charts_expected == result.charts_drawn == result.svg_charts == 1
    assert sorted(result.not_drawn) == sorted(set(F.FIGURE_NAMES) - {"acceptance_by_corpus"})
    assert_not_blank(result.screenshot, result.chart_boxes)


def test_engines_report_draws_the_engine_comparison(chromium, tmp_path, artifacts):
    """FIXTURE scenario `engines` (vLLM and SGLang on one H200, made-up numbers)."""
    path, manifest = build_report("engines", tmp_path)
    result = chromium.open(path)
    (artifacts / "report-engines.png").write_bytes(result.screenshot)
    assert result.render_done and result.all_errors == [] and result.external_requests == []
    drawn = [f["name"] for f in manifest["figures"] if f["drawn"]]
    assert "engine_comparison" in drawn and len(drawn) == 8
    assert result.charts_expected == result.charts_drawn == result.svg_charts == 8
    assert sorted(result.not_drawn) == sorted(set(F.FIGURE_NAMES) - set(drawn))
    assert_not_blank(result.screenshot, result.chart_boxes)


def test_schemes_report_draws_the_papers_figure_and_the_scheme_tables(chromium, tmp_path, artifacts):
    """FIXTURE scenario `schemes` (five schemes, three families, two engines, replicates, unsupported cells)."""
    path, manifest = build_report("schemes", tmp_path)
    result = chromium.open(path)
    (artifacts / "report-schemes.png").write_bytes(result.screenshot)
    print(f"\nschemes report {path.stat().st_size} bytes, drawn in {result.elapsed_s:.1f} s")
    assert result.render_done and result.all_errors == [] and result.external_requests == []
    drawn = [f["name"] for f in manifest["figures"] if f["drawn"]]
    assert drawn[0] == "energy_vs_accepted_per_pass" and "cuda_graphs" in drawn and "energy_decomposition" in drawn and len(drawn) == 9
    assert result.charts_expected == result.charts_drawn == result.svg_charts == 9
    assert sorted(result.not_drawn) == ["concurrency_per_arm", "power_timeline"]
    assert_not_blank(result.screenshot, result.chart_boxes)


def test_standalone_figure_html_renders_offline(chromium, gpu_report):
    path, _ = gpu_report
    result = chromium.open(path.parent / "figures" / "energy_vs_acceptance.html", ready=B.EMBED_READY)
    assert result.render_done and result.all_errors == [] and result.external_requests == []
    assert result.svg_charts == 1
    assert_not_blank(result.screenshot, result.chart_boxes)


# --- the harness itself can fail ---------------------------------------------------------------------

def test_harness_reports_script_errors_network_requests_and_blank_pages(chromium, tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("""<!DOCTYPE html><html><body data-render-done="0">
      <script src="https://cdn.jsdelivr.net/npm/vega@6"></script>
      <script>console.error("boom from console"); undefinedFunction();</script>
      <script>document.body.setAttribute('data-render-done', '1');</script></body></html>""")
    result = chromium.open(broken, timeout=20)
    assert any("undefinedFunction" in e for e in result.exceptions), result.exceptions
    assert any("boom from console" in e for e in result.console_errors), result.console_errors
    assert any(u.startswith("https://cdn.jsdelivr.net/") for u in result.external_requests)
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body data-render-done='1'></body></html>")
    result = chromium.open(blank, timeout=20)
    assert result.all_errors == []
    with pytest.raises(AssertionError):
        assert_not_blank(result.screenshot, [])


def test_report_with_a_chart_vega_cannot_draw_counts_it_as_an_error(chromium, gpu_report, tmp_path):
    path, _ = gpu_report
    fig_dir = tmp_path / "figures"
    shutil.copytree(path.parent / "figures", fig_dir)
    # A spec Vega-Lite accepts but Vega cannot evaluate at runtime: a filter calling an unknown function.
    spec_path = fig_dir / "acceptance_by_corpus.vl.json"
    spec_path.write_text(spec_path.read_text().replace('"transform":[', '"transform":[{"filter":"noSuchFunction(datum.x)"},', 1))
    s = rf.build("gpu", tmp_path / "t", timelines=False)
    manifest, specs = F.read_manifest(fig_dir)
    html = R.render(R.ReportInputs(config=s.config, config_hash="x", records=s.records, checks=s.checks, curves=s.curves,
                                   manifest=manifest, specs=specs))
    bad = tmp_path / "report.html"
    bad.write_text(html)
    result = chromium.open(bad)
    assert result.render_done
    assert result.charts_drawn == 9 and result.charts_expected == 10
    assert any("acceptance_by_corpus" in e for e in result.page_errors), result.page_errors
