"""analysis_scope = measured (ADR 0216): the planned cells whose records exist are analysed, no measurement job
is planned, and the planned cells left out are named. On the committed 2026-12-02e spread evidence (36 of the
pre-registered config's records, the closing group cut by the budget) and on crafted records without engine
sharing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import analysis_records as ar
import polars as pl
import pytest
import yaml
from conftest import seed_vega_bundle
from snakemake_api import plan
from snakemake_interface_common.exceptions import WorkflowError

from specjoule import config as sj_config
from specjoule import scope
from specjoule.analysis import aggregate, packed
from specjoule.analysis.checks import Thresholds, run_checks

ROOT = Path(__file__).resolve().parent.parent
SPREAD = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02e" / "spread"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
ANALYSIS_RULES = ["aggregate", "roofline", "checks", "derive", "variance", "figures", "report"]


def _snakemake(work: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--cores", "2", *args]
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout, env=ENV)


def _evidence_tree(tmp_path: Path) -> Path:
    """The committed records, timelines and GPU calibration beside the unedited pre-registered config; the
    config's relative paths (models, reference evidence) reach the repository through links."""
    work = tmp_path / "work"
    for sub in ("cells", "timelines"):  # committed packed (ADR 0246): Snakemake reads the files
        packed.copy_tree(SPREAD / "results" / sub, work / "results" / sub)
    shutil.copytree(SPREAD / "results" / "hardware", work / "results" / "hardware")
    shutil.copy(SPREAD / "h200-spread.yaml", work / "h200-spread.yaml")
    (work / "config").symlink_to(ROOT / "config")
    (work / "validation").symlink_to(ROOT / "validation")
    return work


def _planned_labels() -> list[str]:
    _, table = sj_config.plan(yaml.safe_load((SPREAD / "h200-spread.yaml").read_text()), "h200-spread.yaml")
    return [scope.cell_label(c) for c in table]


def test_the_cut_spread_campaign_is_analysed_as_preregistered(tmp_path):
    work = _evidence_tree(tmp_path)
    seed_vega_bundle(work)  # the figures rule reads it as a second run does (conftest)
    measured = ["--configfile", "h200-spread.yaml", "--config", "analysis_scope=measured"]
    # No measurement job is planned: the whole default target, dry. Planned through Snakemake's API in this process
    # (tests/snakemake_api.py: the same Snakefile, config file and --config value, the DAG's jobs by rule) instead
    # of a `snakemake -n` process: the same plan without a Snakemake start (1.5 s); the analysis below is the CLI's.
    dry = plan(work, work / "h200-spread.yaml", config={"analysis_scope": "measured"})
    assert "run_cell" not in dry and dry["aggregate"] == 1
    targets = ["results/checks.parquet", "results/curves.parquet", "results/report.html"]
    proc = _snakemake(work, *targets, *measured, "--allowed-rules", *ANALYSIS_RULES)
    assert proc.returncode == 0, proc.stderr[-4000:]
    checks = pl.read_parquet(work / "results" / "checks.parquet")
    records = pl.read_parquet(work / "results" / "records.parquet")
    assert records.height == 36

    # The unedited pre-registered config: its hash is the records' own, nothing to flag.
    prereg = checks.filter(pl.col("check") == "preregistration")
    assert prereg.height == 4 and set(prereg["status"]) == {"pass"}

    # Points and opening baselines: the energy ratios the committed analysis (closing baseline off) published.
    curves = pl.read_parquet(work / "results" / "curves.parquet")
    committed = pl.read_parquet(SPREAD / "results" / "curves.parquet")
    key = ["campaign_id", "cell_name"]
    both = committed.select(*key, "energy_ratio").join(curves.select(*key, "energy_ratio"), on=key, suffix="_now")
    assert both.height == committed.height == 24 and both["energy_ratio"].is_not_null().all()
    assert both["energy_ratio_now"].to_list() == pytest.approx(both["energy_ratio"].to_list(), rel=1e-12)
    # ... built on the same baseline for every one of the 32 records the committed analysis read
    was = pl.read_parquet(SPREAD / "results" / "records.parquet").select(*key, "baseline_mj_per_committed_token")
    same = was.join(records.select(*key, "baseline_mj_per_committed_token"), on=key, suffix="_now")
    assert same.height == was.height == 32
    assert same["baseline_mj_per_committed_token_now"].to_list() == pytest.approx(
        same["baseline_mj_per_committed_token"].to_list(), rel=1e-12)

    # baseline_drift runs on the closing window-0 records, window 0 against window 0.
    drift = checks.filter(pl.col("check") == "baseline_drift").sort("campaign_id")
    assert set(drift["status"]) == {"pass"}
    base = records.filter(pl.col("cell_name").is_in(["baseline--open", "baseline--close"]))
    expected = {}
    for (campaign,), g in base.group_by("campaign_id"):
        mj = dict(zip(g["cell_name"], g["mj_per_committed_token"]))
        o, c = mj["baseline--open"], mj["baseline--close"]
        expected[campaign] = (abs(o - c) / ((o + c) / 2), c / o - 1)
    assert drift["value"].to_list() == pytest.approx([expected[c][0] for c in drift["campaign_id"]], rel=1e-9)
    # ... and these are the session README's signed drifts (closing / opening - 1, B = 1 and 32, seeds 0 and 1)
    order = ["b1-random-s0", "b1-random-s1", "b32-random-s0", "b32-random-s1"]
    signed = [next(v[1] for k, v in expected.items() if o in k) for o in order]
    readme = (SPREAD.parent / "README.md").read_text()
    row = "| closing / opening − 1 | " + " | ".join(
        f"{v:+.2%}".replace("-", "−").replace("%", " %") for v in signed) + " |"
    assert row in readme
    assert all("window(s) 0 only" in d for d in drift["detail"])

    # What was not measured is said: the four closing window-1 cells, SGLang and engine replicate 1.
    on_disk = {f"{p.parent.name}/{p.stem}" for p in packed.tree_files(work / "results" / "cells", "*/*.parquet")}
    missing = [label for label in _planned_labels() if label not in on_disk]
    assert len(on_disk) == 36 and len(missing) == len(_planned_labels()) - 36
    assert sum(m.endswith("baseline--close--w1") and m.startswith("vllm-") and "-r1/" not in m for m in missing) == 4
    assert any(m.startswith("sglang-") for m in missing) and any("-r1/" in m for m in missing)
    md = (work / "results" / "checks.md").read_text()
    log = (work / "results" / "logs" / "aggregate.log").read_text()
    html = (work / "results" / "report.html").read_text()
    for campaign, cells in scope.by_campaign(missing).items():
        line = f"{campaign}: {len(cells)} not measured: {', '.join(cells)}"
        assert f"- {line}" in md and line in log and line in html, campaign
    assert f"{len(missing)} planned cell(s)" in md


