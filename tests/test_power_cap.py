"""The share of a window held at the board's power cap and its SM clock (ADR 0230), from timelines.

By hand on a written timeline, then on the committed 2026-12-03d depth evidence, whose B = 32 speculative
windows ran at the H200's 700 W cap (README of that session), and the report's caveat that names them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from specjoule.analysis import aggregate, packed
from specjoule.analysis import window_activity as wa
from specjoule.report import render

ROOT = Path(__file__).resolve().parents[1]
DEPTH_1203D = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03d" / "depth"
GLM_V2_1203D = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03d" / "glm-v2"


def _timeline(path: Path, gpus: dict[int, list[tuple[bool, int | None, int]]]) -> Path:
    """Rows (in_window, throttle_reasons, sm_clock_mhz) per GPU at 10 Hz; utilization 50 % throughout."""
    rows = [
        {"t_monotonic": 1000.0 + i / 10 + g / 100, "gpu_index": g, "in_window": inside, "throttle_reasons": reasons,
         "sm_clock_mhz": clock, "gpu_util_pct": 50.0}
        for g, samples in gpus.items()
        for i, (inside, reasons, clock) in enumerate(samples)
    ]
    schema = {"t_monotonic": pl.Float64, "gpu_index": pl.Int32, "in_window": pl.Boolean,
              "throttle_reasons": pl.Int64, "sm_clock_mhz": pl.Int64, "gpu_util_pct": pl.Float64}
    pl.DataFrame(rows, schema=schema).write_parquet(path)
    return path


def test_share_and_clock_by_hand_per_gpu_then_the_worst_gpu(tmp_path):
    # GPU 0: 4 samples in the window, 1 with the cap bit (0x4 among others: 0x4 | 0x1 = 5), clocks 1980 1980 1800
    # 1800 (median 1890); outside the window, capped at 1000 MHz: never seen. GPU 1: 2 of 2 capped, 1700 MHz.
    gpu0 = [(False, 4, 1000), (True, 5, 1980), (True, 0, 1980), (True, 1, 1800), (True, 0, 1800), (False, 4, 1000)]
    gpu1 = [(True, 4, 1700), (True, 4, 1700)]
    two = wa.of_timelines([_timeline(tmp_path / "two.parquet", {0: gpu0, 1: gpu1})]).row(0, named=True)
    assert two["window_power_capped_share"] == 1.0 and two["window_sm_clock_median_mhz"] == 1700.0
    one = wa.of_timelines([_timeline(tmp_path / "one.parquet", {0: gpu0})]).row(0, named=True)
    assert one["window_power_capped_share"] == pytest.approx(1 / 4) and one["window_sm_clock_median_mhz"] == 1890.0
    # a reading NVML did not give is not a sample: null reasons are left out of the share, never counted as 0
    gaps = wa.of_timelines([_timeline(tmp_path / "gaps.parquet", {0: [(True, None, 1980), (True, 4, 1980)]})])
    assert gaps.row(0, named=True)["window_power_capped_share"] == 1.0
    none = wa.of_timelines([_timeline(tmp_path / "none.parquet", {0: [(True, None, 1980)]})])
    assert none.row(0, named=True)["window_power_capped_share"] is None
    assert wa.ACTIVITY_DOCS["window_power_capped_share"] and wa.ACTIVITY_DOCS["window_sm_clock_median_mhz"]


@pytest.fixture(scope="module")
def depth() -> pl.DataFrame:
    return aggregate.aggregate(packed.tree_files(DEPTH_1203D / "results" / "cells", "*/*.parquet"))


def test_the_committed_b32_speculative_windows_ran_at_the_cap_and_b1_ones_did_not(depth):
    points = depth.filter(pl.col("role") == "point")
    b32, b1 = points.filter(pl.col("batch_size") == 32), points.filter(pl.col("batch_size") == 1)
    assert b32.height == 6 and (b32["window_power_capped_share"] == 1.0).all()
    assert sorted(set(b32["window_sm_clock_median_mhz"])) == [1800.0, 1845.0, 1860.0, 1875.0]
    assert (b1["window_sm_clock_median_mhz"] == 1980.0).all() and (b1["window_power_capped_share"] < 0.5).all()
    bases = depth.filter((pl.col("role") != "point") & (pl.col("batch_size") == 32))
    assert bases["window_power_capped_share"].is_between(0.1, 0.3).all()
    assert (bases["window_sm_clock_median_mhz"] == 1980.0).all()


def test_the_report_names_the_capped_windows_and_only_where_there_are_some(depth):
    (caveat,) = render.power_cap_caveats(depth)
    assert caveat.level == "info"
    assert caveat.text.startswith("6 speculative window(s) ran at the board's power cap for at least 50% of their")
    assert "vllm-qwen3_8b-closed-b32-random-s0-cg1" in caveat.text
    assert "b1-random" not in caveat.text
    assert "SM clock median 1800–1875 MHz, against 1980 MHz in their baselines' windows" in caveat.text
    glm = aggregate.aggregate(packed.tree_files(GLM_V2_1203D / "results" / "cells", "*/*.parquet"))
    assert render.power_cap_caveats(glm) == []
    # records.parquet written before the columns existed: no caveat, no error
    assert render.power_cap_caveats(depth.drop("window_power_capped_share")) == []
