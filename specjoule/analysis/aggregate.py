"""Every cell record in one table, each cell paired with its campaign's baselines (ADR 0020, 0021).

The pairing key is the whole comparison identity — campaign, engine, model pair, batch size,
corpus, seed, graph mode and workload — not just the campaign id: a record that claims a campaign
but differs from its baseline in any of these is left unpaired, and the ``baseline_present`` check
names it. The GPU is *not* part of the key: a pair across GPUs is still made, marked
``pair_cross_gpu``, and failed by the ``same_gpu`` check, so the violation is visible rather than
silently dropped.

The baseline value a point is compared with is the mean of its opening and closing baselines
(the opening alone when the campaign has no closing baseline); their disagreement is the
``baseline_drift`` check. A side measured in several windows (``windows`` > 1: one baseline record
per window) contributes the mean of its windows, so the baseline stays the mean of the two side
means and each side's n is carried (ADR 0080). Records with ``status == "unsupported"`` (the engine
refused the cell) are kept, never paired and never a baseline.

Each record also gets its GPU's activity over the thirds of its window and their drift (``TIMELINE_COLUMNS``,
ADR 0227), read from the timeline the runner wrote beside it; null where there is none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl
import pyarrow as pa

from specjoule import axes, records
from specjoule.analysis import META_CONFIG_HASH, AnalysisError, packed, window_activity, write_parquet_atomic
from specjoule.analysis.spread import columns_of, is_measured

# Roles and pairing keys are declared with the axes (ADR 0160); re-exported for the analysis modules.
ROLE_OPENING, ROLE_CLOSING, ROLE_POINT = axes.ROLE_OPENING, axes.ROLE_CLOSING, axes.ROLE_POINT
# A record pairs with the baselines of its own campaign: the campaign id and every campaign-scope axis.
PAIR_KEYS: tuple[str, ...] = axes.PAIR_KEYS
# Metrics carried from each baseline onto every row: opening_*, closing_* and their mean baseline_*.
BASELINE_METRICS: tuple[str, ...] = (
    "mj_per_committed_token",
    "tpot_mean_s",
    "mean_running_requests",
    "tokens_per_s",
    "s_per_committed_token",
    "round_time_ms",
)

# Columns aggregate adds after the record columns (documented here once; tests check them).
PAIRING_COLUMNS: tuple[str, ...] = (
    "record_path",
    "s_per_committed_token",
    "device_key",
    "opening_cell_name",
    "closing_cell_name",
    "opening_device_key",
    "closing_device_key",
    *(f"{side}_{m}" for side in ("opening", "closing") for m in BASELINE_METRICS),
    *(f"baseline_{m}" for m in BASELINE_METRICS),
    "baseline_n",
    "pair_cross_gpu",
    # Windows (ADR 0080): baseline records per side and their names in window order. opening_cell_name
    # is the first window's; a flag on any window concerns every ratio built on the side.
    "opening_n",
    "closing_n",
    "opening_cell_names",
    "closing_cell_names",
)

# Columns aggregate adds after the pairing columns, from each record's timeline (ADR 0227; documented in
# window_activity.ACTIVITY_DOCS): the GPU's activity over the window's thirds and its drift.
TIMELINE_COLUMNS: tuple[str, ...] = window_activity.ACTIVITY_COLUMNS

META_RECORD_VERSION = "specjoule_record_version"

LATENCY_COLUMNS: tuple[str, ...] = (
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_p50_s",
    "tpot_p99_s",
)
# SGLang offline records written before the timestamp fix (ADR 0016): their TTFT/TPOT came from
# meta_info decode_throughput, which is wrong for non-streamed requests (TPOT ~1e-8 s at L = 6).
UNTRUSTED_LATENCY = pl.col("engine").eq("sglang") & pl.col("latency_source").eq("request_metrics")
UNTRUSTED_LATENCY_SOURCE = "request_metrics (nulled: SGLang decode_throughput, ADR 0016)"

# From a table of no batches: ``Schema.empty_table()`` builds its columns through ``pa.array`` of Python lists, whose
# first call imports pandas (0.2 s of CPU in every analysis script's process, which uses no pandas).
RECORD_POLARS_SCHEMA: pl.Schema = pl.from_arrow(pa.Table.from_batches([], schema=records.RECORD_SCHEMA)).schema  # type: ignore[union-attr]


def scan_records(paths: Sequence[str | Path]) -> pl.LazyFrame:
    """Lazily scan cell records against the one record schema.

    Columns appended to ``RECORD_FIELDS`` after a record was written come back null
    (``missing_columns="insert"``); a column this reader does not know is an error. A path may name a member of
    a packed ``cells.parquet`` (committed evidence, ADR 0246): it is read from there, under the same path.
    """
    if not paths:
        return pl.LazyFrame(schema=RECORD_POLARS_SCHEMA).with_columns(pl.lit(None, pl.String).alias("record_path"))
    return packed.scan(paths, RECORD_POLARS_SCHEMA, "record_path", extra_columns="raise")


def device_key(prefix: str = "") -> pl.Expr:
    """GPU UUID(s) when there are any; on a GPU-less host the host itself is the device.

    A tensor-parallel cell's device is the *set* of its GPUs: the same GPUs listed in another order
    (CUDA_VISIBLE_DEVICES as a scheduler gave it) are the same device (ADR 0155)."""
    uuid = pl.col(f"{prefix}gpu_uuid").cast(pl.String)  # an all-null column of a hand-built frame has no dtype
    uuid = uuid.str.split(",").list.sort().list.join(",")
    uuid = pl.when(uuid.str.len_chars() > 0).then(uuid)
    host = pl.lit("host:") + pl.col(f"{prefix}hostname").cast(pl.String)
    return pl.coalesce(uuid, host)


def _validate(df: pl.DataFrame) -> None:
    bad = df.filter(pl.col("record_version").ne_missing(records.RECORD_VERSION))
    if bad.height:
        raise AnalysisError(
            f"record_version {bad['record_version'][0]!r} in {bad['record_path'][0]} "
            f"({bad.height} record(s)); this reader knows {records.RECORD_VERSION}"
        )
    for col in ("campaign_id", "cell_name", "role"):
        missing = df.filter(pl.col(col).is_null())
        if missing.height:
            raise AnalysisError(f"{col} is null in {missing['record_path'][0]}")
    roles = df.filter(~pl.col("role").is_in([ROLE_OPENING, ROLE_CLOSING, ROLE_POINT]))
    if roles.height:
        raise AnalysisError(
            f"role = {roles['role'][0]!r} in {roles['record_path'][0]}; "
            f"known: {ROLE_OPENING}, {ROLE_POINT}, {ROLE_CLOSING}"
        )
    dup = (
        df.group_by("campaign_id", "cell_name").agg(pl.col("record_path")).filter(pl.col("record_path").list.len() > 1)
    )
    if dup.height:
        r = dup.row(0, named=True)
        raise AnalysisError(
            f"cell {r['campaign_id']}/{r['cell_name']} has {len(r['record_path'])} records: "
            f"{', '.join(sorted(r['record_path']))}"
        )
    measured = df.filter(is_measured(df)).with_columns(window_index_expr(df))
    for role in (ROLE_OPENING, ROLE_CLOSING):
        many = (
            measured.filter(pl.col("role") == role)
            .group_by(*PAIR_KEYS, "_window")
            .agg(pl.col("cell_name"))
            .filter(pl.col("cell_name").list.len() > 1)
        )
        if many.height:
            r = many.row(0, named=True)
            raise AnalysisError(
                f"campaign {r['campaign_id']} has {len(r['cell_name'])} {role} records for window "
                f"{r['_window']} ({', '.join(sorted(r['cell_name']))}); a side holds one record per window"
            )


def window_index_expr(df: pl.DataFrame | pl.LazyFrame) -> pl.Expr:
    """``_window``: the record's window (0 where null, or for records written before the column)."""
    w = pl.col("window_index").fill_null(0) if "window_index" in columns_of(df) else pl.lit(0)
    return w.cast(pl.Int64).alias("_window")


