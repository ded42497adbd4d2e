"""The engine-group jobs of an engine-sharing run, planned from the cell table and the results tree (ADR 0017, 0140).

Planning only reads: which cells are measured (records, stamps, group done files), which are still to
measure, and how those are cut into one job per engine group. The workflow's static `run_cell` rule
(share mode) reads this table through its wildcards ``{family}`` and ``{group}``; nothing here writes a
file. What a job leaves behind is written by the job itself:

- before the runner starts, one *claim stamp* per member, ``<campaign>/<cell>.<cell_id>-v<version>@<group>``
  under ``results/.specjoule/measured/``: "measured by group job <group>";
- after the job succeeded, Snakemake touches its declared output, the group's *done file*
  ``results/.specjoule/groups/<family>/<group>.done``.

A cell is measured when its record exists and its claim stamp's done file exists. When a job (or any
job of its SLURM group, which is a whole campaign family) fails, Snakemake removes the done files, so
every record of the failed session is measured again: the whole-or-nothing rule of ADR 0052, although
the records themselves are not declared outputs (a rule's outputs cannot vary in number per job).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specjoule.cells import STAMPS_DIR, Cell, CellTable, EngineGroup

GROUPS_DIR = "results/.specjoule/groups"
# <cell name>.<cell id>-v<version>[@<group job>]; a cell name may hold dots, so the id is found from the right.
_STAMP = re.compile(r"^(.*)\.[0-9a-f]{12}-v")
ENGINE_LOGS_DIR = "results/logs/engines"


@dataclass(frozen=True)
class GroupJob:
    """One planned engine-group job: the group's members still to measure, in run order."""

    family_id: str
    name: str  # g<NN>-<phase>-<key>: the {group} wildcard; key = hash of version and member ids
    group: EngineGroup
    previous: GroupJob | None  # the family's previous planned job: this one runs after it

    @property
    def cells(self) -> tuple[Cell, ...]:
        return self.group.cells

    @property
    def done_path(self) -> str:
        return done_path(self.family_id, self.name)

    @property
    def log_path(self) -> str:
        return f"{ENGINE_LOGS_DIR}/{self.family_id}/{self.name}.log"


def done_path(family_id: str, group_name: str) -> str:
    return f"{GROUPS_DIR}/{family_id}/{group_name}.done"


def claim_name(cell: Cell, version: Any, group_name: str) -> str:
    """The claim stamp's file name: cell, id, version and the group job that measures it."""
    return f"{cell.name}.{cell.cell_id}-v{version}@{group_name}"


@dataclass
class JobPlan:
    """What an engine-sharing run measures, and what the analysis waits for."""

    jobs: dict[tuple[str, str], GroupJob]  # (family, group name) -> job, in run order
    # Per cell, what stands for its measurement in the DAG: its planned or past group job's done file,
    # or the record itself (measured one cell per job, without sharing).
    proof: dict[str, str]  # record path -> done file or record path

    def job(self, family: str, group: str) -> GroupJob:
        return self.jobs[(family, group)]

    @property
    def pending(self) -> set[str]:
        return {c.record_path for j in self.jobs.values() for c in j.cells}

    def group_wildcard_regex(self) -> str:
        """Only planned jobs match the `run_cell` rule: a past job's done file is a plain input."""
        names = sorted({name for _, name in self.jobs})
        return "|".join(re.escape(n) for n in names) if names else "(?!)"

    def measured_inputs(self, table: CellTable, kind: str = "record") -> list[str]:
        """The files the analysis waits for, stable across planning runs: done files for cells measured (or to
        be measured) by group jobs, the record (``kind="record"``) or timeline (``"timeline"``) otherwise."""
        out: dict[str, None] = {}
        for c in table:
            p = self.proof[c.record_path]
            if p == c.record_path and kind == "timeline":
                p = c.timeline_path
            out.setdefault(p, None)
        return list(out)


def plan_jobs(table: CellTable, version: Any) -> JobPlan:
    """Cut the cells still to measure into engine-group jobs; read-only (ADR 0140)."""
    proof: dict[str, str] = {}
    pending: set[str] = set()
    for campaign, members in table.campaigns.items():
        stamps = _stamps(campaign)
        rerun = False
        for c in members:  # in run order: from the first cell not measured, the campaign is re-measured
            measured = None if rerun else _measured_by(c, version, stamps)
            if measured is None:
                rerun = True
                pending.add(c.record_path)
            else:
                proof[c.record_path] = measured
    jobs: dict[tuple[str, str], GroupJob] = {}
    last: dict[str, GroupJob] = {}
    for group in table.engine_groups(only=pending).values():
        job = GroupJob(group.family_id, _job_name(group, version), group, last.get(group.family_id))
        jobs[(job.family_id, job.name)] = job
        last[group.family_id] = job
        for c in group.cells:
            proof[c.record_path] = job.done_path
    return JobPlan(jobs=jobs, proof=proof)


