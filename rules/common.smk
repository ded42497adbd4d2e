# Config validation, the cell table and the get_* helpers every rule uses.
import sys
from pathlib import Path

from snakemake.settings.types import DeploymentMethod

sys.path.insert(0, str(Path(workflow.basedir)))

from specjoule import cells as _cells  # noqa: E402
from specjoule import config as _config  # noqa: E402

# `--configfile` extends a `configfile:` directive key by key, which would mix the demo's models
# into a user's grid; load the demo only when no config was given.
if not workflow.overwrite_configfiles and not config:

    configfile: "config/config.yaml"


try:
    CONFIG = _config.validate(config)
except _config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None
CONFIG_HASH = _config.config_hash(CONFIG)
CELLS = _cells.build(CONFIG)
# A reference evidence folder must exist and hold cells this config measures too (ADR 0083): known now.
try:
    from specjoule.analysis import evidence as _evidence  # noqa: E402

    _evidence.check_reference(CONFIG, CELLS)
except _config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None
# The validated config, content-addressed, for the cell runner's command line (a shell rule
# plans much faster than a script rule on large grids: no per-job script-source lookup).
CONFIG_JSON = _config.write_resolved(CONFIG, f"results/.specjoule/config-{CONFIG_HASH}.json")
# The interpreter running Snakemake has the project installed; under conda deployment the
# engine env's `python` is used instead.
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
PYTHON = "python" if USE_CONDA else sys.executable


wildcard_constraints:
    campaign=r"[^/]+",
    cell=r"[^/]+",


def get_cell(wildcards):
    return CELLS.by_wildcards(wildcards.campaign, wildcards.cell)


def get_cell_id(wildcards):
    return get_cell(wildcards).cell_id


def get_cell_inputs(wildcards):
    """Opening baseline → points in run order → closing baseline: the campaign's order in the DAG.

    A chain, not a fan-out: under SLURM a campaign is one group job, sized by its widest DAG
    level; points side by side would ask for one GPU per point and the job step running them
    is refused (ADR 0051). Each point also names the opening baseline it is paired with."""
    cell = get_cell(wildcards)
    if cell.run_order_index == 0:
        return []
    members = CELLS.campaigns[cell.campaign_id]
    if cell.role == _cells.ROLE_CLOSING:
        # The closing baseline brackets every point (it is also the last link of the chain).
        return [c.record_path for c in members[: cell.run_order_index]]
    previous = members[cell.run_order_index - 1].record_path
    opening = members[0].record_path
    return [opening, previous] if previous != opening else [opening]


def get_cell_priority(wildcards):
    # Higher runs first: points leave the queue in their shuffled order.
    return len(CELLS.campaigns[wildcards.campaign]) - get_cell(wildcards).run_order_index


def get_cell_runtime_min(wildcards, attempt):
    # Plan estimate, doubled on each retry (a preempted or slow cell gets more time).
    return max(5, int(get_cell(wildcards).estimated_s / 60 * 1.5 + 5) * attempt)


def get_cell_gpus(wildcards):
    # The GPUs a cell holds: its target's tensor-parallel size. A campaign is one chain of cells on one
    # pair, so its group job asks for that many (ADR 0051, 0155); the SLURM profile leaves it to this.
    return get_cell(wildcards).n_gpus


def get_engine_env(wildcards):
    return f"../envs/{get_cell(wildcards).engine}.yaml"


def _freeze_signature(fn):
    # Snakemake inspects a callable's signature on every job; a precomputed __signature__
    # turns that into an attribute read (seconds on a 14k-cell grid).
    import inspect

    fn.__signature__ = inspect.signature(fn)
    return fn


for _fn in (get_cell_id, get_cell_inputs, get_cell_priority, get_cell_runtime_min, get_cell_gpus, get_engine_env):
    _freeze_signature(_fn)