def _side_mean(m: str) -> pl.Expr:
    # Null propagates (ADR 0021): a window that lacks the metric gives the side no value, rather than
    # a mean of the windows that happen to have it.
    return pl.when(pl.col(m).null_count() > 0).then(None).otherwise(pl.col(m).mean())


def _side_device(prefix: str) -> pl.Expr:
    # One device for all windows of a side: that device (as before windows); several: a value no
    # point's device equals, so pair_cross_gpu marks every ratio built on the side.
    keys = pl.col("device_key").unique().sort()
    return (
        pl.when(pl.col("device_key").n_unique() == 1)
        .then(pl.col("device_key").first())
        .otherwise(pl.lit("mixed:") + keys.str.join(","))
        .alias(f"{prefix}_device_key")
    )


def pair(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Add the pairing columns (see PAIRING_COLUMNS) to every record; the activity columns (TIMELINE_COLUMNS) are
    null where the records were read without their timelines."""
    lf = window_activity.with_null_activity(lf).with_columns(
        (pl.col("window_s") / pl.col("committed_tokens").cast(pl.Float64)).alias("s_per_committed_token"),
        device_key().alias("device_key"),
        window_index_expr(lf),
        is_measured(lf).alias("_measured"),
    )

    def side(role: str, prefix: str) -> pl.LazyFrame:
        return (
            lf.filter((pl.col("role") == role) & pl.col("_measured"))
            .sort("_window", "cell_name")
            .group_by(PAIR_KEYS, maintain_order=True)
            .agg(
                pl.col("cell_name").first().alias(f"{prefix}_cell_name"),
                _side_device(prefix),
                *(_side_mean(m).alias(f"{prefix}_{m}") for m in BASELINE_METRICS),
                pl.len().cast(pl.Int32).alias(f"{prefix}_n"),
                pl.col("cell_name").alias(f"{prefix}_cell_names"),
                pl.col("_window").cast(pl.String).str.join(",").alias(f"_{prefix}_windows"),
            )
        )

    out = lf.join(side(ROLE_OPENING, "opening"), on=list(PAIR_KEYS), how="left", nulls_equal=True, validate="m:1").join(
        side(ROLE_CLOSING, "closing"), on=list(PAIR_KEYS), how="left", nulls_equal=True, validate="m:1"
    )
    # The closing side enters the baseline only when it holds the opening's windows. A closing baseline cut
    # short (some windows not measured: analysis_scope = measured, ADR 0216) would weigh the two sides
    # unevenly; the points are then paired with the opening alone, as in a campaign without a closing
    # baseline, and baseline_drift compares the windows both sides hold. Every planned record present: equal.
    has_close = pl.col("closing_cell_name").is_not_null() & pl.col("_closing_windows").eq_missing(
        pl.col("_opening_windows")
    )
    out = out.with_columns(
        # Mean of opening and closing when the campaign has both; null propagates, so a baseline
        # whose closing twin lacks the metric gives no baseline value rather than a one-sided one.
        *(
            pl.when(has_close)
            .then((pl.col(f"opening_{m}") + pl.col(f"closing_{m}")) / 2)
            .otherwise(pl.col(f"opening_{m}"))
            .alias(f"baseline_{m}")
            for m in BASELINE_METRICS
        ),
        (pl.col("opening_n").fill_null(0) + pl.when(has_close).then(pl.col("closing_n")).otherwise(0))
        .cast(pl.Int32)
        .alias("baseline_n"),
        (
            pl.col("device_key").ne_missing(pl.col("opening_device_key"))
            | (has_close & pl.col("device_key").ne_missing(pl.col("closing_device_key")))
        ).alias("pair_cross_gpu"),
        pl.col("opening_n").fill_null(0),
        pl.col("closing_n").fill_null(0),
    )
    # An unsupported record measured nothing: it keeps its own columns and gets no pairing at all.
    unpaired = [c for c in PAIRING_COLUMNS if c not in ("record_path", "s_per_committed_token", "device_key")]
    out = out.with_columns(pl.when(pl.col("_measured")).then(pl.col(c)).otherwise(None).alias(c) for c in unpaired)
    return out.select(*RECORD_POLARS_SCHEMA.names(), *PAIRING_COLUMNS, *TIMELINE_COLUMNS)


# File identity a cached row is valid for. Records are written by rename (new inode, new ctime);
# ctime cannot be set from user space, so a file rewritten in place (even `cp -p`) also misses.
_FILE_KEY = ("_file_size", "_file_mtime_ns", "_file_ctime_ns", "_file_ino")


def _file_keys(paths: Sequence[str | Path]) -> pl.DataFrame:
    rows = []
    for p in paths:
        where = packed.locate(p)  # a member of a packed tree is as new as its packed file
        try:
            st = os.stat(where[0] if where else p)
        except OSError as exc:
            raise AnalysisError(f"cannot stat cell record {p}: {exc}") from exc
        rows.append((str(p), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return pl.DataFrame(rows, schema={"record_path": pl.String, **dict.fromkeys(_FILE_KEY, pl.Int64)}, orient="row")


def _read(paths: Sequence[str | Path]) -> pl.DataFrame:
    """Record columns, ``record_path`` and the activity columns from the timeline beside each record."""
    try:
        # One chunk per file comes back; rechunk once so every later expression runs on contiguous columns.
        raw = scan_records(paths).collect().rechunk()
    except pl.exceptions.PolarsError as exc:
        raise AnalysisError(f"cannot read cell records against record schema v{records.RECORD_VERSION}: {exc}") from exc
    try:
        activity = window_activity.of_records(raw["record_path"].to_list())
    except pl.exceptions.PolarsError as exc:
        raise AnalysisError(f"cannot read the timelines beside the cell records: {exc}") from exc
    return raw.join(activity, on="record_path", how="left", validate="1:1")


def _read_cached(paths: Sequence[str | Path], cache: Path, log: Callable[[str], None]) -> pl.DataFrame:
    """Rows of unchanged files from the cache, the rest read from disk; the cache is rewritten (ADR 0028). A
    record's activity columns are cached with it: the runner writes the timeline before the record (ADR 0227)."""
    keys = _file_keys(paths)
    expected = [*RECORD_POLARS_SCHEMA.names(), "record_path", *TIMELINE_COLUMNS, *_FILE_KEY]
    cached = None
    if cache.exists():
        try:
            cached = pl.read_parquet(cache)
            if cached.columns != expected or cached.schema["record_version"] != pl.Int32:
                log(f"record cache {cache} has another schema; reading every record")
                cached = None
        except (pl.exceptions.PolarsError, OSError) as exc:
            log(f"record cache {cache} unreadable ({exc}); reading every record")
            cached = None
    hit = (
        cached.join(keys, on=["record_path", *_FILE_KEY], how="semi")
        if cached is not None
        else pl.DataFrame(
            schema={
                **RECORD_POLARS_SCHEMA,
                "record_path": pl.String,
                **window_activity.ACTIVITY_SCHEMA,
                **dict.fromkeys(_FILE_KEY, pl.Int64),
            }
        )
    )
    missing = keys.join(hit.select("record_path"), on="record_path", how="anti")
    fresh = (
        _read(missing["record_path"].to_list()).join(missing, on="record_path", how="left") if missing.height else None
    )
    log(f"{hit.height} record(s) from cache, {missing.height} read from disk")
    raw = pl.concat([hit, fresh.select(expected)]) if fresh is not None else hit
    write_parquet_atomic(raw, cache)
    return raw.drop(_FILE_KEY)


def aggregate(
    paths: Sequence[str | Path], cache: str | Path | None = None, log: Callable[[str], None] = lambda _msg: None
) -> pl.DataFrame:
    """Read every record (lazily, one scan) and pair it; sorted by campaign and run order.

    ``cache``: a Parquet file of previously read records keyed by path and file identity; files
    that did not change since are not parsed again. Without it every file is read.
    """
    raw = _read_cached(paths, Path(cache), log) if cache is not None and paths else _read(paths)
    return aggregate_frame(raw, log)


def aggregate_frame(raw: pl.DataFrame, log: Callable[[str], None] = lambda _msg: None) -> pl.DataFrame:
    """Validate and pair records already read (record columns and ``record_path``; the activity columns where
    they were read with their timelines, null otherwise)."""
    _validate(raw)
    raw = _null_untrusted_latency(raw, log)
    return pair(raw.lazy()).sort("campaign_id", "run_order_index", "cell_name").collect()


def _null_untrusted_latency(raw: pl.DataFrame, log: Callable[[str], None]) -> pl.DataFrame:
    """Known-wrong latency is shown as missing, never as a number; latency_source says why."""
    bad = raw.select(UNTRUSTED_LATENCY.fill_null(False).sum()).item()
    if not bad:
        return raw
    log(f"{bad} SGLang record(s) with latency_source request_metrics: TTFT/TPOT nulled (ADR 0016)")
    mask = UNTRUSTED_LATENCY.fill_null(False)
    return raw.with_columns(
        *(pl.when(mask).then(None).otherwise(pl.col(c)).alias(c) for c in LATENCY_COLUMNS),
        pl.when(mask)
        .then(pl.lit(UNTRUSTED_LATENCY_SOURCE))
        .otherwise(pl.col("latency_source"))
        .alias("latency_source"),
    )


def write(df: pl.DataFrame, path: str | Path, config_hash: str) -> None:
    """Write records.parquet with the config hash it was aggregated under in the file metadata."""
    write_parquet_atomic(df, path, {META_CONFIG_HASH: config_hash, META_RECORD_VERSION: str(records.RECORD_VERSION)})
