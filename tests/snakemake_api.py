"""Plan a workflow through Snakemake's Python API and return the jobs it would run."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import yaml
from snakemake.api import SnakemakeApi
from snakemake.settings.enums import Quietness
from snakemake.settings.types import (
    ConfigSettings,
    DAGSettings,
    ExecutionSettings,
    OutputSettings,
    ResourceSettings,
    StorageSettings,
)

REPO = Path(__file__).resolve().parent.parent


def _profile() -> dict:
    return yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())


def profile_rerun_triggers() -> frozenset:
    """The rerun triggers the auto-loaded profile sets (the tests plan as users do)."""
    from snakemake.settings.enums import RerunTrigger

    return frozenset(RerunTrigger.parse_choice(t) for t in _profile()["rerun-triggers"])


def profile_execution_settings() -> ExecutionSettings:
    """The execution settings the auto-loaded profile sets: `run:` jobs in threads (``force-use-threads``)."""
    return ExecutionSettings(use_threads=bool(_profile().get("force-use-threads", False)))


# Snakemake's touch executor sleeps 0.1 s before touching each job's outputs so that their mtimes follow the job
# order; a demo grid's touch run was ~2 s of sleep, ~8 s of test-fast's idle worker time over its six runs. 20 ms
# still orders them: more than two ticks of a coarse (100 Hz) file-time clock, and equal mtimes would not be "newer"
# anyway (the mtime trigger compares strictly). Snakemake's own executor still runs; only its pause is shorter.
TOUCH_PAUSE_S = 0.02


@contextmanager
def _touch_pause(seconds: float | None):
    """Snakemake's touch executor with its pause between jobs set to ``seconds`` (None: unchanged) while planning."""
    from snakemake.executors.touch import Executor

    before = Executor.SLEEPING_TIME
    if seconds is not None:
        Executor.SLEEPING_TIME = seconds
    try:
        yield
    finally:
        Executor.SLEEPING_TIME = before


def plan(workdir: Path, configfile: Path, *, pseudo_executor: str = "dryrun", targets=None,
         snakefile: Path | None = None, forceall: bool = False, config: dict | None = None) -> Counter:
    """Dry-run (or touch) the repository's Snakefile in ``workdir``; return {rule: jobs needing a run}
    plus the set of planned output paths under key ``'_outputs'`` (a Counter of paths), the records the GPU
    jobs will write under ``'_measures'`` (one cell per job: its output; with shared engines: the group
    job's members, ADR 0140) and, under ``'_group_jobs'``, each group job's shell command and records. ``config``:
    values over the config file's, as ``--config key=value`` gives them on the command line."""
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wapi = api.workflow(
            resource_settings=ResourceSettings(cores=1, resources={"gpu": 1}),
            config_settings=ConfigSettings(configfiles=[Path(configfile).resolve()], config=dict(config or {})),
            storage_settings=StorageSettings(),
            snakefile=Path(snakefile or REPO / "Snakefile"),
            workdir=Path(workdir),
        )
        dag_api = wapi.dag(
            dag_settings=DAGSettings(
                targets=set(targets or []),
                forceall=forceall,
                rerun_triggers=profile_rerun_triggers(),
            )
        )
        execution = profile_execution_settings()
        if pseudo_executor is None:
            dag_api.execute_workflow(executor="local", execution_settings=execution)
        else:
            with _touch_pause(TOUCH_PAUSE_S if pseudo_executor == "touch" else None):
                dag_api.execute_workflow(executor="local", pseudo_executor=pseudo_executor,
                                         execution_settings=execution)
        jobs = list(wapi._workflow.dag.needrun_jobs(exclude_finished=False))
        group_jobs = [(str(j.shellcmd), list(j.params.records)) for j in jobs
                      if j.rule.name == "run_cell" and "records" in j.params.keys()]
    counts = Counter(job.rule.name for job in jobs)
    counts["_outputs"] = Counter(str(f) for job in jobs for f in job.output)
    counts["_measures"] = Counter([p for p in counts["_outputs"] if p.startswith("results/cells/")]
                                  + [p for _, records in group_jobs for p in records])
    counts["_group_jobs"] = group_jobs
    return counts


def copy_workflow(dest: Path) -> Path:
    """A private copy of the workflow (Snakefile, rules, scripts, library, configs) to edit freely."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "rules", "scripts", "specjoule", "config", "profiles", "envs", "report"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest / "Snakefile"


def materialize(workdir: Path, configfile: Path, snakefile: Path) -> None:
    """Pretend a full run happened: create every planned output, then let Snakemake's touch
    executor order their mtimes and record its metadata (params, input sets). A shared-engine group
    job's own writes are done as the job does them: its shell command up to the runner (the members'
    claim stamps, ADR 0140), then the records and timelines the runner would write."""
    write_planned(workdir, plan(workdir, configfile, snakefile=snakefile))
    plan(workdir, configfile, snakefile=snakefile, pseudo_executor="touch", forceall=True)


def write_planned(workdir: Path, planned: dict) -> None:
    """What the planned jobs leave in the tree, without running them: every output (directories for the
    figures), and each group job's claim stamps (its shell command up to the runner), records and timelines."""
    import subprocess

    for out in planned["_outputs"]:
        path = workdir / out
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.suffix:  # directory outputs (figures)
            path.mkdir(exist_ok=True)
        else:
            path.touch()
    for command, records in planned["_group_jobs"]:
        subprocess.run(["bash", "-c", command.split("; exec ")[0]], cwd=workdir, check=True)
        for record in records:
            for out in (record, record.replace("results/cells/", "results/timelines/", 1)):
                (workdir / out).parent.mkdir(parents=True, exist_ok=True)
                (workdir / out).touch()


def write_config(path: Path, data: dict) -> Path:
    """A config dict as YAML, keys in the given order."""
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
