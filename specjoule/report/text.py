"""How the report writes a value and a table as text: one formatter for every section (render, loops, roofline)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN never belongs in a report; say so rather than print it
            return "NaN"
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v, digits) for v in value) or "—"
    return str(value)


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A pipe table's lines: header, rule, one line per row (cells already text)."""
    return [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
