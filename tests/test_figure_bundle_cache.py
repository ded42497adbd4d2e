"""Figure HTMLs from a bundle compiled once per vl-convert version and results tree (ADR 0204): the same bytes as
vl-convert's own offline page, and a cache that a run with another vl-convert never reads."""

from __future__ import annotations

import altair as alt
import polars as pl
import pytest
import vl_convert as vlc

from specjoule.report import figures as F


@pytest.fixture(scope="module")
def real_bundle() -> str:
    return vlc.javascript_bundle(vl_version=F.VEGALITE_VERSION)


def _figure(name: str = "f") -> F.Figure:
    # A string with a quote, a closing script tag and a non-ASCII character: what the page escapes, if anything.
    df = pl.DataFrame({"x": [1.0, 2.5e-7, 3.0], "y": [2.0, 4.0, 5.0], "label": ['a "b"', "</script>", "é"]})
    chart = alt.Chart(df).mark_point().encode(x="x:Q", y="y:Q", tooltip=["label:N"]).properties(title="t")
    return F.Figure(name, "title", "caption", chart=chart)


def test_the_page_is_the_one_vl_convert_writes_with_its_bundle(real_bundle):
    spec = _figure().spec()
    assert F.offline_html(spec, real_bundle) == vlc.vegalite_to_html(spec, vl_version=F.VEGALITE_VERSION, bundle=True)


def test_export_keeps_the_bundle_per_vl_convert_version_and_reads_it_back(real_bundle, tmp_path):
    cache = tmp_path / "cache"
    name = f"vega-bundle-vlc{vlc.__version__}-vl{F.VEGALITE_VERSION}.js"
    # Another vl-convert's bundle (a file this test writes: a stale cache after an upgrade) is never read.
    cache.mkdir()
    (cache / f"vega-bundle-vlc0.0.1-vl{F.VEGALITE_VERSION}.js").write_text("/* stale bundle of another version */")
    F.export([_figure()], tmp_path / "a", bundle_cache=cache)
    page = (tmp_path / "a/f.html").read_text()
    assert "stale bundle" not in page and real_bundle in page
    assert (cache / name).read_text() == real_bundle == (tmp_path / "a" / F.JS_BUNDLE_FILE).read_text()
    # This version's file is what the next run inlines (fault injected: a marked bundle in its place).
    (cache / name).write_text("/* the cached bundle */")
    F.export([_figure()], tmp_path / "b", bundle_cache=cache)
    assert "/* the cached bundle */" in (tmp_path / "b/f.html").read_text()
    assert (tmp_path / "b" / F.JS_BUNDLE_FILE).read_text() == "/* the cached bundle */"
    # Without a cache directory, vl-convert's own bundle, and nothing written.
    F.export([_figure()], tmp_path / "c")
    assert real_bundle in (tmp_path / "c/f.html").read_text()
    assert sorted(p.name for p in cache.iterdir()) == sorted([name, f"vega-bundle-vlc0.0.1-vl{F.VEGALITE_VERSION}.js"])


def test_an_empty_cached_bundle_is_compiled_again(real_bundle, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    path = cache / f"vega-bundle-vlc{vlc.__version__}-vl{F.VEGALITE_VERSION}.js"
    path.write_text("")
    assert F.javascript_bundle(cache) == real_bundle == path.read_text()
