"""The NVML meter's result path without a GPU: recorded sample sequences replayed through the real NvmlMeter.

Only the library under the meter is a fake (tests/fake_nvml.py ``ReplayNvml``, named as one) and the
meter's clock (``ReplayClock``): the meter's own code converts mJ to J and mW to W, sums the GPUs,
counts counter updates, ORs the clock-event reasons and keeps only the window's ticks. Two kinds of
sequence:

- a hand-built two-GPU sequence whose expected values are worked out by hand below (literals, not the
  meter's formulas), with readings outside the window that would change every statistic if they leaked in;
- the H200 timelines committed under validation/h200-2026-12 (a real NVML's ticks), replayed with the
  recorded window edges: the meter must give back what the real meter wrote into the same cell's record.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from specjoule import records
from specjoule.analysis import packed
from specjoule.meter import MeterError
from specjoule.meter import nvml as nvml_mod
from specjoule.meter.nvml import DeviceInfo, NvmlMeter, list_devices
from tests.fake_nvml import FakeNvml, NVMLError, ReplayClock, ReplayNvml

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "validation" / "h200-2026-12"


def _open(monkeypatch, fake: FakeNvml, clock: ReplayClock, **kw) -> NvmlMeter:
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    monkeypatch.setattr(nvml_mod, "time", clock)
    m = NvmlMeter(cuda_visible_devices=kw.pop("cvd", None), own_pids=kw.pop("own_pids", lambda: set()), gpm=False,
                  **kw)
    m.open()
    return m


def _replay(m: NvmlMeter, fake: ReplayNvml, clock: ReplayClock, times: list[float], t_start: float, t_end: float,
            edge_start_mj: list[int], edge_end_mj: list[int]) -> None:
    """Drive the meter as the runner and the sampler thread did: ticks in time order, the window edges read
    between them (a tick at an edge's exact time comes after the edge, as the sampler's would)."""
    m.measure_idle(0)
    started = ended = False
    for i, t in enumerate(times):
        if not started and t >= t_start:
            clock.t, fake.edge_mj = t_start, edge_start_mj
            m.mark_window_start()
            fake.edge_mj, started = None, True
        if started and not ended and t > t_end:
            clock.t, fake.edge_mj = t_end, edge_end_mj
            m.mark_window_end()
            fake.edge_mj, ended = None, True
        clock.t = t
        fake.at(i)
        m._sample_once()
    if not ended:
        clock.t, fake.edge_mj = t_end, edge_end_mj
        m.mark_window_end()
        fake.edge_mj = None


# ------------------------------------------------------------------------------------------------
# a hand-built sequence: two GPUs, ten ticks 0.125 s apart, the window from tick 2 to tick 7 inclusive

T0 = 100.0
TIMES = [T0 + 0.125 * i for i in range(10)]
T_START, T_END = TIMES[2], TIMES[7]  # both edges fall exactly on a tick: those ticks are in the window
GPU0 = dict(
    energy_mj=[1_000_000, 1_000_000, 1_012_000, 1_012_000, 1_037_000, 1_062_000, 1_062_000, 1_087_000, 1_100_000,
               1_100_000],
    power_w=[900.0, 50.0, 300.5, 320.0, 410.75, 280.0, 350.0, 390.0, 80.0, 10.0],
    temperature_c=[40, 41, 50, 55, 61, 58, 57, 56, 70, 90],
    throttle_reasons=[0x8, 0, 0x2, 0x4, None, 0, 0, 0, 0, 0],  # tick 4 (61 °C, the hottest): no reasons given
    mem_util_pct=[99.0, 99.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 99.0, 99.0],
)
GPU1 = dict(
    energy_mj=[2_000_000, 2_000_000, 2_005_000, 2_010_000, 2_015_000, 2_020_000, 2_025_000, 2_030_000, None,
               2_040_000],
    power_w=[100.0, 50.0, 100.25, 110.0, 120.0, None, 100.0, 130.5, 20.0, 10.0],  # no reading at tick 5
    temperature_c=[35, 35, 45, 47, 49, 50, 52, 60, None, 85],  # tick 8: readings this GPU did not give
    throttle_reasons=[0, 0, 0, 0, 0, 0, 0, 0x1, None, 0x20],
    mem_util_pct=[99.0, 99.0, 5.0, 15.0, 25.0, 35.0, 45.0, 55.0, None, 99.0],
)
EDGE_START = [1_010_000, 2_004_000]
EDGE_END = [1_090_500, 2_031_250]


def _ticks(*gpus: dict) -> list[list[dict]]:
    return [[{**{k: g[k][i] for k in g}, "gpu_util_pct": 90.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 3201}
             for g in gpus] for i in range(len(TIMES))]


@pytest.fixture()
def hand_built(monkeypatch):
    fake, clock = ReplayNvml(_ticks(GPU0, GPU1)), ReplayClock(T0 - 1.0)
    m = _open(monkeypatch, fake, clock)
    _replay(m, fake, clock, TIMES, T_START, T_END, EDGE_START, EDGE_END)
    yield m
    m.close()


def test_energy_is_the_edge_counter_delta_in_joules_summed_over_gpus(hand_built):
    res = hand_built.result()
    # GPU 0: 1 090 500 − 1 010 000 = 80 500 mJ; GPU 1: 2 031 250 − 2 004 000 = 27 250 mJ.
    assert res.energy_j_per_gpu == [80.5, 27.25]
    assert res.energy_j == 107.75
    assert res.meter == "nvml" and res.power_limit_w == 1350.0  # 700 000 + 650 000 mW
    assert res.gpu_names == ["NVIDIA H200 #0", "NVIDIA H200 #1"] and res.driver_version == "580.159.04-fake"


def test_counter_updates_are_distinct_values_in_the_window_on_the_slowest_gpu(hand_built):
    # In the window GPU 0 shows 1 012 000, 1 037 000, 1 062 000, 1 087 000 (4 values; 6 over all ticks),
    # GPU 1 shows six values (nine over all ticks): the slower GPU's count is the record's.
    assert hand_built.result().energy_counter_updates == 4


def test_throttle_mask_is_the_or_of_the_window_ticks_edges_included(hand_built):
    # 0x2 at the start edge, 0x4 inside, 0x1 at the end edge; 0x8 before and 0x20 after stay out.
    assert hand_built.result().throttle_reasons_mask == 0x7


def test_power_temperature_and_memory_busy_come_from_the_window_ticks_only(hand_built):
    res = hand_built.result()
    # Whole ticks summed over both GPUs: 400.75, 430, 530.75, (tick 5: GPU 1 gave no power), 450, 520.5.
    assert res.power_min_w == 400.75 and res.power_max_w == 530.75
    assert res.max_temperature_c == 61.0  # 90 °C came after the window
    assert res.mem_busy_pct == 32.5  # (10+20+30+40+50+60 + 5+15+25+35+45+55) / 12
    assert res.counters_source == "utilization"


def test_timeline_keeps_every_tick_marks_the_window_and_converts_units(hand_built):
    res, tl = hand_built.result(), hand_built.timeline()
    assert res.timeline_samples == 10 and res.timeline_hz == 8.0  # 9 intervals over 1.125 s
    assert tl.schema.equals(records.TIMELINE_SCHEMA) and tl.num_rows == 20
    rows = tl.to_pylist()
    assert [r["in_window"] for r in rows if r["gpu_index"] == 0] == [False] * 2 + [True] * 6 + [False] * 2
    first = rows[0]
    assert (first["t_rel_s"], first["power_w"], first["energy_mj"], first["throttle_reasons"]) == (-0.25, 900.0,
                                                                                                   1_000_000, 8)
    gpu1 = [r for r in rows if r["gpu_index"] == 1]
    assert gpu1[5]["power_w"] is None  # missing readings are null in the timeline, never 0
    assert [gpu1[8][c] for c in ("temperature_c", "throttle_reasons", "gpu_util_pct", "mem_util_pct", "energy_mj")] \
        == [None] * 5
    assert (gpu1[7]["temperature_c"], gpu1[7]["throttle_reasons"], gpu1[7]["gpu_util_pct"], gpu1[7]["mem_util_pct"]) \
        == (60.0, 1, 90.0, 55.0)
    assert (first["sm_clock_mhz"], first["mem_clock_mhz"], first["gpu_uuid"], first["t_monotonic"]) == (
        1980, 3201, "GPU-replay00-0000-0000-0000-000000000000", 100.0)


def test_the_result_is_a_valid_record(hand_built):
    cols = hand_built.result().columns()
    assert cols["gpu_uuid"] == "GPU-replay00-0000-0000-0000-000000000000,GPU-replay01-0000-0000-0000-000000000000"
    cols.pop("gpu_names")
    table = records.to_table([{k: v for k, v in cols.items() if k in records.RECORD_COLUMNS}])
    assert table.column("energy_j")[0].as_py() == 107.75


def test_a_window_without_ticks_has_energy_but_no_tick_statistics(monkeypatch):
    fake, clock = ReplayNvml(_ticks(GPU0)), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)
    m.measure_idle(0)
    for i in range(2):  # two ticks before the window, none in it
        clock.t = TIMES[i]
        fake.at(i)
        m._sample_once()
    clock.t, fake.edge_mj = 200.0, [5_000]
    m.mark_window_start()
    clock.t, fake.edge_mj = 201.0, [6_500]
    m.mark_window_end()
    res = m.result()
    m.close()
    assert res.energy_j == 1.5 and res.energy_counter_updates == 0 and res.throttle_reasons_mask is None
    assert res.power_min_w is None and res.max_temperature_c is None and res.mem_busy_pct is None
    assert res.counters_source is None  # neither GPM nor a utilization reading in the window
    assert res.timeline_samples == 2 and res.timeline_hz == 8.0  # two ticks 0.125 s apart


def test_a_counter_that_did_not_advance_is_an_error_naming_the_gpu(monkeypatch):
    fake, clock = ReplayNvml(_ticks(GPU0, GPU1)), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)
    fake.edge_mj = [1_000, 2_000]
    clock.t = 10.0
    m.mark_window_start()
    fake.edge_mj = [1_500, 2_000]  # GPU 1 stood still
    clock.t = 10.25
    m.mark_window_end()
    with pytest.raises(MeterError, match=r"GPU 1 \(GPU-replay01-0000-0000-0000-000000000000\) did not advance over "
                                         r"a 0\.250 s window \(delta 0\.0 J\)"):
        m.result()
    m.close()


def test_result_needs_both_edges_and_surfaces_a_sampler_failure(monkeypatch):
    fake, clock = ReplayNvml(_ticks(GPU0)), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)
    m.mark_window_start()
    with pytest.raises(MeterError, match="^meter nvml: the window edges were not both read$"):
        m.result()
    m.mark_window_end()
    m._sampler_error = OSError("NVML went away")  # what the sampler thread leaves when a tick raised
    with pytest.raises(MeterError, match="timeline sampler failed: NVML went away"):
        m.result()
    m.reset_window()
    with pytest.raises(MeterError, match="not both read"):  # reset forgets the edges and the error
        m.result()
    m.close()


def test_idle_power_is_the_counter_delta_over_the_idle_time(monkeypatch):
    # FakeNvml's counter advances 50 000 mJ per read per GPU: two GPUs over 1 s of idle → 100 J / 1 s.
    fake, clock = FakeNvml(n_gpus=2, energy_step_mj=50_000, gpm="no_bindings"), ReplayClock(1000.0)
    m = _open(monkeypatch, fake, clock, sample_hz=8.0)  # 0.125 s steps: eight of them make exactly 1 s
    assert m.measure_idle(1.0) == 100.0
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 16  # eight ticks × two GPUs
    assert m.measure_idle(2.0) == 50.0  # the same 100 J per reading pair, now over 2 s
    res = _edges_only(m, fake)
    assert res.idle_power_w == 50.0  # the last idle measurement is the record's
    assert m.measure_idle(0) is None  # no idle measurement asked for: none, not a division by 0 s
    m.close()
    one = FakeNvml(n_gpus=1, energy_step_mj=1, gpm="no_bindings")  # the counter moved by 1 mJ: still the counter
    m = _open(monkeypatch, one, ReplayClock(0.0), sample_hz=8.0)
    assert m.measure_idle(1.0) == 0.001
    m.close()


def _edges_only(m: NvmlMeter, fake: FakeNvml):
    m.mark_window_start()
    m.mark_window_end()
    return m.result()


def test_idle_power_falls_back_to_sampled_power_when_the_counter_stands_still(monkeypatch):
    fake, clock = FakeNvml(n_gpus=2, energy_step_mj=0, power_mw=150_500, gpm="no_bindings"), ReplayClock(0.0)
    m = _open(monkeypatch, fake, clock, sample_hz=8.0)
    assert m.measure_idle(1.0) == 301.0  # 2 × 150.5 W
    assert m.measure_idle(0) is None
    m.close()


def test_other_processes_count_only_when_ours_are_visible(monkeypatch):
    class WithProcesses(ReplayNvml):
        procs: dict[int, list[int]] = {}

        def nvmlDeviceGetComputeRunningProcesses(self, h):
            return [type("P", (), {"pid": p})() for p in self.procs.get(h, [])]

    def others(own: set[int], idle: dict, end: dict) -> int | None:
        fake, clock = WithProcesses(_ticks(GPU0, GPU1)), ReplayClock(T0)
        m = _open(monkeypatch, fake, clock, own_pids=lambda: own)
        fake.procs = idle
        m.measure_idle(0)
        fake.procs, fake.edge_mj = end, EDGE_START
        m.mark_window_start()
        fake.edge_mj = EDGE_END
        m.mark_window_end()
        n = m.result().other_gpu_processes
        m.close()
        return n

    end = {0: [11, 99], 1: [12, 77, 99]}
    assert others({11, 12}, {}, end) == 2  # 99 and 77 (99 on both GPUs counts once)
    assert others({11, 12}, {0: [5, 6, 7]}, end) == 3  # before the engine started, every process is another's
    assert others({5}, {}, end) == 0  # ours not among NVML's PIDs (another PID namespace): the end count is not trusted


def test_other_processes_are_named_with_their_gpu_and_memory(monkeypatch):
    """What the record (other_gpu_process_list) and a refusal say about another job on the GPUs: NVML's process
    name without its path (bytes from an older nvidia-ml-py too), else the kernel's name from /proc, else '?';
    the GPU the process holds; its memory in whole MiB, none when NVML gives none. Our own processes are left out."""
    gib, mib = 2**30, 2**20
    sleeper = subprocess.Popen(["sleep", "60"])  # a real process NVML cannot name: /proc's name is used
    deadline = time.monotonic() + 30
    while os.readlink(f"/proc/{sleeper.pid}/exe") == os.readlink("/proc/self/exe"):  # forked, not yet exec'd
        assert time.monotonic() < deadline, "sleep did not start"
        time.sleep(0.01)
    gone = 4_194_305  # above the kernel's PID_MAX_LIMIT: no such process, anywhere

    class NamedProcesses(ReplayNvml):
        names = {501: "/usr/local/bin/python3.11", 502: b"/opt/jobs/trainer", 503: ""}
        procs = {0: [SimpleNamespace(pid=11, usedGpuMemory=40 * gib),  # ours, listed first: skipped, not the end
                     SimpleNamespace(pid=501, usedGpuMemory=3 * gib + mib - 1),  # 3072 MiB and a part of one
                     SimpleNamespace(pid=503, usedGpuMemory=0)],
                 1: [SimpleNamespace(pid=502, usedGpuMemory=None),  # NVML has no figure (no privilege, MIG)
                     SimpleNamespace(pid=sleeper.pid, usedGpuMemory=512 * mib),
                     SimpleNamespace(pid=gone, usedGpuMemory=mib)]}

        def nvmlDeviceGetComputeRunningProcesses(self, h):
            return self.procs[self._device(h)]

        def nvmlSystemGetProcessName(self, pid):
            if pid not in self.names:
                raise NVMLError(3, "Not Found")
            return self.names[pid]

    try:
        fake, clock = NamedProcesses(_ticks(GPU0, GPU1)), ReplayClock(T0)
        m = _open(monkeypatch, fake, clock, own_pids=lambda: {11})
        every = fake.procs
        fake.procs = {0: [], 1: []}
        m.measure_idle(0)  # the GPUs idle before the engine starts; the other jobs come after
        fake.procs = every
        listed = m.other_processes()
        fake.edge_mj = EDGE_START
        m.mark_window_start()
        fake.edge_mj = EDGE_END
        m.mark_window_end()
        result = m.result()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert listed == [
        {"pid": 501, "name": "python3.11", "gpu": 0, "used_mib": 3072},
        {"pid": 503, "name": "?", "gpu": 0, "used_mib": 0},
        {"pid": 502, "name": "trainer", "gpu": 1, "used_mib": None},
        {"pid": sleeper.pid, "name": "sleep", "gpu": 1, "used_mib": 512},
        {"pid": gone, "name": "?", "gpu": 1, "used_mib": 1},
    ]
    assert result.other_gpu_processes == 5
    # The record lists them by GPU, then PID. The sleeper's PID is whatever the kernel gave it (PIDs wrap: it may
    # sort before 502), so the expected order is sorted here rather than written out.
    expected = sorted([(0, 501, "pid 501 python3.11 (3072 MiB) on GPU 0"), (0, 503, "pid 503 ? (0 MiB) on GPU 0"),
                       (1, 502, "pid 502 trainer on GPU 1"), (1, sleeper.pid, f"pid {sleeper.pid} sleep (512 MiB) on GPU 1"),
                       (1, gone, f"pid {gone} ? (1 MiB) on GPU 1")])
    assert result.other_gpu_process_list == "; ".join(text for _, _, text in expected)
    m.close()

    fake = NamedProcesses(_ticks(GPU0, GPU1))
    m = _open(monkeypatch, fake, clock)
    fake.lose_gpu()  # the process query fails: the error names the GPU it failed on
    with pytest.raises(MeterError, match=r"nvmlDeviceGetComputeRunningProcesses.*GPU 0 \(GPU-replay00"):
        m.other_processes()
    m.close()


@pytest.mark.parametrize("cvd, expected, limit_w", [("1", [1], 650.0), ("GPU-replay00", [0], 700.0),
                                                    (None, [0, 1], 1350.0)])
def test_open_meters_only_the_visible_gpus(monkeypatch, cvd, expected, limit_w):
    fake, clock = ReplayNvml(_ticks(GPU0, GPU1), uuid_bytes=True), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock, cvd=cvd)
    assert [d.index for d in m.devices] == expected
    assert m.power_limit_w == limit_w and m.driver == "580.159.04-fake"
    assert [(d.uuid[:12], d.name) for d in m.devices] == [(f"GPU-replay0{i}", f"NVIDIA H200 #{i}") for i in expected]
    m.close()


def test_visible_devices_default_to_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("SPECJOULE_GPM", "0")
    m = NvmlMeter()
    assert m.cuda_visible_devices == "1" and m.want_gpm is False
    assert m._gpm_reason == "GPM switched off (NvmlMeter(gpm=False) or SPECJOULE_GPM=0)"
    assert NvmlMeter(cuda_visible_devices="0,1").cuda_visible_devices == "0,1"  # given beats the environment
    monkeypatch.setenv("SPECJOULE_GPM", "1")
    assert NvmlMeter().want_gpm is True and NvmlMeter(gpm=False).want_gpm is False
    monkeypatch.delenv("SPECJOULE_GPM")
    assert NvmlMeter().want_gpm is True


def test_a_meter_never_opened_closes_without_touching_nvml(monkeypatch):
    fake = FakeNvml(gpm="no_bindings")
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    NvmlMeter(gpm=False).close()
    assert fake.calls["nvmlShutdown"] == 0
    m = NvmlMeter(gpm=False)
    with pytest.raises(MeterError, match="window edges were not both read"):
        m.result()  # before any window: the meter's own error, not a TypeError


def test_no_process_count_is_null_not_zero(monkeypatch):
    fake, clock = ReplayNvml(_ticks(GPU0)), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)  # no measure_idle: no count before the engine either
    fake.edge_mj = [1_000]
    m.mark_window_start()
    fake.edge_mj = [2_000]
    m.mark_window_end()
    assert m.result().other_gpu_processes is None
    m.close()


def test_missing_nvidia_ml_py_is_named(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    with pytest.raises(MeterError) as err:
        nvml_mod._pynvml()
    assert str(err.value) == "meter nvml: the Python package nvidia-ml-py (import pynvml) is not installed"


def test_list_devices_decodes_what_nvml_gives(monkeypatch):
    fake = ReplayNvml(_ticks(GPU0, GPU1), uuid_bytes=True)
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    assert list_devices() == [DeviceInfo(0, "GPU-replay00-0000-0000-0000-000000000000", "NVIDIA H200 #0"),
                              DeviceInfo(1, "GPU-replay01-0000-0000-0000-000000000000", "NVIDIA H200 #1")]


def test_nvml_failures_name_the_call_and_the_gpu(monkeypatch):
    from tests.fake_nvml import NVMLError

    class Broken(ReplayNvml):
        def nvmlDeviceGetEnforcedPowerLimit(self, h):
            raise NVMLError(999, "Unknown Error")

    fake, _clock = Broken(_ticks(GPU0)), ReplayClock(T0)
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    m = NvmlMeter(cuda_visible_devices=None, gpm=False)
    with pytest.raises(MeterError, match=r"NVML nvmlDeviceGetEnforcedPowerLimit on GPU 0 "
                                         r"\(GPU-replay00-0000-0000-0000-000000000000\) failed: Unknown Error \(NVMLError\)"):
        m.open()
    m.close()
    with pytest.raises(MeterError, match="nvmlDeviceGetCount: the meter is not open"):
        m._call("nvmlDeviceGetCount", None)
    m = NvmlMeter(cuda_visible_devices="3", gpm=False)
    with pytest.raises(MeterError, match="no GPU with NVML index 3"):
        m.open()
    m = NvmlMeter(cuda_visible_devices="", gpm=False)
    with pytest.raises(MeterError, match="no GPU visible"):
        m.open()


# ------------------------------------------------------------------------------------------------
# recorded on the H200 (validation/h200-2026-12): the timelines and the records the real meter wrote

RECORDED = [
    ("session-2026-12-01b", "vllm-qwen3b-closed-b1-random-s0-cg1", "draft--mv3"),  # no clock-event reason
    ("session-2026-12-01b", "vllm-qwen3b-closed-b32-random-s0-cg1", "baseline--open"),  # SW power cap (0x4)
    ("session-2026-11-30c", "sglang-qwen3b-closed-b32-random-s0-cg1", "draft--mv1"),
]


def _recorded(session: str, campaign: str, cell: str) -> tuple[list[dict], dict]:
    results = H200 / session / "results"
    timeline = packed.read_file(results / "timelines" / campaign / f"{cell}.parquet").to_pylist()
    rec = [r for r in pq.read_table(results / "records.parquet").to_pylist()
           if r["campaign_id"] == campaign and r["cell_name"] == cell]
    assert len(rec) == 1, (campaign, cell)
    return sorted(timeline, key=lambda r: r["t_monotonic"]), rec[0]


@pytest.mark.parametrize("session, campaign, cell", RECORDED)
def test_recorded_h200_timeline_gives_back_the_recorded_result(monkeypatch, session, campaign, cell):
    rows, rec = _recorded(session, campaign, cell)
    assert {r["gpu_index"] for r in rows} == {0} and len(rows) == rec["timeline_samples"]
    fake = ReplayNvml([[r] for r in rows], uuids=[rows[0]["gpu_uuid"]])
    clock = ReplayClock(rows[0]["t_monotonic"] - 10.0)
    m = _open(monkeypatch, fake, clock)
    # The edge reads are not in the timeline: the start edge takes the last reading before the window, the
    # end edge that plus the record's energy in mJ (the record holds J with mJ resolution).
    before = [r["energy_mj"] for r in rows if r["t_monotonic"] < rec["window_start_monotonic"]]
    e0 = before[-1]
    e1 = e0 + round(rec["energy_j"] * 1000)
    _replay(m, fake, clock, [r["t_monotonic"] for r in rows], rec["window_start_monotonic"],
            rec["window_end_monotonic"], [e0], [e1])
    res, tl = m.result(), m.timeline()
    m.close()
    assert res.energy_j == pytest.approx(rec["energy_j"], rel=1e-12) and res.energy_j_per_gpu == [res.energy_j]
    # What the real meter computed from these very ticks on the GPU:
    assert res.energy_counter_updates == rec["energy_counter_updates"]
    assert res.throttle_reasons_mask == rec["throttle_reasons_mask"]
    assert res.power_min_w == pytest.approx(rec["power_min_w"], abs=1e-9)
    assert res.power_max_w == pytest.approx(rec["power_max_w"], abs=1e-9)
    assert res.max_temperature_c == rec["max_temperature_c"]
    assert res.timeline_samples == rec["timeline_samples"]
    assert res.timeline_hz == pytest.approx(rec["timeline_hz"], rel=1e-9)
    assert tl.column("in_window").to_pylist() == [r["in_window"] for r in rows]
    assert tl.column("energy_mj").to_pylist() == [r["energy_mj"] for r in rows]


@pytest.mark.parametrize("session, campaign, cell", RECORDED)
def test_recorded_counter_in_the_timeline_agrees_with_the_recorded_energy(session, campaign, cell):
    """Independent of the meter's code: the mJ counter sampled at 10 Hz inside the window, over 1000, is the
    record's energy in J to within the edge ticks (at most ~0.1 s at the window's peak power on each side)."""
    rows, rec = _recorded(session, campaign, cell)
    inside = [r["energy_mj"] for r in rows if r["in_window"]]
    from_ticks_j = (inside[-1] - inside[0]) / 1000
    assert math.isclose(from_ticks_j, rec["energy_j"], abs_tol=0.25 * rec["power_max_w"])
    assert rec["energy_j"] / rec["window_s"] == pytest.approx(rec["mean_power_w"], rel=1e-9)
    assert rec["power_min_w"] <= rec["mean_power_w"] * 1.1 and rec["mean_power_w"] <= rec["power_max_w"] * 1.1


# ------------------------------------------------------------------------------------------------
# the sampler's schedule, on the replay clock: what it waits for, not how fast a loaded machine runs it

class ScriptedStop:
    """Stands in for the sampler's stop event: ``wait`` advances the replay clock by what was asked and records
    it; the sampler is told to stop after ``ticks`` waits."""

    def __init__(self, clock: ReplayClock, ticks: int) -> None:
        self.clock, self.left, self.delays = clock, ticks, []

    def is_set(self) -> bool:
        return self.left <= 0

    def wait(self, delay: float) -> bool:
        self.delays.append(delay)
        self.clock.t += delay
        self.left -= 1
        return self.is_set()


class SlowNvml(ReplayNvml):
    """Some ticks' power reading takes longer than the sampling period (a slow NVML call)."""

    def __init__(self, ticks, clock: ReplayClock, slow_s: dict[int, float]) -> None:
        super().__init__(ticks)
        self.clock, self.slow_s, self.tick = clock, slow_s, 0

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self.clock.t += self.slow_s.get(self.tick, 0.0)
        self.tick += 1
        return 100_000


