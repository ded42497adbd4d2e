"""Tensor parallelism in the report: energy per committed token at each TP of the same arm (ADR 0157).

A function of the aggregated records (``results/records.parquet``) and the checks: for every arm measured
at more than one tensor-parallel size with everything else equal (engine, target, workload, corpus, graphs,
batch size, scheme, acceptance vector), one row per TP with the mean mJ per committed token over its
replicates, its ratio to the smallest TP's, the arm's energy ratio to its own campaign's baseline, and how
the energy split over the GPUs. Campaigns that failed a check are left out, as in the engine comparison.
"""

from __future__ import annotations

import polars as pl

from specjoule import axes
from specjoule.report import schemes

C = pl.col
# An arm measured at several tensor-parallel sizes: the model pair differs by TP, its target model does not.
ARM_KEYS: tuple[str, ...] = (*axes.substitute(axes.SLICE_KEYS, {"model_pair": ("target_model",)}), *axes.ARM_NAMES)


def _tp() -> pl.Expr:
    # Records written before issue 23 have no tensor_parallel_size: they ran on one GPU.
    return C("tensor_parallel_size").fill_null(1).cast(pl.Int64).alias("tp")


def _failed_campaigns(checks: pl.DataFrame | None) -> list[str]:
    if checks is None or checks.height == 0:
        return []
    return checks.filter((C("status") == "fail") & (C("check") != "energy_measured"))["campaign_id"].unique().to_list()


def tp_comparison(records: pl.DataFrame, checks: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (arm, TP) for arms measured at two or more TPs; empty when TP does not vary."""
    if records.height == 0 or "tensor_parallel_size" not in records.columns:
        return pl.DataFrame()
    r = schemes.measured_records(records).with_columns(_tp())
    r = r.filter(C("mj_per_committed_token").is_not_null() & ~C("campaign_id").is_in(_failed_campaigns(checks)))
    if r.height == 0 or r["tp"].n_unique() < 2:
        return pl.DataFrame()
    ratio = pl.when(C("role") == axes.ROLE_POINT).then(
        C("mj_per_committed_token") / C("baseline_mj_per_committed_token")
    )
    width = int(r["energy_j_per_gpu"].list.len().max() or 0)
    share = C("energy_j_per_gpu").list.eval(pl.element() / pl.element().sum())
    per_tp = (
        r.with_columns(ratio.alias("_ratio"), share.alias("_share"))
        .with_columns(C("_share").list.get(i, null_on_oob=True).alias(f"_gpu{i}") for i in range(width))
        .group_by(*ARM_KEYS, "tp", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            C("mj_per_committed_token").mean().alias("mj_per_token"),
            C("_ratio").mean().alias("energy_ratio"),
            # each GPU position's mean share over the replicates (positions in metered order)
            *(C(f"_gpu{i}").mean() for i in range(width)),
        )
    )
    varied = per_tp.group_by(*ARM_KEYS).agg(C("tp").n_unique().alias("_n_tp")).filter(C("_n_tp") > 1).drop("_n_tp")
    out = per_tp.join(varied, on=list(ARM_KEYS), how="semi", nulls_equal=True)
    if out.height == 0:
        return pl.DataFrame()
    ref = (
        out.sort("tp")
        .group_by(*ARM_KEYS, maintain_order=True)
        .agg(C("mj_per_token").first().alias("_ref_mj"), C("tp").first().alias("reference_tp"))
    )
    out = out.join(ref, on=list(ARM_KEYS), how="left", nulls_equal=True)
    gpu_cols = [f"_gpu{i}" for i in range(width)]
    split = [_split_text([row[c] for c in gpu_cols]) for row in out.select(gpu_cols).iter_rows(named=True)]
    return (
        out.with_columns(
            (C("mj_per_token") / C("_ref_mj")).alias("mj_vs_reference"),
            pl.Series("per_gpu_energy_split", split, pl.String),
        )
        .drop("_ref_mj", *gpu_cols)
        .sort(*ARM_KEYS, "tp", nulls_last=True)
    )


def _split_text(shares: list[float | None]) -> str:
    """ "50.4 % / 49.6 %": each GPU position's mean share of the cell's energy ("—" for one GPU)."""
    means = [v for v in shares if v is not None]
    return "—" if len(means) < 2 else " / ".join(f"{100 * m:.1f} %" for m in means)
