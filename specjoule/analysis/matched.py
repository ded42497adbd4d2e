"""Energy at matched latency: every arm interpolated to each TBT target across its load levels (ADR 0114).

The paper's operator question, asked of every arm rather than of the cheapest configuration (ADR 0036 answers
that one): at a time between tokens of T ms, what does each scheme cost per committed token, and how does that
compare with the baseline *at the same T*? An arm's load level is what sets its TBT: the batch size of a closed
batch, the concurrency of a closed loop, the request rate of an open loop (the load axis, one per workload kind).
Along it the arm's measured points (seed by seed) give a piecewise-linear curve of TBT and of energy per token;
where the curve crosses T, energy (and load, and throughput) are interpolated linearly in TBT between the two
neighbouring load levels. Never extrapolated: a target outside the TBT range an arm measured gets a null and the
reason. Where the curve crosses T more than once the crossing at the highest load is used (the cheapest one an
operator would run).

Per seed the ratio arm / baseline is taken at equal T; over seeds its mean and, with two seeds or more (where the
seed summary has an interval, ADR 0027), the same percentile bootstrap interval of the mean.

Inputs are the derive stage's curves (refusals and energy refusals already applied; their failed checks and flags
carried on) and the aggregated records (load levels, throughput). Output: ``results/matched_latency.parquet``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from specjoule import axes
from specjoule.analysis import META_CONFIG_HASH, write_parquet_atomic
from specjoule.analysis.derive import BOOTSTRAP_SEED, bootstrap_interval
from specjoule.axes import ROLE_CLOSING, ROLE_OPENING

C = pl.col

# A slice is matched across load: the load axes (batch size, and the workload whose kind says which load axis
# it sets) leave the slice; the workload's kind and lengths stay in it.
SLICE_KEYS: tuple[str, ...] = (
    *(k for k in axes.SLICE_KEYS if k not in ("workload", "batch_size")),
    "workload_kind",
    "prompt_len",
    "output_len",
)
ARM_KEYS: tuple[str, ...] = ("scheme", "method", "acceptance_name", "configured_L")
LOAD_AXIS = {"closed_batch": "batch_size", "closed_loop": "concurrency", "open_loop": "request_rate"}
BASELINE = "baseline"

MATCHED_SCHEMA = pl.Schema(
    {
        "engine": pl.String,
        "model_pair": pl.String,
        "corpus": pl.String,
        "cuda_graphs": pl.Boolean,
        "workload_kind": pl.String,
        "prompt_len": pl.Int64,
        "output_len": pl.Int64,
        "load_axis": pl.String,
        "scheme": pl.String,
        "method": pl.String,
        "acceptance_name": pl.String,
        "configured_L": pl.Float64,
        "target_ms": pl.Float64,
        "loads": pl.List(pl.Float64),
        "n_seeds": pl.Int32,
        "load_at_target": pl.Float64,
        "tokens_per_s_at_target": pl.Float64,
        "mj_per_committed_token_at_target": pl.Float64,
        "baseline_load_at_target": pl.Float64,
        "baseline_tokens_per_s_at_target": pl.Float64,
        "baseline_mj_per_committed_token_at_target": pl.Float64,
        "energy_ratio_at_target": pl.Float64,
        "energy_ratio_ci_low": pl.Float64,
        "energy_ratio_ci_high": pl.Float64,
        "reason": pl.String,
        "energy_refused_reason": pl.String,
        "failed_checks": pl.List(pl.String),
        "flags": pl.List(pl.String),
    }
)


@dataclass(frozen=True)
class Crossing:
    """An arm's curve at one TBT target, for one seed."""

    load: float | None
    tokens_per_s: float | None
    mj: float | None
    reason: str | None  # why there is no crossing (load is None then)


