"""Analysis scope (ADR 0216): which planned cells the analysis rules read.

``planned`` (the default) waits for every planned record; a missing one is measured first. ``measured``
reads the planned records that exist, plans no measurement job and names every planned cell it left out,
so that a campaign cut mid-group (budget, time limit) can be analysed as it was pre-registered. Pure Python:
the workflow layer imports it on measurement-only nodes too (no polars there).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specjoule.cells import Cell

PLANNED = "planned"
MEASURED = "measured"


def split_measured(cells: Iterable[Cell], existing: Collection[str]) -> tuple[list[Cell], list[Cell]]:
    """(cells whose record exists, cells whose record does not), each in plan order."""
    present: list[Cell] = []
    absent: list[Cell] = []
    for c in cells:
        (present if c.record_path in existing else absent).append(c)
    return present, absent


def cell_label(cell: Cell) -> str:
    """``<campaign>/<cell>``: how a missing cell is named in logs, checks.md and the report."""
    return f"{cell.campaign_id}/{cell.name}"


def by_campaign(labels: Iterable[str]) -> dict[str, list[str]]:
    """``<campaign>/<cell>`` labels grouped by campaign, in the order given."""
    out: dict[str, list[str]] = {}
    for label in labels:
        campaign, _, cell = label.partition("/")
        out.setdefault(campaign, []).append(cell)
    return out


def not_measured_lines(labels: Sequence[str]) -> list[str]:
    """One line for the count, then one per campaign: its missing cells by name. Empty when none is missing."""
    if not labels:
        return []
    groups = by_campaign(labels)
    lines = [
        f"analysis scope measured: {len(labels)} planned cell(s) in {len(groups)} campaign(s) not measured, "
        "left out of the analysis (the verdict is about the measured cells only)"
    ]
    lines += [f"{campaign}: {len(cells)} not measured: {', '.join(cells)}" for campaign, cells in groups.items()]
    return lines
