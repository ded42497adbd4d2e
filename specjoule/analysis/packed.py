"""Packed evidence: a committed run's per-cell files as one Parquet file per tree (ADR 0246).

A run writes one record per cell (``results/cells/<campaign>/<cell>.parquet``) and one timeline beside it
(``results/timelines/<campaign>/<cell>.parquet``). Committed, each one-row record is mostly its Parquet footer,
so ``tools/slim_evidence.py`` packs each tree into one file beside it: ``results/cells.parquet`` and
``results/timelines.parquet``. A packed file holds every row of every file of its tree, in path order, with the
column ``packed_file`` (the file's path relative to the results folder, e.g. ``cells/<campaign>/<cell>.parquet``);
its key-value metadata ``specjoule_packed`` lists each file with its row count and its own Arrow schema (field and
file metadata included), so :func:`unpack_tables` gives back each file's table equal to the one packed (slimming
checks that for every file before it removes the tree).

Readers keep addressing a packed file's members by the path the member had: a *member path*
(``<results>/cells/<campaign>/<cell>.parquet`` where ``<results>/cells.parquet`` is packed) is read through
:func:`read_members`; :func:`locate` tells a member path from a file on disk. The analysis reads members where it
read files (``aggregate``, ``evidence``, ``window_activity``); Snakemake's rules need files, so a committed run
analysed again is unpacked first (:func:`unpack`, or ``python tools/slim_evidence.py unpack``).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import polars as pl

from specjoule.cells import CELLS_DIR, TIMELINES_DIR

#: The trees that are packed, by the name of their folder under a results folder.
TREES: tuple[str, ...] = (Path(CELLS_DIR).name, Path(TIMELINES_DIR).name)
SUFFIX = ".parquet"
MEMBER_COLUMN = "packed_file"
METADATA_KEY = b"specjoule_packed"
FORMAT_VERSION = 1


class PackError(ValueError):
    """A packed file that is not one, or files that cannot be packed without changing what they hold."""


def packed_path(tree: str | os.PathLike) -> Path:
    """The packed file of a tree folder: ``…/results/cells`` → ``…/results/cells.parquet``."""
    p = Path(tree)
    return p.with_name(p.name + SUFFIX)


def is_packed(path: str | os.PathLike) -> bool:
    """A file named after a packed tree (``cells.parquet``, ``timelines.parquet``) whose footer says it is one."""
    p = Path(path)
    if p.name not in {t + SUFFIX for t in TREES} or not p.is_file():
        return False
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(p).metadata or {}
    except (OSError, ValueError):
        return False
    return METADATA_KEY in meta


def _source(where):
    """A path as it is; the bytes of a pack planned in memory as a fresh reader each time they are read."""
    import pyarrow as pa

    return pa.BufferReader(where) if isinstance(where, bytes) else where


def _body(path) -> dict:
    import pyarrow.parquet as pq

    meta = pq.read_schema(_source(path)).metadata or {}
    if METADATA_KEY not in meta:
        raise PackError(f"{path}: not a packed evidence file (no {METADATA_KEY.decode()} metadata)")
    body = json.loads(meta[METADATA_KEY])
    if body.get("version") != FORMAT_VERSION:
        raise PackError(f"{path}: packed format version {body.get('version')}, this reader knows {FORMAT_VERSION}")
    return body


def _index(path: Path) -> list[dict]:
    return _body(path)["files"]


def locate(path: str | os.PathLike) -> tuple[Path, str] | None:
    """``(packed file, member)`` for a member path of a packed tree that is not a file on disk; else None.

    ``…/results/cells/<campaign>/<cell>.parquet`` → (``…/results/cells.parquet``, ``cells/<campaign>/<cell>.parquet``)."""
    p = Path(path)
    if p.exists():
        return None
    for up in p.parents:
        if up.name in TREES:
            pack = packed_path(up)
            if pack.is_file():
                return pack, p.relative_to(up.parent).as_posix()
            return None
    return None


def members(pack: str | os.PathLike) -> list[Path]:
    """Every member path of a packed file, in its order (``<results>/cells/<campaign>/<cell>.parquet``)."""
    pack = Path(pack)
    return [pack.parent / f["path"] for f in _index(pack)]


def tree_files(tree: str | os.PathLike, pattern: str = "*/*.parquet") -> list[Path]:
    """The files of a tree folder matching ``pattern`` (a glob relative to the tree, as ``Path.glob`` takes it),
    sorted: files on disk where the tree is a folder, member paths where it is packed; [] where it is neither."""
    tree = Path(tree)
    if tree.is_dir():
        return sorted(tree.glob(pattern))
    pack = packed_path(tree)
    if not pack.is_file():
        return []
    return sorted(m for m in members(pack) if _full_match(m.relative_to(tree), pattern))


def _full_match(rel: Path, pattern: str) -> bool:
    # Path.match anchors at the right; with as many parts as the pattern it matches what Path.glob would find.
    return len(rel.parts) == len(Path(pattern).parts) and rel.match(pattern)


def split(paths: Iterable[str | os.PathLike]) -> tuple[list[str], dict[Path, list[str]]]:
    """``paths`` as (files on disk or unknown, {packed file: member paths}) — order kept within each."""
    real: list[str] = []
    packed: dict[Path, list[str]] = {}
    for p in paths:
        where = locate(p)
        if where is None:
            real.append(str(p))
        else:
            packed.setdefault(where[0], []).append(str(p))
    return real, packed


def _read_table(pack):
    """The packed file's one table. Read through ``ParquetFile``, not ``pq.read_table``: the same columns and rows (every
    committed pack compared), without the dataset layer, whose import (0.4 s of CPU, pandas included) every analysis
    script reading committed evidence paid, and about a third faster a read."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(_source(pack)).read()