def points(curves: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """Long table: one row per (slice, arm, seed, load) with TBT (s), mJ per committed token and tokens/s; the
    baseline arm from each campaign's paired baseline columns."""
    extra = records.select("cell_id", "concurrency", "request_rate", "prompt_len", "output_len", "tokens_per_s")
    # The baseline's throughput: the mean of the campaign's opening and closing baselines (as aggregate pairs them).
    base_tput = (
        records.filter(C("role").is_in([ROLE_OPENING, ROLE_CLOSING]))
        .group_by("campaign_id")
        .agg(C("tokens_per_s").mean().alias("baseline_tokens_per_s"))
    )
    c = curves.join(extra, on="cell_id", how="left").join(base_tput, on="campaign_id", how="left")
    load = pl.coalesce(
        pl.when(C("workload_kind") == "closed_batch").then(C("batch_size").cast(pl.Float64)),
        pl.when(C("workload_kind") == "closed_loop").then(C("concurrency").cast(pl.Float64)),
        pl.when(C("workload_kind") == "open_loop").then(C("request_rate").cast(pl.Float64)),
    )
    keep = [*SLICE_KEYS, "campaign_id", "seed", "failed_checks", "flags", "energy_refused_reason"]
    arms = c.select(
        *keep,
        *ARM_KEYS,
        load.alias("load"),
        C("tpot_mean_s").alias("tbt_s"),
        C("mj_per_committed_token").alias("mj"),
        "tokens_per_s",
    )
    base = (
        c.group_by("campaign_id", maintain_order=True)
        .agg(
            *[C(k).first() for k in keep if k != "campaign_id"],
            load.first().alias("load"),
            C("baseline_tpot_mean_s").first().alias("tbt_s"),
            C("baseline_mj_per_committed_token").first().alias("mj"),
            C("baseline_tokens_per_s").first().alias("tokens_per_s"),
        )
        .with_columns(
            pl.lit(BASELINE).alias("scheme"),
            pl.lit(BASELINE).alias("method"),
            pl.lit(None, pl.String).alias("acceptance_name"),
            pl.lit(None, pl.Float64).alias("configured_L"),
        )
    )
    return pl.concat([arms, base.select(arms.columns)], how="vertical_relaxed")


def crossing(
    loads: Sequence[float],
    tbt: Sequence[float | None],
    mj: Sequence[float | None],
    tput: Sequence[float | None],
    target_s: float,
) -> Crossing:
    """Where the curve (in load order) crosses ``target_s``: linear in TBT between the two neighbouring loads,
    the crossing at the highest load if several, never beyond the measured range."""
    pts = [(l, t, m, p) for l, t, m, p in zip(loads, tbt, mj, tput) if t is not None]
    if not pts:
        return Crossing(None, None, None, "no time between tokens measured (latency unreliable or not recorded)")
    pts.sort(key=lambda x: x[0])
    for (l0, t0, m0, p0), (l1, t1, m1, p1) in reversed(list(zip(pts, pts[1:]))):
        if (t0 - target_s) * (t1 - target_s) <= 0:
            w = 0.0 if t1 == t0 else (target_s - t0) / (t1 - t0)
            lerp = lambda a, b: None if a is None or b is None else a + (b - a) * w  # noqa: E731, B023 (called before the loop moves on)
            return Crossing(lerp(l0, l1), lerp(p0, p1), lerp(m0, m1), None)
    if len(pts) == 1 and pts[0][1] == target_s:
        l0, _, m0, p0 = pts[0]
        return Crossing(l0, p0, m0, None)
    lo = min(pts, key=lambda x: x[1])
    hi = max(pts, key=lambda x: x[1])
    if target_s < lo[1]:
        return Crossing(
            None, None, None, f"target below the lowest TBT measured ({lo[1] * 1e3:.4g} ms at load {lo[0]:g})"
        )
    if target_s > hi[1]:
        return Crossing(
            None, None, None, f"target above the highest TBT measured ({hi[1] * 1e3:.4g} ms at load {hi[0]:g})"
        )
    return Crossing(None, None, None, "only one load level measured")


def matched_latency(curves: pl.DataFrame, records: pl.DataFrame, targets_ms: Sequence[float]) -> pl.DataFrame:
    """One row per slice × arm × TBT target (schema MATCHED_SCHEMA)."""
    if curves.height == 0 or not targets_ms:
        return pl.DataFrame(schema=MATCHED_SCHEMA)
    pts = points(curves, records)
    # Duplicate loads of one arm and seed (two workloads of one kind at one level) are averaged.
    per_seed = pts.group_by([*SLICE_KEYS, *ARM_KEYS, "seed", "load"], maintain_order=True).agg(
        C("tbt_s").mean(),
        C("mj").mean(),
        C("tokens_per_s").mean(),
        C("failed_checks").list.explode(keep_nulls=False, empty_as_null=False),
        C("flags").list.explode(keep_nulls=False, empty_as_null=False),
        C("energy_refused_reason").drop_nulls().first(),
    )
    curves_by = (
        per_seed.sort("load")
        .group_by([*SLICE_KEYS, *ARM_KEYS, "seed"], maintain_order=True)
        .agg(
            C("load"),
            C("tbt_s"),
            C("mj"),
            C("tokens_per_s"),
            C("failed_checks").list.explode(keep_nulls=False, empty_as_null=False),
            C("flags").list.explode(keep_nulls=False, empty_as_null=False),
            C("energy_refused_reason").drop_nulls().first(),
        )
    )
    rows: dict[tuple, list[dict[str, Any]]] = {}
    for r in curves_by.iter_rows(named=True):
        for t in targets_ms:
            x = crossing(r["load"], r["tbt_s"], r["mj"], r["tokens_per_s"], float(t) / 1e3)
            key = tuple(r[k] for k in (*SLICE_KEYS, *ARM_KEYS)) + (float(t),)
            rows.setdefault(key, []).append(
                {
                    "seed": r["seed"],
                    "x": x,
                    "loads": r["load"],
                    "failed": r["failed_checks"],
                    "flags": r["flags"],
                    "refused": r["energy_refused_reason"],
                }
            )
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    out = []
    n_slice, n_arm = len(SLICE_KEYS), len(ARM_KEYS)
    for key, seeds in rows.items():
        slice_key, arm_key, t = key[:n_slice], key[n_slice : n_slice + n_arm], key[-1]
        if arm_key[0] == BASELINE:
            continue
        base = {s["seed"]: s["x"] for s in rows.get(slice_key + (BASELINE, BASELINE, None, None, t), [])}
        out.append(_summary(dict(zip(SLICE_KEYS, slice_key)) | dict(zip(ARM_KEYS, arm_key)), t, seeds, base, rng))
    if not out:
        return pl.DataFrame(schema=MATCHED_SCHEMA)
    return pl.DataFrame(out, schema=MATCHED_SCHEMA).sort(
        [*SLICE_KEYS, "scheme", "acceptance_name", "target_ms"], nulls_last=True
    )


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def _summary(
    ident: dict[str, Any], target_ms: float, seeds: list[dict], base: dict[Any, Crossing], rng: np.random.Generator
) -> dict[str, Any]:
    arm = [s["x"] for s in seeds]
    matched = [(s["x"], base.get(s["seed"])) for s in seeds]
    both = [(a, b) for a, b in matched if a.load is not None and b is not None and b.load is not None]
    ratios = [a.mj / b.mj for a, b in both if a.mj is not None and b.mj]
    lo = hi = None
    if len(ratios) >= 2:
        l, h = bootstrap_interval(np.asarray([sorted(ratios)], dtype=np.float64), rng)
        lo, hi = float(l[0]), float(h[0])
    reasons = [a.reason for a in arm if a.reason] or [
        f"baseline: {b.reason}" for _, b in matched if b is not None and b.reason
    ]
    if not base:
        reasons.append("no baseline in this slice")
    refused = next((s["refused"] for s in seeds if s["refused"]), None)
    return ident | {
        "load_axis": LOAD_AXIS.get(ident["workload_kind"]),
        "target_ms": target_ms,
        "loads": sorted({float(x) for s in seeds for x in s["loads"] if x is not None}),
        "n_seeds": len(both),
        "load_at_target": _mean([a.load for a in arm]),
        "tokens_per_s_at_target": _mean([a.tokens_per_s for a in arm]),
        "mj_per_committed_token_at_target": _mean([a.mj for a in arm]),
        "baseline_load_at_target": _mean([b.load for b in base.values()]),
        "baseline_tokens_per_s_at_target": _mean([b.tokens_per_s for b in base.values()]),
        "baseline_mj_per_committed_token_at_target": _mean([b.mj for b in base.values()]),
        "energy_ratio_at_target": float(np.mean(ratios)) if ratios else None,
        "energy_ratio_ci_low": lo,
        "energy_ratio_ci_high": hi,
        "reason": "; ".join(dict.fromkeys(reasons)) if not both else None,
        "energy_refused_reason": refused,
        "failed_checks": sorted({c for s in seeds for c in (s["failed"] or [])}),
        "flags": sorted({c for s in seeds for c in (s["flags"] or [])}),
    }


def write(table: pl.DataFrame, path: str | Path, config_hash: str | None) -> None:
    write_parquet_atomic(table, path, {META_CONFIG_HASH: config_hash or ""})
