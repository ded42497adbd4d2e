"""Replicates and their intervals (ADR 0080, 0081).

Three replicate levels nest in every configuration (one curve point across its repeats):
``engine_replicate`` (the campaign re-run on fresh engine starts, campaign ``<id>-r<r>``) ⊃ ``seed``
(the prompt sample, its own campaign) ⊃ ``window_index`` (back-to-back windows on one warm engine, cell
``<name>--w<w>``). Records written before these columns existed read as replicate 0, window 0.

An interval is a percentile bootstrap over the *highest level with more than one member*: its units
are resampled, the levels below are averaged inside each unit (each seed weighs the same within an
engine replicate, each window the same within a seed), so a level is never treated as more
independent than it is. A ratio to the baseline is resampled *paired*: each unit carries the mean of
its point values and the mean of the baselines those points were paired with, the same resample
draws both, and the statistic is the ratio of the two means (ADR 0081 says why not the mean of
ratios). Few units are enumerated exactly (ADR 0027); more use seeded Monte Carlo draws.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from specjoule import axes

C = pl.col

UNSUPPORTED = "unsupported"
# Coarsest first: resampling happens at the first of these with more than one member.
LEVELS: tuple[str, ...] = ("engine_replicate", "seed", "window_index")
LEVEL_LABELS: dict[str, str] = {"engine_replicate": "engine_replicate", "seed": "seed", "window_index": "window"}
LEVEL_BY_LABEL: dict[str, str] = {v: k for k, v in LEVEL_LABELS.items()}

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261130
BOOTSTRAP_LEVEL = 0.95
# Enumerate every distinct resample (weighted by its multinomial probability) while there are at
# most this many — C(2n-1, n) — i.e. up to n = 7 units; Monte Carlo beyond.
EXACT_BOOTSTRAP_MAX = 5000


# ----------------------------------------------------------------------------------------------
# replicate axes


def columns_of(df: pl.DataFrame | pl.LazyFrame) -> list[str]:
    return df.collect_schema().names()


def is_measured(df: pl.DataFrame | pl.LazyFrame) -> pl.Expr:
    """True for a measured record: ``status`` null (records before the column) or anything but unsupported."""
    if "status" not in columns_of(df):
        return pl.lit(True)
    return C("status").is_null() | (C("status").cast(pl.String) != UNSUPPORTED)


def with_replicate_axes(df: pl.DataFrame) -> pl.DataFrame:
    """``window_index`` and ``engine_replicate`` filled (0 where null or absent) and ``point_name``:
    the cell name without its window suffix, i.e. the name every window of the cell shares."""
    cols = columns_of(df)
    w = C("window_index").fill_null(0) if "window_index" in cols else pl.lit(0)
    r = C("engine_replicate").fill_null(0) if "engine_replicate" in cols else pl.lit(0)
    df = df.with_columns(w.cast(pl.Int64).alias("window_index"), r.cast(pl.Int64).alias("engine_replicate"))
    # The suffix is removed only when the record says it is window w >= 1: a vector merely named
    # "w1" keeps its name.
    suffix = pl.format("--w{}", C("window_index"))
    return df.with_columns(
        pl.when(C("window_index") > 0)
        .then(C("cell_name").str.strip_suffix(suffix))
        .otherwise(C("cell_name"))
        .alias("point_name")
    )


# ----------------------------------------------------------------------------------------------
# the bootstrap (ADR 0027, generalised to paired ratios)


def _compositions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every resample of n values with replacement as a count vector (M × n), and its probability."""
    counts = np.array([np.bincount(c, minlength=n) for c in itertools.combinations_with_replacement(range(n), n)])
    log_w = math.lgamma(n + 1) - np.array([sum(math.lgamma(k + 1) for k in row) for row in counts]) - n * math.log(n)
    return counts, np.exp(log_w)


def exact(n: int) -> bool:
    return math.comb(2 * n - 1, n) <= EXACT_BOOTSTRAP_MAX


