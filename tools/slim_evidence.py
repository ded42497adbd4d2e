"""Committed evidence in the form it keeps (ADR 0212): run on a session's evidence folder before committing it.

    python tools/slim_evidence.py validation/h200-2026-12/session-XXXX/     # slim it, in place
    python tools/slim_evidence.py --check validation/                        # writes nothing; exit 1 if it would
    python tools/slim_evidence.py open <…/report.html.gz> [-o report.html]  # the report as the pipeline wrote it
    python tools/slim_evidence.py unpack <…/results> [-o DIR]              # a run's cells/ and timelines/ as files

What it does under each folder (or to each file) named, every step checked before anything is written:

- **packs**: each run's per-cell trees, ``results/cells/<campaign>/<cell>.parquet`` and ``results/timelines/…``,
  become one file each, ``results/cells.parquet`` and ``results/timelines.parquet`` (ADR 0246,
  ``specjoule.analysis.packed``), each file checked to unpack to its own table before the tree goes; a link to a
  tree becomes a link to its packed file. The analysis reads the members by the paths the files had;
  ``unpack <results> [-o DIR]`` writes the files back for Snakemake.
- **records**: rewritten the way the runner writes them (``records.record_parquet``: no column docs or statistics,
  no stored Arrow schema; ADR 0190, 0221) when that is smaller, each checked by ``tools/slim_records.py`` to read
  back with the same columns, types, values and ``record_version`` metadata before it replaces the file.
- **logs**: every ``*.log`` becomes ``*.log.gz`` (gzip -9, no name or time in the header, so the same log gives
  the same bytes); the compressed bytes must decompress to the log before the plain file goes.
  ``specjoule.logtext`` reads either form.
- **reports**: every ``*.html`` becomes ``*.html.gz``; in it, each inline ``<script>`` of at least
  ``SCRIPT_MIN`` bytes (the Vega + Vega-Lite + vega-embed bundle, 0.9 MB, the same in every report of one
  vl-convert version) is stored once, by its sha256, under ``validation/report-scripts/<sha256>.js.gz``, and the
  report keeps the marker ``/*slim_evidence script sha256:<hex>*/`` in its place. ``open`` puts the scripts back
  and writes the report byte for byte as the pipeline wrote it (offline, standard library only); the rewrite is
  refused unless that holds.
- **tables**: every other Parquet file (timelines, aggregates, analysis tables) is rewritten with
  ``TABLE_PARQUET_OPTIONS`` (zstd, no column statistics or dictionary pages, ~35 % smaller) when that is smaller
  and reads back equal: the same columns, types, values, schema and file metadata (``Table.equals``).
- **figures**: a ``figures/`` folder beside a report, or a ``<name>.svg`` beside one, is a derived copy when the
  report embeds each figure the folder drew (``id="spec-<name>"``, the Vega-Lite spec with its data, from the
  same tables); it is removed. A figure whose report is not committed stays.

Everything else (checks, tables, configs, READMEs, traces, markers) is left as it is.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCRIPTS_DIR = REPO / "validation" / "report-scripts"
SCRIPT_MIN = 64 * 1024
LOG_SUFFIX = ".log"
GZ = ".gz"
# A bare <script> element (the renderer escapes "</script" inside the code as "<\/script", render.py).
_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)
_MARKER = re.compile(r"/\*slim_evidence script sha256:([0-9a-f]{64})\*/")
_SPEC_ID = re.compile(r'id="spec-([A-Za-z0-9_]+)"')
#: How committed tables are stored (ADR 0212): what a reader gets is the same table; statistics and dictionary
#: pages only speed up filtered reads of large files, and no reader filters these.
TABLE_PARQUET_OPTIONS = {
    "compression": "zstd",
    "compression_level": 19,
    "write_statistics": False,
    "use_dictionary": False,
}


class SlimError(ValueError):
    """Evidence that cannot be put in its committed form without changing what it says; nothing was written."""


def gz(data: bytes) -> bytes:
    """gzip -9 without a file name or time in the header: the same input gives the same bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def marker(digest: str) -> str:
    return f"/*slim_evidence script sha256:{digest}*/"


# -- reports --------------------------------------------------------------------------------------------------


