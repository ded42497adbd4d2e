"""Does a measurement reproduce? Each configuration of one evidence source against another (ADR 0083).

    python -m specjoule.analysis.compare_evidence A B [--level 0.95] [--tolerance 0.05] [--out table.parquet]

A and B are evidence sources (``specjoule.analysis.evidence``): folders holding cell records, or
records files. Speculative configurations are matched on the measured parameters (``MEASURED_KEY``:
engine and its version, torch, models, method, k, acceptance mechanism and rates, batch, corpus,
graphs, workload shape, device and GPU model, prefix caching); over the seeds, windows and engine
replicates each side holds, each side's energy ratio has its own interval (``specjoule.analysis.spread``). The
shift is B's ratio over A's, less one; its interval combines the two sides' resample distributions
(independent runs). A configuration *reproduces* when the shift is within ``tolerance`` or its
interval contains 0; without an interval (one replicate unit on a side) only the tolerance can
judge, and the row says so. Differences that do not prevent a match are listed per row: the board,
the effective engine configuration (model paths compared by file name), prompt pools of the seeds
both sides ran, driver, CUDA, pipeline commit; a configuration whose engine configuration or prompt
pool differs is shown but not judged.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from specjoule import axes
from specjoule.analysis import AnalysisError, evidence, spread

C = pl.col

DEFAULT_TOLERANCE = 0.05
ENERGY = spread.Metric("energy_ratio", "mj_per_committed_token", "baseline_window_mj_per_committed_token")
MJ = spread.Metric("mj_per_committed_token", "mj_per_committed_token")
BASE_MJ = spread.Metric("baseline_mj_per_committed_token", "baseline_window_mj_per_committed_token")
# A record's round (a baseline's step) split by the GPU's busy fraction (ADR 0258): the part the GPU ran kernels and
# the part it waited.
BUSY_MS = C("round_time_ms") * C("gpu_busy_fraction")
IDLE_MS = C("round_time_ms") - BUSY_MS
# Each window's temperatures a record carries, as compare-evidence says them (ADR 0083 addenda 3 and 4): the column, its
# word in the text line and its format; each side gives the mean over its points and over their baselines.
TEMPERATURES = (("max_temperature_c", "maximum", ".0f"), ("mean_temperature_c", "mean", ".1f"))
# What a row shows of each side.
SHOWN = (
    "engine",
    "method",
    "k",
    "acceptance_kind",
    "configured_L",
    "batch_size",
    "corpus",
    "workload_kind",
    "prompt_len",
    "output_len",
)

COMPARE_COLUMNS: tuple[str, ...] = (
    "measure_key",
    *SHOWN,
    "cell_name_a",
    "cell_name_b",
    "campaigns_a",
    "campaigns_b",
    "same_cell_id",
    "gpus_a",
    "gpus_b",
    "seeds_a",
    "seeds_b",
    "interval_level_a",
    "interval_level_b",
    "n_a",
    "n_b",
    "energy_ratio_a",
    "energy_ratio_a_ci_low",
    "energy_ratio_a_ci_high",
    "energy_ratio_b",
    "energy_ratio_b_ci_low",
    "energy_ratio_b_ci_high",
    "shift",
    "shift_ci_low",
    "shift_ci_high",
    "mj_per_committed_token_a",
    "mj_per_committed_token_b",
    "baseline_mj_a",
    "baseline_mj_b",
    "baseline_shift",
    "host_speed_a",
    "host_speed_b",
    "host_speed_ratio",
    "round_time_ms_a",
    "round_time_ms_b",
    "round_shift",
    "mean_power_w_a",
    "mean_power_w_b",
    "power_shift",
    "gpu_busy_a",
    "gpu_busy_b",
    "busy_ms_a",
    "busy_ms_b",
    "busy_shift",
    "idle_ms_a",
    "idle_ms_b",
    "baseline_idle_ms_a",
    "baseline_idle_ms_b",
    *(f"{pre}{col}_{side}" for col, _, _ in TEMPERATURES for pre in ("", "baseline_") for side in "ab"),
    "differences",
    "comparable",
    "reproduces",
    "basis",
)


def _side(records: pl.DataFrame, level: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per measured configuration of one source: its interval summary and its descriptive columns."""
    points = spread.configurations(spread.point_frame(records))
    if not points.height:
        return pl.DataFrame(), pl.DataFrame()
    summary = spread.summarize(points, ["measure_key"], [ENERGY, MJ, BASE_MJ], level=level)
    # The paired baselines' wait per step and temperature: a ratio's shift is the point's over its baseline's
    # (ADR 0258; ADR 0083 addendum 3).
    baseline_idle = (
        records.filter(spread.is_measured(records), C("role").is_in(list(axes.BASELINE_ROLES)))
        .group_by("campaign_id")
        .agg(
            IDLE_MS.mean().alias("baseline_idle_ms"),
            *(C(col).mean().alias(f"baseline_{col}") for col, _, _ in TEMPERATURES),
        )
    )
    info = (
        points.join(baseline_idle, on="campaign_id", how="left")
        .sort("campaign_id", "seed", "window_index", "engine_replicate")
        .group_by("measure_key", maintain_order=True)
        .agg(
            *(C(c).first() for c in SHOWN),
            C("cell_name").first(),
            C("campaign_id").unique().sort().alias("campaigns"),
            C("cell_id").filter(C("window_index") == 0).unique().sort().alias("cell_ids"),
            C("device_key").unique().sort().alias("gpus"),
            C("seed").unique().sort().alias("seeds"),
            C("engine_config").first(),
            C("pair_cross_gpu").fill_null(False).any().alias("crossed"),
            pl.struct("seed", "corpus_pool_hash").unique().alias("pools"),
            C("host_speed_mops").median().alias("host_speed"),
            C("round_time_ms").mean().alias("round_ms"),
            C("mean_power_w").mean().alias("power_w"),
            C("gpu_busy_fraction").mean().alias("gpu_busy"),
            BUSY_MS.mean().alias("busy_ms"),
            IDLE_MS.mean().alias("idle_ms"),
            C("baseline_idle_ms").mean(),
            *(C(c).mean() for col, _, _ in TEMPERATURES for c in (col, f"baseline_{col}")),
            C("host_cpu_signature").drop_nulls().unique().sort().alias("host_cpus"),
            *(C(c).unique().sort().alias(c) for c in evidence.REPORTED if c != "gpu_uuid"),
        )
    )
    return summary, info


