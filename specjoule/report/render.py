"""``results/report.html``: one self-contained file a reader trusts at a glance.

Everything in it is generated from the config, the records' provenance columns and the analysis
tables — nothing typed by hand: what was measured, the checks (failures first), the figures, the
derived tables and the caveats the data call for. The Vega / Vega-Lite / vega-embed JavaScript is
inlined from ``vl_convert.javascript_bundle`` (no CDN, no network; ADR 0033), once, and the
figures' specs ride along as JSON. A small script records render errors and the number of charts
drawn in ``<body data-…>`` attributes, which the headless-browser test reads (ADR 0034).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import polars as pl

from specjoule import axes, scope
from specjoule.analysis import accounting
from specjoule.report import figures as figs
from specjoule.report import loops, numbers, parallel, schemes
from specjoule.report import roofline as roofline_report
from specjoule.report import spread as report_spread
from specjoule.report.text import fmt

TEMPLATES = Path(__file__).parent / "templates"
MAX_TABLE_ROWS = 400
ENGINE_FIGURES = ("engine_comparison",)
ROOFLINE_FIGURES = ("energy_decomposition",)  # drawn in the roofline section, beside its tables
STATUS_ORDER = {"fail": 0, "flag": 1, "pass": 2, "not_applicable": 3}


@dataclass
class ReportInputs:
    config: dict
    config_hash: str
    records: pl.DataFrame
    checks: pl.DataFrame
    curves: pl.DataFrame
    manifest: dict
    specs: Mapping[str, dict | str]  # a str: the spec's JSON text as figures.export wrote it (read_manifest as_text)
    summary: pl.DataFrame | None = None
    variance: pl.DataFrame | None = None  # results/variance.parquet, when the workflow writes it
    crossover: pl.DataFrame | None = None  # results/crossover.parquet (rule roofline), when the workflow writes it
    paths: dict[str, str] = field(default_factory=dict)  # input name → path, for the reader
    generated_at: str = ""
    # The bundle the figures rule wrote (figures.read_javascript_bundle); None: compile it here.
    javascript_bundle: str | None = None
    # `<campaign>/<cell>` of the planned cells analysis_scope = measured left out (ADR 0216).
    not_measured: tuple[str, ...] = ()

    def figure_inputs(self) -> figs.FigureInputs:
        """The figures' view of the tables (drawable points, record columns, summary intervals)."""
        if not hasattr(self, "_fi"):
            self._fi = figs.FigureInputs.from_config(
                self.config, curves=self.curves, records=self.records, checks=self.checks, summary=self.summary
            )
        return self._fi


@dataclass
class Caveat:
    level: str  # "warn" | "info"
    text: str


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    row_classes: list[str] = field(default_factory=list)
    cell_classes: list[list[str]] = field(default_factory=list)


# --- formatting --------------------------------------------------------------------------------------


def _uniq(df: pl.DataFrame, col: str) -> list:
    if df.height == 0 or col not in df.columns:
        return []
    s = df[col]
    if isinstance(s.dtype, pl.List):
        s = s.explode()
    return sorted({v for v in s.drop_nulls().to_list() if v != ""}, key=str)


def _join(values: Sequence[Any], empty: str = "—") -> str:
    return ", ".join(fmt(v) for v in values) if values else empty


# --- what was measured ---------------------------------------------------------------------------------


def _workload_line(name: str, wl: dict) -> str:
    if wl["kind"] == "open_loop":
        return (
            f"{name}: open loop, Poisson {wl['rate']:g} req/s, {wl['prompt_len']} in / {wl['output_len']} out, "
            f"warm-up {wl['warmup_s']:g} s unsampled, energy window {wl['window_s']:g} s, cool-down {wl['cooldown_s']:g} s"
        )
    return (
        f"{name}: closed batch (B requests together), {wl['prompt_len']} in / {wl['output_len']} out, "
        f"repeated until ≥ {wl['min_window_s']:g} s (≤ {wl['max_repeats']} repeats), warm-up {wl['warmup_s']:g} s"
        + (
            " (none where a cell repeats the configuration of the window before it on its engine: another seed or "
            "window; records: warmup_skipped, ADR 0188)"
            if wl["warmup_s"]
            else ""
        )
    )


def _scheme_line(name: str, s: dict, config: dict) -> str:
    if s["method"] == "baseline":
        return f"{name}: no speculation (baseline)"
    parts = [f"{name}: {s['method']}, k={s.get('k')}"]
    if s.get("drafter"):
        parts.append(f"drafter {s['drafter']}")
    if s.get("synthetic"):
        vecs = s.get("acceptance") or list(config.get("acceptance", {}))
        descr = [
            f"{v} ({k} {val if not isinstance(val, list) else '[' + ', '.join(f'{x:g}' for x in val) + ']'})"
            for v in vecs
            for k, val in config["acceptance"][v].items()
        ]
        parts.append("synthetic acceptance: " + ", ".join(descr))
    return ", ".join(parts)


def measured(inp: ReportInputs) -> list[tuple[str, str]]:
    """(label, value) rows describing the measurement, from config and the records' provenance."""
    c, r = inp.config, inp.records
    rows: list[tuple[str, str]] = []
    rows.append(
        (
            "config",
            f"{c.get('name')} · hash {inp.config_hash}"
            + (
                f" · records carry {_join(_uniq(r, 'config_hash'))}"
                if _uniq(r, "config_hash") not in ([], [inp.config_hash])
                else ""
            ),
        )
    )
    rows.append(("pipeline commit", _join(_uniq(r, "git_commit"))))
    engines = []
    for e in c.get("engines", []):
        sub = r.filter(pl.col("engine") == e) if r.height else r
        engines.append(f"{e} {_join(_uniq(sub, 'engine_version'), '(no record)')}")
    rows.append(("engine", "; ".join(engines)))
    rows.append(("torch / CUDA", f"{_join(_uniq(r, 'torch_version'))} / {_join(_uniq(r, 'cuda_version'))}"))
    rows.append(("device", f"{c.get('device')} · driver {_join(_uniq(r, 'driver_version'))}"))
    gpus = []
    if r.height and "gpu_uuid" in r.columns:
        for (uuid,), grp in r.filter(pl.col("gpu_uuid").is_not_null()).group_by(["gpu_uuid"], maintain_order=True):
            gpus.append(
                f"{_join(_uniq(grp, 'gpu_names'))} {uuid} ({grp.height} cells, power limit "
                f"{_join(_uniq(grp, 'power_limit_w'))} W)"
            )
    rows.append(("GPU(s)", "; ".join(sorted(gpus)) or "none (no GPU in any record)"))
    rows.append(
        (
            "hosts",
            _join(_uniq(r, "hostname"))
            + (f" · SLURM jobs {_join(_uniq(r, 'slurm_job_id'))}" if _uniq(r, "slurm_job_id") else ""),
        )
    )
    meters = _uniq(r, "meter")
    rows.append(
        (
            "meter",
            f"config {c.get('meter')} → recorded {_join(meters)}"
            + (
                f" · timeline {_join([round(x, 1) for x in _uniq(r, 'timeline_hz')])} Hz"
                if _uniq(r, "timeline_hz")
                else ""
            ),
        )
    )
    for name, pair in c.get("models", {}).items():
        t = pair["target"]
        d = pair.get("draft")
        line = f"target {t['model']} ({t.get('load_format', 'auto')}, {t.get('dtype', 'auto')}, TP {t.get('tensor_parallel_size', 1)})"
        if d:
            line += f"; draft {d['model']} ({d.get('load_format', 'auto')})"
        rows.append((f"model pair {name}", line))
    for name, s in c.get("schemes", {}).items():
        rows.append(("scheme", _scheme_line(name, s, c)))
    rows.append(("batch sizes", _join(c.get("batch_sizes", []))))
    rows.append(
        (
            "corpora",
            "; ".join(
                f"{n}: {v['source']}" + (f" {v.get('name') or v.get('dataset') or v.get('path') or ''}".rstrip())
                for n, v in c.get("corpora", {}).items()
            ),
        )
    )
    rows.append(("seeds", _join(c.get("seeds", []))))
    rows.append(("CUDA graphs", _join(["on" if g else "off" for g in c.get("cuda_graphs", [])])))
    for name, wl in c.get("workloads", {}).items():
        rows.append(("workload", _workload_line(name, wl)))
    p = c.get("protocol", {})
    rows.append(
        (
            "protocol",
            f"opening baseline → points in an order shuffled under seed {p.get('run_order_seed')} "
            f"({'salted per campaign family, one engine start per engine group' if p.get('share_engines') else 'salted per campaign'}) → {'closing baseline' if p.get('closing_baseline') else 'no closing baseline'}; "
            f"idle power sampled {p.get('idle_s', 0):g} s before each engine start; prefix caching "
            f"{'on' if c.get('prefix_caching') else 'off'}",
        )
    )
    if r.height and "window_s" in r.columns and r["window_s"].drop_nulls().len():
        rows.append(("energy windows", f"{fmt(r['window_s'].min())} – {fmt(r['window_s'].max())} s"))
    line = accounting.summary_line(accounting.device_time(r))
    if line:
        rows.append(("device time", line))
    planned = _planned(c)
    n_campaigns = r["campaign_id"].n_unique() if r.height else 0
    n_unsupported = schemes.unsupported_records(r).height
    rows.append(
        (
            "cells",
            f"{r.height} recorded of {planned if planned is not None else '?'} planned, in {n_campaigns} campaign(s); "
            + (f"{n_unsupported} of them unsupported by the engine (no window); " if n_unsupported else "")
            + f"{inp.curves.height} speculative points in the curves",
        )
    )
    reps = _replicate_line(r)
    if reps:
        rows.append(("replicates", reps))
    return rows


