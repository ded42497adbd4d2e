"""The NVML duty-cycle probe's arithmetic and the busy fraction it shares with every record (ADR 0258)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specjoule import records, runner
from tools.device import nvml_busy_probe as probe


def _timeline(util: list[float | None], in_window: list[bool], temps: list[float] | None = None) -> pa.Table:
    n = len(util)
    cols = {f.name: pa.nulls(n, f.type) for f in records.TIMELINE_SCHEMA}
    cols["gpu_util_pct"] = pa.array(util, pa.float64())
    if temps is not None:
        cols["temperature_c"] = pa.array(temps, pa.float64())
    cols["in_window"] = pa.array(in_window, pa.bool_())
    return pa.table(cols, schema=records.TIMELINE_SCHEMA)


def test_the_busy_fraction_is_the_in_window_utilization_mean_and_the_records_use_it():
    tl = _timeline([100.0, 80.0, None, 60.0, 0.0], [False, True, True, True, False])
    # (80 + 60) / 2 / 100: the out-of-window sample and the null one are left out
    assert records.window_gpu_busy_fraction(tl) == pytest.approx(0.70)
    assert records.window_gpu_util_samples(tl) == [80.0, 60.0]  # what the probe keeps of a window
    assert runner.host_columns(tl)["gpu_busy_fraction"] == records.window_gpu_busy_fraction(tl)
    assert records.window_gpu_busy_fraction(_timeline([50.0], [False])) is None  # no in-window sample
    assert records.window_gpu_busy_fraction(None) is None and runner.host_columns(None)["gpu_busy_fraction"] is None
    # the record's mean temperature comes the same way (ADR 0083 addendum 4): in-window samples only
    warm = _timeline([100.0, 80.0, 60.0], [False, True, True], temps=[35.0, 44.0, 47.0])
    assert runner.host_columns(warm)["mean_temperature_c"] == pytest.approx(45.5)
    assert (
        runner.host_columns(tl)["mean_temperature_c"] is None
        and runner.host_columns(None)["mean_temperature_c"] is None
    )


def test_a_row_gives_both_busy_fractions_and_the_idle_part_of_a_period_each_implies():
    # 400 kernels of 7.5 ms in a 3.2 s window: 8 ms periods, events busy 0.9375 (0.5 ms idle); NVML read 0.97
    row = probe.summarize(7.5, 0.5, [7.5] * 400, 3.2, 0.97)
    assert row["period_ms"] == pytest.approx(8.0) and row["event_busy"] == pytest.approx(0.9375)
    assert row["event_idle_ms"] == pytest.approx(0.5) and row["nvml_idle_ms"] == pytest.approx(0.24)
    assert row["busy_difference"] == pytest.approx(0.97 - 0.9375) and row["kernel_ms_timed"] == pytest.approx(7.5)
    unmetered = probe.summarize(7.5, 0.5, [7.5] * 400, 3.2, None)
    assert unmetered["nvml_idle_ms"] is None and unmetered["busy_difference"] is None
    empty = probe.summarize(7.5, 0.5, [], 3.2, 0.5)
    assert empty["period_ms"] is None and empty["event_idle_ms"] is None and empty["kernels"] == 0


def test_the_grid_spans_the_waits_the_two_board_pairs_showed():
    long_rounds = sorted(g for k, g in probe.GRID if k == 7.5)
    assert long_rounds[0] == 0.0 and long_rounds[-1] >= 4.0 and 0.1 in long_rounds  # 0.01-4 ms waits (ADR 0258)
    assert {k / g for k, g in probe.GRID if k < 7.5 and g} == {1.0}  # one duty cycle at several grains
