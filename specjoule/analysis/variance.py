"""The variance budget: where the spread of a measurement comes from (ADR 0084).

    python -m specjoule.analysis.variance SOURCE [SOURCE ...] [--out results/variance.parquet]

Each SOURCE is a run: ``results/records.parquet`` or an evidence folder (``specjoule.analysis.evidence``).
Per campaign family (engine, model pair, workload, graph mode) and per metric (log mJ per committed
token of every measured record; log energy ratio of every speculative point), the variance within a
configuration is split over five nested random effects, coarsest first:

- ``board``: the GPU (its UUID; on a GPU-less host, the host), and with it the host it sits in: a scheme whose
  round is host time (n-gram) moves with the machine, not the GPU alone (ADR 0250 addendum 3);
- ``run``: one run on that board (source and config hash: a re-run, another session);
- ``engine_restart``: one engine launch (``engine_instance``; an opening and a closing baseline are two);
- ``seed``: the prompt sample, inside its engine launch;
- ``window``: a window on the warm engine, the residual.

The configuration (everything that was measured, ``evidence.MEASURED_KEY``, and the effective engine
configuration with model paths reduced to file names) is a fixed effect: only
variation *within* a configuration is decomposed, pooled over the family's configurations. The estimator
is the ANOVA (method-of-moments, Henderson I) estimator for an unbalanced nested design: for each level
the between-group sum of squares within the next coarser level is set to its expectation, whose
coefficients come from the actual group sizes, and the triangular system is solved from the window up.
Logs make the components relative (a variance of 1e-4 is a 1 % coefficient of variation) so B = 1 and
B = 32 pool. A level where no group of the next coarser level has two members has no degree of freedom:
its variance cannot be told from the level above it, so it is reported *not estimable* and included in
that level's row (``includes``) — never 0. The coarsest level without degrees of freedom (one board per
configuration) is absorbed by the configuration's own mean and not estimable at all. A negative
estimate (sampling noise around a small component) is shown as ``variance_raw`` and counted as 0 in the
shares, with a note.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from specjoule import axes
from specjoule.analysis import AnalysisError, evidence, spread

C = pl.col

COMPONENTS: tuple[str, ...] = ("board", "run", "engine_restart", "seed", "window")  # coarse → fine
METRICS: tuple[str, ...] = ("mj_per_committed_token", "energy_ratio")
TOTAL = "total"

VARIANCE_COLUMNS: tuple[str, ...] = (
    "family",
    "metric",
    "component",
    "estimable",
    "includes",
    "variance",
    "variance_raw",
    "share",
    "cv_percent",
    "df",
    "n_groups",
    "n_configurations",
    "n_observations",
    "sources",
    "note",
)
VARIANCE_DOCS: dict[str, str] = {
    "family": "campaign family: engine-model_pair-workload-cg<graphs> (the cells that share engine starts)",
    "metric": "mj_per_committed_token (every measured record) or energy_ratio (speculative points, vs their "
    "campaign's baseline); decomposed on the log scale",
    "component": "board | run | engine_restart | seed | window (nested, coarsest first) or total",
    "estimable": "false when the level has no degree of freedom in this evidence (see includes and note)",
    "includes": "the levels whose variance this row holds: itself and finer levels it cannot be told from",
    "variance": "variance component of the log metric (≈ squared relative spread); null when not estimable; "
    "a negative estimate counts as 0",
    "variance_raw": "the method-of-moments estimate before a negative is counted as 0",
    "share": "variance / total of the estimable components",
    "cv_percent": "100 × sqrt(variance): the component as a relative standard deviation, percent",
    "df": "degrees of freedom of the level, pooled over the family's configurations",
    "n_groups": "groups at this level, summed over configurations",
    "n_configurations": "configurations (measured parameters) with two or more observations",
    "n_observations": "records in those configurations",
    "sources": "the runs (records files or evidence folders) read",
    "note": "why a row is not estimable, what it is merged with, or that a negative estimate was set to 0",
}


# ----------------------------------------------------------------------------------------------
# observations


def observations(records: pl.DataFrame) -> pl.DataFrame:
    """One row per measured record and metric: family, config, the level ids (each unique within its
    parent by construction) and y = log(metric)."""
    recs = spread.with_replicate_axes(records.filter(spread.is_measured(records)))
    if "source" not in recs.columns:
        recs = recs.with_columns(pl.lit("records").alias("source"))
    if "measure_key" not in recs.columns:
        recs = recs.with_columns(evidence.measure_key(recs))
    if "device_key" not in recs.columns:  # plain cell records (not aggregate's table): the same key, made here
        from specjoule.analysis.aggregate import device_key

        recs = recs.with_columns(device_key().alias("device_key"))
    board = C("device_key").fill_null("unknown device")
    run = pl.concat_str([board, C("source"), C("config_hash").fill_null("∅")], separator="|")
    launch = pl.coalesce(C("engine_instance"), pl.format("replicate {} {}", C("engine_replicate"), C("role")))
    engine = pl.concat_str([run, launch], separator="|")
    seed = pl.concat_str([engine, C("seed").cast(pl.String).fill_null("∅")], separator="|")
    window = pl.concat_str([seed, C("campaign_id"), C("cell_name")], separator="|")
    family = pl.format("{}-{}-{}-cg{}", C("engine"), C("model_pair"), C("workload"), C("cuda_graphs").cast(pl.Int8))
    # A configuration: what was measured and the engine configuration it was measured with (an engine option
    # changed between runs is a different configuration, not board or run variance).
    # Compared on the keys every record of the family recorded (ADR 0181): a key added to records later is not
    # recorded by the older ones, which is no evidence of another configuration.
    recs = recs.with_columns(family.alias("family"))
    recs = recs.with_columns(evidence.common_config_keys(recs, within="family"))
    config = pl.concat_str([C("measure_key"), C("engine_config_key")], separator="|")
    base = recs.select(
        C("family"),
        config.alias("config"),
        C("source"),
        board.alias("board"),
        run.alias("run"),
        engine.alias("engine_restart"),
        seed.alias("seed"),
        window.alias("window"),
        C("role"),
        C("mj_per_committed_token"),
        C("baseline_mj_per_committed_token"),
    )
    mj = base.filter(C("mj_per_committed_token") > 0).with_columns(
        pl.lit("mj_per_committed_token").alias("metric"), C("mj_per_committed_token").log().alias("y")
    )
    ratio = base.filter(
        (C("role") == axes.ROLE_POINT) & (C("mj_per_committed_token") > 0) & (C("baseline_mj_per_committed_token") > 0)
    ).with_columns(
        pl.lit("energy_ratio").alias("metric"),
        (C("mj_per_committed_token") / C("baseline_mj_per_committed_token")).log().alias("y"),
    )
    cols = ["family", "metric", "config", "source", *COMPONENTS, "y"]
    return pl.concat([mj.select(cols), ratio.select(cols)])


# ----------------------------------------------------------------------------------------------
# the nested method-of-moments estimator


def _k_nested(obs: pl.DataFrame, outer: str | None, inner: str) -> float:
    """Σ over configs and groups h of ``outer`` (the configuration when None) of Σ_{g of inner in h} n_g² / n_h."""
    by = ["config"] if outer is None else ["config", outer]
    g = obs.group_by(*by, inner, maintain_order=True).agg(pl.len().alias("n"))
    h = g.group_by(by, maintain_order=True).agg((C("n") ** 2).sum().alias("sq"), C("n").sum().alias("n"))
    return float(h.select((C("sq") / C("n")).sum()).item())


def _t(obs: pl.DataFrame, level: str | None) -> float:
    """Σ n_h ȳ_h² over the groups of a level (the configuration when None)."""
    by = ["config"] if level is None else ["config", level]
    g = obs.group_by(by, maintain_order=True).agg(pl.len().alias("n"), C("y").sum().alias("s"))
    return float(g.select((C("s") ** 2 / C("n")).sum()).item())


def degrees_of_freedom(obs: pl.DataFrame, fine_to_coarse: Sequence[str]) -> dict[str, int]:
    """Per level: Σ over configurations of (its groups − the next coarser level's groups)."""
    counts = [obs.select(pl.struct("config", lv).n_unique()).item() for lv in fine_to_coarse]
    counts.append(obs["config"].n_unique())
    return {lv: counts[i] - counts[i + 1] for i, lv in enumerate(fine_to_coarse)}


def estimate(obs: pl.DataFrame, fine_to_coarse: Sequence[str]) -> np.ndarray:
    """Method-of-moments variance components for levels that all have degrees of freedom (fine → coarse)."""
    levels = list(fine_to_coarse)
    m = len(levels)
    n_total = float(obs.height)
    # Sums of squares within a configuration do not depend on its mean: centring keeps the differences
    # of large sums (T_i - T_i+1) from losing digits when configurations sit far apart.
    obs = obs.with_columns(C("y") - C("y").mean().over("config"))
    t = [_t(obs, lv) for lv in levels] + [_t(obs, None)]
    ss = np.array([t[i] - t[i + 1] for i in range(m)])

    def k(i: int, j: int) -> float:  # E-coefficient of component j in T_i (i = m: the configuration)
        if i < m and j >= i:
            return n_total
        return _k_nested(obs, None if i == m else levels[i], levels[j])

    a = np.zeros((m, m))
    for i in range(m):
        for j in range(i + 1):
            a[i, j] = k(i, j) - k(i + 1, j)
    sigma = np.zeros(m)
    for i in range(m):
        sigma[i] = (ss[i] - a[i, :i] @ sigma[:i]) / a[i, i]
    return sigma


def decompose(obs: pl.DataFrame) -> list[dict]:
    """Rows of the budget for one family and metric (obs of configurations with >= 2 observations)."""
    # One row order whatever order the records came in, and group sums taken in it: floating-point sums then
    # add in one order, so the same records give the same digits in every run (a hash-ordered group_by did not).
    obs = obs.sort(obs.columns)
    fine_to_coarse = list(reversed(COMPONENTS))
    df = degrees_of_freedom(obs, fine_to_coarse)
    groups = {lv: obs.select(pl.struct("config", lv).n_unique()).item() for lv in fine_to_coarse}
    kept: list[tuple[str, list[str]]] = []
    pending: list[str] = []
    for lv in fine_to_coarse:
        if df[lv] == 0:
            pending.append(lv)  # indistinguishable from the next coarser level: merged into it
            continue
        kept.append((lv, [lv, *pending]))
        pending = []
    sigma = estimate(obs, [lv for lv, _ in kept]) if kept else np.array([])
    rows: dict[str, dict] = {}
    for (lv, includes), raw in zip(kept, sigma):
        merged = [x for x in includes if x != lv]
        note = ""
        if merged:
            note = f"holds {', '.join(merged)} too (no degree of freedom of their own)"
        if raw < 0:
            note = (note + "; " if note else "") + "negative estimate: counted as 0"
        rows[lv] = {
            "component": lv,
            "estimable": True,
            "includes": sorted(includes, key=COMPONENTS.index),
            "variance": max(raw, 0.0),
            "variance_raw": float(raw),
            "df": df[lv],
            "n_groups": groups[lv],
            "note": note,
        }
    owner = {x: lv for lv, inc in kept for x in inc}
    for lv in fine_to_coarse:
        if lv in rows:
            continue
        if lv in owner:
            note = (
                f"not separable from {owner[lv]}: every {owner[lv]} group holds one {lv}; "
                f"included in the {owner[lv]} row"
            )
        else:
            coarser = [x for x in pending if x != lv]
            note = (
                f"not estimable: one {lv} per configuration"
                + (f" (with {', '.join(coarser)})" if coarser else "")
                + "; its effect is part of each configuration's mean"
            )
        rows[lv] = {
            "component": lv,
            "estimable": False,
            "includes": [lv],
            "variance": None,
            "variance_raw": None,
            "df": df[lv],
            "n_groups": groups[lv],
            "note": note,
        }
    total = sum(r["variance"] for r in rows.values() if r["estimable"])
    for r in rows.values():
        r["share"] = (r["variance"] / total) if r["estimable"] and total > 0 else None
        r["cv_percent"] = 100 * float(np.sqrt(r["variance"])) if r["estimable"] else None
    pooled = obs.with_columns((C("y") - C("y").mean().over("config")).alias("d")).select((C("d") ** 2).sum()).item()
    dof = obs.height - obs["config"].n_unique()
    rows[TOTAL] = {
        "component": TOTAL,
        "estimable": bool(kept),
        "includes": [r for r in COMPONENTS if r in owner],
        "variance": total if kept else None,
        "variance_raw": total if kept else None,
        "share": 1.0 if kept and total > 0 else None,
        "cv_percent": 100 * float(np.sqrt(total)) if kept else None,
        "df": dof,
        "n_groups": None,
        "note": f"sum of the estimable components; pooled within-configuration sample variance "
        f"{pooled / dof:.3g} on {dof} df"
        if dof > 0
        else "no configuration observed twice",
    }
    return [rows[c] for c in (*COMPONENTS, TOTAL)]


def budget(records: pl.DataFrame) -> pl.DataFrame:
    """The variance budget table (VARIANCE_COLUMNS) for paired records of one or more runs."""
    obs = observations(records)
    sources = sorted(obs["source"].unique().to_list()) if obs.height else []
    out = []
    for (family, metric), part in sorted(obs.partition_by("family", "metric", as_dict=True).items()):
        repeated = part.filter(pl.len().over("config") > 1)
        common = {
            "family": family,
            "metric": metric,
            "n_configurations": repeated["config"].n_unique(),
            "n_observations": repeated.height,
            "sources": sources,
        }
        if not repeated.height:
            out += [
                common
                | {
                    "component": c,
                    "estimable": False,
                    "includes": [c],
                    "variance": None,
                    "variance_raw": None,
                    "share": None,
                    "cv_percent": None,
                    "df": 0,
                    "n_groups": None,
                    "note": "not estimable: no configuration observed twice",
                }
                for c in (*COMPONENTS, TOTAL)
            ]
            continue
        out += [common | r for r in decompose(repeated)]
    return pl.DataFrame(out, schema=variance_schema(), orient="row") if out else pl.DataFrame(schema=variance_schema())


def variance_schema() -> dict[str, pl.DataType]:
    f, i, s = pl.Float64, pl.Int64, pl.String
    return {
        "family": s,
        "metric": s,
        "component": s,
        "estimable": pl.Boolean,
        "includes": pl.List(s),
        "variance": f,
        "variance_raw": f,
        "share": f,
        "cv_percent": f,
        "df": i,
        "n_groups": i,
        "n_configurations": i,
        "n_observations": i,
        "sources": pl.List(s),
        "note": s,
    }


def budget_of_sources(sources: Sequence[str | Path]) -> pl.DataFrame:
    return budget(evidence.load_many(sources))


def write(table: pl.DataFrame, path: str | Path, config_hash: str | None = None) -> None:
    from specjoule.analysis import META_CONFIG_HASH
    from specjoule.analysis.derive import write_documented

    write_documented(
        table,
        path,
        {
            META_CONFIG_HASH: config_hash or "",
            "specjoule_variance_method": "nested random effects (board > run > engine_restart > seed > window) within "
            "each configuration, ANOVA / method-of-moments for unbalanced designs, on log "
            "values, pooled over a family's configurations (ADR 0084)",
        },
        VARIANCE_DOCS,
    )


def to_text(table: pl.DataFrame) -> str:
    lines = []
    for (family, metric), part in table.partition_by("family", "metric", as_dict=True, maintain_order=True).items():
        r0 = part.row(0, named=True)
        lines.append(
            f"{family} — {metric} (log scale; {r0['n_configurations']} configurations observed twice or more, "
            f"{r0['n_observations']} records)"
        )
        for r in part.iter_rows(named=True):
            if r["estimable"]:
                val = (
                    f"var {r['variance']:.3g} (CV {r['cv_percent']:.2f} %), share "
                    f"{'—' if r['share'] is None else format(r['share'], '.0%')}, df {r['df']}"
                )
            else:
                val = ""
            inc = f" [= {' + '.join(r['includes'])}]" if r["estimable"] and len(r["includes"]) > 1 else ""
            note = ("; " if val and r["note"] else "") + (r["note"] or "")
            lines.append(f"  {r['component']:<15}{val}{inc}{note}")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specjoule.analysis.variance", description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="+", help="records.parquet files or evidence folders; each one is a run")
    ap.add_argument("--out", type=Path, help="write the table as Parquet")
    args = ap.parse_args(argv)
    try:
        table = budget_of_sources(args.sources)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        write(table, args.out)
    sys.stdout.write(to_text(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