def _replicate_line(records: pl.DataFrame) -> str:
    """How many windows, seeds, engine replicates and GPU boards the measured records hold."""
    m = schemes.measured_records(records)
    if m.height == 0:
        return ""
    parts = []
    for col, words in (
        ("window_index", "window(s) per cell"),
        ("seed", "seed(s)"),
        ("engine_replicate", "engine replicate(s)"),
        ("gpu_uuid", "GPU board(s)"),
    ):
        if col in m.columns:
            parts.append(f"{m[col].drop_nulls().n_unique()} {words}")
        elif col in ("window_index", "engine_replicate"):
            parts.append(f"1 {words} (not recorded: records before wave 2)")
    return " · ".join(parts)


def _planned_without_record(config: dict, records: pl.DataFrame) -> tuple[int, int] | None:
    """(planned cells whose id no record carries, planned cells), or None when none is missing."""
    try:
        planned = {c.cell_id for c in schemes.planned_cells(config)}
    except Exception:  # a config the cell table cannot expand is reported, not fatal for the report
        return None
    have = set(records["cell_id"].to_list()) if records.height and "cell_id" in records.columns else set()
    missing = len(planned - have)
    return (missing, len(planned)) if missing else None


def _interval_caveats(inp: ReportInputs) -> list[Caveat]:
    """Say where the numbers carry no interval, and what the intervals resample."""
    fi = inp.figure_inputs()
    pts = fi.points.filter(pl.col("energy_ratio").is_not_null()) if fi.points.height else fi.points
    if pts.height == 0:
        return []
    st = fi.stats(pts, [*axes.SLICE_KEYS, *axes.ARM_NAMES], ["energy_ratio"])
    n = st.height
    with_ci = int((st["energy_ratio_band"] == "ci").sum())
    levels = sorted(set(st.filter(pl.col("energy_ratio_band") == "ci")["interval_level"].drop_nulls().to_list()))
    if with_ci == 0:
        why = (
            "no summary table"
            if inp.summary is None or inp.summary.height == 0
            else "the summary holds no interval for them"
        )
        return [
            Caveat(
                "warn",
                f"no energy ratio carries an interval ({why}): one window, no interval — every ratio "
                "is quoted with two significant digits and ≈",
            )
        ]
    out = [
        Caveat(
            "info",
            f"{with_ci} of {n} configurations carry a 95 % interval of their energy ratio (over "
            + ", ".join(numbers.INTERVAL_LEVEL_WORDS.get(x, x) for x in levels)
            + "); numbers are rounded to the digits their interval supports",
        )
    ]
    two_units = report_spread.two_unit_intervals(st)
    if two_units.height:
        two_levels = sorted(set(two_units["interval_level"].drop_nulls().to_list()))
        out.append(
            Caveat(
                "warn",
                f"{two_units.height} of {n} configurations have their interval from two units ("
                + ", ".join(numbers.INTERVAL_LEVEL_WORDS.get(x, x) for x in two_levels)
                + "): it is the range of the two, narrower than a 95 % interval of their mean; "
                "read it beside the variance budget",
            )
        )
    if with_ci < n:
        out.append(
            Caveat(
                "warn",
                f"{n - with_ci} of {n} configurations have no interval (one replicate, or a "
                "replicate left out by a failed check): quoted with ≈ and two significant digits",
            )
        )
    return out


def _planned(config: dict) -> int | None:
    try:
        return len(schemes.planned_cells(config))
    except Exception:  # a config the cell table cannot expand is reported, not fatal for the report
        return None


def run_order(records: pl.DataFrame, max_campaigns: int = 200) -> Table:
    rows = []
    if records.height:
        # One aggregation, not a table operation per campaign (a paper-scale grid has thousands of campaigns).
        seeds = (
            pl.col("run_order_seed").drop_nulls().unique()
            if "run_order_seed" in records.columns
            else pl.lit(None).drop_nulls()
        )
        start = pl.col("window_start").min() if "window_start" in records.columns else pl.lit(None)
        per_campaign = (
            records.sort("run_order_index")
            .group_by("campaign_id", maintain_order=True)
            .agg(seeds=seeds, start=start, names=pl.col("cell_name"))
        )
        for cid, seed_values, first, names in per_campaign.iter_rows():
            seed = _join(sorted({v for v in seed_values if v != ""}, key=str))
            rows.append(
                [cid, seed, fmt(first.isoformat(timespec="seconds") if first is not None else None), " → ".join(names)]
            )
    rows.sort(key=lambda x: x[0])
    note = ""
    if len(rows) > max_campaigns:
        note = f"first {max_campaigns} of {len(rows)} campaigns; every record holds its run_order_index"
        rows = rows[:max_campaigns]
    return Table("Run order", ["campaign", "order seed", "first window", "cells in run order"], rows, note)


# --- checks -------------------------------------------------------------------------------------------------


def checks_view(checks: pl.DataFrame) -> dict:
    """Failures and flags row by row, first; passes and not-applicable summarised per check."""
    if checks is None or checks.height == 0:
        return {"counts": {}, "problems": Table("Checks", [], []), "summary": Table("Passed", [], []), "empty": True}
    counts = {s: int((checks["status"] == s).sum()) for s in STATUS_ORDER}
    ordered = checks.with_columns(_o=pl.col("status").replace_strict(STATUS_ORDER, default=9)).sort(
        ["_o", "check", "campaign_id"]
    )
    problems = ordered.filter(pl.col("status").is_in(["fail", "flag"]))
    prow = [
        [
            r["status"],
            r["check"],
            fmt(r["campaign_id"]),
            _join(r["cell_names"] or []),
            fmt(r["value"]),
            fmt(r["threshold"]),
            fmt(r["detail"]),
        ]
        for r in problems.iter_rows(named=True)
    ]
    rest = (
        ordered.filter(~pl.col("status").is_in(["fail", "flag"]))
        .group_by(["check", "status"], maintain_order=True)
        .agg(n=pl.len(), vmin=pl.col("value").min(), vmax=pl.col("value").max(), threshold=pl.col("threshold").first())
    )
    srow = [
        [
            r["status"],
            r["check"],
            str(r["n"]),
            "—" if r["vmin"] is None else f"{fmt(r['vmin'])} – {fmt(r['vmax'])}",
            fmt(r["threshold"]),
        ]
        for r in rest.iter_rows(named=True)
    ]
    return {
        "counts": counts,
        "problems": Table(
            "Failed and flagged",
            ["status", "check", "campaign", "cells", "value", "threshold", "detail"],
            prow,
            row_classes=[r[0] for r in prow],
        ),
        "summary": Table(
            "Passed and not applicable (per check)",
            ["status", "check", "rows", "value range", "threshold"],
            srow,
            row_classes=[r[0] for r in srow],
        ),
        "empty": False,
    }


