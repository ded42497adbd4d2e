"""Rule `aggregate`: every cell record → results/records.parquet, paired with its baselines.
Thin: the work is in specjoule.analysis.aggregate."""

import sys
import time

from specjoule import scope
from specjoule.analysis import AnalysisError, aggregate, script_logger


def main(smk) -> None:  # smk: the Snakemake script object
    log = script_logger("aggregate", smk.log[0])
    t0 = time.perf_counter()
    for line in scope.not_measured_lines(list(smk.params.get("not_measured", []))):  # measured scope (ADR 0216)
        log.warning("%s", line)
    try:
        df = aggregate.aggregate(list(smk.params.records), cache=smk.params.cache, log=log.info)
    except AnalysisError as exc:
        log.error("%s", exc)
        sys.exit(1)
    aggregate.write(df, smk.output[0], smk.params.config_hash)
    unpaired = df.filter(df["opening_cell_name"].is_null()).height
    crossed = int(df["pair_cross_gpu"].sum() or 0)
    log.info(
        "%d records in %d campaigns → %s (config hash %s) in %.2f s; %d unpaired, %d paired across devices",
        df.height,
        df["campaign_id"].n_unique(),
        smk.output[0],
        smk.params.config_hash,
        time.perf_counter() - t0,
        unpaired,
        crossed,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