def read_members(pack: str | os.PathLike, wanted: Sequence[str] | None, *, path_column: str) -> pl.DataFrame:
    """The rows of a packed file's members (all, or those whose member path is in ``wanted``), with the member
    path (``<results>/<packed_file>``) in ``path_column`` and the ``packed_file`` column dropped."""
    pack = Path(pack)
    index = {pack.parent / f["path"]: f for f in _index(pack)}
    if wanted is not None:
        unknown = [w for w in wanted if Path(w) not in index]
        if unknown:
            raise PackError(f"{pack}: holds no member {unknown[0]}")
    df = pl.from_arrow(_read_table(pack))
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns((pl.lit(str(pack.parent) + os.sep) + pl.col(MEMBER_COLUMN)).alias(path_column))
    if wanted is not None:
        by_member = {str(pack.parent / f["path"]): str(w) for w, f in ((w, index[Path(w)]) for w in wanted)}
        df = df.filter(pl.col(path_column).is_in(list(by_member))).with_columns(
            pl.col(path_column).replace_strict(by_member)
        )
    return df.drop(MEMBER_COLUMN)


def scan(paths: Sequence[str | os.PathLike], schema: pl.Schema, path_column: str, extra_columns: str) -> pl.LazyFrame:
    """``pl.scan_parquet`` of ``paths`` against ``schema`` (missing columns null, extra ones ``"raise"`` or
    ``"ignore"``, the path in ``path_column``), where a path may be a member of a packed tree: the one reader of
    records (``aggregate``) and timelines (``window_activity``) alike."""
    files, packs = split(paths)
    scans = [_members_as(pack, wanted, schema, path_column, extra_columns).lazy() for pack, wanted in packs.items()]
    if files:
        scans.insert(
            0,
            pl.scan_parquet(
                files,
                schema=schema,
                missing_columns="insert",
                extra_columns=extra_columns,  # type: ignore[arg-type]
                include_file_paths=path_column,
            ),
        )
    return scans[0] if len(scans) == 1 else pl.concat(scans, how="vertical")


def _members_as(pack: Path, wanted: Sequence[str], schema: pl.Schema, path_column: str, extra: str) -> pl.DataFrame:
    df = read_members(pack, wanted, path_column=path_column)
    unknown = sorted(set(df.columns) - set(schema.names()) - {path_column})
    if unknown and extra == "raise":  # as scan_parquet raises for a file
        raise pl.exceptions.SchemaError(f"{pack}: column(s) {unknown} are not in the schema read")
    cols = [pl.col(n).cast(t) if n in df.columns else pl.lit(None, t).alias(n) for n, t in schema.items()]
    return df.select(*cols, pl.col(path_column).cast(pl.String))


# -- packing and unpacking (tools/slim_evidence.py) ------------------------------------------------------------


def _bare(schema):
    import pyarrow as pa

    return pa.schema([pa.field(f.name, f.type) for f in schema])  # field docs differ between writers


