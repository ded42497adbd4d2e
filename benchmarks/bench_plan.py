"""Time `snakemake -n` on generated grids (not a test: numbers for the notes and ADR 0002).

    .venv/bin/python benchmarks/bench_plan.py            # 1,000-ish and 13,860 cells
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRIDS = {
    # 11 pairs × 6 schemes × 7 batch sizes × 5 corpora × 3 seeds × 2 graph modes
    "paper-13860": ["--pairs", "11"],
    # 1 pair × 6 schemes × 7 × 4 corpora × 3 seeds × 2 = 1,008 cells
    "small-1008": ["--pairs", "1", "--corpora", "4"],
}


def main() -> None:
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    for name, args in GRIDS.items():
        with tempfile.TemporaryDirectory() as work:
            cfg = Path(work) / "grid.yaml"
            cfg.write_text(subprocess.check_output([sys.executable, str(REPO / "benchmarks/gen_paper_grid.py"), *args], text=True))
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run([snakemake, "-s", str(REPO / "Snakefile"), "-n", "--quiet", "--cores", "1",
                            "--configfile", str(cfg)], cwd=work, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            load = os.getloadavg()[0]
            print(f"{name}: snakemake -n wall {wall:.1f} s, cpu {cpu:.1f} s (load avg {load:.2f})")


if __name__ == "__main__":
    main()
