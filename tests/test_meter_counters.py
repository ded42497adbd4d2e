"""The meter's hardware counters (issue 18, ADR 0101) on recorded NVML sequences, through FakeNvml.

The result path is the real NvmlMeter; only the library under it is the fake, to replay recorded
GPM readings and to inject what a real NVML will not do on demand: GPM unsupported, refused by a
VM, failing mid-run. Expected values are computed here from the recorded ticks, not by the meter's
code. The happy path on a real GPU: tools/device/check_counters.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specjoule import records
from specjoule.meter import nvml as nvml_mod
from specjoule.meter.gpm import GPM_COLUMNS
from specjoule.meter.nvml import NvmlMeter
from tests.fake_nvml import FakeNvml

TICKS = [  # a copy-like then a matmul-like stretch, as GPM reports them (percent)
    {"dram_bw_util_pct": 88.0, "sm_active_pct": 99.0, "tensor_active_pct": 0.0},
    {"dram_bw_util_pct": 90.0, "sm_active_pct": 98.0, "tensor_active_pct": 0.0},
    {"dram_bw_util_pct": 30.0, "sm_active_pct": 100.0, "tensor_active_pct": 85.0},
    {"dram_bw_util_pct": 28.0, "sm_active_pct": 100.0, "tensor_active_pct": 87.0},
    {"dram_bw_util_pct": 10.0, "sm_active_pct": 20.0, "tensor_active_pct": 5.0},
    {"dram_bw_util_pct": 12.0, "sm_active_pct": 22.0, "tensor_active_pct": 6.0},
    {"dram_bw_util_pct": 14.0, "sm_active_pct": 24.0, "tensor_active_pct": 7.0},
    {"dram_bw_util_pct": 16.0, "sm_active_pct": 26.0, "tensor_active_pct": 8.0},
]
MEM_UTIL = [61.0, 63.0, 65.0, 67.0, 69.0]


def _meter(monkeypatch, fake: FakeNvml) -> NvmlMeter:
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    m = NvmlMeter(cuda_visible_devices=None, own_pids=lambda: set())
    m.open()
    return m


def _window(m: NvmlMeter, ticks: int = 5):
    """The sampler thread's body, called by hand: deterministic ticks inside one window."""
    m.measure_idle(0)
    m.mark_window_start()
    for _ in range(ticks):
        m._sample_once()
    m.mark_window_end()
    return m.result(), m.timeline()


def test_gpm_window_is_the_mean_between_the_edge_samples(monkeypatch):
    fake = FakeNvml(ticks=TICKS, mem_util=MEM_UTIL)
    m = _meter(monkeypatch, fake)
    probe_ticks = fake._tick  # the probe took two samples
    res, tl = _window(m, ticks=5)
    # Edges: the start sample is tick probe+1, five timeline samples, the end sample tick probe+7.
    start, end = probe_ticks + 1, probe_ticks + 7
    for col in GPM_COLUMNS:
        expected = sum(TICKS[(t - 1) % len(TICKS)][col] for t in range(start + 1, end + 1)) / (end - start)
        assert getattr(res, col) == pytest.approx(expected), col
    assert res.counters_source == "gpm" and res.counters_reason is None
    assert res.mem_busy_pct == pytest.approx(sum(MEM_UTIL) / len(MEM_UTIL))
    # Timeline: the first tick has no previous sample (null, not 0); later ticks are one-tick deltas.
    dram = tl.column("dram_bw_util_pct").to_pylist()
    assert dram[0] is None
    assert dram[1:] == [TICKS[(t - 1) % len(TICKS)]["dram_bw_util_pct"] for t in range(start + 2, start + 6)]
    assert tl.schema.equals(records.TIMELINE_SCHEMA)
    m.close()
    assert fake.live_samples == 0  # every GPM sample freed


def test_gpm_columns_reach_the_record_schema(monkeypatch):
    m = _meter(monkeypatch, FakeNvml(ticks=TICKS))
    res, _ = _window(m)
    m.close()
    row = res.columns()
    row.pop("gpu_names", None)
    table = records.to_table([{k: v for k, v in row.items() if k in records.RECORD_COLUMNS}])
    assert set(GPM_COLUMNS) | {"counters_source", "counters_reason", "mem_busy_pct"} <= set(records.RECORD_COLUMNS)
    assert set(row) - {"gpu_names"} <= set(records.RECORD_COLUMNS)  # nothing the record would refuse
    assert table.column("dram_bw_util_pct")[0].as_py() == pytest.approx(res.dram_bw_util_pct)


