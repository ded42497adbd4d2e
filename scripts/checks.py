"""Rule `checks`: pre-registered discard checks → results/checks.parquet + results/checks.md.
Thin: the checks are in specjoule.analysis.checks. A failing check does not fail this rule — it is
a result; derive is the step that refuses."""

import time

import polars as pl

from specjoule import scope
from specjoule.analysis import (
    META_CONFIG_HASH,
    checks,
    config_hash_of,
    script_logger,
    write_parquet_atomic,
    write_text_atomic,
)


def main(smk) -> None:  # smk: the Snakemake script object
    log = script_logger("checks", smk.log[0])
    t0 = time.perf_counter()
    thresholds = checks.Thresholds.from_config(smk.params.checks, smk.params.report)
    records_hash = config_hash_of(smk.input[0])
    if records_hash != smk.params.config_hash:
        log.warning(
            "records.parquet was aggregated under config %s, checks run under %s", records_hash, smk.params.config_hash
        )
    records = pl.read_parquet(smk.input[0])
    if "roofline" in smk.input.keys():  # the model_residual check reads the roofline predictions (ADR 0102)
        from specjoule.analysis import roofline

        records = roofline.attach_for_checks(records, pl.read_parquet(smk.input.roofline))
    result = checks.run_checks(records, thresholds, smk.params.config_hash)
    write_parquet_atomic(result, smk.output.table, {META_CONFIG_HASH: smk.params.config_hash})
    markdown = checks.to_markdown(result, thresholds, smk.params.config_hash)
    missing = scope.not_measured_lines(list(smk.params.get("not_measured", [])))
    if missing:  # measured scope (ADR 0216): the planned cells these checks did not see
        markdown += "\n## Not measured\n\n" + "".join(f"- {line}\n" for line in missing)
    write_text_atomic(markdown, smk.output.markdown)
    counts = result.group_by("status").len().sort("status").iter_rows()
    log.info(
        "%d check rows over %d campaigns (%s) in %.2f s",
        result.height,
        records["campaign_id"].n_unique(),
        ", ".join(f"{n} {s}" for s, n in counts),
        time.perf_counter() - t0,
    )
    for r in result.filter(pl.col("status").is_in([checks.FAIL, checks.FLAG])).head(50).iter_rows(named=True):
        log.info("%s %s %s: %s", r["status"].upper(), r["check"], r["campaign_id"], r["detail"])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
