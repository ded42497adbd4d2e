"""The roofline model in the report (issue 18, ADR 0177): where a speculative cell's joules go, and where
speculation is predicted to break even.

- ``decomposition(curves)``: one row per speculative configuration the model priced — the measured energy
  per committed token split into verify / draft / idle-host-wait by the model's shares (ADR 0102: verify
  and draft energies per round from bytes, operations and static power over their modelled time; idle =
  static power over the measured time per round the modelled passes do not explain), the baseline's
  measured energy, the predicted energy and the residual (measured / predicted − 1). Means over replicates.
- ``decomposition_figure(inputs)``: that table drawn — per cell a stacked measured bar beside the
  predicted bar and the baseline's bar, the residual printed on it; one panel per engine, model pair and B.
- ``crossover_rows(crossover)``: the predicted break-even acceptance length with its interval beside the
  measured one (interpolated where the grid brackets ratio 1, else why not), per engine, method, k and B.

Functions of tables (ADR 0030); ``python -m specjoule.report.roofline CURVES [CROSSOVER]`` prints both
tables as markdown.
"""

from __future__ import annotations

import argparse
from typing import Any

import altair as alt
import polars as pl

from specjoule import axes
from specjoule.report.text import fmt, markdown_table

C = pl.col
COMPONENTS = ("verify", "draft", "idle / host wait")
COMPONENT_COLORS = ("#4c78a8", "#f58518", "#bab0ac")
PREDICTED_COLOR, BASELINE_COLOR = "#54a24b", "#7f7f7f"
# One decomposition row per engine, pair, batch and arm: the reading-order keys less those the table does not show
# (every committed roofline campaign has one workload, corpus and CUDA-graph mode).
GROUP_KEYS: tuple[str, ...] = tuple(
    k
    for k in axes.READING_KEYS
    if k not in ("workload", "workload_kind", "corpus", "cuda_graphs", "acceptance_kind", "configured_L")
)
MODEL_COLUMNS = (
    "predicted_mj_per_committed_token",
    "residual",
    "energy_verify_share",
    "energy_draft_share",
    "energy_idle_share",
    "model_status",
)
DECOMPOSITION_COLUMNS = [
    "engine",
    "model pair",
    "B",
    "scheme",
    "acceptance",
    "realized L",
    "replicates",
    "measured mJ/token",
    "verify",
    "draft",
    "idle / host wait",
    "baseline mJ/token",
    "predicted mJ/token",
    "residual",
]
CROSSOVER_COLUMNS = [
    "family",
    "model pair",
    "engine",
    "method",
    "k",
    "B",
    "verify width",
    "predicted crossover L [95 % interval]",
    "measured crossover L",
    "measured: how",
]


class NoModel(Exception):
    """Why the report has no decomposition (one line)."""


def _present(df: pl.DataFrame, cols: tuple[str, ...]) -> pl.DataFrame:
    return df.with_columns(pl.lit(None).alias(c) for c in cols if c not in df.columns)


def decomposition(curves: pl.DataFrame) -> pl.DataFrame:
    """Per speculative configuration the model priced with a measured energy: the split in mJ per committed
    token (measured × each share: the three sum to the measured energy), baseline, predicted, residual.
    Raises NoModel with the reason when there is nothing to draw."""
    missing = [c for c in MODEL_COLUMNS if c not in curves.columns]
    if missing:
        raise NoModel(
            "the curves carry no roofline columns (" + ", ".join(missing) + "): rule roofline did not "
            "run before derive, or results/hardware/ holds no calibration"
        )
    c = _present(curves, (*GROUP_KEYS, "realized_L", "baseline_mj_per_committed_token", "mj_per_committed_token"))
    spec = c.filter(C("method").is_not_null() & (C("method") != "baseline"))
    if spec.height == 0:
        raise NoModel("no speculative point in the curves")
    priced = spec.filter(
        (C("model_status") == "modelled")
        & C("residual").is_not_null()
        & C("energy_verify_share").is_not_null()
        & C("mj_per_committed_token").is_not_null()
    )
    if priced.height == 0:
        reasons = (
            spec["not_modelled_reason"].drop_nulls().unique().to_list() if "not_modelled_reason" in spec.columns else []
        )
        raise NoModel(
            "no speculative point was priced with a measured energy"
            + (": " + "; ".join(sorted(reasons)[:3]) if reasons else "")
        )
    m = C("mj_per_committed_token")
    out = (
        priced.with_columns(
            (m * C("energy_verify_share")).alias("verify_mj"),
            (m * C("energy_draft_share")).alias("draft_mj"),
            (m * C("energy_idle_share")).alias("idle_mj"),
        )
        .group_by(list(GROUP_KEYS), maintain_order=True)
        .agg(
            pl.len().alias("replicates"),
            C("realized_L").mean(),
            m.mean().alias("measured_mj"),
            C("verify_mj").mean(),
            C("draft_mj").mean(),
            C("idle_mj").mean(),
            C("baseline_mj_per_committed_token").mean().alias("baseline_mj"),
            C("predicted_mj_per_committed_token").mean().alias("predicted_mj"),
        )
        # the residual of the means, so that the table's three numbers agree with each other
        .with_columns((C("measured_mj") / C("predicted_mj") - 1.0).alias("residual"))
        .sort("engine", "model_pair", "batch_size", "scheme", "realized_L", nulls_last=True)
    )
    return out


