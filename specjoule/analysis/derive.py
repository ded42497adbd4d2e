"""Curves: each speculative cell against its baseline (ADR 0025, 0026, 0027).

Strict by default: a campaign with a failed check is refused and the message names campaign and
check. ``energy_measured`` is the exception — when it fails (meter none, as on CPU) the curves are
still written, with every energy column null and ``energy_refused_reason`` naming the check, since
the counters, acceptance and latency columns do not depend on the energy meter. With
``allow_failed_checks`` a refused campaign is derived anyway and every one of its rows lists the
campaign's failures in ``failed_checks``; ``flags`` lists the flags that concern the row (its cell
or one of its baselines).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import polars as pl

from specjoule.analysis import META_CONFIG_HASH, AnalysisError, write_parquet_atomic
from specjoule.analysis.aggregate import ROLE_POINT
from specjoule.analysis.checks import ENERGY_CHECK, FAIL, FLAG, PASS

C = pl.col

CURVE_COLUMNS: tuple[str, ...] = (
    "campaign_id", "cell_id", "cell_name", "engine", "model_pair", "scheme", "method", "k", "acceptance_name",
    "acceptance_kind", "configured_L", "batch_size", "corpus", "seed", "cuda_graphs", "workload", "workload_kind",
    "gpu_uuid", "realized_L", "accepted_per_verification", "tokens_per_verify_pass", "mj_per_committed_token",
    "baseline_mj_per_committed_token", "energy_ratio", "mj_per_accepted_token", "tpot_mean_s",
    "baseline_tpot_mean_s", "tbt_ratio", "mean_running_requests", "baseline_mean_running_requests",
    "energy_refused_reason", "failed_checks", "flags",
    # Engine configuration per point and its opening baseline (ADR 0029): the report shows them
    # beside the ratio, so a ratio between differently configured engines is visible as such.
    "async_scheduling", "baseline_async_scheduling", "cuda_graph_sizes", "baseline_cuda_graph_sizes",
    "round_time_ms", "baseline_round_time_ms",
)
ENERGY_CURVE_COLUMNS = ("mj_per_committed_token", "baseline_mj_per_committed_token", "energy_ratio",
                        "mj_per_accepted_token")

# The seed summary: grouped over seeds on everything that names a curve point.
SUMMARY_KEYS: tuple[str, ...] = ("engine", "model_pair", "scheme", "method", "k", "acceptance_name", "acceptance_kind",
                                 "configured_L", "batch_size", "corpus", "cuda_graphs", "workload", "workload_kind",
                                 "cell_name")
SUMMARY_METRICS: tuple[str, ...] = ("energy_ratio", "realized_L", "tbt_ratio")
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261130
BOOTSTRAP_LEVEL = 0.95
META_BOOTSTRAP = "specjoule_bootstrap"


class DeriveRefused(AnalysisError):
    """A campaign failed a pre-registered check and allow_failed_checks is off."""


def _refusal_message(fails: pl.DataFrame) -> str:
    by_campaign = (fails.group_by("campaign_id", maintain_order=True)
                   .agg(C("check").unique(maintain_order=True)).sort("campaign_id"))
    lines = [f"  campaign {r['campaign_id']}: failed check(s) {', '.join(r['check'])}"
             for r in by_campaign.head(20).iter_rows(named=True)]
    if by_campaign.height > 20:
        lines.append(f"  … and {by_campaign.height - 20} more campaign(s)")
    return (f"derive refuses {by_campaign.height} campaign(s) with a failed pre-registered check "
            f"(see results/checks.md; set checks.allow_failed_checks: true to derive them anyway, marked):\n"
            + "\n".join(lines))


def _concerning(points: pl.DataFrame, checks: pl.DataFrame, status: str, exclude: tuple[str, ...]) -> pl.DataFrame:
    """For each point: sorted names of checks with ``status`` whose cells include the point or one of
    its baselines (a flagged baseline concerns every ratio built on it; a flagged sibling does not)."""
    hits = (checks.filter((C("status") == status) & ~C("check").is_in(list(exclude)))
            .select("campaign_id", "check", "cell_names").explode("cell_names")
            .rename({"cell_names": "concerned"}))
    targets = (points.select("campaign_id", "cell_name", "opening_cell_name", "closing_cell_name")
               .unpivot(index=["campaign_id", "cell_name"], value_name="concerned")
               .drop("variable").drop_nulls("concerned"))
    targets = pl.concat([targets, points.select("campaign_id", "cell_name", C("cell_name").alias("concerned"))])
    return (targets.join(hits, on=["campaign_id", "concerned"], how="inner")
            .group_by("campaign_id", "cell_name").agg(C("check").unique().sort()))


def derive(records: pl.DataFrame, checks: pl.DataFrame, allow_failed_checks: bool = False) -> pl.DataFrame:
    """curves.parquet rows: one per speculative point, paired with its campaign's baselines."""
    campaigns = records["campaign_id"].unique()
    checked = checks["campaign_id"].unique()
    unchecked = campaigns.filter(~campaigns.is_in(checked.implode()))
    if unchecked.len():
        raise AnalysisError(f"no check results for campaign(s) {', '.join(unchecked.sort().head(5).to_list())}: "
                            f"checks.parquet is stale or from another records.parquet")

    fails = checks.filter((C("status") == FAIL) & (C("check") != ENERGY_CHECK))
    if fails.height and not allow_failed_checks:
        raise DeriveRefused(_refusal_message(fails))

    energy = (checks.filter(C("check") == ENERGY_CHECK)
              .select("campaign_id", pl.when(C("status") != PASS)
                      .then(pl.format("{} {}: {}", pl.lit(ENERGY_CHECK), C("status"), C("detail")))
                      .alias("energy_refused_reason"), pl.lit(True).alias("_energy_checked")))
    points = records.filter(C("role") == ROLE_POINT)
    if not points.height:
        return pl.DataFrame(schema=curve_schema())
    # A failure refuses the whole campaign, so under allow_failed_checks every row of it carries the
    # campaign's failures: filtering marked rows then shows exactly what strict mode would have shown.
    failed = (fails.group_by("campaign_id").agg(C("check").unique().sort().alias("failed_checks")))
    flagged = _concerning(points, checks, FLAG, ()).rename({"check": "flags"})

    opening_cfg = records.select("campaign_id", C("cell_name").alias("opening_cell_name"),
                                 C("async_scheduling").alias("baseline_async_scheduling"),
                                 C("cuda_graph_sizes").alias("baseline_cuda_graph_sizes"))
    points = points.join(opening_cfg, on=["campaign_id", "opening_cell_name"], how="left")
    out = (points.join(energy, on="campaign_id", how="left")
                 .join(failed, on="campaign_id", how="left")
                 .join(flagged, on=["campaign_id", "cell_name"], how="left"))
    # A campaign the energy check never ran on gets no energy numbers either (never silently trusted).
    out = out.with_columns(pl.when(C("_energy_checked").is_null())
                           .then(pl.lit(f"{ENERGY_CHECK} not evaluated for this campaign"))
                           .otherwise(C("energy_refused_reason")).alias("energy_refused_reason"))
    refused = C("energy_refused_reason").is_not_null()
    closed = C("workload_kind") == "closed_batch"
    # Effective batch: fixed by construction in a closed batch, an outcome (mean running requests) in open loop.
    b_eff = pl.when(closed).then(C("batch_size").cast(pl.Float64)).otherwise(C("mean_running_requests"))
    verify_width = 1 + C("draft_tokens") / C("drafts")  # measured drafted tokens per request + the bonus slot
    mj = C("mj_per_committed_token")
    base_mj = C("baseline_mj_per_committed_token")
    out = out.with_columns(
        pl.when(C("drafts") > 0).then(b_eff * verify_width).alias("tokens_per_verify_pass"),
        pl.when(~refused).then(mj).alias("mj_per_committed_token"),
        pl.when(~refused).then(base_mj).alias("baseline_mj_per_committed_token"),
        pl.when(~refused).then(mj / base_mj).alias("energy_ratio"),
        pl.when(~refused & (C("accepted_tokens") > 0))
          .then(C("energy_j") * 1000.0 / C("accepted_tokens")).alias("mj_per_accepted_token"),
        (C("tpot_mean_s") / C("baseline_tpot_mean_s")).alias("tbt_ratio"),
        C("failed_checks").fill_null(pl.lit([], pl.List(pl.String))),
        C("flags").fill_null(pl.lit([], pl.List(pl.String))),
    )
    return out.select(*CURVE_COLUMNS).cast(curve_schema()).sort("campaign_id", "cell_name")  # type: ignore[arg-type]