def factor_scripts(html: str) -> tuple[str, dict[str, str]]:
    """The report with each large inline script replaced by its marker, and the scripts by sha256."""
    scripts: dict[str, str] = {}

    def swap(m: re.Match[str]) -> str:
        code = m.group(1)
        if len(code.encode()) < SCRIPT_MIN:
            return m.group(0)
        digest = hashlib.sha256(code.encode()).hexdigest()
        scripts[digest] = code
        return f"<script>{marker(digest)}</script>"

    return _SCRIPT.sub(swap, html), scripts


def restore_scripts(html: str, lookup: Callable[[str], str]) -> str:
    """The report with every marker replaced by the script it names (``lookup(sha256)`` gives the code)."""

    def back(m: re.Match[str]) -> str:
        code = lookup(m.group(1))
        if hashlib.sha256(code.encode()).hexdigest() != m.group(1):
            raise SlimError(f"the stored script {m.group(1)[:12]}… does not hash to its name")
        return code

    return _MARKER.sub(back, html)


def script_path(digest: str, scripts_dir: Path = SCRIPTS_DIR) -> Path:
    return scripts_dir / f"{digest}.js.gz"


def stored_script(digest: str, scripts_dir: Path = SCRIPTS_DIR) -> str:
    path = script_path(digest, scripts_dir)
    if not path.is_file():
        raise SlimError(f"the report names script {digest[:12]}…, which is not in {scripts_dir}")
    return gzip.decompress(path.read_bytes()).decode()


def read_report(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.name.endswith(GZ) else data).decode()


def open_report(path: Path, scripts_dir: Path = SCRIPTS_DIR) -> str:
    """The committed report as the pipeline wrote it: self-contained, its charts drawn offline."""
    return restore_scripts(read_report(path), lambda d: stored_script(d, scripts_dir))


# -- the plan -------------------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What slimming would do; ``apply`` does it. Every entry was checked when it was planned."""

    writes: dict[Path, bytes] = field(default_factory=dict)  # path -> new bytes
    removals: list[Path] = field(default_factory=list)  # files and folders that go
    notes: list[str] = field(default_factory=list)
    records: list[Path] = field(default_factory=list)  # the cell records among ``writes``
    links: dict[Path, str] = field(default_factory=dict)  # symlink -> its target, made after the removals
    bytes_saved: int = 0  # saved() as planned, before apply

    def saved(self) -> int:
        gone = sum(_size(p) for p in self.removals)
        written = sum(len(b) - (p.stat().st_size if p.exists() else 0) for p, b in self.writes.items())
        return gone - written

    def empty(self) -> bool:
        return not self.writes and not self.removals and not self.links

    def apply(self) -> None:
        for path, data in self.writes.items():
            _write_atomic(path, data)
        for path in self.removals:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        for link, target in self.links.items():
            link.symlink_to(target)


def _size(path: Path) -> int:
    if path.is_symlink():
        return 0
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return path.stat().st_size


def _write_atomic(path: Path, data: bytes) -> None:
    from specjoule import records  # the one atomic writer (records import pyarrow: only when slimming)

    with records.atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


def _files(paths: Iterable[Path], match: Callable[[Path], bool], skip: Iterable[Path] = ()) -> Iterator[Path]:
    """Regular files under ``paths`` (or named) that ``match``, none inside a folder of ``skip``."""
    gone = set(skip)

    def keep(p: Path) -> bool:
        return p.is_file() and not p.is_symlink() and match(p) and p not in gone and gone.isdisjoint(p.parents)

    for path in paths:
        if path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if keep(p))
        elif keep(path):
            yield path


def _is_log(p: Path) -> bool:
    return p.name.endswith(LOG_SUFFIX) and not p.name.startswith(".")


def _is_report(p: Path) -> bool:
    return (p.name.endswith(".html") or p.name.endswith(".html.gz")) and not p.name.startswith(".")


