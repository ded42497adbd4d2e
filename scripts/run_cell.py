"""Snakemake script for rule run_cell: look up the cell, run it, write its record (or nothing).

Thin on purpose: everything that measures lives in specjoule.runner.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821 - injected by Snakemake

from specjoule import cells, config, env, runner  # noqa: E402


def main(smk) -> int:
    cfg = config.validate(smk.config)
    cell = cells.build(cfg).get(str(smk.output.record))
    if smk.params.get("cell_id") not in (None, cell.cell_id):
        raise RuntimeError(f"cell id mismatch for {smk.output.record}: plan {smk.params.cell_id}, now {cell.cell_id}")
    try:
        runner.run_cell(cell, str(smk.output.record), str(smk.output.timeline), log_path=str(smk.log[0]),
                        config_hash=config.config_hash(cfg), git_commit=env.git_commit(),
                        version_param=smk.params.get("version", cfg.get("version")),
                        server_url=smk.params.get("server_url"))
    except runner.CellInterrupted as exc:
        return 128 + exc.signum
    return 0


if __name__ == "__main__":
    sys.exit(main(snakemake))  # noqa: F821
