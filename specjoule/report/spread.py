"""Each drawn value with its spread: the summary's interval where it has one, else the replicates'
min–max (ADR 0090).

The figures draw configurations: every grid axis except the replicate levels (window, seed, engine
replicate; GPU boards are where the replicates ran). ``point_stats`` groups drawable curve rows into
those configurations and, for each value, gives a mean, a low and a high end and what the ends are:

* ``ci`` — the summary's 95 % interval (``{metric}_ci_low``/``_ci_high``, analysis ADR 0027 and the
  spread helper's replicate levels), used only where the figure's group *is* one summary row: the
  same configuration keys, the same replicate counts (a figure that dropped a failed or unmatched
  replicate would otherwise quote an interval of rows it does not show), and no failed check;
* ``range`` — min–max of the rows drawn (two or more rows, no summary interval);
* null — one row: a mean and nothing else, never a zero-width interval.

Values the summary holds under another name come through a monotone map (``DERIVED``): a saving is
``(1 − energy_ratio) × 100`` (ends swap), accepted tokens per verify pass is ``realized_L − 1`` by
definition (records: realized_L = 1 + accepted / drafts, accepted_per_verification = accepted / drafts),
so an older summary without ``accepted_per_verification_*`` still gives its interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from specjoule import axes
from specjoule.report.numbers import INTERVAL_LEVEL_WORDS, support_text

# The configuration a summary row describes (analysis SUMMARY_KEYS less cell_name, which a windowed
# grid suffixes with --w<w>): joined on the ones both tables carry.
CONFIG_KEYS: tuple[str, ...] = axes.CONFIGURATION_KEYS
REPLICATE_COUNTS: tuple[str, ...] = ("n_windows", "n_seeds", "n_engine_replicates", "n_gpus")
# The count of units an interval level (analysis.spread.LEVEL_LABELS) resampled, as point_stats names it.
UNIT_COUNT_BY_LEVEL: dict[str, str] = {
    "engine_replicate": "n_engine_replicates",
    "seed": "n_seeds",
    "window": "n_windows",
}


@dataclass(frozen=True)
class Source:
    metric: str  # summary metric: {metric}_mean, _ci_low, _ci_high
    to_value: Callable[[pl.Expr], pl.Expr]
    increasing: bool = True


def _identity(e: pl.Expr) -> pl.Expr:
    return e


DERIVED: dict[str, tuple[Source, ...]] = {
    "saving_pct": (Source("energy_ratio", lambda e: (1 - e) * 100, increasing=False),),
    "accepted_per_verification": (
        Source("accepted_per_verification", _identity),
        Source("realized_L", lambda e: e - 1),
    ),
    "tbt_ms": (Source("tpot_mean_s", lambda e: e * 1000),),
}


def sources(value: str) -> tuple[Source, ...]:
    return DERIVED.get(value, (Source(value, _identity),))


def _count_expr(df: pl.DataFrame, col: str) -> pl.Expr:
    # A table without the column predates the level: one window, one engine replicate per cell.
    return pl.col(col).n_unique() if col in df.columns else pl.lit(1, pl.UInt32)


def summary_usable(summary: pl.DataFrame | None) -> bool:
    return summary is not None and summary.height > 0


def _summary_rows(summary: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Summary rows without a failed check, one per configuration key tuple (a summary finer than
    these keys — duplicates — gives no interval for those configurations rather than a wrong one)."""
    s = summary
    if "failed_checks" in s.columns:
        s = s.filter(pl.col("failed_checks").list.len().fill_null(0) == 0)
    dup = s.group_by(keys).len().filter(pl.col("len") > 1).drop("len")
    if dup.height:
        s = s.join(dup, on=keys, how="anti", nulls_equal=True)
    return s