def _shift_interval(a: tuple, b: tuple, level: float, rng: np.random.Generator) -> tuple[float | None, float | None]:
    """Interval of ratio_b / ratio_a − 1, the two sides resampled independently (they are separate runs)."""
    (na, da, _), (nb, db, _) = a, b
    if len(na) < 2 or len(nb) < 2:
        return None, None
    va, wa = spread.distribution(na, da, rng)
    vb, wb = spread.distribution(nb, db, rng)
    shift = (vb[None, :] / va[:, None] - 1).ravel()
    w = (wa[:, None] * wb[None, :]).ravel()
    alpha = (1 - level) / 2
    lo, hi = spread.weighted_interval(shift[None, :], w, alpha)
    return float(lo[0]), float(hi[0])


def _differences(ra: dict, rb: dict) -> tuple[list[str], list[str]]:
    """What differs between two matched configurations, and what of it forbids judging the shift."""
    out, blocking = [], []
    # A model path names the same files under another checkout (/tmp/work/vs/... vs /tmp/work/eng/...).
    ca = evidence.engine_config_of(ra["engine_config"], conditions=True)
    cb = evidence.engine_config_of(rb["engine_config"], conditions=True)
    if ca and cb:
        # a key one side never recorded was added to records later: not a difference (ADR 0181), but said. A
        # condition key is written only when it holds (ADR 0039): its absence is a value, compared as before.
        shared = (set(ca) & set(cb)) | ((set(ca) | set(cb)) & set(evidence.CONDITION_KEYS))
        diff = sorted(k for k in shared if ca.get(k) != cb.get(k))
        measured = [k for k in diff if k not in evidence.CONDITION_KEYS]
        if measured:
            blocking.append("engine configuration (" + ", ".join(measured) + ")")
        out += [
            f"engine_config.{k}: {json.dumps(ca.get(k))} vs {json.dumps(cb.get(k))}"
            + (" (a condition, ADR 0039)" if k in evidence.CONDITION_KEYS else "")
            for k in diff
        ]
        for side, mine, other in (("A", ca, cb), ("B", cb, ca)):
            missing = sorted(set(other) - set(mine) - set(evidence.CONDITION_KEYS))
            if missing:
                out.append(
                    f"not recorded by {side} (a field its records predate): "
                    + ", ".join(f"engine_config.{k} = {json.dumps(other[k])}" for k in missing)
                )
    pools_a = {p["seed"]: p["corpus_pool_hash"] for p in ra["pools"]}
    pools_b = {p["seed"]: p["corpus_pool_hash"] for p in rb["pools"]}
    for s in sorted(set(pools_a) & set(pools_b)):
        if pools_a[s] != pools_b[s]:
            blocking.append(f"prompt pool of seed {s}")
            out.append(f"prompt pool of seed {s}: {pools_a[s]} vs {pools_b[s]}")
    for side, r in (("A", ra), ("B", rb)):
        if r["crossed"]:
            out.append(f"{side}: a point and its baseline ran on different GPUs (same_gpu fails there)")
    if set(ra["gpus"]) != set(rb["gpus"]):
        out.append(f"GPU: {', '.join(ra['gpus'])} vs {', '.join(rb['gpus'])}")
    for c in (c for c in evidence.REPORTED if c != "gpu_uuid"):
        out += _reported(c, c, ra[c], rb[c], ", ")
    # The host CPU is said, never blocking: it explains a host-side shift, it does not change what was measured.
    out += _reported("host CPU", "host CPU signature", ra["host_cpus"], rb["host_cpus"], "; ")
    return out, blocking


