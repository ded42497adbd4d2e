"""Time `snakemake -n` on generated grids (not a test: numbers for the notes and ADR 0002, 0140).

    .venv/bin/python benchmarks/bench_plan.py                       # 1,008 cells and 13,860 cells, sharing off and on
    .venv/bin/python benchmarks/bench_plan.py --tree /tmp/before    # this tree and another checkout, interleaved,
                                                                    # with the ratio of their CPU times per grid

Each run is a fresh `snakemake -n` in an empty working directory (parse, cell table, DAG). CPU time (user +
system of the child) is reported beside wall time, with the load average: this machine is shared, and the ratio
of two trees' CPU times measured in one run says more than either wall time alone.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRIDS = {
    # 11 pairs × 6 schemes × 7 batch sizes × 5 corpora × 3 seeds × 2 graph modes
    "paper-13860": ["--pairs", "11"],
    "paper-13860-shared": ["--pairs", "11", "--share-engines"],
    # 1 pair × 6 schemes × 7 × 4 corpora × 3 seeds × 2 = 1,008 cells
    "small-1008": ["--pairs", "1", "--corpora", "4"],
}


def plan_once(tree: Path, cfg: Path, work: Path) -> tuple[float, float]:
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [
            snakemake,
            "-s",
            str(tree / "Snakefile"),
            "-d",
            str(work),
            "-n",
            "--quiet",
            "--cores",
            "1",
            "--configfile",
            str(cfg),
        ],
        cwd=work,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], help="another checkout to time beside this one")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--grid", action="append", choices=sorted(GRIDS), help="default: all")
    a = ap.parse_args()
    trees = [REPO, *(Path(t).resolve() for t in a.tree)]
    for name in a.grid or GRIDS:
        cpu: dict[Path, list[float]] = {t: [] for t in trees}
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "grid.yaml"
            cfg.write_text(
                subprocess.check_output(
                    [sys.executable, str(REPO / "benchmarks/gen_paper_grid.py"), *GRIDS[name]], text=True
                )
            )
            for _ in range(a.repeat):
                for tree in trees:  # interleaved: the machine's load drifts alike for every tree
                    work = Path(tempfile.mkdtemp(dir=tmp))
                    wall, c = plan_once(tree, cfg, work)
                    cpu[tree].append(c)
                    print(
                        f"{name} [{tree}]: snakemake -n wall {wall:.1f} s, cpu {c:.1f} s "
                        f"(load avg {os.getloadavg()[0]:.2f})",
                        flush=True,
                    )
        if len(trees) > 1:
            base = statistics.median(cpu[REPO])
            for tree in trees[1:]:
                print(
                    f"{name}: cpu median this tree {base:.1f} s, {tree} {statistics.median(cpu[tree]):.1f} s, "
                    f"ratio {base / statistics.median(cpu[tree]):.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
