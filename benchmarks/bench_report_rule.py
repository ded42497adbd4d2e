"""Time rule `report`'s work in its own process, as the pipeline runs it (not a test: numbers for the notes).

    .venv/bin/python benchmarks/bench_report_rule.py --tables DIR --figures DIR [--repeat 3]

DIR of --tables: records, checks, curves and curves_summary Parquet and config.json (bench_report.py's tables);
--figures: a results/figures directory written by figures.export over them. Alternates, in fresh processes, the
report inlining the JavaScript bundle the figures rule wrote (`handed`) and compiling its own (`compiled`).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def child(tables: Path, figdir: Path, mode: str) -> str:
    t0 = time.perf_counter()
    import polars as pl

    from specjoule import config as sj_config
    from specjoule.report import figures, render

    cfg = json.loads((tables / "config.json").read_text())
    manifest, specs = figures.read_manifest(figdir)
    bundle = figures.read_javascript_bundle(figdir, manifest) if mode == "handed" else None
    if mode == "handed" and bundle is None:
        raise SystemExit(f"{figdir} holds no bundle for this vl-convert")
    html = render.render(
        render.ReportInputs(
            config=cfg,
            config_hash=sj_config.config_hash(cfg),
            records=pl.read_parquet(tables / "records.parquet"),
            checks=pl.read_parquet(tables / "checks.parquet"),
            curves=pl.read_parquet(tables / "curves.parquet"),
            summary=pl.read_parquet(tables / "curves_summary.parquet"),
            manifest=manifest,
            specs=specs,
            javascript_bundle=bundle,
        )
    )
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return f"report rule ({mode}): wall {time.perf_counter() - t0:.2f} s, cpu {ru.ru_utime + ru.ru_stime:.2f} s, {len(html)} chars"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", required=True)
    ap.add_argument("--figures", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=["handed", "compiled"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(child(Path(a.tables), Path(a.figures), a.child))
        return
    for _ in range(a.repeat):
        for mode in ("compiled", "handed"):
            subprocess.run(
                [sys.executable, __file__, "--tables", a.tables, "--figures", a.figures, "--child", mode], check=True
            )


if __name__ == "__main__":
    main()