# --- derived tables -----------------------------------------------------------------------------------------


def _table_from_df(title: str, df: pl.DataFrame, *, note: str = "", source: str = "") -> Table:
    total = df.height
    shown = df.head(MAX_TABLE_ROWS)
    if total > MAX_TABLE_ROWS:
        note = (
            (note + " · " if note else "")
            + f"first {MAX_TABLE_ROWS} of {total} rows"
            + (f"; all in {source}" if source else "")
        )
    rows = [[fmt(v) for v in r] for r in shown.iter_rows()]
    return Table(title, list(df.columns), rows, note)


def configuration_table(inp: ReportInputs) -> Table | None:
    """Every configuration (failed campaigns included, marked): means over replicates, the energy
    ratio with its interval rounded to what the interval supports, and what stands behind it."""
    curves = inp.curves
    if curves.height == 0:
        return None
    fi = inp.figure_inputs()
    c = figs.with_record_columns(curves, inp.records).with_columns(
        arm=pl.when(pl.col("acceptance_name").is_null())
        .then(pl.col("scheme"))
        .otherwise(pl.col("scheme") + pl.lit(" · ") + pl.col("acceptance_name")),
        tbt_ms=pl.col("tpot_mean_s") * 1000,
        flag_list=pl.col("flags").list.join(","),
        failed_list=pl.col("failed_checks").list.join(","),
    )
    keys = [*axes.SLICE_KEYS, "arm"]
    st = fi.stats(c, keys, ["energy_ratio", "realized_L", "mj_per_committed_token"])
    extra = c.group_by(keys, maintain_order=True).agg(
        baseline_mj=pl.col("baseline_mj_per_committed_token").mean(),
        tbt_ms=pl.col("tbt_ms").mean(),
        tbt_ratio=pl.col("tbt_ratio").mean(),
        flags=pl.col("flag_list").filter(pl.col("flag_list") != "").unique().str.join(","),
        failed_checks=pl.col("failed_list").filter(pl.col("failed_list") != "").unique().str.join(","),
    )
    t = st.join(extra, on=keys, how="left", nulls_equal=True).sort(keys)
    has_energy = t["energy_ratio"].drop_nulls().len() > 0
    ratio = [
        schemes.cell_text(r["energy_ratio"], r["energy_ratio_lo"], r["energy_ratio_hi"], r["energy_ratio_band"], False)
        if r["energy_ratio"] is not None
        else "—"
        for r in t.iter_rows(named=True)
    ]
    saving = [
        numbers.saving_words(
            r["energy_ratio"],
            r["energy_ratio_lo"] if r["energy_ratio_band"] == "ci" else None,
            r["energy_ratio_hi"] if r["energy_ratio_band"] == "ci" else None,
        )
        if r["energy_ratio"] is not None
        else "—"
        for r in t.iter_rows(named=True)
    ]
    out = t.select(
        *keys,
        pl.col("n_rows").alias("replicates"),
        pl.col("realized_L").round(3),
        pl.col("mj_per_committed_token").round(2).alias("mj_per_token"),
        pl.col("baseline_mj").round(2),
        pl.Series("energy ratio [95 % interval]", ratio),
        pl.Series("energy per committed token", saving),
        pl.col("tbt_ms").round(2),
        pl.col("tbt_ratio").round(3),
        pl.col("support").alias("behind it"),
        "flags",
        "failed_checks",
    )
    if not has_energy:
        out = out.drop("mj_per_token", "baseline_mj", "energy ratio [95 % interval]", "energy per committed token")
    return _table_from_df(
        "Per configuration (means over replicates; ratio = energy per committed token / paired baseline)",
        out,
        source="results/curves.parquet",
    )


def tbt_table(inp: ReportInputs) -> Table | None:
    t = figs.tbt_targets_table(inp.figure_inputs())
    if t.height == 0:
        return None
    t = t.select(
        *(k for k in axes.SLICE_KEYS if k != "batch_size"),
        "target_ms",
        "met",
        "arm",
        "batch_size_best",
        pl.col("tbt_ms").round(2),
        pl.col("mj_per_committed_token").round(2).alias("mj_per_token"),
        "baseline_batch_size",
        pl.col("baseline_mj").round(2),
        pl.col("saving_vs_best_baseline_pct").round(1).alias("saving_vs_best_baseline_%"),
    )
    return _table_from_df(
        "Lowest-energy configuration meeting each TBT target (and the best without speculation)",
        t,
        note="TBT = mean time between tokens, seed means; targets from config report.tbt_targets_ms",
    )


def tp_table(inp: ReportInputs) -> Table | None:
    """TP = 1 against TP = 2 (or any TPs measured) at the same arm (report.parallel, ADR 0157); only where TP varies."""
    t = parallel.tp_comparison(inp.records, inp.checks)
    if t.height == 0:
        return None
    t = t.select(
        "engine",
        pl.col("target_model").alias("target"),
        "workload",
        "corpus",
        "cuda_graphs",
        pl.col("batch_size").alias("B"),
        "scheme",
        pl.col("acceptance_name").alias("acceptance"),
        pl.col("tp").alias("TP"),
        pl.col("n").alias("records"),
        pl.col("mj_per_token").round(2).alias("mJ/token"),
        pl.col("mj_vs_reference").round(3).alias("mJ/token vs smallest TP"),
        pl.col("energy_ratio").round(4).alias("ratio to its baseline"),
        pl.col("per_gpu_energy_split").alias("energy per GPU"),
    )
    return _table_from_df(
        "Tensor parallelism: energy per committed token at each TP of the same arm",
        t,
        note="means over replicates; energy summed over the cell's GPUs; ratio = point / the baseline "
        "of its own campaign (same TP); energy per GPU = each GPU's mean share, in metered order; "
        "campaigns that failed a check are left out",
    )


def device_time_table(records: pl.DataFrame) -> Table | None:
    """Held device time vs time inside energy windows, per engine launch (analysis.accounting, ADR 0038)."""
    t = accounting.device_time(records)
    if t.height == 0:
        return None
    t = t.with_columns(
        pl.col("device").str.slice(0, 20),
        *(pl.col(c).round(1) for c in accounting.ACCOUNT_COLUMNS[4:9]),
        (pl.col("window_share") * 100).round(1).alias("in_windows_%"),
    ).drop("window_share")
    return _table_from_df(
        "Device time: held vs inside energy windows (per engine launch)",
        t,
        note="held = device lease to the launch's last record (engine teardown and queueing not "
        "included); other = idle-power measurement, prompts, drains and cool-downs between cells",
    )


# --- schemes: the comparison at matched L / accepted per pass, and what ran (ADR 0093, 0094) -----------


def scheme_section(inp: ReportInputs) -> dict:
    fi = inp.figure_inputs()
    order = [n for n, sc in inp.config.get("schemes", {}).items() if sc.get("method") != "baseline"]
    comparisons = [
        t for t in (schemes.comparison_table(fi, "L", order), schemes.comparison_table(fi, "apv", order)) if t
    ]
    matrix = schemes.scheme_matrix(inp.records, inp.config)
    ulist = schemes.unsupported_list(inp.records)
    unsupported = None
    if ulist.height:
        unsupported = _table_from_df(
            "Unsupported cells (the engine's own reason)",
            ulist.select(
                "engine",
                "family",
                pl.col("model_pair").alias("target"),
                "scheme",
                "cells",
                pl.col("batch_sizes").alias("B"),
                "reason",
            ),
            note="records with status unsupported: identity and environment, no window, counters or energy",
        )
    return {"comparisons": comparisons, "matrix": matrix, "unsupported": unsupported}


