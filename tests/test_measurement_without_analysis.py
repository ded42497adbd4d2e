"""The measurement path runs without the analysis extra (issue 22).

The offline bundle's `pipeline` profile ships no polars (bundle/profiles.toml), and the GPU image has none: on
2026-12-02 `snakemake` failed at parse time on the H200 because the config's plan imported the analysis package.
Every test here runs a real entry point in a subprocess with tests/fault_injectors/no_analysis_extra first on
PYTHONPATH (polars, altair, jinja2 and vl_convert missing), and reads the injector's exit line to see which of
them were asked for at all: an import caught and silently worked around shows there too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INJECTOR = REPO / "tests" / "fault_injectors" / "no_analysis_extra"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ANALYSIS_MODULES = ("polars", "altair", "jinja2", "vl_convert")


def run_blocked(args: list[str], cwd: Path = REPO, also_block: str = "", timeout: int = 300):
    """``args`` with the fault injector on the path; (result, the module names it refused)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(INJECTOR), str(REPO)]), "FAULT_BLOCK_MODULES": also_block}
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    m = re.search(r"^no_analysis_extra blocked: (.*)$", r.stderr, re.M)
    return r, set(m.group(1).split(", ")) if m else set()


def python_blocked(code: str, **kw):
    return run_blocked([sys.executable, "-c", textwrap.dedent(code)], **kw)


def test_the_fault_injector_blocks_the_analysis_modules():
    probe = f"""
        import importlib
        for name in {ANALYSIS_MODULES!r}:
            try:
                importlib.import_module(name)
                print(name, "imported")
            except ModuleNotFoundError as exc:
                print(name, "missing", exc.name)
    """
    r, refused = python_blocked(probe)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == [f"{m} missing {m}" for m in ANALYSIS_MODULES]
    assert refused == set(ANALYSIS_MODULES)
    # Without the injector they import here: the failures above are its doing.
    plain = subprocess.run([sys.executable, "-c", textwrap.dedent(probe)], capture_output=True, text=True, cwd=REPO)
    assert plain.stdout.split("\n")[:-1] == [f"{m} imported" for m in ANALYSIS_MODULES]


PLAN = """
    import sys
    from specjoule import config, engine_jobs
    cfg, table = config.plan(config.read_yaml(sys.argv[1]), sys.argv[1])
    jobs = engine_jobs.plan_jobs(table, cfg["version"])
    print("CELLS", len(table.cells), "JOBS", len(jobs.jobs))
"""


@pytest.mark.parametrize("config_file", ["config/config.yaml", "validation/h200-2026-12/config/h200-families-sweep.yaml"])
def test_the_workflow_plan_needs_no_analysis_module(config_file):
    """What rules/common.smk does at parse time: config.plan (every parse-time check, the cells), the group jobs."""
    r, refused = run_blocked([sys.executable, "-c", textwrap.dedent(PLAN), config_file])
    assert r.returncode == 0, r.stderr[-3000:]
    assert refused == set(), r.stderr[-3000:]
    assert re.search(r"^CELLS [1-9]\d* JOBS [1-9]\d*$", r.stdout, re.M), r.stdout