def test_without_engine_sharing_only_the_records_there_are_are_analysed(tmp_path):
    # The crafted config's short windows are a test's, not a paper run's: said so, as a user would.
    cfg = {**ar.GPU_CONFIG, "analysis_scope": "measured", "paper_grade": False, "checks": {"min_window_s": 10}}
    (tmp_path / "config").symlink_to(ROOT / "config")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    # Nothing measured yet: a clear error, no job. The dry plans here go through Snakemake's API in this process
    # (tests/snakemake_api.py: the same Snakefile and config file), not `snakemake -n` processes: the same parse and
    # DAG without two Snakemake starts (about 3 s); the run that analyses is the CLI's, below.
    with pytest.raises(WorkflowError, match="analysis_scope = measured: none of the"):
        plan(tmp_path, tmp_path / "cfg.yaml")

    table = ar.cell_table(cfg)
    assert not sj_config.validate(cfg)["protocol"]["share_engines"]
    dropped = [c for c in table if c.role == "point"][:3]
    ar.write_campaigns(tmp_path, cfg=cfg, drop={(c.campaign_id, c.name) for c in dropped})
    # The default scope would measure exactly the dropped cells.
    cfg_planned = {**cfg, "analysis_scope": "planned"}
    (tmp_path / "planned.yaml").write_text(yaml.safe_dump(cfg_planned))
    planned = plan(tmp_path, tmp_path / "planned.yaml", targets=["results/records.parquet"])
    assert all(c.record_path in planned["_measures"] for c in dropped)

    # No measurement job is planned: with aggregate the one rule allowed, a planned run_cell would fail this run
    # (the dry run that said so separately cost a Snakemake start and asserted no more).
    proc = _snakemake(tmp_path, "results/records.parquet", "--configfile", "cfg.yaml", "--allowed-rules", "aggregate")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "run_cell" not in proc.stdout + proc.stderr and "rule aggregate" in proc.stdout + proc.stderr
    records = pl.read_parquet(tmp_path / "results" / "records.parquet")
    assert records.height == len(table) - len(dropped)
    log = (tmp_path / "results" / "logs" / "aggregate.log").read_text()
    assert f"{len(dropped)} planned cell(s)" in log
    for c in dropped:
        assert c.name in log


def test_a_closing_baseline_without_its_second_window_pairs_window_for_window(tmp_path):
    """Windows 2: the closing baseline's window 1 missing. Drift compares window 0 with window 0; the points
    are paired with the opening side's two windows alone (a one-window closing side would weigh unevenly)."""
    factors = {("opening_baseline", 0): 1.0, ("opening_baseline", 1): 1.2, ("closing_baseline", 0): 1.01,
               ("closing_baseline", 1): 1.5}

    def effect(row, cell, r, w):
        ar.scale_energy(row, factors.get((cell.role, w), 1.0))

    paths = ar.write_replicated(tmp_path, windows=2, effect=effect)
    cut = [p for p in paths if p.name == "baseline--close--w1.parquet"]
    assert cut
    for p in cut:
        p.unlink()
    df = aggregate.aggregate(sorted(set(paths) - set(cut)))
    checks = run_checks(df, Thresholds.from_config({"baseline_drift_max": 0.02}, {}), ar.CONFIG_HASH)
    drift = checks.filter(pl.col("check") == "baseline_drift")
    for row in drift.iter_rows(named=True):
        g = df.filter(pl.col("campaign_id") == row["campaign_id"])
        if g.filter(pl.col("cell_name") == "baseline--close").height == 0:
            continue
        mj = dict(zip(g["cell_name"], g["mj_per_committed_token"]))
        o, c = mj["baseline--open"], mj["baseline--close"]
        assert c / o == pytest.approx(1.01, rel=1e-6)
        assert row["value"] == pytest.approx(abs(o - c) / ((o + c) / 2), rel=1e-9) and row["status"] == "pass"
        assert "window(s) 0 only" in row["detail"]
        points = g.filter(pl.col("role") == "point")
        opening_mean = (mj["baseline--open"] + mj["baseline--open--w1"]) / 2
        assert points["baseline_mj_per_committed_token"].to_list() == pytest.approx([opening_mean] * points.height)
        assert set(points["baseline_n"]) == {2}
    assert drift.filter(pl.col("detail").str.contains("window\\(s\\) 0 only")).height == len(cut)