# --- spread: the variance budget (results/variance.parquet, written by the analysis) -------------------------

VARIANCE_LEVELS = ("window", "seed", "engine_replicate", "engine_restart", "gpu", "board", "run", "residual", "total")
VARIANCE_COLUMNS = ("family", "metric", "level", "variance", "share", "n_units", "estimable", "note")
# specjoule.analysis.variance writes `component` and `n_groups` (ADR 0084): the same meaning under its names.
_VARIANCE_NAMES = {"component": "level", "n_groups": "n_units"}


def variance_table(variance: pl.DataFrame | None) -> Table | None:
    """One row per campaign family × metric × replicate level: its variance and share, or "not
    estimable" with the analysis' reason (one unit, a level confounded with another)."""
    if variance is None or variance.height == 0:
        return None
    variance = variance.rename(
        {a: b for a, b in _VARIANCE_NAMES.items() if a in variance.columns and b not in variance.columns}
    )
    missing = [c for c in VARIANCE_COLUMNS if c not in variance.columns]
    if missing:
        raise ValueError(f"results/variance.parquet lacks column(s) {', '.join(missing)}")
    rank = {lv: i for i, lv in enumerate(VARIANCE_LEVELS)}
    v = variance.with_columns(
        _rank=pl.col("level").replace_strict(rank, default=len(rank), return_dtype=pl.Int64)
    ).sort("family", "metric", "_rank", "level")
    rows, classes = [], []
    for r in v.iter_rows(named=True):
        estimable = bool(r["estimable"]) and r["variance"] is not None
        level = numbers.INTERVAL_LEVEL_WORDS.get(r["level"], r["level"])
        rows.append(
            [
                r["family"],
                r["metric"],
                level,
                fmt(r["variance"], 3) if estimable else "—",
                (fmt(r["share"] * 100, 2) + " %")
                if estimable and r["share"] is not None
                else ("not estimable" if not estimable else "—"),
                fmt(r["n_units"]),
                "yes" if estimable else "not estimable",
                fmt(r["note"]) if r["note"] else "",
            ]
        )
        classes.append("" if estimable else "not-estimable")
    note = (
        "share of each metric's variance by replicate level, per campaign family: more units at the level with the "
        "largest share narrow the interval most. A level the evidence cannot separate (one unit, or confounded with "
        "another) is not estimable and says why; its share is not guessed."
    )
    return Table(
        "Variance budget (results/variance.parquet)",
        ["campaign family", "metric", "level", "variance", "share", "units", "estimable", "note"],
        rows,
        note,
        row_classes=classes,
    )


MECHANISM_WORDS = {
    "vllm_synthetic_rates": "a per-position acceptance vector (vLLM synthetic rates)",
    "sglang_simulate_acc_len": "a simulated mean accept length per step (SGLang SGLANG_SIMULATE_ACC_LEN)",
    "model": "the drafter's own acceptance",
}


def engine_tables(inp: ReportInputs) -> list[Table]:
    """The engine comparison (figures.engine_comparison_table), one table per engine pair, its columns
    named after the engines; each side's acceptance mechanism is a column of its own (ADR 0037)."""
    t = figs.engine_comparison_table(inp.figure_inputs())
    out = []
    if t.height == 0:
        return out
    show_round = t["round_time_ms_a"].drop_nulls().len() + t["round_time_ms_b"].drop_nulls().len() > 0
    for (a, b), grp in t.group_by(["engine_a", "engine_b"], maintain_order=True):
        cols = [
            pl.col("gpu_model").alias("GPU"),
            "model_pair",
            "workload",
            "corpus",
            "cuda_graphs",
            pl.col("batch_size").alias("B"),
            "seed",
            *[
                pl.col(k).alias(label)
                for k, label in (("engine_replicate", "engine replicate"), ("window_index", "window"))
                if k in t.columns
            ],
            "scheme",
            (
                pl.col("acceptance_kind").fill_null("model")
                + pl.lit(" L=")
                + pl.col("configured_L").round(2).cast(pl.String).fill_null("—")
            ).alias("acceptance"),
        ]
        for side, eng in (("a", a), ("b", b)):
            cols += [
                pl.col(f"acceptance_mechanism_{side}").alias(f"{eng} acceptance mechanism"),
                pl.col(f"mj_per_committed_token_{side}").round(2).alias(f"{eng} mJ/token"),
                pl.col(f"baseline_mj_per_committed_token_{side}").round(2).alias(f"{eng} baseline mJ/token"),
                pl.col(f"energy_ratio_{side}").round(4).alias(f"{eng} ratio"),
                pl.col(f"tbt_ms_{side}").round(3).alias(f"{eng} TBT ms"),
                pl.col(f"realized_L_{side}").round(4).alias(f"{eng} realized L"),
            ]
            if show_round:
                cols.append(pl.col(f"round_time_ms_{side}").round(3).alias(f"{eng} round ms"))
        cols += [
            pl.col("same_mechanism").alias("same mechanism"),
            pl.col("mj_ratio_b_over_a").round(4).alias(f"mJ/token {b} / {a}"),
            pl.col("energy_ratio_b_over_a").round(4).alias(f"ratio {b} / {a}"),
            pl.col("tbt_ratio_b_over_a").round(4).alias(f"TBT {b} / {a}"),
        ]
        mechs = sorted(set(grp["acceptance_mechanism_a"].to_list()) | set(grp["acceptance_mechanism_b"].to_list()))
        note = (
            "points both engines measured with everything else equal on one GPU model, per seed; ratio = point / "
            "its own engine's baseline (same campaign); campaigns that failed a check are left out"
        )
        if not grp["same_mechanism"].all():
            note += (
                " · the engines produce synthetic acceptance differently — "
                + "; ".join(f"{m}: {MECHANISM_WORDS.get(m, m)}" for m in mechs)
                + ": not the same mechanism, so part of a difference may be how acceptance is produced"
            )
        out.append(_table_from_df(f"Engine comparison: {a} vs {b} (engine_comparison)", grp.select(cols), note=note))
    return out


def _engine_names(inp: ReportInputs) -> list[str]:
    """Engines in the records, in the config's order."""
    recorded = _uniq(inp.records, "engine")
    configured = list(inp.config.get("engines", []))
    return [e for e in configured if e in recorded] + [e for e in recorded if e not in configured]


def failed_table(inp: ReportInputs) -> Table | None:
    failed = _failed_campaigns(inp)
    if not failed:
        return None
    in_curves = set(inp.curves["campaign_id"].to_list()) if inp.curves.height else set()
    rows = [
        [cid, ", ".join(checks), "yes, marked (allow_failed_checks)" if cid in in_curves else "no"]
        for cid, checks in sorted(failed.items())
    ]
    return Table(
        "Campaigns with a failed check (left out of every figure)", ["campaign", "failed checks", "in curves"], rows
    )


def _failed_campaigns(inp: ReportInputs) -> dict[str, list[str]]:
    """campaign → the pre-registered checks it failed (energy_measured aside: it refuses only energy)."""
    if inp.checks is None or inp.checks.height == 0:
        return {}
    failed = inp.checks.filter((pl.col("status") == "fail") & (pl.col("check") != figs.ENERGY_CHECK))
    out: dict[str, list[str]] = {}
    for r in failed.iter_rows(named=True):
        lst = out.setdefault(r["campaign_id"], [])
        if r["check"] not in lst:
            lst.append(r["check"])
    return out


# --- caveats, generated from the data ----------------------------------------------------------------


