"""Device time: how long each job held its device, and how much of that was inside energy windows (ADR 0038).

One row per engine launch (``engine_instance``: one job, one device lease, one engine start) and a total.
``held_s`` is the launch's last ``device_held_s`` — lease to its last record — so it leaves out the engine
teardown after that record and any time queued before the lease; ``other_s`` is the rest of the held time
(idle-power measurement, prompt pools, drains and cool-downs between cells, counter reads).

    python -m specjoule.analysis.accounting results/records.parquet
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from specjoule.analysis import aggregate

_SECONDS = ("held_s", "engine_start_s", "warmup_s", "windows_s", "other_s")
# warmups_skipped: cells of the launch that followed a window of the same configuration (ADR 0188);
# compile_cache_warm: its start found its compiled graphs in the campaign's cache (ADR 0189). Null in older records.
_SCHEMA = {
    "engine_instance": pl.String,
    "engine": pl.String,
    "device": pl.String,
    "cells": pl.Int64,
    **dict.fromkeys(_SECONDS, pl.Float64),
    "window_share": pl.Float64,
    "warmups_skipped": pl.Int64,
    "compile_cache_warm": pl.Boolean,
}
ACCOUNT_COLUMNS = tuple(_SCHEMA)


def device_time(records: pl.DataFrame) -> pl.DataFrame:
    """Per engine launch and in total (last row, ``engine_instance`` = "total"). Launches whose records
    predate ``device_held_s`` have null held_s, other_s and window_share, and are left out of the total's
    held time and share (the total's ``cells`` counts only launches with a held time)."""
    if "engine_instance" in records.columns:
        records = records.filter(pl.col("engine_instance").is_not_null())  # no launch identity: nothing to account
    if records.height == 0 or "engine_instance" not in records.columns:
        return pl.DataFrame(schema=_SCHEMA)
    held = pl.col("device_held_s") if "device_held_s" in records.columns else pl.lit(None, pl.Float64)
    skipped = pl.col("warmup_skipped") if "warmup_skipped" in records.columns else pl.lit(None, pl.Boolean)
    cache = pl.col("compile_cache_warm") if "compile_cache_warm" in records.columns else pl.lit(None, pl.Boolean)
    per = (
        records.with_columns(
            _held=held.cast(pl.Float64),
            _device=aggregate.device_key(),
            _skipped=skipped.cast(pl.Int64),
            _cache=cache.cast(pl.Boolean),
        )
        .group_by("engine_instance", maintain_order=True)
        .agg(
            engine=pl.col("engine").first(),
            device=pl.col("_device").first(),
            cells=pl.len().cast(pl.Int64),
            held_s=pl.col("_held").max(),
            engine_start_s=pl.col("engine_start_s").first(),
            warmup_s=pl.col("warmup_s").sum(),
            windows_s=pl.col("window_s").sum(),
            warmups_skipped=pl.when(pl.col("_skipped").is_null().all()).then(None).otherwise(pl.col("_skipped").sum()),
            compile_cache_warm=pl.col("_cache").first(),
            first_window=pl.col("window_start").min(),
        )
        .sort("first_window")
        .drop("first_window")
    )
    per = per.with_columns(
        other_s=pl.col("held_s") - pl.col("engine_start_s") - pl.col("warmup_s") - pl.col("windows_s"),
        window_share=pl.col("windows_s") / pl.col("held_s"),
    )
    known = per.filter(pl.col("held_s").is_not_null())
    total = {
        "engine_instance": "total",
        "engine": ",".join(sorted(set(per["engine"].drop_nulls()))),
        "device": ",".join(sorted(set(per["device"].drop_nulls()))),
        "cells": int(known["cells"].sum()) if known.height else None,
        **{c: float(known[c].sum()) if known.height else None for c in _SECONDS},
    }
    total["window_share"] = total["windows_s"] / total["held_s"] if total["held_s"] else None
    total["warmups_skipped"] = (
        int(per["warmups_skipped"].sum()) if per["warmups_skipped"].null_count() < per.height else None
    )
    total["compile_cache_warm"] = None  # a launch's property; the summary line counts them
    return pl.concat([per.select(ACCOUNT_COLUMNS).cast(_SCHEMA), pl.DataFrame([total], schema=_SCHEMA)])


def summary_line(account: pl.DataFrame) -> str | None:
    """One sentence for the report: held vs windows over the launches that recorded their held time."""
    if account.height < 2:
        return None
    t = account.row(account.height - 1, named=True)
    launches = account.height - 1
    if t["held_s"] is None or not t["held_s"]:
        return f"not recorded: the records of these {launches} engine launch(es) predate device_held_s"
    per = account.head(launches)
    missing = per["held_s"].null_count()
    cache = per["compile_cache_warm"].drop_nulls()
    return (
        f"{t['held_s']:.0f} s held by {launches - missing} engine launch(es) (lease to last record), "
        f"{t['windows_s']:.0f} s of it inside energy windows ({100 * t['window_share']:.1f} %), "
        f"{t['engine_start_s']:.0f} s in engine starts"
        + (f" ({int(cache.sum())} of {cache.len()} from a warm compile cache)" if cache.len() else "")
        + (
            f"; {t['warmups_skipped']} cell(s) without a warm-up of their own (ADR 0188)"
            if t["warmups_skipped"]
            else ""
        )
        + (f"; {missing} launch(es) without device_held_s left out" if missing else "")
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m specjoule.analysis.accounting RECORDS.parquet", file=sys.stderr)
        return 2
    account = device_time(pl.read_parquet(Path(args[0])))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, float_precision=3):
        print(account)
    line = summary_line(account)
    if line:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
