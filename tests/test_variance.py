"""The variance budget (ADR 0084): the nested method-of-moments estimator against the textbook formulas,
honest "not estimable" rows, the command line on the committed H200 evidence, and the rules."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import analysis_records as ar
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import yaml

from specjoule.analysis import aggregate, compare_evidence, evidence, packed, variance

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "validation" / "h200-2026-12"
VLLM_RUNS = [
    EVIDENCE / "session-2026-12-01" / "closed" / "results" / "cells",
    EVIDENCE / "session-2026-12-01b" / "results" / "cells",
]
FINE_TO_COARSE = list(reversed(variance.COMPONENTS))


def _balanced(sizes: dict[str, int], sds: dict[str, float], configs: int, seed: int = 7) -> pl.DataFrame:
    """A balanced nested design: ``sizes[level]`` members per parent, effects drawn with ``sds[level]``."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(configs):
        eff: dict[tuple, float] = {}
        for ids in itertools.product(*(range(sizes[lv]) for lv in variance.COMPONENTS)):
            y = 10.0 * c
            for depth, lv in enumerate(variance.COMPONENTS):
                key = (lv, *ids[: depth + 1])
                if key not in eff:
                    eff[key] = rng.normal(0, sds[lv])
                y += eff[key]
            rows.append(
                {
                    "config": f"c{c}",
                    **{lv: "/".join(map(str, ids[: d + 1])) for d, lv in enumerate(variance.COMPONENTS)},
                    "y": y,
                }
            )
    return pl.DataFrame(rows)


def test_balanced_design_gives_the_textbook_nested_anova():
    sizes = {"board": 3, "run": 2, "engine_restart": 2, "seed": 3, "window": 2}
    obs = _balanced(
        sizes, {"board": 0.05, "run": 0.02, "engine_restart": 0.03, "seed": 0.01, "window": 0.02}, configs=3
    )
    # Mean squares per level, pooled over configurations: MS_l = n_below Σ (ȳ_group − ȳ_parent)² / df.
    means = {}
    parents = ["config", *variance.COMPONENTS]
    for lv in parents:
        keys = ["config"] if lv == "config" else ["config", lv]
        means[lv] = obs.group_by(keys).agg(pl.col("y").mean().alias(f"m_{lv}"))
    below = {"window": 1}
    for lv in FINE_TO_COARSE[1:]:
        below[lv] = (
            below[FINE_TO_COARSE[FINE_TO_COARSE.index(lv) - 1]] * sizes[FINE_TO_COARSE[FINE_TO_COARSE.index(lv) - 1]]
        )
    ms = {}
    for lv in variance.COMPONENTS:
        parent = parents[parents.index(lv) - 1]
        t = obs.join(means[lv], on=["config", lv]).join(
            means[parent], on=["config"] if parent == "config" else ["config", parent]
        )
        ss = t.select(((pl.col(f"m_{lv}") - pl.col(f"m_{parent}")) ** 2).sum()).item()  # per observation: × n_below
        groups_parent = obs.select(
            pl.struct(*(["config"] if parent == "config" else ["config", parent])).n_unique()
        ).item()
        ms[lv] = ss / (groups_parent * (sizes[lv] - 1))
    expected = {"window": ms["window"]}
    for lv in FINE_TO_COARSE[1:]:
        finer = FINE_TO_COARSE[FINE_TO_COARSE.index(lv) - 1]
        expected[lv] = (ms[lv] - ms[finer]) / below[lv]
    got = dict(zip(FINE_TO_COARSE, variance.estimate(obs, FINE_TO_COARSE)))
    for lv in variance.COMPONENTS:
        assert got[lv] == pytest.approx(expected[lv], rel=1e-8), lv