def plan_logs(paths: Sequence[Path], plan: Plan) -> None:
    for log in _files(paths, _is_log, plan.removals):
        data = log.read_bytes()
        packed = gz(data)
        if gzip.decompress(packed) != data:
            raise SlimError(f"{log}: its gzip does not read back as the log; left as it was")
        target = log.with_name(log.name + GZ)
        if target.exists() and gzip.decompress(target.read_bytes()) != data:
            raise SlimError(f"{log}: {target.name} exists and holds another text; left as it was")
        plan.writes[target] = packed
        plan.removals.append(log)


def plan_reports(paths: Sequence[Path], plan: Plan, scripts_dir: Path) -> None:
    for report in _files(paths, _is_report, plan.removals):
        text = read_report(report)
        original = restore_scripts(text, lambda d: stored_script(d, scripts_dir))  # whole, if slimmed before
        slimmed, scripts = factor_scripts(original)

        def lookup(digest: str, scripts: dict[str, str] = scripts) -> str:
            return scripts[digest] if digest in scripts else stored_script(digest, scripts_dir)

        if restore_scripts(slimmed, lookup) != original:
            raise SlimError(f"{report}: the slimmed report does not open as the original; left as it was")
        for digest, code in scripts.items():
            target = script_path(digest, scripts_dir)
            if not target.exists() and target not in plan.writes:
                plan.writes[target] = gz(code.encode())
        if report.name.endswith(GZ):
            if slimmed != text:
                plan.writes[report] = gz(slimmed.encode())
        else:
            plan.writes[report.with_name(report.name + GZ)] = gz(slimmed.encode())
            plan.removals.append(report)


def _same_value(x: object, y: object) -> bool:
    """Equal, with NaN equal to NaN (Arrow's equals says a table holding NaN differs from itself)."""
    if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
        return True
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same_value(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same_value(x[k], y[k]) for k in x)
    return x == y


def same_table(a: Any, b: Any) -> bool:
    """The same schema (field and file metadata included) and the same values, NaN equal to NaN."""
    if not a.schema.equals(b.schema, check_metadata=True):
        return False
    return a.num_rows == b.num_rows and all(
        a[n].equals(b[n]) or _same_value(a[n].to_pylist(), b[n].to_pylist()) for n in a.column_names
    )


