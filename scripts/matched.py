"""Rule `matched_latency`: results/matched_latency.parquet. Thin: the work is in specjoule.analysis.matched."""

import time

import polars as pl

from specjoule.analysis import matched, script_logger


def main(smk) -> None:  # smk: the Snakemake script object
    log = script_logger("matched_latency", smk.log[0])
    t0 = time.perf_counter()
    table = matched.matched_latency(
        pl.read_parquet(smk.input.curves), pl.read_parquet(smk.input.records), list(smk.params.tbt_targets_ms)
    )
    matched.write(table, smk.output[0], smk.params.config_hash)
    met = table.filter(pl.col("energy_ratio_at_target").is_not_null()).height
    log.info(
        "%d arm × target rows (%d with an energy ratio at matched TBT) for targets %s ms in %.2f s",
        table.height,
        met,
        list(smk.params.tbt_targets_ms),
        time.perf_counter() - t0,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
