"""tools/device/README.md's table of pending device rows names configs and families that exist.

The table is what a session plans from: a family renamed or a config moved would leave it pointing at nothing, and
`campaign.sh` would find out only on the GPU machine (an unknown family stops it, exit 2, after the machine start).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "device"))
import family_targets  # noqa: E402  (what campaign.sh resolves a family with on the device)


def _glance_rows() -> list[list[str]]:
    text = (REPO / "tools/device/README.md").read_text()
    start = text.index("**At a glance")
    block = text[start : text.index("\n\n", text.index("| issue |", start))]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines() if line.startswith("| ")]
    assert rows[0][:3] == ["issue", "config", "family"]
    return rows[1:]


def test_every_pending_row_names_a_family_its_config_plans():
    rows = _glance_rows()
    assert len(rows) >= 10
    checked = 0
    for row in rows:
        issue, cfg_cell, family_cell = row[0], row[1], row[2]
        assert re.fullmatch(r"\d+", issue), row
        (cfg,) = re.findall(r"`(config/[^`]+\.yaml)`", cfg_cell)
        families = re.findall(r"`([a-z0-9_.-]+-cg1(?:-r\d+)?)`", family_cell)
        if not families:
            assert issue == "23" and "two sessions" in family_cell  # the TP row names its families in its section
            continue
        # an unknown family is the KeyError that stops campaign.sh (exit 2) on the GPU machine
        assert list(family_targets.resolve(REPO / cfg, families)) == families, cfg
        checked += len(families)
    assert checked >= 12