def test_unbalanced_one_way_design_gives_the_classical_estimator():
    sizes = [2, 3, 5, 1, 4]
    rng = np.random.default_rng(3)
    rows = []
    for g, n in enumerate(sizes):
        a = rng.normal(0, 0.3)
        rows += [
            {"config": "c", "seed": f"s{g}", "window": f"s{g}/w{i}", "y": a + rng.normal(0, 0.1)} for i in range(n)
        ]
    obs = pl.DataFrame(rows)
    y = [obs.filter(pl.col("seed") == f"s{g}")["y"].to_numpy() for g in range(len(sizes))]
    N, a = sum(sizes), len(sizes)
    grand = np.concatenate(y).mean()
    ms_within = sum(((v - v.mean()) ** 2).sum() for v in y) / (N - a)
    ms_between = sum(len(v) * (v.mean() - grand) ** 2 for v in y) / (a - 1)
    n0 = (N - sum(n * n for n in sizes) / N) / (a - 1)
    w, s = variance.estimate(obs, ["window", "seed"])
    assert w == pytest.approx(ms_within) and s == pytest.approx((ms_between - ms_within) / n0)


def test_a_negative_estimate_counts_as_zero_and_says_so():
    # Windows spread ±1 inside every seed, seed means identical: the seed component estimates below 0.
    rows = [
        {
            "config": "c",
            "board": "b",
            "run": "b/r",
            "engine_restart": "b/r/e",
            "seed": f"s{s}",
            "window": f"s{s}/w{w}",
            "y": (-1.0, 1.0)[w] + 0.001 * s,
        }
        for s in range(4)
        for w in range(2)
    ]
    rows += [{**r, "config": "d"} for r in rows]
    out = {r["component"]: r for r in variance.decompose(pl.DataFrame(rows))}
    assert out["seed"]["variance_raw"] < 0 and out["seed"]["variance"] == 0.0 and "negative" in out["seed"]["note"]
    assert out["window"]["share"] == pytest.approx(1.0)


def test_levels_with_one_member_are_not_estimable_never_zero(tmp_path):
    df = aggregate.aggregate(ar.write_replicated(tmp_path / "one", cfg=_cfg()))
    t = variance.budget(df)
    mj = {r["component"]: r for r in t.filter(pl.col("metric") == "mj_per_committed_token").iter_rows(named=True)}
    # One window per seed: windows cannot be told from seeds; the seed row holds both.
    assert mj["window"]["estimable"] is False and mj["window"]["variance"] is None
    assert "not separable from seed" in mj["window"]["note"]
    assert mj["seed"]["estimable"] is True and mj["seed"]["includes"] == ["seed", "window"]
    # One GPU and one run: no board or run variance can be seen at all.
    for lv in ("board", "run"):
        assert mj[lv]["estimable"] is False and mj[lv]["variance"] is None and "not estimable" in mj[lv]["note"]
    # The opening and closing baselines are two engine launches: the restart level has its degrees of freedom.
    assert mj["engine_restart"]["estimable"] is True and mj["engine_restart"]["df"] == 1
    assert set(t.columns) == set(variance.VARIANCE_COLUMNS)


def test_replicated_records_estimate_every_level_they_vary(tmp_path):
    rng = np.random.default_rng(11)
    noise = {}

    def effect(row, cell, r, w):
        key = (cell.campaign_id, cell.name, r, w)
        noise[key] = rng.normal(0, 0.01)
        ar.scale_energy(row, math.exp(noise[key] + 0.02 * r))

    df = aggregate.aggregate(ar.write_replicated(tmp_path, windows=3, engine_replicates=2, cfg=_cfg(), effect=effect))
    t = variance.budget(df)
    for metric in variance.METRICS:
        rows = {r["component"]: r for r in t.filter(pl.col("metric") == metric).iter_rows(named=True)}
        for lv in ("engine_restart", "seed", "window"):
            assert rows[lv]["estimable"] is True, (metric, lv)
        assert rows["total"]["variance"] == pytest.approx(
            sum(rows[lv]["variance"] for lv in ("engine_restart", "seed", "window"))
        )
        # windows carry the drawn 1 % noise (log scale): the window component is its square, roughly
        assert 0.4e-4 < rows["window"]["variance"] < 2.5e-4, (metric, rows["window"])


