"""Rewrite cell records the way the runner now writes them: values untouched, no per-field docs (ADR 0190, 0221).

    python tools/slim_records.py validation/            # every record file under it, rewritten where smaller
    python tools/slim_records.py --check validation/    # writes nothing; exit 1 if any would get smaller

A record file is a Parquet file whose schema metadata carries ``record_version`` (``specjoule/records.py``);
other Parquet files under a directory (timelines, aggregates, analysis tables) are left alone, and one named on
the command line that is not a record is an error. Each record is read, its fields' metadata (the column docs
that records carried until ADR 0190) dropped, and written with ``records.record_parquet`` into memory (without
the per-column statistics and dictionary pages that only repeat a one-row record's values, and without the
stored Arrow schema that Parquet's own schema already gives back: ADR 0221). Those bytes are read back and must
equal the original — the same schema (column names, order, types, nullability; field metadata aside), the same
values (``Table.equals``) and the same file-level metadata — before they replace the file, atomically. A record whose
rewrite differs is refused: the file is named, left as it was, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specjoule import records  # noqa: E402

#: The key by which a Parquet file says it is a cell record (records.RECORD_SCHEMA's metadata).
RECORD_KEY = b"record_version"


class SlimError(ValueError):
    """A record that cannot be rewritten without changing it, or a path that is not a record."""


def is_record(path: Path) -> bool:
    try:
        return RECORD_KEY in (pq.read_schema(path).metadata or {})
    except (pa.ArrowException, OSError) as exc:
        raise SlimError(f"{path}: not readable as Parquet ({exc})") from exc


def record_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Record files among ``paths``: directories are searched (non-records under them skipped), a file named
    directly must be a record."""
    for path in paths:
        if path.is_dir():
            yield from (
                p for p in sorted(path.rglob("*.parquet")) if p.is_file() and not p.is_symlink() and is_record(p)
            )
        elif not path.is_file():
            raise SlimError(f"{path}: no such file or directory")
        elif not is_record(path):
            raise SlimError(f"{path}: not a cell record (no {RECORD_KEY.decode()} in its schema metadata)")
        else:
            yield path


def read_footer(path: Path) -> pq.FileMetaData:
    try:
        return pq.read_metadata(path)
    except (pa.ArrowException, OSError) as exc:
        raise SlimError(f"{path}: not readable as Parquet ({exc})") from exc


def form_shortfall(meta: pq.FileMetaData, options: Mapping[str, Any]) -> str | None:
    """How a Parquet file's footer (``read_footer``) shows it was written otherwise than
    ``pq.write_table(..., **options)`` writes (a stored Arrow schema where ``store_schema`` is off, column
    statistics, dictionary pages, another codec; pyarrow's defaults where ``options`` says nothing), or None. A
    screen for the files worth rewriting in memory, not a verdict (the rewrite's is: only smaller counts)."""
    codec = str(options.get("compression", "snappy")).upper()
    if options.get("store_schema", True) is False and b"ARROW:schema" in (meta.metadata or {}):
        return "it stores its Arrow schema"
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            if column.compression != codec:
                return f"column {column.path_in_schema} is {column.compression}, not {codec}"
            if options.get("write_statistics", True) is False and column.is_stats_set:
                return f"column {column.path_in_schema} has statistics"
            if options.get("use_dictionary", True) is False and column.has_dictionary_page:
                return f"column {column.path_in_schema} has a dictionary page"
    return None


def record_footer_shortfall(path: Path) -> str | None:
    """:func:`form_shortfall` of a cell record against the one way records are written (``records.record_parquet``).
    Every file is screened as a record; ``slim_evidence.committed_footer_shortfall`` tells records from tables."""
    return form_shortfall(read_footer(path), records.RECORD_PARQUET_OPTIONS)


def without_field_metadata(table: pa.Table) -> pa.Table:
    """The same columns and values; the file-level metadata kept, every field's own metadata dropped."""
    schema = pa.schema([f.remove_metadata() for f in table.schema], metadata=table.schema.metadata)
    return pa.Table.from_arrays(table.columns, schema=schema)


def slim_bytes(path: Path) -> tuple[bytes, bytes]:
    """The file's bytes and its rewrite's, the rewrite checked to read back as the original; else SlimError."""
    original_bytes = path.read_bytes()
    original = pq.read_table(pa.BufferReader(original_bytes))
    sink = pa.BufferOutputStream()
    records.record_parquet(without_field_metadata(original), sink)
    rewritten_bytes = sink.getvalue().to_pybytes()
    back = pq.read_table(pa.BufferReader(rewritten_bytes))
    if not back.equals(original, check_metadata=False):
        raise SlimError(f"{path}: the rewritten record does not equal the original; left as it was")
    if back.schema.metadata != original.schema.metadata:
        raise SlimError(
            f"{path}: the rewrite changed the file metadata {original.schema.metadata} to {back.schema.metadata}; "
            "left as it was"
        )
    if any(f.metadata for f in back.schema):
        raise SlimError(f"{path}: the rewrite still carries field metadata; left as it was")
    if not back.schema.equals(without_field_metadata(original).schema, check_metadata=True):
        raise SlimError(f"{path}: the rewritten record reads back with another schema; left as it was")
    return original_bytes, rewritten_bytes


def slim(paths: Sequence[Path], *, check: bool = False) -> tuple[list[Path], int]:
    """Rewrite (or, with ``check``, only find) the records that get smaller; returns them and the bytes saved.
    Every record is checked before any is written, so a refusal leaves all of them as they were."""
    planned = []
    for path in record_files(paths):
        original, rewritten = slim_bytes(path)
        # Smaller, not merely different: a fresh record's lists read back with Parquet's item name ("element"
        # for Arrow's "item"), so rewriting one the runner wrote changes a few bytes of schema and saves none.
        if len(rewritten) < len(original):
            planned.append((path, rewritten, len(original) - len(rewritten)))
    if not check:
        for path, rewritten, _ in planned:
            with records.atomic_path(path) as tmp:
                Path(tmp).write_bytes(rewritten)
    return [p for p, _, _ in planned], sum(saved for _, _, saved in planned)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="record files, or directories searched for them")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if any record would get smaller")
    args = ap.parse_args(argv)
    try:
        changed, saved = slim(args.paths, check=args.check)
    except SlimError as exc:
        print(f"slim_records: {exc}", file=sys.stderr)
        return 1
    verb = "would rewrite" if args.check else "rewrote"
    print(f"{verb} {len(changed)} record(s), {saved:,} bytes smaller")
    for path in changed:
        print(f"  {path}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
