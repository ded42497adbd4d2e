# Config validation, the cell table, the engine-group plan and the get_* helpers every rule uses (the rule
# files hold rules only: `snakemake --lint`).
import functools
import gc
import shlex
import sys
from pathlib import Path

from snakemake.settings.types import DeploymentMethod

sys.path.insert(0, str(Path(workflow.basedir)))

# Planning makes millions of objects that live as long as the process (Snakemake's jobs, their files and flags) and
# frees almost none: the collector's full passes over them were a quarter of `snakemake -n`'s CPU on the 13,860-cell
# grid (issue 22). They wait while the workflow is parsed and the DAG built (the young generations still collect
# cycles, and a full pass still comes every 1,000 of theirs); onstart (Snakefile) restores the thresholds before
# any job runs.
GC_THRESHOLDS = gc.get_threshold()
gc.set_threshold(GC_THRESHOLDS[0], GC_THRESHOLDS[1], max(GC_THRESHOLDS[2], 1000))

from specjoule import cells as _cells  # noqa: E402
from specjoule import config as _config  # noqa: E402
from specjoule import engine_jobs as _engine_jobs  # noqa: E402
from specjoule import resolve_models as _resolve  # noqa: E402
from specjoule import scope as _scope  # noqa: E402

# `--configfile` extends a `configfile:` directive key by key, which would mix the demo's models
# into a user's grid; load the demo only when no config was given.
if not workflow.overwrite_configfiles and not config:

    configfile: "config/config.yaml"


try:
    # Snakemake read the config files with its own loader, which keeps the last of two equal keys without a
    # word: read every one again with the project's (ADR 0130; profiles/default does it before Snakemake too).
    for _configfile in dict.fromkeys(str(f) for f in workflow.configfiles):  # --configfile ones and the demo's
        _config.read_yaml(_configfile)
    # Every parse-time check in one pass (ADR 0130): schema, names, semantics, cross-field, local models and
    # tokenizers, corpora, the cells and the reference evidence (ADR 0083, 0121, 0122). It writes nothing.
    CONFIG, CELLS = _config.plan(config, " ".join(str(f) for f in workflow.overwrite_configfiles) or "CONFIG")
except _config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None
CONFIG_HASH = _config.config_hash(CONFIG)
# The validated config, content-addressed, for the cell runner's command line (shell commands plan much
# faster than script directives on large grids: no per-job script-source lookup). Written when the
# workflow starts running (onstart, in the Snakefile), never while it is parsed or dry-run (ADR 0140).
CONFIG_JSON = f"results/.specjoule/config-{CONFIG_HASH}.json"
# The interpreter running Snakemake has the project installed; under conda deployment the
# engine env's `python` is used instead.
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
PYTHON = "python" if USE_CONDA else sys.executable
# The interpreter and the resolved config are spelled into the shell commands that use them: they are
# not params, because a changed config or venv path must not re-run measured cells (ADR 0140).
RUNNER = f"exec {shlex.quote(PYTHON)} -m specjoule.runner {shlex.quote(CONFIG_JSON)}"
RESOLVE_MODELS = f"{shlex.quote(PYTHON)} -m specjoule.resolve_models {shlex.quote(CONFIG_JSON)}"
CALIBRATE_GPU = f"exec {shlex.quote(PYTHON)} -m specjoule.hardware calibrate"


wildcard_constraints:
    campaign=r"[^/]+",
    cell=r"[^/]+",


def get_cell(wildcards):
    return CELLS.by_wildcards(wildcards.campaign, wildcards.cell)


def get_cell_id(wildcards):
    return get_cell(wildcards).cell_id


def get_cell_inputs(wildcards):
    """What a cell's job waits for: its campaign's chain, then its models' manifests (ADR 0121). One input
    function, not two: Snakemake's cost per job grows with each input function it calls (issue 22)."""
    cell = get_cell(wildcards)
    return _chain_inputs(cell) + _cell_model_manifests(cell)


def _chain_inputs(cell):
    """Opening baseline → points in run order → closing baseline: the campaign's order in the DAG.

    A chain, not a fan-out: under SLURM a campaign is one group job, sized by its widest DAG
    level; points side by side would ask for one GPU per point and the job step running them
    is refused (ADR 0051). Each point also names the opening baseline it is paired with."""
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


# The one-cell rule's conda env: per cell with conda deployment; otherwise never used, and a fixed name keeps
# Snakemake from calling a function per job while planning (a tenth of a 14k-cell plan).
ENGINE_ENV = get_engine_env if USE_CONDA else "../envs/vllm.yaml"


