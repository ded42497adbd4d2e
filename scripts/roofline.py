"""Rule `roofline`: the energy model of issue 18 (ADR 0102) → results/roofline.parquet (per cell: predicted
mJ per committed token, residual, verify / draft / idle split, modelled and measured op/B),
results/roofline_fit.parquet (per-GPU coefficients with bootstrap intervals), results/roofline_time.parquet
(per-pass overhead and slowdown), results/crossover.parquet, results/hardware.parquet.
Thin: the work is in specjoule.analysis.roofline."""

import time

import polars as pl

from specjoule import hardware
from specjoule.analysis import roofline, script_logger


def main(smk) -> None:  # smk: the Snakemake script object
    log = script_logger("roofline", smk.log[0])
    t0 = time.perf_counter()
    records = pl.read_parquet(smk.input.records)
    # The rule's inputs are the calibrations under results/hardware/ (specjoule.hardware.find_calibrations).
    calibrations = [{**hardware.load(p), "path": str(p)} for p in smk.input.calibrations]
    log.info(
        "%d calibration(s) in %s: %s",
        len(calibrations),
        "results/hardware",
        ", ".join(f"{c['gpu_uuid']} ({c['driver_version']})" for c in calibrations) or "none",
    )
    result = roofline.model_cells(
        records,
        roofline.models_lookup,
        calibrations,
        balance_fallback=smk.params.balance_fallback,
        drafters=roofline.configured_drafters(smk.params.drafter_config),
    )
    roofline.write_tables(result, dict(smk.output), smk.params.config_hash)
    cells = result.cells
    modelled = cells.filter(pl.col("model_status") == "modelled")
    log.info("%d of %d cells modelled in %.2f s", modelled.height, cells.height, time.perf_counter() - t0)
    reasons = (
        cells.filter(pl.col("model_status") != "modelled")
        .group_by("not_modelled_reason")
        .len()
        .sort("len", descending=True)
        .head(10)
    )
    for r in reasons.iter_rows(named=True):
        log.info("not modelled (%d cells): %s", r["len"], r["not_modelled_reason"])
    res = modelled["residual"].drop_nulls()
    if res.len():
        log.info(
            "residual (measured / predicted - 1): median %.3f, |max| %.3f over %d cells",
            res.median(),
            res.abs().max(),
            res.len(),
        )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