#: A window whose samples gave the power cap as a clock reason this often ran at the board's limit (ADR 0230).
POWER_CAP_SHARE_NOTED = 0.5


def power_cap_caveats(records: pl.DataFrame) -> list[Caveat]:
    """An info caveat naming the speculative windows held at the board's power cap for at least half their
    samples, with their SM clock beside their baselines' (records.parquet's window columns, ADR 0230)."""
    need = {"window_power_capped_share", "window_sm_clock_median_mhz", "role", "campaign_id"}
    if not need <= set(records.columns):
        return []
    capped = records.filter(
        (pl.col("role") == axes.ROLE_POINT) & (pl.col("window_power_capped_share") >= POWER_CAP_SHARE_NOTED)
    )
    if not capped.height:
        return []
    campaigns = sorted(set(capped["campaign_id"].to_list()))
    bases = records.filter((pl.col("role") != axes.ROLE_POINT) & pl.col("campaign_id").is_in(campaigns))
    clock = capped["window_sm_clock_median_mhz"].drop_nulls()
    base_clock = bases["window_sm_clock_median_mhz"].drop_nulls()
    beside = f", against {base_clock.median():.0f} MHz in their baselines' windows" if base_clock.len() else ""
    span = f"SM clock median {clock.min():.0f}–{clock.max():.0f} MHz{beside}; " if clock.len() else ""
    return [
        Caveat(
            "info",
            f"{capped.height} speculative window(s) ran at the board's power cap for at least "
            f"{POWER_CAP_SHARE_NOTED:.0%} of their samples ({_join(campaigns)}): {span}their ratios are ratios at "
            "the power limit (a condition of the board, not a discard), and a board with another limit would give "
            "others",
        )
    ]


def _span(values: pl.Series, fmt: str) -> str:
    lo, hi = format(values.min(), fmt), format(values.max(), fmt)
    return lo if lo == hi else f"{lo}–{hi}"


def graphs_off_caveats(records: pl.DataFrame) -> list[Caveat]:
    """A warn caveat where GPU baselines ran with CUDA graphs both off and on (a capture-bias config): the
    graphs-off baselines' step and GPU busy fraction beside the graphs-on ones' (records.parquet). Without graphs
    a small batch can be host-bound (2026-12-04: a 14.5 x longer step, the GPU busy 8 %), and speculation's saving
    then includes launch overhead that graph capture removes. All cells off: caveats()' config-level warning."""
    need = {"cuda_graphs", "role", "round_time_ms", "gpu_busy_fraction"}
    if not need <= set(records.columns):
        return []
    bases = records.filter(
        (pl.col("role") != axes.ROLE_POINT)
        & pl.col("round_time_ms").is_not_null()
        & pl.col("gpu_busy_fraction").is_not_null()
    )
    off, on = bases.filter(pl.col("cuda_graphs").eq(False)), bases.filter(pl.col("cuda_graphs").eq(True))
    if not off.height or not on.height:
        return []
    return [
        Caveat(
            "warn",
            f"CUDA graphs off in {off.height} baseline window(s): a baseline step takes "
            f"{_span(off['round_time_ms'], '.2f')} ms against {_span(on['round_time_ms'], '.2f')} ms with graphs "
            f"on, the GPU busy {_span(off['gpu_busy_fraction'], '.2f')} of the window against "
            f"{_span(on['gpu_busy_fraction'], '.2f')} (NVML utilization): a graphs-off saving includes launch "
            "overhead that graph capture removes (the CUDA graphs figure's capture bias)",
        )
    ]


# The runner controls of the capture bias (ADR 0092, amended 2026-12-06e): each model measured on the other runner
# on one H100, both graph modes with both baselines; the bias at L = 4 in percentage points. A test holds these equal
# to capture_bias_table over the committed evidence.
CAPTURE_RUNNER_CONTROLS = {
    "session": "2026-12-06e",
    "board": "H100",
    "dense": {"model": "Qwen3-8B", "runner": "V1", "bias_pp": -0.4},
    "moe": {"model": "Qwen3-30B-A3B", "runner": "V2", "bias_pp": 22.9},
}


def capture_runner_caveats(records: pl.DataFrame) -> list[Caveat]:
    """A warn caveat where models measured with CUDA graphs both off and on ran on different model runners
    (``engine_config.model_runner``): vLLM 0.26 picks Model Runner V2 for a dense architecture and V1 for an MoE one
    (2026-12-04b), so the CUDA graphs figure's dense/MoE contrast of the capture bias is also a runner contrast. The
    caveat quotes the pre-registered controls (``CAPTURE_RUNNER_CONTROLS``), which a report's own records cannot show."""
    if not {"cuda_graphs", "model_pair", "engine", "engine_config"} <= set(records.columns):
        return []
    runner = pl.col("engine_config").str.json_path_match("$.model_runner")
    both = (
        records.group_by("engine", "model_pair")
        .agg(pl.col("cuda_graphs").n_unique().alias("modes"), runner.drop_nulls().unique().sort().alias("runners"))
        .filter((pl.col("modes") == 2) & (pl.col("runners").list.len() > 0))
        .sort("engine", "model_pair")
    )
    out = []
    for (engine,), models in both.group_by("engine", maintain_order=True):
        if models.height < 2 or models["runners"].explode().n_unique() < 2:
            continue
        each = ", ".join(f"{m} on {'/'.join(r)}" for m, r in models.select("model_pair", "runners").iter_rows())
        out.append(
            Caveat(
                "warn",
                f"{engine}: the models measured with CUDA graphs off and on ran on different model runners ({each}; "
                "the engine picks it by architecture): a difference between their capture biases is also the "
                "runners' difference, not the model kind's alone. The pre-registered controls ran each model on "
                "the other runner ("
                + _runner_controls_text()
                + "): there, each bias stayed by its model kind, not by its runner",
            )
        )
    return out


def _runner_controls_text() -> str:
    c = CAPTURE_RUNNER_CONTROLS
    each = ", ".join(f"{c[k]['model']} on {c[k]['runner']} {c[k]['bias_pp']:+.1f} pp" for k in ("dense", "moe"))
    return f"{c['session']}, one {c['board']}, at L = 4: {each}; one window per arm"


def expert_routing_caveats(curves: pl.DataFrame, dummy_pairs: Sequence[str] = ()) -> list[Caveat]:
    """A warn caveat naming the MoE points, and the campaigns whose baselines, ran rounds shorter than the board's
    HBM needs to read the routed experts uniform routing expects their verify pass to touch (the roofline's
    ``below_expert_floor`` and ``baseline_below_expert_floor``, ADR 0242): those passes reached fewer experts, so
    a ratio's energy depends on where its tokens routed — with dummy weights, on random router weights and the
    tokens each arm happens to feed, not on the scheme alone."""
    need = {"below_expert_floor", "expert_floor_ms", "round_time_ms", "campaign_id", "cell_name"}
    if not need <= set(curves.columns):
        return []
    points = curves.filter(pl.col("below_expert_floor").eq(True)).sort("campaign_id", "cell_name")
    bases = (
        sorted(set(curves.filter(pl.col("baseline_below_expert_floor").eq(True))["campaign_id"].to_list()))
        if "baseline_below_expert_floor" in curves.columns
        else []
    )
    if not points.height and not bases:
        return []
    parts = []
    if points.height:
        each = "; ".join(
            f"{x['cell_name']} in {x['campaign_id']}: {x['round_time_ms']:.2f} ms against {x['expert_floor_ms']:.2f}"
            for x in points.head(4).iter_rows(named=True)
        ) + (f"; {points.height - 4} more" if points.height > 4 else "")
        parts.append(f"{points.height} point(s) ({each})")
    if bases:
        parts.append(f"the baselines of {len(bases)} campaign(s) ({_join(bases)})")
    pairs: list[str] = []
    if "model_pair" in curves.columns:
        named = curves.filter(pl.col("below_expert_floor").eq(True) | pl.col("campaign_id").is_in(bases))
        pairs = sorted(set(named["model_pair"].to_list()) & set(dummy_pairs))
    why = (
        f" With dummy weights ({', '.join(pairs)}) routing follows random router weights and the tokens each arm "
        "happens to feed, not a trained router."
        if pairs
        else ""
    )
    return [
        Caveat(
            "warn",
            "MoE rounds shorter than the board's HBM needs to read the routed experts uniform routing would touch: "
            f"{' and '.join(parts)}. Those passes reached fewer experts than the roofline assumes, and a ratio whose "
            f"point and baseline reached different numbers of experts measures routing as much as the scheme.{why} "
            "(ADR 0242)",
        )
    ]