def slim_table_bytes(path: Path) -> bytes:
    """The table rewritten with TABLE_PARQUET_OPTIONS, checked to read back as the original; else SlimError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    original = pq.read_table(path)
    sink = pa.BufferOutputStream()
    pq.write_table(original, sink, **TABLE_PARQUET_OPTIONS)
    rewritten = sink.getvalue().to_pybytes()
    back = pq.read_table(pa.BufferReader(rewritten))
    if not same_table(back, original):
        raise SlimError(f"{path}: the rewritten table does not equal the original; left as it was")
    return rewritten


def _is_parquet(p: Path) -> bool:
    return p.suffix == ".parquet" and not p.name.startswith(".")


def committed_footer_shortfall(path: Path) -> str | None:
    """What a Parquet file's footer shows that its committed form would not have (a record: the way
    ``records.record_parquet`` writes it; another table: ``TABLE_PARQUET_OPTIONS``), or None. Reads only the
    footer: a screen for the files worth planning, not a verdict (``slim_records.form_shortfall``)."""
    from specjoule import records
    from tools import slim_records

    meta = slim_records.read_footer(path)  # a record's schema metadata (slim_records.is_record) is the footer's
    record = slim_records.RECORD_KEY in (meta.metadata or {})
    return slim_records.form_shortfall(meta, records.RECORD_PARQUET_OPTIONS if record else TABLE_PARQUET_OPTIONS)


def newest_session(evidence: Path) -> Path:
    """The newest session folder under an evidence tree (``<evidence>/<campaign>/session-<date>[<letter>]``), by
    name: the one most likely committed before it was slimmed, which the committed-form checks read whole."""
    return max(evidence.glob("*/session-*"), key=lambda p: p.name)


def _parquet_in(select: Callable[[Path], bool] | None) -> Callable[[Path], bool]:
    return lambda p: _is_parquet(p) and (select is None or select(p))


def plan_tables(paths: Sequence[Path], plan: Plan, select: Callable[[Path], bool] | None = None) -> None:
    from tools import slim_records

    for table in _files(paths, _parquet_in(select), plan.removals):
        if slim_records.is_record(table):
            continue  # records are written one way (records.record_parquet, ADR 0190): plan_records
        rewritten = slim_table_bytes(table)
        if len(rewritten) < table.stat().st_size:
            plan.writes[table] = rewritten


def plan_records(paths: Sequence[Path], plan: Plan, select: Callable[[Path], bool] | None = None) -> None:
    """Each cell record in the form the runner writes now, where that is smaller (ADR 0190, 0221); every rewrite
    was read back equal to its original (``slim_records.slim_bytes``) when it was planned."""
    from tools import slim_records

    parquet = _parquet_in(select)
    for record in _files(paths, lambda p: parquet(p) and slim_records.is_record(p), plan.removals):
        try:
            original, rewritten = slim_records.slim_bytes(record)
        except slim_records.SlimError as exc:
            raise SlimError(str(exc)) from exc
        # Smaller, not merely different: a record written by this runner rewrites to the same size.
        if len(rewritten) < len(original):
            plan.writes[record] = rewritten
            plan.records.append(record)


def _trees(paths: Sequence[Path]) -> Iterator[Path]:
    """Every per-cell tree (a real ``cells/`` or ``timelines/`` folder) under ``paths``."""
    from specjoule.analysis import packed

    for path in paths:
        if not path.is_dir():
            continue
        found = [path] if path.name in packed.TREES and not path.is_symlink() else []
        found += [d for d in sorted(path.rglob("*")) if d.name in packed.TREES and d.is_dir() and not d.is_symlink()]
        yield from found


def plan_packs(paths: Sequence[Path], plan: Plan) -> None:
    """Each per-cell tree (``results/cells/<campaign>/<cell>.parquet``, ``results/timelines/…``) as one packed
    file beside it (``results/cells.parquet``, ADR 0246), checked to unpack to every file's table; a link to the
    tree (a ``marked/`` view) becomes a link to the packed file. A tree holding anything else is left as it is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specjoule.analysis import packed

    links = [p for path in paths if path.is_dir() for p in sorted(path.rglob("*")) if p.is_symlink()]
    for tree in _trees(paths):
        files = sorted(p for p in tree.rglob("*") if not p.is_dir())
        members = sorted(tree.glob("*/*.parquet"))
        if not members:
            continue  # not a tree of records or timelines (a run's logs/cells holds logs)
        if files != members or any(p.is_symlink() for p in files):
            plan.notes.append(f"{tree}: kept as files, it holds more than <campaign>/<cell>.parquet files")
            continue
        target = packed.packed_path(tree)
        if target.exists():
            raise SlimError(f"{tree}: {target.name} exists beside it; left as it was")
        sink = pa.BufferOutputStream()
        try:
            packed.write_pack(packed.pack_table(tree, members), sink)
            data = sink.getvalue().to_pybytes()
            back = packed.unpack_tables(data)
        except packed.PackError as exc:
            raise SlimError(str(exc)) from exc
        for f in members:
            if not same_table(back[f.relative_to(tree.parent).as_posix()], pq.read_table(f)):
                raise SlimError(f"{f}: its packed copy does not read back equal; {tree} left as it was")
        plan.writes[target] = data
        plan.removals.append(tree)
        for link in links:
            if link.name == tree.name and link.resolve() == tree.resolve():
                plan.removals.append(link)
                plan.links[packed.packed_path(link)] = str(Path(os.readlink(link)).with_name(target.name))


def _reports_beside(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and _is_report(p))


def embedded_figures(reports: Sequence[Path]) -> set[str]:
    names: set[str] = set()
    for report in reports:
        names |= set(_SPEC_ID.findall(read_report(report)))
    return names


def plan_figures(paths: Sequence[Path], plan: Plan) -> None:
    folders = [p for p in paths if p.is_dir()]
    for manifest in (m for f in folders for m in sorted(f.rglob("figures/figures.json"))):
        figures = manifest.parent
        reports = _reports_beside(figures.parent)
        if not reports:
            continue  # the only copy of these figures: kept
        drawn = {f["name"] for f in json.loads(manifest.read_text())["figures"] if f.get("drawn")}
        missing = drawn - embedded_figures(reports)
        if missing:
            plan.notes.append(f"{figures}: kept, its report does not embed {sorted(missing)}")
            continue
        plan.removals.append(figures)
    for svg in _files(folders, lambda p: p.suffix == ".svg" and p.parent.name != "figures"):
        reports = _reports_beside(svg.parent)
        if reports and svg.stem in embedded_figures(reports):
            plan.removals.append(svg)