def curve_schema() -> dict[str, pl.DataType]:
    from specjoule.analysis.aggregate import RECORD_POLARS_SCHEMA

    extra = {"tokens_per_verify_pass": pl.Float64, "baseline_mj_per_committed_token": pl.Float64,
             "energy_ratio": pl.Float64, "mj_per_accepted_token": pl.Float64, "baseline_tpot_mean_s": pl.Float64,
             "tbt_ratio": pl.Float64, "baseline_mean_running_requests": pl.Float64,
             "energy_refused_reason": pl.String, "failed_checks": pl.List(pl.String), "flags": pl.List(pl.String),
             "baseline_async_scheduling": pl.Boolean, "baseline_cuda_graph_sizes": pl.Int64,
             "baseline_round_time_ms": pl.Float64}
    return {c: extra[c] if c in extra else RECORD_POLARS_SCHEMA[c] for c in CURVE_COLUMNS}


# ----------------------------------------------------------------------------------------------
# seeds

# Enumerate every distinct resample (weighted by its multinomial probability) while there are at
# most this many — C(2n-1, n) — i.e. up to n = 7 seeds; Monte Carlo beyond.
EXACT_BOOTSTRAP_MAX = 5000


def _compositions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every resample of n values with replacement as a count vector (M × n), and its probability."""
    counts = np.array([np.bincount(c, minlength=n) for c in itertools.combinations_with_replacement(range(n), n)])
    log_w = math.lgamma(n + 1) - np.array([sum(math.lgamma(k + 1) for k in row) for row in counts]) - n * math.log(n)
    return counts, np.exp(log_w)


def _exact_bootstrap_means(values: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The ideal (B → ∞) percentile bootstrap of the mean: inverse CDF of the exact resample-mean
    distribution at alpha and 1 - alpha. values is (G, n)."""
    g, n = values.shape
    counts, w = _compositions(n)
    means = values @ counts.T.astype(np.float64) / n  # (G, M)
    order = np.argsort(means, axis=1, kind="stable")
    sorted_means = np.take_along_axis(means, order, axis=1)
    cdf = np.cumsum(w[order], axis=1)
    rows = np.arange(g)
    lo = sorted_means[rows, (cdf < alpha - 1e-12).sum(axis=1)]
    hi = sorted_means[rows, np.minimum((cdf < 1 - alpha - 1e-12).sum(axis=1), means.shape[1] - 1)]
    return lo, hi


