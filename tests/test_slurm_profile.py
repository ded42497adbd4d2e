"""profiles/slurm on a real single-node SLURM: status polling, campaigns as GPU group jobs,
retries with a longer time limit, forced failures, and scancel → SIGTERM in the cell.

The workflow here is tests/data/slurm_mechanics: cells are short Python scripts that record where
they ran, so each scenario costs seconds. The real pipeline under SLURM is
tests/test_slurm_e2e.py. The first two tests need no cluster: they check what the profile and the
pipeline's DAG make the executor ask for.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

pytest.register_assert_rewrite("slurm_cluster")
from slurm_cluster import PROFILE, REPO, run_snakemake  # noqa: E402

pytest_plugins = ["slurm_cluster"]

MECHANICS = REPO / "tests" / "data" / "slurm_mechanics" / "Snakefile"


# ------------------------------------------------------------------ no cluster needed
def parse_profile(monkeypatch, **env) -> dict:
    """The profile as Snakemake reads it (YTE evaluated), under the given environment."""
    from snakemake.profiles import ProfileConfigFileParser

    for name in ("ACCOUNT", "PARTITION", "GPU_MODEL", "GRES", "GPUS", "CPUS_PER_GPU", "MEM_MB", "JOBS"):
        monkeypatch.delenv(f"SPECJOULE_SLURM_{name}", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with open(PROFILE / "config.yaml") as fh:
        return dict(ProfileConfigFileParser().parse(fh))


def test_profile_takes_cluster_settings_from_the_environment(monkeypatch):
    bare = parse_profile(monkeypatch)
    assert bare["executor"] == "slurm"
    assert bare["slurm-status-command"] == "squeue"
    assert bare["retries"] == "1"
    # Nothing cluster-specific is invented when nothing is set: SLURM's defaults apply.
    assert not any(r.startswith(("slurm_account=", "slurm_partition=")) for r in bare["default-resources"])
    # The GPU count is the rule's (each cell's tensor_parallel_size: 1 for these; ADR 0155), not the profile's.
    assert not any(r.startswith("run_cell:gpu=") for r in bare["set-resources"])
    assert not any(r.startswith("run_cell:gpu_model=") for r in bare["set-resources"])
    assert "run_cell:cpus_per_gpu=8" in bare["set-resources"]
    # The auto-loaded profiles/default wins key by key: the cluster profile must not set its keys.
    default = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert not set(default) & set(bare)

    site = parse_profile(monkeypatch, SPECJOULE_SLURM_ACCOUNT="proj42", SPECJOULE_SLURM_PARTITION="gpu-h200",
                         SPECJOULE_SLURM_GPU_MODEL="h200", SPECJOULE_SLURM_MEM_MB="120000",
                         SPECJOULE_SLURM_JOBS="8")
    assert "slurm_account=proj42" in site["default-resources"]
    assert "slurm_partition=gpu-h200" in site["default-resources"]
    assert {"run_cell:gpu_model=h200", "run_cell:mem_mb=120000"} <= set(site["set-resources"])
    assert site["jobs"] == "8"

    gres = parse_profile(monkeypatch, SPECJOULE_SLURM_GRES="gpu:h200:1", SPECJOULE_SLURM_GPU_MODEL="h200")
    # --gres instead of --gpus, never both (gpu=0, no gpu_model).
    assert {"run_cell:gres=gpu:h200:1", "run_cell:gpu=0", "run_cell:cpus_per_gpu=8"} <= set(gres["set-resources"])
    assert not any(r.startswith(("run_cell:gpu_model=", "run_cell:gpu=1")) for r in gres["set-resources"])

    cpu = parse_profile(monkeypatch, SPECJOULE_SLURM_GPUS="0")
    assert "run_cell:gpu=0" in cpu["set-resources"]
    assert not any(r.startswith("run_cell:cpus_per_gpu=") for r in cpu["set-resources"])


def campaign_group_resources(configfile: Path, workdir: Path) -> dict[str, tuple[list[list[str]], dict]]:
    """For each campaign of the real pipeline: its cells as Snakemake layers them inside the group
    job, and the resources the SLURM executor will request for that group job."""
    from snakemake.api import SnakemakeApi
    from snakemake.resources import GroupResources, Resources
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings

    out = {}
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wapi = api.workflow(resource_settings=ResourceSettings(cores=1), storage_settings=StorageSettings(),
                            config_settings=ConfigSettings(configfiles=[configfile]),
                            snakefile=REPO / "Snakefile", workdir=workdir)
        wapi.dag(dag_settings=DAGSettings()).execute_workflow(executor="local", pseudo_executor="dryrun")
        dag = wapi._workflow.dag
        by_campaign: dict[str, set] = {}
        for job in dag.needrun_jobs(exclude_finished=False):
            if job.rule.name == "run_cell":
                by_campaign.setdefault(job.wildcards_dict["campaign"], set()).add(job)
        for campaign, jobs in by_campaign.items():
            levels = [sorted(level) for level in dag.toposorted(jobs=jobs, inherit_pipe_dependencies=True)]
            # No --resources on a cluster: the group is as wide as its widest level.
            res = GroupResources.basic_layered(levels, constraints=Resources(), run_local=False,
                                               additive_resources=["runtime"], sortby=["runtime"])
            out[campaign] = ([sorted(j.wildcards_dict["cell"] for j in level) for level in levels],
                             {**res, "_cell_runtime_sum": sum(j.resources["runtime"] for j in jobs)})
    return out


def test_a_campaign_is_one_single_gpu_job_whose_time_is_the_sum_of_its_cells(tmp_path):
    from specjoule import cells, config

    configfile = REPO / "config" / "h200-validation.yaml"
    table = cells.build(config.load(configfile))
    groups = campaign_group_resources(configfile, tmp_path)
    assert set(groups) == set(table.campaigns)
    for campaign, (levels, res) in groups.items():
        # A chain in run order: opening baseline, shuffled points, closing baseline.
        assert levels == [[c.name] for c in table.campaigns[campaign]], campaign
        assert res["gpu"] == 1, f"{campaign}: the group job would ask for {res['gpu']} GPUs"
        assert res["runtime"] == res["_cell_runtime_sum"]


# ------------------------------------------------------------------ on the cluster
def job_campaign(work: Path, job_id: str) -> str:
    log = next((work / "results/logs/slurm").rglob(f"{job_id}.log")).read_text(errors="replace")
    return re.search(r"run_cell:campaign=(\w+)", log).group(1)


def submitted_job_ids(output: str) -> list[str]:
    return re.findall(r"submitted with SLURM jobid (\d+)", output)


def read_records(work: Path) -> dict[str, dict]:
    return {p.relative_to(work / "cells").with_suffix("").as_posix(): json.loads(p.read_text())
            for p in sorted((work / "cells").rglob("*.json"))} if (work / "cells").exists() else {}


@pytest.fixture(scope="module")
def mechanics(slurm_cluster, tmp_path_factory):
    """One run: campaign `ok` (open → p1 → p2 → close) and campaign `bad` whose p1 always fails."""
    work = tmp_path_factory.mktemp("slurm_mechanics")
    (work / "grid.yaml").write_text(yaml.safe_dump({"campaigns": {"ok": ["p1", "p2"], "bad": ["p1"]},
                                                    "fail": ["bad/p1"]}))
    # The GPU model is the test cluster's GRES type: the profile's --gpus=<model>:1 path, for real.
    run = run_snakemake(["-s", str(MECHANICS), "--configfile", "grid.yaml"], work,
                        env={"SPECJOULE_SLURM_GPU_MODEL": "fake"}, timeout_s=360)
    print(f"\n[slurm] mechanics run: {run.wall_s:.1f} s, rc={run.returncode}")
    assert not run.timed_out, f"Snakemake did not finish in 360 s (status polling hung?):\n{run.output[-4000:]}"
    ids = submitted_job_ids(run.output)
    jobs = {j: {**slurm_cluster.job_info(j), "campaign": job_campaign(work, j)} for j in ids}
    return SimpleNamespace(work=work, run=run, records=read_records(work), jobs=jobs)


@pytest.mark.slurm
def test_campaign_runs_as_one_gpu_job_in_chain_order(mechanics):
    ok = {k.split("/")[1]: r for k, r in mechanics.records.items() if k.startswith("ok/")}
    assert set(ok) == {"open", "p1", "p2", "close"}, mechanics.run.output[-3000:]
    (job_id,) = {r["slurm_job_id"] for r in ok.values()}
    job = mechanics.jobs[job_id]
    assert job["campaign"] == "ok" and job["JobState"] == "COMPLETED"
    assert "gres:gpu:fake:1" in job["TresPerJob"], job  # one GPU, of the requested model
    assert job["TimeLimit"] == "00:08:00"  # 4 cells × 2 min: a group's runtime is the sum
    assert all(r["cuda_visible_devices"] == "0" for r in ok.values())
    ordered = [ok[c] for c in ("open", "p1", "p2", "close")]
    for before, after in zip(ordered, ordered[1:]):
        assert after["start"] >= before["end"], "cells of a campaign overlapped on the one GPU"
    # The job ran the project's interpreter: the environment reached the job step intact.
    assert all(Path(r["python"]).parent == Path(sys.executable).parent for r in ok.values())


@pytest.mark.slurm
def test_failed_cell_fails_the_run_leaves_no_record_and_was_retried_with_more_time(mechanics):
    run = mechanics.run
    assert run.returncode != 0
    assert "Error in group campaign" in run.output
    assert "cell bad/p1 forced to fail" in run.output  # the failed job's log is shown
    # Nothing of the failed campaign survives, not even its opening baseline that had succeeded:
    # a campaign is measured whole, on one GPU, or not at all.
    assert not [k for k in mechanics.records if k.startswith("bad/")]
    assert not list((mechanics.work / "cells").rglob("*.tmp"))
    bad = [j for j in mechanics.jobs.values() if j["campaign"] == "bad"]
    # open, p1, close × 2 min; the retry gets twice the limit
    assert [j["TimeLimit"] for j in bad] == ["00:06:00", "00:12:00"]
    assert all(j["JobState"] == "FAILED" for j in bad)


@pytest.mark.slurm
def test_scancel_sigterms_the_cell_at_once_and_the_retry_reruns_the_campaign(slurm_cluster, tmp_path):
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump({"campaigns": {"c1": ["p1"]}, "hold_s": {"c1/p1": 240}}))
    running, sigterm = tmp_path / "signals/c1/p1.running", tmp_path / "signals/c1/p1.sigterm"
    seen: dict = {}

    def cancel_while_running(proc):
        deadline = time.monotonic() + 150
        while not running.exists():
            assert proc.poll() is None, "Snakemake ended before the cell started"
            assert time.monotonic() < deadline, "the held cell never started"
            time.sleep(0.2)
        seen["running"] = json.loads(running.read_text())
        seen["t_cancel"] = time.time()
        subprocess.run(["scancel", seen["running"]["slurm_job_id"]], check=True, timeout=30)
        while not sigterm.exists() and time.time() - seen["t_cancel"] < 30:
            time.sleep(0.05)
        if sigterm.exists():
            seen["sigterm"] = json.loads(sigterm.read_text())

    # This run asks for its GPU the GRES way (--gres=gpu:fake:1); the mechanics run uses --gpus.
    run = run_snakemake(["-s", str(MECHANICS), "--configfile", "grid.yaml"], tmp_path, timeout_s=360,
                        env={"SPECJOULE_SLURM_GRES": "gpu:fake:1"}, on_start=cancel_while_running)
    print(f"\n[slurm] scancel run: {run.wall_s:.1f} s; SIGTERM after "
          f"{seen.get('sigterm', {}).get('t', float('nan')) - seen['t_cancel']:.2f} s")
    assert not run.timed_out, run.output[-4000:]
    assert "sigterm" in seen, "scancel did not deliver SIGTERM to the cell process within 30 s"
    assert seen["sigterm"]["pid"] == seen["running"]["pid"]  # the cell itself, not a wrapper
    assert seen["sigterm"]["t"] - seen["t_cancel"] < 5.0
    cancelled = seen["running"]["slurm_job_id"]
    assert slurm_cluster.job_info(cancelled)["JobState"] == "CANCELLED"
    # Retried (profile: retries 1) with twice the limit; the whole campaign ran again in the new job.
    assert run.returncode == 0, run.output[-4000:]
    records = read_records(tmp_path)
    assert set(records) == {"c1/open", "c1/p1", "c1/close"}
    assert {r["attempt"] for r in records.values()} == {2}
    (retry_job,) = {r["slurm_job_id"] for r in records.values()}
    assert retry_job != cancelled
    retry = slurm_cluster.job_info(retry_job)
    assert retry["TimeLimit"] == "00:12:00"  # 3 cells × 2 min × attempt 2
    assert "gres:gpu:fake:1" in retry.get("TresPerNode", ""), retry
    assert "TresPerJob" not in retry  # no --gpus beside --gres
    assert all(r["cuda_visible_devices"] == "0" for r in records.values())  # the job step holds the GPU
    left = slurm_cluster.wait_no_job_processes()
    assert not left, f"processes of finished jobs still running: {left}"