def _freeze_signature(fn):
    # Snakemake inspects a callable's signature on every job, up to three times (seconds on a 14k-cell grid).
    # A precomputed __signature__ spares inspect.signature the parsing; Snakemake's own attribute for a
    # function's parameters (overwrite_function_params, as its ioutils set it) spares the call itself.
    import inspect

    fn.__signature__ = inspect.signature(fn)
    try:  # public but undocumented: a Snakemake without it only loses the speed-up, never the plan
        from snakemake.common import overwrite_function_params
    except ImportError:
        return fn
    overwrite_function_params(fn, fn.__signature__.parameters)
    return fn


for _fn in (get_cell_id, get_cell_inputs, get_cell_priority, get_cell_runtime_min, get_cell_gpus, get_engine_env):
    _freeze_signature(_fn)


# Model resolution before any GPU job (ADR 0121): the manifests resolve_models writes.
MODEL_MANIFESTS = sorted({_resolve.manifest_path(r) for r in _resolve.model_refs(CONFIG)})


@functools.lru_cache(maxsize=None)
def _manifest_path(ref):
    # A few distinct models, thousands of cells: hash each model's manifest name once per plan.
    return _resolve.manifest_path(ref)


def get_model_manifests(cells):
    """The manifests the GPU job of ``cells`` waits for, as ancient inputs: the job runs after
    resolve_models, and a manifest rewritten when another model is added re-runs no measured cell.
    (resolve_models.cell_manifest_paths, with each model's manifest name computed once.)"""
    return [
        ancient(p) for p in sorted({_manifest_path(r) for c in cells for r in _resolve.cell_refs(c.setup).values()})
    ]


# A cell's manifest paths by its engine and scheme (a few distinct pairs, thousands of cells on a paper grid).
_MANIFEST_PATHS = {}


def _cell_model_manifests(cell):
    key = (cell.setup.engine, cell.setup.scheme)
    paths = _MANIFEST_PATHS.get(key)
    if paths is None:
        paths = _MANIFEST_PATHS[key] = [str(m) for m in get_model_manifests([cell])]
    if _measured_without_manifests(cell.record_path, paths):
        return []
    return [ancient(p) for p in paths]  # fresh flagged strings per job: Snakemake shares their flags dict


@functools.cache
def _existing_records():
    # One listing of results/cells per plan, not one stat per cell.
    return {str(p) for p in Path(_cells.CELLS_DIR).glob("*/*.parquet")}


def _measured_without_manifests(record_path, manifests):
    """Whether a record was measured before model resolution existed: Snakemake recorded its inputs
    without the manifests, and the `input` rerun trigger would re-measure it if they appeared now.
    Such a record keeps its recorded inputs; every cell measured since waits for resolve_models."""
    if record_path not in _existing_records():
        return False
    try:
        from snakemake.io import IOFile

        recorded = workflow.persistence.input(IOFile(record_path))
    except Exception:  # Snakemake internals moved: wait for the manifests (ordering is the safe side)
        return False
    return recorded is not None and not any(str(m) in recorded for m in manifests)


# Engine sharing (ADR 0015, 0017, 0140): one job per engine group, cut from the cells still to measure.
# A planned table (specjoule.engine_jobs) that the static `run_cell` rule of rules/run.smk reads through
# its {family} and {group} wildcards; planning only reads the results tree.
SHARE_ENGINES = bool(CONFIG["protocol"].get("share_engines"))
if SHARE_ENGINES and CONFIG["prefix_caching"]:
    # The runner refuses it too (one cell's prompts would be served from another's cache); say so now.
    raise WorkflowError(
        "protocol.share_engines = true with prefix_caching = true: a shared engine would serve one "
        "cell's prompts from another's cache; turn one of them off"
    )
# Analysis scope (ADR 0216): `measured` analyses the planned cells whose records exist and defines no
# measurement rule (rules/run.smk), so no job can be planned; the cells left out are named by the analysis.
MEASURED_SCOPE = CONFIG["analysis_scope"] == _scope.MEASURED
ANALYSED_CELLS, NOT_MEASURED = _scope.split_measured(CELLS, _existing_records()) if MEASURED_SCOPE else (CELLS, [])
if MEASURED_SCOPE and not ANALYSED_CELLS:
    raise WorkflowError(
        f"analysis_scope = measured: none of the {len(CELLS)} planned records exists under "
        f"{_cells.CELLS_DIR}/ (nothing was measured for this config yet; run it, or analyse another config)"
    )
NOT_MEASURED_LABELS = [_scope.cell_label(c) for c in NOT_MEASURED]
JOBS = _engine_jobs.plan_jobs(CELLS, CONFIG["version"]) if SHARE_ENGINES and not MEASURED_SCOPE else None


