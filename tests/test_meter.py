"""Meters and GPU pinning on this CPU machine: the none meter, NVML's clear failure where there is
no driver, the CUDA_VISIBLE_DEVICES → NVML mapping on plain data, and the lease rules.

The NVML happy path needs a GPU: ``scripts/smoke_cell.py`` runs it there.
"""

from __future__ import annotations

import pytest

from specjoule import gpu, records
from specjoule.meter import MeterError, NoneMeter, make_meter
from specjoule.meter.nvml import DeviceInfo, NvmlMeter, list_devices, resolve_visible


def _nvml_absent() -> bool:
    try:
        list_devices()
    except MeterError:
        return True
    return False


NO_NVML = _nvml_absent()


def test_none_meter_gives_null_energy_and_empty_timeline():
    m = make_meter("none", "cuda")
    assert isinstance(m, NoneMeter)
    with m:
        assert m.measure_idle(0.5) is None
        m.start_sampling()
        t0 = m.mark_window_start()
        t1 = m.mark_window_end()
        assert t1 >= t0
    res = m.result()
    cols = res.columns()
    assert cols["meter"] == "none"
    for name in ("energy_j", "energy_j_per_gpu", "idle_power_w", "gpu_uuid", "power_limit_w"):
        assert cols[name] is None, name
    assert m.timeline().schema.equals(records.TIMELINE_SCHEMA) and m.timeline().num_rows == 0
    # The record layer refuses a zero where a null belongs.
    with pytest.raises(records.RecordError, match="energy must be null"):
        records.validate_row({"meter": "none", "energy_j": 0.0})


def test_unknown_meter_mode_is_an_error():
    with pytest.raises(MeterError, match="meter = 'joulemeter'"):
        make_meter("joulemeter", "cuda")


def test_auto_is_none_on_cpu_and_without_nvml():
    assert isinstance(make_meter("auto", "cpu"), NoneMeter)
    if NO_NVML:
        m = make_meter("auto", "cuda")
        assert isinstance(m, NoneMeter)
        assert "NVML unavailable" in m.result().extra["reason"]


def test_nvml_meter_clear_error_or_real_energy(tmp_path):
    """Without a driver (this CPU machine): a clear MeterError, no fallback. With one (the GPU
    node): the real counter advances over a 2 s window and the timeline runs at ~10 Hz."""
    m = make_meter("nvml", "cuda")  # asked for explicitly: never a silent fallback to none
    assert isinstance(m, NvmlMeter)
    if NO_NVML:
        with pytest.raises(MeterError, match=r"NVML cannot initialise: .*LibraryNotFound.*use meter: none"):
            m.open()
        m.close()  # safe after a failed open
        with pytest.raises(MeterError, match="NVML cannot initialise"):
            list_devices()
        return
    import time

    m.open()
    try:
        idle = m.measure_idle(1.0)
        m.start_sampling()
        time.sleep(0.3)
        t0 = m.mark_window_start()
        time.sleep(2.0)
        t1 = m.mark_window_end()
        time.sleep(0.3)
        m.stop_sampling()
        res = m.result()
        tl = m.timeline()
    finally:
        m.close()
    assert res.meter == "nvml" and res.energy_j > 0 and len(res.energy_j_per_gpu) == len(res.gpu_uuids)
    assert res.energy_j == pytest.approx(sum(res.energy_j_per_gpu))
    assert idle is not None and 0 < idle < res.power_limit_w
    # Counter-based mean power and the sampled power agree to within the 1 s averaging of the latter.
    assert 0.3 * res.power_min_w <= res.energy_j / (t1 - t0) <= 3 * res.power_max_w
    assert res.energy_counter_updates >= 5  # ~100 ms updates on Hopper
    assert 8 <= res.timeline_hz <= 11
    assert all(u.startswith("GPU-") for u in res.gpu_uuids) and res.driver_version
    assert tl.schema.equals(records.TIMELINE_SCHEMA) and 0 < sum(tl.column("in_window").to_pylist()) < tl.num_rows


DEVICES = [DeviceInfo(0, "GPU-6f0d1a2b-0000-0000-0000-000000000000", "NVIDIA H200"),
           DeviceInfo(1, "GPU-6f0d9999-0000-0000-0000-000000000000", "NVIDIA H200"),
           DeviceInfo(2, "GPU-a1b2c3d4-0000-0000-0000-000000000000", "NVIDIA H200"),
           DeviceInfo(3, "GPU-ffee0011-0000-0000-0000-000000000000", "NVIDIA H200")]