def weighted_interval(stats: np.ndarray, weights: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Inverse CDF at alpha and 1 - alpha of each row's weighted resample distribution (G × M)."""
    order = np.argsort(stats, axis=1, kind="stable")
    sorted_stats = np.take_along_axis(stats, order, axis=1)
    cdf = np.cumsum(weights[order], axis=1)
    rows = np.arange(stats.shape[0])
    lo = sorted_stats[rows, (cdf < alpha - 1e-12).sum(axis=1)]
    hi = sorted_stats[rows, np.minimum((cdf < 1 - alpha - 1e-12).sum(axis=1), stats.shape[1] - 1)]
    return lo, hi


def exact_distribution(num: np.ndarray, den: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct resample's statistic (G × M) and its probability (M): the mean of num, or the
    ratio mean(num) / mean(den) with the same units drawn for both."""
    n = num.shape[1]
    counts, w = _compositions(n)
    c = counts.T.astype(np.float64)
    stats = (num @ c) / n if den is None else (num @ c) / (den @ c)
    return stats, w


def monte_carlo_distribution(
    num: np.ndarray, den: np.ndarray | None, rng: np.random.Generator, resamples: int
) -> np.ndarray:
    """Monte Carlo resample statistics (G × resamples); one index draw per group serves num and den."""
    g, n = num.shape
    out = np.empty((g, resamples))
    chunk = max(1, 2_000_000 // (resamples * n))  # bound memory: chunk × resamples × n floats
    for s in range(0, g, chunk):
        v = num[s : s + chunk]
        rows = np.arange(v.shape[0])[:, None, None]
        idx = rng.integers(0, n, size=(v.shape[0], resamples, n), dtype=np.int32)
        stat = v[rows, idx].mean(axis=2)
        if den is not None:
            stat = stat / den[s : s + chunk][rows, idx].mean(axis=2)
        out[s : s + chunk] = stat
    return out


def resample_interval(
    num: np.ndarray,
    den: np.ndarray | None,
    rng: np.random.Generator,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = BOOTSTRAP_LEVEL,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval per row (G × n units, n >= 2) of mean(num) or mean(num)/mean(den)."""
    alpha = (1 - level) / 2
    if exact(num.shape[1]):
        stats, w = exact_distribution(num, den)
        return weighted_interval(stats, w, alpha)
    stats = monte_carlo_distribution(num, den, rng, resamples)
    lo, hi = np.quantile(stats, [alpha, 1 - alpha], axis=1)
    return lo, hi


def distribution(
    num: np.ndarray, den: np.ndarray | None, rng: np.random.Generator, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[np.ndarray, np.ndarray]:
    """One group's resample distribution (values, probabilities), exact or Monte Carlo."""
    num2 = num.reshape(1, -1)
    den2 = None if den is None else den.reshape(1, -1)
    if exact(num2.shape[1]):
        stats, w = exact_distribution(num2, den2)
        return stats[0], w
    stats = monte_carlo_distribution(num2, den2, rng, resamples)[0]
    return stats, np.full(stats.shape, 1.0 / stats.size)


# Kept under their ADR 0027 names: the seed summary's tests call them.
def _exact_bootstrap_means(values: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    stats, w = exact_distribution(values)
    return weighted_interval(stats, w, alpha)


def _bootstrap_means(
    values: np.ndarray, rng: np.random.Generator, resamples: int, level: float = BOOTSTRAP_LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1 - level) / 2
    lo, hi = np.quantile(monte_carlo_distribution(values, None, rng, resamples), [alpha, 1 - alpha], axis=1)
    return lo, hi


def bootstrap_interval(
    values: np.ndarray, rng: np.random.Generator, resamples: int = BOOTSTRAP_RESAMPLES, level: float = BOOTSTRAP_LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean per row of values (G × n, n >= 2)."""
    return resample_interval(values, None, rng, resamples, level)


# ----------------------------------------------------------------------------------------------
# units and summaries


@dataclass(frozen=True)
class Metric:
    """A summarised quantity: the mean of ``num``, or (``den`` given) the paired ratio of means."""

    name: str
    num: str
    den: str | None = None


def levels(frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Per group: the members of each replicate level and ``interval_level``, the level resampled
    (a property of the design, taken from every row of the group whatever a metric's nulls)."""
    keys = list(keys)
    sizes = frame.group_by(keys).agg(*(C(lv).n_unique().alias(f"n_{lv}") for lv in LEVELS))
    level = pl.lit(None, pl.String)
    for lv in reversed(LEVELS):
        level = pl.when(C(f"n_{lv}") > 1).then(pl.lit(LEVEL_LABELS[lv])).otherwise(level)
    return sizes.with_columns(level.alias("interval_level"))


def units(frame: pl.DataFrame, keys: Sequence[str], metric: Metric, design: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per replicate unit of each group: keys, ``interval_level``, the level columns that
    identify the unit, ``num`` and ``den`` (hierarchical means of the unit's rows; rows with a null
    value left out). ``design``: ``levels(frame, keys)``, computed when not given."""
    keys = list(keys)
    design = levels(frame, keys) if design is None else design
    value_cols = [metric.num] + ([metric.den] if metric.den else [])
    vals = ["num", "den"][: len(value_cols)]
    rows = frame.filter(pl.all_horizontal(C(c).is_not_null() for c in value_cols)).select(
        *keys, *LEVELS, *(C(c).cast(pl.Float64).alias(a) for c, a in zip(value_cols, vals))
    )
    # Duplicate replicate coordinates (never written by the pipeline) are averaged, not double-counted.
    rows = rows.group_by(*keys, *LEVELS).agg(C(v).mean() for v in vals)
    rows = rows.join(design.select(*keys, "interval_level"), on=keys, how="left", nulls_equal=True)
    out = []
    for (lvl,), part in rows.partition_by("interval_level", as_dict=True, maintain_order=True).items():
        depth = 0 if lvl is None else LEVELS.index(LEVEL_BY_LABEL[lvl]) + 1
        for d in range(len(LEVELS), depth, -1):  # average from the finest level up to the unit's
            part = part.group_by(*keys, "interval_level", *LEVELS[: d - 1]).agg(C(v).mean() for v in vals)
        out.append(part.select(*keys, "interval_level", *LEVELS[:depth], *vals))
    if not out:
        return rows.select(*keys, "interval_level", *vals).clear()
    return pl.concat(out, how="diagonal_relaxed")


def summarize(
    frame: pl.DataFrame,
    keys: Sequence[str],
    metrics: Sequence[Metric],
    *,
    level: float = BOOTSTRAP_LEVEL,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> pl.DataFrame:
    """Per group of ``keys``: for each metric ``<m>_mean``, ``<m>_ci_low``, ``<m>_ci_high``, ``<m>_n``
    (units at the interval's level with a value), plus ``interval_level`` (the level resampled).

    One unit: a mean and a null interval, never a zero-width one. Groups are drawn in sorted key
    order and units in value order, so the Monte Carlo path is reproducible from ``seed``.
    """
    keys = list(keys)
    rng = np.random.default_rng(seed)
    design = levels(frame, keys)
    base = frame.select(keys).unique(maintain_order=True).sort(keys, nulls_last=True)
    base = base.join(design.select(*keys, "interval_level"), on=keys, how="left", nulls_equal=True)
    for m in metrics:
        u = units(frame, keys, m, design)
        vals = ["num"] + (["den"] if m.den else [])
        # Sort the pairs jointly by the numerator: a pair is never split, and means keep ADR 0027's order.
        grouped = u.sort("num").group_by(keys).agg(*(C(v) for v in vals)).with_columns(C("num").list.len().alias("n"))
        parts = []
        for (n,), part in sorted(grouped.partition_by("n", as_dict=True).items()):
            part = part.sort(keys, nulls_last=True)  # deterministic draw order
            num = np.asarray(part["num"].to_list(), dtype=np.float64).reshape(part.height, n)
            den = np.asarray(part["den"].to_list(), dtype=np.float64).reshape(part.height, n) if m.den else None
            mean = num.mean(axis=1) if den is None else num.sum(axis=1) / den.sum(axis=1)
            if n >= 2:
                lo, hi = resample_interval(num, den, rng, resamples, level)
            else:
                lo = hi = np.full(part.height, np.nan)
            parts.append(
                part.select(keys).with_columns(
                    pl.Series(f"{m.name}_mean", mean),
                    pl.Series(f"{m.name}_ci_low", lo).fill_nan(None),
                    pl.Series(f"{m.name}_ci_high", hi).fill_nan(None),
                    pl.lit(n, pl.Int32).alias(f"{m.name}_n"),
                )
            )
        if parts:
            stats = pl.concat(parts)
        else:
            stats = pl.DataFrame(
                schema={
                    **{k: frame.schema[k] for k in keys},
                    f"{m.name}_mean": pl.Float64,
                    f"{m.name}_ci_low": pl.Float64,
                    f"{m.name}_ci_high": pl.Float64,
                    f"{m.name}_n": pl.Int32,
                }
            )
        base = base.join(stats, on=keys, how="left", nulls_equal=True).with_columns(C(f"{m.name}_n").fill_null(0))
    return base


def unit_arrays(
    frame: pl.DataFrame, keys: Sequence[str], metric: Metric
) -> dict[tuple, tuple[np.ndarray, np.ndarray | None, str | None]]:
    """Per group: (numerator units, denominator units or None, interval level), for callers that
    combine two groups' resample distributions (compare_evidence)."""
    u = units(frame, keys, metric).sort("num")
    out: dict[tuple, tuple[np.ndarray, np.ndarray | None, str | None]] = {}
    for key, part in u.partition_by(list(keys), as_dict=True, maintain_order=True).items():
        den = part["den"].to_numpy().astype(np.float64) if metric.den else None
        out[key] = (part["num"].to_numpy().astype(np.float64), den, part["interval_level"][0])
    return out


def describe(level: float = BOOTSTRAP_LEVEL, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> str:
    """The interval method in words, for Parquet metadata and column docs."""
    return (
        f"percentile bootstrap, level {level}, over the highest replicate level with more than one member "
        f"(engine_replicate, else seed, else window; column interval_level); the levels below are averaged "
        f"inside each unit; ratios to the baseline are the ratio of the unit means of point and paired "
        f"baseline, both drawn by the same resample; every resample enumerated while C(2n-1, n) <= "
        f"{EXACT_BOOTSTRAP_MAX} (n <= 7 units), else {resamples} Monte Carlo resamples, numpy seed {seed}"
    )


# ----------------------------------------------------------------------------------------------
# curve points across their replicates

# A configuration: every identity of a curve point but its replicate axes (seed, window, engine
# replicate). ``cell_name`` here is the point's name without its window suffix.
SUMMARY_KEYS: tuple[str, ...] = (*axes.CONFIGURATION_KEYS, "cell_name")
# Ratios pair each point window with the baselines of its own campaign and window (ADR 0081).
SUMMARY_METRICS: tuple[Metric, ...] = (
    Metric("energy_ratio", "mj_per_committed_token", "baseline_window_mj_per_committed_token"),
    Metric("realized_L", "realized_L"),
    Metric("tbt_ratio", "tpot_mean_s", "baseline_window_tpot_mean_s"),
    Metric("mj_per_committed_token", "mj_per_committed_token"),
)
WINDOW_BASELINES: dict[str, str] = {
    "mj_per_committed_token": "baseline_window_mj_per_committed_token",
    "tpot_mean_s": "baseline_window_tpot_mean_s",
}


def _null_propagating_mean(col: str) -> pl.Expr:
    return pl.when(C(col).null_count() > 0).then(None).otherwise(C(col).mean())


def point_frame(records: pl.DataFrame) -> pl.DataFrame:
    """Measured speculative points of aggregated records, with their replicate axes, ``point_name`` and,
    per metric compared with the baseline, ``baseline_window_<metric>``: the mean of the campaign's
    opening and closing baseline records *of the point's window* (the campaign's baseline where the
    baselines have no such window). A point without a baseline value keeps none (unpaired)."""
    recs = with_replicate_axes(records.filter(is_measured(records)))
    baselines = (
        recs.filter(C("role").is_in(list(axes.BASELINE_ROLES)))
        .group_by("campaign_id", "window_index")
        .agg(*(_null_propagating_mean(m).alias(f"_w_{m}") for m in WINDOW_BASELINES))
    )
    points = recs.filter(C("role") == axes.ROLE_POINT).join(baselines, on=["campaign_id", "window_index"], how="left")
    return points.with_columns(
        pl.when(C(f"baseline_{m}").is_null())
        .then(None)
        .when(C(f"_w_{m}").is_not_null())
        .then(C(f"_w_{m}"))
        .otherwise(C(f"baseline_{m}"))
        .alias(out)
        for m, out in WINDOW_BASELINES.items()
    ).drop(f"_w_{m}" for m in WINDOW_BASELINES)


def configurations(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``cell_name`` set to ``point_name`` (the record's own name kept as ``record_cell_name``),
    ready to be grouped on SUMMARY_KEYS."""
    return frame.with_columns(C("cell_name").alias("record_cell_name"), C("point_name").alias("cell_name"))