def test_the_sampler_keeps_its_period_and_skips_ahead_after_a_slow_tick(monkeypatch):
    clock = ReplayClock(50.0)
    fake = SlowNvml(_ticks(GPU0), clock, slow_s={2: 0.3})  # the third tick's NVML call takes 0.3 s
    m = _open(monkeypatch, fake, clock, sample_hz=8.0)  # a tick every 0.125 s
    m._stop = ScriptedStop(clock, ticks=6)
    m._run()
    assert m._sampler_error is None
    times = [s[0] for s in m._samples]
    # Ticks at 50, 50.125, 50.25 (slow: returns at 50.55, past its next slot 50.375); the sampler does not burst
    # to catch up but starts again from then: 50.55, then 50.675, 50.8.
    assert times == [50.0, 50.125, 50.25, 50.55, 50.675, 50.8]
    assert m._stop.delays == [0.125, 0.125, 0, 0.125, 0.125, 0.125]
    m.close()


def test_a_tick_that_raises_ends_the_sampler_and_the_result_says_so(monkeypatch):
    class Failing(ReplayNvml):
        def nvmlDeviceGetUtilizationRates(self, h):
            raise RuntimeError("driver fell over")  # not an NVMLError: not a field some GPUs lack

    clock = ReplayClock(0.0)
    fake = Failing(_ticks(GPU0))
    m = _open(monkeypatch, fake, clock)
    m._stop = ScriptedStop(clock, ticks=5)
    m._run()  # returns instead of raising: the error waits for result()
    assert isinstance(m._sampler_error, RuntimeError) and m._samples == []
    fake.edge_mj = [1_000]
    m.mark_window_start()
    fake.edge_mj = [2_000]
    m.mark_window_end()
    with pytest.raises(MeterError, match="NVML timeline sampler failed: driver fell over"):
        m.result()
    m.close()