def test_reference_evidence_is_checked_for_existence_and_its_comparison_left_to_the_analysis(tmp_path):
    """config/h200-spread.yaml names report.reference_evidence: without polars the plan still succeeds, says what
    it left out; a folder that does not exist is still refused at parse time, naming key and value."""
    r, refused = run_blocked([sys.executable, "-c", textwrap.dedent(PLAN), "config/h200-spread.yaml"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert refused == {"polars"}
    assert "report.reference_evidence = validation/h200-2026-12/session-2026-12-01b/results/cells: it exists; " \
           "its records were not compared" in r.stderr
    missing = (REPO / "config/h200-spread.yaml").read_text().replace(
        "validation/h200-2026-12/session-2026-12-01b/results/cells", str(tmp_path / "no-such-evidence"))
    (tmp_path / "missing.yaml").write_text(missing)
    r, _ = run_blocked([sys.executable, "-c", textwrap.dedent(PLAN), str(tmp_path / "missing.yaml")])
    assert r.returncode == 1
    assert f"config error at report.reference_evidence = '{tmp_path / 'no-such-evidence'}': no such file" in r.stderr


@pytest.mark.parametrize("module", [
    "specjoule.runner", "specjoule.engines.vllm", "specjoule.engines.sglang", "specjoule.engines.worker",
    "specjoule.meter", "specjoule.meter.nvml", "specjoule.hardware", "specjoule.resolve_models", "specjoule.loadgen",
])
def test_measurement_modules_import_without_analysis_modules(module):
    r, refused = python_blocked(f"import {module}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert refused == set()


def test_runner_and_calibration_entry_points_run_without_analysis_modules(tmp_path):
    r, refused = run_blocked([sys.executable, "-m", "specjoule.runner", "--help"])
    assert r.returncode == 0 and "--cell-id" in r.stdout, r.stderr[-3000:]
    assert refused == set()
    # No GPU here: calibrate goes as far as NVML and says so (not a missing module).
    r, refused = run_blocked([sys.executable, "-m", "specjoule.hardware", "calibrate", "--out", str(tmp_path / "hw")])
    assert "calibrate needs an NVIDIA GPU" in r.stderr, r.stderr[-3000:]
    assert "ModuleNotFoundError" not in r.stderr and refused == set()


def test_group_planning_trusts_a_record_without_polars(tmp_path):
    """A record measured one cell per job (no claim stamp) is verified by reading its id and version: without
    polars that read must still work, or every such record is silently measured again on the GPU node."""
    code = f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from specjoule import config, engine_jobs, records
        cfg, table = config.plan(config.read_yaml({str(REPO / "validation/h200-2026-12/config/h200-families-sweep.yaml")!r}))
        first = table.cells[0]
        records.write_record({{**first.identity(), "version_param": cfg["version"]}}, first.record_path)
        jobs = engine_jobs.plan_jobs(table, cfg["version"])
        print("PROOF", jobs.proof[first.record_path] == first.record_path, first.record_path in jobs.pending)
    """
    r, refused = python_blocked(code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "PROOF True False" in r.stdout
    assert refused == set()


def test_snakemake_dry_run_of_the_families_sweep_without_analysis_modules(tmp_path):
    """The failure seen on the H200: Snakemake's parse of the workflow (rules/common.smk → config.plan)."""
    r, refused = run_blocked([SNAKEMAKE, "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                              "--configfile", str(REPO / "validation/h200-2026-12/config/h200-families-sweep.yaml")])
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert re.search(r"^run_cell\s+6$", r.stdout, re.M), r.stdout[-3000:]
    # Snakemake's own HTML-report plugin asks for jinja2 (a Snakemake dependency, so every node running it has
    # it) and goes on without it; the project's code asks for none (the plans above, with all four blocked).
    assert refused <= {"jinja2"}


def test_plan_rule_writes_the_plan_and_says_why_there_are_no_predictions(tmp_path):
    r, refused = run_blocked([SNAKEMAKE, "plan", "--cores", "1", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                              "--configfile", str(REPO / "config/config.yaml")])
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    rows = (tmp_path / "results/plan.tsv").read_text().splitlines()
    assert len(rows) == 1 + 4  # header and the demo's four cells
    assert "no PREDICTIONS: polars is not installed here" in (tmp_path / "results/logs/plan.log").read_text()
    assert refused - {"jinja2"} == {"polars"}  # jinja2: Snakemake's own report plugin, as above


def test_profile_rounds_keeps_the_traces_and_says_how_to_analyse_them(tmp_path):
    (tmp_path / "c1").mkdir()
    code = f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO / "tools" / "device")!r})
        import profile_rounds
        print("RC", profile_rounds.analyze(Path({str(tmp_path)!r})))
    """
    r, refused = python_blocked(code)
    assert r.returncode == 0 and "RC 0" in r.stdout, r.stderr[-3000:]
    assert f"python -m specjoule.analysis.rounds {tmp_path}" in r.stderr
    assert refused == {"polars"}
    r, refused = run_blocked([sys.executable, str(REPO / "tools/device/profile_rounds.py"), "--help"])
    assert r.returncode == 0 and refused == set(), r.stderr[-3000:]


def test_the_install_smoke_passes_here_and_fails_on_a_broken_measurement_path():
    smoke = [sys.executable, str(REPO / "tools/device/smoke_measurement_path.py"),
             "--config", str(REPO / "validation/h200-2026-12/config/h200-families-sweep.yaml")]
    r, refused = run_blocked(smoke)
    assert r.returncode == 0 and "MEASUREMENT PATH: OK" in r.stdout, r.stderr[-3000:]
    assert refused == set()
    # A module of the path itself missing (as polars was reached from it before issue 22's fix): exit 1, named.
    r, _ = run_blocked(smoke, also_block="specjoule.engine_jobs")
    assert r.returncode == 1
    assert "MEASUREMENT PATH: FAILED: no module named 'specjoule.engine_jobs'" in r.stderr