@pytest.mark.parametrize("mode, reason, max_gpm_calls", [
    ("unsupported", "GPM not supported on this device", 2),
    ("refused_query", "nvmlGpmQueryDeviceSupport failed: Insufficient Permissions (NVMLError_NoPermission)", 2),
    ("refused_sample", "GPM sample or metrics read failed: Not Supported", 5),
    ("no_bindings", "nvidia-ml-py has no GPM bindings", 0),
])
def test_gpm_refused_is_null_with_reason_and_cheap(monkeypatch, mode, reason, max_gpm_calls):
    fake = FakeNvml(gpm=mode, ticks=TICKS, mem_util=MEM_UTIL)
    m = _meter(monkeypatch, fake)
    at_open = sum(n for name, n in fake.calls.items() if name.startswith("nvmlGpm"))
    res, tl = _window(m, ticks=5)
    m.close()
    for col in GPM_COLUMNS:
        assert getattr(res, col) is None, col  # never 0
        assert tl.column(col).to_pylist() == [None] * tl.num_rows
    assert reason in res.counters_reason and "GPU 0" in res.counters_reason
    assert res.counters_source == "utilization"
    assert res.mem_busy_pct == pytest.approx(sum(MEM_UTIL) / len(MEM_UTIL))
    # The failure path is decided once at open, in a few calls: none per tick or window edge.
    gpm_calls = sum(n for name, n in fake.calls.items() if name.startswith("nvmlGpm"))
    assert gpm_calls == at_open <= max_gpm_calls
    assert fake.live_samples == 0
    assert res.energy_j > 0  # the energy measurement does not depend on the counters


def test_gpm_failing_mid_run_stops_and_nulls_the_window(monkeypatch):
    # The probe takes samples 1-2, the window start 3, ticks 4.. : sample 6 fails (the third tick).
    fake = FakeNvml(gpm="fails_after:6", ticks=TICKS)
    m = _meter(monkeypatch, fake)
    res, tl = _window(m, ticks=5)
    m.close()
    assert all(getattr(res, c) is None for c in GPM_COLUMNS)  # no partial window value
    assert res.counters_reason == "GPM read in the timeline failed: Unknown Error (NVMLError)"
    dram = tl.column("dram_bw_util_pct").to_pylist()
    assert dram[0] is None and dram[1] is not None and dram[2:] == [None] * 3
    assert tl.num_rows == 5  # the timeline went on without the counters
    assert fake.calls["nvmlGpmSampleGet"] == 6  # and stopped asking
    assert fake.live_samples == 0


def test_one_refused_metric_is_null_the_others_measured(monkeypatch):
    m = _meter(monkeypatch, FakeNvml(gpm="refused_metric", ticks=TICKS))
    res, _ = _window(m)
    m.close()
    assert res.tensor_active_pct is None and res.dram_bw_util_pct is not None and res.sm_active_pct is not None
    assert res.counters_source == "gpm" and "tensor_active_pct" in res.counters_reason


def test_two_gpus_window_is_the_mean_and_one_without_gpm_turns_it_off(monkeypatch):
    fake = FakeNvml(ticks=TICKS, n_gpus=2)
    m = _meter(monkeypatch, fake)
    start = fake._tick + 1
    res, tl = _window(m)
    m.close()
    # Both GPUs sample the same recorded ticks here, so their mean is each one's value (not their sum).
    end = start + 6
    for col in GPM_COLUMNS:
        assert getattr(res, col) == pytest.approx(fake.mean_between(start, end, col)), col
    assert tl.num_rows == 10 and fake.live_samples == 0


def test_gpm_switched_off_by_the_caller(monkeypatch):
    fake = FakeNvml(ticks=TICKS)
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    m = NvmlMeter(cuda_visible_devices=None, own_pids=lambda: set(), gpm=False)
    m.open()
    res, _ = _window(m)
    m.close()
    assert res.dram_bw_util_pct is None and "switched off" in res.counters_reason
    assert not any(name.startswith("nvmlGpm") for name in fake.calls)


def test_none_meter_says_no_counters():
    from specjoule.meter import make_meter

    res = make_meter("none", "cpu").result()
    assert res.counters_source == "none" and res.counters_reason and res.dram_bw_util_pct is None


# ------------------------------------------------------------------------------------------------
# recorded on an H200 (tools/device/check_counters.py, 2026-12-01)

RECORDED = Path(__file__).parent / "data" / "nvml" / "gpm-h200-2026-12-01.json"
RECORDED_IN_USE = Path(__file__).parent / "data" / "nvml" / "gpm-h200-2026-12-01-in-use.json"


def _recorded_ticks(window: str) -> list[dict]:
    timeline = json.loads(RECORDED.read_text())[window]["timeline"]
    return [{c: r[c] for c in GPM_COLUMNS} for r in timeline if r["in_window"] and r["dram_bw_util_pct"] is not None
            and r["tensor_active_pct"] is not None]