def caveats(inp: ReportInputs) -> list[Caveat]:
    c, all_records, cur = inp.config, inp.records, inp.curves
    # Measured scope (ADR 0216): first, what the verdict below does not cover.
    out: list[Caveat] = [Caveat("warn", line) for line in scope.not_measured_lines(inp.not_measured)]
    if all_records.height == 0:
        return [Caveat("warn", "no records: nothing was measured")]
    # An unsupported record has no window, meter or counters: the caveats about measurements read the others.
    r = schemes.measured_records(all_records)
    unsupported = schemes.unsupported_list(all_records)
    if unsupported.height:
        out.append(
            Caveat(
                "warn",
                f"{int(unsupported['cells'].sum())} cell(s) unsupported by their engine "
                f"({unsupported.height} engine × target × scheme combination(s)): they have no energy "
                "and no point; the scheme matrix lists each with the engine's own reason",
            )
        )
    if r.height == 0:
        return out + [Caveat("warn", "no measured record: every cell was unsupported by its engine")]
    meters = r["meter"].fill_null("none")
    if (meters == "none").all():
        out.append(
            Caveat(
                "warn",
                "meter: none — energy not measured on this machine; every energy figure and column is "
                "left out (null, never 0)",
            )
        )
    elif (meters == "none").any():
        out.append(
            Caveat("warn", f"meter: none on {int((meters == 'none').sum())} of {r.height} cells — those have no energy")
        )
    if (r["device"] == "cpu").all():
        out.append(
            Caveat("info", "device: cpu — this run checks the chain end to end; its timings say nothing about GPUs")
        )
    dummy = [
        n
        for n, p in c.get("models", {}).items()
        if p["target"].get("load_format") == "dummy" or (p.get("draft") or {}).get("load_format") == "dummy"
    ]
    # n-gram lookup has no drafter weights: only a drafter model's acceptance is random with dummy weights.
    if dummy and (r["acceptance_kind"].is_null() & ~r["method"].is_in(["baseline", "ngram"])).any():
        out.append(
            Caveat(
                "warn",
                f"dummy (random) weights in model pair(s) {', '.join(dummy)}: acceptance by a model "
                "drafter measures random weights, not a real drafter",
            )
        )
    cfg_hashes = _uniq(r, "config_hash")
    if cfg_hashes and cfg_hashes != [inp.config_hash]:
        out.append(
            Caveat(
                "warn",
                f"records carry config hash {_join(cfg_hashes)}, the report's config is {inp.config_hash}: "
                "the checks' thresholds or the grid changed since the runs",
            )
        )
    missing = _planned_without_record(c, all_records)
    if missing:
        out.append(Caveat("warn", f"{missing[0]} of {missing[1]} planned cells have no record (failed or not run)"))
    failed = _failed_campaigns(inp)
    if failed:
        names = sorted({ch for v in failed.values() for ch in v})
        n_pts = int((cur["failed_checks"].list.len() > 0).sum()) if cur.height and "failed_checks" in cur.columns else 0
        out.append(
            Caveat(
                "warn",
                f"{len(failed)} campaign(s) failed pre-registered checks ({', '.join(names)}); "
                + (
                    f"checks.allow_failed_checks let derive keep their {n_pts} point(s), marked in "
                    "curves.parquet and the per-configuration table; no figure draws them"
                    if n_pts
                    else "derive left their points out"
                ),
            )
        )
    elif c.get("checks", {}).get("allow_failed_checks"):
        out.append(Caveat("info", "config checks.allow_failed_checks is true (no campaign needed it)"))
    if inp.checks is not None and inp.checks.height:
        flags = inp.checks.filter(pl.col("status") == "flag")
        if flags.height:
            out.append(
                Caveat(
                    "info",
                    f"{flags.height} flag(s), not discards: "
                    + "; ".join(sorted({f"{x['check']} ({x['campaign_id']})" for x in flags.iter_rows(named=True)})[:6])
                    + (" …" if flags.height > 6 else ""),
                )
            )
    out += power_cap_caveats(r)
    out += graphs_off_caveats(r)
    out += capture_runner_caveats(r)
    dummy_targets = [n for n, p in c.get("models", {}).items() if p["target"].get("load_format") == "dummy"]
    out += expert_routing_caveats(cur, dummy_targets)
    spread = figs.concurrency_spread(r)
    if spread.height:
        worst = spread.with_columns(a=pl.col("diff_pct").abs()).sort("a", descending=True).row(0, named=True)
        tol = c.get("checks", {}).get("concurrency_spread_max")
        out.append(
            Caveat(
                "warn" if tol is not None and abs(worst["diff_pct"]) > tol * 100 else "info",
                f"open-loop arms differ in concurrency by up to {abs(worst['diff_pct']):.1f} % "
                f"({worst['cell_name']} in {worst['campaign_id']}"
                + (f"; pre-registered limit {tol * 100:g} %" if tol is not None else "")
                + "): "
                "concurrency is an outcome in open loop, and arms at different concurrency are not comparable",
            )
        )
    reasons = _uniq(cur, "energy_refused_reason")
    if reasons and not (meters == "none").any():
        n = int(cur["energy_refused_reason"].is_not_null().sum())
        out.append(Caveat("warn", f"energy refused for {n} point(s): {'; '.join(reasons)}"))
    if r["synthetic"].fill_null(False).any():
        out.append(
            Caveat(
                "info",
                "synthetic acceptance: it measures how energy responds to acceptance with everything else "
                "held fixed; it says nothing about the acceptance any real drafter reaches",
            )
        )
    if "acceptance_mechanism" in r.columns and r["engine"].n_unique() > 1:
        syn = r.filter(pl.col("synthetic").fill_null(False))
        mechs = syn.group_by("engine").agg(pl.col("acceptance_mechanism").unique().sort()).sort("engine")
        if syn.height and syn["acceptance_mechanism"].n_unique() > 1:
            out.append(
                Caveat(
                    "warn",
                    "synthetic acceptance is produced differently per engine ("
                    + "; ".join(
                        f"{m['engine']}: {', '.join(m['acceptance_mechanism'])}" for m in mechs.iter_rows(named=True)
                    )
                    + "): SGLang simulates a mean accept length per step, vLLM draws a per-position "
                    "vector — engines compared at the same configured L are not under the same mechanism",
                )
            )
    if (meters == "nvml").any():
        host = " — which favours drafting on the host (ngram)" if (r["method"] == "ngram").any() else ""
        out.append(
            Caveat(
                "info",
                "energy is the GPU board's NVML counter only: host CPU, memory, network and cooling are "
                f"not counted{host}",
            )
        )
    if len(c.get("seeds", [])) < 2:
        out.append(Caveat("info", "one seed per configuration: no spread across seeds is shown"))
    out += _interval_caveats(inp)
    v1_draft = _vllm_v1_draft_model(r)
    if v1_draft:
        out.append(Caveat("warn", v1_draft))
    sglang_draft = _sglang_draft_model(r)
    if sglang_draft:
        out.append(Caveat("warn", sglang_draft))
    triton_verify = _sglang_triton_verify(r)
    if triton_verify:
        out.append(Caveat("warn", triton_verify))
    if c.get("device") == "cuda" and c.get("cuda_graphs") == [False]:
        out.append(
            Caveat(
                "warn",
                "CUDA graphs off in every cell: speculation is credited with launch overhead that "
                "graph capture would remove",
            )
        )
    if (r["workload_kind"] == "closed_batch").any():
        out.append(
            Caveat(
                "info",
                "closed batches: B requests submitted together with no further arrivals — not "
                "continuous-batching traffic",
            )
        )
    failed_req = r["requests_failed"].fill_null(0).sum() if "requests_failed" in r.columns else 0
    if failed_req:
        out.append(Caveat("warn", f"{failed_req} failed request(s) across the cells"))
    hz = r["timeline_hz"].drop_nulls() if "timeline_hz" in r.columns else pl.Series([])
    if hz.len() and hz.min() < 9:
        out.append(Caveat("warn", f"timeline sampling fell to {hz.min():.1f} Hz (target 10 Hz) in some cells"))
    not_drawn = [f for f in inp.manifest.get("figures", []) if not f["drawn"]]
    if not_drawn:
        out.append(
            Caveat(
                "info",
                f"{len(not_drawn)} of {len(inp.manifest.get('figures', []))} figures not drawn; "
                "each says why in one line",
            )
        )
    return out


