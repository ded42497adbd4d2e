"""Rule `reproducibility`: results/reproducibility.parquet, this run against report.reference_evidence (ADR 0083).
Thin: the work is in specjoule.analysis.compare_evidence. No reference configured: an empty table."""

import sys
import time

import polars as pl

from specjoule.analysis import META_CONFIG_HASH, AnalysisError, compare_evidence, evidence, script_logger


def main(smk) -> None:  # smk: the Snakemake script object
    log = script_logger("reproducibility", smk.log[0])
    t0 = time.perf_counter()
    meta = {
        META_CONFIG_HASH: smk.params.config_hash,
        "specjoule_reference_evidence": smk.params.reference or "",
        "specjoule_interval_level": str(smk.params.level),
        "specjoule_tolerance": str(smk.params.tolerance),
    }
    if not smk.params.reference:
        compare_evidence.write(pl.DataFrame(schema=compare_evidence.compare_schema()), smk.output[0], meta)
        log.info("no report.reference_evidence configured: empty table")
        return
    records = pl.read_parquet(smk.input[0])
    try:
        # A = the reference, B = this run: shift = this run's ratio over the reference's, less one.
        table = compare_evidence.compare(
            evidence.load(evidence.resolve(smk.params.reference)),
            records.with_columns(evidence.measure_key(records)),
            level=smk.params.level,
            tolerance=smk.params.tolerance,
        )
    except AnalysisError as exc:
        log.error("%s", exc)
        sys.exit(1)
    compare_evidence.write(table, smk.output[0], meta)
    log.info(
        "%d configuration(s) matched in %s (%d reproduce, %d do not, %d not judged) in %.2f s\n%s",
        table.height,
        smk.params.reference,
        table.filter(pl.col("reproduces").eq(True)).height,
        table.filter(pl.col("reproduces").eq(False)).height,
        table["reproduces"].null_count(),
        time.perf_counter() - t0,
        compare_evidence.to_text(table, smk.params.reference, "this run"),
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