def pack_table(tree: Path, files: Sequence[Path]):
    """One Arrow table of ``files`` (each under ``tree``), with the member column and the index in its metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not files:
        raise PackError(f"{tree}: no files to pack")
    tables: list = []
    index: list[dict] = []
    schemas: dict[str, int] = {}
    for f in files:
        t = pq.read_table(f)
        if MEMBER_COLUMN in t.column_names:
            raise PackError(f"{f}: already has a column {MEMBER_COLUMN!r}")
        schema = base64.b64encode(t.schema.serialize().to_pybytes()).decode()
        number = schemas.setdefault(schema, len(schemas))  # files of one writer share one schema: stored once
        index.append({"path": f.relative_to(tree.parent).as_posix(), "rows": t.num_rows, "schema": number})
        t = t.cast(_bare(t.schema)).replace_schema_metadata(None)
        tables.append(t.append_column(MEMBER_COLUMN, pa.array([index[-1]["path"]] * t.num_rows, pa.string())))
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise PackError(f"{tree}: its files do not share column types ({exc})") from exc
    body = {"version": FORMAT_VERSION, "files": index, "schemas": list(schemas)}
    meta = {METADATA_KEY: json.dumps(body, separators=(",", ":")).encode()}
    return table.replace_schema_metadata(meta)


#: How committed tables are written (ADR 0212: zstd, no statistics or dictionary pages; ``tools/slim_evidence.py``
#: holds the same), hence an unpacked timeline.
TABLE_PARQUET_OPTIONS: dict = {
    "compression": "zstd",
    "compression_level": 19,
    "write_statistics": False,
    "use_dictionary": False,
}
#: A packed file: a committed table, and, as records are (ADR 0221), without the stored Arrow schema, whose copy of
#: the columns' types would repeat what the Parquet schema says; the index is its only key-value metadata, and each
#: member's own Arrow schema is in it.
PACK_PARQUET_OPTIONS: dict = {**TABLE_PARQUET_OPTIONS, "store_schema": False}


def write_pack(table, where) -> None:
    """Write a table from :func:`pack_table` (to a path or a pyarrow sink)."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(where, table.schema, **PACK_PARQUET_OPTIONS) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata(table.schema.metadata)


def unpack_tables(pack: str | os.PathLike | bytes, only: str | None = None) -> dict[str, object]:
    """Each member's table as it was packed: {member path relative to the results folder: pyarrow Table}
    (``pack``: a packed file, or its bytes; ``only``: that member alone)."""
    import pyarrow as pa

    name = "a packed file in memory" if isinstance(pack, bytes) else str(pack)
    body = _body(pack)
    schemas = [pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s))) for s in body["schemas"]]
    table = _read_table(pack)
    out: dict[str, object] = {}
    offset = 0
    for f in body["files"]:
        schema = schemas[f["schema"]]
        part = table.slice(offset, f["rows"]).select(schema.names)
        offset += f["rows"]
        if only is not None and f["path"] != only:
            continue
        try:
            out[f["path"]] = part.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise PackError(f"{name}: member {f['path']} does not cast back to its schema ({exc})") from exc
    if offset != table.num_rows:
        raise PackError(f"{name}: its index counts {offset} rows, the table holds {table.num_rows}")
    return out


def write_member(table, path: Path) -> None:
    """A member written back as a file the way its tree's files are written: a record as the runner writes it
    (``records.record_parquet``), a timeline as committed tables are (zstd, no statistics)."""
    from specjoule import records

    path.parent.mkdir(parents=True, exist_ok=True)
    if (table.schema.metadata or {}).get(b"record_version") is not None:
        records.write_record_table(table, path)
    else:
        import pyarrow.parquet as pq

        with records.atomic_path(path) as tmp:
            pq.write_table(table, tmp, **TABLE_PARQUET_OPTIONS)


def unpack(results: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """A copy of the results folder ``results`` at ``dest`` with each packed tree written back as its files
    (everything else copied, links followed: the copy stands alone); returns ``dest``. Nothing packed: a plain copy."""
    import shutil

    results, dest = Path(results), Path(dest)
    shutil.copytree(
        results,
        dest,
        dirs_exist_ok=True,
        ignore=lambda d, names: [n for n in names if is_packed(Path(d, n))],
    )
    for tree in TREES:
        pack = results / (tree + SUFFIX)
        if is_packed(pack):
            for member, table in unpack_tables(pack).items():
                write_member(table, dest / member)
    return dest


def read_file(path: str | os.PathLike):
    """One file's pyarrow table: from disk, or, for a member path of a packed tree, the member as it was packed."""
    where = locate(path)
    if where is None:
        import pyarrow.parquet as pq

        return pq.read_table(path)
    pack, member = where
    return unpack_tables(pack, only=member)[member]


def read_frame(path: str | os.PathLike) -> pl.DataFrame:
    """:func:`read_file` as a polars frame (what ``pl.read_parquet`` gives for a file)."""
    where = locate(path)
    if where is None:
        return pl.read_parquet(Path(path))
    df = pl.from_arrow(read_file(path))
    assert isinstance(df, pl.DataFrame)
    return df


def copy_tree(tree: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """The files of a tree folder written under ``dest`` (``…/results/cells`` → ``dest/<campaign>/<cell>.parquet``),
    from the folder, or from its packed file; returns ``dest``."""
    import shutil

    tree, dest = Path(tree), Path(dest)
    if tree.is_dir():
        shutil.copytree(tree, dest)
        return dest
    pack = packed_path(tree)
    if not is_packed(pack):
        raise PackError(f"{tree}: neither a folder nor packed ({pack.name})")
    for member, table in unpack_tables(pack).items():
        write_member(table, dest / Path(member).relative_to(tree.name))
    return dest