def _vllm_v1_draft_model(r: pl.DataFrame) -> str | None:
    """vLLM 0.26's draft_model arm runs Model Runner V1 (ADR 0029, 0096): say so, from the records' engine_config,
    with the measured round against its baseline's step and the GPU's busy fraction, wherever such an arm was
    measured. With async scheduling too: 0.26.0's V1 drafter runs the same k piecewise passes from Python in both
    modes; async scheduling changes only the bookkeeping around them (ADR 0096, addendum 3)."""
    if "engine_config" not in r.columns:
        return None
    arms = r.filter(
        (pl.col("engine") == "vllm") & (pl.col("method") == "draft_model") & pl.col("engine_config").is_not_null()
    )
    if arms.height == 0:
        return None
    v1 = arms.filter(arms["engine_config"].str.json_path_match("$.model_runner") == "v1")
    if v1.height == 0:
        return None
    base = r.filter((pl.col("engine") == "vllm") & (pl.col("method") == "baseline"))
    measured = _measured_round_words(v1, base)
    return (
        f"vLLM 0.26's draft_model speculation ran on its older Model Runner V1 with {_scheduling_words(v1)} and "
        "piecewise CUDA graphs for the draft model (attention outside the graph, every draft pass driven from "
        f"Python; ADR 0096).{measured} Profiled on an H200 (ADR 0096, Result: Qwen2.5-3B with a 0.5B draft, "
        "B = 1, L = 3), 8.5 ms of a 40 ms round is GPU work and the rest is that drafter loop on the host, with "
        "either scheduling. These ratios measure vLLM 0.26's implementation of draft-model speculation as much as "
        f"the method.{_other_vllm_arms_words(r)}"
    )


def _sglang_draft_model(r: pl.DataFrame) -> str | None:
    """SGLang's STANDALONE draft-model arm, the twin of the vLLM caveat (issue 17 item 6, ADR 0096 addendum 6): its
    measured round against its baseline's step and the GPU's busy fraction, wherever such an arm was measured, and
    the H200 profile's split of the round. The round is host-bound on SGLang too, with about a quarter of vLLM's host
    time: the ratios still measure the engine's implementation as well as the method."""
    arms = r.filter((pl.col("engine") == "sglang") & (pl.col("method") == "draft_model"))
    if arms.height == 0:
        return None
    base = r.filter((pl.col("engine") == "sglang") & (pl.col("method") == "baseline"))
    versions = ", ".join(sorted(set(arms["engine_version"].drop_nulls()))) if "engine_version" in arms.columns else ""
    measured = _measured_round_words(arms, base)
    return (
        f"SGLang{' ' + versions if versions else ''}'s draft_model speculation (STANDALONE) drafts with the small "
        "model's kernels launched from Python, a few hundred a round beside one graph replay (ADR 0096, addendum 6)."
        f"{measured} Profiled on an H200 with SGLang 0.5.17 (Qwen2.5-3B with a 0.5B draft, B = 1, L = 3), 8.6 ms of "
        "a 16.2 ms round is GPU work, as on vLLM, and about 7.6 ms is the host's, against about 32 ms on vLLM 0.26's "
        "synchronous path. These ratios measure SGLang's implementation of draft-model speculation as well as the "
        "method, less so than vLLM's."
    )


#: The committed profile the Triton-verify caveat quotes (ADR 0249): SGLang 0.5.17, H100, gemma-4-26B-A4B, EAGLE3 k 3.
TRITON_VERIFY_PROFILE = {
    "B": 32,
    "L": 3,
    "verify_ms": 24.08,
    "step_ms": 8.27,
    "attention_ms": 11.95,
    "step_attention_ms": 1.91,
    "attention_share": 0.64,
}


def _sglang_triton_verify(r: pl.DataFrame) -> str | None:
    """SGLang's speculative arms on its Triton attention backend (the one 0.5.17 asserts for Gemma-4, ADR 0225) verify
    through the extend kernel with a custom mask, not the decode kernel; the H100 profile (ADR 0249) puts most of
    the verify pass's extra time in that attention. Wherever such an arm was measured the report says so, with its
    measured rounds against its baseline's step: the ratios measure that path as well as the method."""
    if "engine_config" not in r.columns:
        return None
    sglang = r.filter((pl.col("engine") == "sglang") & pl.col("engine_config").is_not_null())
    triton = sglang.filter(sglang["engine_config"].str.json_path_match("$.attention_backend") == "triton")
    arms = triton.filter(~pl.col("method").is_in(["baseline", "draft_model"]) & pl.col("method").is_not_null())
    if arms.height == 0:
        return None
    base = triton.filter(pl.col("method") == "baseline")
    # the rounds at the largest batch measured, against that batch's step: a range over batch sizes would mix steps
    measured = _measured_round_words(arms, base, batch=arms["batch_size"].max())
    versions = ", ".join(sorted(set(arms["engine_version"].drop_nulls()))) if "engine_version" in arms.columns else ""
    methods = ", ".join(sorted(set(arms["method"])))
    p = TRITON_VERIFY_PROFILE
    return (
        f"SGLang{' ' + versions if versions else ''}'s {methods} arms ran on its Triton attention backend, which "
        "verifies the drafted tokens through its extend kernel with a custom mask rather than its decode kernel."
        f"{measured} Profiled on an H100 with SGLang 0.5.17 (gemma-4-26B-A4B, EAGLE3 k 3, "
        f"B = {p['B']}, L = {p['L']}; ADR 0249), the verify pass took {p['verify_ms']:.1f} ms of GPU time a round "
        f"against the decode step's {p['step_ms']:.1f} ms, and attention was {100 * p['attention_share']:.0f} % of "
        f"the difference ({p['attention_ms']:.2f} against {p['step_attention_ms']:.2f} ms). These ratios measure "
        "SGLang's Triton verify path as well as the method."
    )


def _other_vllm_arms_words(r: pl.DataFrame) -> str:
    """Which runner the records' other vLLM speculative arms ran on (" Its other speculative arms here: dflash,
    eagle3 on Model Runner V2; mtp on Model Runner V1."), from engine_config: the caveat's subject is the draft_model path, and
    the model runner vLLM chose for the others varies by family (2026-12-04d: EAGLE3 on Qwen3.6 ran on V1)."""
    others = r.filter(
        (pl.col("engine") == "vllm")
        & ~pl.col("method").is_in(["baseline", "draft_model"])
        & pl.col("method").is_not_null()
        & pl.col("engine_config").is_not_null()
    )
    if others.height == 0:
        return ""
    runner = others["engine_config"].str.json_path_match("$.model_runner").fill_null("unrecorded")
    by_runner = (
        others.with_columns(runner.alias("_runner"))
        .group_by("_runner")
        .agg(pl.col("method").unique().sort())
        .sort("_runner", descending=True)
    )
    parts = [
        f"{', '.join(methods)} on {'Model Runner ' + name.upper() if name != 'unrecorded' else 'a runner not recorded'}"
        for name, methods in by_runner.rows()
    ]
    return " Its other speculative arms here: " + "; ".join(parts) + "."


