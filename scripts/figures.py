"""Rule `figures`: results/figures/ (per figure .vl.json, .svg, interactive .html, .png where asked,
the HTMLs' JavaScript bundle for rule `report`, and figures.json) from the analysis tables. Thin: the figures live in specjoule.report.figures."""

import contextlib
import logging
import time

import polars as pl

from specjoule.report import figures


def main(smk) -> None:  # smk: the Snakemake script object
    logging.basicConfig(
        filename=smk.log[0], level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True
    )
    log = logging.getLogger("figures")
    # The SVGs are drawn in a child process beside the figures' specs; it starts V8 while the tables are read and
    # the figures built (ADR 0237). With one core (Snakemake's --cores 1) they are drawn here.
    with figures.StaticDrawer() if smk.threads > 1 else contextlib.nullcontext() as drawer:
        _build_and_export(smk, log, drawer)


def _build_and_export(smk, log: logging.Logger, drawer: figures.StaticDrawer | None) -> None:
    t0 = time.perf_counter()
    records = pl.read_parquet(smk.input.records)
    curves = pl.read_parquet(smk.input.curves)
    checks = pl.read_parquet(smk.input.checks)
    log.info("read %d records, %d curve points, %d check rows", records.height, curves.height, checks.height)
    timelines, note = figures.load_timelines(list(smk.params.timelines), records, checks)
    log.info("timelines: %d binned samples%s", timelines.height, f" ({note})" if note else "")
    summary_paths = list(smk.input.get("summary", []))
    summary = pl.read_parquet(summary_paths[0]) if summary_paths else None
    log.info(
        "summary: %s",
        f"{summary.height} rows from {summary_paths[0]}"
        if summary is not None
        else "none (figures draw replicate min-max, no interval)",
    )
    inputs = figures.FigureInputs.from_config(
        smk.params.config,
        curves=curves,
        records=records,
        checks=checks,
        timelines=timelines,
        timeline_note=note,
        summary=summary,
    )
    built = figures.build_all(inputs)
    log.info("built %d figures in %.2f s", len(built), time.perf_counter() - t0)
    t1 = time.perf_counter()
    # The offline JavaScript bundle is compiled once per vl-convert version and results tree (ADR 0204).
    manifest = figures.export(
        built,
        smk.output[0],
        png=list(smk.params.png),
        log=log.info,
        bundle_cache=figures.BUNDLE_CACHE_DIR,
        drawer=drawer,
    )
    drawn = sum(f["drawn"] for f in manifest["figures"])
    log.info(
        "exported %d drawn + %d one-line figures in %.2f s (total %.2f s)",
        drawn,
        len(built) - drawn,
        time.perf_counter() - t1,
        time.perf_counter() - t0,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