def _bootstrap_means(values: np.ndarray, rng: np.random.Generator, resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo percentile bootstrap of the mean for G groups of equal size n: values is (G, n)."""
    g, n = values.shape
    lo = np.empty(g)
    hi = np.empty(g)
    alpha = (1 - BOOTSTRAP_LEVEL) / 2
    chunk = max(1, 2_000_000 // (resamples * n))  # bound memory: chunk × resamples × n floats
    for s in range(0, g, chunk):
        v = values[s:s + chunk]
        idx = rng.integers(0, n, size=(v.shape[0], resamples, n), dtype=np.int32)
        means = v[np.arange(v.shape[0])[:, None, None], idx].mean(axis=2)  # (chunk, resamples)
        lo[s:s + chunk], hi[s:s + chunk] = np.quantile(means, [alpha, 1 - alpha], axis=1)
    return lo, hi


def bootstrap_interval(values: np.ndarray, rng: np.random.Generator,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean per row of values (G × n, n ≥ 2)."""
    n = values.shape[1]
    if math.comb(2 * n - 1, n) <= EXACT_BOOTSTRAP_MAX:
        return _exact_bootstrap_means(values, (1 - BOOTSTRAP_LEVEL) / 2)
    return _bootstrap_means(values, rng, resamples)


def summarize_seeds(curves: pl.DataFrame, resamples: int = BOOTSTRAP_RESAMPLES,
                    seed: int = BOOTSTRAP_SEED) -> pl.DataFrame:
    """Mean and a percentile-bootstrap interval of the mean over seeds, per curve point (ADR 0027).

    Null values (e.g. energy_ratio without a meter) are left out of that metric's n; a point with
    one seed has a mean and no interval (null), never a zero-width one.
    """
    keys = list(SUMMARY_KEYS)
    base = (curves.group_by(keys, maintain_order=True)
            .agg(C("seed").n_unique().alias("n_seeds"), C("seed").sort().alias("seeds"),
                 C("failed_checks").list.explode().drop_nulls().unique().sort().alias("failed_checks"),
                 C("flags").list.explode().drop_nulls().unique().sort().alias("flags"),
                 C("energy_refused_reason").drop_nulls().first().alias("energy_refused_reason"))
            .sort(keys, nulls_last=True))
    rng = np.random.default_rng(seed)
    for metric in SUMMARY_METRICS:
        grouped = (curves.filter(C(metric).is_not_null())
                   .group_by(keys).agg(C(metric).sort().alias("v"))
                   .with_columns(C("v").list.len().alias("n")))
        parts = []
        for (n,), part in sorted(grouped.partition_by("n", as_dict=True).items()):
            part = part.sort(keys, nulls_last=True)  # deterministic draw order
            vals = np.asarray(part["v"].to_list(), dtype=np.float64).reshape(part.height, n)
            mean = vals.mean(axis=1)
            if n >= 2:
                lo, hi = bootstrap_interval(vals, rng, resamples)
            else:
                lo = hi = np.full(part.height, np.nan)
            parts.append(part.select(keys).with_columns(
                pl.Series(f"{metric}_mean", mean), pl.Series(f"{metric}_ci_low", lo).fill_nan(None),
                pl.Series(f"{metric}_ci_high", hi).fill_nan(None), pl.lit(n, pl.Int32).alias(f"{metric}_n")))
        if parts:
            stats = pl.concat(parts)
        else:
            stats = pl.DataFrame(schema={**{k: curves.schema[k] for k in keys}, f"{metric}_mean": pl.Float64,
                                         f"{metric}_ci_low": pl.Float64, f"{metric}_ci_high": pl.Float64,
                                         f"{metric}_n": pl.Int32})
        base = base.join(stats, on=keys, how="left", nulls_equal=True).with_columns(C(f"{metric}_n").fill_null(0))
    return base


def write(curves: pl.DataFrame, summary: pl.DataFrame, curves_path: str | Path, summary_path: str | Path,
          config_hash: str | None) -> None:
    meta = {META_CONFIG_HASH: config_hash or ""}
    write_parquet_atomic(curves, curves_path, meta)
    write_parquet_atomic(summary, summary_path, meta | {
        META_BOOTSTRAP: (f"percentile bootstrap of the mean, level {BOOTSTRAP_LEVEL}: every resample enumerated "
                         f"while C(2n-1, n) <= {EXACT_BOOTSTRAP_MAX} (n <= 7 seeds), else {BOOTSTRAP_RESAMPLES} "
                         f"Monte Carlo resamples, numpy seed {BOOTSTRAP_SEED}")})
