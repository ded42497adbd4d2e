"""Evidence folders: records from another run, read and paired as the pipeline would (ADR 0083).

An evidence source is a records file (a cell record or an aggregated ``records.parquet``) or a
folder. In a folder the cell records of the pipeline layout are used (every Parquet under a
``cells`` directory, or the folder itself when it is one); only where there are none, the
aggregated ``records.parquet`` files. The same record found twice (a ``marked/`` copy beside the
original) is read once. Each run — the records under one ``results/cells`` — is paired on its own
(campaign ids repeat across runs), so a folder of several sessions reads as those sessions.

Across sources, cells are matched on what was *measured* (``MEASURED_KEY``), not on the cell id:
the id also hashes config text that measures nothing (a scheme's list of acceptance vectors, so the
same vLLM draft-model cell has two ids in the 2026-12-01 sessions) and gives each replicate window
its own id.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from specjoule import axes, schemes
from specjoule.analysis import AnalysisError, aggregate, packed
from specjoule.analysis.aggregate import aggregate_frame, scan_records
from specjoule.cells import CELLS_DIR

C = pl.col

# Every parameter that changes what a configuration measures, as the record states it. The replicate
# axes (seed, window, engine replicate) are left out: they are what an interval averages over. Names
# a config gives (model pair, scheme, vector, workload) are left out: two runs may name things apart.
MEASURED_KEY: tuple[str, ...] = (
    "engine",
    "engine_version",
    "torch_version",
    "target_model",
    "draft_model",
    "method",
    "k",
    "synthetic",
    "acceptance_mechanism",
    "acceptance_rates",
    "batch_size",
    "corpus",
    "cuda_graphs",
    "workload_kind",
    "prompt_len",
    "output_len",
    "request_rate",
    "device",
    # The GPU model (board class): an H100 and an H200 measure different things, never two boards of one (ADR 0241).
    "gpu_names",
    "prefix_caching",
)
# Reported beside a match, not required: they differ between runs by nature or do not change the measurement.
REPORTED: tuple[str, ...] = ("gpu_uuid", "driver_version", "cuda_version", "git_commit", "config_hash")
# engine_config values that are host paths (the same model under another checkout) compare by file name.
PATH_KEYS_HINT = "/"


# engine_config keys that record *how* a cell was brought about, not what it measured: a synthetic vector swapped
# into a running engine measures the same as one set at start (ADR 0039). Reported, never a different configuration.
CONDITION_KEYS: tuple[str, ...] = ("speculative_synthetic_rates_swapped",)


def engine_config_of(text: str | None, *, conditions: bool = False) -> dict:
    """An effective engine configuration (record JSON) with host paths reduced to their file names; the
    CONDITION_KEYS only when ``conditions``."""
    import json

    if not text:
        return {}
    cfg = {k: (Path(v).name if isinstance(v, str) and PATH_KEYS_HINT in v else v) for k, v in json.loads(text).items()}
    return cfg if conditions else {k: v for k, v in cfg.items() if k not in CONDITION_KEYS}


def common_config_keys(df: pl.DataFrame, col: str = "engine_config", within: str = "family") -> pl.Series:
    """One comparable string per row: the row's normalised engine configuration restricted to the keys that every
    record of its ``within`` group recorded (ADR 0181); ``∅`` where the row recorded none."""
    import json

    parsed: dict[str, dict] = {}  # records of one engine group share their configuration's text
    configs = [(parsed.setdefault(t, engine_config_of(t)) if t else None) for t in df[col].to_list()]
    common: dict[object, set[str]] = {}
    for group, cfg in zip(df[within].to_list(), configs):
        if cfg is not None:
            common[group] = set(cfg) if group not in common else common[group] & set(cfg)
    out = []
    for group, cfg in zip(df[within].to_list(), configs):
        if cfg is None:
            out.append("∅")
        else:
            keep = common[group]
            out.append(json.dumps({k: v for k, v in cfg.items() if k in keep}, sort_keys=True))
    return pl.Series("engine_config_key", out, dtype=pl.String)


def _as_text(col: str, dtype: pl.DataType) -> pl.Expr:
    if isinstance(dtype, pl.List):
        inner = pl.element().round(9) if dtype.inner.is_float() else pl.element()
        return C(col).list.eval(inner.cast(pl.String)).list.join(",").fill_null("∅")
    if dtype.is_float():
        return C(col).round(9).cast(pl.String).fill_null("∅")
    return C(col).cast(pl.String).fill_null("∅")


# Methods that cannot run without drafter weights of their own. A record of one with no ``draft_model`` predates the
# runner's writing it for them (before 2026-12-02b it wrote it for draft_model only); its engine named the drafter
# (ADR 0229). MTP is left out: its drafter is optional and, when absent, the engine names the target.
REQUIRED_DRAFTER_METHODS: tuple[str, ...] = tuple(
    m for m in schemes.METHODS if schemes.SCHEMES[m].needs_pair_draft or schemes.SCHEMES[m].needs_drafter
)
DRAFTER_PATH_KEYS: tuple[str, ...] = ("speculative_draft_model", "speculative_draft_model_path")  # vLLM, SGLang


def drafter_name(df: pl.DataFrame) -> pl.Expr:
    """The drafter a key compares: ``draft_model`` by file name (as host paths in ``engine_config_of``), else, for a
    method that needs one, the file name of the drafter its engine configuration names; ``∅`` for none."""
    name = C("draft_model").cast(pl.String)
    if "engine_config" in df.columns and "method" in df.columns:
        named = pl.coalesce([C("engine_config").str.json_path_match(f"$.{k}") for k in DRAFTER_PATH_KEYS])
        name = pl.when(name.is_null() & C("method").is_in(REQUIRED_DRAFTER_METHODS)).then(named).otherwise(name)
    return name.str.replace(r"^.*/", "").fill_null("∅").alias("draft_model")


def _key_text(df: pl.DataFrame, col: str) -> pl.Expr:
    return drafter_name(df) if col == "draft_model" else _as_text(col, df.schema[col])


def measure_key(df: pl.DataFrame) -> pl.Expr:
    """``measure_key``: one string of the MEASURED_KEY values (a point's baselines share the key of
    the baseline configuration, opening and closing alike)."""
    return pl.concat_str([_key_text(df, c) for c in MEASURED_KEY], separator="|").alias("measure_key")


def _parquet_files(folder: Path) -> list[Path]:
    """Every ``*.parquet`` under ``folder``, through symlinked folders too (a session folder whose ``results`` links
    to a run's tree; ``Path.rglob`` does not follow links before Python 3.13). Each real folder is read once, under
    its own path when the tree holds it (the real tree first, then links to anything not seen yet), so a ``marked/``
    link to a sibling folder or a link back up the tree adds nothing."""
    seen: set[str] = set()
    found: list[Path] = []
    pending = [folder]
    while pending:
        for here, dirs, files in os.walk(pending.pop(0)):  # links are listed in dirs, not entered
            if os.path.realpath(here) in seen:
                dirs.clear()
                continue
            seen.add(os.path.realpath(here))
            dirs.sort()
            pending += [Path(here) / d for d in dirs if os.path.islink(os.path.join(here, d))]
            found += [Path(here) / f for f in sorted(files) if f.endswith(".parquet")]
    return found


_CELLS = Path(CELLS_DIR).name


def _packs(files: Sequence[Path]) -> list[Path]:
    """The packed ``cells.parquet`` files among ``files``, each real file once: under its own path where the tree
    holds it, else under the first link to it (an evidence folder's ``marked/`` view links to its results)."""
    found: dict[str, Path] = {}
    for f in sorted(files, key=lambda f: (os.path.islink(f), str(f))):
        if f.name == _CELLS + packed.SUFFIX and packed.is_packed(f):
            found.setdefault(os.path.realpath(f), f)
    return sorted(found.values())


def record_files(source: str | Path) -> list[Path]:
    """The record files of one evidence source (see module doc); an error names a source with none."""
    p = Path(source)
    if not p.exists() and p.name == _CELLS and packed.is_packed(packed.packed_path(p)):
        p = packed.packed_path(p)  # a run's cells folder, committed packed (ADR 0246): named by its old path
    if p.is_file():
        return packed.members(p) if packed.is_packed(p) else [p]
    if not p.is_dir():
        raise AnalysisError(f"evidence {source}: no such file or folder")
    every = sorted(f for f in _parquet_files(p) if not f.name.startswith("."))
    cells = [f for f in every if p.name == _CELLS or _CELLS in f.relative_to(p).parts[:-1]]
    cells += [m for pack in _packs(every) for m in packed.members(pack)]
    if cells:
        return sorted(cells)
    aggregated = [f for f in every if f.name == "records.parquet"]
    if aggregated:
        return aggregated
    raise AnalysisError(
        f"evidence {source}: no cell records (results/cells/<campaign>/<cell>.parquet) and no records.parquet under it"
    )


def _read_aggregated(path: Path) -> pl.DataFrame:
    """An aggregated records.parquet: its record columns (later ones null), pairing columns dropped."""
    df = pl.read_parquet(path)
    schema = aggregate.RECORD_POLARS_SCHEMA
    cols = [pl.col(n).cast(t) if n in df.columns else pl.lit(None, t).alias(n) for n, t in schema.items()]
    paths = C("record_path") if "record_path" in df.columns else pl.lit(str(path))
    return df.select(*cols, paths.cast(pl.String).alias("record_path"))


def read_source(source: str | Path) -> pl.DataFrame:
    """Every record of one source, read against the record schema, duplicates dropped."""
    files = record_files(source)
    cells = [f for f in files if f.name != "records.parquet"]
    parts = []
    try:
        if cells:
            parts.append(scan_records(cells).collect())
        parts += [_read_aggregated(f) for f in files if f.name == "records.parquet"]
    except pl.exceptions.PolarsError as exc:
        raise AnalysisError(f"evidence {source}: cannot read its records: {exc}") from exc
    raw = pl.concat(parts, how="vertical_relaxed")
    # A marked/ copy of a record is the same measurement: same cell, same window on the clock.
    return raw.unique(
        subset=["campaign_id", "cell_name", "cell_id", "window_start", "window_end"], keep="first", maintain_order=True
    )


def run_of(record_path: str) -> str:
    """The run a record file belongs to: the folder above its ``cells`` directory (``.../results``), else its own folder."""
    p = Path(record_path)
    for parent in p.parents:
        if parent.name == "cells":
            return str(parent.parent)
    return str(p.parent)


def load(source: str | Path) -> pl.DataFrame:
    """One source's records, paired as aggregate pairs them, with ``source`` and ``measure_key``.

    A folder holding several runs (a tree of sessions, each with its ``results/cells``) is read as those
    runs: each is paired on its own and ``source`` names it."""
    raw = read_source(source)
    runs = raw.with_columns(C("record_path").map_elements(run_of, return_dtype=pl.String).alias("_run"))
    if runs["_run"].n_unique() <= 1:
        paired = aggregate_frame(raw)
        return paired.with_columns(pl.lit(str(source)).alias("source"), measure_key(paired))
    parts = []
    for (run,), part in sorted(runs.partition_by("_run", as_dict=True).items()):
        paired = aggregate_frame(part.drop("_run"))
        parts.append(paired.with_columns(pl.lit(run).alias("source"), measure_key(paired)))
    return pl.concat(parts, how="diagonal_relaxed")


def load_many(sources: Sequence[str | Path]) -> pl.DataFrame:
    frames = [load(s) for s in sources]
    if not frames:
        raise AnalysisError("no evidence given")
    return pl.concat(frames, how="diagonal_relaxed")


def resolve(path: str | Path) -> Path:
    """A configured evidence path: absolute as given; relative to the working directory, else the repository."""
    from specjoule.config import resolve_evidence_path

    return resolve_evidence_path(path)


# What the plan knows of MEASURED_KEY before anything ran (versions and the mechanism come from the engine, the
# GPU model from the machine).
PLAN_KEY: tuple[str, ...] = tuple(
    c for c in MEASURED_KEY if c not in ("engine_version", "torch_version", "acceptance_mechanism", "gpu_names")
)


def check_reference(config: dict, cells) -> None:
    """Parse-time check of ``report.reference_evidence``: it exists and holds at least one speculative
    cell with the same planned parameters as one of ``cells`` (a CellTable); else a ConfigError."""
    from specjoule.config import ConfigError, reference_evidence_path

    where = reference_evidence_path(config)
    if where is None:
        return
    path = config["report"]["reference_evidence"]
    try:
        ref = read_source(where)
    except AnalysisError as exc:
        raise ConfigError("report.reference_evidence", path, str(exc)) from None
    planned = pl.DataFrame([c.identity() for c in cells if c.role == axes.ROLE_POINT], infer_schema_length=None)
    if not planned.height:
        raise ConfigError("report.reference_evidence", path, "this config has no speculative cell to compare")
    ref = ref.filter(C("role") == axes.ROLE_POINT)
    keys = list(PLAN_KEY)
    ours = planned.select(pl.concat_str([_key_text(planned, c) for c in keys], separator="|").alias("k"))
    theirs = ref.select(pl.concat_str([_key_text(ref, c) for c in keys], separator="|").alias("k"))
    if not ours.join(theirs, on="k", how="semi").height:
        raise ConfigError(
            "report.reference_evidence",
            path,
            f"holds {ref.height} speculative record(s), none with the measured parameters of a cell of "
            f"this config ({', '.join(keys)})",
        )