def test_start_and_stop_run_one_sampler_thread(monkeypatch):
    import threading
    import time

    fake = FakeNvml(gpm="no_bindings")
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    m = NvmlMeter(cuda_visible_devices=None, own_pids=lambda: set(), gpm=False, sample_hz=100.0)
    m.open()
    m.stop_sampling()  # not started: nothing to stop
    m.start_sampling()
    first = m._thread
    m.start_sampling()  # already running: the same thread, not a second one
    assert m._thread is first and first.is_alive() and first.name == "specjoule-nvml-sampler"
    assert first.daemon  # a hung NVML call must not keep the cell's process alive
    with pytest.raises(MeterError, match="^meter nvml: reset_window while sampling$"):
        m.reset_window()
    deadline = time.monotonic() + 30
    while len(m._samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    m.stop_sampling()
    assert m._thread is None and not first.is_alive() and len(m._samples) >= 3
    assert threading.active_count() >= 1 and m._sampler_error is None
    m.reset_window()
    assert m._samples == [] and m.timeline().num_rows == 0
    m.close()


def test_reset_window_forgets_the_last_cell(hand_built):
    assert hand_built.result().other_gpu_processes == 0
    hand_built._sampler_error = OSError("left from the last cell")
    hand_built.reset_window()
    assert hand_built.timeline().num_rows == 0 and hand_built._others_end is None
    assert (hand_built._t_start, hand_built._t_end, hand_built._e_start, hand_built._e_end) == (None,) * 4
    with pytest.raises(MeterError, match="window edges were not both read"):  # not the old sampler error
        hand_built.result()


def test_a_timeline_without_a_window_is_relative_to_its_first_tick(monkeypatch):
    fake, clock = ReplayNvml(_ticks(GPU0)), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)
    assert m.timeline().num_rows == 0
    for i in (3, 4):
        clock.t = TIMES[i]
        fake.at(i)
        m._sample_once()
    tl = m.timeline().to_pylist()
    assert [r["t_rel_s"] for r in tl] == [0.0, 0.125] and [r["in_window"] for r in tl] == [False, False]
    clock.t, fake.edge_mj = TIMES[4], [5]
    m.mark_window_start()  # a start without an end marks nothing as inside yet
    assert [r["in_window"] for r in m.timeline().to_pylist()] == [False, False]
    assert [r["t_rel_s"] for r in m.timeline().to_pylist()] == [-0.125, 0.0]
    m.close()


