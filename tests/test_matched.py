"""Energy at matched TBT (ADR 0114) on crafted records whose TBT and energy move with the load level: the expected
numbers are solved by hand from the same formulas the records were built from, not by the module's code."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import analysis_records as ar
import numpy as np
import polars as pl
import pytest
import yaml
from snakemake_api import copy_workflow

from specjoule import config as sj_config
from specjoule.analysis import aggregate, checks, config_hash_of, derive, matched

BATCHES = [4, 8, 16]
TBT_BASE = {"baseline": 0.004, "syn--L2": 0.003, "syn--L4": 0.0025, "ngram": 0.0045}  # seconds at B → × (1 + B/8)
ENERGY = {"baseline": 1.0, "syn--L2": 0.85, "syn--L4": 0.7, "ngram": 0.95}  # mJ/token = 4000 / B × factor


def _arm(name: str) -> str:
    return name.split("--")[0] if name.startswith("baseline") else name


def tbt(name: str, b: float) -> float:
    return TBT_BASE[_arm(name)] * (1 + b / 8)


def mj(name: str, b: int, seed: int) -> float:
    jitter = 1.0 + 0.01 * seed if not name.startswith("baseline") else 1.0
    return 4000.0 / b * ENERGY[_arm(name)] * jitter


def _setup(tmp: Path, meter: str = "nvml", workloads: dict | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    records = aggregate.aggregate(_write(tmp, meter, workloads))
    found = checks.run_checks(records, checks.Thresholds.from_config({}), ar.CONFIG_HASH)
    return derive.derive(records, found, allow_failed_checks=True), records


def _write(tmp: Path, meter: str = "nvml", workloads: dict | None = None) -> list[Path]:
    """The crafted records under ``tmp`` (the pipeline's layout); their paths."""
    cfg = copy.deepcopy(ar.GPU_CONFIG)
    cfg["batch_sizes"] = BATCHES
    cfg["workloads"] = workloads or {"closed": cfg["workloads"]["closed"]}
    mutate = {}
    for cell in ar.cell_table(cfg):
        load = cell.spec["workload"].get("concurrency") or cell.batch_size

        def set_row(row, cell=cell, load=load):
            row.update(tpot_mean_s=tbt(cell.name, load))
            if row.get("energy_j") is not None:
                e = mj(cell.name, load, cell.seed) * row["committed_tokens"] / 1000
                row.update(energy_j=e, energy_j_per_gpu=[e], mean_power_w=e / row["window_s"])
        mutate[(cell.campaign_id, cell.name)] = set_row
    return ar.write_campaigns(tmp, cfg=cfg, mutate=mutate, meter=meter)


def _solve(name: str, target_s: float) -> tuple[float, int, int, float]:
    """Load where the arm's TBT equals the target, its bracketing batches, and the interpolation weight."""
    b_star = (target_s / TBT_BASE[_arm(name)] - 1) * 8
    lo = max(b for b in BATCHES if b <= b_star)
    hi = min(b for b in BATCHES if b >= b_star)
    w = 0.0 if hi == lo else (b_star - lo) / (hi - lo)  # TBT is linear in B: the TBT weight is the load weight
    return b_star, lo, hi, w


def test_energy_of_each_arm_at_matched_tbt_with_its_interval(tmp_path):
    curves, records = _setup(tmp_path)
    table = matched.matched_latency(curves, records, [7.0, 9.0])
    assert table.schema == matched.MATCHED_SCHEMA
    row = table.filter((pl.col("acceptance_name") == "L4") & (pl.col("target_ms") == 7.0)).row(0, named=True)
    b_star, lo, hi, w = _solve("syn--L4", 0.007)
    bb, blo, bhi, bw = _solve("baseline", 0.007)
    assert (b_star, lo, hi, bb, blo, bhi) == pytest.approx((14.4, 8, 16, 6.0, 4, 8))
    per_seed = []
    for seed in (0, 1, 2):
        arm = mj("syn--L4", lo, seed) + w * (mj("syn--L4", hi, seed) - mj("syn--L4", lo, seed))
        base = mj("baseline", blo, seed) + bw * (mj("baseline", bhi, seed) - mj("baseline", blo, seed))
        per_seed.append(arm / base)
    assert row["load_axis"] == "batch_size" and row["loads"] == [4.0, 8.0, 16.0] and row["n_seeds"] == 3
    assert row["load_at_target"] == pytest.approx(14.4) and row["baseline_load_at_target"] == pytest.approx(6.0)
    assert row["baseline_mj_per_committed_token_at_target"] == pytest.approx(750.0)
    assert row["energy_ratio_at_target"] == pytest.approx(np.mean(per_seed))
    # the seed summary's interval (ADR 0027): every resample of three seeds, exact
    lo_ci, hi_ci = derive.bootstrap_interval(np.array([sorted(per_seed)]), np.random.default_rng(0))
    assert (row["energy_ratio_ci_low"], row["energy_ratio_ci_high"]) == pytest.approx((lo_ci[0], hi_ci[0]))
    assert row["energy_ratio_ci_low"] < row["energy_ratio_at_target"] < row["energy_ratio_ci_high"]
    assert row["reason"] is None


def test_targets_outside_the_measured_tbt_are_not_extrapolated(tmp_path):
    curves, records = _setup(tmp_path)
    table = matched.matched_latency(curves, records, [3.0, 5.0, 30.0])
    low = table.filter((pl.col("acceptance_name") == "L2") & (pl.col("target_ms") == 3.0)).row(0, named=True)
    assert low["energy_ratio_at_target"] is None and low["load_at_target"] is None
    assert low["reason"].startswith("target below the lowest TBT measured (4.5 ms at load 4)")
    high = table.filter((pl.col("scheme") == "ngram") & (pl.col("target_ms") == 30.0)).row(0, named=True)
    assert "target above the highest TBT measured (13.5 ms at load 16)" in high["reason"]
    # 5 ms: inside L = 4's curve (3.75 .. 7.5 ms), below the baseline's (6 .. 12 ms): no ratio, and why.
    only_arm = table.filter((pl.col("acceptance_name") == "L4") & (pl.col("target_ms") == 5.0)).row(0, named=True)
    assert only_arm["load_at_target"] is not None and only_arm["energy_ratio_at_target"] is None
    assert "baseline: target below the lowest TBT measured (6 ms at load 4)" in only_arm["reason"]


def test_without_energy_the_load_and_throughput_at_target_remain(tmp_path):
    curves, records = _setup(tmp_path, meter="none")
    row = matched.matched_latency(curves, records, [7.0]).filter(pl.col("acceptance_name") == "L4").row(0, named=True)
    assert row["mj_per_committed_token_at_target"] is None and row["energy_ratio_at_target"] is None
    assert row["load_at_target"] == pytest.approx(14.4) and "energy_measured" in row["energy_refused_reason"]
    assert row["tokens_per_s_at_target"] is not None


def test_closed_loops_interpolate_across_concurrency(tmp_path):
    wl = {"kind": "closed_loop", "prompt_len": 64, "output_len": 64, "window_s": 30}
    workloads = {f"c{n}": {**wl, "concurrency": n} for n in (2, 4)}
    curves, records = _setup(tmp_path, workloads=workloads)
    row = matched.matched_latency(curves, records, [5.0]).filter(pl.col("acceptance_name") == "L4").row(0, named=True)
    # The load is the number of clients (every batch size of a concurrency averaged): TBT 3.125 ms at 2 clients,
    # 3.75 ms at 4; 5 ms is above both, so there is no crossing.
    assert row["load_axis"] == "concurrency" and row["loads"] == [2.0, 4.0]
    assert "target above the highest TBT measured (3.75 ms at load 4)" in row["reason"]


def test_empty_inputs_give_an_empty_table():
    empty = pl.DataFrame(schema=derive.curve_schema())
    assert matched.matched_latency(empty, empty, [10.0]).schema == matched.MATCHED_SCHEMA


def test_the_rule_writes_the_table_from_crafted_records(tmp_path):
    """rules/analyze.smk `matched_latency` through Snakemake, on crafted records (no engine job may run)."""
    work = tmp_path / "wf"
    work.mkdir()
    copy_workflow(work)
    cfg = copy.deepcopy(ar.GPU_CONFIG)
    # The window check pre-registered at the crafted window's length: a shorter window than the check is refused
    # when the plan is parsed (ADR 0130).
    cfg.update(batch_sizes=BATCHES, workloads={"closed": cfg["workloads"]["closed"]}, report={"tbt_targets_ms": [7.0]},
               checks={"allow_failed_checks": True, "min_window_s": cfg["workloads"]["closed"]["min_window_s"]})
    (work / "crafted.yaml").write_text(yaml.safe_dump(cfg))
    # The records alone: the rule analyses them (this process's aggregate, checks and derive of them went unread).
    _write(work)  # writes results/cells/... under work (the pipeline's layout)
    snakemake = str(Path(sys.executable).parent / "snakemake")
    proc = subprocess.run([snakemake, "results/matched_latency.parquet", "--configfile", "crafted.yaml", "--cores", "1"],
                          cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "run_cell" not in proc.stderr, proc.stderr[-3000:]
    table = pl.read_parquet(work / "results/matched_latency.parquet")
    row = table.filter(pl.col("acceptance_name") == "L4").row(0, named=True)
    assert row["target_ms"] == 7.0 and row["load_at_target"] == pytest.approx(14.4)
    assert config_hash_of(work / "results/matched_latency.parquet") == sj_config.config_hash(sj_config.load(work / "crafted.yaml"))
    assert "arm × target rows" in (work / "results/logs/matched_latency.log").read_text()