@pytest.mark.parametrize("window", ["copy", "matmul"])
def test_recorded_h200_gpm_ticks_replayed_through_the_meter(monkeypatch, window):
    ticks = _recorded_ticks(window)
    assert len(ticks) >= 10
    fake = FakeNvml(ticks=ticks)
    m = _meter(monkeypatch, fake)
    start = fake._tick + 1
    res, tl = _window(m, ticks=8)
    m.close()
    end = start + 9  # eight timeline samples between the two edge samples
    for col in GPM_COLUMNS:
        vals = [ticks[(t - 1) % len(ticks)][col] for t in range(start + 1, end + 1)]
        assert getattr(res, col) == pytest.approx(sum(vals) / len(vals)), col
    if window == "copy":  # an SM copy keeps HBM busy and the tensor cores idle
        assert res.dram_bw_util_pct > 80 and res.tensor_active_pct < 1
    else:
        assert res.tensor_active_pct > 75 and res.dram_bw_util_pct < 25
    # The real run's window values through the same meter (edge samples): the same picture.
    real = json.loads(RECORDED.read_text())[window]["result"]
    assert real["counters_source"] == "gpm" and real["counters_reason"] is None
    assert (real["dram_bw_util_pct"] > 80) == (window == "copy")


def test_in_use_refusals_are_retried(monkeypatch):
    fake = FakeNvml(gpm="in_use_every:3", ticks=TICKS)
    m = _meter(monkeypatch, fake)
    res, tl = _window(m, ticks=6)
    m.close()
    assert fake.refused_in_use >= 2  # refused, and retried to success
    assert res.counters_source == "gpm" and res.counters_reason is None and res.dram_bw_util_pct is not None
    assert fake.live_samples == 0


def test_gpm_held_by_another_client_is_null_with_nvmls_words(monkeypatch):
    """The failure the H200 showed before the meter serialised its GPM calls: the window-start sample
    refused as in use. The reason recorded there and the one the meter gives here read the same."""
    fake = FakeNvml(gpm="in_use_after:3", ticks=TICKS)
    m = _meter(monkeypatch, fake)
    res, _ = _window(m, ticks=3)
    m.close()
    recorded = json.loads(RECORDED_IN_USE.read_text())["copy"]["result"]["counters_reason"]
    assert recorded == "nvmlGpmSampleGet at window start failed: In use by another client (NVMLError_InUse)"
    assert res.counters_reason == recorded
    assert res.dram_bw_util_pct is None and res.counters_source == "utilization" and res.energy_j > 0


def test_metrics_refused_over_the_window_are_null_with_nvmls_words(monkeypatch):
    from tests.fake_nvml import NVMLError

    class RefusesAtTheEnd(FakeNvml):
        refuse = False

        def nvmlGpmMetricsGet(self, request):
            if self.refuse:
                raise NVMLError(999, "Unknown Error")
            return super().nvmlGpmMetricsGet(request)

    fake = RefusesAtTheEnd(ticks=TICKS)
    m = _meter(monkeypatch, fake)
    m.measure_idle(0)
    m.mark_window_start()
    m.mark_window_end()
    fake.refuse = True
    res = m.result()
    m.close()
    assert res.counters_reason == "nvmlGpmMetricsGet over the window failed: Unknown Error (NVMLError)"
    assert all(getattr(res, c) is None for c in GPM_COLUMNS) and res.energy_j > 0


def test_a_missing_edge_sample_gives_nulls_and_says_so(monkeypatch):
    fake = FakeNvml(ticks=TICKS)
    m = _meter(monkeypatch, fake)
    m.measure_idle(0)
    m.mark_window_start()
    m.mark_window_end()
    m._free_gpm(m._gpm_edges.pop("start"))  # as if the start edge had not been sampled
    res = m.result()
    assert res.counters_reason == "GPM edge samples missing" and res.dram_bw_util_pct is None
    m.reset_window()  # frees the end edge too: only the readers' own previous samples stay
    assert m._gpm_edges == {} and fake.live_samples == 0
    m.close()
    assert fake.live_samples == 0


def test_an_edge_taken_twice_frees_the_first_sample(monkeypatch):
    fake = FakeNvml(ticks=TICKS)
    m = _meter(monkeypatch, fake)
    m.measure_idle(0)
    m.mark_window_start()
    held = fake.live_samples
    m.mark_window_start()  # a restarted window: the first start sample is freed, not leaked
    assert fake.live_samples == held
    m.mark_window_end()
    m.result()
    m.close()
    assert fake.live_samples == 0
