"""Rule `derive`: results/curves.parquet + results/curves_summary.parquet (configurations over their replicates).
Thin: the work is in specjoule.analysis.derive. Refuses (rule fails, naming campaign and check)
when a campaign failed a check, unless checks.allow_failed_checks."""

import sys
import time

import polars as pl

from specjoule.analysis import AnalysisError, derive, script_logger


def main(smk) -> None:  # smk: the Snakemake script object
    log = script_logger("derive", smk.log[0])
    t0 = time.perf_counter()
    records = pl.read_parquet(smk.input.records)
    checks = pl.read_parquet(smk.input.checks)
    try:
        curves = derive.derive(
            records, checks, allow_failed_checks=smk.params.allow_failed_checks, level=smk.params.interval_level
        )
    except AnalysisError as exc:
        log.error("%s", exc)
        sys.exit(1)
    if "roofline" in smk.input.keys():  # predicted energy, residual and the split, appended (ADR 0102)
        from specjoule.analysis import roofline

        curves = roofline.attach_to_curves(curves, pl.read_parquet(smk.input.roofline))
    summary = derive.summarize(curves, level=smk.params.interval_level)
    derive.write(
        curves, summary, smk.output.curves, smk.output.summary, smk.params.config_hash, level=smk.params.interval_level
    )
    refused = curves.filter(pl.col("energy_refused_reason").is_not_null())
    if refused.height:
        log.warning(
            "energy columns left null on %d of %d rows: %s",
            refused.height,
            curves.height,
            refused["energy_refused_reason"][0],
        )
    marked = curves.filter(pl.col("failed_checks").list.len() > 0).height
    log.info(
        "%d curve rows (%d marked with failed checks), %d summary rows (%s) in %.2f s",
        curves.height,
        marked,
        summary.height,
        ", ".join(
            f"{n} by {lv or 'one unit'}"
            for lv, n in summary.group_by("interval_level").len().sort("interval_level").iter_rows()
        ),
        time.perf_counter() - t0,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
