"""tools/device/family_targets.py and campaign.sh: a family's Snakemake targets are what Snakemake itself plans.

Since the workflow only plans (ADR 0140) a record path is no rule's output under engine sharing, so a campaign
on the device names each family's closing done file; these tests plan validation/h200-2026-12/config/h200-families-sweep.yaml with
Snakemake (its API, as tests/snakemake_api.py does) and check the resolved targets against that plan.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specjoule import logtext
from tests.snakemake_api import plan as snakemake_plan
from tests.snakemake_api import write_planned

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "device"))
import family_targets  # noqa: E402

SWEEP = ROOT / "validation" / "h200-2026-12" / "config" / "h200-families-sweep.yaml"
DEMO = ROOT / "config" / "config.yaml"
GROUPS = "results/.specjoule/groups/"


def group_outputs(planned) -> set[str]:
    return {p for p in planned["_outputs"] if p.startswith(GROUPS)}


def family_of(done_file: str) -> str:
    return done_file[len(GROUPS) :].split("/")[0]


def test_each_family_target_plans_exactly_that_familys_chain(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what is left to measure is read from the working directory, as Snakemake does
    targets = family_targets.resolve(SWEEP)
    full = group_outputs(snakemake_plan(tmp_path, SWEEP))
    assert len(full) == 6 and set(targets) == {family_of(p) for p in full}
    for family, paths in targets.items():
        assert len(paths) == 1 and paths[0] in full
        alone = group_outputs(snakemake_plan(tmp_path, SWEEP, targets=paths))
        # the family's whole chain of group jobs, and nothing of the other family
        assert alone == {p for p in full if family_of(p) == family}
        assert len(alone) == 3


def test_a_measured_family_has_no_target_and_the_other_keeps_its_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = family_targets.resolve(SWEEP)
    first, second = before
    # The first family's group jobs as they leave the tree: their outputs (the done files, which Snakemake
    # touches after a job), claim stamps (the job's shell command up to the runner), records and timelines.
    write_planned(tmp_path, snakemake_plan(tmp_path, SWEEP, targets=before[first]))

    after = family_targets.resolve(SWEEP)
    assert after == {first: [], second: before[second]}
    assert {family_of(p) for p in group_outputs(snakemake_plan(tmp_path, SWEEP))} == {second}


def test_without_sharing_a_family_target_is_each_campaigns_last_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    targets = family_targets.resolve(DEMO)
    full = snakemake_plan(tmp_path, DEMO)
    records = {p for p in full["_outputs"] if p.startswith("results/cells/")}
    assert len(records) == 4
    for paths in targets.values():
        alone = snakemake_plan(tmp_path, DEMO, targets=paths)
        assert {p for p in alone["_outputs"] if p.startswith("results/cells/")} == records
        assert all(p.endswith("/baseline--close.parquet") for p in paths)


def test_unknown_family_is_refused_naming_the_known_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KeyError, match="no campaign family nope in .*; its families: vllm-qwen3_30b_a3b-closed-cg1"):
        family_targets.resolve(SWEEP, ["nope"])


def _campaign(tmp_path: Path, *args: str, extra_snakemake_args: str = "") -> subprocess.CompletedProcess:
    """campaign.sh as on the device, with this venv as the site and Snakemake dry-running (SNAKEMAKE_ARGS=-n)."""
    site_env = tmp_path / "site-env.sh"
    site_env.write_text(f"export PATH={Path(sys.executable).parent}:$PATH\nexport PYTHONPATH={ROOT}\n")
    env = {
        **os.environ,
        "SITE_ENV": str(site_env),
        "CALIBRATE": "0",
        "SPECJOULE_GIT_COMMIT": "test",
        "SNAKEMAKE_ARGS": f"-n -s {ROOT / 'Snakefile'} {extra_snakemake_args}",
    }
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(ROOT / "tools/device/campaign.sh"), str(SWEEP), *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_campaign_sh_runs_every_family_in_plan_order_by_its_done_file(tmp_path, monkeypatch):
    r = _campaign(tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    monkeypatch.chdir(tmp_path / "work")
    expected = family_targets.resolve(SWEEP)
    started = [line.split(" family ", 1)[1] for line in r.stdout.splitlines() if " family " in line]
    assert started == [f"{family}: {paths[0]}" for family, paths in expected.items()]
    assert r.stdout.count("This was a dry-run") == 2 and "MissingRuleException" not in r.stderr
    # an unknown family stops it before any GPU time (no calibration, no Snakemake)
    r = _campaign(tmp_path, "vllm-gemma4_26b_a4b-closed-cg1", "nope")
    assert r.returncode == 2 and "campaign: no family nope in" in r.stderr
    assert "start" not in r.stdout


def test_a_missing_site_environment_is_named_before_any_gpu_time(tmp_path):
    """SITE_ENV naming no file (no bundle installed yet, or the SGLang site alone without SITE_ENV set) stops
    campaign.sh at once with the file and the way out, before the calibration or any Snakemake run."""
    missing = tmp_path / "site-sglang" / "specjoule-env.sh"
    env = {**os.environ, "SITE_ENV": str(missing), "CALIBRATE": "1", "SPECJOULE_GIT_COMMIT": "test"}
    r = subprocess.run(
        ["bash", str(ROOT / "tools/device/campaign.sh"), str(SWEEP)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert f"campaign: no site environment {missing} (SITE_ENV)" in r.stderr and "ADR 0235" in r.stderr
    assert "calibrate" not in r.stdout and "start" not in r.stdout


def test_a_failed_family_prints_its_engines_reason(tmp_path):
    """A family whose Snakemake run fails prints its engine logs' exceptions, root cause first, into campaign.sh's output,
    which the device's background log carries back on every poll. The log is a copy of the 2026-12-02c gemma-4
    failure; Snakemake is made to fail by an option it does not know."""
    family = "vllm-gemma4_26b_a4b-closed-cg1"
    logs = tmp_path / "work" / "results" / "logs" / "engines" / family
    logs.mkdir(parents=True)
    evidence = ROOT / "validation/h200-2026-12/session-2026-12-02c/failed-starts/vllm-gemma4_26b_a4b-g00-opening.log"
    (logs / "g00-opening-cc7825a30509.log").write_text(logtext.read_log(evidence))  # committed gzipped (ADR 0212)
    r = _campaign(tmp_path, family, extra_snakemake_args="--no-such-option")
    assert r.returncode != 0
    assert f"end {family} rc={r.returncode}" in r.stdout
    assert f"campaign: {family} failed; the errors in results/logs/engines/{family}/" in r.stdout
    reasons = [line for line in r.stdout.splitlines() if line.startswith("campaign:   ")]
    assert reasons[0] == "campaign:   ModuleNotFoundError: No module named 'cutlass'", reasons