def _scheduling_words(arms: pl.DataFrame) -> str:
    """How the arms were scheduled, from engine_config (null, as in records before it was read, = synchronous)."""
    on = set((arms["engine_config"].str.json_path_match("$.async_scheduling") == "true").fill_null(False).to_list())
    if on == {True}:
        return "async scheduling"
    return "synchronous scheduling" if on == {False} else "synchronous or async scheduling (by arm)"


def _measured_round_words(arms: pl.DataFrame, base: pl.DataFrame, batch: int | None = None) -> str:
    """The arms' measured rounds against their baselines' step, with the busy fraction where recorded (" Here its
    rounds took 28.3–47.5 ms against a 3.1 ms baseline step, the GPU busy …."), or nothing without both. ``batch``:
    only that batch size's arms and baselines (" Here at B = 32 its rounds …"), so one step is read against its own."""
    if batch is not None:
        arms, base = (f.filter(pl.col("batch_size") == batch) for f in (arms, base))
    rounds, steps = arms["round_time_ms"].drop_nulls(), base["round_time_ms"].drop_nulls()
    if not (rounds.len() and steps.len()):
        return ""
    where = f" at B = {batch}" if batch is not None else ""
    return (
        f" Here{where} its rounds took {rounds.min():.1f}–{rounds.max():.1f} ms against a {steps.median():.1f} ms "
        f"baseline step{_busy_words(arms, base)}."
    )


def _busy_words(arms: pl.DataFrame, base: pl.DataFrame) -> str:
    """The arms' NVML busy fraction beside the baselines' (", the GPU busy 0.22–0.38 of those windows against
    0.91–0.99 for the baselines"; one value where the range is one), or nothing where it was not recorded."""
    if "gpu_busy_fraction" not in arms.columns:
        return ""
    busy = arms["gpu_busy_fraction"].drop_nulls()
    if busy.len() == 0:
        return ""
    words = f", the GPU busy {_span(busy, '.2f')} of those windows"
    base_busy = base["gpu_busy_fraction"].drop_nulls()  # base and arms are rows of one records table
    if base_busy.len():
        words += f" against {_span(base_busy, '.2f')} for the baselines"
    return words + " (NVML utilization)"


# --- assembly -------------------------------------------------------------------------------------------------


@lru_cache(maxsize=2)
def javascript_bundle(vl_version: str = figs.VEGALITE_VERSION, prebuilt: str | None = None) -> str:
    """Vega + Vega-Lite + vega-embed as one script, offline (vl-convert carries them); ``prebuilt``: the same
    script as the figures rule wrote it (vl_convert.javascript_bundle of the same version)."""
    if prebuilt is not None:
        bundle = prebuilt
    else:
        import vl_convert as vlc

        bundle = vlc.javascript_bundle(vl_version=vl_version)
    # "</script" inside the inlined code would end the element early; "<\/" means the same in JS.
    return bundle.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def _script_json(obj: Any) -> str:
    # Inside <script type="application/json">, only "</" can end the element early. A str is JSON text already
    # dumped with these separators (a spec as figures.export wrote it, ADR 0237): the same characters.
    return (obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))).replace("</", "<\\/")


def headline_ratios(inp: ReportInputs) -> tuple[tuple[str, str, str] | None, tuple[str, str, str] | None]:
    """The best and the worst configuration by mean energy ratio, each as (words rounded to its
    interval, the configuration, what stands behind it) — no digit the interval does not support."""
    fi = inp.figure_inputs()
    pts = fi.points.filter(pl.col("energy_ratio").is_not_null()) if fi.points.height else fi.points
    if pts.height == 0:
        return None, None
    keys = [*axes.SLICE_KEYS, *axes.ARM_NAMES]
    st = fi.stats(pts, keys, ["energy_ratio"]).sort("energy_ratio", "engine", "model_pair", "scheme", nulls_last=True)

    def describe(r: dict) -> tuple[str, str, str]:
        arm = r["scheme"] + (f" · {r['acceptance_name']}" if r["acceptance_name"] else "")
        ci = r["energy_ratio_band"] == "ci"
        words = numbers.saving_words(
            r["energy_ratio"], r["energy_ratio_lo"] if ci else None, r["energy_ratio_hi"] if ci else None
        )
        where = (
            f"{r['engine']}, {r['model_pair']}, {arm}, B={r['batch_size']}, {r['corpus']}, {r['workload']}, "
            f"graphs {'on' if r['cuda_graphs'] else 'off'}"
        )
        return words, where, r["support"]

    return describe(st.row(0, named=True)), describe(st.row(-1, named=True))


def glance(inp: ReportInputs, checks: dict) -> dict:
    counts = checks.get("counts", {})
    failed = _failed_campaigns(inp)
    energy_fail = 0
    if inp.checks is not None and inp.checks.height:
        energy_fail = int(((inp.checks["check"] == figs.ENERGY_CHECK) & (inp.checks["status"] == "fail")).sum())
    energy = inp.records.height > 0 and (inp.records["meter"].fill_null("none") != "none").any()
    best, worst = headline_ratios(inp)
    refusing = sum(1 for _ in failed)
    return {
        "status": "fail" if failed else ("flag" if counts.get("flag") else ("none" if energy_fail else "pass")),
        "counts": counts,
        "failed_campaigns": refusing,
        "energy_fail": energy_fail,
        "energy": energy,
        "best": best,
        "worst": worst,
        "drawn": sum(1 for f in inp.manifest.get("figures", []) if f["drawn"]),
        "figures": len(inp.manifest.get("figures", [])),
    }


def render(inp: ReportInputs) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["j2", "html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    checks = checks_view(inp.checks)
    tables = [
        t
        for t in (
            failed_table(inp),
            configuration_table(inp),
            tbt_table(inp),
            tp_table(inp),
            device_time_table(inp.records),
        )
        if t
    ]
    if inp.summary is not None and inp.summary.height:
        tables.append(
            _table_from_df(
                "Summary with intervals (curves_summary)", inp.summary, source="results/curves_summary.parquet"
            )
        )
    figures, engine_figures, roofline_figures = [], [], []
    for f in inp.manifest.get("figures", []):
        entry = {**f, "spec_json": _script_json(inp.specs[f["name"]]) if f["drawn"] else None}
        # The engine comparison and the decomposition sit in their own sections, beside their tables.
        (
            engine_figures
            if f["name"] in ENGINE_FIGURES
            else roofline_figures
            if f["name"] in ROOFLINE_FIGURES
            else figures
        ).append(entry)
    ctx = {
        "title": f"specjoule report — {inp.config.get('name', '')}",
        "generated_at": inp.generated_at or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "glance": glance(inp, checks),
        "measured": measured(inp),
        "run_order": run_order(inp.records),
        "thresholds": sorted((k, fmt(v)) for k, v in inp.config.get("checks", {}).items()),
        "checks": checks,
        "caveats": caveats(inp),
        "figures": figures,
        "engines": {"figures": engine_figures, "tables": engine_tables(inp), "names": _engine_names(inp)},
        "tables": tables,
        "schemes": scheme_section(inp),
        "variance": variance_table(inp.variance),
        "roofline": {"figures": roofline_figures, **roofline_report.section(inp.curves, inp.crossover)},
        "loops": loops.section(inp.records, inp.checks, inp.config),
        "paths": inp.paths,
        "bundle": javascript_bundle(
            inp.manifest.get("vega_lite_version", figs.VEGALITE_VERSION), inp.javascript_bundle
        ),
    }
    return env.get_template("report.html.j2").render(**ctx)


def write_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