def _reported(label: str, field: str, a: list, b: list, sep: str) -> list[str]:
    """A reported field's values on both sides, said where they differ; a side with none (nulls: a field its records
    predate) is said as not recorded rather than printed as "None"."""
    va, vb = [v for v in a if v is not None], [v for v in b if v is not None]
    if va and vb and va != vb:
        return [f"{label}: {sep.join(map(str, va))} vs {sep.join(map(str, vb))}"]
    return [
        f"not recorded by {side} (a field its records predate): {field}"
        for side, mine, other in (("A", va, vb), ("B", vb, va))
        if other and not mine
    ]


def compare(
    a: pl.DataFrame,
    b: pl.DataFrame,
    *,
    level: float = spread.BOOTSTRAP_LEVEL,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = spread.BOOTSTRAP_SEED,
) -> pl.DataFrame:
    """One row per speculative configuration measured in both (paired records with ``measure_key``,
    as ``evidence.load`` gives them); columns COMPARE_COLUMNS."""
    sa, ia = _side(a, level)
    sb, ib = _side(b, level)
    if not sa.height or not sb.height:
        return pl.DataFrame(schema=compare_schema())
    common = sorted(set(sa["measure_key"]) & set(sb["measure_key"]))
    pa = spread.configurations(spread.point_frame(a))
    pb = spread.configurations(spread.point_frame(b))
    units_a = spread.unit_arrays(pa, ["measure_key"], ENERGY)
    units_b = spread.unit_arrays(pb, ["measure_key"], ENERGY)
    rng = np.random.default_rng(seed)
    rows = []
    for key in common:
        s_a = sa.row(by_predicate=C("measure_key") == key, named=True)
        s_b = sb.row(by_predicate=C("measure_key") == key, named=True)
        r_a = ia.row(by_predicate=C("measure_key") == key, named=True)
        r_b = ib.row(by_predicate=C("measure_key") == key, named=True)
        ratio_a, ratio_b = s_a["energy_ratio_mean"], s_b["energy_ratio_mean"]
        shift = ratio_b / ratio_a - 1 if ratio_a and ratio_b is not None else None
        lo = hi = None
        if (key,) in units_a and (key,) in units_b:
            lo, hi = _shift_interval(units_a[(key,)], units_b[(key,)], level, rng)
        diffs, blocking = _differences(r_a, r_b)
        comparable = not blocking
        verdict, basis = _verdict(shift, lo, hi, tolerance, blocking, s_a["energy_ratio_n"], s_b["energy_ratio_n"])
        base_a, base_b = s_a["baseline_mj_per_committed_token_mean"], s_b["baseline_mj_per_committed_token_mean"]
        rows.append(
            {
                "measure_key": key,
                **{c: r_a[c] for c in SHOWN},
                "cell_name_a": r_a["cell_name"],
                "cell_name_b": r_b["cell_name"],
                "campaigns_a": r_a["campaigns"],
                "campaigns_b": r_b["campaigns"],
                "same_cell_id": r_a["cell_ids"] == r_b["cell_ids"],
                "gpus_a": r_a["gpus"],
                "gpus_b": r_b["gpus"],
                "seeds_a": r_a["seeds"],
                "seeds_b": r_b["seeds"],
                "interval_level_a": s_a["interval_level"],
                "interval_level_b": s_b["interval_level"],
                "n_a": s_a["energy_ratio_n"],
                "n_b": s_b["energy_ratio_n"],
                "energy_ratio_a": ratio_a,
                "energy_ratio_a_ci_low": s_a["energy_ratio_ci_low"],
                "energy_ratio_a_ci_high": s_a["energy_ratio_ci_high"],
                "energy_ratio_b": ratio_b,
                "energy_ratio_b_ci_low": s_b["energy_ratio_ci_low"],
                "energy_ratio_b_ci_high": s_b["energy_ratio_ci_high"],
                "shift": shift,
                "shift_ci_low": lo,
                "shift_ci_high": hi,
                "mj_per_committed_token_a": s_a["mj_per_committed_token_mean"],
                "mj_per_committed_token_b": s_b["mj_per_committed_token_mean"],
                "baseline_mj_a": base_a,
                "baseline_mj_b": base_b,
                "baseline_shift": _relative(base_b, base_a),
                "host_speed_a": r_a["host_speed"],
                "host_speed_b": r_b["host_speed"],
                "host_speed_ratio": _ratio(r_b["host_speed"], r_a["host_speed"]),
                "round_time_ms_a": r_a["round_ms"],
                "round_time_ms_b": r_b["round_ms"],
                "round_shift": _relative(r_b["round_ms"], r_a["round_ms"]),
                "mean_power_w_a": r_a["power_w"],
                "mean_power_w_b": r_b["power_w"],
                "power_shift": _relative(r_b["power_w"], r_a["power_w"]),
                "gpu_busy_a": r_a["gpu_busy"],
                "gpu_busy_b": r_b["gpu_busy"],
                "busy_ms_a": r_a["busy_ms"],
                "busy_ms_b": r_b["busy_ms"],
                "busy_shift": _relative(r_b["busy_ms"], r_a["busy_ms"]),
                "idle_ms_a": r_a["idle_ms"],
                "idle_ms_b": r_b["idle_ms"],
                "baseline_idle_ms_a": r_a["baseline_idle_ms"],
                "baseline_idle_ms_b": r_b["baseline_idle_ms"],
                **{
                    f"{pre}{col}_{side}": r[f"{pre}{col}"]
                    for col, _, _ in TEMPERATURES
                    for pre in ("", "baseline_")
                    for side, r in (("a", r_a), ("b", r_b))
                },
                "differences": diffs,
                "comparable": comparable,
                "reproduces": verdict,
                "basis": basis,
            }
        )
    return pl.DataFrame(rows, schema=compare_schema(), orient="row") if rows else pl.DataFrame(schema=compare_schema())


