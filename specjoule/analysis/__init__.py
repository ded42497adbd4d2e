"""From cell records to trustworthy numbers: aggregate → checks → derive (ADR 0020-0029).

- ``aggregate``: every record in one table, each cell paired with its campaign's baselines.
- ``checks``: pre-registered discard checks, thresholds from the config's ``checks`` section.
- ``derive``: curves against the baseline, refused for campaigns with a failed check.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from specjoule.records import atomic_path


class AnalysisError(ValueError):
    """Input the analysis cannot trust: names the file, campaign or column concerned."""


def write_parquet_atomic(df: pl.DataFrame, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Temp file in the target directory, then rename: a reader never sees half a table."""
    with atomic_path(path) as tmp:
        df.write_parquet(tmp, metadata=metadata)


def write_text_atomic(text: str, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


META_CONFIG_HASH = "specjoule_config_hash"


def config_hash_of(path: str | Path) -> str | None:
    """The config hash an analysis output was written under (file metadata)."""
    return pl.read_parquet_metadata(path).get(META_CONFIG_HASH)


def script_logger(name: str, log_path: str | Path):
    """A logger for a rule script: its ``log:`` file, timestamps, and the same lines on stderr."""
    import logging
    import sys

    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"specjoule.{name}")
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in (logging.FileHandler(log_path, mode="w"), logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        logger.addHandler(handler)
    logger.propagate = False
    return logger