def test_enumeration_failures_name_the_call(monkeypatch):
    from tests.fake_nvml import NVMLError

    class NoHandles(ReplayNvml):
        def nvmlDeviceGetHandleByIndex(self, i):
            if i == 1:
                raise NVMLError(15, "GPU is lost")
            return i

    fake = NoHandles(_ticks(GPU0, GPU1))
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    with pytest.raises(MeterError) as err:
        list_devices()
    assert str(err.value) == "NVML nvmlDeviceGetHandleByIndex/GetUUID on GPU index 1 failed: GPU is lost (NVMLError)"
    with pytest.raises(MeterError) as err:
        NvmlMeter(cuda_visible_devices=None, gpm=False).open()
    assert str(err.value) == "NVML device enumeration failed: GPU is lost (NVMLError)"


def test_our_own_processes_are_this_one_and_its_children():
    import os
    import subprocess
    import sys

    grandchild = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; " \
                 "time.sleep(30)']); print(p.pid, flush=True); time.sleep(30); p.kill()"
    child = subprocess.Popen([sys.executable, "-c", grandchild], stdout=subprocess.PIPE, text=True)
    try:
        grandchild_pid = int(child.stdout.readline())
        ours = nvml_mod._own_pid_tree()
        assert os.getpid() in ours and child.pid in ours and grandchild_pid in ours  # the engine's workers too
        assert os.getppid() not in ours
    finally:
        child.kill()
        child.wait()
        os.kill(grandchild_pid, 9)