def _ratio(b: float | None, a: float | None) -> float | None:
    """b / a, null where either side is unknown (or a is 0)."""
    return b / a if a and b is not None else None


def _relative(b: float | None, a: float | None) -> float | None:
    """b / a − 1, null where either side is unknown."""
    ratio = _ratio(b, a)
    return None if ratio is None else ratio - 1


def _verdict(
    shift: float | None, lo: float | None, hi: float | None, tolerance: float, blocking: list[str], n_a: int, n_b: int
) -> tuple[bool | None, str]:
    if blocking:
        return None, "differs in " + "; ".join(blocking)
    if shift is None:
        return None, "no energy ratio on one side"
    within = abs(shift) <= tolerance
    if lo is None:
        return within, (
            f"tolerance only ({tolerance:g}): no interval of the shift (replicate units: {n_a} in A, {n_b} in B)"
        )
    inside = lo <= 0 <= hi
    return within or inside, f"tolerance {tolerance:g} or the shift's interval"


def compare_schema() -> dict[str, pl.DataType]:
    f, s, ls = pl.Float64, pl.String, pl.List(pl.String)
    types: dict[str, pl.DataType] = {
        "measure_key": s,
        "engine": s,
        "method": s,
        "k": pl.Int64,
        "acceptance_kind": s,
        "configured_L": f,
        "batch_size": pl.Int64,
        "corpus": s,
        "workload_kind": s,
        "prompt_len": pl.Int64,
        "output_len": pl.Int64,
        "cell_name_a": s,
        "cell_name_b": s,
        "campaigns_a": ls,
        "campaigns_b": ls,
        "same_cell_id": pl.Boolean,
        "gpus_a": ls,
        "gpus_b": ls,
        "seeds_a": pl.List(pl.Int64),
        "seeds_b": pl.List(pl.Int64),
        "interval_level_a": s,
        "interval_level_b": s,
        "n_a": pl.Int32,
        "n_b": pl.Int32,
        "differences": ls,
        "comparable": pl.Boolean,
        "reproduces": pl.Boolean,
        "basis": s,
    }
    return {c: types.get(c, f) for c in COMPARE_COLUMNS}