def plan(paths: Sequence[Path], scripts_dir: Path = SCRIPTS_DIR, parquet: Callable[[Path], bool] | None = None) -> Plan:
    """Every step planned and checked; ``parquet``, where given, picks the Parquet files that are read and
    rewritten in memory (the costly step: zstd -19 for tables), e.g. by :func:`committed_footer_shortfall`;
    None: all."""
    for path in paths:
        if not path.exists():
            raise SlimError(f"{path}: no such file or directory")
    if parquet is not None:
        parquet = functools.cache(parquet)  # asked by the tables' step and the records'
    p = Plan()
    plan_packs(paths, p)  # first: the records and timelines it packs are not slimmed one by one
    plan_figures(paths, p)
    plan_logs(paths, p)
    plan_reports(paths, p, scripts_dir)
    plan_tables(paths, p, parquet)
    plan_records(paths, p, parquet)
    return p


def slim(
    paths: Sequence[Path],
    *,
    check: bool = False,
    scripts_dir: Path = SCRIPTS_DIR,
    parquet: Callable[[Path], bool] | None = None,
) -> tuple[Plan, list[Path]]:
    """Slim the evidence under ``paths`` (with ``check``, only plan it); returns the plan and the cell records
    among its writes. Nothing is written unless every step was planned and checked. ``parquet``: :func:`plan`'s."""
    p = plan(paths, scripts_dir, parquet)
    p.bytes_saved = p.saved()
    if not check:
        p.apply()
    return p, p.records


# -- command line ---------------------------------------------------------------------------------------------


def main_open(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="slim_evidence.py open", description="Write a committed report whole.")
    ap.add_argument("report", type=Path)
    ap.add_argument("-o", "--out", type=Path, help="where to write it (default: a temporary folder, printed)")
    args = ap.parse_args(argv)
    try:
        html = open_report(args.report)
    except (SlimError, OSError) as exc:
        print(f"slim_evidence: {exc}", file=sys.stderr)
        return 1
    out = args.out or Path(tempfile.mkdtemp(prefix="specjoule-report-")) / args.report.name.removesuffix(GZ)
    out.write_text(html)
    print(out)
    return 0


def main_unpack(argv: Sequence[str]) -> int:
    from specjoule.analysis import packed

    ap = argparse.ArgumentParser(
        prog="slim_evidence.py unpack",
        description="Copy a committed results folder with its packed trees written back as files (ADR 0246).",
    )
    ap.add_argument("results", type=Path, help="a committed results folder (holding cells.parquet, timelines.parquet)")
    ap.add_argument("-o", "--out", type=Path, help="where to write the copy (default: a temporary folder, printed)")
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        print(f"slim_evidence: {args.results}: no such folder", file=sys.stderr)
        return 1
    out = args.out or Path(tempfile.mkdtemp(prefix="specjoule-results-")) / "results"
    try:
        packed.unpack(args.results, out)
    except (packed.PackError, OSError) as exc:
        print(f"slim_evidence: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["open"]:
        return main_open(argv[1:])
    if argv[:1] == ["unpack"]:
        return main_unpack(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="evidence folders (or files)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything would change")
    args = ap.parse_args(argv)
    try:
        p, records = slim(args.paths, check=args.check)
    except SlimError as exc:
        print(f"slim_evidence: {exc}", file=sys.stderr)
        return 1
    verb = "would" if args.check else "did"
    print(
        f"slim_evidence ({verb}): {len(p.writes)} file(s) written ({len(records)} of them cell records), "
        f"{len(p.removals)} removed; {p.bytes_saved:,} bytes smaller"
    )
    for path in [*p.writes, *p.removals, *p.links]:
        print(f"  {path}")
    for note in p.notes:
        print(f"  note: {note}")
    return 1 if (args.check and (not p.empty() or records)) else 0


if __name__ == "__main__":
    sys.exit(main())
