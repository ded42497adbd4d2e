"""Regenerate tests/data/golden_cells.json and golden_config_hashes.json from every shipped config.

Only for a change of identity that is intended and said so in the commit: the golden files are what
tests/test_golden_cells.py holds every refactor and new axis to (issue 22)."""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specjoule import cells, config  # noqa: E402


def shipped_configs() -> list[str]:
    found = sorted(glob.glob("config/*.yaml")) + sorted(glob.glob("validation/**/*.yaml", recursive=True))
    return [p for p in found if not p.endswith("schema.yaml") and "corpora" not in p]


def plan_rows(cfg: dict) -> dict[str, list]:
    table = cells.build(cfg)
    groups = {c.record_path: g.group_id for g in table.engine_groups().values() for c in g.cells}
    return {
        c.record_path: [c.cell_id, c.engine_key, c.run_order_index, c.family_id, groups[c.record_path]]
        for c in table.cells
    }


def main() -> None:
    import os

    os.chdir(REPO)
    out, hashes = {}, {}
    for p in shipped_configs():
        cfg = config.load(p)
        out[p] = plan_rows(cfg)
        hashes[p] = config.config_hash(cfg)
    lines = ["{"]
    for i, (p, rows) in enumerate(out.items()):  # one line per cell: diffs stay readable
        lines.append(f" {json.dumps(p)}: {{")
        items = list(rows.items())
        lines += [
            f"  {json.dumps(rp)}: {json.dumps(v)}" + ("," if j < len(items) - 1 else "")
            for j, (rp, v) in enumerate(items)
        ]
        lines.append(" }" + ("," if i < len(out) - 1 else ""))
    lines.append("}")
    (REPO / "tests/data/golden_cells.json").write_text("\n".join(lines) + "\n")
    (REPO / "tests/data/golden_config_hashes.json").write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
