"""The scheme comparison (matched L, matched accepted per pass) and the scheme × family × engine
matrix of what was measured, what the engine refused and what has not run (ADR 0093, 0094).

Both are functions of the tables, like the figures: the comparison reads the drawable curve points
and the summary's intervals (spread.point_stats through FigureInputs.stats); the matrix reads the
records (``status``, ``unsupported_reason``, ``target_family``) and the cell table the config plans.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from specjoule import axes
from specjoule.report import numbers
from specjoule.report.figures import ARM_LABELS, FAMILY_UNKNOWN, CannotDraw, FigureInputs, _energy_curves, _with_family

# Rows of the comparison: one per family, target model, engine, batch and the other grid axes.
# Rows lead with these; the other slice axes follow, shown only where they vary (comparison_table).
LEADING_KEYS: tuple[str, ...] = ("model_pair", "engine", "batch_size")
GROUP_KEYS: tuple[str, ...] = ("family", *axes.leading(axes.SLICE_KEYS, *LEADING_KEYS))
AXES = {"L": "configured L", "apv": "accepted per verify pass"}
EXACT_L_TOLERANCE = 1e-9  # configured L values are grid values: a match is exact
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Match:
    value: float
    lo: float | None
    hi: float | None
    band: str | None  # ci | range | None
    interpolated: bool
    support: str


def match_at(
    points: Sequence[tuple[float, float, float | None, float | None, str | None, str]], target: float, tolerance: float
) -> Match | None:
    """A scheme's value at ``target`` from its points (x, value, lo, hi, band, support):
    a point within ``tolerance`` of the target is taken as measured there; between the two nearest
    points that bracket it the value (and each interval end, where both points have one) is
    interpolated linearly; outside the measured range: None — never extrapolated."""
    pts = sorted(points, key=lambda p: p[0])
    if not pts:
        return None
    near = min(pts, key=lambda p: abs(p[0] - target))
    if abs(near[0] - target) <= tolerance:
        return Match(near[1], near[2], near[3], near[4], False, near[5])
    xs = [p[0] for p in pts]
    i = bisect.bisect_left(xs, target)
    if i == 0 or i == len(pts):
        return None
    (x0, v0, lo0, hi0, b0, s0), (x1, v1, lo1, hi1, b1, s1) = pts[i - 1], pts[i]
    w = (target - x0) / (x1 - x0)

    def lerp(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a + w * (b - a)

    band = b0 if b0 == b1 else None
    lo, hi = (lerp(lo0, lo1), lerp(hi0, hi1)) if band else (None, None)
    support = s0 if s0 == s1 else f"{s0} | {s1}"
    return Match(lerp(v0, v1), lo, hi, band, True, support)


def _arms(c: pl.DataFrame) -> pl.DataFrame:
    """``arm``: the scheme, with its acceptance kind where one scheme ran several kinds."""
    kinds = c.group_by("scheme").agg(pl.col("acceptance_kind").n_unique().alias("_kinds"))
    c = c.join(kinds, on="scheme")
    kind_label = (
        pl.col("acceptance_kind").replace_strict(ARM_LABELS, default=pl.col("acceptance_kind")).fill_null("model")
    )
    return c.with_columns(
        arm=pl.when(pl.col("_kinds") > 1)
        .then(pl.col("scheme") + pl.lit(" (") + kind_label + pl.lit(")"))
        .otherwise(pl.col("scheme"))
    ).drop("_kinds")


def scheme_points(inputs: FigureInputs) -> pl.DataFrame:
    """Per configuration: the energy ratio and accepted per verify pass with their spread."""
    c = _energy_curves(inputs).filter((pl.col("method") != "baseline") & pl.col("energy_ratio").is_not_null())
    if c.height == 0:
        return pl.DataFrame()
    c = _arms(_with_family(c))
    keys = [*GROUP_KEYS, "arm", "scheme", "acceptance_kind", "acceptance_name", "configured_L"]
    return inputs.stats(c, keys, ["energy_ratio", "accepted_per_verification"])


def comparison(inputs: FigureInputs, axis: str) -> pl.DataFrame:
    """Long table: per row group (GROUP_KEYS), match point and arm, the matched energy ratio.

    ``axis`` "L": match points are the configured L values of the grid (synthetic acceptance only;
    model acceptance has no configured L). "apv": match points are the grid's configured accepted per
    pass (L − 1) and each model-acceptance scheme's own measured value; a point within the
    pre-registered ``checks.acceptance_length_tolerance`` counts as measured there."""
    if axis not in AXES:
        raise ValueError(f"axis {axis!r}: one of {', '.join(AXES)}")
    try:
        pts = scheme_points(inputs)
    except CannotDraw:
        return pl.DataFrame()
    if pts.height == 0:
        return pl.DataFrame()
    tolerance = (
        EXACT_L_TOLERANCE if axis == "L" else float(inputs.checks_config.get("acceptance_length_tolerance", 0.05))
    )
    if axis == "L":
        pts = pts.filter(pl.col("configured_L").is_not_null()).with_columns(x=pl.col("configured_L"))
    else:
        pts = pts.filter(pl.col("accepted_per_verification").is_not_null()).with_columns(
            x=pl.col("accepted_per_verification")
        )
    rows = []
    # Grouped in Python over the rows: a table operation per group costs more than the work on a few points.
    value_cols = ("x", "energy_ratio", "energy_ratio_lo", "energy_ratio_hi", "energy_ratio_band", "support")
    groups: dict[tuple, list[dict]] = {}
    for r in pts.select(*GROUP_KEYS, "arm", "configured_L", *value_cols).iter_rows(named=True):
        groups.setdefault(tuple(r[k] for k in GROUP_KEYS), []).append(r)
    for key, grp in groups.items():
        group = dict(zip(GROUP_KEYS, key))
        synthetic_L = [r["configured_L"] for r in grp if r["configured_L"] is not None]
        targets = set(synthetic_L) if axis == "L" else {round(v - 1, 6) for v in synthetic_L}
        if axis == "apv":
            # A model-acceptance scheme's own value is a match point of its own unless a grid point
            # already lies within the tolerance of it (it is then measured there).
            for v in sorted(round(r["x"], 2) for r in grp if r["configured_L"] is None):
                if all(abs(v - t) > tolerance for t in targets):
                    targets.add(v)
        by_arm: dict[str, list[tuple]] = {}
        for r in grp:
            by_arm.setdefault(r["arm"], []).append(tuple(r[c] for c in value_cols))
        for t in sorted(targets):
            for arm, arm_pts in by_arm.items():
                m = match_at(arm_pts, t, tolerance)
                rows.append(
                    {
                        **group,
                        "axis": axis,
                        "target": float(t),
                        "arm": arm,
                        **(
                            {
                                "ratio": m.value,
                                "lo": m.lo,
                                "hi": m.hi,
                                "band": m.band,
                                "interpolated": m.interpolated,
                                "support": m.support,
                            }
                            if m
                            else {
                                "ratio": None,
                                "lo": None,
                                "hi": None,
                                "band": None,
                                "interpolated": None,
                                "support": None,
                            }
                        ),
                    }
                )
    if not rows:
        return pl.DataFrame()
    return pl.DataFrame(rows, infer_schema_length=None)


def cell_text(
    ratio: float | None, lo: float | None, hi: float | None, band: str | None, interpolated: bool | None
) -> str:
    """'0.82 [0.79, 0.85]', '≈ 0.82' without an interval, '†' when interpolated, '—' out of range."""
    if ratio is None:
        return "—"
    r = numbers.round_to_interval(ratio, lo if band == "ci" else None, hi if band == "ci" else None)
    return r.text() + (" †" if interpolated else "")


@dataclass
class ComparisonTable:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str
    axis: str
    arms: list[str] = field(default_factory=list)


def comparison_table(inputs: FigureInputs, axis: str, scheme_order: Sequence[str] = ()) -> ComparisonTable | None:
    long = comparison(inputs, axis)
    if long.height == 0 or long["ratio"].drop_nulls().len() == 0:
        return None
    present = list(dict.fromkeys(long["arm"].to_list()))
    order = {s: i for i, s in enumerate(scheme_order)}
    arms = sorted(present, key=lambda a: (order.get(a.split(" (")[0], len(order)), a))
    varying = [k for k in GROUP_KEYS if k not in ("family", *LEADING_KEYS) and long[k].n_unique() > 1]
    key_cols = ["family", *LEADING_KEYS, *varying]
    labels = {
        "family": "family",
        "model_pair": "target",
        "engine": "engine",
        "batch_size": "B",
        "workload": "workload",
        "corpus": "corpus",
        "cuda_graphs": "CUDA graphs",
    }
    rows = []
    pair_rank = {p: i for i, p in enumerate(inputs.axis_order.get("model_pair", []))}
    engine_rank = {e: i for i, e in enumerate(inputs.axis_order.get("engine", []))}

    def order_key(g: tuple) -> tuple:
        fam, pair, engine, *rest = g[0]
        # Families sorted (unknown last); targets and engines in the config's order; the rest as values.
        return (
            (fam == FAMILY_UNKNOWN, fam),
            pair_rank.get(pair, len(pair_rank)),
            str(pair),
            engine_rank.get(engine, len(engine_rank)),
            str(engine),
            *[str(x) for x in rest[:-1]],
            rest[-1],
        )

    groups: dict[tuple, list[dict]] = {}
    for r in long.iter_rows(named=True):
        groups.setdefault(tuple(r[k] for k in (*key_cols, "target")), []).append(r)
    for key, grp in sorted(groups.items(), key=order_key):
        by_arm = {r["arm"]: r for r in grp}
        if all(by_arm.get(a, {}).get("ratio") is None for a in arms):
            continue
        cells = [
            cell_text(
                by_arm[a]["ratio"], by_arm[a]["lo"], by_arm[a]["hi"], by_arm[a]["band"], by_arm[a]["interpolated"]
            )
            if a in by_arm
            else NOT_MEASURED
            for a in arms
        ]
        supports = {a: by_arm[a]["support"] for a in arms if a in by_arm and by_arm[a]["support"]}
        distinct = set(supports.values())
        behind = next(iter(distinct)) if len(distinct) == 1 else "; ".join(f"{a}: {s}" for a, s in supports.items())
        head = [("on" if v else "off") if k == "cuda_graphs" else str(v) for k, v in zip(key_cols, key[:-1])]
        rows.append([*head, f"{key[-1]:g}", *cells, behind])
    if not rows:
        return None
    tol = inputs.checks_config.get("acceptance_length_tolerance", 0.05)
    along = "configured L" if axis == "L" else "measured accepted tokens per verify pass"
    note = (
        "energy per committed token over the paired baseline (below 1: a saving); means over replicates, the "
        "summary's 95 % interval in brackets, each rounded to the digits its interval supports (≈: no interval, "
        "two significant digits). † interpolated linearly along " + along + " between the scheme's two measured "
        "points that bracket the match point (the interval's ends interpolated the same way, an approximation); "
        + (
            ""
            if axis == "L"
            else f"a point within the pre-registered acceptance_length_tolerance ({tol:g}) of the "
            "match point counts as measured there; "
        )
        + "—: outside the scheme's measured range, never extrapolated; "
        + NOT_MEASURED
        + ": the scheme has no "
        "point on this target, engine and batch (unsupported, not run or not in the grid: see the scheme matrix)."
        + (
            " Model-acceptance schemes (no configured L) appear only in the accepted-per-pass table."
            if axis == "L"
            else " Match points: the grid's configured L − 1 and each model-acceptance scheme's own measured value."
        )
    )
    title = (
        "Scheme comparison at matched L (energy ratio to baseline)"
        if axis == "L"
        else "Scheme comparison at matched accepted tokens per verify pass (energy ratio to baseline)"
    )
    return ComparisonTable(
        title, [*[labels[k] for k in key_cols], AXES[axis], *arms, "behind each ratio"], rows, note, axis, arms
    )


# --- what was measured, refused, not run ------------------------------------------------------------

STATUS_MEASURED, STATUS_UNSUPPORTED, STATUS_NOT_RUN = "measured", "unsupported", "not run"


def _status_expr(records: pl.DataFrame) -> pl.Expr:
    # Records written before the column existed were all measured.
    return pl.col("status").fill_null(STATUS_MEASURED) if "status" in records.columns else pl.lit(STATUS_MEASURED)


def unsupported_records(records: pl.DataFrame) -> pl.DataFrame:
    if records.height == 0 or "status" not in records.columns:
        return pl.DataFrame()
    return records.filter(pl.col("status") == STATUS_UNSUPPORTED)


def measured_records(records: pl.DataFrame) -> pl.DataFrame:
    """Records with a window (status measured, or null in records older than the column)."""
    if records.height == 0 or "status" not in records.columns:
        return records
    return records.filter(_status_expr(records) == STATUS_MEASURED)


def _families(records: pl.DataFrame) -> dict[str, str]:
    if records.height == 0 or "target_family" not in records.columns:
        return {}
    fam = (
        records.filter(pl.col("target_family").is_not_null())
        .group_by("model_pair")
        .agg(pl.col("target_family").first())
    )
    return dict(fam.iter_rows())


_CELL_TABLES: dict[str, Any] = {}  # config content → its cell table (the last few configs)


def planned_cells(config: dict) -> Any:
    """The config's cell table (specjoule.cells.build), built once per config content: the report asks for it in
    three places, and a paper-scale grid takes about a second to expand. Raises what build raises."""
    from specjoule import cells

    key = json.dumps(config, sort_keys=True, default=str)
    if key not in _CELL_TABLES:
        if len(_CELL_TABLES) >= 4:
            _CELL_TABLES.pop(next(iter(_CELL_TABLES)))
        _CELL_TABLES[key] = cells.build(config)
    return _CELL_TABLES[key]


def planned_points(config: dict) -> set[tuple[str, str, str]] | None:
    """(scheme, model pair, engine) of every planned speculative cell; None when the config does not expand."""
    try:
        return {(c.scheme, c.model_pair, c.engine) for c in planned_cells(config) if c.role == axes.ROLE_POINT}
    except Exception:  # a config the cell table cannot expand is reported, not fatal for the report
        return None


@dataclass
class Matrix:
    columns: list[str]
    rows: list[list[str]]
    classes: list[list[str]]
    note: str


def scheme_matrix(records: pl.DataFrame, config: dict) -> Matrix | None:
    """Scheme × (family · engine): measured / unsupported (the engine's reason) / not run / not in
    the grid, per target model where a family holds several."""
    planned = planned_points(config) or set()
    recs = (
        records.filter(pl.col("role") == axes.ROLE_POINT) if records.height and "role" in records.columns else records
    )
    seen: dict[tuple[str, str, str], set[str]] = {}
    reasons: dict[tuple[str, str, str], list[str]] = {}
    if recs.height:
        cols = ["scheme", "model_pair", "engine"]
        st = recs.select(
            *cols,
            _status_expr(recs).alias("_status"),
            (pl.col("unsupported_reason") if "unsupported_reason" in recs.columns else pl.lit(None, pl.String)).alias(
                "_reason"
            ),
        )
        for r in st.iter_rows(named=True):
            key = (r["scheme"], r["model_pair"], r["engine"])
            seen.setdefault(key, set()).add(r["_status"])
            if r["_reason"] and r["_reason"] not in reasons.setdefault(key, []):
                reasons[key].append(r["_reason"])
    keys = planned | set(seen)
    if not keys:
        return None
    family = _families(records)
    pairs_cfg = list(config.get("models", {}))
    engines_cfg = list(config.get("engines", []))
    schemes_cfg = [n for n, s in config.get("schemes", {}).items() if s.get("method") != "baseline"]
    schemes = schemes_cfg + sorted({k[0] for k in keys} - set(schemes_cfg))
    engines = [e for e in engines_cfg if any(k[2] == e for k in keys)] + sorted({k[2] for k in keys} - set(engines_cfg))
    pairs = [p for p in pairs_cfg if any(k[1] == p for k in keys)] + sorted({k[1] for k in keys} - set(pairs_cfg))
    fam_of = {p: family.get(p, FAMILY_UNKNOWN) for p in pairs}
    families = sorted(set(fam_of.values()), key=lambda f: (f == FAMILY_UNKNOWN, f))
    columns = ["scheme", *[f"{f} · {e}" for f in families for e in engines]]
    rows, classes = [], []
    for s in schemes:
        row, cls = [s], [""]
        for f in families:
            for e in engines:
                parts = []
                for p in (p for p in pairs if fam_of[p] == f):
                    key = (s, p, e)
                    st = seen.get(key, set())
                    if STATUS_MEASURED in st:
                        parts.append((p, STATUS_MEASURED, ""))
                    elif STATUS_UNSUPPORTED in st:
                        parts.append((p, STATUS_UNSUPPORTED, "; ".join(reasons.get(key, [])) or "no reason recorded"))
                    elif key in planned:
                        parts.append((p, STATUS_NOT_RUN, ""))
                text, c = _matrix_cell(parts)
                row.append(text)
                cls.append(c)
        rows.append(row)
        classes.append(cls)
    note = (
        "per scheme, attention family (target_family of the records) and engine: measured (a record with a "
        "window), unsupported (the record's status, with the engine's own reason), not run (planned by the config, "
        "no record yet), — (not in the grid). Where a family holds several target models, each is named."
    )
    return Matrix(columns, rows, classes, note)


CELL_CLASSES = {STATUS_MEASURED: "m-measured", STATUS_UNSUPPORTED: "m-unsupported", STATUS_NOT_RUN: "m-not-run"}


def _matrix_cell(parts: list[tuple[str, str, str]]) -> tuple[str, str]:
    if not parts:
        return "—", "m-none"
    statuses = {p[1] for p in parts}
    cls = CELL_CLASSES[
        STATUS_UNSUPPORTED
        if STATUS_UNSUPPORTED in statuses
        else STATUS_NOT_RUN
        if STATUS_NOT_RUN in statuses
        else STATUS_MEASURED
    ]
    if len(statuses) == 1 and len({p[2] for p in parts}) == 1:
        status, reason = parts[0][1], parts[0][2]
        models = ", ".join(p[0] for p in parts)
        return (f"{status} ({models})" + (f": {reason}" if reason else "")), cls
    return "; ".join(f"{p[0]}: {p[1]}" + (f" ({p[2]})" if p[2] else "") for p in parts), cls


def unsupported_list(records: pl.DataFrame) -> pl.DataFrame:
    """One row per engine, target, scheme and reason: how many cells the engine refused."""
    u = unsupported_records(records)
    if u.height == 0:
        return pl.DataFrame()
    fam = pl.col("target_family").fill_null(FAMILY_UNKNOWN) if "target_family" in u.columns else pl.lit(FAMILY_UNKNOWN)
    return (
        u.with_columns(family=fam, reason=pl.col("unsupported_reason").fill_null("no reason recorded"))
        .group_by("engine", "family", "model_pair", "scheme", "reason")
        .agg(cells=pl.len(), batch_sizes=pl.col("batch_size").unique().sort().cast(pl.String).str.join(", "))
        .sort("engine", "family", "model_pair", "scheme")
    )
