"""Rule `report`: results/report.html, one self-contained file (specjoule.report.render)."""

import logging
import time
from pathlib import Path

import polars as pl

from specjoule.report import figures, render


def main(smk) -> None:  # smk: the Snakemake script object
    logging.basicConfig(
        filename=smk.log[0], level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True
    )
    log = logging.getLogger("report")
    t0 = time.perf_counter()
    # The specs' JSON text, inlined as it is (ADR 0237).
    manifest, specs = figures.read_manifest(smk.input.figures, as_text=True)
    summary_paths = list(smk.input.get("summary", []))
    variance_paths = list(smk.input.get("variance", []))
    crossover_paths = list(smk.input.get("crossover", []))
    inputs = render.ReportInputs(
        config=smk.params.config,
        config_hash=smk.params.config_hash,
        records=pl.read_parquet(smk.input.records),
        checks=pl.read_parquet(smk.input.checks),
        curves=pl.read_parquet(smk.input.curves),
        summary=pl.read_parquet(summary_paths[0]) if summary_paths else None,
        variance=pl.read_parquet(variance_paths[0]) if variance_paths else None,
        crossover=pl.read_parquet(crossover_paths[0]) if crossover_paths else None,
        manifest=manifest,
        specs=specs,
        paths={k: str(v) for k, v in smk.input.items()},
        javascript_bundle=figures.read_javascript_bundle(smk.input.figures, manifest),
        not_measured=tuple(smk.params.get("not_measured", [])),
    )
    html = render.render(inputs)
    render.write_atomic(smk.output[0], html)
    log.info(
        "wrote %s: %d bytes, %d of %d figures drawn, in %.2f s",
        smk.output[0],
        len(html.encode()),
        len(specs),
        len(manifest["figures"]),
        time.perf_counter() - t0,
    )
    log.info("open it with: xdg-open %s", Path(smk.output[0]).resolve())


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 — injected by Snakemake's script directive
