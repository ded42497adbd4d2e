"""Rule `variance`: results/variance.parquet, the variance budget per campaign family (ADR 0084).
Thin: the work is in specjoule.analysis.variance."""

import sys
import time

import polars as pl

from specjoule.analysis import AnalysisError, evidence, script_logger, variance


def main(smk) -> None:  # smk: the Snakemake script object
    log = script_logger("variance", smk.log[0])
    t0 = time.perf_counter()
    records = pl.read_parquet(smk.input[0]).with_columns(pl.lit("results/records.parquet").alias("source"))
    try:
        runs = [records.with_columns(evidence.measure_key(records))]
        runs += [evidence.load(evidence.resolve(src)) for src in smk.params.evidence]
        table = variance.budget(pl.concat(runs, how="diagonal_relaxed"))
    except AnalysisError as exc:
        log.error("%s", exc)
        sys.exit(1)
    variance.write(table, smk.output[0], smk.params.config_hash)
    log.info(
        "variance budget of %d run(s): %d rows, %d families, %d estimable components in %.2f s\n%s",
        1 + len(smk.params.evidence),
        table.height,
        table["family"].n_unique(),
        table.filter(pl.col("estimable") & (pl.col("component") != variance.TOTAL)).height,
        time.perf_counter() - t0,
        variance.to_text(table),
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