def _label(row: dict[str, Any]) -> str:
    acc = row.get("acceptance_name")
    return f"{row['scheme']} · {acc}" if acc else str(row["scheme"])


def _panel(row: dict[str, Any]) -> str:
    return f"{row['engine']} · {row['model_pair']} · B = {row['batch_size']}"


def figure_data(table: pl.DataFrame) -> pl.DataFrame:
    """The long form the figure draws: per cell, three measured components, the predicted and baseline bars."""
    rows = []
    for r in table.iter_rows(named=True):
        cell, panel, engine = _label(r), _panel(r), r["engine"]
        res = f"{r['residual']:+.1%}"
        for comp, col in zip(COMPONENTS, ("verify_mj", "draft_mj", "idle_mj")):
            rows.append(
                {
                    "panel": panel,
                    "engine": engine,
                    "cell": cell,
                    "bar": "measured",
                    "component": comp,
                    "mj": r[col],
                    "order": COMPONENTS.index(comp),
                    "residual": res,
                }
            )
        rows.append(
            {
                "panel": panel,
                "engine": engine,
                "cell": cell,
                "bar": "predicted",
                "component": "predicted",
                "mj": r["predicted_mj"],
                "order": 0,
                "residual": res,
            }
        )
        rows.append(
            {
                "panel": panel,
                "engine": engine,
                "cell": cell,
                "bar": "baseline",
                "component": "baseline",
                "mj": r["baseline_mj"],
                "order": 0,
                "residual": res,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "panel": pl.String,
            "engine": pl.String,
            "cell": pl.String,
            "bar": pl.String,
            "component": pl.String,
            "mj": pl.Float64,
            "order": pl.Int64,
            "residual": pl.String,
        },
    )


def decomposition_chart(table: pl.DataFrame) -> alt.TopLevelMixin:
    """One panel (engine · model pair · B) at a time, picked in a drop-down (the static export shows the first,
    and says so): a grid of many targets and batch sizes stays one readable chart (ADR 0032's selectors)."""
    data = figure_data(table)
    panels = list(dict.fromkeys(data["panel"].to_list()))
    domain = [*COMPONENTS, "predicted", "baseline"]
    colors = [*COMPONENT_COLORS, PREDICTED_COLOR, BASELINE_COLOR]
    pick = alt.param(
        name="decomposition_panel", value=panels[0], bind=alt.binding_select(options=panels, name="panel: ")
    )
    offset = alt.XOffset("bar:N", sort=["measured", "predicted", "baseline"])
    base = alt.Chart(data.to_pandas()).transform_filter(alt.datum.panel == pick)
    bars = base.mark_bar().encode(
        x=alt.X("cell:N", title=None, sort=None),
        xOffset=offset,
        y=alt.Y("sum(mj):Q", title="mJ per committed token"),
        color=alt.Color("component:N", scale=alt.Scale(domain=domain, range=colors), title="energy"),
        order=alt.Order("order:Q"),
        tooltip=[
            "engine:N",
            "panel:N",
            "cell:N",
            "bar:N",
            "component:N",
            alt.Tooltip("mj:Q", format=".1f"),
            "residual:N",
        ],
    )
    text = (
        base.transform_filter(alt.datum.bar == "measured")
        .transform_aggregate(total="sum(mj)", groupby=["panel", "cell", "bar", "residual"])
        .mark_text(dy=-6, fontSize=10)
        .encode(x=alt.X("cell:N", sort=None), xOffset=offset, y="total:Q", text="residual:N")
    )
    shown = f"panel: {panels[0]}" + (
        f" (one of {len(panels)}; pick another in the interactive view)" if len(panels) > 1 else ""
    )
    return (
        alt.layer(bars, text)
        .add_params(pick)
        .properties(
            width=alt.Step(36),
            height=260,
            title={
                "text": "Where a speculative cell's joules go: measured split, predicted, baseline",
                "subtitle": [
                    "measured mJ per committed token split by the roofline model's shares "
                    "(verify, draft, idle/host-wait); beside it the model's prediction and "
                    "the baseline's measured energy; the residual (measured / predicted − 1) "
                    "on the measured bar",
                    shown,
                ],
            },
        )
    )


