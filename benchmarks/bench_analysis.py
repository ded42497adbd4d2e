"""Time aggregate + checks + derive (+ seed summary) over the records gen_records.py wrote.

    .venv/bin/python benchmarks/gen_records.py --out /tmp/specjoule-bench
    .venv/bin/python benchmarks/bench_analysis.py --records /tmp/specjoule-bench [--repeat 3] [--no-cache]

Each repeat runs in a fresh process (imports included, as a Snakemake `script:` job pays them),
first cold (no record cache: a fresh results/), then warm (the cache the cold run wrote, nothing
changed — what any config edit costs, since the config hash is a parameter of every analysis rule).
Each does exactly what the three rules do: read every cell Parquet, pair, write records.parquet; read
it, run every check, write checks.parquet and checks.md; read both, derive, summarise seeds, write
curves.parquet and curves_summary.parquet. Reported per stage, with CPU time and the load average,
because this machine is shared and wall time under load says little on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_run(records_root: Path, out: Path, cache: bool) -> dict:
    t0 = time.perf_counter()
    import polars as pl

    from specjoule.analysis import aggregate, checks, derive, write_parquet_atomic, write_text_atomic

    t_import = time.perf_counter() - t0
    paths = (records_root / "paths.txt").read_text().split()
    config_hash = (records_root / "config_hash").read_text().strip()
    stages = {"import": t_import}

    t = time.perf_counter()
    recs = aggregate.aggregate(paths, cache=out / "records-cache.parquet" if cache else None)
    aggregate.write(recs, out / "records.parquet", config_hash)
    stages["aggregate"] = time.perf_counter() - t

    t = time.perf_counter()
    recs = pl.read_parquet(out / "records.parquet")
    th = checks.Thresholds.from_config({"allow_failed_checks": True})
    result = checks.run_checks(recs, th, config_hash)
    write_parquet_atomic(result, out / "checks.parquet")
    write_text_atomic(checks.to_markdown(result, th, config_hash), out / "checks.md")
    stages["checks"] = time.perf_counter() - t

    t = time.perf_counter()
    recs = pl.read_parquet(out / "records.parquet")
    ck = pl.read_parquet(out / "checks.parquet")
    curves = derive.derive(recs, ck, allow_failed_checks=True)
    summary = derive.summarize_seeds(curves)
    derive.write(curves, summary, out / "curves.parquet", out / "curves_summary.parquet", config_hash)
    stages["derive"] = time.perf_counter() - t

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "records": recs.height,
        "campaigns": recs["campaign_id"].n_unique(),
        "check_rows": result.height,
        "failed_check_rows": result.filter(pl.col("status") == "fail").height,
        "curve_rows": curves.height,
        "summary_rows": summary.height,
        "stages_s": {k: round(v, 3) for k, v in stages.items()},
        "total_s": round(time.perf_counter() - t0, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
        "load_avg_1m": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="/tmp/specjoule-bench", help="the --out of gen_records.py")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-cache", action="store_true", help="aggregate without the record cache (cold only)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    root = Path(a.records)
    if a.child:
        print(json.dumps(one_run(root, Path(a.child), cache=not a.no_cache)))
        return
    if not (root / "paths.txt").exists():
        sys.exit(f"no records under {root}: run benchmarks/gen_records.py --out {root} first")
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory() as out:
            # cold: no cache yet (a fresh results/); warm: the cache the cold run left, no record changed
            # (what a config edit costs: the hash changes, every analysis rule re-runs).
            for mode in ("cold",) if a.no_cache else ("cold", "warm"):
                load_before = os.getloadavg()[0]
                t = time.perf_counter()
                cmd = [sys.executable, __file__, "--records", str(root), "--child", out] + (
                    ["--no-cache"] if a.no_cache else []
                )
                proc = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO)
                run = json.loads(proc.stdout) | {
                    "mode": mode,
                    "process_wall_s": round(time.perf_counter() - t, 3),
                    "load_avg_1m_before": load_before,
                }
                runs[mode].append(run)
                print(json.dumps(run), flush=True)
    for mode, rs in runs.items():
        if not rs:
            continue
        walls = sorted(r["process_wall_s"] for r in rs)
        cpus = sorted(r["cpu_s"] for r in rs)
        print(
            f"{mode}: {rs[0]['records']} records, {rs[0]['campaigns']} campaigns: aggregate + checks + derive "
            f"wall {walls[0]:.2f} s best / {walls[len(walls) // 2]:.2f} s median of {len(rs)}, "
            f"CPU {cpus[len(cpus) // 2]:.2f} s median (process incl. imports; {os.cpu_count()} cores, "
            f"load avg {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