def _cfg() -> dict:
    return {**ar.GPU_CONFIG, "workloads": {"closed": ar.GPU_CONFIG["workloads"]["closed"]}}


def test_command_line_on_the_committed_vllm_sessions(tmp_path, capsys):
    out = tmp_path / "variance.parquet"
    assert variance.main([*map(str, VLLM_RUNS), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    t = pl.read_parquet(out)
    assert tuple(t.columns) == variance.VARIANCE_COLUMNS
    fam = t.filter(pl.col("family") == "vllm-qwen3b-closed-cg1")
    ratio = {r["component"]: r for r in fam.filter(pl.col("metric") == "energy_ratio").iter_rows(named=True)}
    # One window, one seed, one engine launch per point and run: only the sum over levels can be seen, at the board.
    assert ratio["board"]["estimable"] and ratio["board"]["includes"] == list(variance.COMPONENTS)
    assert [ratio[lv]["estimable"] for lv in variance.COMPONENTS[1:]] == [False] * 4
    # ...and that sum is the pooled variance of the two runs' log ratios, from the ratios themselves.
    table = compare_evidence.compare_sources(*VLLM_RUNS)
    d = np.log(table["energy_ratio_a"].to_numpy() / table["energy_ratio_b"].to_numpy())
    assert ratio["board"]["variance"] == pytest.approx((d**2 / 2).mean(), rel=1e-9) and ratio["board"]["df"] == 6
    mj = {r["component"]: r for r in fam.filter(pl.col("metric") == "mj_per_committed_token").iter_rows(named=True)}
    assert mj["engine_restart"]["estimable"] and mj["engine_restart"]["df"] == 4  # opening vs closing, 2 B × 2 runs
    doc = pq.read_schema(out).field("includes").metadata[b"doc"].decode()
    assert doc == variance.VARIANCE_DOCS["includes"]
    assert "vllm-qwen3b-closed-cg1 — energy_ratio" in text and "not separable from board" in text


def test_a_tree_of_sessions_reads_as_its_runs():
    """The whole evidence folder as one source: each session's results/cells is its own run, a marked/ copy of a
    record counts once, and the budget is the one of the sessions named one by one."""
    sessions = [
        *VLLM_RUNS,
        EVIDENCE / "session-2026-11-30c" / "results" / "cells",
        EVIDENCE / "session-2026-12-01" / "openloop" / "results" / "cells",
        EVIDENCE / "session-2026-12-01d" / "qwen3-8b" / "results" / "cells",
        EVIDENCE / "session-2026-12-01d" / "mimo-mtp" / "results" / "cells",
        EVIDENCE / "session-2026-12-02" / "families" / "results" / "cells",
        EVIDENCE / "session-2026-12-02" / "sweep-qwen3-8b" / "results" / "cells",
        EVIDENCE / "session-2026-12-02b" / "sglang-schemes" / "results" / "cells",
        EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells",
        EVIDENCE / "session-2026-12-02c" / "glm-mla" / "results" / "cells",
        EVIDENCE / "session-2026-12-02d" / "gemma4" / "results" / "cells",
        EVIDENCE / "session-2026-12-02e" / "spread" / "results" / "cells",
        EVIDENCE / "session-2026-12-02f" / "gdn" / "results" / "cells",
        EVIDENCE / "session-2026-12-02f" / "machine-1" / "results" / "cells",
        EVIDENCE / "session-2026-12-03" / "gdn-sglang" / "results" / "cells",
        EVIDENCE / "session-2026-12-03" / "machine-1" / "results" / "cells",
        EVIDENCE / "session-2026-12-03b" / "families-sglang" / "results" / "cells",
        EVIDENCE / "session-2026-12-03c" / "gdn-pinned" / "results" / "cells",
        EVIDENCE / "session-2026-12-03c" / "glm-v2" / "results" / "cells",
        EVIDENCE / "session-2026-12-03d" / "glm-v2" / "results" / "cells",
        EVIDENCE / "session-2026-12-03d" / "depth" / "results" / "cells",
        EVIDENCE / "session-2026-12-03e" / "depth" / "results" / "cells",
        EVIDENCE / "session-2026-12-03f" / "gdn-sglang" / "results" / "cells",
        EVIDENCE / "session-2026-12-03f" / "gemma4-mm" / "results" / "cells",
        EVIDENCE / "session-2026-12-03g" / "capture-moe" / "results" / "cells",
        EVIDENCE / "session-2026-12-03g" / "machine-1" / "results" / "cells",
        EVIDENCE / "session-2026-12-04" / "capture-moe" / "results" / "cells",
        EVIDENCE / "session-2026-12-04b" / "capture-dense" / "results" / "cells",
        EVIDENCE / "session-2026-12-04c" / "draft-async" / "results" / "cells",
        EVIDENCE / "session-2026-12-04c" / "gdn-lost" / "results" / "cells",
        EVIDENCE / "session-2026-12-04d" / "gdn-eagle3" / "results" / "cells",
        EVIDENCE / "session-2026-12-04e" / "gdn-eagle3-sglang" / "results" / "cells",
        EVIDENCE / "session-2026-12-04e" / "openloop-sglang" / "results" / "cells",
        EVIDENCE / "session-2026-12-04f" / "spread-r1" / "results" / "cells",
        EVIDENCE / "session-2026-12-04g" / "spread-sglang-r0" / "results" / "cells",
    ]
    from polars.testing import assert_frame_equal

    tree = variance.budget_of_sources([EVIDENCE]).drop("sources")
    named = variance.budget_of_sources(sessions).drop("sources")
    assert_frame_equal(tree, named, check_exact=False, rel_tol=1e-9)  # the same sums, added in another order


def test_the_rules_write_the_variance_and_reproducibility_tables(tmp_path):
    """The rules on a copy of the committed one-GPU evidence, the 2026-12-01 closed grid as its reference."""

    work = tmp_path / "work"
    packed.copy_tree(EVIDENCE / "session-2026-12-01b" / "results" / "cells", work / "results" / "cells")
    cfg = yaml.safe_load((EVIDENCE / "session-2026-12-01b" / "h200-engines-one-gpu.yaml").read_text())
    cfg["report"]["reference_evidence"] = str(VLLM_RUNS[0])
    (work / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [
        snakemake,
        "results/variance.parquet",
        "results/reproducibility.parquet",
        "-s",
        str(ROOT / "Snakefile"),
        "--cores",
        "2",
        "--configfile",
        "cfg.yaml",
        "--allowed-rules",
        "aggregate",
        "variance",
        "reproducibility",
    ]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    t = pl.read_parquet(work / "results" / "variance.parquet")
    assert set(t["family"]) == {"vllm-qwen3b-closed-cg1", "sglang-qwen3b-closed-cg1"} and len(set(t["sources"][0])) == 2
    rep = pl.read_parquet(work / "results" / "reproducibility.parquet")
    mv6 = rep.filter((pl.col("configured_L") == 6) & (pl.col("batch_size") == 1)).row(0, named=True)
    assert mv6["shift"] == pytest.approx(0.7588 / 0.9282 - 1, abs=1e-3) and mv6["reproduces"] is False
    for rule in ("variance", "reproducibility"):
        assert (work / "results" / "logs" / f"{rule}.log").read_text().strip(), rule
    # A reference that does not exist stops the plan, naming key and value.
    cfg["report"]["reference_evidence"] = str(tmp_path / "nowhere")
    (work / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    # Planned through Snakemake's API in this process (tests/snakemake_api.py: the same Snakefile, config file and
    # targets as `-n`), not a second Snakemake process: the same parse-time refusal without a Snakemake start.
    from snakemake_api import plan
    from snakemake_interface_common.exceptions import WorkflowError

    with pytest.raises(WorkflowError) as info:
        plan(work, work / "cfg.yaml", targets=cmd[1:3])
    assert f"config error at report.reference_evidence = '{tmp_path / 'nowhere'}'" in str(info.value)


def test_a_configuration_is_matched_on_the_fields_every_record_of_its_family_recorded():
    """MTP on MiMo-7B, sessions 2026-12-01d and 2026-12-02b on two boards: the older records lack the later
    engine_config field fuse_allreduce_rms. Matched on what both recorded (ADR 0181), L = 3 and 4 are two
    configurations seen on two boards, and the board's variance of the ratio is the pooled one of their log shifts."""
    runs = [
        EVIDENCE / "session-2026-12-01d" / "mimo-mtp" / "results" / "cells",
        EVIDENCE / "session-2026-12-02b" / "mimo-mtp" / "results" / "cells",
    ]
    t = variance.budget_of_sources(runs)
    row = t.filter(
        (pl.col("family") == "vllm-mimo_7b-closed-cg1")
        & (pl.col("metric") == "energy_ratio")
        & (pl.col("component") == "board")
    ).row(0, named=True)
    assert row["estimable"] and row["n_configurations"] == 2 and row["df"] == 2
    table = compare_evidence.compare_sources(*runs)
    d = np.log(table["energy_ratio_a"].to_numpy() / table["energy_ratio_b"].to_numpy())
    assert row["variance"] == pytest.approx((d**2 / 2).mean(), rel=1e-9)


def test_two_board_classes_are_two_configurations_never_one_board_apart():
    """ADR 0241: the GPU model is a measured parameter. The MiMo-7B MTP runs of 2026-12-01d and 2026-12-02b (two
    H200 boards) match as two configurations seen on two boards; the same records with the second run's board
    renamed an H100 match nothing, and the variance budget no longer has a board level to estimate, instead of
    counting the change of class as a board's variance."""
    a, b = (
        evidence.load(EVIDENCE / session / "mimo-mtp" / "results" / "cells")
        for session in ("session-2026-12-01d", "session-2026-12-02b")
    )
    assert compare_evidence.compare(a, b).height == 2
    h100 = b.with_columns(pl.lit(["NVIDIA H100 80GB HBM3"]).alias("gpu_names"))
    h100 = h100.with_columns(evidence.measure_key(h100))
    assert compare_evidence.compare(a, h100).height == 0

    def board_row(frame: pl.DataFrame) -> dict:
        return (
            variance.budget(pl.concat([a, frame], how="diagonal_relaxed"))
            .filter(
                (pl.col("family") == "vllm-mimo_7b-closed-cg1")
                & (pl.col("metric") == "energy_ratio")
                & (pl.col("component") == "board")
            )
            .row(0, named=True)
        )

    assert board_row(b)["estimable"] is True
    assert board_row(h100)["estimable"] is False


def test_the_budget_does_not_depend_on_the_order_of_its_records():
    """Bit for bit: the same observations in another row order give the same table (floating-point sums are summed
    in one order), so an analysis run again over the same records writes the same digits."""
    sizes = {"board": 2, "run": 2, "engine_restart": 2, "seed": 3, "window": 4}
    obs = _balanced(
        sizes, {"board": 0.05, "run": 0.02, "engine_restart": 0.03, "seed": 0.01, "window": 0.02}, configs=4
    ).with_columns(pl.col("y") * 1e-3 + 0.1)
    reference = variance.decompose(obs)
    for seed in range(8):
        shuffled = obs.sample(fraction=1.0, shuffle=True, seed=seed)
        assert shuffled["y"].to_list() != obs["y"].to_list()
        assert variance.decompose(shuffled) == reference, seed