def decomposition_figure(inputs: Any) -> alt.TopLevelMixin:
    """The figure registry's builder (specjoule.report.figures): the points the figures may draw."""
    from specjoule.report.figures import CannotDraw, _energy_curves

    try:
        table = decomposition(_energy_curves(inputs))  # CannotDraw with the figures' own reason when none
    except NoModel as exc:
        raise CannotDraw(str(exc)) from None
    return decomposition_chart(table)


def decomposition_rows(table: pl.DataFrame) -> list[list[str]]:
    out = []
    for r in table.iter_rows(named=True):
        out.append(
            [
                str(r["engine"]),
                str(r["model_pair"]),
                str(r["batch_size"]),
                str(r["scheme"]),
                str(r["acceptance_name"] or "—"),
                fmt(r["realized_L"], 3),
                str(r["replicates"]),
                fmt(r["measured_mj"]),
                fmt(r["verify_mj"]),
                fmt(r["draft_mj"]),
                fmt(r["idle_mj"]),
                fmt(r["baseline_mj"]),
                fmt(r["predicted_mj"]),
                f"{r['residual']:+.3f}",
            ]
        )
    return out


def crossover_rows(crossover: pl.DataFrame | None) -> list[list[str]]:
    """Predicted break-even L [interval] vs measured, per (family, pair, engine, method, k, B)."""
    if crossover is None or crossover.height == 0:
        return []
    out = []
    for r in crossover.sort("engine", "model_pair", "method", "batch_size", nulls_last=True).iter_rows(named=True):
        pred = r.get("predicted_crossover_L")
        lo, hi = r.get("predicted_crossover_L_low"), r.get("predicted_crossover_L_high")
        pred_text = (
            "not predicted (no fitted baseline)"
            if pred is None
            else (fmt(pred, 3) + (f" [{fmt(lo, 3)}, {fmt(hi, 3)}]" if lo is not None and hi is not None else ""))
        )
        meas = r.get("measured_crossover_L")
        out.append(
            [
                str(r.get("target_family") or "—"),
                str(r["model_pair"]),
                str(r["engine"]),
                str(r["method"]),
                str(r.get("k") if r.get("k") is not None else "—"),
                str(r["batch_size"]),
                fmt(r.get("verify_width"), 3),
                pred_text,
                "—" if meas is None else fmt(meas, 3),
                str(r.get("measured_bracket") or "—"),
            ]
        )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", help="curves.parquet with the roofline columns (derive after rule roofline)")
    ap.add_argument("crossover", nargs="?", help="crossover.parquet (rule roofline)")
    a = ap.parse_args(argv)
    try:
        rows = decomposition_rows(decomposition(pl.read_parquet(a.curves)))
        print("\n".join(markdown_table(DECOMPOSITION_COLUMNS, rows)))
    except NoModel as exc:
        print(f"no decomposition: {exc}")
    if a.crossover:
        print()
        rows = crossover_rows(pl.read_parquet(a.crossover))
        print("\n".join(markdown_table(CROSSOVER_COLUMNS, rows)) if rows else "no crossover row")


if __name__ == "__main__":
    main()


def section(curves: pl.DataFrame, crossover: pl.DataFrame | None) -> dict[str, Any]:
    """The report's roofline section: the decomposition table (the figure's numbers) and the crossover
    table, each with the one line that says why it is missing where it is."""
    out: dict[str, Any] = {"tables": [], "missing": []}
    try:
        table = decomposition(curves)
        out["tables"].append(
            {
                "id": "roofline-decomposition",
                "title": "Where the joules go: measured split, predicted and baseline (mJ per committed token)",
                "columns": DECOMPOSITION_COLUMNS,
                "rows": decomposition_rows(table),
                "row_classes": [],
                "note": "verify + draft + idle/host-wait = measured (the model's shares of it); "
                "residual = measured / predicted − 1; means over replicates (ADR 0102, 0177)",
            }
        )
    except NoModel as exc:
        out["missing"].append(f"no decomposition: {exc}")
    rows = crossover_rows(crossover)
    if rows:
        out["tables"].append(
            {
                "id": "roofline-crossover",
                "title": "Crossover: the acceptance length where speculation breaks even",
                "columns": CROSSOVER_COLUMNS,
                "rows": rows,
                "row_classes": [],
                "note": "predicted from the baselines' fit with its bootstrap interval (fit noise only, "
                "not the model's structure); measured where a + b/L through the two measured L that "
                "bracket ratio 1 crosses it: the round's energy, ratio × L, interpolated linearly in L "
                "(ADR 0233; results/crossover.parquet)",
            }
        )
    else:
        out["missing"].append(
            "no crossover table: "
            + (
                "results/crossover.parquet was not among the report's inputs"
                if crossover is None
                else "no speculative arm was priced"
            )
        )
    return out
