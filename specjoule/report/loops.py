"""Open loop beside matched concurrency (issue 19, item 5; ADR 0178).

At a fixed arrival rate a slower speculative arm keeps more requests in flight and so runs at a larger
batch: its lower energy per token is the batch's, not speculation's, and the ``batch_shape`` check fires.
A fixed number of concurrent clients removes that confound by construction. This module puts the two side
by side from the records and checks, per *family* (engine, model pair, corpus, CUDA-graph mode, lengths):
one table for the open-loop cells, one for the closed-loop (fixed-concurrency) cells of the same arms,
each arm's mean running requests, energy per committed token and ratio to its own campaign's baseline,
the checks that speak to the comparison, and whether the sign of each arm's ratio (saving or cost)
changes between the two. A side with no cells says "not measured" — with the workload that
pre-registers it where the config (or a named pre-registration) has one.

A function of tables (ADR 0030): ``loop_comparison(records, checks, config, preregistered)``;
``python -m specjoule.report.loops RECORDS [CHECKS] [--preregistered CONFIG]`` prints it as markdown.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import polars as pl

from specjoule import axes
from specjoule.report.text import fmt, markdown_table

C = pl.col
OPEN, CLOSED = "open_loop", "closed_loop"
SIDE_TITLES = {OPEN: "open loop (fixed arrival rate)", CLOSED: "matched concurrency (fixed clients)"}
# Cells sharing these ran the same model, lengths and engine: the arms can be compared across workloads.
# (a campaign's slice less the workload and the load, which differ between the sides, plus the lengths)
FAMILY_KEYS: tuple[str, ...] = (
    *(k for k in axes.SLICE_KEYS if k not in ("workload", "batch_size")),
    "prompt_len",
    "output_len",
)
ARM_KEYS: tuple[str, ...] = ("scheme", "acceptance_name")
# The checks that say whether a side's comparison stands: the batch-shape confound (open loop) and the
# steady state of the fixed-concurrency loop (ADR 0111).
LOOP_CHECKS: tuple[str, ...] = ("batch_shape", "steady_state")
COLUMNS = [
    "arm",
    "workload",
    "load",
    "cells",
    "mean running requests",
    "mJ/token",
    "baseline mJ/token",
    "ratio to baseline",
    "sign",
    "checks",
]


@dataclass
class Side:
    kind: str
    title: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per arm (baseline first)
    not_measured: str | None = None  # set when the side has no cells, saying why
    boards: tuple[str, ...] = ()  # "name (GPU-xxxxxxxx)" of every board its cells ran on

    @property
    def board_words(self) -> str:
        return f"on {', '.join(self.boards)}" if self.boards else "board not recorded"


@dataclass
class FamilyComparison:
    family: dict[str, Any]
    sides: dict[str, Side]
    signs: list[dict[str, Any]]  # per speculative arm: open ratio, matched ratio, whether the sign changes

    @property
    def label(self) -> str:
        f = self.family
        return (
            f"{f.get('engine')} · {f.get('model_pair')} · {f.get('corpus')} · CUDA graphs "
            f"{'on' if f.get('cuda_graphs') else 'off'} · {f.get('prompt_len')}/{f.get('output_len')} tokens"
        )


def _arm(row: dict[str, Any]) -> str:
    return row["scheme"] if not row.get("acceptance_name") else f"{row['scheme']} · {row['acceptance_name']}"


def _load(row: dict[str, Any]) -> str:
    if row.get("workload_kind") == OPEN:
        return f"{row['request_rate']:g} req/s" if row.get("request_rate") is not None else "rate not recorded"
    return f"{row['concurrency']} clients" if row.get("concurrency") is not None else "concurrency not recorded"


def _sign(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    return "saving" if ratio < 1 else ("cost" if ratio > 1 else "even")


def _check_words(campaign: str, cells: list[str], checks: pl.DataFrame | None) -> str:
    """The loop checks that name any of these cells (campaign checks list their cells), worst first."""
    if checks is None or checks.height == 0:
        return "no checks"
    rows = checks.filter((C("campaign_id") == campaign) & C("check").is_in(list(LOOP_CHECKS))).to_dicts()
    out = []
    for r in rows:
        names = r.get("cell_names") or []
        if names and not set(names) & set(cells):
            continue
        out.append(f"{r['check']} {r['status']}")
    return ", ".join(sorted(set(out))) or "not checked"


def _baseline_words(words: str, baseline: bool) -> str:
    # batch_shape judges the arms against the baseline: a baseline no check names is its reference, not unchecked.
    return "reference" if baseline and words == "not checked" else words


def _with_columns(records: pl.DataFrame) -> pl.DataFrame:
    need = {
        "request_rate": pl.Float64,
        "concurrency": pl.Int64,
        "mean_running_requests": pl.Float64,
        "baseline_mj_per_committed_token": pl.Float64,
        "acceptance_name": pl.String,
        "status": pl.String,
        "prompt_len": pl.Int64,
        "output_len": pl.Int64,
        "corpus": pl.String,
        "cuda_graphs": pl.Boolean,
    }
    return records.with_columns(pl.lit(None, t).alias(c) for c, t in need.items() if c not in records.columns)


def _boards(cells: pl.DataFrame) -> tuple[str, ...]:
    """Each board a side's cells ran on: its name and the UUID's first block (a record names both)."""
    if "gpu_uuid" not in cells.columns:
        return ()
    names = cells["gpu_names"] if "gpu_names" in cells.columns else pl.Series([None] * cells.height)
    out = set()
    for uuid, name in zip(cells["gpu_uuid"].to_list(), names.to_list()):
        if uuid:
            first = (name[0] if name else None) if isinstance(name, list) else name
            out.add(f"{first} ({uuid[:12]})" if first else uuid[:12])
    return tuple(sorted(out))


def _side_rows(cells: pl.DataFrame, checks: pl.DataFrame | None) -> list[dict[str, Any]]:
    rows = []
    keys = [*ARM_KEYS, "workload", "campaign_id"]
    cells = cells.with_columns(
        pl.when(C("role") == "point")
        .then(C("mj_per_committed_token") / C("baseline_mj_per_committed_token"))
        .alias("_ratio")
    )
    for _key, g in cells.group_by(keys, maintain_order=True):
        first = g.row(0, named=True)
        baseline = first["scheme"] == "baseline" or g["role"].is_in(["opening_baseline", "closing_baseline"]).all()
        ratio = None if baseline else cast("float | None", g["_ratio"].drop_nulls().mean())
        rows.append(
            {
                "arm": "baseline" if baseline else _arm(first),
                "workload": first["workload"],
                "load": _load(first),
                "campaign_id": first["campaign_id"],
                "cells": g.height,
                "mean_running_requests": g["mean_running_requests"].drop_nulls().mean(),
                "mj_per_token": g["mj_per_committed_token"].drop_nulls().mean(),
                "baseline_mj_per_token": g["baseline_mj_per_committed_token"].drop_nulls().mean(),
                "ratio": ratio,
                "sign": "—" if baseline else _sign(ratio),
                "checks": _baseline_words(
                    _check_words(first["campaign_id"], g["cell_name"].to_list(), checks), baseline
                ),
                "_arm_key": None if baseline else (first["scheme"], first.get("acceptance_name")),
            }
        )
    rows.sort(key=lambda r: (r["arm"] != "baseline", r["arm"], r["workload"]))
    return rows


def preregistered_workloads(config: dict[str, Any] | None) -> dict[str, list[str]]:
    """Workload names per loop kind that a config registers (its ``workloads`` section)."""
    out: dict[str, list[str]] = {OPEN: [], CLOSED: []}
    for name, wl in ((config or {}).get("workloads") or {}).items():
        if isinstance(wl, dict) and wl.get("kind") in out:
            out[wl["kind"]].append(name)
    return out


def _not_measured(kind: str, config: dict[str, Any] | None, preregistered: str | None) -> str:
    own = preregistered_workloads(config)[kind]
    if own:
        return f"not measured (pre-registered in this config: workload {', '.join(own)})"
    if preregistered:
        return f"not measured (pre-registered: {preregistered})"
    return "not measured (no cell and no workload of this kind in the config)"


def loop_comparison(
    records: pl.DataFrame,
    checks: pl.DataFrame | None = None,
    config: dict[str, Any] | None = None,
    preregistered: str | None = None,
) -> list[FamilyComparison]:
    """Per family with any open- or closed-loop cell: both sides (or "not measured") and the sign per arm.
    ``preregistered``: a config path that registers the missing side, named in its "not measured" line."""
    if records.height == 0 or "workload_kind" not in records.columns:
        return []
    r = _with_columns(records).filter(
        C("workload_kind").is_in([OPEN, CLOSED]) & (C("status").is_null() | (C("status") == "measured"))
    )
    out = []
    for fam, g in r.sort("campaign_id", "cell_name").group_by(list(FAMILY_KEYS), maintain_order=True):
        family = dict(zip(FAMILY_KEYS, fam))
        sides = {}
        for kind in (OPEN, CLOSED):
            cells = g.filter(C("workload_kind") == kind)
            side = Side(kind, SIDE_TITLES[kind])
            if cells.height:
                side.rows = _side_rows(cells, checks)
                side.boards = _boards(cells)
            else:
                side.not_measured = _not_measured(kind, config, preregistered)
            sides[kind] = side
        out.append(FamilyComparison(family, sides, _signs(sides)))
    return out


def _signs(sides: dict[str, Side]) -> list[dict[str, Any]]:
    """Per speculative arm: its ratio on each side (mean over that side's workloads) and whether the sign
    of the saving changes from the open loop to matched concurrency."""
    by_arm: dict[tuple, dict[str, list[float]]] = {}
    labels: dict[tuple, str] = {}
    for kind, side in sides.items():
        for row in side.rows:
            if row["_arm_key"] is None:
                continue
            labels[row["_arm_key"]] = row["arm"]
            slot = by_arm.setdefault(row["_arm_key"], {OPEN: [], CLOSED: []})
            if row["ratio"] is not None:
                slot[kind].append(row["ratio"])
    # Each ratio is to its own campaign's baseline, so the sign reads across boards; the mJ/token do not.
    # (a side whose records name no board is not known to be apart)
    measured = [side.boards for side in sides.values() if side.boards]
    apart = len(measured) == 2 and measured[0] != measured[1]
    out = []
    for key, ratios in by_arm.items():
        o = sum(ratios[OPEN]) / len(ratios[OPEN]) if ratios[OPEN] else None
        m = sum(ratios[CLOSED]) / len(ratios[CLOSED]) if ratios[CLOSED] else None
        if o is None or m is None:
            verdict = f"cannot tell: {'open loop' if o is None else 'matched concurrency'} not measured"
        elif _sign(o) == _sign(m):
            verdict = f"same sign ({_sign(o)} both ways)"
        else:
            verdict = f"sign changes: {_sign(o)} in the open loop, {_sign(m)} at matched concurrency"
        if apart and o is not None and m is not None:
            verdict += " (the sides ran on different boards: each ratio is to its own campaign's baseline)"
        out.append({"arm": labels[key], "open_ratio": o, "matched_ratio": m, "verdict": verdict})
    return sorted(out, key=lambda r: r["arm"])


def side_table_rows(side: Side) -> list[list[str]]:
    """The side's rows as the report prints them (COLUMNS order)."""
    return [
        [
            r["arm"],
            r["workload"],
            r["load"],
            str(r["cells"]),
            fmt(r["mean_running_requests"], 3),
            fmt(r["mj_per_token"]),
            fmt(r["baseline_mj_per_token"]),
            "—" if r["ratio"] is None else f"{r['ratio']:.3f}×",
            r["sign"],
            r["checks"],
        ]
        for r in side.rows
    ]


def sign_lines(comp: FamilyComparison) -> list[str]:
    def ratio(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}×"

    return [
        f"{s['arm']}: open loop {ratio(s['open_ratio'])}, matched concurrency {ratio(s['matched_ratio'])} — "
        f"{s['verdict']}"
        for s in comp.signs
    ]


def to_markdown(comparisons: list[FamilyComparison]) -> str:
    if not comparisons:
        return "No open-loop or closed-loop cell in the records.\n"
    lines = []
    for comp in comparisons:
        lines.append(f"### {comp.label}\n")
        for side in comp.sides.values():
            lines.append(f"**{side.title}**\n")
            if side.not_measured:
                lines.append(f"{side.not_measured}\n")
                continue
            lines.append(f"{side.board_words}\n")
            lines += markdown_table(COLUMNS, side_table_rows(side))
            lines.append("")
        lines.append("**Sign of each arm's ratio, open loop vs matched concurrency**\n")
        lines += [f"- {s}" for s in sign_lines(comp)] or ["- no speculative arm"]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", help="records.parquet (aggregated: paired with the baselines)")
    ap.add_argument("checks", nargs="?", help="checks.parquet of the same campaigns")
    ap.add_argument("--config", help="the config that ran them (names its pre-registered workloads)")
    ap.add_argument("--preregistered", help="a config that pre-registers the missing side")
    ap.add_argument(
        "--also",
        nargs=2,
        action="append",
        default=[],
        metavar=("RECORDS", "CHECKS"),
        help="another run's records and checks (e.g. the other side, from another evidence folder)",
    )
    a = ap.parse_args(argv)
    named = [("records", a.records), ("checks", a.checks), ("--config", a.config), ("--preregistered", a.preregistered)]
    named += [(f"--also {i + 1}", f) for i, pair in enumerate(a.also) for f in pair]
    missing = [
        f"{what} = {path}" for what, path in named if path and what != "--preregistered" and not Path(path).is_file()
    ]
    if missing:
        ap.exit(2, f"loops: no such file: {'; '.join(missing)}\n")
    config = None
    if a.config:
        import yaml

        config = yaml.safe_load(Path(a.config).read_text())
    records = pl.concat([pl.read_parquet(a.records), *(pl.read_parquet(r) for r, _ in a.also)], how="diagonal_relaxed")
    check_files = ([a.checks] if a.checks else []) + [c for _, c in a.also]
    checks = pl.concat([pl.read_parquet(c) for c in check_files], how="diagonal_relaxed") if check_files else None
    print(to_markdown(loop_comparison(records, checks, config, a.preregistered)), end="")


def section(records: pl.DataFrame, checks: pl.DataFrame | None, config: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The report's section: per family both sides as tables (or their "not measured" line) and the sign
    lines. Empty when no campaign ran an open or closed loop."""
    out = []
    for comp in loop_comparison(records, checks, config):
        out.append(
            {
                "label": comp.label,
                "sides": [
                    {
                        "kind": s.kind,
                        "title": s.title,
                        "not_measured": s.not_measured,
                        "table": None
                        if s.not_measured
                        else {
                            "id": f"loops-{s.kind}",
                            "title": s.title,
                            "columns": COLUMNS,
                            "rows": side_table_rows(s),
                            "row_classes": [],
                            "note": "ratio = the arm's mJ per committed token / its own campaign's baseline; "
                            f"mean running requests sampled in the window; {s.board_words}",
                        },
                    }
                    for s in comp.sides.values()
                ],
                "signs": sign_lines(comp),
            }
        )
    return out


if __name__ == "__main__":
    main()
