"""The figures: each a pure function of the tables the analysis writes.

Every builder takes :class:`FigureInputs` (curves, records, checks, timelines, config) and returns an
Altair chart, or raises :class:`CannotDraw` with one line saying why the grid cannot fill it —
never empty axes (ADR 0030). Points are per-configuration **means over replicates** (windows, seeds,
engine replicates); whiskers are the summary's 95 % interval where the point is one summary
configuration, else the replicates' min–max (ADR 0090; spread.point_stats). Grid axes a figure does not encode (workload, corpus, CUDA graphs …)
become drop-down selectors in the interactive view; the static export shows their defaults and
prints the slice on the chart (ADR 0032).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl
from altair.utils.schemapi import debug_mode

from specjoule import axes
from specjoule.report import numbers
from specjoule.report.spread import band_note, point_stats

# Altair's default row cap (5000) would silently refuse a big grid's timelines; the data are
# bounded by construction here instead (seed means, down-sampled timelines, capped campaigns).
alt.data_transformers.disable_max_rows()

VEGALITE_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])

BASELINE_COLOR = "#7f7f7f"
# Its failure refuses only the energy columns, not the campaign (specjoule.analysis.checks.ENERGY_CHECK).
ENERGY_CHECK = "energy_measured"
ENERGY_FIGURES = (
    "energy_vs_accepted_per_pass",
    "energy_vs_acceptance",
    "saving_vs_batch",
    "tbt_vs_energy",
    "saving_vs_tokens_per_pass",
    "cuda_graphs",
    "power_timeline",
)
ARM_LABELS = {"minvar": "minimum-variance", "geometric": "geometric", "rates": "explicit rates"}
# Axis labels are declared with the axes (specjoule.axes); the other dimensions a figure slices by here.
DIM_LABELS = {
    **axes.LABELS,
    "gpu": "GPU",
    "campaign_id": "campaign",
    "gpu_model": "GPU",
    "acceptance_kind": "acceptance",
}
CONFIG_KEYS = list(axes.READING_KEYS)
TIMELINE_MAX_CAMPAIGNS = 4
TIMELINE_POINTS_PER_CELL = 240
# Record columns a curve point carries (wave 2, CONTEXT.md); where curves.parquet does not, the
# figures read them from the point's own record by cell_id.
RECORD_POINT_COLUMNS = (
    "target_family",
    "target_moe",
    "target_architecture",
    "verify_width",
    "drafted_per_committed",
    "draft_passes_per_round",
    "window_index",
    "engine_replicate",
)
# The paper's per-pass quantities, shown in the curve tooltips (issue 16): column → (title, format).
PER_PASS_TOOLTIPS = {
    "verify_width": ("verify width (tokens / request / pass)", ".2f"),
    "accepted_per_verification": ("accepted per verify pass", ".3f"),
    "drafted_per_committed": ("drafted per committed token", ".3f"),
    "draft_passes_per_round": ("draft passes per round", ".0f"),
    "tokens_per_verify_pass": ("tokens per verify pass (batch)", ".1f"),
    # Per request-step (ADR 0256): curves derived before it lack them, and the tooltips leave them out there.
    "drafted_step_share": ("drafted share of steps", ".3f"),
    "committed_per_step": ("committed per step", ".3f"),
    # ... and per decode step, bounded (ADR 0256 addendum 2): closed batch only, null (so left out) elsewhere.
    "drafted_decode_share_low": ("drafted share of decode steps, at least", ".3f"),
    "drafted_decode_share_high": ("drafted share of decode steps, at most", ".3f"),
}
FAMILY_UNKNOWN = "family not recorded"


class CannotDraw(Exception):
    """The grid cannot fill this figure; the message is the one line the reader sees instead."""


@dataclass
class FigureInputs:
    curves: pl.DataFrame
    records: pl.DataFrame
    checks: pl.DataFrame | None = None
    timelines: pl.DataFrame | None = None  # load_timelines(): down-sampled, with campaign_id/cell_name
    report_config: dict = field(default_factory=dict)  # config["report"]
    checks_config: dict = field(default_factory=dict)  # config["checks"]
    timeline_note: str = ""  # which campaigns load_timelines() kept, for the subtitle
    axis_order: dict[str, list] = field(default_factory=dict)  # config order of names (corpora, workloads …)
    summary: pl.DataFrame | None = None  # curves_summary.parquet: means and intervals per configuration (ADR 0090)

    @cached_property
    def points(self) -> pl.DataFrame:
        """The curves a figure may draw: points of campaigns that failed a pre-registered check are
        in curves.parquet only when ``allow_failed_checks`` let them through, and no figure shows
        them (ADR 0030); the report's tables and caveats do. Record columns the curves lack
        (RECORD_POINT_COLUMNS) come from each point's record."""
        c = self.curves
        if c.height and "failed_checks" in c.columns:
            c = c.filter(pl.col("failed_checks").list.len().fill_null(0) == 0)
        return with_record_columns(c, self.records)

    def stats(
        self, df: pl.DataFrame, keys: Sequence[str], values: Sequence[str], extra_means: Sequence[str] = ()
    ) -> pl.DataFrame:
        """Configuration means with the summary's interval where it applies (spread.point_stats)."""
        return point_stats(df, keys, values, self.summary, extra_means=extra_means)

    @classmethod
    def from_config(cls, config: dict, **tables: Any) -> FigureInputs:
        """Inputs with the report/checks sections and the config's own order of grid names."""
        order = {
            "engine": list(config.get("engines", [])),
            "model_pair": list(config.get("models", {})),
            "workload": list(config.get("workloads", {})),
            "corpus": list(config.get("corpora", {})),
            "scheme": list(config.get("schemes", {})),
        }
        return cls(
            report_config=config.get("report", {}), checks_config=config.get("checks", {}), axis_order=order, **tables
        )


@dataclass(frozen=True)
class FigureDef:
    name: str
    title: str
    caption: str
    build: Callable[[FigureInputs], ComposedChart | alt.TopLevelMixin]  # an Altair chart where one view suffices
    needs_energy: bool


@dataclass
class Figure:
    name: str
    title: str
    caption: str
    chart: ComposedChart | alt.TopLevelMixin | None = None
    reason: str | None = None  # set when the figure could not be drawn

    @property
    def drawn(self) -> bool:
        return self.chart is not None

    def spec(self) -> dict:
        """The Vega-Lite spec, validated against Altair's schema (raises on an invalid spec)."""
        if self.chart is None:
            raise ValueError(f"figure {self.name} was not drawn: {self.reason}")
        with frames_converted_once() as datasets:
            spec = self.chart.to_dict(validate=True, context={"datasets": datasets})
        return without_unused_columns(spec)


def dataset_name(values: list) -> str:
    """The name Altair gives an inline dataset (altair.vegalite.v6.api._dataset_name): a hash of its rows."""
    if values == [{}]:
        return "empty"
    blob = json.dumps(values, sort_keys=True, default=str)
    return "data-" + hashlib.sha256(blob.encode()).hexdigest()[:32]


@contextmanager
def frames_converted_once() -> Iterator[dict[str, Any]]:
    """Altair's data conversion with each DataFrame converted and named once; yields the ``datasets`` dict to
    hand to ``to_dict`` as ``context={"datasets": …}``.

    A figure gives one DataFrame to many views (a panel per slice, a layer per mark): Altair converts it to
    rows (narwhals sanitizing, ``to_dicts``) and hashes the rows' JSON for the dataset's name at every view,
    290 times for 123 frames on the paper-scale benchmark, a third of the figures' build-and-spec CPU (ADR
    0202). Here a frame seen before gives its name at once; the rows go into ``datasets`` at the place
    Altair's consolidation would put them (first use), so the spec is byte-identical
    (tests/test_figures.py compares it with Altair's own conversion)."""
    datasets: dict[str, Any] = {}
    seen: dict[int, tuple[Any, dict[str, Any]]] = {}

    def convert(data: Any) -> dict[str, Any]:
        hit = seen.get(id(data))
        if hit is None or hit[0] is not data:  # the frame is held in ``seen``: its id is not reused meanwhile
            converted = alt.default_data_transformer(data, max_rows=None)
            if not (isinstance(converted, dict) and converted.keys() == {"values"}):
                return converted  # another shape (a URL, a format): Altair consolidates it as before
            values = converted["values"]
            hit = seen[id(data)] = (data, {"name": dataset_name(values), "values": values})
        named = hit[1]
        datasets[named["name"]] = named["values"]
        return {"name": named["name"]}

    # A name of its own per spec (a spec made inside another keeps each its own rows), unregistered after.
    name = f"{_CONVERT_ONCE}-{id(datasets)}"
    alt.data_transformers.register(name, convert)
    try:
        with alt.data_transformers.enable(name):
            yield datasets
    finally:
        alt.data_transformers.register(name, None)


_CONVERT_ONCE = "specjoule_convert_once"


def _string_values(node: Any, out: list[str]) -> None:
    """Every string value under ``node`` (dict keys aside: a Vega-Lite spec names a field only in a value)."""
    if isinstance(node, str):
        out.append(node)
    elif isinstance(node, dict):
        for v in node.values():
            _string_values(v, out)
    elif isinstance(node, list):
        for v in node:
            _string_values(v, out)


def _shows_whole_rows(node: Any) -> bool:
    """Whether a mark's tooltip lists every field of its row (``tooltip: true`` / ``{"content": "data"}``)."""
    if isinstance(node, list):
        return any(_shows_whole_rows(v) for v in node)
    if not isinstance(node, dict):
        return False
    tip = node.get("tooltip")
    if tip is True or (isinstance(tip, dict) and tip.get("content") == "data"):
        return True
    return any(_shows_whole_rows(v) for v in node.values())


def without_unused_columns(spec: dict) -> dict:
    """The spec with each dataset's columns cut to those the spec names somewhere outside the datasets.

    Altair inlines every column of the DataFrame a chart is given, and a field a figure neither encodes,
    lists in a tooltip, filters, sorts nor transforms is bytes in every row of the spec, the figure's HTML and
    the report (issue 22). A column is kept when its name occurs inside any string of the spec (a field
    name, an expression such as ``datum['sel_corpus']``, a title): a superset of the fields Vega reads, so
    nothing drawn changes. A spec whose tooltip shows whole rows keeps every column."""
    datasets = spec.get("datasets")
    rest = {k: v for k, v in spec.items() if k != "datasets"}
    if not datasets or _shows_whole_rows(rest):
        return spec
    strings: list[str] = []
    _string_values(rest, strings)
    text = "\x00".join(strings)
    cut = {}
    for name, rows in datasets.items():
        if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
            columns = dict.fromkeys(c for r in rows for c in r)
            used = {c for c in columns if c in text}
            if len(used) < len(columns):
                rows = [{c: v for c, v in r.items() if c in used} for r in rows]
        cut[name] = rows
    return {**spec, "datasets": cut}


# --- shared helpers -----------------------------------------------------------------------------------


