"""Time figures + report over the analysis benchmark's tables (not a test: numbers for the notes).

    .venv/bin/python benchmarks/gen_records.py --out /tmp/specjoule-bench
    .venv/bin/python benchmarks/bench_report.py --records /tmp/specjoule-bench [--tree /tmp/before] [--repeat 2]

Runs aggregate + checks + derive once (benchmarks/bench_analysis.py's child), then, per repeat and per tree
(interleaved), a fresh process (the tree first on PYTHONPATH) that does what rules `figures` and `report` do: read the tables, build every
figure, export them (SVG, HTML; PNG for the one figure the rule asks it of), render the one-file report. Timelines
are left out (the benchmark's records have none; the figure says so). CPU time is reported beside wall time.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def child(tables: Path, out: Path) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    import polars as pl

    from specjoule import config as sj_config
    from specjoule.report import figures, render

    stages = {"import": time.perf_counter() - t0}
    cpu = {"import": time.process_time() - c0}
    cfg = json.loads((tables / "config.json").read_text())
    t, c = time.perf_counter(), time.process_time()
    # As rule `figures` does where the tree has it: the SVGs are drawn in a child process, started before the
    # tables are read (ADR 0237); its CPU is counted in cpu_s (cpu_children_s), not in the stages' CPU.
    drawer = figures.StaticDrawer() if hasattr(figures, "StaticDrawer") else None
    records = pl.read_parquet(tables / "records.parquet")
    curves = pl.read_parquet(tables / "curves.parquet")
    checks = pl.read_parquet(tables / "checks.parquet")
    summary = pl.read_parquet(tables / "curves_summary.parquet")
    timelines, note = figures.load_timelines([], records, checks)
    inputs = figures.FigureInputs.from_config(
        cfg, curves=curves, records=records, checks=checks, timelines=timelines, timeline_note=note, summary=summary
    )
    built = figures.build_all(inputs)
    stages["figures_build"], cpu["figures_build"] = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    # As rule `figures` runs it: the JavaScript bundle kept between runs where the tree keeps it (ADR 0204); the
    # first run of a tree compiles it (the printed runs show which).
    cache: dict[str, Any] = (
        {"bundle_cache": tables / "bundle-cache"}
        if "bundle_cache" in inspect.signature(figures.export).parameters
        else {}
    )
    if drawer is not None:
        cache["drawer"] = drawer
    figures.export(built, out / "figures", png=["energy_vs_acceptance"], log=lambda *a: None, **cache)
    if drawer is not None:
        drawer.close()
    stages["figures_export"], cpu["figures_export"] = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    # As rule `report` reads them where the tree can: the specs' JSON text, inlined as it is (ADR 0237).
    text = {"as_text": True} if "as_text" in inspect.signature(figures.read_manifest).parameters else {}
    manifest, specs = figures.read_manifest(out / "figures", **text)
    handed_over = {}  # what rule `report` reads from the figures rule's output; absent in trees before it existed
    if hasattr(figures, "read_javascript_bundle"):
        handed_over["javascript_bundle"] = figures.read_javascript_bundle(out / "figures", manifest)
    html = render.render(
        render.ReportInputs(
            config=cfg,
            config_hash=sj_config.config_hash(cfg),
            records=records,
            checks=checks,
            curves=curves,
            summary=summary,
            variance=None,
            manifest=manifest,
            specs=specs,
            paths={"records": str(tables / "records.parquet")},
            **handed_over,
        )
    )
    render.write_atomic(out / "report.html", html)
    stages["report"], cpu["report"] = time.perf_counter() - t, time.process_time() - c
    ru = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "stages_s": {k: round(v, 3) for k, v in stages.items()},
        "stages_cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "total_s": round(time.perf_counter() - t0, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime + kids.ru_utime + kids.ru_stime, 3),
        "cpu_children_s": round(kids.ru_utime + kids.ru_stime, 3),
        "html_bytes": len(html.encode()),
    }


def differing_files(a: Path, b: Path) -> tuple[int, list[str]]:
    """How many files two runs' outputs hold, and those that differ byte for byte (or exist in one only).
    figures.json is compared without its export_s entries' values (the seconds each export took), report.html
    without the time it was generated at."""

    def files(root: Path) -> dict[str, bytes]:
        out = {}
        for f in sorted(root.rglob("*")):
            if f.is_file():
                data = f.read_bytes()
                if f.name == "figures.json":
                    manifest = json.loads(data)
                    for entry in manifest.get("figures", []):
                        entry["export_s"] = sorted(entry.get("export_s", {}))  # which exports, not their seconds
                    data = json.dumps(manifest, indent=1).encode()
                if f.name == "report.html":
                    data = re.sub(
                        rb"generated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", b"generated (time)", data, count=1
                    )
                out[str(f.relative_to(root))] = data
        return out

    fa, fb = files(a), files(b)
    return len(fa), sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))


def tables_for(records: Path, work: Path) -> Path:
    """records.parquet, checks, curves and the seed summary, as bench_analysis.py's child writes them."""
    sys.path.insert(0, str(REPO))
    from benchmarks.gen_records import grid_config

    subprocess.run(
        [sys.executable, str(REPO / "benchmarks/bench_analysis.py"), "--records", str(records), "--child", str(work)],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    (work / "config.json").write_text(json.dumps(grid_config(11, False), default=str))
    return work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="/tmp/specjoule-bench", help="the --out of gen_records.py")
    ap.add_argument("--tree", action="append", default=[], help="another checkout to time beside this one")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--tables", help="a directory an earlier run's tables were kept in (made if absent): skips the analysis"
    )
    ap.add_argument(
        "--compare",
        action="store_true",
        help="compare every output file (figures, report) of each --tree with this tree's, run by run; fail if any differs",
    )
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(Path(a.child[0]), Path(a.child[1]))))
        return
    trees = [REPO, *(Path(t).resolve() for t in a.tree)]
    cpu: dict[Path, list[float]] = {t: [] for t in trees}
    wall: dict[Path, list[float]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory() as tmp:
        if a.tables and (Path(a.tables) / "config.json").is_file():
            tables = Path(a.tables)
        else:
            Path(a.tables or tmp).mkdir(parents=True, exist_ok=True)
            tables = tables_for(Path(a.records), Path(a.tables or tmp))
        differ = []
        for _ in range(a.repeat):
            outs = {}
            for tree in trees:
                out = outs[tree] = Path(tempfile.mkdtemp(dir=tmp))
                t = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, str(REPO / "benchmarks/bench_report.py"), "--child", str(tables), str(out)],
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=tree,
                    env={**os.environ, "PYTHONPATH": str(tree)},
                )
                run = json.loads(proc.stdout.strip().splitlines()[-1])
                cpu[tree].append(run["cpu_s"])
                wall[tree].append(time.perf_counter() - t)
                print(
                    f"[{tree}] figures + report wall {time.perf_counter() - t:.2f} s, cpu {run['cpu_s']:.2f} s, "
                    f"stages {run['stages_s']}, cpu by stage {run.get('stages_cpu_s')} (load avg {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
            if a.compare:
                for tree in trees[1:]:
                    n, bad = differing_files(outs[REPO], outs[tree])
                    print(f"outputs of {tree} against this tree: {n} files, {len(bad)} differ {bad}", flush=True)
                    differ += bad
    if differ:
        sys.exit(f"outputs differ: {sorted(set(differ))}")
    for tree in trees[1:]:
        base = statistics.median(cpu[REPO])
        print(
            f"cpu median this tree {base:.2f} s, {tree} {statistics.median(cpu[tree]):.2f} s, "
            f"ratio {base / statistics.median(cpu[tree]):.2f}; wall median this tree "
            f"{statistics.median(wall[REPO]):.2f} s, {tree} {statistics.median(wall[tree]):.2f} s, "
            f"ratio {statistics.median(wall[REPO]) / statistics.median(wall[tree]):.2f}"
        )


if __name__ == "__main__":
    main()
