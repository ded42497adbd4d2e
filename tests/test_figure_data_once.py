"""Each DataFrame of a figure is converted to Vega-Lite rows once per spec (figures.frames_converted_once, ADR
0202), and the spec is byte-identical to the one Altair's own conversion gives."""

from __future__ import annotations

import json
from collections import Counter

import altair as alt
import polars as pl
import pytest

from specjoule.report import figures as F


@pytest.mark.parametrize("figures", ["gpu_figs", "eng_figs"], ids=["gpu", "engines"])
def test_every_figures_spec_is_the_one_altairs_own_conversion_gives(figures, request):
    # conftest's figures of the report fixture's scenarios, timelines included: the ones tests/test_figures.py reads
    figs = [f for f in request.getfixturevalue(figures).values() if f.drawn]
    assert len(figs) >= 5
    for fig in figs:
        # Altair's path: its active data transformer converts and names the data of every view itself.
        altairs = F.without_unused_columns(fig.chart.to_dict(validate=True))
        ours = fig.spec()
        assert json.dumps(ours) == json.dumps(altairs), fig.name  # same datasets, same names, same order
    assert any(len(fig.spec().get("datasets", {})) > 1 for fig in figs)


def _shared_frame_figure(df: pl.DataFrame) -> F.ComposedChart:
    def panel(title: str) -> alt.LayerChart:
        base = alt.Chart(df).encode(x=alt.X("x:Q"), y=alt.Y("y:Q"))
        return alt.layer(base.mark_point(), base.mark_line(), title=title)

    return F.ComposedChart([panel("a"), panel("b"), panel("c")], F.Slicer([], [], None, []), "t", [])


def test_a_frame_many_views_share_is_converted_once_per_spec(monkeypatch):
    df = pl.DataFrame({"x": [1.0, 2.0, 3.0], "y": [2.0, 4.0, 5.0]})
    converted: Counter = Counter()
    real = alt.default_data_transformer

    def counting(data, **kw):  # a spy: Altair's own conversion, counted per frame
        converted[id(data)] += 1
        return real(data, **kw)

    monkeypatch.setattr(F.alt, "default_data_transformer", counting)
    fig = F.Figure("f", "t", "c", chart=_shared_frame_figure(df))
    spec = fig.spec()
    assert converted == Counter({id(df): 1})  # six views, one conversion
    assert list(spec["datasets"].values()) == [df.to_dicts()]
    assert F.dataset_name(df.to_dicts()) in spec["datasets"]


def test_a_spec_after_the_data_changed_carries_the_new_data():
    """Nothing is kept from one spec to the next: a chart given other rows is converted again."""
    first = pl.DataFrame({"x": [1.0, 2.0], "y": [2.0, 4.0]})
    fig = F.Figure("f", "t", "c", chart=_shared_frame_figure(first))
    before = fig.spec()
    second = pl.DataFrame({"x": [7.0, 8.0], "y": [1.0, 0.5]})
    fig.chart = _shared_frame_figure(second)
    after = fig.spec()
    assert list(before["datasets"].values()) == [first.to_dicts()]
    assert list(after["datasets"].values()) == [second.to_dicts()]
    # Altair's transformer is active again once a spec is made: a plain to_dict inlines the rows itself.
    plain = alt.Chart(second).mark_point().encode(x="x:Q").to_dict()
    assert list(plain["datasets"].values()) == [second.to_dicts()]
    assert not alt.data_transformers.active.startswith(F._CONVERT_ONCE)
    assert not [n for n in alt.data_transformers.names() if n.startswith(F._CONVERT_ONCE)]


def test_a_spec_made_while_another_is_made_keeps_each_its_own_rows():
    outer_df = pl.DataFrame({"x": [1.0, 2.0], "y": [2.0, 4.0]})
    inner_df = pl.DataFrame({"x": [9.0], "y": [8.0]})
    with F.frames_converted_once() as outer:
        first = alt.Chart(outer_df).mark_point().encode(x="x:Q").to_dict(context={"datasets": outer})
        with F.frames_converted_once() as inner:
            alt.Chart(inner_df).mark_point().encode(x="x:Q").to_dict(context={"datasets": inner})
        second = alt.Chart(outer_df).mark_line().encode(x="x:Q").to_dict(context={"datasets": outer})
    assert list(outer.values()) == [outer_df.to_dicts()] and list(inner.values()) == [inner_df.to_dicts()]
    assert first["data"] == second["data"] == {"name": F.dataset_name(outer_df.to_dicts())}
