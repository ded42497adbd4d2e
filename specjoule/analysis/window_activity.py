"""GPU activity over the thirds of a cell's window, and its drift, from the committed timeline tables (ADR 0227).

A window whose throughput changed part-way reads, in a record's window means, like a steady one: the mean
of 43, 36 and 22 % SM activity is as plain a number as 34 % held throughout. The analysis therefore reads each
record's timeline (``results/timelines/<campaign>/<cell>.parquet`` beside ``results/cells/<campaign>/<cell>.parquet``)
and adds :data:`ACTIVITY_COLUMNS` to ``records.parquet``; the ``window_drift`` check reads them. The runner and
the records do not change: this is a function of tables already written.

``python -m specjoule.analysis.window_activity FOLDER…`` prints the drift of every timeline under the folders
and its distribution: what a user reads to pre-register ``checks.window_drift_max``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import polars as pl

from specjoule import cells
from specjoule.analysis import packed

C = pl.col
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)

#: The signal, in order of preference: NVML's GPM SM activity where the GPU reports it (Hopper), else the
#: coarse NVML utilization (the share of the sample period in which any kernel ran).
SIGNALS: tuple[str, ...] = ("sm_active_pct", "gpu_util_pct")
#: Fewest in-window samples of one GPU for a drift: 10 per third (3 s at the meter's 10 Hz).
MIN_SAMPLES = 30
#: An idle GPU's relative drift is noise over a near-zero mean: below this mean (%) the drift is null.
MIN_MEAN_PCT = 1.0

ACTIVITY_DOCS: dict[str, str] = {
    "window_activity_signal": (
        "the timeline column the window's activity is read from: sm_active_pct (GPM SM activity) when any "
        "in-window sample has it, else gpu_util_pct (NVML utilization); null without in-window samples (no "
        "timeline, meter none)"
    ),
    "window_activity_samples": (
        "in-window samples of the signal (non-null) of the GPU with the fewest; the thirds and the drift need "
        f"at least {MIN_SAMPLES}"
    ),
    "window_activity_mean": "mean of the signal over the window's samples (%, mean over the cell's GPUs)",
    "window_activity_first_third": (
        "mean of the signal over the first n // 3 in-window samples in time order, n the GPU's sample count "
        "(%, mean over GPUs); null below the minimum samples"
    ),
    "window_activity_middle_third": "mean of the signal over the samples between the first and the last third (%)",
    "window_activity_last_third": "mean of the signal over the last n // 3 in-window samples (%)",
    "window_activity_drift": (
        "(last third - first third) / window mean: how far the GPU's activity moved within the window, relative; "
        f"negative = it lost activity as the window went. Null (never 0) with fewer than {MIN_SAMPLES} samples "
        f"or a window mean below {MIN_MEAN_PCT:g} % (ADR 0227)"
    ),
    "window_power_capped_share": (
        "share of the window's samples in which NVML gave the software power cap (clock-event reason 0x4) as a "
        "reason the clocks were held down; the largest over the cell's GPUs. Not a discard reason (the "
        "forbidden mask leaves it out): a board at its power limit is an operating condition; null without "
        "in-window samples (ADR 0230)"
    ),
    "window_sm_clock_median_mhz": (
        "median SM clock over the window's samples (MHz); the lowest over the cell's GPUs. Beside the power-cap "
        "share: how far the cap held the clock down (ADR 0230)"
    ),
}
ACTIVITY_COLUMNS: tuple[str, ...] = tuple(ACTIVITY_DOCS)
ACTIVITY_SCHEMA: dict[str, pl.DataType] = {
    "window_activity_signal": pl.String(),
    "window_activity_samples": pl.Int64(),
    **{c: pl.Float64() for c in ACTIVITY_COLUMNS[2:]},
}
#: NVML clocks-event reason: the software power cap (nvmlClocksEventReasonSwPowerCap).
SW_POWER_CAP = 0x4

_READ_SCHEMA = pl.Schema(
    {"gpu_index": pl.Int32, "t_monotonic": pl.Float64, "in_window": pl.Boolean}
    | dict.fromkeys(SIGNALS, pl.Float64)
    | {"throttle_reasons": pl.Int64, "sm_clock_mhz": pl.Int64}
)
_KEY = "_timeline"
_PACKED = Path(cells.TIMELINES_DIR).name + packed.SUFFIX


def timeline_of(record_path: str | os.PathLike) -> Path | None:
    """The timeline the runner wrote beside a record (``…/cells/<campaign>/<cell>.parquet`` →
    ``…/timelines/<campaign>/<cell>.parquet``); None for a record outside that layout."""
    p = Path(record_path)
    if p.parent.parent.name != Path(cells.CELLS_DIR).name:
        return None
    return p.parent.parent.parent / Path(cells.TIMELINES_DIR).name / p.parent.name / p.name


def activity(samples: pl.LazyFrame, key: str = _KEY) -> pl.LazyFrame:
    """One row per ``key`` (a timeline) with :data:`ACTIVITY_COLUMNS`, from its timeline rows (``gpu_index``,
    ``t_monotonic``, ``in_window`` and the signals). Per GPU, then the mean over GPUs: ranks of a tensor-parallel
    cell sample at their own instants, so the thirds are taken of each GPU's series, not of interleaved rows."""
    has_sm = C(SIGNALS[0]).is_not_null().any().over(key)
    inside = samples.filter(C("in_window").fill_null(False))
    clocks = (
        inside.group_by(key, "gpu_index")
        .agg(
            ((C("throttle_reasons") & SW_POWER_CAP) > 0).drop_nulls().mean().alias("_capped"),
            C("sm_clock_mhz").median().alias("_clock"),
        )
        .group_by(key)
        .agg(
            C("_capped").max().alias("window_power_capped_share"),
            C("_clock").min().cast(pl.Float64).alias("window_sm_clock_median_mhz"),
        )
    )
    w = (
        inside.with_columns(
            pl.when(has_sm).then(C(SIGNALS[0])).otherwise(C(SIGNALS[1])).alias("_v"),
            pl.when(has_sm).then(pl.lit(SIGNALS[0])).otherwise(pl.lit(SIGNALS[1])).alias("_signal"),
        )
        .drop_nulls("_v")
        .sort(key, "gpu_index", "t_monotonic")
    )
    gpu = [key, "gpu_index"]
    i, n = pl.int_range(pl.len()).over(gpu), pl.len().over(gpu)
    part = pl.when(i < n // 3).then(0).when(i >= n - n // 3).then(2).otherwise(1)
    per_gpu = (
        w.with_columns(part.alias("_part"))
        .group_by(gpu)
        .agg(
            C("_signal").first(),
            pl.len().alias("_n"),
            C("_v").mean().alias("_mean"),
            *(C("_v").filter(C("_part") == k).mean().alias(f"_t{k}") for k in range(3)),
        )
    )
    per_cell = per_gpu.group_by(key).agg(
        C("_signal").first().alias("window_activity_signal"),
        C("_n").min().cast(pl.Int64).alias("window_activity_samples"),
        C("_mean").mean().alias("window_activity_mean"),
        *(C(f"_t{k}").mean().alias(f"_t{k}") for k in range(3)),
    )
    enough = C("window_activity_samples") >= MIN_SAMPLES
    first, middle, last = (pl.when(enough).then(C(f"_t{k}")) for k in range(3))
    mean = C("window_activity_mean")
    return per_cell.select(
        key,
        "window_activity_signal",
        "window_activity_samples",
        "window_activity_mean",
        first.alias("window_activity_first_third"),
        middle.alias("window_activity_middle_third"),
        last.alias("window_activity_last_third"),
        pl.when(enough & (mean >= MIN_MEAN_PCT)).then((C("_t2") - C("_t0")) / mean).alias("window_activity_drift"),
    ).join(clocks, on=key, how="left")


def _scan(paths: Sequence[Path]) -> pl.LazyFrame:
    # Timelines written before the GPM columns (issue 18) lack sm_active_pct: inserted null, gpu_util_pct then used.
    return packed.scan(paths, _READ_SCHEMA, _KEY, extra_columns="ignore")


def _present(timeline: Path) -> bool:
    return timeline.is_file() or packed.locate(timeline) is not None


def of_timelines(paths: Sequence[str | os.PathLike]) -> pl.DataFrame:
    """:data:`ACTIVITY_COLUMNS` per timeline file (column ``timeline_path``); a file with no in-window sample
    gets a row of nulls."""
    files = [Path(p) for p in paths]
    keys = pl.DataFrame({_KEY: [str(p) for p in files]}, schema={_KEY: pl.String})
    found = activity(_scan(files)).collect() if files else pl.DataFrame(schema={_KEY: pl.String, **ACTIVITY_SCHEMA})
    return keys.join(found, on=_KEY, how="left").cast(ACTIVITY_SCHEMA).rename({_KEY: "timeline_path"})  # type: ignore[arg-type]


def of_records(record_paths: Sequence[str]) -> pl.DataFrame:
    """:data:`ACTIVITY_COLUMNS` per record path (column ``record_path``), from the timeline beside each record;
    null where there is none (a record copied without it, or outside the pipeline's layout)."""
    pairs = [(r, timeline_of(r)) for r in record_paths]
    present = [(r, t) for r, t in pairs if t is not None and _present(t)]
    by_timeline = of_timelines([t for _, t in present])
    link = pl.DataFrame(
        {"record_path": [r for r, _ in present], "timeline_path": [str(t) for _, t in present]},
        schema={"record_path": pl.String, "timeline_path": pl.String},
    )
    rows = link.join(by_timeline, on="timeline_path", how="left").drop("timeline_path")
    keys = pl.DataFrame({"record_path": list(record_paths)}, schema={"record_path": pl.String})
    return keys.join(rows, on="record_path", how="left")


def with_null_activity(df: Frame) -> Frame:
    """``df`` with every activity column it lacks added as null (records read without their timelines)."""
    have = df.collect_schema().names()
    return df.with_columns(pl.lit(None, t).alias(c) for c, t in ACTIVITY_SCHEMA.items() if c not in have)


# ----------------------------------------------------------------------------------------------
# the distribution over committed windows: what a threshold is chosen from


def distribution(folders: Sequence[str | os.PathLike]) -> pl.DataFrame:
    """Every timeline under ``folders`` (``**/timelines/*/*.parquet``, and the members of each packed
    ``**/timelines.parquet``) with its drift, most negative first; a timeline reached twice (an evidence folder's
    ``marked/`` view links to its results) counts once."""
    files = {Path(os.path.relpath(p.resolve())) for f in folders for p in Path(f).glob("**/timelines/*/*.parquet")}
    packs = {Path(os.path.relpath(p.resolve())) for f in folders for p in Path(f).glob(f"**/{_PACKED}")}
    paths = sorted(files | {m for pack in packs if packed.is_packed(pack) for m in packed.members(pack)})
    return of_timelines(paths).sort("window_activity_drift", nulls_last=True)


def summary_lines(table: pl.DataFrame, top: int = 5) -> list[str]:
    d = table.drop_nulls("window_activity_drift")
    lines = [f"{table.height} timelines, {d.height} with a drift (≥ {MIN_SAMPLES} samples, mean ≥ {MIN_MEAN_PCT:g} %)"]
    signals: list[str] = d["window_activity_signal"].unique().sort().to_list()
    for signal in signals:
        a = d.filter(C("window_activity_signal") == signal)["window_activity_drift"].abs()
        qs = ", ".join(f"p{int(q * 100)} {a.quantile(q, 'nearest'):.3f}" for q in (0.5, 0.9, 0.95, 0.99))
        lines.append(f"  {signal}: n {a.len()}; |drift| {qs}, max {max(a.to_list()):.3f}")
    size = d["window_activity_drift"].abs()
    lines.append(f"  |drift| above 0.2 / 0.3 / 0.5: {' / '.join(str((size > x).sum()) for x in (0.2, 0.3, 0.5))}")
    lines.append("  largest |drift|:")
    for r in d.sort(C("window_activity_drift").abs(), descending=True).head(top).iter_rows(named=True):
        lines.append(
            f"    {r['window_activity_drift']:+.3f}  thirds {r['window_activity_first_third']:.1f} / "
            f"{r['window_activity_middle_third']:.1f} / {r['window_activity_last_third']:.1f} % "
            f"({r['window_activity_signal']})  {r['timeline_path']}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specjoule.analysis.window_activity", description=__doc__)
    ap.add_argument("folders", nargs="+", help="evidence or results folders (their **/timelines/*/*.parquet)")
    ap.add_argument("--top", type=int, default=5, help="windows listed with the largest |drift|")
    args = ap.parse_args(argv)
    missing = [f for f in args.folders if not Path(f).is_dir()]
    if missing:
        print(f"not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(distribution(args.folders), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
