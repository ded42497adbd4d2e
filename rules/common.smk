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


def get_engine_env(wildcards):
    return f"../envs/{get_cell(wildcards).engine}.yaml"


def _freeze_signature(fn):
    # Snakemake inspects a callable's signature on every job; a precomputed __signature__
    # turns that into an attribute read (seconds on a 14k-cell grid).
    import inspect

    fn.__signature__ = inspect.signature(fn)
    return fn


for _fn in (get_cell_id, get_cell_inputs, get_cell_priority, get_cell_runtime_min, get_engine_env):
    _freeze_signature(_fn)


def get_record_paths():
    return [c.record_path for c in CELLS]


def get_final_outputs():
    return ["results/records.parquet", "results/checks.parquet", "results/curves.parquet", "results/report.html"]