def point_stats(
    df: pl.DataFrame,
    keys: Sequence[str],
    values: Sequence[str],
    summary: pl.DataFrame | None = None,
    extra_means: Sequence[str] = (),
) -> pl.DataFrame:
    """One row per group of ``keys``: for each value ``v``: ``v`` (mean), ``v_lo``, ``v_hi``, ``v_band``
    (ci | range | null); ``extra_means`` get a mean only; replicate counts (``n_rows``, ``n_windows``,
    ``n_seeds``, ``n_engine_replicates``, ``n_gpus``), ``interval_level`` and ``support`` (words)."""
    keys = [k for k in keys if k in df.columns]
    config_keys = [k for k in CONFIG_KEYS if k in df.columns]
    aggs: list[pl.Expr] = [
        pl.len().alias("n_rows"),
        _count_expr(df, "window_index").alias("n_windows"),
        _count_expr(df, "seed").alias("n_seeds"),
        _count_expr(df, "engine_replicate").alias("n_engine_replicates"),
        (pl.col("gpu_uuid").drop_nulls().n_unique() if "gpu_uuid" in df.columns else pl.lit(None, pl.UInt32)).alias(
            "n_gpus"
        ),
    ]
    if config_keys:
        aggs.append(pl.struct(config_keys).n_unique().alias("_n_configs"))
        aggs += [pl.col(k).first().alias(f"_cfg_{k}") for k in config_keys if k not in keys]
    for v in values:
        aggs += [
            pl.col(v).mean().alias(v),
            pl.col(v).min().alias(f"{v}_lo"),
            pl.col(v).max().alias(f"{v}_hi"),
            pl.col(v).count().alias(f"_{v}_count"),
        ]
    aggs += [pl.col(v).mean().alias(v) for v in extra_means if v in df.columns and v not in values]
    out = df.group_by(keys, maintain_order=True).agg(aggs)
    out = out.with_columns(
        *[pl.when(pl.col(f"_{v}_count") > 1).then(pl.col(f"{v}_lo")).alias(f"{v}_lo") for v in values],
        *[pl.when(pl.col(f"_{v}_count") > 1).then(pl.col(f"{v}_hi")).alias(f"{v}_hi") for v in values],
        *[pl.when(pl.col(f"_{v}_count") > 1).then(pl.lit("range")).alias(f"{v}_band") for v in values],
        pl.lit(None, pl.String).alias("interval_level"),
    )
    if summary_usable(summary) and config_keys:
        out = _overlay(out, summary, keys, config_keys, values)
    out = out.with_columns(
        [pl.col(c).cast(pl.Int64) for c in ("n_rows", "n_windows", "n_seeds", "n_engine_replicates", "n_gpus")]
    )
    out = out.drop([c for c in out.columns if c.startswith("_")])
    return _with_support(out, values)


def _overlay(
    out: pl.DataFrame, summary: pl.DataFrame, keys: list[str], config_keys: list[str], values: Sequence[str]
) -> pl.DataFrame:
    join_keys = [k for k in config_keys if k in summary.columns]
    if not join_keys:
        return out
    s = _summary_rows(summary, join_keys)
    picks: list[pl.Expr] = []
    used: dict[str, Source] = {}
    for v in values:
        for src in sources(v):
            if f"{src.metric}_mean" in s.columns:
                used[v] = src
                lo, hi = (f"{src.metric}_ci_low", f"{src.metric}_ci_high")
                if not src.increasing:
                    lo, hi = hi, lo
                picks += [
                    src.to_value(pl.col(f"{src.metric}_mean")).alias(f"_s_{v}"),
                    (src.to_value(pl.col(lo)) if lo in s.columns else pl.lit(None, pl.Float64)).alias(f"_s_{v}_lo"),
                    (src.to_value(pl.col(hi)) if hi in s.columns else pl.lit(None, pl.Float64)).alias(f"_s_{v}_hi"),
                ]
                break
    if not used:
        return out
    counts = [c for c in ("n_windows", "n_seeds", "n_engine_replicates", "n_gpus") if c in s.columns]
    s = s.select(
        *[pl.col(k).alias(f"_j_{k}") for k in join_keys],
        *picks,
        *[pl.col(c).cast(pl.Int64).alias(f"_s_{c}") for c in counts],
        (pl.col("interval_level") if "interval_level" in s.columns else pl.lit("seed")).alias("_s_level"),
    )
    left = [k if k in keys else f"_cfg_{k}" for k in join_keys]
    joined = (
        out.with_columns(_order=pl.int_range(pl.len()))
        .join(s, left_on=left, right_on=[f"_j_{k}" for k in join_keys], how="left", nulls_equal=True)
        .sort("_order")
    )
    # The group must be exactly the summary's configuration: one configuration and the same replicates.
    same = (pl.col("_n_configs") == 1) & pl.col("_s_level").is_not_null()
    for c in ("n_windows", "n_seeds", "n_engine_replicates"):
        if c in counts:
            same = same & (pl.col(c).cast(pl.Int64) == pl.col(f"_s_{c}"))
    joined = joined.with_columns(_same=same)
    cols: list[pl.Expr] = []
    any_ci = pl.lit(False)
    for v in used:
        has = pl.col("_same") & pl.col(f"_s_{v}").is_not_null()
        has_ci = has & pl.col(f"_s_{v}_lo").is_not_null() & pl.col(f"_s_{v}_hi").is_not_null()
        any_ci = any_ci | has_ci
        cols += [
            pl.when(has).then(pl.col(f"_s_{v}")).otherwise(pl.col(v)).alias(v),
            pl.when(has_ci).then(pl.col(f"_s_{v}_lo")).otherwise(pl.col(f"{v}_lo")).alias(f"{v}_lo"),
            pl.when(has_ci).then(pl.col(f"_s_{v}_hi")).otherwise(pl.col(f"{v}_hi")).alias(f"{v}_hi"),
            pl.when(has_ci).then(pl.lit("ci")).otherwise(pl.col(f"{v}_band")).alias(f"{v}_band"),
        ]
    joined = joined.with_columns(cols).with_columns(
        pl.when(any_ci).then(pl.col("_s_level")).otherwise(pl.col("interval_level")).alias("interval_level"),
        *[
            pl.when(pl.col("_same") & pl.col(f"_s_{c}").is_not_null())
            .then(pl.col(f"_s_{c}"))
            .otherwise(pl.col(c))
            .alias(c)
            for c in counts
        ],
    )
    return joined.drop([c for c in joined.columns if c.startswith("_s_") or c.startswith("_j_")] + ["_order", "_same"])