def _stamps(campaign: str) -> dict[str, list[str]]:
    """A campaign's stamps, by cell name (one directory listing per campaign)."""
    try:
        names = os.listdir(Path(STAMPS_DIR) / campaign)
    except FileNotFoundError:
        return {}
    out: dict[str, list[str]] = {}
    for n in names:
        m = _STAMP.match(n)
        if m:
            out.setdefault(m.group(1), []).append(n)
    return out


def _measured_by(cell: Cell, version: Any, stamps: dict[str, list[str]]) -> str | None:
    """What proves ``cell`` measured under its current id and version (see :class:`JobPlan`), or None."""
    if not os.path.exists(cell.record_path):
        return None
    own = stamps.get(cell.name, [])
    current = f"{cell.name}.{cell.cell_id}-v{version}"
    for s in own:
        if s == current:  # touched by Snakemake after a group job (before ADR 0140): a declared output
            return cell.record_path
        if s.startswith(current + "@"):
            done = done_path(cell.family_id, s[len(current) + 1 :])
            if os.path.exists(done):
                return done
    if own:
        return None  # claimed by a group job that failed, or measured under another id or version
    # No stamp at all: measured one cell per job (sharing off); trust the record's own id and version. Read with
    # pyarrow, the records' own writer: polars is not on a measurement-only node (issue 22), and an import error
    # caught below would silently re-measure every such record there.
    import pyarrow.parquet as pq

    try:
        row = pq.read_table(cell.record_path, columns=["cell_id", "version_param"]).slice(0, 1).to_pylist()[0]
    except Exception:  # unreadable or empty: measure again rather than trust it
        return None
    if row["cell_id"] != cell.cell_id or str(row["version_param"]) != str(version):
        return None
    return cell.record_path


def _job_name(group: EngineGroup, version: Any) -> str:
    """``g<NN>-<phase>-<key>``; a fresh key when a done file of that name is left from an earlier run (the
    same members, re-planned because their records went missing): the job must run again."""
    key = hashlib.sha1(" ".join([str(version)] + [c.cell_id for c in group.cells]).encode()).hexdigest()[:12]
    phase = group.phase.replace("_baseline", "")
    while os.path.exists(done_path(group.family_id, f"g{group.index:02d}-{phase}-{key}")):
        key = hashlib.sha1(f"{key}:again".encode()).hexdigest()[:12]
    return f"g{group.index:02d}-{phase}-{key}"


def group_shell(job: GroupJob, version: Any, python: str, config_json: str) -> str:
    """Drop the members' old stamps, claim them for this job, then exec the runner on every member in
    order (ADR 0056: exec, so that a scheduler's SIGTERM reaches the runner)."""
    import shlex

    q = shlex.quote
    dirs = sorted({f"{STAMPS_DIR}/{c.campaign_id}" for c in job.cells})
    stale = " ".join(f"{q(STAMPS_DIR + '/' + c.campaign_id)}/{q(c.name)}.????????????-v*" for c in job.cells)
    claims = " ".join(q(f"{STAMPS_DIR}/{c.campaign_id}/{claim_name(c, version, job.name)}") for c in job.cells)
    records = " ".join(q(c.record_path) for c in job.cells)
    ids = " ".join(f"--cell-id {q(c.cell_id)}" for c in job.cells)
    log = q(job.log_path)
    return (
        f"rm -f {stale}; mkdir -p {' '.join(q(d) for d in dirs)}; touch {claims}; "
        f"exec {q(python)} -m specjoule.runner {q(config_json)} {records} {ids} --log {log} >> {log} 2>&1"
    )


def runtime_min(table: CellTable, job: GroupJob, attempt: int) -> int:
    """The group's estimate with run_cell's margin and retry doubling; its start planned cold, as a limit must not
    rely on a compile cache the job's node may not see (ADR 0189)."""
    return max(5, int(table.group_estimated_s(job.group, warm_cache=False) / 60 * 1.5 + 5) * attempt)


def manifests(cells: Iterable[Cell]) -> list[str]:
    from specjoule import resolve_models

    return sorted({p for c in cells for p in resolve_models.cell_manifest_paths(c.setup)})


def family_targets(table: CellTable, jobs: JobPlan | None) -> dict[str, list[str]]:
    """Per campaign family, in plan order, the Snakemake targets that measure that family and nothing else
    (tools/device/campaign.sh runs one family per invocation). With engine sharing (``jobs``): the done file of
    the family's last planned group job — each job waits for the family's previous one, so the whole chain runs
    before it; an empty list when nothing of the family is left to measure. Without sharing (``jobs`` None): the
    last record of each of the family's campaigns, each campaign its own chain (Snakemake skips a measured one)."""
    targets: dict[str, list[str]] = {c.family_id: [] for c in table}
    if jobs is None:
        for members in table.campaigns.values():
            targets[members[-1].family_id].append(members[-1].record_path)
        return targets
    for (family, _), job in jobs.jobs.items():  # in run order: a family's last job closes its chain
        targets[family] = [job.done_path]
    return targets