def compare_sources(a: str | Path, b: str | Path, **kw: Any) -> pl.DataFrame:
    return compare(evidence.load(a), evidence.load(b), **kw)


# ----------------------------------------------------------------------------------------------
# command line

COMPARE_DOCS: dict[str, str] = {
    "measure_key": "the measured parameters both sides share (evidence.MEASURED_KEY, joined with |)",
    "cell_name_a": "the point's name in A (without window suffix); cell_name_b likewise in B",
    "same_cell_id": "whether the window-0 cell ids agree too (they need not: the id hashes config text that measures nothing)",
    "interval_level_a": "the replicate level A's interval resamples (engine_replicate, seed, window; null: one unit)",
    "n_a": "replicate units with an energy ratio in A (n_b in B)",
    "energy_ratio_a": "A's energy ratio: ratio of the unit means of point and paired baseline (ADR 0081); _ci_low/_ci_high "
    "its bootstrap interval at the file's level, null with one unit",
    "shift": "energy_ratio_b / energy_ratio_a - 1",
    "shift_ci_low": "the shift's interval: the two sides' resample distributions combined, independently (separate runs); "
    "null unless both sides have two or more units",
    "baseline_shift": "baseline_mj_b / baseline_mj_a - 1 (the mean paired baseline of each side's points)",
    "host_speed_a": "median host_speed_mops of A's point records (the host's one-core speed, ADR 0254; null where the "
    "records predate it); host_speed_b likewise in B",
    "host_speed_ratio": "host_speed_b / host_speed_a: beside a shift of a host-side round, whether B's host was slower",
    "round_time_ms_a": "mean round_time_ms of A's point records (ms of window per engine step, ADR 0029); _b in B",
    "round_shift": "round_time_ms_b / round_time_ms_a - 1: a board or host that changes the time of a round, whether or "
    "not the energy ratio moves",
    "mean_power_w_a": "mean window power of A's point records (W); _b in B",
    "power_shift": "mean_power_w_b / mean_power_w_a - 1: with round_shift, whether a board spread its energy over "
    "another time (2026-12-07d: rounds longer at less power, ratios within 2 %)",
    "gpu_busy_a": "mean gpu_busy_fraction of A's point records (NVML utilization over the window, sampled at the "
    "timeline's rate: the share of time a kernel ran; null without a GPU meter); _b in B",
    "busy_ms_a": "mean of round_time_ms x gpu_busy_fraction over A's point records: the part of a round the GPU ran "
    "kernels (ADR 0258); _b in B",
    "busy_shift": "busy_ms_b / busy_ms_a - 1: the round's GPU part; beside round_shift, whether a board changed the GPU's "
    "work or the host's",
    "idle_ms_a": "mean of round_time_ms x (1 - gpu_busy_fraction) over A's point records: the part of a round the GPU "
    "waited, for the host or a launch (ADR 0258); _b in B",
    "baseline_idle_ms_a": "mean of round_time_ms x (1 - gpu_busy_fraction) over the opening and closing baselines of A's "
    "points' campaigns (round_time_ms is a baseline's step): the wait of the step the ratio divides by; _b in B",
    "max_temperature_c_a": "mean over A's point records of each window's maximum GPU temperature (°C; null without a GPU "
    "meter); _b in B. Beside power_shift: a board whose drafted windows ran hotter than its baselines draws more for the "
    "same work (2026-12-07g: 5.3-6.2 °C hotter at the same SM clock, 5.3-10.1 % more power; ADR 0083 addendum 3)",
    "baseline_max_temperature_c_a": "the same over the opening and closing baselines of A's points' campaigns; _b in B",
    "mean_temperature_c_a": "mean over A's point records of each window's mean GPU temperature (°C; null without a GPU "
    "meter and for records before 2026-12-07h, which carry the maximum only); _b in B (ADR 0083 addendum 4)",
    "baseline_mean_temperature_c_a": "the same over the opening and closing baselines of A's points' campaigns; _b in B",
    "differences": "what differs besides the measured parameters: GPU, driver, CUDA, commit, config, engine configuration "
    "(model paths by file name), prompt pools, host CPU signature (said, never blocking)",
    "comparable": "false when the engine configuration or a common seed's prompt pool differs: then not judged",
    "reproduces": "|shift| <= tolerance, or the shift's interval contains 0; null when not judged",
    "basis": "what the verdict rests on: the tolerance alone (no interval) or the tolerance and the shift's interval",
}