# Engine sharing (ADR 0015, 0017): one job per engine group, cut from the cells still to measure.
SHARE_ENGINES = bool(CONFIG["protocol"].get("share_engines"))
if SHARE_ENGINES and CONFIG["prefix_caching"]:
    # The runner refuses it too (one cell's prompts would be served from another's cache); say so now.
    raise WorkflowError("protocol.share_engines = true with prefix_caching = true: a shared engine would serve one "
                        "cell's prompts from another's cache; turn one of them off")
PENDING = CELLS.pending(CONFIG["version"]) if SHARE_ENGINES else set()


def get_group_jobs():
    """(rule name, group, the previous group of its family) for every group with cells to measure.

    Each group takes the records of the group before it in its family's chain as inputs, so a
    family runs in its pre-registered order, one group at a time, and under SLURM `group:
    campaign` makes the family one job on one GPU (ADR 0051)."""
    import re

    jobs, last = [], {}
    for gid, group in CELLS.engine_groups(only=PENDING).items():
        name = "run_engines_" + re.sub(r"\W", "_", gid)
        jobs.append((name, group, last.get(group.family_id), group_marker(group)))
        last[group.family_id] = group
    return jobs


def group_marker(group):
    """An input that makes Snakemake run a group planned here even where all its records exist.

    A pending cell's record can exist (measured under another id or version, or after a re-planned
    cell earlier in its campaign); Snakemake checks only *requested* outputs for being missing, and
    nothing requests the stamps. The marker is created now, when absent, so it is newer than any
    such record (mtime trigger); once the group ran, its outputs are newer and the next planning
    run no longer has the group at all (its cells are done)."""
    import hashlib

    key = hashlib.sha1(" ".join([str(CONFIG["version"])] + [c.cell_id for c in group.cells]).encode()).hexdigest()[:12]
    marker = Path(f"results/.specjoule/pending/{group.family_id}/g{group.index:02d}-{key}")
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return str(marker)


def inherit_run_cell_settings(rule_name):
    """Apply `--set-resources run_cell:…` and `--set-threads run_cell=…` (the SLURM profile's GPU,
    memory and CPU requests, keyed by rule name) to an engine-group rule, whose name differs per group.

    Registers the group rule's name in Snakemake's own parsed override maps (Snakemake 9; private
    attributes, so tests/test_engine_groups.py checks the effect), read when the rule is declared."""
    settings = workflow.resource_settings
    for parsed in (settings._parsed_overwrite_resources, settings._parsed_overwrite_threads):
        if "run_cell" in parsed:
            parsed[rule_name] = parsed["run_cell"]


def group_runtime_min(group):
    # Members' estimates less the saved starts, with the same margin and retry doubling as run_cell.
    est = CELLS.group_estimated_s(group)

    def runtime(wildcards, attempt):
        return max(5, int(est / 60 * 1.5 + 5) * attempt)

    return _freeze_signature(runtime)


def group_shell(group, log):
    """Remove the members' old stamps, then exec the runner on every member in order (ADR 0056: exec)."""
    import shlex

    q = shlex.quote
    stale = " ".join(f"{q(str(Path(c.stamp_path('x')).parent))}/{q(c.name)}.????????????-v*" for c in group.cells)
    records = " ".join(q(c.record_path) for c in group.cells)
    ids = " ".join(f"--cell-id {c.cell_id}" for c in group.cells)
    return (f"rm -f {stale}; exec {q(PYTHON)} -m specjoule.runner {q(CONFIG_JSON)} {records} {ids} "
            f"--log {q(log)} >> {q(log)} 2>&1")


def get_record_paths():
    return [c.record_path for c in CELLS]


def get_final_outputs():
    # results/variance.parquet and results/reproducibility.parquet (rules variance, reproducibility) are not
    # listed here: the report takes them as inputs when it renders them (an --allowed-rules run of the report
    # alone must not need them).
    return ["results/records.parquet", "results/checks.parquet", "results/curves.parquet", "results/report.html",
            "results/matched_latency.parquet"]