def get_group_job(wildcards):
    return JOBS.job(wildcards.family, wildcards.group)


def get_group_inputs(wildcards):
    """The done file of the family's previous planned job (a chain, one SLURM job per family: ADR 0051)."""
    previous = get_group_job(wildcards).previous
    return [previous.done_path] if previous else []


def get_group_model_manifests(wildcards):
    # Ancient: the job runs after resolve_models, and a manifest rewritten later re-runs nothing (ADR 0121).
    return [ancient(p) for p in _engine_jobs.manifests(get_group_job(wildcards).cells)]


def get_group_cell_ids(wildcards):
    return [c.cell_id for c in get_group_job(wildcards).cells]


def get_group_records(wildcards):
    return [c.record_path for c in get_group_job(wildcards).cells]


def get_group_command(wildcards):
    return _engine_jobs.group_shell(get_group_job(wildcards), CONFIG["version"], PYTHON, CONFIG_JSON)


def get_group_runtime_min(wildcards, attempt):
    return _engine_jobs.runtime_min(CELLS, get_group_job(wildcards), attempt)


def get_group_gpus(wildcards):
    # The GPUs the group's cells hold: their target's tensor-parallel size (one pair per family; ADR 0155).
    return get_group_job(wildcards).cells[0].n_gpus


def get_group_env(wildcards):
    return f"../envs/{get_group_job(wildcards).cells[0].engine}.yaml"


for _fn in (
    get_group_inputs,
    get_group_model_manifests,
    get_group_cell_ids,
    get_group_records,
    get_group_command,
    get_group_runtime_min,
    get_group_gpus,
    get_group_env,
):
    _freeze_signature(_fn)


def get_record_paths():
    return [c.record_path for c in CELLS]


def get_record_list(wildcards):
    # A param from a function: Snakemake formats each string of a literal list param per job (14k on a paper grid).
    return [c.record_path for c in ANALYSED_CELLS]


def get_timeline_list(wildcards):
    return [c.timeline_path for c in ANALYSED_CELLS]


@_freeze_signature
def get_not_measured(wildcards):
    # `<campaign>/<cell>` of every planned cell measured scope leaves out (ADR 0216); empty in planned scope.
    return NOT_MEASURED_LABELS


def get_measured_inputs(kind="record"):
    """What the analysis waits for: every record (timeline) — with sharing, a group job's done file stands for
    the records (timelines) it writes, which are no rule's declared outputs (ADR 0140). In measured scope: the
    records that exist, and those of their timelines that exist (a timeline is the figures' extra)."""
    if MEASURED_SCOPE:
        if kind == "record":
            return [c.record_path for c in ANALYSED_CELLS]
        return [c.timeline_path for c in ANALYSED_CELLS if Path(c.timeline_path).exists()]
    if JOBS is None:
        return [c.record_path if kind == "record" else c.timeline_path for c in CELLS]
    return JOBS.measured_inputs(CELLS, kind)


@_freeze_signature
def get_measured_records(wildcards):
    # An input function, not a literal list: Snakemake builds every path of a literal list once at parse time
    # and again for the job (13,860 twice on a paper grid).
    return get_measured_inputs("record")


@_freeze_signature
def get_measured_timelines(wildcards):
    return get_measured_inputs("timeline")


def write_plan(plan_path, log_path):
    """Rule `plan`: results/plan.tsv and the summary; predicted energy ratios of cells not yet measured where
    results/ holds a GPU calibration and baseline records to fit on (issue 18, ADR 0102), printed as
    PREDICTIONS, never written as records."""
    CELLS.write_plan(plan_path)
    try:
        from specjoule.analysis import roofline as _roofline
    except ModuleNotFoundError as exc:
        # A measurement-only node (the offline bundle's pipeline profile has no polars, issue 22): the plan
        # without the predictions, and a line saying why.
        from specjoule.extras import INSTALL_HINT, missing_analysis_module

        if missing_analysis_module(exc) is None:
            raise
        predicted = f"no PREDICTIONS: {exc.name} is not installed here ({INSTALL_HINT})"
    else:
        predicted = _roofline.plan_predictions(CELLS, "results/records.parquet", "results/hardware")
    with open(log_path, "w") as fh:
        for text in filter(None, [CELLS.summary(), predicted]):
            print(text)
            print(text, file=fh)


def get_final_outputs():
    # results/variance.parquet and results/reproducibility.parquet (rules variance, reproducibility) are not
    # listed here: the report takes them as inputs when it renders them (an --allowed-rules run of the report
    # alone must not need them).
    return [
        "results/records.parquet",
        "results/checks.parquet",
        "results/curves.parquet",
        "results/report.html",
        "results/matched_latency.parquet",
    ]