def _with_support(out: pl.DataFrame, values: Sequence[str]) -> pl.DataFrame:
    """``support``: the words for the first value's spread (what the tooltip and the tables show)."""
    if not values or out.height == 0:
        return out.with_columns(support=pl.lit(None, pl.String))
    v = values[0]
    texts = [
        support_text(
            r["n_windows"],
            r["n_seeds"],
            r["n_engine_replicates"],
            r["n_gpus"],
            r["interval_level"],
            r[f"{v}_band"] == "ci",
        )
        + ("" if r[f"{v}_band"] != "range" else " (whiskers: min–max of replicates)")
        for r in out.select(
            "n_windows", "n_seeds", "n_engine_replicates", "n_gpus", "interval_level", f"{v}_band"
        ).iter_rows(named=True)
    ]
    return out.with_columns(support=pl.Series(texts, dtype=pl.String))


def band_note(stats: pl.DataFrame, value: str) -> str:
    """A subtitle fragment saying what the whiskers of ``value`` are in this figure."""
    col = f"{value}_band"
    if col not in stats.columns or stats[col].drop_nulls().len() == 0:
        return "no whiskers: one replicate per point, no interval"
    kinds = set(stats[col].drop_nulls().to_list())
    levels = sorted(set(stats.filter(pl.col(col) == "ci")["interval_level"].drop_nulls().to_list()))
    words = []
    if "ci" in kinds:
        words.append(
            "95 % interval from the summary (over " + ", ".join(INTERVAL_LEVEL_WORDS.get(x, x) for x in levels) + ")"
        )
    if "range" in kinds:
        words.append("min–max of the replicates where the summary has no interval")
    return "whiskers: " + "; ".join(words)


def two_unit_intervals(stats: pl.DataFrame, value: str = "energy_ratio") -> pl.DataFrame:
    """The configurations of ``stats`` (point_stats rows) whose interval of ``value`` was bootstrapped over
    exactly two units of its level. A percentile bootstrap over two units is the range of the two (ADR 0081
    addendum 1): on the H200 the spread campaign's two-replicate range was ±2.8 % where the variance budget gave
    ±9.9 % for the same mean."""
    units = pl.lit(None, pl.Int64)
    for level, count in UNIT_COUNT_BY_LEVEL.items():
        units = pl.when(pl.col("interval_level") == level).then(pl.col(count)).otherwise(units)
    return stats.filter((pl.col(f"{value}_band") == "ci") & (units == 2))