@pytest.mark.parametrize("cvd, expected", [
    (None, [0, 1, 2, 3]),
    ("", []),
    ("2", [2]),
    ("3,0", [3, 0]),  # CUDA's order is the variable's order
    (" 1 , 2 ", [1, 2]),
    ("GPU-a1b2c3d4-0000-0000-0000-000000000000", [2]),
    ("GPU-a1b2", [2]),  # abbreviated UUIDs, as CUDA accepts them
    ("GPU-ffee0011-0000-0000-0000-000000000000,1", [3, 1]),  # mixed
])
def test_visible_devices_map_to_nvml_uuids(cvd, expected):
    assert [d.index for d in resolve_visible(cvd, DEVICES)] == expected


@pytest.mark.parametrize("cvd, message", [
    ("7", "no GPU with NVML index 7"),
    ("-1", r"^CUDA_VISIBLE_DEVICES entry '-1': no GPU with NVML index -1 \(NVML sees 4 GPU\(s\)\)$"),
    ("GPU-6f0d", "matches 2 GPU UUIDs"),
    ("GPU-deadbeef", "no GPU with that UUID"),
    ("MIG-0a1b2c3d-0000", "MIG instance"),
    ("1,1", "names GPU-6f0d9999-0000-0000-0000-000000000000 twice"),
    ("cuda:0", "neither an index nor a GPU-UUID"),
])
def test_visible_devices_bad_entries_are_named(cvd, message):
    with pytest.raises(MeterError, match=message):
        resolve_visible(cvd, DEVICES)


def test_gpu_lease_cpu_is_no_lease(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    lease = gpu.acquire("cpu")
    assert lease.source == "cpu" and lease.uuids == []
    lease.release()


def test_gpu_lease_under_slurm_uses_allocation_as_given(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a1b2c3d4")
    lease = gpu.acquire("cuda", lock_dir=str(tmp_path))
    assert lease.source == "slurm" and lease.cuda_visible_devices == "GPU-a1b2c3d4"
    assert list(tmp_path.iterdir()) == []  # no lock taken: SLURM made the GPU exclusive
    with pytest.raises(gpu.GpuLeaseError, match="needs 2 GPU"):
        gpu.acquire("cuda", n_gpus=2)


def test_gpu_lease_locally_needs_nvml(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.setenv(var, "x")
        monkeypatch.delenv(var)
    with pytest.raises(gpu.GpuLeaseError, match="device = 'tpu'"):
        gpu.acquire("tpu")
    if NO_NVML:
        with pytest.raises(MeterError, match="NVML cannot initialise"):
            gpu.acquire("cuda", lock_dir=str(tmp_path))
        return
    lease = gpu.acquire("cuda", lock_dir=str(tmp_path))  # a real GPU, a real lock file
    import os
    assert lease.source == "lease" and os.environ["CUDA_VISIBLE_DEVICES"] == lease.cuda_visible_devices
    assert [p.name for p in tmp_path.iterdir()] == [f"{lease.uuids[0]}.lock"]
    lease.release()


def test_gpu_lease_locks_one_gpu_per_cell(monkeypatch, tmp_path):
    """The lock logic on plain data (NVML's device list replaced by a fixed one; locks are real files)."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):  # set then delete: monkeypatch restores both
        monkeypatch.setenv(var, "x")
        monkeypatch.delenv(var)
    monkeypatch.setattr(gpu, "_visible_candidates", lambda: [(d.index, d.uuid) for d in DEVICES[:2]])
    a = gpu.acquire("cuda", lock_dir=str(tmp_path))
    import os
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    b = gpu.acquire("cuda", lock_dir=str(tmp_path))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert {a.uuids[0], b.uuids[0]} == {DEVICES[0].uuid, DEVICES[1].uuid}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{d.uuid}.lock" for d in DEVICES[:2])
    with pytest.raises(gpu.GpuLeaseError, match="no 1 free GPU"):
        gpu.acquire("cuda", lock_dir=str(tmp_path), timeout_s=0.3, poll_s=0.1)
    a.release()
    c = gpu.acquire("cuda", lock_dir=str(tmp_path), timeout_s=30)  # free now: returns at once; 30 s only on a bug
    assert c.uuids == [DEVICES[0].uuid]
    with pytest.raises(gpu.GpuLeaseError, match="needs 3 GPU"):
        gpu.acquire("cuda", n_gpus=3, lock_dir=str(tmp_path), timeout_s=0)
    b.release()
    c.release()