def test_clock_event_reasons_fall_back_to_the_older_throttle_call(monkeypatch):
    """Drivers before the clock-event API answer only nvmlDeviceGetCurrentClocksThrottleReasons."""
    from tests.fake_nvml import NVMLError_NotSupported

    class OldDriver(ReplayNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, h):
            raise NVMLError_NotSupported()

    fake, clock = OldDriver(_ticks(GPU0, GPU1)), ReplayClock(T0 - 1.0)
    m = _open(monkeypatch, fake, clock)
    _replay(m, fake, clock, TIMES, T_START, T_END, EDGE_START, EDGE_END)
    assert m.result().throttle_reasons_mask == 0x7
    m.close()


def test_one_tick_has_no_rate(monkeypatch):
    fake, clock = ReplayNvml(_ticks(GPU0)), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)
    m._sample_once()
    fake.edge_mj = [1]
    m.mark_window_start()
    fake.edge_mj = [2]
    m.mark_window_end()
    res = m.result()
    m.close()
    assert res.timeline_samples == 1 and res.timeline_hz is None


def test_failing_process_and_power_calls_name_the_gpu(monkeypatch, caplog):
    from tests.fake_nvml import NVMLError

    class Flaky(ReplayNvml):
        procs_fail = power_fail = False

        def nvmlDeviceGetComputeRunningProcesses(self, h):
            if self.procs_fail:
                raise NVMLError(999, "Unknown Error")
            return []

        def nvmlDeviceGetPowerUsage(self, h):
            if self.power_fail:
                raise NVMLError(15, "GPU is lost")
            return super().nvmlDeviceGetPowerUsage(h)

    fake, clock = Flaky(_ticks(GPU0)), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)
    fake.procs_fail, fake.edge_mj = True, [1_000]
    m.mark_window_start()
    fake.edge_mj = [2_000]
    with caplog.at_level("WARNING", logger="specjoule.meter"):
        m.mark_window_end()  # the window's energy stands; the count of other processes is just unknown
    assert ("process list at window end unavailable: NVML nvmlDeviceGetComputeRunningProcesses on GPU 0 "
            "(GPU-replay00-0000-0000-0000-000000000000) failed: Unknown Error (NVMLError)") in caplog.text
    assert m.result().energy_j == 1.0
    fake.procs_fail, fake.power_fail, fake.edge_mj = False, True, None
    with pytest.raises(MeterError) as err:
        m.measure_idle(1.0)
    assert str(err.value) == ("NVML nvmlDeviceGetPowerUsage on GPU 0 (GPU-replay00-0000-0000-0000-000000000000) "
                              "failed: GPU is lost (NVMLError)")
    m.close()


