"""Time `snakemake -n` on generated grids (not a test: numbers for the notes and ADR 0002, 0140).

    .venv/bin/python benchmarks/bench_plan.py                       # 1,008 cells and 13,860 cells, sharing off and on
    .venv/bin/python benchmarks/bench_plan.py --tree /tmp/before    # this tree and another checkout, interleaved,
                                                                    # with the ratio of their CPU times per grid
    .venv/bin/python benchmarks/bench_plan.py --floor               # also Snakemake's own floor, interleaved: a
                                                                    # workflow of no job, and one of as many trivial
                                                                    # jobs as the grid has cells (ADR 0184, 0203)

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
CELLS = {"paper-13860": 13860, "paper-13860-shared": 13860, "small-1008": 1008}

# What Snakemake costs with none of the project's code: one rule, one output and a log per job, the jobs
# listed by an input function of the target rule (as aggregate lists the records). n=0: start-up alone.
FLOOR_SNAKEFILE = """
N = int(config["jobs"])


rule all:
    input:
        lambda wildcards: [f"out/{i}.txt" for i in range(N)],


rule one:
    output:
        "out/{i}.txt",
    log:
        "logs/{i}.log",
    shell:
        "touch {output} 2> {log}"
"""


def plan_once(tree: Path, cfg: Path, work: Path, snakefile: Path | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one `snakemake -n`: the tree's Snakefile over ``cfg``, or ``snakefile`` (the
    floor's, ``cfg`` then holds its --config words)."""
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    config = ["--config", *cfg.read_text().split()] if snakefile else ["--configfile", str(cfg)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [
            snakemake,
            "-s",
            str(snakefile or tree / "Snakefile"),
            "-d",
            str(work),
            "-n",
            "--quiet",
            "--cores",
            "1",
            *config,
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
    ap.add_argument("--floor", action="store_true", help="also time Snakemake alone: no job, and as many trivial jobs")
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
            floors = {}
            if a.floor:
                (Path(tmp) / "floor.smk").write_text(FLOOR_SNAKEFILE)
                for n in (0, CELLS[name]):
                    (Path(tmp) / f"floor-{n}.args").write_text(f"jobs={n}")
                    floors[f"floor, {n} trivial jobs"] = Path(tmp) / f"floor-{n}.args"
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
                for label, args in floors.items():
                    wall, c = plan_once(REPO, args, Path(tempfile.mkdtemp(dir=tmp)), Path(tmp) / "floor.smk")
                    print(
                        f"{name} [{label}]: snakemake -n wall {wall:.1f} s, cpu {c:.1f} s "
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
