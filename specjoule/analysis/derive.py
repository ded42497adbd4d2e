"""Curves: each speculative cell against its baseline (ADR 0025, 0026, 0027, 0081).

Strict by default: a campaign with a failed check is refused and the message names campaign and
check. ``energy_measured`` is the exception — when it fails (meter none, as on CPU) the curves are
still written, with every energy column null and ``energy_refused_reason`` naming the check, since
the counters, acceptance and latency columns do not depend on the energy meter. With
``allow_failed_checks`` a refused campaign is derived anyway and every one of its rows lists the
campaign's failures in ``failed_checks``; ``flags`` lists the flags that concern the row (its cell
or one of its baselines).

Every curve row also carries its configuration's n, mean and interval (``<metric>_n``, ``_mean``,
``_ci_low``, ``_ci_high``, ``interval_level``): the configuration is the point across its seeds,
windows and engine replicates, and the interval is the bootstrap of ``specjoule.analysis.spread``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from specjoule import axes
from specjoule.analysis import META_CONFIG_HASH, AnalysisError, spread
from specjoule.analysis.checks import ENERGY_CHECK, FAIL, FLAG, PASS

# The ADR 0027 bootstrap now lives in spread (checks use it too); its names stay importable from here.
from specjoule.analysis.spread import (  # noqa: F401
    BOOTSTRAP_LEVEL,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    EXACT_BOOTSTRAP_MAX,
    SUMMARY_KEYS,
    _bootstrap_means,
    _compositions,
    _exact_bootstrap_means,
    bootstrap_interval,
)

C = pl.col


def _request_steps() -> pl.Expr:
    """Request-steps: each commits one token plus the drafts accepted in it (ADR 0256, ADR 0029's step count)."""
    return C("committed_tokens") - C("accepted_tokens")


def request_step_columns() -> list[pl.Expr]:
    """``drafted_step_share`` and ``committed_per_step`` from a record's own counters (ADR 0256).

    Every request-step commits one token plus the drafts accepted in it, so request-steps = committed − accepted
    (the step count of ``round_time_ms``, ADR 0029, in closed batch and open loop alike). Null without drafts: a
    baseline drafts nothing, and an engine writes 0 for a drafts counter it did not read (as realized_L is null
    there); null where no step was counted."""
    steps = _request_steps()
    counted = (C("drafts") > 0) & (steps > 0)
    return [
        pl.when(counted).then(C("drafts") / steps).alias("drafted_step_share"),
        pl.when(counted).then(C("committed_tokens") / steps).alias("committed_per_step"),
    ]


def decode_step_columns() -> list[pl.Expr]:
    """``drafted_decode_share_low`` and ``_high``: bounds on the share of decode steps that verified a draft (ADR 0256
    addendum 2), where request-steps are not decode steps at a request's two ends.

    A request's first token comes from its prefill, a step with no draft before it; its last step may accept drafted
    tokens past its length, which the engines count as accepted, so ``committed − accepted`` misses that many steps.
    Decode steps therefore lie between ``committed − accepted − requests`` and that plus ``requests × a``, where ``a``
    is the most tokens one step can accept: the positions the configured rates can accept (unconditional rates, so
    the positive ones), else k. Closed batch only, where a window holds whole requests (``requests_completed`` is
    every request whose steps it counted); null elsewhere, without drafts, without a step counted or without k."""
    requests = C("requests_completed")
    decode_low = _request_steps() - requests
    per_request = (
        pl.when(C("acceptance_rates").is_not_null())
        .then(C("acceptance_rates").list.eval(pl.element() > 0).list.sum())
        .otherwise(C("k"))
    )
    decode_high = decode_low + per_request * requests
    bounded = (
        (C("workload_kind") == "closed_batch")
        & (C("drafts") > 0)
        & (requests > 0)
        & (decode_low > 0)
        & per_request.is_not_null()
    )
    return [
        pl.when(bounded).then(C("drafts") / decode_high).alias("drafted_decode_share_low"),
        # a proposer that drafts every decode step can read above 1 at the low count: the share is at most 1
        pl.when(bounded)
        .then(pl.min_horizontal(C("drafts") / decode_low, pl.lit(1.0)))
        .alias("drafted_decode_share_high"),
    ]


CURVE_COLUMNS: tuple[str, ...] = (
    # A curve point's identity: its campaign and cell, and its configuration with the seed (specjoule.axes).
    "campaign_id",
    "cell_id",
    "cell_name",
    *axes.CURVE_KEYS,
    "gpu_uuid",
    "realized_L",
    "accepted_per_verification",
    "tokens_per_verify_pass",
    "mj_per_committed_token",
    "baseline_mj_per_committed_token",
    "energy_ratio",
    "mj_per_accepted_token",
    "tpot_mean_s",
    "baseline_tpot_mean_s",
    "tbt_ratio",
    "mean_running_requests",
    "baseline_mean_running_requests",
    "energy_refused_reason",
    "failed_checks",
    "flags",
    # Engine configuration per point and its opening baseline (ADR 0029): the report shows them
    # beside the ratio, so a ratio between differently configured engines is visible as such.
    "async_scheduling",
    "baseline_async_scheduling",
    "cuda_graph_sizes",
    "baseline_cuda_graph_sizes",
    "round_time_ms",
    "baseline_round_time_ms",
    # Replicates (ADR 0080, 0081): the record's place among its configuration's repeats, the baselines of its
    # own window, and the configuration's n, mean and interval (the same on every row of a configuration).
    "window_index",
    "engine_replicate",
    "point_name",
    # The paper's per-pass quantities and the target's family (issue 16): what the per-pass figure and the scheme
    # tables group and plot by, carried from each point's record.
    "verify_width",
    "drafted_per_committed",
    "draft_passes_per_round",
    # Request-steps (ADR 0256): an n-gram proposer drafts only where the context matches, and a step without a
    # draft commits one token; realized_L, per verification, does not see those steps.
    "drafted_step_share",
    "committed_per_step",
    # ... and decode steps, bounded (ADR 0256 addendum 2): a request's prefill step and its last step's overshoot.
    "drafted_decode_share_low",
    "drafted_decode_share_high",
    "target_family",
    "target_moe",
    "baseline_window_mj_per_committed_token",
    "baseline_window_tpot_mean_s",
    "interval_level",
    *(f"{m.name}_{s}" for m in spread.SUMMARY_METRICS for s in ("n", "mean", "ci_low", "ci_high")),
)
ENERGY_CURVE_COLUMNS = (
    "mj_per_committed_token",
    "baseline_mj_per_committed_token",
    "energy_ratio",
    "mj_per_accepted_token",
    "baseline_window_mj_per_committed_token",
    "energy_ratio_mean",
    "energy_ratio_ci_low",
    "energy_ratio_ci_high",
    "mj_per_committed_token_mean",
    "mj_per_committed_token_ci_low",
    "mj_per_committed_token_ci_high",
)

# The summary: one row per configuration (SUMMARY_KEYS, cell_name without its window suffix), over its
# seeds, windows and engine replicates.
SUMMARY_METRICS: tuple[str, ...] = tuple(m.name for m in spread.SUMMARY_METRICS)
META_BOOTSTRAP = "specjoule_bootstrap"
META_INTERVAL_LEVEL = "specjoule_interval_level"


class DeriveRefused(AnalysisError):
    """A campaign failed a pre-registered check and allow_failed_checks is off."""


def _refusal_message(fails: pl.DataFrame) -> str:
    by_campaign = (
        fails.group_by("campaign_id", maintain_order=True)
        .agg(C("check").unique(maintain_order=True))
        .sort("campaign_id")
    )
    lines = [
        f"  campaign {r['campaign_id']}: failed check(s) {', '.join(r['check'])}"
        for r in by_campaign.head(20).iter_rows(named=True)
    ]
    if by_campaign.height > 20:
        lines.append(f"  … and {by_campaign.height - 20} more campaign(s)")
    return (
        f"derive refuses {by_campaign.height} campaign(s) with a failed pre-registered check "
        f"(see results/checks.md; set checks.allow_failed_checks: true to derive them anyway, marked):\n"
        + "\n".join(lines)
    )


def _concerning(points: pl.DataFrame, checks: pl.DataFrame, status: str, exclude: tuple[str, ...]) -> pl.DataFrame:
    """For each point: sorted names of checks with ``status`` whose cells include the point or one of
    its baselines (a flagged baseline concerns every ratio built on it; a flagged sibling does not)."""
    hits = (
        checks.filter((C("status") == status) & ~C("check").is_in(list(exclude)))
        .select("campaign_id", "check", "cell_names")
        .explode("cell_names")
        .rename({"cell_names": "concerned"})
    )
    # Every baseline window of either side (ADR 0080): a flagged window concerns each ratio built on its side.
    no_names = pl.lit([], pl.List(pl.String))
    targets = (
        points.select(
            "campaign_id",
            "cell_name",
            pl.concat_list(
                C("opening_cell_names").fill_null(no_names), C("closing_cell_names").fill_null(no_names)
            ).alias("concerned"),
        )
        .explode("concerned")
        .drop_nulls("concerned")
    )
    targets = pl.concat([targets, points.select("campaign_id", "cell_name", C("cell_name").alias("concerned"))])
    return (
        targets.join(hits, on=["campaign_id", "concerned"], how="inner")
        .group_by("campaign_id", "cell_name")
        .agg(C("check").unique().sort())
    )


def derive(
    records: pl.DataFrame, checks: pl.DataFrame, allow_failed_checks: bool = False, level: float = BOOTSTRAP_LEVEL
) -> pl.DataFrame:
    """curves.parquet rows: one per speculative point record, paired with its campaign's baselines, with
    its configuration's intervals at ``level``. Unsupported records are not curve points."""
    records = records.filter(spread.is_measured(records))
    campaigns = records["campaign_id"].unique()
    checked = checks["campaign_id"].unique()
    unchecked = campaigns.filter(~campaigns.is_in(checked.implode()))
    if unchecked.len():
        raise AnalysisError(
            f"no check results for campaign(s) {', '.join(unchecked.sort().head(5).to_list())}: "
            f"checks.parquet is stale or from another records.parquet"
        )

    fails = checks.filter((C("status") == FAIL) & (C("check") != ENERGY_CHECK))
    if fails.height and not allow_failed_checks:
        raise DeriveRefused(_refusal_message(fails))

    energy = checks.filter(C("check") == ENERGY_CHECK).select(
        "campaign_id",
        pl.when(C("status") != PASS)
        .then(pl.format("{} {}: {}", pl.lit(ENERGY_CHECK), C("status"), C("detail")))
        .alias("energy_refused_reason"),
        pl.lit(True).alias("_energy_checked"),
    )
    points = spread.point_frame(records)
    if not points.height:
        return pl.DataFrame(schema=curve_schema())
    # A failure refuses the whole campaign, so under allow_failed_checks every row of it carries the
    # campaign's failures: filtering marked rows then shows exactly what strict mode would have shown.
    failed = fails.group_by("campaign_id").agg(C("check").unique().sort().alias("failed_checks"))
    flagged = _concerning(points, checks, FLAG, ()).rename({"check": "flags"})

    opening_cfg = records.select(
        "campaign_id",
        C("cell_name").alias("opening_cell_name"),
        C("async_scheduling").alias("baseline_async_scheduling"),
        C("cuda_graph_sizes").alias("baseline_cuda_graph_sizes"),
    )
    points = points.join(opening_cfg, on=["campaign_id", "opening_cell_name"], how="left")
    out = (
        points.join(energy, on="campaign_id", how="left")
        .join(failed, on="campaign_id", how="left")
        .join(flagged, on=["campaign_id", "cell_name"], how="left")
    )
    # A campaign the energy check never ran on gets no energy numbers either (never silently trusted).
    out = out.with_columns(
        pl.when(C("_energy_checked").is_null())
        .then(pl.lit(f"{ENERGY_CHECK} not evaluated for this campaign"))
        .otherwise(C("energy_refused_reason"))
        .alias("energy_refused_reason")
    )
    refused = C("energy_refused_reason").is_not_null()
    closed = C("workload_kind") == "closed_batch"
    # Effective batch: fixed by construction in a closed batch, an outcome (mean running requests) in open loop.
    b_eff = pl.when(closed).then(C("batch_size").cast(pl.Float64)).otherwise(C("mean_running_requests"))
    verify_width = 1 + C("draft_tokens") / C("drafts")  # measured drafted tokens per request + the bonus slot
    mj = C("mj_per_committed_token")
    base_mj = C("baseline_mj_per_committed_token")
    out = out.with_columns(
        pl.when(C("drafts") > 0).then(b_eff * verify_width).alias("tokens_per_verify_pass"),
        *request_step_columns(),
        *decode_step_columns(),
        pl.when(~refused).then(mj).alias("mj_per_committed_token"),
        pl.when(~refused).then(base_mj).alias("baseline_mj_per_committed_token"),
        pl.when(~refused)
        .then(C("baseline_window_mj_per_committed_token"))
        .alias("baseline_window_mj_per_committed_token"),
        pl.when(~refused).then(mj / base_mj).alias("energy_ratio"),
        pl.when(~refused & (C("accepted_tokens") > 0))
        .then(C("energy_j") * 1000.0 / C("accepted_tokens"))
        .alias("mj_per_accepted_token"),
        (C("tpot_mean_s") / C("baseline_tpot_mean_s")).alias("tbt_ratio"),
        C("failed_checks").fill_null(pl.lit([], pl.List(pl.String))),
        C("flags").fill_null(pl.lit([], pl.List(pl.String))),
    )
    out = with_intervals(out, level)
    return out.select(*CURVE_COLUMNS).cast(curve_schema()).sort("campaign_id", "cell_name")  # type: ignore[arg-type]


def with_intervals(curves: pl.DataFrame, level: float = BOOTSTRAP_LEVEL) -> pl.DataFrame:
    """Each row gains its configuration's ``interval_level`` and every metric's n, mean and interval."""
    stats = spread.summarize(spread.configurations(curves), SUMMARY_KEYS, spread.SUMMARY_METRICS, level=level)
    keys = [k for k in SUMMARY_KEYS if k != "cell_name"]
    return curves.join(
        stats.rename({"cell_name": "point_name"}), on=[*keys, "point_name"], how="left", nulls_equal=True
    )


def curve_schema() -> dict[str, pl.DataType]:
    from specjoule.analysis.aggregate import RECORD_POLARS_SCHEMA

    extra = {
        "tokens_per_verify_pass": pl.Float64,
        "drafted_step_share": pl.Float64,
        "committed_per_step": pl.Float64,
        "drafted_decode_share_low": pl.Float64,
        "drafted_decode_share_high": pl.Float64,
        "baseline_mj_per_committed_token": pl.Float64,
        "energy_ratio": pl.Float64,
        "mj_per_accepted_token": pl.Float64,
        "baseline_tpot_mean_s": pl.Float64,
        "tbt_ratio": pl.Float64,
        "baseline_mean_running_requests": pl.Float64,
        "energy_refused_reason": pl.String,
        "failed_checks": pl.List(pl.String),
        "flags": pl.List(pl.String),
        "baseline_async_scheduling": pl.Boolean,
        "baseline_cuda_graph_sizes": pl.Int64,
        "baseline_round_time_ms": pl.Float64,
        "point_name": pl.String,
        "baseline_window_mj_per_committed_token": pl.Float64,
        "baseline_window_tpot_mean_s": pl.Float64,
        "interval_level": pl.String,
        **{f"{m}_{s}": pl.Float64 for m in SUMMARY_METRICS for s in ("mean", "ci_low", "ci_high")},
        **{f"{m}_n": pl.Int32 for m in SUMMARY_METRICS},
    }
    # Replicate axes are record columns from wave 2 on; records before it read them as null (= 0).
    replicate = {"window_index": pl.Int64, "engine_replicate": pl.Int64}
    return {c: extra[c] if c in extra else RECORD_POLARS_SCHEMA.get(c, replicate.get(c)) for c in CURVE_COLUMNS}


# ----------------------------------------------------------------------------------------------
# the summary: configurations over their replicates


def summarize(
    curves: pl.DataFrame,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = BOOTSTRAP_LEVEL,
) -> pl.DataFrame:
    """Mean and a percentile-bootstrap interval per configuration, over its replicates (ADR 0027, 0081).

    The interval resamples the highest replicate level present (``interval_level``); ratios are
    paired ratios of means. Null values (e.g. energy without a meter) are left out of that metric's n;
    a configuration with one unit has a mean and no interval (null), never a zero-width one.
    """
    frame = spread.configurations(spread.with_replicate_axes(curves))
    keys = list(SUMMARY_KEYS)
    base = (
        frame.group_by(keys, maintain_order=True)
        .agg(
            C("seed").n_unique().alias("n_seeds"),
            C("seed").unique().sort().alias("seeds"),
            C("engine_replicate").n_unique().alias("n_engine_replicates"),
            C("window_index").n_unique().alias("n_windows"),
            pl.len().alias("n_records"),
            C("failed_checks").list.explode().drop_nulls().unique().sort().alias("failed_checks"),
            C("flags").list.explode().drop_nulls().unique().sort().alias("flags"),
            C("energy_refused_reason").drop_nulls().first().alias("energy_refused_reason"),
        )
        .sort(keys, nulls_last=True)
    )
    stats = spread.summarize(frame, keys, spread.SUMMARY_METRICS, level=level, resamples=resamples, seed=seed)
    return base.join(stats, on=keys, how="left", nulls_equal=True).select(*SUMMARY_COLUMNS)


# The ADR 0027 name: every replicate level now, not only seeds.
summarize_seeds = summarize

SUMMARY_COLUMNS: tuple[str, ...] = (
    *SUMMARY_KEYS,
    "n_seeds",
    "seeds",
    "failed_checks",
    "flags",
    "energy_refused_reason",
    *(f"{m}_{s}" for m in SUMMARY_METRICS[:3] for s in ("mean", "ci_low", "ci_high", "n")),
    "n_engine_replicates",
    "n_windows",
    "n_records",
    "interval_level",
    *(f"{m}_{s}" for m in SUMMARY_METRICS[3:] for s in ("mean", "ci_low", "ci_high", "n")),
)

# Column docs written into the Parquet schema of curves_summary.parquet (field metadata "doc").
SUMMARY_DOCS: dict[str, str] = {
    "cell_name": "the point's cell name without its window suffix (--w<w>): one configuration",
    "n_seeds": "distinct seeds (prompt samples) among the configuration's records",
    "seeds": "those seeds",
    "n_engine_replicates": "distinct engine replicates (campaign re-runs on fresh engine starts)",
    "n_windows": "distinct window indices (back-to-back windows on one warm engine)",
    "n_records": "point records of the configuration (one per seed × window × engine replicate measured)",
    "interval_level": "the replicate level the intervals resample: engine_replicate if > 1, else seed if > 1, else "
    "window if > 1; null with one unit (no interval); the levels below are averaged per unit",
    "failed_checks": "union of the failed checks of the configuration's campaigns",
    "flags": "union of the flags concerning the configuration's rows",
    "energy_refused_reason": "why energy columns are null (energy_measured did not pass)",
}
for _m, _what in (
    (
        "energy_ratio",
        "energy ratio, point / paired baseline: the ratio of the unit means of point "
        "and baseline (the baseline of each point's own campaign and window)",
    ),
    ("realized_L", "realized mean acceptance length"),
    ("tbt_ratio", "time between tokens, point / paired baseline, as the energy ratio"),
    ("mj_per_committed_token", "mJ per committed token of the point"),
):
    SUMMARY_DOCS[f"{_m}_mean"] = f"{_what}: mean over the replicate units"
    SUMMARY_DOCS[f"{_m}_ci_low"] = (
        f"{_what}: lower end of the bootstrap interval at the file's interval level "
        "(metadata specjoule_interval_level) over interval_level units; null with one unit"
    )
    SUMMARY_DOCS[f"{_m}_ci_high"] = f"{_what}: upper end of that interval"
    SUMMARY_DOCS[f"{_m}_n"] = f"{_what}: replicate units at interval_level with a value"


def write(
    curves: pl.DataFrame,
    summary: pl.DataFrame,
    curves_path: str | Path,
    summary_path: str | Path,
    config_hash: str | None,
    level: float = BOOTSTRAP_LEVEL,
) -> None:
    meta = {
        META_CONFIG_HASH: config_hash or "",
        META_BOOTSTRAP: spread.describe(level),
        META_INTERVAL_LEVEL: str(level),
    }
    docs = {
        **{f"{k}": v for k, v in SUMMARY_DOCS.items() if k.endswith(("_n", "_mean", "_ci_low", "_ci_high"))},
        "interval_level": SUMMARY_DOCS["interval_level"],
        "point_name": SUMMARY_DOCS["cell_name"],
        "baseline_window_mj_per_committed_token": "mean of the campaign's opening and closing baseline records of "
        "this window (the campaign baseline where they have no such window)",
        "baseline_window_tpot_mean_s": "the same for TPOT",
        "drafted_step_share": "drafts / request-steps, request-steps = committed_tokens − accepted_tokens: the share "
        "of request-steps that verified a draft (ADR 0256); null without drafts",
        "committed_per_step": "committed_tokens / request-steps: tokens a request-step commits, drafted or not "
        "(≤ realized_L, which counts drafted steps only; ADR 0256); null without drafts",
        "drafted_decode_share_low": "drafts / the most decode steps the counters allow: committed_tokens − "
        "accepted_tokens − requests_completed + requests_completed × the most tokens a step can accept (the positive "
        "acceptance_rates, else k); closed batch only, else null (ADR 0256 addendum 2)",
        "drafted_decode_share_high": "drafts / the fewest decode steps (committed_tokens − accepted_tokens − "
        "requests_completed), at most 1; closed batch only, else null (ADR 0256 addendum 2)",
    }
    write_documented(curves, curves_path, meta, docs)
    write_documented(summary, summary_path, meta, SUMMARY_DOCS)


def write_documented(df: pl.DataFrame, path: str | Path, metadata: dict[str, str], docs: dict[str, str]) -> None:
    """Write Parquet atomically with a ``doc`` in the metadata of every documented column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specjoule.records import atomic_path

    table = df.to_arrow()
    fields = [f.with_metadata({"doc": docs[f.name]}) if f.name in docs else f for f in table.schema]
    schema = pa.schema(fields, metadata={**(table.schema.metadata or {}), **metadata})
    with atomic_path(path) as tmp:
        pq.write_table(table.cast(schema), tmp)