def test_a_gpu_without_the_energy_counter_or_a_driver_answer_fails_at_open(monkeypatch):
    from tests.fake_nvml import NVMLError, NVMLError_NotSupported

    class NoCounter(ReplayNvml):
        def nvmlDeviceGetTotalEnergyConsumption(self, h):
            raise NVMLError_NotSupported()

    class NoDriver(ReplayNvml):
        def nvmlSystemGetDriverVersion(self):
            raise NVMLError(999, "Unknown Error")

    for fake, message in ((NoCounter(_ticks(GPU0)), "NVML nvmlDeviceGetTotalEnergyConsumption on GPU 0 "
                           "(GPU-replay00-0000-0000-0000-000000000000) failed: Not Supported (NVMLError_NotSupported)"),
                          (NoDriver(_ticks(GPU0)), "NVML nvmlSystemGetDriverVersion failed: Unknown Error (NVMLError)")):
        monkeypatch.setattr(nvml_mod, "_pynvml", lambda fake=fake: fake)
        m = NvmlMeter(cuda_visible_devices=None, gpm=False)
        with pytest.raises(MeterError) as err:
            m.open()  # at open, not at the first window edge
        assert str(err.value) == message
        m.close()


def test_refused_timeline_readings_are_logged_at_the_first_and_every_500th(monkeypatch, caplog):
    """A GPU that stops answering shows in the log before a window edge fails, without a line per tick: the
    first refusal is logged, then one line per 500 with the running count."""
    ticks = _ticks(GPU0, GPU1)
    ticks[0][1]["temperature_c"] = None  # GPU 1 gives no temperature: one refusal per tick
    fake, clock = ReplayNvml(ticks), ReplayClock(T0)
    m = _open(monkeypatch, fake, clock)
    with caplog.at_level("WARNING", logger="specjoule.meter"):
        for _ in range(1001):
            m._sample_once()
    logged = [r.getMessage() for r in caplog.records if "timeline reading" in r.getMessage()]
    assert logged == [f"meter nvml: timeline reading nvmlDeviceGetTemperature failed ({n} so far): Not Supported "
                      "(NVMLError_NotSupported)" for n in (1, 500, 1000)]
    assert [row[7] for row in m._samples[-2:]] == [40.0, None]  # GPU 0 still reads; GPU 1's is a null
    m.close()
