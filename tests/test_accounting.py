"""Device-time account (specjoule.analysis.accounting, ADR 0038) on hand-built record frames.

The real-engine side — device_held_s written by the runner and growing across a shared engine's
cells — is asserted in tests/test_runner_cpu.py; here the arithmetic and the missing-value rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from specjoule.analysis import accounting

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _rec(instance: str | None, held: float | None, start: float, warmup: float, window: float, minute: int,
         uuid: str | None = "GPU-a") -> dict:
    return {"engine_instance": instance, "engine": "vllm", "gpu_uuid": uuid, "hostname": "node",
            "device_held_s": held, "engine_start_s": start, "warmup_s": warmup, "window_s": window,
            "window_start": T0 + timedelta(minutes=minute)}


def test_shared_launch_held_time_split_into_start_warmup_windows_and_other():
    df = pl.DataFrame([_rec("A", 50.0, 40.0, 5.0, 20.0, 0), _rec("A", 100.0, 40.0, 5.0, 20.0, 1)])
    t = accounting.device_time(df)
    a, total = t.row(0, named=True), t.row(1, named=True)
    assert a["engine_instance"] == "A" and a["cells"] == 2
    assert a["held_s"] == 100.0  # the last record's, not a sum of the cumulative values
    assert a["windows_s"] == 40.0 and a["warmup_s"] == 10.0 and a["engine_start_s"] == 40.0  # the start counted once
    assert a["other_s"] == pytest.approx(10.0) and a["window_share"] == pytest.approx(0.4)
    assert total["engine_instance"] == "total" and total["window_share"] == pytest.approx(0.4)


def test_launches_without_held_time_stay_null_and_out_of_the_total():
    df = pl.DataFrame([_rec("old", None, 60.0, 5.0, 21.0, 0, "GPU-b"), _rec("new", 90.0, 50.0, 5.0, 20.0, 5),
                       _rec("new2", 60.0, 30.0, 5.0, 20.0, 9), _rec(None, 10.0, 1.0, 1.0, 1.0, 12)])
    t = accounting.device_time(df)
    assert t["engine_instance"].to_list() == ["old", "new", "new2", "total"]  # in time order; no identity: left out
    old = t.row(0, named=True)
    assert old["held_s"] is None and old["window_share"] is None and old["windows_s"] == 21.0
    total = t.row(3, named=True)
    assert total["cells"] == 2 and total["held_s"] == 150.0 and total["engine_start_s"] == 80.0
    assert total["window_share"] == pytest.approx(40.0 / 150.0)
    assert total["device"] == "GPU-a,GPU-b"
    line = accounting.summary_line(t)
    assert "150 s held by 2 engine launch(es)" in line and "(26.7 %)" in line and "1 launch(es) without" in line


def test_a_gpu_less_host_is_its_own_device():
    t = accounting.device_time(pl.DataFrame([_rec("cpu", 70.0, 40.0, 5.0, 20.0, 0, uuid=None)]))
    assert t["device"].to_list() == ["host:node", "host:node"] and t.row(1, named=True)["window_share"] == pytest.approx(20 / 70)


def test_records_that_all_predate_the_column_say_so_and_empty_input_gives_no_rows():
    t = accounting.device_time(pl.DataFrame([_rec("x", None, 60.0, 5.0, 21.0, 0)]))
    assert t.row(1, named=True)["held_s"] is None
    assert accounting.summary_line(t).startswith("not recorded")
    empty = accounting.device_time(pl.DataFrame([_rec(None, 5.0, 1.0, 1.0, 1.0, 0)]))
    assert empty.height == 0 and accounting.summary_line(empty) is None


def test_command_line_prints_the_table_and_the_line(tmp_path, capsys):
    path = tmp_path / "records.parquet"
    pl.DataFrame([_rec("A", 50.0, 40.0, 5.0, 20.0, 0), _rec("A", 100.0, 40.0, 5.0, 20.0, 1)]).write_parquet(path)
    assert accounting.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "window_share" in out and "100 s held by 1 engine launch(es)" in out and "(40.0 %)" in out
    assert accounting.main([]) == 2


def test_skipped_warm_ups_and_warm_starts_are_counted_per_launch():
    """ADR 0188, 0189: how many cells of a launch ran no warm-up of their own, and whether its start was warm."""
    rows = [_rec("A", 60.0, 100.0, 5.0, 20.0, 0) | {"warmup_skipped": False, "compile_cache_warm": False},
            _rec("A", 80.0, 100.0, 0.0, 20.0, 1) | {"warmup_skipped": True, "compile_cache_warm": False},
            _rec("A", 100.0, 100.0, 0.0, 20.0, 2) | {"warmup_skipped": True, "compile_cache_warm": False},
            _rec("B", 70.0, 40.0, 5.0, 20.0, 5) | {"warmup_skipped": False, "compile_cache_warm": True},
            _rec("C", 70.0, 40.0, 5.0, 20.0, 9) | {"warmup_skipped": None, "compile_cache_warm": None}]
    t = accounting.device_time(pl.DataFrame(rows))
    assert t["warmups_skipped"].to_list() == [2, 0, None, 2]
    assert t["compile_cache_warm"].to_list() == [False, True, None, None]
    line = accounting.summary_line(t)
    assert "(1 of 2 from a warm compile cache)" in line and "2 cell(s) without a warm-up of their own" in line
    # Records from before the columns: nothing claimed.
    old = accounting.device_time(pl.DataFrame([_rec("x", 60.0, 60.0, 5.0, 21.0, 0)]))
    assert old["warmups_skipped"].to_list() == [None, None] and "warm" not in accounting.summary_line(old)