def write(table: pl.DataFrame, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    from specjoule.analysis.derive import write_documented

    write_documented(table, path, metadata or {}, COMPARE_DOCS)


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "—" if v is None else format(v, spec)


def _interval(lo: float | None, hi: float | None, spec: str = ".3f") -> str:
    return "no interval" if lo is None else f"[{format(lo, spec)}, {format(hi, spec)}]"


def to_text(table: pl.DataFrame, a: str, b: str) -> str:
    lines = [f"A = {a}", f"B = {b}", f"{table.height} speculative configuration(s) measured in both", ""]
    for r in table.sort("engine", "batch_size", "method", "configured_L", nulls_last=True).iter_rows(named=True):
        verdict = {True: "reproduces", False: "does NOT reproduce", None: "not judged"}[r["reproduces"]]
        lines += [
            f"{r['engine']} {r['method']} k={r['k']} L={_fmt(r['configured_L'], 'g')} ({r['acceptance_kind']}) "
            f"B={r['batch_size']} {r['corpus']} {r['workload_kind']}: {r['cell_name_a']} / {r['cell_name_b']}"
            f"{'' if r['same_cell_id'] else ' (cell ids differ; matched on measured parameters)'}",
            f"  A: ratio {_fmt(r['energy_ratio_a'])} {_interval(r['energy_ratio_a_ci_low'], r['energy_ratio_a_ci_high'])}"
            f" n={r['n_a']} ({r['interval_level_a'] or 'one unit'}) on {', '.join(g[:12] for g in r['gpus_a'])}",
            f"  B: ratio {_fmt(r['energy_ratio_b'])} {_interval(r['energy_ratio_b_ci_low'], r['energy_ratio_b_ci_high'])}"
            f" n={r['n_b']} ({r['interval_level_b'] or 'one unit'}) on {', '.join(g[:12] for g in r['gpus_b'])}",
            f"  shift B/A − 1 = {_fmt(r['shift'], '+.1%') if r['shift'] is not None else '—'} "
            f"{_interval(r['shift_ci_low'], r['shift_ci_high'], '+.1%')}; point mJ/token {_fmt(r['mj_per_committed_token_a'], '.1f')}"
            f" → {_fmt(r['mj_per_committed_token_b'], '.1f')}, baseline {_fmt(r['baseline_mj_a'], '.1f')} → "
            f"{_fmt(r['baseline_mj_b'], '.1f')} ({_fmt(r['baseline_shift'], '+.1%') if r['baseline_shift'] is not None else '—'})",
            f"  verdict: {verdict} — {r['basis']}",
        ]
        if r["round_shift"] is not None or r["power_shift"] is not None:
            lines.append(
                f"  round {_fmt(r['round_time_ms_a'], '.2f')} → {_fmt(r['round_time_ms_b'], '.2f')} ms"
                f" ({_fmt(r['round_shift'], '+.1%')}), power {_fmt(r['mean_power_w_a'], '.0f')} → "
                f"{_fmt(r['mean_power_w_b'], '.0f')} W ({_fmt(r['power_shift'], '+.1%')})"
            )
        for col, word, spec in TEMPERATURES:  # said only where both sides recorded it
            if r[f"{col}_a"] is not None and r[f"{col}_b"] is not None:
                lines.append(
                    f"  window {word} temperature {_fmt(r[f'{col}_a'], spec)} → {_fmt(r[f'{col}_b'], spec)} °C; its "
                    f"baselines' {_fmt(r[f'baseline_{col}_a'], spec)} → {_fmt(r[f'baseline_{col}_b'], spec)} °C"
                )
        if r["busy_shift"] is not None:
            lines.append(
                f"  GPU busy {_fmt(r['gpu_busy_a'], '.3f')} → {_fmt(r['gpu_busy_b'], '.3f')} of the window: busy part of a"
                f" round {_fmt(r['busy_ms_a'], '.2f')} → {_fmt(r['busy_ms_b'], '.2f')} ms ({_fmt(r['busy_shift'], '+.1%')}),"
                f" idle part {_fmt(r['idle_ms_a'], '.2f')} → {_fmt(r['idle_ms_b'], '.2f')} ms; the baseline step's idle part"
                f" {_fmt(r['baseline_idle_ms_a'], '.2f')} → {_fmt(r['baseline_idle_ms_b'], '.2f')} ms"
            )
        if r["host_speed_ratio"] is not None:
            lines.append(
                f"  host speed {_fmt(r['host_speed_a'], '.2f')} → {_fmt(r['host_speed_b'], '.2f')} M probe iterations/s"
                f" ({_fmt(r['host_speed_ratio'] - 1, '+.1%')})"
            )
        lines += [f"  differs: {d}" for d in r["differences"]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m specjoule.analysis.compare_evidence", description=__doc__.split("\n")[0]
    )
    ap.add_argument("a", help="evidence source A (folder of cell records, or a records file)")
    ap.add_argument("b", help="evidence source B")
    ap.add_argument("--level", type=float, default=spread.BOOTSTRAP_LEVEL, help="interval level, in (0, 1)")
    ap.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="relative shift that counts as reproduced whatever the interval",
    )
    ap.add_argument("--out", type=Path, help="write the table as Parquet")
    args = ap.parse_args(argv)
    if not 0 < args.level < 1:
        ap.error(f"--level = {args.level}: an interval level lies in (0, 1)")
    try:
        table = compare_sources(args.a, args.b, level=args.level, tolerance=args.tolerance)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        write(
            table, args.out, {"specjoule_interval_level": str(args.level), "specjoule_tolerance": str(args.tolerance)}
        )
    sys.stdout.write(to_text(table, args.a, args.b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