def with_record_columns(curves: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """Curves plus the RECORD_POINT_COLUMNS they lack, from each point's record (by cell_id)."""
    missing = [c for c in RECORD_POINT_COLUMNS if c not in curves.columns and c in records.columns]
    if not missing or curves.height == 0 or "cell_id" not in curves.columns or "cell_id" not in records.columns:
        return curves
    return curves.join(records.select("cell_id", *missing).unique("cell_id", keep="first"), on="cell_id", how="left")


def _with_family(df: pl.DataFrame) -> pl.DataFrame:
    """``family`` (target_family, or FAMILY_UNKNOWN for records written before it existed) and ``moe``."""
    fam = pl.col("target_family").fill_null(FAMILY_UNKNOWN) if "target_family" in df.columns else pl.lit(FAMILY_UNKNOWN)
    moe = pl.col("target_moe") if "target_moe" in df.columns else pl.lit(None, pl.Boolean)
    return df.with_columns(family=fam, moe=moe)


def _per_pass_tooltips(df: pl.DataFrame) -> list[alt.Tooltip]:
    """Tooltips for the per-pass quantities this data carries (none for columns all null or absent)."""
    return [
        alt.Tooltip(f"{col}:Q", title=title, format=fmt)
        for col, (title, fmt) in PER_PASS_TOOLTIPS.items()
        if col in df.columns and df[col].drop_nulls().len()
    ]


def _interval_text(df: pl.DataFrame, value: str, out: str) -> pl.DataFrame:
    """``out``: the value and its whiskers as text rounded to the interval (numbers.round_to_interval)."""
    texts = []
    for v, lo, hi, band in df.select(value, f"{value}_lo", f"{value}_hi", f"{value}_band").iter_rows():
        if v is None:
            texts.append(None)
            continue
        if band == "range":  # not an interval: the value alone, then the replicates' span at its precision
            r = numbers.round_to_interval(v, lo, hi)
            texts.append(f"{r.value} (replicates {r.lo} – {r.hi}, no interval)")
        else:
            texts.append(
                numbers.round_to_interval(v, lo if band == "ci" else None, hi if band == "ci" else None).text()
            )
    return df.with_columns(pl.Series(out, texts, dtype=pl.String))


def _errorbars(
    pts: alt.Chart, value: str, *, x: Any = None, y: Any = None, title: str, color: Any = None, horizontal: bool = False
) -> alt.Chart:
    """Whiskers from ``<value>_lo`` to ``<value>_hi`` where the point has them (ADR 0090)."""
    valid = f"isValid(datum['{value}_lo']) && isValid(datum['{value}_hi'])"
    enc: dict[str, Any] = {}
    if horizontal:
        enc = {"y": y, "x": alt.X(f"{value}_lo:Q", title=title), "x2": alt.X2(f"{value}_hi:Q")}
    else:
        enc = {"x": x, "y": alt.Y(f"{value}_lo:Q", title=title), "y2": alt.Y2(f"{value}_hi:Q")}
    if color is not None:
        enc["color"] = color
    return pts.transform_filter(valid).mark_errorbar(ticks=True).encode(**enc)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "—"
    return str(value)


def no_energy_reason(inputs: FigureInputs) -> str:
    """Why there is no energy to draw, from the data (the same line the report's caveats use)."""
    recs = inputs.records
    if recs.height and "meter" in recs.columns and (recs["meter"] == "none").all():
        devices = sorted(set(recs["device"].drop_nulls().to_list())) if "device" in recs.columns else []
        where = f" ({', '.join(devices)})" if devices else ""
        return f"meter: none — energy not measured on this machine{where}"
    curves = inputs.points
    if curves.height == 0:
        return "no drawable points: " + _refused_summary(inputs)
    reasons = (
        sorted(set(curves["energy_refused_reason"].drop_nulls().to_list()))
        if "energy_refused_reason" in curves.columns
        else []
    )
    if reasons:
        return "energy refused for every point: " + "; ".join(reasons)
    return "no cell has energy per committed token"


def _refused_summary(inputs: FigureInputs) -> str:
    checks = inputs.checks
    if checks is None or checks.height == 0:
        return "derive produced no rows"
    failed = checks.filter((pl.col("status") == "fail") & (pl.col("check") != ENERGY_CHECK))
    if failed.height == 0:
        return "the grid has no speculative scheme" if inputs.records.height else "no records"
    names = sorted(set(failed["check"].to_list()))
    n = failed["campaign_id"].n_unique()
    return f"{n} campaign(s) failed checks: {', '.join(names)}"


def _energy_curves(inputs: FigureInputs) -> pl.DataFrame:
    c = _points(inputs)
    c = c.filter(pl.col("mj_per_committed_token").is_not_null() & pl.col("energy_ratio").is_not_null())
    if c.height == 0:
        raise CannotDraw(no_energy_reason(inputs))
    return c


def _points(inputs: FigureInputs) -> pl.DataFrame:
    """Drawable points, or CannotDraw saying why there are none."""
    if inputs.curves.height == 0:
        if _no_energy(inputs) and inputs.records.height == 0:
            raise CannotDraw(no_energy_reason(inputs))
        raise CannotDraw("no speculative points in the curves: " + _refused_summary(inputs))
    c = inputs.points
    if c.height == 0:
        raise CannotDraw(
            "every point belongs to a campaign that failed a pre-registered check (" + _refused_summary(inputs) + ")"
        )
    return c


def _no_energy(inputs: FigureInputs) -> bool:
    recs = inputs.records
    return bool(recs.height and "meter" in recs.columns and (recs["meter"] == "none").all())


def gpu_labels(records: pl.DataFrame) -> dict[str, str]:
    """cell_id → a readable GPU label: the model name, plus a short UUID when one name covers
    several boards (so per-GPU panels tell two H200s apart)."""
    if records.height == 0 or "gpu_uuid" not in records.columns:
        return {}
    rows = records.select("cell_id", "gpu_uuid", "gpu_names").to_dicts()
    names_by_uuid: dict[str, str] = {}
    for r in rows:
        if r["gpu_uuid"]:
            names_by_uuid[r["gpu_uuid"]] = " + ".join(r["gpu_names"] or []) or "GPU"
    per_name: dict[str, set[str]] = {}
    for uuid, name in names_by_uuid.items():
        per_name.setdefault(name, set()).add(uuid)
    out = {}
    for r in rows:
        uuid = r["gpu_uuid"]
        if not uuid:
            out[r["cell_id"]] = "no GPU"
            continue
        name = names_by_uuid[uuid]
        short = uuid.split(",")[0].removeprefix("GPU-")[:8]
        out[r["cell_id"]] = f"{name} · {short}" if len(per_name[name]) > 1 else name
    return out


def _with_gpu(df: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    labels = gpu_labels(records)
    fallback = pl.col("gpu_uuid").fill_null("no GPU") if "gpu_uuid" in df.columns else pl.lit("no GPU")
    mapped = (
        pl.col("cell_id").replace_strict(labels, default=None, return_dtype=pl.String)
        if labels
        else pl.lit(None, pl.String)
    )
    return df.with_columns(gpu=pl.coalesce(mapped, fallback))


def _arm_label() -> pl.Expr:
    """scheme, or scheme · acceptance vector for synthetic sweeps."""
    return (
        pl.when(pl.col("acceptance_name").is_null())
        .then(pl.col("scheme"))
        .otherwise(pl.col("scheme") + pl.lit(" · ") + pl.col("acceptance_name"))
    )


@dataclass
class Slicer:
    """Drop-down selectors for grid axes a figure does not encode (one slice shown at a time)."""

    params: list[alt.Parameter]
    filters: list[Any]
    header: alt.Chart | None  # "showing: corpus code · CUDA graphs on", live in the interactive view
    constant: list[str]  # "corpus code" for axes with one value (said in the subtitle)

    @cached_property
    def transforms(self) -> list[Any]:
        """The filters as Vega-Lite filter transforms, built once: Altair parses a predicate each time
        transform_filter is called, and a many-panel figure filters every layer of every panel."""
        chart = alt.Chart()
        for f in self.filters:
            chart = chart.transform_filter(f)
        return list(chart.transform) if self.filters else []


def _dim_label_expr(dim: str) -> pl.Expr:
    if dim == "cuda_graphs":
        return pl.when(pl.col(dim)).then(pl.lit("on")).otherwise(pl.lit("off"))
    if dim == "batch_size":
        return pl.lit("B=") + pl.col(dim).cast(pl.String)
    return pl.col(dim).cast(pl.String).fill_null("—")


def _default_slice(dim: str, labels: list[str]) -> str:
    # Production serving runs with CUDA graphs on (the paper measured the bias of turning them off).
    if dim == "cuda_graphs" and "on" in labels:
        return "on"
    return labels[0]


def make_slicer(
    df: pl.DataFrame,
    dims: Iterable[str],
    *,
    name: str,
    defaults: dict[str, str] | None = None,
    order: dict[str, list] | None = None,
) -> tuple[pl.DataFrame, Slicer]:
    """Add ``sel_<dim>`` label columns; for each dim with several values, a bound selector whose
    options follow the config's order (then sorted), the first being the static view's slice."""
    params, filters, shown, constant = [], [], [], []
    for dim in dims:
        if dim not in df.columns:
            continue
        col = f"sel_{dim}"
        df = df.with_columns(_dim_label_expr(dim).alias(col))
        pairs = df.select(dim, col).unique().sort(dim, nulls_last=True).rows()
        rank = {v: i for i, v in enumerate((order or {}).get(dim, []))}
        pairs.sort(key=lambda p: (rank.get(p[0], len(rank)), p[0] is None))
        labels = list(dict.fromkeys(label for _, label in pairs))
        if len(labels) <= 1:
            if labels:
                constant.append(f"{DIM_LABELS.get(dim, dim)} {labels[0]}")
            continue
        pname = f"{name}_{dim}"
        default = (defaults or {}).get(dim) or _default_slice(dim, labels)
        p = alt.param(
            name=pname, value=default, bind=alt.binding_select(options=labels, name=f"{DIM_LABELS.get(dim, dim)} ")
        )
        params.append(p)
        filters.append(alt.datum[col] == p)
        shown.append((DIM_LABELS.get(dim, dim), pname))
    header = None
    if shown:
        expr = " + ' · ' + ".join(f"'{label} ' + {pname}" for label, pname in shown)
        header = (
            alt.Chart(alt.Data(values=[{}]))
            .mark_text(
                align="left",
                baseline="middle",
                x=0,
                y=6,
                fontSize=11,
                color="#444",
                text=alt.ExprRef(expr=f"'showing: ' + {expr}"),
            )
            .properties(height=12, width=10, view=alt.ViewConfig(stroke=None))
        )
    return df, Slicer(params, filters, header, constant)


def _slim(df: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    """Only the columns a chart uses (plus its slice labels), floats to 6 significant digits: the
    data is inlined into every spec and the report."""
    keep = list(
        dict.fromkeys(
            [c for c in cols if c in df.columns] + [c for c in df.columns if c.startswith("sel_") and c not in cols]
        )
    )
    out = df.select(keep)
    return out.with_columns(
        [pl.col(c).round_sig_figs(6) for c, t in out.schema.items() if t in (pl.Float64, pl.Float32)]
    )


def _apply_filters(chart: alt.Chart, slicer: Slicer) -> alt.Chart:
    """The chart with the slicer's filters appended to its transforms (what transform_filter does, per filter)."""
    if not slicer.filters:
        return chart
    out = chart.copy(deep=False)
    out.transform = [*([] if out.transform is alt.Undefined else out.transform), *slicer.transforms]
    return out


# The top-level schema a composed spec is checked against, by its composition key.
_TOP_LEVEL_SPECS: dict[str, Any] = {
    "vconcat": alt.TopLevelVConcatSpec,
    "hconcat": alt.TopLevelHConcatSpec,
    "concat": alt.TopLevelConcatSpec,
    "layer": alt.TopLevelLayerSpec,
    "facet": alt.TopLevelFacetSpec,
    "unit": alt.TopLevelUnitSpec,
}


@dataclass
class ComposedChart:
    """A figure: its panels (Altair charts) under one title, with the slicer's selectors and the shared config.

    Altair copies a chart's whole tree each time a chart is composed, configured or converted (every
    ``concat``, ``properties``, ``configure_*`` and each nesting level of ``to_dict``), which made a
    many-panel figure of a paper-scale grid cost seconds. Here each panel is converted once, its data
    moved into the shared ``datasets`` as Altair names them, and the top level is assembled as Altair
    lays it out — the same Vega-Lite spec (issue 22)."""

    panels: list[alt.TopLevelMixin]
    slicer: Slicer
    title: str
    subtitle: list[str]
    columns: int = 3
    shared_y: bool = True
    shared_x: bool = True

    def to_dict(self, validate: bool = True, context: dict[str, Any] | None = None) -> dict[str, Any]:
        """The Vega-Lite spec; ``validate`` checks it against the schema as Altair does (datasets aside).
        ``context``: as Altair's, only its ``datasets`` dict is read (the one the spec's datasets are collected in)."""
        context = {"datasets": (context or {}).get("datasets", {}), "top_level": False}
        panels = [p.to_dict(validate=False, context=context) for p in self.panels]
        if len(panels) == 1:
            body = panels[0]
        else:
            # Panels share the value axis so they compare at a glance (category axes stay per panel).
            body = {
                "concat": panels,
                "columns": self.columns,
                "resolve": {
                    "scale": {
                        "x": "shared" if self.shared_x else "independent",
                        "y": "shared" if self.shared_y else "independent",
                    }
                },
            }
        if self.slicer.header is not None:
            header = self.slicer.header.to_dict(validate=False, context=context)
            body = {"vconcat": [header, body], "spacing": 4}
        sub = [s for s in self.subtitle if s]
        if self.slicer.constant:
            sub.append("grid: " + " · ".join(self.slicer.constant))
        body["title"] = alt.TitleParams(text=self.title, subtitle=sub, anchor="start").to_dict()
        if self.slicer.params:
            # Plain variable parameters at the top level (Altair 6 cannot name them through nested facets).
            body["params"] = [p.param.to_dict() for p in self.slicer.params]
        body["config"] = {"legend": {"orient": "right"}, "view": {"strokeOpacity": 0.4}}
        if validate:  # what Chart.to_dict(validate=True) checks: the spec, not the datasets
            _validate_once(body)
        spec = alt.utils.update_nested(alt.theme.get()(), body, copy=True)
        spec["$schema"] = alt.SCHEMA_URL
        if context["datasets"]:
            spec["datasets"] = context["datasets"]
        return spec


# The shapes (_validation_key) of the specs this process found valid: a figure drawn again, or another of the same
# shape under other titles and data names, is not checked again. A check is jsonschema over Vega-Lite's whole schema,
# about 35 ms a figure of the test reports, which draw the same figures many times (ADR 0238).
_VALID_SHAPES: set[str] = set()


def _is_text(value: Any) -> bool:
    """Vega-Lite's Text: a string or a list of strings (a title's text and subtitle)."""
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _validation_key(views: dict) -> str:
    """The spec's shape for validation: _view_shape, with the top-level title's text and subtitle blanked too
    (any Text is valid there, as any string is for a data name or a view's title)."""
    title = views.get("title")
    if isinstance(title, dict):
        views = {
            **views,
            "title": {k: "" if k in ("text", "subtitle") and _is_text(v) else v for k, v in title.items()},
        }
    return _view_shape(views)


def _validate_once(body: dict) -> None:
    """Check the composed spec against its top-level schema (raises on an invalid spec), once per shape: a valid
    shape is remembered, an invalid one is checked, and raises, every time."""
    views = _distinct_views(body)
    key = _validation_key(views)
    if key in _VALID_SHAPES:
        return
    _TOP_LEVEL_SPECS[next((k for k in _TOP_LEVEL_SPECS if k in body), "unit")].validate(views)
    _VALID_SHAPES.add(key)


def _blank_names(view: Any) -> Any:
    """The view with every data name and plain-text title blanked."""
    if isinstance(view, list):
        return [_blank_names(v) for v in view]
    if not isinstance(view, dict):
        return view
    return {
        k: (
            ""
            if k == "title" and isinstance(v, str)
            else {**v, "name": ""}
            if k == "data" and isinstance(v, dict) and isinstance(v.get("name"), str)
            else _blank_names(v)
        )
        for k, v in view.items()
    }


def _view_shape(view: Any) -> str:
    """Two views of one shape (equal but for data names and plain-text titles) are valid alike."""
    return json.dumps(_blank_names(view), sort_keys=True, default=str)


def _distinct_views(spec: Any) -> Any:
    """The spec with each composition list (concat, layer …) cut to its distinct view shapes, for schema
    validation: every item of such a list is checked on its own and a data name or title is any string,
    so the cut spec is valid exactly when the whole one is — and a 66-panel figure is checked in one panel's
    time rather than 66."""
    if isinstance(spec, list):
        return [_distinct_views(v) for v in spec]
    if not isinstance(spec, dict):
        return spec
    out = {}
    for k, v in spec.items():
        if k in ("concat", "vconcat", "hconcat", "layer") and isinstance(v, list):
            v = list({_view_shape(x): x for x in v}.values())
        out[k] = _distinct_views(v)
    return out


def _compose(
    panels: list[alt.TopLevelMixin],
    slicer: Slicer,
    *,
    title: str,
    subtitle: list[str],
    columns: int = 3,
    shared_y: bool = True,
    shared_x: bool = True,
) -> ComposedChart:
    return ComposedChart(panels, slicer, title, subtitle, columns, shared_y, shared_x)


def _panel_groups(df: pl.DataFrame, by: Sequence[str]) -> list[tuple[str, pl.DataFrame]]:
    """Split into panels on the axes in ``by`` that vary; a one-value axis makes no panels."""
    varying = [b for b in by if b in df.columns and df[b].n_unique() > 1]
    if not varying:
        return [("", df)]
    out = []
    for keys, grp in df.group_by(varying, maintain_order=True):
        label = " · ".join(f"{DIM_LABELS.get(k, k)} {_fmt(v)}" for k, v in zip(varying, keys))
        out.append((label, grp))
    return sorted(out, key=lambda x: x[0])


# --- 1. energy per committed token vs realized acceptance length (the blog's figure) --------------


def _baseline_band(inputs: FigureInputs, curves: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Opening and closing baselines of the campaigns in the curves: min..max and mean per slice."""
    recs = inputs.records
    campaigns = curves["campaign_id"].unique().to_list()
    base = pl.DataFrame()
    if recs.height and "role" in recs.columns:
        base = recs.filter(
            pl.col("campaign_id").is_in(campaigns)
            & (pl.col("role") != axes.ROLE_POINT)
            & pl.col("mj_per_committed_token").is_not_null()
        )
        base = base.select([*[k for k in keys if k in base.columns], "mj_per_committed_token"])
    if base.height == 0:  # records without baselines: fall back on the curves' paired value
        base = curves.select([*keys, pl.col("baseline_mj_per_committed_token").alias("mj_per_committed_token")])
    return base.group_by(keys, maintain_order=True).agg(
        base_lo=pl.col("mj_per_committed_token").min(),
        base_hi=pl.col("mj_per_committed_token").max(),
        base_mean=pl.col("mj_per_committed_token").mean(),
        base_n=pl.len(),
    )


def energy_vs_acceptance(inputs: FigureInputs) -> ComposedChart:
    c = _energy_curves(inputs).filter(pl.col("realized_L").is_not_null() & (pl.col("method") != "baseline"))
    if c.height == 0:
        raise CannotDraw("no speculative point has both energy and a realized acceptance length")
    c = c.with_columns(
        arm=pl.when(pl.col("acceptance_kind").is_not_null())
        .then(pl.col("acceptance_kind").replace_strict(ARM_LABELS, default=pl.col("acceptance_kind")))
        .otherwise(pl.col("scheme") + pl.lit(" (model acceptance)"))
    )
    keys = list(axes.SLICE_KEYS)
    means = inputs.stats(
        c,
        [*keys, "arm", "scheme", "acceptance_name", "configured_L"],
        ["mj_per_committed_token", "realized_L", "energy_ratio"],
        extra_means=list(PER_PASS_TOOLTIPS),
    )
    means = _interval_text(_interval_text(means, "energy_ratio", "ratio_text"), "mj_per_committed_token", "mj_text")
    band = _baseline_band(inputs, c, keys)
    slice_dims = [k for k in axes.SLICE_KEYS if k != "model_pair"]
    means, slicer = make_slicer(means, slice_dims, name="eL", order=inputs.axis_order)
    band = band.with_columns([_dim_label_expr(d).alias(f"sel_{d}") for d in slice_dims if d in band.columns])
    per_pass = _per_pass_tooltips(means)

    panels = []
    for label, grp in _panel_groups(means, ["model_pair"]):
        b = _slim(
            band.filter(pl.col("model_pair").is_in(grp["model_pair"].unique().to_list())),
            ["base_lo", "base_hi", "base_mean", "base_n"],
        )
        grp = _slim(
            grp,
            [
                "arm",
                "scheme",
                "acceptance_name",
                "configured_L",
                "realized_L",
                "realized_L_lo",
                "realized_L_hi",
                "mj_per_committed_token",
                "mj_per_committed_token_lo",
                "mj_per_committed_token_hi",
                "energy_ratio",
                "n_seeds",
                "ratio_text",
                "mj_text",
                "support",
                *PER_PASS_TOOLTIPS,
            ],
        )
        y = alt.Y("mj_per_committed_token:Q", title="mJ per committed token", scale=alt.Scale(zero=False))
        x = alt.X(
            "realized_L:Q",
            title="realized mean acceptance length L",
            scale=alt.Scale(zero=False, nice=False, padding=12),
        )
        band_layer = _apply_filters(alt.Chart(b).mark_rect(color=BASELINE_COLOR, opacity=0.18), slicer).encode(
            y=alt.Y("base_lo:Q"),
            y2=alt.Y2("base_hi:Q"),
            tooltip=[
                alt.Tooltip("base_lo:Q", title="baseline min", format=".1f"),
                alt.Tooltip("base_hi:Q", title="baseline max", format=".1f"),
                alt.Tooltip("base_n:Q", title="baseline runs"),
            ],
        )
        base_rule = _apply_filters(alt.Chart(b).mark_rule(color=BASELINE_COLOR, strokeDash=[4, 3]), slicer).encode(
            y=alt.Y("base_mean:Q")
        )
        base_text = _apply_filters(
            alt.Chart(b).mark_text(
                align="right",
                dy=-6,
                x="width",
                color="#555",
                fontSize=10,
                text="baseline, no speculation (band: opening–closing)",
            ),
            slicer,
        ).encode(y=alt.Y("base_hi:Q"))
        pts = _apply_filters(alt.Chart(grp), slicer)
        color = alt.Color("arm:N", title="arm", scale=alt.Scale(scheme="set1"))
        lines = pts.mark_line(opacity=0.7).encode(
            x=x, y=y, color=color, detail=alt.Detail("arm:N"), order=alt.Order("realized_L:Q")
        )
        dots = pts.mark_point(filled=True, size=60).encode(
            x=x,
            y=y,
            color=color,
            shape=alt.Shape("arm:N", legend=None),
            tooltip=[
                alt.Tooltip("arm:N"),
                alt.Tooltip("scheme:N"),
                alt.Tooltip("acceptance_name:N", title="vector"),
                alt.Tooltip("configured_L:Q", format=".2f", title="configured L"),
                alt.Tooltip("realized_L:Q", format=".4f", title="realized L"),
                alt.Tooltip("mj_text:N", title="mJ/token"),
                alt.Tooltip("ratio_text:N", title="× baseline"),
                *per_pass,
                alt.Tooltip("support:N", title="behind it"),
            ],
        )
        layers = [
            band_layer,
            base_rule,
            base_text,
            lines,
            dots,
            _errorbars(pts, "mj_per_committed_token", x=x, title="mJ per committed token", color=color),
            _errorbars(pts, "realized_L", y=y, title="realized mean acceptance length L", color=color, horizontal=True),
        ]
        panels.append(alt.layer(*layers, width=420, height=300, title=label or ""))
    sub = [
        "points: means over replicates; "
        + band_note(means, "mj_per_committed_token")
        + "; same L, two arms: does dispersion of acceptance matter?"
    ]
    return _compose(panels, slicer, title="Energy per committed token vs realized acceptance length", subtitle=sub)


# --- 1b. the paper's figure: energy per committed token vs accepted tokens per verify pass --------


def _config_order(inputs: FigureInputs, dim: str, present: Iterable[Any]) -> list:
    present = list(dict.fromkeys(present))
    order = [x for x in inputs.axis_order.get(dim, []) if x in present]
    return order + sorted((x for x in present if x not in order), key=str)


def energy_vs_accepted_per_pass(inputs: FigureInputs) -> ComposedChart:
    """One line per scheme, one panel per family × target model × engine (engines side by side), the
    baseline as a band from its opening and closing runs; interval bars both ways (ADR 0092)."""
    c = _energy_curves(inputs).filter(
        (pl.col("method") != "baseline") & pl.col("accepted_per_verification").is_not_null()
    )
    if c.height == 0:
        raise CannotDraw("no speculative point has both energy and accepted tokens per verify pass")
    c = _with_family(c).with_columns(
        acceptance=pl.col("acceptance_kind")
        .replace_strict(ARM_LABELS, default=pl.col("acceptance_kind"))
        .fill_null("model acceptance")
    )
    slice_keys = list(axes.SLICE_KEYS)
    keys = [*slice_keys, "family", "moe", "scheme", "acceptance", "acceptance_name", "configured_L"]
    values = ["mj_per_committed_token", "accepted_per_verification", "energy_ratio"]
    st = inputs.stats(c, keys, values, extra_means=["realized_L", *PER_PASS_TOOLTIPS])
    st = _interval_text(
        _interval_text(_interval_text(st, "energy_ratio", "ratio_text"), "mj_per_committed_token", "mj_text"),
        "accepted_per_verification",
        "apv_text",
    )
    band = _baseline_band(inputs, c, slice_keys)
    slice_dims = [k for k in axes.SLICE_KEYS if k not in ("engine", "model_pair")]
    st, slicer = make_slicer(st, slice_dims, name="apv", order=inputs.axis_order)
    band = band.with_columns([_dim_label_expr(d).alias(f"sel_{d}") for d in slice_dims])
    schemes = _config_order(inputs, "scheme", st["scheme"].to_list())
    engines = _config_order(inputs, "engine", st["engine"].to_list())
    color = alt.Color("scheme:N", title="scheme", scale=alt.Scale(domain=schemes, scheme="tableau10"))
    shape = alt.Shape("acceptance:N", title="acceptance")
    x = alt.X(
        "accepted_per_verification:Q",
        title="accepted tokens per verify pass (per request)",
        scale=alt.Scale(zero=True, nice=False, padding=10),
    )
    y_title = "mJ per committed token"
    y = alt.Y("mj_per_committed_token:Q", title=y_title, scale=alt.Scale(zero=False))
    tip = [
        alt.Tooltip("scheme:N"),
        alt.Tooltip("acceptance:N"),
        alt.Tooltip("acceptance_name:N", title="vector"),
        alt.Tooltip("configured_L:Q", format=".2f", title="configured L"),
        alt.Tooltip("apv_text:N", title="accepted per verify pass"),
        alt.Tooltip("mj_text:N", title="mJ/token"),
        alt.Tooltip("ratio_text:N", title="× baseline"),
        *[t for t in _per_pass_tooltips(st) if t.to_dict()["field"] != "accepted_per_verification"],
        alt.Tooltip("support:N", title="behind it"),
    ]
    fam_order = sorted(st["family"].unique().to_list(), key=lambda f: (f == FAMILY_UNKNOWN, f))
    panels = []
    for fam in fam_order:
        in_fam = st.filter(pl.col("family") == fam)
        for pair in _config_order(inputs, "model_pair", in_fam["model_pair"].to_list()):
            moe = in_fam.filter(pl.col("model_pair") == pair)["moe"].drop_nulls()
            kind = "" if moe.len() == 0 else (" · MoE" if moe.any() else " · dense")
            for eng in engines:
                title = f"{fam}{kind} · {pair} · {eng}"
                grp = in_fam.filter((pl.col("model_pair") == pair) & (pl.col("engine") == eng))
                if grp.height == 0:
                    panels.append(_empty_panel(title, f"no measured point on {eng} (see the scheme matrix)"))
                    continue
                b = _slim(
                    band.filter((pl.col("model_pair") == pair) & (pl.col("engine") == eng)),
                    ["base_lo", "base_hi", "base_mean", "base_n"],
                )
                grp = _slim(
                    grp,
                    [
                        "engine",
                        "scheme",
                        "acceptance",
                        "acceptance_name",
                        "configured_L",
                        *values,
                        *[f"{v}_{e}" for v in values for e in ("lo", "hi")],
                        "realized_L",
                        *PER_PASS_TOOLTIPS,
                        "ratio_text",
                        "mj_text",
                        "apv_text",
                        "support",
                    ],
                )
                # The points' data sit on the layer once (its point layers inherit it): copying a
                # DataFrame into every layer is what makes a many-panel chart slow to build.
                pts = _apply_filters(alt.Chart(), slicer)
                layers = [
                    _apply_filters(alt.Chart(b).mark_rect(color=BASELINE_COLOR, opacity=0.18), slicer).encode(
                        y=alt.Y("base_lo:Q", title=y_title),
                        y2=alt.Y2("base_hi:Q"),
                        tooltip=[
                            alt.Tooltip("base_lo:Q", title="baseline min", format=".1f"),
                            alt.Tooltip("base_hi:Q", title="baseline max", format=".1f"),
                            alt.Tooltip("base_n:Q", title="baseline runs"),
                        ],
                    ),
                    _apply_filters(alt.Chart(b).mark_rule(color=BASELINE_COLOR, strokeDash=[4, 3]), slicer).encode(
                        y=alt.Y("base_mean:Q")
                    ),
                    _apply_filters(
                        alt.Chart(b).mark_text(
                            align="right",
                            dy=-6,
                            x="width",
                            color="#555",
                            fontSize=10,
                            text="baseline (band: opening–closing runs)",
                        ),
                        slicer,
                    ).encode(y=alt.Y("base_hi:Q")),
                    pts.mark_line(opacity=0.75).encode(
                        x=x,
                        y=y,
                        color=color,
                        detail=[alt.Detail("engine:N"), alt.Detail("scheme:N"), alt.Detail("acceptance:N")],
                        order=alt.Order("accepted_per_verification:Q"),
                    ),
                    pts.mark_point(filled=True, size=60).encode(x=x, y=y, color=color, shape=shape, tooltip=tip),
                    _errorbars(pts, "mj_per_committed_token", x=x, title=y_title, color=color),
                    _errorbars(
                        pts,
                        "accepted_per_verification",
                        y=y,
                        title="accepted tokens per verify pass (per request)",
                        color=color,
                        horizontal=True,
                    ),
                ]
                panels.append(alt.layer(*layers, data=grp, width=300, height=230, title=title))
    sub = [
        "one line per scheme; a point per acceptance setting (means over replicates); below the band: a saving per "
        "committed token",
        "the verify width each scheme ran is in the tooltip (block drafters verify their whole block)",
        band_note(st, "mj_per_committed_token") + "; horizontal whiskers: the same for accepted per pass",
    ]
    return _compose(
        panels,
        slicer,
        title="Energy per committed token vs accepted tokens per verify pass",
        subtitle=sub,
        columns=max(1, len(engines)),
        shared_y=False,
    )


def _empty_panel(title: str, text: str) -> alt.Chart:
    """A panel that keeps the family × engine grid aligned and says why it is empty."""
    return (
        alt.Chart(alt.Data(values=[{"t": text}]))
        .mark_text(fontSize=11, color="#666")
        .encode(text=alt.Text("t:N"))
        .properties(width=300, height=230, title=title)
    )


# --- 2. saving vs batch size per scheme (per GPU when there are several) --------------------------


def _saving(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(saving_pct=(1 - pl.col("energy_ratio")) * 100)


# Above this many (GPU, pair) panels, saving vs batch selects the GPU in a drop-down instead.
MAX_GPU_PANELS = 12


def saving_vs_batch(inputs: FigureInputs) -> ComposedChart:
    c = _energy_curves(inputs)
    batches = sorted(c["batch_size"].unique().to_list())
    if len(batches) < 2:
        raise CannotDraw(f"one batch size in the grid (B={batches[0]}): saving vs batch needs two or more")
    c = _saving(_with_gpu(c, inputs.records)).with_columns(arm=_arm_label())
    keys = [*axes.substitute(axes.SLICE_KEYS, {"model_pair": ("model_pair", "gpu")}), "arm"]
    means = _interval_text(inputs.stats(c, keys, ["saving_pct", "energy_ratio"]), "energy_ratio", "ratio_text")
    # One panel per GPU and pair while that stays readable; a grid spread over many GPUs (a cluster run) selects
    # the GPU in a drop-down instead: the same per-GPU means, without thousands of panels to lay out (issue 22).
    per_gpu_panels = means.select("gpu", "model_pair").n_unique() <= MAX_GPU_PANELS
    slice_dims = [k for k in axes.SLICE_KEYS if k not in ("model_pair", "batch_size")] + (
        [] if per_gpu_panels else ["gpu"]
    )
    means, slicer = make_slicer(means, slice_dims, name="sb", order=inputs.axis_order)
    x = alt.X(
        "batch_size:Q",
        title="batch size",
        scale=alt.Scale(type="log", base=2, nice=False, padding=10),
        axis=alt.Axis(values=batches, format="d"),
    )
    y_title = "energy saving vs paired baseline (%)"
    y = alt.Y("saving_pct:Q", title=y_title)
    color = alt.Color("arm:N", title="scheme", scale=alt.Scale(scheme="tableau20"))
    panels = []
    for label, grp in _panel_groups(means, ["gpu", "model_pair"] if per_gpu_panels else ["model_pair"]):
        grp = _slim(
            grp,
            [
                "gpu",
                "batch_size",
                "arm",
                "saving_pct",
                "saving_pct_lo",
                "saving_pct_hi",
                "energy_ratio",
                "n_seeds",
                "ratio_text",
                "support",
            ],
        )
        pts = _apply_filters(alt.Chart(grp), slicer)
        zero = alt.Chart(alt.Data(values=[{"y": 0}])).mark_rule(color="#333").encode(y=alt.Y("y:Q"))
        layers = [
            zero,
            pts.mark_line().encode(x=x, y=y, color=color),
            pts.mark_point(filled=True, size=50).encode(
                x=x,
                y=y,
                color=color,
                tooltip=[
                    alt.Tooltip("arm:N"),
                    alt.Tooltip("batch_size:Q"),
                    alt.Tooltip("saving_pct:Q", format=".1f", title="saving %"),
                    alt.Tooltip("ratio_text:N", title="× baseline"),
                    alt.Tooltip("support:N", title="behind it"),
                    alt.Tooltip("gpu:N"),
                ],
            ),
            _errorbars(pts, "saving_pct", x=x, title=y_title, color=color),
        ]
        panels.append(alt.layer(*layers, width=340, height=260, title=label))
    sub = ["above 0: speculation saves energy per committed token; below: it costs; " + band_note(means, "saving_pct")]
    return _compose(panels, slicer, title="Energy saving vs batch size, per scheme", subtitle=sub)


# --- 3. acceptance length by corpus × scheme ------------------------------------------------------


def acceptance_by_corpus(inputs: FigureInputs) -> ComposedChart:
    c = _points(inputs)
    spec = c.filter((pl.col("method") != "baseline") & pl.col("realized_L").is_not_null())
    if spec.height == 0:
        raise CannotDraw("no speculative cell reported an acceptance length")
    model = spec.filter(pl.col("acceptance_kind").is_null())
    if model.height == 0:
        raise CannotDraw(
            "every speculative cell uses synthetic acceptance: its length is configured, not measured on a corpus"
        )
    means = model.group_by(
        [*(k for k in axes.SLICE_KEYS if k not in ("cuda_graphs", "batch_size")), "scheme"], maintain_order=True
    ).agg(
        realized_L=pl.col("realized_L").mean(),
        lo=pl.col("realized_L").min(),
        hi=pl.col("realized_L").max(),
        accepted_per_verification=pl.col("accepted_per_verification").mean(),
        n_cells=pl.len(),
        batches=pl.col("batch_size").unique().sort().cast(pl.String).str.join(", "),
    )
    means, slicer = make_slicer(means, ["engine", "workload"], name="ac", order=inputs.axis_order)
    y = alt.Y("realized_L:Q", title="realized mean acceptance length L", scale=alt.Scale(zero=False, domainMin=1))
    panels = []
    for label, grp in _panel_groups(means, ["model_pair"]):
        pts = _apply_filters(alt.Chart(grp), slicer)
        x = alt.X(
            "corpus:N", title="corpus", axis=alt.Axis(labelAngle=0), sort=inputs.axis_order.get("corpus") or "ascending"
        )
        off = alt.XOffset("scheme:N")
        color = alt.Color("scheme:N", title="scheme", scale=alt.Scale(scheme="dark2"))
        tip = [
            alt.Tooltip("corpus:N"),
            alt.Tooltip("scheme:N"),
            alt.Tooltip("realized_L:Q", format=".3f", title="L"),
            alt.Tooltip("accepted_per_verification:Q", format=".3f", title="accepted / verification"),
            alt.Tooltip("lo:Q", format=".3f", title="min"),
            alt.Tooltip("hi:Q", format=".3f", title="max"),
            alt.Tooltip("n_cells:Q", title="cells"),
            alt.Tooltip("batches:N", title="batch sizes"),
        ]
        # Bars start at L = 1 (nothing accepted), the floor of the quantity, not at 0.
        bars = pts.mark_bar(opacity=0.85).encode(x=x, xOffset=off, y=y, y2=alt.Y2Datum(1), color=color, tooltip=tip)
        whiskers = pts.mark_rule(color="#222").encode(x=x, xOffset=off, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"))
        text = pts.mark_text(dy=-7, fontSize=10, color="#222").encode(
            x=x, xOffset=off, y=alt.Y("hi:Q"), text=alt.Text("realized_L:Q", format=".2f")
        )
        panels.append(
            alt.layer(
                bars,
                whiskers,
                text,
                width=alt.Step(28) if grp["scheme"].n_unique() * grp["corpus"].n_unique() > 6 else 300,
                height=240,
                title=label,
            )
        )
    sub = [
        "bars: mean over cells (seeds, batch sizes, graph modes); whiskers: min–max; "
        "accepted per verification = L − 1; synthetic-acceptance cells left out"
    ]
    # Category x per panel: a band scale shared across panels sized by step fails to lay out in Vega-Lite 6 ("layout
    # size is step although width/height is not step": seen with 11 pairs, issue 22).
    return _compose(
        panels, slicer, title="Acceptance length by corpus and scheme", subtitle=sub, shared_y=True, shared_x=False
    )


# --- 4. TBT vs energy per token, TBT targets and the best configuration meeting each --------------


def _configurations(inputs: FigureInputs, c: pl.DataFrame) -> pl.DataFrame:
    """Every configuration (speculative points and baselines), seed means of TBT and mJ/token."""
    keys = list(axes.SLICE_KEYS)
    # The configuration keys ride along so a speculative configuration meets its summary row exactly.
    cfg = [
        k
        for k in ("method", "k", "acceptance_name", "acceptance_kind", "configured_L", "workload_kind")
        if k in c.columns
    ]
    reps = [k for k in ("gpu_uuid", "engine_replicate", "window_index") if k in c.columns]
    pts = c.select(
        [
            *keys,
            "campaign_id",
            "seed",
            pl.col("scheme"),
            _arm_label().alias("arm"),
            *cfg,
            *reps,
            (pl.col("tpot_mean_s") * 1000).alias("tbt_ms"),
            "mj_per_committed_token",
            pl.lit(True).alias("speculative"),
        ]
    )
    # In the curves' order: the same tables give the same figure, byte for byte.
    base = (
        c.group_by("campaign_id", maintain_order=True)
        .agg(
            *[pl.col(k).first() for k in [*keys, "seed", *reps]],
            tbt_ms=pl.col("baseline_tpot_mean_s").first() * 1000,
            mj_per_committed_token=pl.col("baseline_mj_per_committed_token").first(),
        )
        .with_columns(
            scheme=pl.lit("baseline"), arm=pl.lit("baseline"), speculative=pl.lit(False), method=pl.lit("baseline")
        )
    )
    both = pl.concat([pts, base], how="diagonal_relaxed").filter(
        pl.col("tbt_ms").is_not_null() & pl.col("mj_per_committed_token").is_not_null()
    )
    return inputs.stats(both, [*keys, "scheme", "arm", "speculative"], ["mj_per_committed_token", "tbt_ms"])


def best_under_targets(configs: pl.DataFrame, targets_ms: Sequence[float], group: Sequence[str]) -> pl.DataFrame:
    """Lowest-energy configuration with mean TBT ≤ target, per group and target, overall and among
    baselines (the paper's 'with vs without speculation' under a latency objective)."""
    rows = []
    for keys, grp in configs.group_by(list(group), maintain_order=True):
        for t in targets_ms:
            ok = grp.filter(pl.col("tbt_ms") <= t)
            best = ok.sort("mj_per_committed_token").head(1)
            best_base = ok.filter(~pl.col("speculative")).sort("mj_per_committed_token").head(1)
            row = dict(zip(group, keys)) | {"target_ms": float(t), "met": best.height > 0}
            if best.height:
                b = best.row(0, named=True)
                row |= {
                    "arm": b["arm"],
                    "batch_size_best": b["batch_size"],
                    "tbt_ms": b["tbt_ms"],
                    "mj_per_committed_token": b["mj_per_committed_token"],
                    "speculative": b["speculative"],
                }
            else:
                row |= {
                    "arm": None,
                    "batch_size_best": None,
                    "tbt_ms": None,
                    "mj_per_committed_token": None,
                    "speculative": None,
                }
            if best_base.height:
                bb = best_base.row(0, named=True)
                row |= {"baseline_batch_size": bb["batch_size"], "baseline_mj": bb["mj_per_committed_token"]}
            else:
                row |= {"baseline_batch_size": None, "baseline_mj": None}
            rows.append(row)
    out = pl.DataFrame(rows, infer_schema_length=None)
    if out.height:
        out = out.with_columns(
            saving_vs_best_baseline_pct=(1 - pl.col("mj_per_committed_token") / pl.col("baseline_mj")) * 100
        )
    return out


def tbt_targets_table(inputs: FigureInputs) -> pl.DataFrame:
    """The derived table behind figure 4 (empty when there is no energy)."""
    try:
        c = _energy_curves(inputs)
    except CannotDraw:
        return pl.DataFrame()
    targets = inputs.report_config.get("tbt_targets_ms") or []
    configs = _configurations(inputs, c)
    return best_under_targets(configs, targets, [k for k in axes.SLICE_KEYS if k != "batch_size"])


def tbt_vs_energy(inputs: FigureInputs) -> ComposedChart:
    c = _energy_curves(inputs)
    if c["tpot_mean_s"].drop_nulls().len() == 0:
        raise CannotDraw("no cell reported time between tokens")
    targets = [float(t) for t in inputs.report_config.get("tbt_targets_ms") or []]
    configs = _configurations(inputs, c)
    group = [k for k in axes.SLICE_KEYS if k != "batch_size"]
    best = best_under_targets(configs, targets, group) if targets else pl.DataFrame()
    slice_dims = [k for k in axes.SLICE_KEYS if k not in ("model_pair", "batch_size")]
    configs, slicer = make_slicer(configs, slice_dims, name="tbt", order=inputs.axis_order)
    if best.height:
        best = best.with_columns([_dim_label_expr(d).alias(f"sel_{d}") for d in slice_dims])
        best = best.with_columns(
            label=pl.Series(
                [
                    f"≤ {r['target_ms']:g} ms: {r['arm']} B={r['batch_size_best']}"
                    if r["met"]
                    else f"no configuration meets {r['target_ms']:g} ms"
                    for r in best.iter_rows(named=True)
                ],
                dtype=pl.String,
            )
        )
    x = alt.X("tbt_ms:Q", title="mean time between tokens (ms)", scale=alt.Scale(zero=False, nice=True))
    y = alt.Y(
        "mj_per_committed_token:Q",
        title="mJ per committed token (log)",
        scale=alt.Scale(type="log", nice=False, padding=10),
    )
    color = alt.Color("scheme:N", title="scheme", scale=alt.Scale(scheme="tableau10"))
    panels = []
    for label, grp in _panel_groups(configs, ["model_pair"]):
        pts = _apply_filters(
            alt.Chart(
                _slim(
                    grp,
                    [
                        "arm",
                        "scheme",
                        "batch_size",
                        "tbt_ms",
                        "tbt_ms_lo",
                        "tbt_ms_hi",
                        "mj_per_committed_token",
                        "mj_per_committed_token_lo",
                        "mj_per_committed_token_hi",
                        "n_seeds",
                        "support",
                    ],
                )
            ),
            slicer,
        )
        layers = [
            pts.mark_point(filled=True, size=55, opacity=0.85).encode(
                x=x,
                y=y,
                color=color,
                shape=alt.Shape("batch_size:O", title="batch"),
                tooltip=[
                    alt.Tooltip("arm:N"),
                    alt.Tooltip("batch_size:Q"),
                    alt.Tooltip("tbt_ms:Q", format=".2f", title="TBT ms"),
                    alt.Tooltip("mj_per_committed_token:Q", format=".1f", title="mJ/token"),
                    alt.Tooltip("support:N", title="behind it"),
                ],
            ),
            _errorbars(pts, "mj_per_committed_token", x=x, title="mJ per committed token (log)", color=color),
            _errorbars(pts, "tbt_ms", y=y, title="mean time between tokens (ms)", color=color, horizontal=True),
        ]
        if targets:
            tdf = pl.DataFrame({"target_ms": targets, "tlabel": [f"target {t:g} ms" for t in targets]})
            layers.append(alt.Chart(tdf).mark_rule(color="#d62728", strokeDash=[6, 3]).encode(x=alt.X("target_ms:Q")))
            layers.append(
                alt.Chart(tdf)
                .mark_text(color="#d62728", angle=270, align="right", baseline="bottom", y=4, dx=0, fontSize=10)
                .encode(x=alt.X("target_ms:Q"), text=alt.Text("tlabel:N"))
            )
            if best.height:
                bsel = _slim(
                    best.filter(pl.col("model_pair").is_in(grp["model_pair"].unique().to_list())),
                    [*group, "target_ms", "met", "tbt_ms", "mj_per_committed_token", "label"],
                )
                met = _apply_filters(alt.Chart(bsel.filter(pl.col("met"))), slicer)
                layers.append(
                    met.mark_point(shape="circle", size=320, strokeWidth=2.5, color="#d62728", filled=False).encode(
                        x=alt.X("tbt_ms:Q"),
                        y=alt.Y("mj_per_committed_token:Q"),
                        tooltip=[alt.Tooltip("label:N", title="lowest energy meeting target")],
                    )
                )
                layers.append(
                    met.mark_text(align="left", dx=12, dy=-10, fontSize=10, color="#d62728").encode(
                        x=alt.X("tbt_ms:Q"), y=alt.Y("mj_per_committed_token:Q"), text=alt.Text("label:N")
                    )
                )
                unmet = bsel.filter(~pl.col("met"))
                if unmet.height:
                    # One line per slice (pixel-placed: a second y field would fight the log scale).
                    unmet = (
                        unmet.group_by([*group, *[f"sel_{d}" for d in slice_dims]], maintain_order=True)
                        .agg(label=pl.col("label").str.join("; "))
                        .select("label", *[f"sel_{d}" for d in slice_dims])
                    )
                    layers.append(
                        _apply_filters(alt.Chart(unmet), slicer)
                        .mark_text(align="left", x=6, y=10, fontSize=11, color="#d62728")
                        .encode(text=alt.Text("label:N"))
                    )
        panels.append(alt.layer(*layers, width=460, height=320, title=label))
    sub = [
        "configurations: scheme × acceptance × batch (means over replicates), baselines included; "
        "circled: the lowest-energy configuration meeting each TBT target (config report.tbt_targets_ms)",
        band_note(configs, "mj_per_committed_token"),
    ]
    return _compose(panels, slicer, title="Time between tokens vs energy per token", subtitle=sub, columns=2)


# --- 5. saving vs tokens per verify pass, balance point marked (the roofline view) ----------------


def saving_vs_tokens_per_pass(inputs: FigureInputs) -> ComposedChart:
    c = _energy_curves(inputs).filter(pl.col("tokens_per_verify_pass").is_not_null())
    if c.height == 0:
        raise CannotDraw("no point reports tokens per verify pass")
    balances, balance_note = _balance_points(c, inputs.report_config.get("balance_point_op_per_byte"))
    balance = max(balances) if balances else None
    c = _saving(c).with_columns(arm=_arm_label())
    keys = [*axes.SLICE_KEYS, "scheme", "arm"]
    means = inputs.stats(
        c,
        keys,
        ["saving_pct", "tokens_per_verify_pass", "energy_ratio"],
        extra_means=[p for p in PER_PASS_TOOLTIPS if p != "tokens_per_verify_pass"],
    )
    means = _interval_text(means, "energy_ratio", "ratio_text")
    means, slicer = make_slicer(
        means, [k for k in axes.SLICE_KEYS if k not in ("model_pair", "batch_size")], name="rf", order=inputs.axis_order
    )
    per_pass = _per_pass_tooltips(means)
    t_lo, t_hi = float(means["tokens_per_verify_pass"].min()), float(means["tokens_per_verify_pass"].max())
    if balances:
        t_lo, t_hi = min(t_lo, min(balances) / 2), max(t_hi, balance * 2)
    x = alt.X(
        "tokens_per_verify_pass:Q",
        title="tokens per verify pass T = B × verify width  (≈ operations per weight byte)",
        scale=alt.Scale(type="log", base=2, domain=[t_lo / 1.2, t_hi * 1.2], nice=False),
    )
    y = alt.Y("saving_pct:Q", title="energy saving vs paired baseline (%)")
    color = alt.Color("scheme:N", title="scheme", scale=alt.Scale(scheme="dark2"))
    panels = []
    for label, grp in _panel_groups(means, ["model_pair"]):
        grp = _slim(
            grp,
            [
                "arm",
                "scheme",
                "batch_size",
                "tokens_per_verify_pass",
                "saving_pct",
                "saving_pct_lo",
                "saving_pct_hi",
                "n_seeds",
                "ratio_text",
                "support",
                *PER_PASS_TOOLTIPS,
            ],
        )
        pts = _apply_filters(alt.Chart(grp), slicer)
        layers = [
            alt.Chart(alt.Data(values=[{"y": 0}])).mark_rule(color="#333").encode(y=alt.Y("y:Q")),
            pts.mark_point(filled=True, size=55, opacity=0.85).encode(
                x=x,
                y=y,
                color=color,
                shape=alt.Shape("batch_size:O", title="batch"),
                tooltip=[
                    alt.Tooltip("arm:N"),
                    alt.Tooltip("batch_size:Q"),
                    alt.Tooltip("saving_pct:Q", format=".1f", title="saving %"),
                    alt.Tooltip("ratio_text:N", title="× baseline"),
                    *per_pass,
                    alt.Tooltip("support:N", title="behind it"),
                ],
            ),
            _errorbars(pts, "saving_pct", x=x, title="energy saving vs paired baseline (%)", color=color),
        ]
        if balances:
            bdf = pl.DataFrame(
                {"x": [float(b) for b in balances], "label": [f"balance point {b:.0f} op/B" for b in balances]}
            )
            layers.append(alt.Chart(bdf).mark_rule(color="#9467bd", strokeWidth=2).encode(x=alt.X("x:Q")))
            layers.append(
                alt.Chart(bdf)
                .mark_text(color="#9467bd", align="left", dx=4, y=8, fontSize=10)
                .encode(x=alt.X("x:Q"), text=alt.Text("label:N"))
            )
        panels.append(alt.layer(*layers, width=460, height=300, title=label))
    sub = [
        balance_note,
        "right of it, verified tokens cost arithmetic time the weight read no longer hides; "
        + band_note(means, "saving_pct"),
    ]
    return _compose(panels, slicer, title="Energy saving vs tokens per verify pass (roofline view)", subtitle=sub)


def _balance_points(curves: pl.DataFrame, configured: float | None) -> tuple[list[float], str]:
    """The balance points to mark: those rule roofline carried on the curve rows from a calibration (of the GPU
    that ran the cells, or of another of its model), where there are any; else the config's (ADR 0100, 0102)."""
    if "balance_point_op_per_byte" in curves.columns and "balance_point_source" in curves.columns:
        calibrated = curves.filter(
            pl.col("balance_point_op_per_byte").is_not_null()
            & ~pl.col("balance_point_source").str.starts_with("config")
        )
        if calibrated.height:
            per_gpu = (
                calibrated.group_by("gpu_uuid")
                .agg(pl.col("balance_point_op_per_byte").first(), pl.col("balance_point_source").first())
                .sort("gpu_uuid")
            )
            values = sorted({round(float(v), 1) for v in per_gpu["balance_point_op_per_byte"]})
            gpus = "; ".join(f"{g[:12]}…: {v:.0f} ({src})" for g, v, src in per_gpu.iter_rows())
            return values, f"balance point (op/B) from the hardware calibration — {gpus}"
    if configured:
        return [float(configured)], (
            f"balance point from config report.balance_point_op_per_byte = {configured:g} "
            f"(no calibration of these GPUs in results/hardware/)"
        )
    return (
        [],
        "no balance point: no calibration in results/hardware/ and none configured (report.balance_point_op_per_byte)",
    )


# --- 6. CUDA graphs on vs off ----------------------------------------------------------------------

# The paper's capture bias at single stream (shared/seeds/001): the saving credited to speculation
# with CUDA graphs off minus with them on, in percentage points, by model kind.
PAPER_CAPTURE_BIAS_PP = {
    False: (0.0, 10.0, "paper, B=1: < 10 pp on every dense model"),
    True: (19.0, 39.0, "paper, B=1: 19–39 pp on every MoE model"),
}


def capture_bias_table(inputs: FigureInputs) -> pl.DataFrame:
    """Every configuration measured with CUDA graphs on and off (everything else equal, boards may
    differ): the saving each way with its spread, and the bias = saving off − saving on (pp), whose
    ends are the difference of the two intervals' ends (conservative: no joint interval exists)."""
    c = _saving(_with_family(_energy_curves(inputs))).with_columns(arm=_arm_label())
    keys = [*axes.substitute(axes.SLICE_KEYS, {"engine": ("engine", "family", "moe"), "cuda_graphs": ()}), "arm"]
    st = inputs.stats(c, [*keys, "cuda_graphs"], ["saving_pct"])
    side = ["saving_pct", "saving_pct_lo", "saving_pct_hi", "saving_pct_band", "interval_level", "support"]
    on = st.filter(pl.col("cuda_graphs")).select(*keys, *[pl.col(x).alias(f"{x}_on") for x in side])
    off = st.filter(~pl.col("cuda_graphs")).select(*keys, *[pl.col(x).alias(f"{x}_off") for x in side])
    paired = on.join(off, on=keys, how="inner", nulls_equal=True)
    return paired.rename({"saving_pct_on": "saving_on", "saving_pct_off": "saving_off"}).with_columns(
        bias_pp=pl.col("saving_off") - pl.col("saving_on"),
        bias_pp_lo=pl.col("saving_pct_lo_off") - pl.col("saving_pct_hi_on"),
        bias_pp_hi=pl.col("saving_pct_hi_off") - pl.col("saving_pct_lo_on"),
    )


def cuda_graphs(inputs: FigureInputs) -> ComposedChart:
    c = _points(inputs)
    modes = sorted(set(c["cuda_graphs"].drop_nulls().to_list())) if c.height else []
    if len(modes) < 2:
        shown = "[" + ", ".join("true" if m else "false" for m in modes) + "]" if modes else "no cells"
        raise CannotDraw(f"CUDA graphs were not varied (cuda_graphs: {shown}): nothing to compare")
    paired = capture_bias_table(inputs)
    if paired.height == 0:
        raise CannotDraw("no configuration was measured with CUDA graphs both on and off")
    keys = [*axes.substitute(axes.SLICE_KEYS, {"engine": ("engine", "family", "moe"), "cuda_graphs": ()}), "arm"]
    several_models = paired["model_pair"].n_unique() > 1
    paired = paired.with_columns(
        config=(pl.col("model_pair") + pl.lit(" · ") if several_models else pl.lit(""))
        + pl.col("arm")
        + pl.lit("  B=")
        + pl.col("batch_size").cast(pl.String),
        kind=pl.when(pl.col("moe"))
        .then(pl.lit("MoE"))
        .when(pl.col("moe").not_())
        .then(pl.lit("dense"))
        .otherwise(pl.lit("MoE not recorded")),
    )
    long = pl.concat(
        [
            paired.select(
                *keys,
                "config",
                pl.lit(g).alias("graphs"),
                pl.col(f"saving_{s}").alias("saving_pct"),
                pl.col(f"saving_pct_lo_{s}").alias("saving_pct_lo"),
                pl.col(f"saving_pct_hi_{s}").alias("saving_pct_hi"),
                pl.col(f"saving_pct_band_{s}").alias("saving_pct_band"),
                pl.col(f"interval_level_{s}").alias("interval_level"),
                pl.col(f"support_{s}").alias("support"),
            )
            for g, s in (("graphs on", "on"), ("graphs off", "off"))
        ]
    )
    cg_dims = [k for k in axes.SLICE_KEYS if k not in ("model_pair", "cuda_graphs", "batch_size")]
    paired, slicer = make_slicer(paired, cg_dims, name="cg", order=inputs.axis_order)
    long = long.with_columns([_dim_label_expr(d).alias(f"sel_{d}") for d in cg_dims])
    graph_color = alt.Color(
        "graphs:N",
        title="CUDA graphs",
        scale=alt.Scale(domain=["graphs on", "graphs off"], range=["#1f77b4", "#ff7f0e"]),
    )
    rows = []
    for (family, kind), grp in sorted(paired.group_by(["family", "kind"]), key=lambda g: (str(g[0][0]), str(g[0][1]))):
        lg = _slim(
            long.join(grp.select(keys), on=keys, how="semi", nulls_equal=True),
            ["config", "batch_size", "graphs", "saving_pct", "saving_pct_lo", "saving_pct_hi", "support"],
        )
        grp = _slim(
            grp,
            [
                "config",
                "batch_size",
                "saving_on",
                "saving_off",
                "bias_pp",
                "bias_pp_lo",
                "bias_pp_hi",
                "support_on",
                "support_off",
            ],
        )
        n_rows = grp["config"].n_unique()
        height = alt.Step(14) if n_rows > 8 else 160
        yy = alt.Y(
            "config:N",
            title=None,
            sort=alt.EncodingSortField("batch_size", order="ascending"),
            axis=alt.Axis(labelLimit=320),
        )
        link = (
            _apply_filters(alt.Chart(grp), slicer)
            .mark_rule(color="#999", strokeWidth=2)
            .encode(
                y=yy,
                x=alt.X("saving_on:Q", title="energy saving vs paired baseline (%)"),
                x2=alt.X2("saving_off:Q"),
                tooltip=[
                    alt.Tooltip("config:N"),
                    alt.Tooltip("saving_on:Q", format=".1f", title="saving, graphs on"),
                    alt.Tooltip("saving_off:Q", format=".1f", title="saving, graphs off"),
                    alt.Tooltip("bias_pp:Q", format=".1f", title="capture bias (pp)"),
                    alt.Tooltip("support_on:N", title="behind graphs on"),
                    alt.Tooltip("support_off:N", title="behind graphs off"),
                ],
            )
        )
        dot_data = _apply_filters(alt.Chart(lg), slicer)
        dots = dot_data.mark_point(filled=True, size=60).encode(
            y=yy,
            x=alt.X("saving_pct:Q"),
            color=graph_color,
            tooltip=[
                alt.Tooltip("config:N"),
                alt.Tooltip("graphs:N"),
                alt.Tooltip("saving_pct:Q", format=".1f", title="saving %"),
                alt.Tooltip("support:N", title="behind it"),
            ],
        )
        whiskers = _errorbars(
            dot_data,
            "saving_pct",
            y=yy,
            title="energy saving vs paired baseline (%)",
            color=graph_color,
            horizontal=True,
        )
        zero = alt.Chart(alt.Data(values=[{"x": 0}])).mark_rule(color="#333").encode(x=alt.X("x:Q"))
        left = alt.layer(
            zero, link, dots, whiskers, width=340, height=height, title=f"{family} · {kind}: saving both ways"
        )
        bias_layers = []
        ref = PAPER_CAPTURE_BIAS_PP.get(True if kind == "MoE" else False if kind == "dense" else None)
        if ref is not None:
            lo, hi, text = ref
            rdf = alt.Data(values=[{"lo": lo, "hi": hi, "text": text}])
            bias_layers.append(
                alt.Chart(rdf)
                .mark_rect(color="#2ca02c", opacity=0.15)
                .encode(x=alt.X("lo:Q"), x2=alt.X2("hi:Q"), tooltip=[alt.Tooltip("text:N", title="reference")])
            )
        bias_pts = _apply_filters(alt.Chart(grp), slicer)
        bx = alt.X("bias_pp:Q", title="capture bias: saving off − on (pp)", scale=alt.Scale(zero=True))
        bias_layers += [
            bias_pts.mark_bar(color="#ff7f0e", opacity=0.75, height=alt.RelativeBandSize(0.6)).encode(
                y=yy,
                x=bx,
                x2=alt.X2Datum(0),
                tooltip=[
                    alt.Tooltip("config:N"),
                    alt.Tooltip("bias_pp:Q", format=".1f", title="capture bias (pp)"),
                    alt.Tooltip("bias_pp_lo:Q", format=".1f", title="low end (pp)"),
                    alt.Tooltip("bias_pp_hi:Q", format=".1f", title="high end (pp)"),
                ],
            ),
            _errorbars(bias_pts, "bias_pp", y=yy, title="capture bias: saving off − on (pp)", horizontal=True),
        ]
        right = alt.layer(
            *bias_layers,
            width=260,
            height=height,
            title=alt.TitleParams(
                f"{family} · {kind}: capture bias",
                subtitle=[f"green: {ref[2]}"] if ref else ["no reference: MoE not recorded"],
                subtitleColor="#2a7a2a",
            ),
        )
        rows.append(alt.hconcat(left, right).resolve_scale(y="shared", x="independent", color="shared"))
    refs = "; ".join(v[2] for v in PAPER_CAPTURE_BIAS_PP.values())
    sub = [
        "each row: one configuration measured both ways (means over replicates, paired each way with its own "
        "baseline);",
        "the gap is the saving credited to speculation for launch overhead graph capture would have removed",
        f"green band: the paper's bars ({refs})",
        "saving " + band_note(long, "saving_pct") + "; bias whiskers: difference of the two sides' whisker ends "
        "(conservative)",
    ]
    return _compose(
        rows, slicer, title="CUDA graphs on vs off: capture bias per family", subtitle=sub, columns=1, shared_y=False
    )


# --- 7. concurrency per arm (open loop) ------------------------------------------------------------


def concurrency_spread(records: pl.DataFrame) -> pl.DataFrame:
    """Per open-loop campaign: each cell's mean running requests relative to its baselines' mean."""
    if records.height == 0 or "workload_kind" not in records.columns:
        return pl.DataFrame()
    ol = records.filter((pl.col("workload_kind") == "open_loop") & pl.col("mean_running_requests").is_not_null())
    if ol.height == 0:
        return pl.DataFrame()
    base = (
        ol.filter(pl.col("role") != axes.ROLE_POINT)
        .group_by("campaign_id")
        .agg(baseline_concurrency=pl.col("mean_running_requests").mean())
    )
    out = ol.join(base, on="campaign_id", how="left").with_columns(
        diff_pct=(pl.col("mean_running_requests") / pl.col("baseline_concurrency") - 1) * 100
    )
    return out


def concurrency_per_arm(inputs: FigureInputs) -> ComposedChart:
    recs = inputs.records
    if recs.height == 0 or not (recs["workload_kind"] == "open_loop").any():
        raise CannotDraw("no open-loop workload in the grid (a closed batch fixes concurrency by construction)")
    spread = concurrency_spread(recs)
    if spread.height == 0:
        raise CannotDraw("open-loop cells reported no running-request samples")
    spread = spread.with_columns(
        arm=pl.when(pl.col("role") == axes.ROLE_POINT).then(_arm_label()).otherwise(pl.col("cell_name"))
    )
    per_campaign = (
        spread.group_by("campaign_id")
        .agg(max_abs=pl.col("diff_pct").abs().max())
        .sort(["max_abs", "campaign_id"], descending=[True, False])
    )
    worst = per_campaign.row(0, named=True)
    spread, slicer = make_slicer(spread, ["campaign_id"], name="cc", defaults={"campaign_id": worst["campaign_id"]})
    tol = inputs.checks_config.get("concurrency_spread_max")
    spread = _slim(
        spread,
        ["cell_name", "arm", "role", "run_order_index", "mean_running_requests", "baseline_concurrency", "diff_pct"],
    )
    pts = _apply_filters(alt.Chart(spread), slicer)
    y = alt.Y("arm:N", title=None, sort=alt.EncodingSortField("run_order_index", order="ascending"))
    x = alt.X("mean_running_requests:Q", title="mean running requests in the window")
    layers = []
    if tol:
        layers.append(
            pts.transform_aggregate(b="mean(baseline_concurrency)")
            .transform_calculate(lo=f"datum.b * (1 - {tol})", hi=f"datum.b * (1 + {tol})")
            .mark_rect(color=BASELINE_COLOR, opacity=0.15)
            .encode(x=alt.X("lo:Q"), x2=alt.X2("hi:Q"))
        )
    layers += [
        pts.mark_bar(height=alt.RelativeBandSize(0.7)).encode(
            x=x,
            y=y,
            color=alt.Color(
                "role:N",
                title="role",
                scale=alt.Scale(domain=list(axes.PHASES), range=["#7f7f7f", "#1f77b4", "#404040"]),
            ),
            tooltip=[
                alt.Tooltip("cell_name:N"),
                alt.Tooltip("run_order_index:Q"),
                alt.Tooltip("mean_running_requests:Q", format=".2f", title="running requests"),
                alt.Tooltip("diff_pct:Q", format="+.1f", title="% vs baseline"),
            ],
        ),
        pts.mark_text(align="left", dx=4, fontSize=10).encode(x=x, y=y, text=alt.Text("diff_pct:Q", format="+.1f")),
    ]
    chart = alt.layer(*layers, width=420, height=alt.Step(18))
    sub = [
        f"largest difference from the baselines: {worst['max_abs']:.1f} % ({worst['campaign_id']})"
        + (f"; band: baseline ± {tol * 100:g} % (config checks.concurrency_spread_max)" if tol else ""),
        "open loop: concurrency is an outcome; arms at different concurrency are not comparable",
    ]
    return _compose([chart], slicer, title="Concurrency per arm (open loop)", subtitle=sub)


# --- 8. per-cell power timeline (diagnostic) -------------------------------------------------------


def timeline_campaigns(
    records: pl.DataFrame, checks: pl.DataFrame | None, max_campaigns: int = TIMELINE_MAX_CAMPAIGNS
) -> list[str]:
    """Which campaigns' timelines to draw: failed first, then flagged, then in campaign order."""
    all_ids = sorted(records["campaign_id"].unique().to_list()) if records.height else []
    rank = dict.fromkeys(all_ids, 2)
    if checks is not None and checks.height:
        for status, r in (("flag", 1), ("fail", 0)):
            for cid in checks.filter(pl.col("status") == status)["campaign_id"].drop_nulls().to_list():
                if cid in rank:
                    rank[cid] = min(rank[cid], r)
    return sorted(all_ids, key=lambda c: (rank[c], c))[:max_campaigns]


def load_timelines(
    paths: Iterable[str | Path],
    records: pl.DataFrame,
    checks: pl.DataFrame | None,
    *,
    max_campaigns: int = TIMELINE_MAX_CAMPAIGNS,
    points_per_cell: int = TIMELINE_POINTS_PER_CELL,
) -> tuple[pl.DataFrame, str]:
    """Read the chosen campaigns' timelines (path: …/<campaign>/<cell>.parquet), averaged into at most
    ``points_per_cell`` bins per cell and GPU (bin means keep energy; spikes shorter than a bin blur)."""
    paths = [Path(p) for p in paths]
    chosen = timeline_campaigns(records, checks, max_campaigns)
    n_all = len({p.parent.name for p in paths})
    frames = []
    for p in paths:
        if p.parent.name not in chosen or not p.exists():
            continue
        t = pl.read_parquet(p)
        if t.height == 0:
            continue
        span = float(t["t_rel_s"].max() - t["t_rel_s"].min()) or 1.0
        width = max(0.1, span / points_per_cell)
        t = (
            t.with_columns(bin=(pl.col("t_rel_s") / width).floor())
            .group_by(["gpu_index", "bin"])
            .agg(
                t_rel_s=pl.col("t_rel_s").mean(),
                power_w=pl.col("power_w").mean(),
                in_window=pl.col("in_window").cast(pl.Float64).mean() >= 0.5,
                before=pl.col("t_rel_s").mean() < 0,
            )
            .with_columns(campaign_id=pl.lit(p.parent.name), cell_name=pl.lit(p.stem))
        )
        frames.append(t)
    note = ""
    if n_all > len(chosen):
        note = f"showing {len(chosen)} of {n_all} campaigns (failed and flagged first); every timeline is in results/timelines/"
    if not frames:
        return pl.DataFrame(), note
    df = (
        pl.concat(frames)
        .with_columns(
            phase=pl.when(pl.col("in_window"))
            .then(pl.lit("window"))
            .when(pl.col("before"))
            .then(pl.lit("warm-up"))
            .otherwise(pl.lit("cool-down"))
        )
        .drop("bin", "before")
        .sort(["campaign_id", "cell_name", "gpu_index", "t_rel_s"])
    )
    return df, note


def power_timeline(inputs: FigureInputs) -> ComposedChart:
    t = inputs.timelines
    if t is None or t.height == 0:
        if _no_energy(inputs):
            raise CannotDraw("meter: none — no power timeline on this machine")
        raise CannotDraw("no timeline samples were recorded")
    order = {}
    if inputs.records.height:
        order = {
            (r["campaign_id"], r["cell_name"]): r["run_order_index"]
            for r in inputs.records.select("campaign_id", "cell_name", "run_order_index").to_dicts()
        }
    t = t.with_columns(
        cell=pl.struct("campaign_id", "cell_name").map_elements(
            lambda s: f"{order.get((s['campaign_id'], s['cell_name']), 0):02d} {s['cell_name']}", return_dtype=pl.String
        )
    )
    chosen = timeline_campaigns(inputs.records, inputs.checks, max_campaigns=inputs.records.height or 1)
    t, slicer = make_slicer(t, ["campaign_id"], name="pt", order={"campaign_id": chosen})
    t = _slim(t, ["cell", "gpu_index", "t_rel_s", "power_w", "phase"]).with_columns(
        pl.col("t_rel_s").round(2), pl.col("power_w").round(1)
    )
    # Inline CSV, not row objects: a timeline is the one large dataset (≈ 3× smaller this way).
    data = alt.Data(
        values=t.write_csv(),
        format=alt.DataFormat(type="csv", parse={"t_rel_s": "number", "power_w": "number", "gpu_index": "number"}),
    )
    base = (
        alt.Chart(data)
        .mark_line(strokeWidth=1.2)
        .encode(
            x=alt.X("t_rel_s:Q", title="s from window start"),
            y=alt.Y("power_w:Q", title="power (W)"),
            color=alt.Color(
                "phase:N",
                title="phase",
                scale=alt.Scale(domain=["warm-up", "window", "cool-down"], range=["#bbbbbb", "#d62728", "#888888"]),
            ),
            detail=alt.Detail("gpu_index:N"),
            tooltip=[
                alt.Tooltip("t_rel_s:Q", format=".1f"),
                alt.Tooltip("power_w:Q", format=".0f"),
                alt.Tooltip("gpu_index:N"),
            ],
        )
        .properties(width=230, height=110)
    )
    facet = base.facet(facet=alt.Facet("cell:N", title=None, header=alt.Header(labelFontSize=10)), columns=4)
    for f in slicer.filters:
        facet = facet.transform_filter(f)
    facet = facet.resolve_scale(x="independent")
    sub = ["cells in run order; bin means of the 10 Hz samples (one line per GPU)"]
    if inputs.timeline_note:
        sub.append(inputs.timeline_note)
    return _compose([facet], slicer, title="Power per cell over time (diagnostic)", subtitle=sub)


# --- 9. engines at matched synthetic acceptance (ADR 0037) --------------------------------------------

# A point on one engine matches a point on another when everything but the engine is the same, on the
# same GPU model. scheme and acceptance_name are the config's names, shared by every engine of a grid.
ENGINE_MATCH_KEYS: tuple[str, ...] = (
    "gpu_model",
    *(k for k in axes.SLICE_KEYS if k != "engine"),
    axes.SEED.name,
    *axes.ARM_KEYS,
)
# Per side of a match: the point, its own (paired, same-campaign) baseline, and what produced its acceptance.
ENGINE_SIDE_COLUMNS: tuple[str, ...] = (
    "engine",
    "campaign_id",
    "acceptance_mechanism",
    "mj_per_committed_token",
    "baseline_mj_per_committed_token",
    "energy_ratio",
    "tbt_ms",
    "baseline_tbt_ms",
    "realized_L",
    "round_time_ms",
    "baseline_round_time_ms",
)
ENGINE_COLORS = {"vllm": "#1f77b4", "sglang": "#d62728"}


def gpu_models(records: pl.DataFrame) -> dict[str, str]:
    """cell_id → GPU model name ("no GPU" on CPU): engines are matched per model, not per board."""
    if records.height == 0 or "gpu_names" not in records.columns:
        return {}
    return {
        r["cell_id"]: " + ".join(r["gpu_names"] or []) or "no GPU"
        for r in records.select("cell_id", "gpu_names").iter_rows(named=True)
    }


def _engines(inputs: FigureInputs, df: pl.DataFrame) -> list[str]:
    present = set(df["engine"].drop_nulls().to_list()) if df.height else set()
    order = [e for e in inputs.axis_order.get("engine", []) if e in present]
    return order + sorted(present - set(order))


def engine_comparison_table(inputs: FigureInputs) -> pl.DataFrame:
    """Points matched across engines (ENGINE_MATCH_KEYS), one row per match and engine pair: each side's
    mJ per committed token, its own baseline's, its ratio, TBT, realized L, round time and acceptance
    mechanism, and the ratios between the engines (b over a, a first in config order). Only rows where
    both engines have the point; empty with fewer than two engines. Campaigns that failed a check are
    left out, as in the figures."""
    c = inputs.points
    if c.height == 0 or "engine" not in c.columns:
        return pl.DataFrame()
    engines = _engines(inputs, c)
    if len(engines) < 2:
        return pl.DataFrame()
    models = gpu_models(inputs.records)
    mech: dict[str, str] = {}
    if inputs.records.height and "acceptance_mechanism" in inputs.records.columns:
        mech = {
            r["cell_id"]: r["acceptance_mechanism"]
            for r in inputs.records.select("cell_id", "acceptance_mechanism").iter_rows(named=True)
            if r["acceptance_mechanism"]
        }
    c = c.with_columns(
        gpu_model=pl.col("cell_id").replace_strict(models, default="no GPU", return_dtype=pl.String)
        if models
        else pl.lit("no GPU"),
        acceptance_mechanism=pl.col("cell_id").replace_strict(mech, default="unknown", return_dtype=pl.String)
        if mech
        else pl.lit("unknown"),
        tbt_ms=pl.col("tpot_mean_s") * 1000,
        baseline_tbt_ms=pl.col("baseline_tpot_mean_s") * 1000,
    )
    for col in ("round_time_ms", "baseline_round_time_ms"):
        if col not in c.columns:
            c = c.with_columns(pl.lit(None, pl.Float64).alias(col))
    # Replicates pair index with index (window w with window w, engine replicate r with r): the sides
    # ran the same plan; an index one engine lacks has no partner, like any unmatched point.
    keys = [*ENGINE_MATCH_KEYS, *[k for k in ("window_index", "engine_replicate") if k in c.columns]]
    frames = []
    for i, a in enumerate(engines):
        for b in engines[i + 1 :]:
            side_a = c.filter(pl.col("engine") == a).select(
                *keys, *[pl.col(x).alias(f"{x}_a") for x in ENGINE_SIDE_COLUMNS]
            )
            side_b = c.filter(pl.col("engine") == b).select(
                *keys, *[pl.col(x).alias(f"{x}_b") for x in ENGINE_SIDE_COLUMNS]
            )
            frames.append(side_a.join(side_b, on=keys, how="inner", nulls_equal=True, validate="1:1"))
    out = pl.concat(frames, how="vertical_relaxed")
    if out.height == 0:
        return out
    return out.with_columns(
        same_mechanism=pl.col("acceptance_mechanism_a") == pl.col("acceptance_mechanism_b"),
        mj_ratio_b_over_a=pl.col("mj_per_committed_token_b") / pl.col("mj_per_committed_token_a"),
        energy_ratio_b_over_a=pl.col("energy_ratio_b") / pl.col("energy_ratio_a"),
        tbt_ratio_b_over_a=pl.col("tbt_ms_b") / pl.col("tbt_ms_a"),
    ).sort([*keys, "engine_a", "engine_b"], nulls_last=True)


def engine_comparison(inputs: FigureInputs) -> ComposedChart:
    c = _points(inputs)
    engines = _engines(inputs, c)
    if len(engines) < 2:
        raise CannotDraw(f"one engine in the grid ({', '.join(engines) or 'none'}): nothing to compare across engines")
    table = engine_comparison_table(inputs)
    if table.height == 0:
        raise CannotDraw(
            f"no point was measured on {' and '.join(engines)} with everything else the same on one GPU model"
        )
    syn = table.filter(pl.col("acceptance_kind").is_not_null())
    if syn.height == 0:
        raise CannotDraw(
            "no synthetic-acceptance point was measured on both engines: only model acceptance, "
            "which differs by engine and so is no matched comparison"
        )
    syn = syn.filter(pl.col("energy_ratio_a").is_not_null() & pl.col("energy_ratio_b").is_not_null())
    if syn.height == 0:
        raise CannotDraw(no_energy_reason(inputs))
    group = [k for k in ENGINE_MATCH_KEYS if k not in ("seed", "method", "k", "acceptance_name")]
    replicate_keys = [k for k in ("window_index", "engine_replicate") if k in syn.columns]
    values = ["energy_ratio", "mj_per_committed_token", "baseline_mj_per_committed_token", "realized_L", "tbt_ms"]
    long = pl.concat(
        [
            syn.select(
                *group,
                "seed",
                *replicate_keys,
                *[pl.col(f"{x}_{s}").alias(x) for x in ("engine", "acceptance_mechanism", *values)],
            )
            for s in ("a", "b")
        ]
    )
    long = long.unique(maintain_order=True)  # with three engines a side appears in two pairs
    means = inputs.stats(long, [*group, "engine", "acceptance_mechanism"], values)
    means = _interval_text(means, "energy_ratio", "ratio_text")
    slice_dims = [*(k for k in axes.SLICE_KEYS if k not in ("engine", "batch_size")), "scheme", "acceptance_kind"]
    means, slicer = make_slicer(means, slice_dims, name="eng", order=inputs.axis_order)
    color = alt.Color(
        "engine:N",
        title="engine",
        scale=alt.Scale(domain=engines, range=[ENGINE_COLORS.get(e, "#2ca02c") for e in engines]),
    )
    shape = alt.Shape("engine:N", title="engine", scale=alt.Scale(domain=engines))
    x = alt.X(
        "configured_L:Q", title="configured acceptance length L", scale=alt.Scale(zero=False, nice=False, padding=12)
    )
    tip = [
        alt.Tooltip("engine:N"),
        alt.Tooltip("acceptance_mechanism:N", title="acceptance mechanism"),
        alt.Tooltip("configured_L:Q", format=".2f", title="configured L"),
        alt.Tooltip("realized_L:Q", format=".4f", title="realized L"),
        alt.Tooltip("ratio_text:N", title="× own baseline"),
        alt.Tooltip("mj_per_committed_token:Q", format=".1f", title="mJ/token"),
        alt.Tooltip("baseline_mj_per_committed_token:Q", format=".1f", title="baseline mJ/token"),
        alt.Tooltip("tbt_ms:Q", format=".2f", title="TBT ms"),
        alt.Tooltip("n_seeds:Q", title="seeds"),
        alt.Tooltip("support:N", title="behind it"),
    ]
    several_gpus = means["gpu_model"].n_unique() > 1
    ratio_panels, mj_panels = [], []
    for (gpu_model, batch), grp in sorted(
        means.group_by(["gpu_model", "batch_size"]), key=lambda g: (g[0][0], g[0][1])
    ):
        title = (f"{gpu_model} · " if several_gpus else "") + f"B={batch}"
        grp = _slim(
            grp,
            [
                "gpu_model",
                "batch_size",
                "engine",
                "acceptance_mechanism",
                "configured_L",
                *values,
                *[f"{v}_{e}" for v in ("energy_ratio", "mj_per_committed_token") for e in ("lo", "hi")],
                "n_seeds",
                "ratio_text",
                "support",
            ],
        )
        pts = _apply_filters(alt.Chart(grp), slicer)
        layers = []
        for y_field, y_title, ref in (
            ("energy_ratio", "energy ratio: point / its own baseline", "one"),
            ("mj_per_committed_token", "mJ per committed token", "baseline"),
        ):
            y = alt.Y(f"{y_field}:Q", title=y_title, scale=alt.Scale(zero=False))
            if ref == "one":
                ref_layer = (
                    alt.Chart(alt.Data(values=[{"y": 1}]))
                    .mark_rule(color=BASELINE_COLOR, strokeDash=[4, 3])
                    .encode(y=alt.Y("y:Q"))
                )
            else:  # each engine's own baseline, dashed in its colour
                ref_layer = (
                    pts.transform_aggregate(b="mean(baseline_mj_per_committed_token)", groupby=["engine"])
                    .mark_rule(strokeDash=[4, 3], opacity=0.8)
                    .encode(y=alt.Y("b:Q", title=y_title), color=color)
                )
            panel = [
                ref_layer,
                pts.mark_line().encode(
                    x=x, y=y, color=color, detail=alt.Detail("engine:N"), order=alt.Order("configured_L:Q")
                ),
                pts.mark_point(filled=True, size=60).encode(x=x, y=y, color=color, shape=shape, tooltip=tip),
                _errorbars(pts, y_field, x=x, title=y_title, color=color),
            ]
            layers.append(alt.layer(*panel, width=300, height=220, title=title))
        ratio_panels.append(layers[0])
        mj_panels.append(layers[1])
    body = alt.vconcat(
        alt.hconcat(*ratio_panels).resolve_scale(y="shared"),
        # Absolute energy differs by an order of magnitude between batch sizes: own axes.
        alt.hconcat(*mj_panels).resolve_scale(y="independent"),
    ).resolve_scale(y="independent", color="shared", shape="shared")
    mechs = (
        means.select("engine", "acceptance_mechanism")
        .unique()
        .sort(
            pl.col("engine").replace_strict({e: i for i, e in enumerate(engines)}, default=len(engines)),
            "acceptance_mechanism",
        )
    )
    sub = [
        "top: energy per committed token over each engine's own baseline (below 1: a saving); bottom: mJ per "
        "committed token, dashed: each engine's baseline; " + band_note(means, "energy_ratio"),
        "acceptance mechanism: "
        + "; ".join(f"{r['engine']} {r['acceptance_mechanism']}" for r in mechs.iter_rows(named=True))
        + " — not the same mechanism" * (mechs["acceptance_mechanism"].n_unique() > 1),
    ]
    return _compose([body], slicer, title="Engines at matched synthetic acceptance", subtitle=sub)


# --- the registry ----------------------------------------------------------------------------------

FIGURES: tuple[FigureDef, ...] = (
    FigureDef(
        "energy_vs_accepted_per_pass",
        "Energy per committed token vs accepted tokens per verify pass",
        "The paper's figure: mJ per committed token against accepted tokens per verify pass, one line per "
        "scheme, one panel per attention family, target model and engine, the no-speculation baseline as a "
        "band spanning its opening and closing runs. Whiskers are the summary's 95 % interval where it has one.",
        energy_vs_accepted_per_pass,
        True,
    ),
    FigureDef(
        "energy_vs_acceptance",
        "Energy per committed token vs realized acceptance length",
        "The blog's figure: mJ per committed token against realized mean acceptance length, the "
        "minimum-variance and geometric arms side by side, the no-speculation baseline as a band "
        "spanning its opening and closing runs. A point below the band is a saving.",
        energy_vs_acceptance,
        True,
    ),
    FigureDef(
        "saving_vs_batch",
        "Energy saving vs batch size",
        "Saving per committed token against batch size, one line per scheme (per GPU when several "
        "ran). Batching amortises the weight read too, so the saving shrinks with batch.",
        saving_vs_batch,
        True,
    ),
    FigureDef(
        "acceptance_by_corpus",
        "Acceptance length by corpus and scheme",
        "Realized mean acceptance length per corpus and scheme (model acceptance only; synthetic "
        "cells set their length).",
        acceptance_by_corpus,
        False,
    ),
    FigureDef(
        "tbt_vs_energy",
        "Time between tokens vs energy per token",
        "Every configuration's mean time between tokens against its energy per committed token, "
        "the TBT targets from config, and the lowest-energy configuration meeting each target.",
        tbt_vs_energy,
        True,
    ),
    FigureDef(
        "saving_vs_tokens_per_pass",
        "Energy saving vs tokens per verify pass",
        "The roofline view: saving against tokens per verification pass (≈ operations per weight "
        "byte), with the balance point measured on the GPU that ran the cells (from config where no calibration "
        "exists).",
        saving_vs_tokens_per_pass,
        True,
    ),
    FigureDef(
        "cuda_graphs",
        "CUDA graphs on vs off",
        "Saving with CUDA graphs on and off for each configuration measured both ways; the gap is the capture bias.",
        cuda_graphs,
        True,
    ),
    FigureDef(
        "concurrency_per_arm",
        "Concurrency per arm (open loop)",
        "Mean running requests per cell in an open-loop campaign, against its baselines; arms at "
        "different concurrency are not comparable.",
        concurrency_per_arm,
        False,
    ),
    FigureDef(
        "power_timeline",
        "Power per cell over time (diagnostic)",
        "The 10 Hz power timeline of each cell, warm-up, window and cool-down coloured.",
        power_timeline,
        True,
    ),
    FigureDef(
        "engine_comparison",
        "Engines at matched synthetic acceptance",
        "Each engine's energy per committed token over its own baseline against the configured acceptance "
        "length, one line per engine, per batch size (and GPU model); below, the absolute mJ per committed "
        "token. Only points both engines measured with everything else equal. vLLM draws acceptance per "
        "draft position; SGLang simulates a mean accept length per step: not the same mechanism.",
        engine_comparison,
        True,
    ),
)
FIGURES += (
    FigureDef(
        "energy_decomposition",
        "Where a speculative cell's joules go (roofline model)",
        "Per speculative cell the measured mJ per committed token split into verify, draft and idle/host-wait "
        "by the roofline model's shares, beside the model's predicted energy and the baseline's measured "
        "energy; the residual (measured / predicted − 1) on the measured bar (ADR 0102, 0177).",
        lambda inputs: _roofline_report().decomposition_figure(inputs),
        True,
    ),
)
FIGURE_NAMES = tuple(f.name for f in FIGURES)


def _roofline_report():  # imported late: specjoule.report.roofline imports this module
    from specjoule.report import roofline

    return roofline


def build_all(inputs: FigureInputs, names: Sequence[str] | None = None) -> list[Figure]:
    out = []
    for fd in FIGURES:
        if names is not None and fd.name not in names:
            continue
        try:
            # Altair's debug mode validates every object as it is made, and a layer by converting it whole, its
            # data included (a second conversion per layer, ~1 s of a paper-scale grid's figures); Figure.spec
            # validates the finished spec against the same schema, so an invalid figure still raises.
            with debug_mode(False):
                chart = fd.build(inputs)
            out.append(Figure(fd.name, fd.title, fd.caption, chart=chart))
        except CannotDraw as exc:
            reason = str(exc).strip().splitlines()[0]
            out.append(Figure(fd.name, fd.title, fd.caption, reason=reason))
    return out


# --- export ----------------------------------------------------------------------------------------


def reason_svg(title: str, reason: str) -> str:
    """A one-line SVG for a figure the grid cannot fill (static consumers see the reason too)."""
    from html import escape

    width = max(360, 7 * max(len(title), len(reason)) + 40)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="54" viewBox="0 0 {width} 54">'
        f'<rect width="100%" height="100%" fill="#fff"/>'
        f'<text x="10" y="20" font-family="sans-serif" font-size="13" font-weight="bold">{escape(title)}</text>'
        f'<text x="10" y="42" font-family="sans-serif" font-size="12" fill="#555">{escape(reason)}</text></svg>'
    )


# The filter a slicer adds to every view it slices: make_slicer's ``alt.datum[sel_<dim>] == <param>``.
_SLICE_FILTER = re.compile(r"^\(datum\['(sel_\w+)'\] === (\w+)\)$")


def _slice_filters(spec: dict) -> dict[str, dict[str, str]]:
    """Dataset name → {slice column: the selector's default} for the filters every view reading it applies."""
    defaults = {p["name"]: p["value"] for p in spec.get("params", []) if "bind" in p and "value" in p}
    shared: dict[str, dict[str, str]] = {}

    def walk(node: Any, data: str | None, cols: dict[str, str]) -> None:
        if isinstance(node, list):
            for n in node:
                walk(n, data, cols)
            return
        if not isinstance(node, dict):
            return
        own = node.get("data")
        if isinstance(own, dict) and "name" in own:  # its own data: the ancestors' transforms do not apply
            data, cols = own["name"], {}
        cols = dict(cols)
        for t in node.get("transform", []):
            if "filter" not in t:
                break  # a filter after another transform sees derived rows: not counted
            m = _SLICE_FILTER.match(t["filter"]) if isinstance(t["filter"], str) else None
            if m and isinstance(defaults.get(m.group(2)), str):
                cols[m.group(1)] = defaults[m.group(2)]
        if "mark" in node and data is not None:
            prev = shared.get(data)
            shared[data] = cols if prev is None else {k: v for k, v in prev.items() if cols.get(k) == v}
        for key in ("layer", "concat", "vconcat", "hconcat", "spec"):
            if key in node:
                walk(node[key], data, cols)

    walk({k: v for k, v in spec.items() if k != "datasets"}, None, {})
    return shared


def static_view(spec: dict) -> dict:
    """The spec with each dataset cut to the rows of the selectors' default slice, for the static exports (SVG,
    PNG), which show only that slice. Every view reading such a dataset filters on the slice columns first, so
    no scale, legend or mark sees the other rows and the picture is the same (tests compare the SVGs); a
    paper-scale figure then renders from hundreds of rows instead of thousands. A row is dropped only where a
    slice column every reader filters on holds another string; other datasets are left whole."""
    keep = _slice_filters(spec)
    datasets = {}
    for name, rows in spec.get("datasets", {}).items():
        cols = keep.get(name)
        if cols and isinstance(rows, list):
            rows = [r for r in rows if not any(isinstance(r.get(c), str) and r[c] != v for c, v in cols.items())]
        datasets[name] = rows
    return {**spec, "datasets": datasets} if "datasets" in spec else spec


JS_BUNDLE_FILE = "vega-bundle.js"
# Where rule `figures` keeps the bundle between runs (ADR 0204): beside the pipeline's other state, outside
# results/figures, which Snakemake empties before the rule runs.
BUNDLE_CACHE_DIR = "results/.specjoule/vega-bundle"

# The three tags by which vl-convert's page without a bundle loads Vega, Vega-Lite and vega-embed from the CDN;
# with a bundle the page is the same but for one inline script in their place.
_CDN_SCRIPTS = re.compile(
    r'    <script src="https://cdn\.jsdelivr\.net/npm/vega@[^"\n]*"></script>\n'
    r'    <script src="https://cdn\.jsdelivr\.net/npm/vega-lite@[^"\n]*"></script>\n'
    r'    <script src="https://cdn\.jsdelivr\.net/npm/vega-embed@[^"\n]*"></script>\n'
)


def bundle_file(cache_dir: str | Path) -> Path:
    """Where ``javascript_bundle`` keeps the bundle in ``cache_dir``: one file per vl-convert and Vega-Lite version."""
    import vl_convert as vlc

    return Path(cache_dir) / f"vega-bundle-vlc{vlc.__version__}-vl{VEGALITE_VERSION}.js"


def javascript_bundle(cache_dir: str | Path | None = None) -> str:
    """vl-convert's offline bundle of Vega, Vega-Lite and vega-embed for VEGALITE_VERSION: compiling it is ~1.2 s
    of CPU per process (ADR 0204). ``cache_dir``: kept there, one file per vl-convert and Vega-Lite version, so
    a later run with the same vl-convert reads it instead; another version's file is never read."""
    import vl_convert as vlc

    if cache_dir is None:
        return vlc.javascript_bundle(vl_version=VEGALITE_VERSION)
    path = bundle_file(cache_dir)
    if path.is_file():
        cached = path.read_text()
        if cached:
            return cached
    bundle = vlc.javascript_bundle(vl_version=VEGALITE_VERSION)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(bundle)
    os.replace(tmp, path)  # whole or absent: a run stopped midway leaves no half bundle to read
    return bundle


def offline_html(spec: dict, bundle: str) -> str:
    """``vl_convert.vegalite_to_html(spec, bundle=True)`` with the bundle given: vl-convert's page without a
    bundle, its three CDN tags replaced by the bundle inline as vl-convert inlines it (tests compare the bytes).
    A page of another layout is left to vl-convert to inline."""
    import vl_convert as vlc

    parts = _CDN_SCRIPTS.split(vlc.vegalite_to_html(spec, vl_version=VEGALITE_VERSION, bundle=False))
    if len(parts) != 2:
        return vlc.vegalite_to_html(spec, vl_version=VEGALITE_VERSION, bundle=True)
    return parts[0] + '    <script type="text/javascript">' + bundle + "</script>\n" + parts[1]


class StaticDrawer:
    """vl-convert's SVG drawing in a child process (``specjoule.report.vlc_worker``), so that it runs on the
    second core while this process builds the next figure's spec (ADR 0237). vl-convert holds the GIL for a whole
    conversion, so a thread would not overlap them. Start it before building the figures: the child starts V8 and
    loads Vega-Lite meanwhile. Specs are drawn one at a time, in the order submitted, and answered in that order;
    the SVGs are vl-convert's (the child is handed the same dict). Use as a context manager, or call close()."""

    def __init__(self, vl_version: str = VEGALITE_VERSION) -> None:
        import queue
        import subprocess
        import sys
        import threading

        root = str(Path(__file__).resolve().parents[2])  # the directory holding the specjoule package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "specjoule.report.vlc_worker", vl_version],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._answers: queue.Queue[Any] = queue.Queue()
        self._submitted = 0
        # Answers are read as they come, so a child writing a large SVG never waits on a parent writing a spec.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        from specjoule.report.vlc_worker import read_frame

        assert self._proc.stdout is not None
        while True:
            try:
                self._answers.put(read_frame(self._proc.stdout))
            except EOFError:
                self._answers.put(None)
                return

    def submit(self, spec: dict) -> None:
        """Queue ``spec`` (a Vega-Lite dict) to be drawn."""
        from specjoule.report.vlc_worker import write_frame

        assert self._proc.stdin is not None
        write_frame(self._proc.stdin, spec)
        self._submitted += 1

    def ready(self) -> bool:
        """Whether the next answer has come (take() would not wait)."""
        return not self._answers.empty()

    def take(self) -> tuple[str, float]:
        """The next submitted spec's SVG and the child's seconds on it; raises ValueError as vl-convert does if
        the spec could not be drawn."""
        if not self._submitted:
            raise RuntimeError("StaticDrawer.take: nothing submitted")
        answer = self._answers.get()
        self._submitted -= 1
        if answer is None:
            self._answers.put(None)
            raise RuntimeError(f"the vl-convert child process ended (exit status {self._proc.wait()})")
        if answer[0] == "error":
            raise ValueError(answer[1])
        return answer[1], answer[2]

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()  # the child stops at the end of its input
            except BrokenPipeError:
                pass
        try:
            self._proc.wait(timeout=30)
        except Exception:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)

    def __enter__(self) -> StaticDrawer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def export(
    figures: Sequence[Figure],
    outdir: str | Path,
    *,
    png: Sequence[str] = (),
    html: bool = True,
    log: Callable[[str], None] = lambda _: None,
    bundle_cache: str | Path | None = None,
    drawer: StaticDrawer | None = None,
) -> dict:
    """Write ``<name>.vl.json`` (spec), ``.svg`` for every figure, ``.html`` (self-contained,
    interactive) for drawn ones, ``.png`` for the names in ``png``, the HTMLs' JavaScript bundle for the
    report (``JS_BUNDLE_FILE``); and ``figures.json``. ``bundle_cache``: see javascript_bundle. ``drawer``: the
    SVGs are drawn there, beside the next spec's building (ADR 0237); the files, the manifest's layout and the
    log's lines and their order are the same as without."""
    import time

    import vl_convert as vlc

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"vega_lite_version": VEGALITE_VERSION, "figures": []}
    bundle: str | None = None  # compiled (or read) once, at the first HTML
    # Figures begun (spec, .vl.json, HTML) but not finished (SVG, PNG, manifest entry, log line), in order: with
    # a drawer a figure is finished when its SVG has come back, and always after the figures before it.
    begun: list[tuple[Figure, dict[str, Any], dict[str, Any]]] = []

    def finish(fig: Figure, entry: dict[str, Any], done: dict[str, Any]) -> None:
        if fig.drawn:
            if "svg" not in done:
                done["svg"], done["svg_s"] = drawer.take()  # type: ignore[union-attr]  # only with a drawer
            svg = done["svg"]
            (outdir / f"{fig.name}.svg").write_text(svg)
            entry["export_s"]["svg"] = round(done["svg_s"], 3)
            entry["files"] += [f"{fig.name}.vl.json", f"{fig.name}.svg"]
            if "html_s" in done:
                entry["export_s"]["html"] = round(done["html_s"], 3)
                entry["files"].append(f"{fig.name}.html")
            if fig.name in png:
                t0 = time.perf_counter()
                # Rasterized from the SVG just drawn: the same bytes vegalite_to_png gives (it draws that SVG and
                # rasterizes it), without compiling and rendering the spec a second time.
                (outdir / f"{fig.name}.png").write_bytes(vlc.svg_to_png(svg, scale=2))
                entry["export_s"]["png"] = round(time.perf_counter() - t0, 3)
                entry["files"].append(f"{fig.name}.png")
            log(f"{fig.name}: drawn; export {entry['export_s']}")
        else:
            (outdir / f"{fig.name}.svg").write_text(reason_svg(fig.title, fig.reason or ""))
            entry["files"].append(f"{fig.name}.svg")
            log(f"{fig.name}: not drawn — {fig.reason}")
        manifest["figures"].append(entry)

    def finish_ready(wait: bool) -> None:
        while begun and (wait or not begun[0][0].drawn or drawer is None or drawer.ready()):
            finish(*begun.pop(0))

    for fig in figures:
        entry: dict[str, Any] = {
            "name": fig.name,
            "title": fig.title,
            "caption": fig.caption,
            "drawn": fig.drawn,
            "reason": fig.reason,
            "files": [],
            "export_s": {},
        }
        done: dict[str, Any] = {}
        if fig.drawn:
            spec = fig.spec()
            (outdir / f"{fig.name}.vl.json").write_text(json.dumps(spec, separators=(",", ":")))
            if drawer is None:
                t0 = time.perf_counter()
                done["svg"] = vlc.vegalite_to_svg(static_view(spec), vl_version=VEGALITE_VERSION)
                done["svg_s"] = time.perf_counter() - t0
            else:
                drawer.submit(static_view(spec))
            if html:
                t0 = time.perf_counter()
                if bundle is None:
                    bundle = javascript_bundle(bundle_cache)
                (outdir / f"{fig.name}.html").write_text(offline_html(spec, bundle))
                done["html_s"] = time.perf_counter() - t0
        begun.append((fig, entry, done))
        finish_ready(wait=False)
    finish_ready(wait=True)
    if bundle is not None:
        # The Vega/Vega-Lite/vega-embed bundle the HTMLs inline: written beside them so the report, another
        # process, inlines it without compiling it again (2-3 s of CPU).
        (outdir / JS_BUNDLE_FILE).write_text(bundle)
        manifest["javascript_bundle"] = {"file": JS_BUNDLE_FILE, "vl_convert_version": vlc.__version__}
    (outdir / "figures.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def read_javascript_bundle(figdir: str | Path, manifest: dict) -> str | None:
    """The JavaScript bundle export wrote beside the figures, or None when it wrote none, the file is gone, or it
    came from another vl-convert version than the one installed here (the caller then compiles its own)."""
    import vl_convert as vlc

    entry = manifest.get("javascript_bundle") or {}
    path = Path(figdir) / str(entry.get("file", ""))
    if not entry or entry.get("vl_convert_version") != vlc.__version__ or not path.is_file():
        return None
    return path.read_text() or None


def read_manifest(figdir: str | Path, *, as_text: bool = False) -> tuple[dict, dict[str, Any]]:
    """The manifest and the drawn figures' specs, for the report. ``as_text``: each spec as the JSON text export
    wrote (``json.dumps(spec, separators=(",", ":"))``), which the report inlines as it is instead of parsing
    2-3 MB a figure and dumping it again to the same characters (ADR 0237)."""
    figdir = Path(figdir)
    manifest = json.loads((figdir / "figures.json").read_text())
    specs = {f["name"]: (figdir / f"{f['name']}.vl.json").read_text() for f in manifest["figures"] if f["drawn"]}
    if not as_text:
        specs = {name: json.loads(text) for name, text in specs.items()}
    return manifest, specs
