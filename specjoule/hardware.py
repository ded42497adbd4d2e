"""Measured hardware constants of one GPU (issue 18, ADR 0100).

HBM bandwidth (a large device-to-device copy and a read-only reduction), bf16 dense matmul
throughput (8192³, random data), idle power and the power under each kernel from NVML's energy
counter, hence the energy per HBM byte and per bf16 operation and the balance point. One JSON per
GPU UUID and driver, ``<out>/<uuid>-<driver>.json``, reused unless ``--force``.

    python -m specjoule.hardware calibrate --out results/hardware [--seconds 4] [--force]
    python -m specjoule.hardware show results/hardware/GPU-…-580.159.04.json

The module imports without torch (the analysis and the tests use its arithmetic on CPU); only
``calibrate`` needs torch with CUDA and NVML, and it says so when they are missing.

Method, in short (the ADR has the why):
- Each kernel is captured in a CUDA graph of ~50 ms and replayed back to back, so the host is free
  while the GPU is busy. The energy counter is read at two of its own updates (polled until it
  changes) strictly inside the busy span: power is the steady-state power of that kernel alone.
- Bytes are counted honestly: copy = read + write, reduction = read; the matmul's HBM bytes are
  its lower bound (A, B read once, C written once) unless GPM's DRAM utilization measured more.
- Static power = idle power (CUDA context up, no kernel, before any kernel ran). The two dynamic
  unknowns, J per byte and J per operation, come from two kernels: copy (bytes, no tensor
  operations) and matmul (operations, few bytes). The reduction is held out and predicted.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("specjoule.hardware")

SCHEMA = "specjoule-hardware/1"
DEFAULT_OUT = "results/hardware"
MATMUL_N = 8192
COPY_BYTES = 2 << 30  # per buffer; ≫ the 50-60 MB L2 of Hopper
BF16_BYTES = 2


class HardwareError(RuntimeError):
    """Calibration that cannot run or cannot be trusted: names what and why."""


# ------------------------------------------------------------------------------------------------
# plain data and arithmetic (no torch; tested on CPU with recorded inputs)


@dataclass
class KernelRun:
    """One kernel's timed and metered loop, as measured (everything the arithmetic needs)."""

    name: str
    hbm_bytes_per_iter: float  # bytes through HBM per iteration, counted honestly
    ops_per_iter: float  # bf16 tensor operations (multiply and add count 2) per iteration
    iters: int  # iterations between the start and end events
    kernel_s: float  # CUDA-event time of those iterations
    energy_j: float  # NVML counter delta between two of its updates inside the busy span
    energy_s: float  # host time between those two updates
    sm_clock_mhz: float | None = None  # mean of the samples inside the metered span
    throttle_mask: int | None = None  # OR of clock-event reasons seen
    temperature_c: float | None = None  # max seen
    gpm: dict[str, float | None] = field(default_factory=dict)  # window GPM over the metered span
    busy_at_end: bool = True  # the GPU still had work when the last counter edge was read

    @property
    def bytes_per_s(self) -> float:
        return self.hbm_bytes_per_iter * self.iters / self.kernel_s

    @property
    def ops_per_s(self) -> float:
        return self.ops_per_iter * self.iters / self.kernel_s

    @property
    def power_w(self) -> float:
        return self.energy_j / self.energy_s


def balance_point(ops_per_s: float, bytes_per_s: float) -> float:
    """Operations per HBM byte at which the two ceilings take equal time."""
    if bytes_per_s <= 0 or ops_per_s <= 0:
        raise HardwareError(f"balance point needs positive rates (ops/s = {ops_per_s}, bytes/s = {bytes_per_s})")
    return ops_per_s / bytes_per_s


def fit_energy_coefficients(
    static_w: float, a: KernelRun, b: KernelRun, bytes_per_s: tuple[float, float] | None = None
) -> tuple[float, float]:
    """(J per HBM byte, J per operation) from two kernels' power above static power.

    P_k − P_static = e_byte · bytes/s_k + e_op · ops/s_k for k in {a, b}: two equations, two
    unknowns (Cramer's rule). ``bytes_per_s`` overrides the kernels' own counted rates (the
    GPM-measured HBM traffic). Refuses a singular system or a negative coefficient, naming both.
    """
    ba, bb = bytes_per_s if bytes_per_s else (a.bytes_per_s, b.bytes_per_s)
    oa, ob = a.ops_per_s, b.ops_per_s
    pa, pb = a.power_w - static_w, b.power_w - static_w
    det = ba * ob - bb * oa
    if abs(det) <= 1e-12 * max(abs(ba * ob), abs(bb * oa), 1e-300):
        raise HardwareError(
            f"kernels {a.name} and {b.name} have proportional bytes/s and ops/s: "
            f"energy per byte and per operation cannot be separated"
        )
    e_byte = (pa * ob - pb * oa) / det
    e_op = (ba * pb - bb * pa) / det
    if e_byte <= 0 or e_op <= 0:
        raise HardwareError(
            f"energy fit gave e_byte = {e_byte:.3g} J/B, e_op = {e_op:.3g} J/op (≤ 0) from "
            f"{a.name} {a.power_w:.1f} W, {b.name} {b.power_w:.1f} W over static {static_w:.1f} W: "
            f"the kernels did not draw more than idle; re-run on an otherwise idle GPU"
        )
    return e_byte, e_op


def gpm_hbm_bytes_per_s(kernel: KernelRun, reference: KernelRun) -> float | None:
    """HBM traffic of ``kernel`` scaled from ``reference``'s counted bytes/s by GPM's DRAM utilization.

    The copy's bytes are known exactly; GPM gives each kernel's DRAM bandwidth as a share of the
    same theoretical peak, so kernel bytes/s = copy bytes/s × util_kernel / util_copy. None where
    GPM did not give both.
    """
    uk, ur = kernel.gpm.get("dram_bw_util_pct"), reference.gpm.get("dram_bw_util_pct")
    if uk is None or ur is None or ur <= 0:
        return None
    return reference.bytes_per_s * uk / ur


def summarise(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The constants from a raw calibration (``raw`` as ``measure`` writes it): pure arithmetic."""
    kernels = {name: KernelRun(**k) for name, k in raw["kernels"].items()}
    for needed in ("copy", "reduce", "matmul"):
        if needed not in kernels:
            raise HardwareError(f"raw calibration lacks kernel {needed!r} (has {sorted(kernels)})")
    idle_w = raw["idle"]["energy_j"] / raw["idle"]["energy_s"]
    copy, reduce, mm = kernels["copy"], kernels["reduce"], kernels["matmul"]
    for k in kernels.values():
        if not k.busy_at_end:
            raise HardwareError(
                f"kernel {k.name}: the GPU ran out of work before the last energy edge; "
                f"its power would include idle time (raise the replay margin)"
            )
    hbm = max(copy.bytes_per_s, reduce.bytes_per_s)
    hbm_source = "copy" if copy.bytes_per_s >= reduce.bytes_per_s else "reduce"
    ops = mm.ops_per_s
    mm_gpm_bytes = gpm_hbm_bytes_per_s(mm, copy)
    if mm_gpm_bytes is not None and mm_gpm_bytes > mm.bytes_per_s:
        mm_bytes, bytes_method = mm_gpm_bytes, "matmul HBM bytes/s from GPM DRAM utilization scaled by the copy's"
    else:
        mm_bytes, bytes_method = (
            mm.bytes_per_s,
            "matmul HBM bytes/s as its lower bound (A, B read once, C written once)",
        )
    e_byte, e_op = fit_energy_coefficients(idle_w, copy, mm, bytes_per_s=(copy.bytes_per_s, mm_bytes))
    predicted_reduce_w = idle_w + e_byte * reduce.bytes_per_s + e_op * reduce.ops_per_s
    return {
        "static_power_w": idle_w,
        "hbm_bytes_per_s": hbm,
        "hbm_source": hbm_source,
        "copy_bytes_per_s": copy.bytes_per_s,
        "reduce_bytes_per_s": reduce.bytes_per_s,
        "bf16_ops_per_s": ops,
        "balance_point_op_per_byte": balance_point(ops, hbm),
        "energy_per_byte_j": e_byte,
        "energy_per_op_j": e_op,
        "energy_per_byte_pj": e_byte * 1e12,
        "energy_per_op_pj": e_op * 1e12,
        # op/B at which a byte and the operations on it cost the same energy
        "energy_balance_op_per_byte": e_byte / e_op,
        "power_w": {name: k.power_w for name, k in kernels.items()},
        "matmul_hbm_bytes_per_s_used": mm_bytes,
        "reduce_check": {
            "predicted_power_w": predicted_reduce_w,
            "measured_power_w": reduce.power_w,
            "relative_error": (predicted_reduce_w - reduce.power_w) / reduce.power_w,
        },
        "method": (
            "static = idle power (CUDA context, no kernel, before any kernel); "
            "e_byte, e_op solved from copy and matmul power above static (two equations, two unknowns); "
            f"{bytes_method}; HBM ceiling = the faster of copy (read + write) and reduction (read); "
            "the reduction is held out and predicted (reduce_check)"
        ),
    }


def cache_name(uuid: str, driver: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{uuid}-{driver}")
    return f"{safe}.json"


def load(path: str | Path) -> dict[str, Any]:
    """A calibration JSON, checked for its schema and the constants the analysis reads."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise HardwareError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    for key in ("gpu_uuid", "driver_version", "constants"):
        if key not in data:
            raise HardwareError(f"{path}: missing {key!r}")
    for key in (
        "hbm_bytes_per_s",
        "bf16_ops_per_s",
        "balance_point_op_per_byte",
        "energy_per_byte_j",
        "energy_per_op_j",
        "static_power_w",
    ):
        v = data["constants"].get(key)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise HardwareError(f"{path}: constants.{key} = {v!r} is not a positive number")
    return data


def find_calibrations(directory: str | Path) -> list[dict[str, Any]]:
    """Every calibration JSON under ``directory`` (none: an empty list), each with its ``path``."""
    out = []
    for p in sorted(Path(directory).glob("GPU-*.json")):
        d = load(p)
        d["path"] = str(p)
        out.append(d)
    return out


def for_gpu(
    calibrations: list[dict[str, Any]], gpu_uuid: str | None, driver: str | None = None
) -> dict[str, Any] | None:
    """The calibration of this GPU: same driver if there is one, else the latest of that GPU."""
    mine = [c for c in calibrations if gpu_uuid and c["gpu_uuid"] == gpu_uuid]
    same_driver = [c for c in mine if c["driver_version"] == driver]
    pick = same_driver or mine
    return max(pick, key=lambda c: c.get("measured_at", "")) if pick else None


# ------------------------------------------------------------------------------------------------
# measurement (torch + NVML; the GPU machine)


@dataclass
class _Nvml:
    nv: Any
    handle: Any
    uuid: str
    name: str
    driver: str
    power_limit_w: float

    def energy_mj(self) -> int:
        return int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def next_update(self, timeout_s: float = 2.0) -> tuple[int, float]:
        """Poll the energy counter until it changes: (value, host time of the change, ±1 ms)."""
        first = self.energy_mj()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            v = self.energy_mj()
            if v != first:
                return v, time.monotonic()
            time.sleep(0.001)
        raise HardwareError(f"NVML energy counter of {self.uuid} did not change in {timeout_s} s")

    def telemetry(self) -> tuple[float | None, int | None, float | None]:
        nv, h = self.nv, self.handle
        out: list[Any] = []
        for call in (
            lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        ):
            try:
                out.append(call())
            except (nv.NVMLError, AttributeError):
                out.append(None)
        return out[0], out[1], out[2]


def _open_nvml() -> _Nvml:
    from specjoule.meter import MeterError
    from specjoule.meter.nvml import _text, list_devices, nvml_init, resolve_visible

    try:
        visible = resolve_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), list_devices())
    except MeterError as exc:
        raise HardwareError(f"calibrate needs an NVIDIA GPU and its driver: {exc}") from exc
    if not visible:
        raise HardwareError(
            f"calibrate: no GPU visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    dev = visible[0]  # torch's cuda:0 under the lease's PCI_BUS_ID order
    nv = nvml_init()
    h = nv.nvmlDeviceGetHandleByIndex(dev.index)
    return _Nvml(
        nv,
        h,
        dev.uuid,
        dev.name,
        _text(nv.nvmlSystemGetDriverVersion()),
        nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    )


def _import_torch():
    try:
        import torch
    except ImportError as exc:
        raise HardwareError(
            f"calibrate needs torch with CUDA (import torch failed: {exc}); run it on the GPU machine's Python"
        ) from exc
    if not torch.cuda.is_available():
        raise HardwareError(
            f"calibrate: torch {torch.__version__} sees no CUDA device (torch.version.cuda = {torch.version.cuda})"
        )
    return torch


def _metered_loop(
    torch,
    nvml: _Nvml,
    gpm,
    name: str,
    fn: Callable[[], Any],
    hbm_bytes: float,
    ops: float,
    seconds: float,
    lead_s: float,
    replay_s: float = 0.05,
) -> KernelRun:
    """Capture ``fn`` in a CUDA graph of ~replay_s and replay it back to back from a launcher thread
    while this thread meters the steady middle between two energy-counter updates.

    A launcher thread, because a graph launch blocks once the GPU's launch queue is full (seen on
    an H200: a loop of replays enqueued up front ran mostly before the first energy edge). The
    replay releases the GIL, so the edges here are read at ~1 ms resolution while it blocks."""
    import threading

    for _ in range(3):  # warms cuBLAS and the allocator; also the per-iteration time below
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    probe_iters = 10
    for _ in range(probe_iters):
        fn()
    torch.cuda.synchronize()
    per_iter = (time.perf_counter() - t0) / probe_iters
    reps = max(1, int(replay_s / per_iter))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()

    stop = threading.Event()
    launched = [0]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    failure: list[BaseException] = []

    def launch() -> None:
        # At most `ahead` replays queued: a launch that does not block (a copy-engine node would not)
        # must not run minutes ahead of the GPU (seen: 1082 replays queued in 5 s, 84 s to drain).
        from collections import deque

        ahead, queued = 4, deque()
        try:
            torch.cuda.set_device(0)
            start.record()
            while not stop.is_set():
                if len(queued) >= ahead:
                    queued.popleft().synchronize()  # releases the GIL while it waits
                graph.replay()
                done = torch.cuda.Event()
                done.record()
                queued.append(done)
                launched[0] += 1
            end.record()
        except BaseException as exc:  # surfaced below
            failure.append(exc)

    launcher = threading.Thread(target=launch, name=f"calibrate-{name}", daemon=True)
    t_launch = time.monotonic()
    launcher.start()
    time.sleep(lead_s)  # clocks and power settle under the kernel
    e0, t_e0 = nvml.next_update()
    gpm_start = gpm.sample() if gpm else None
    clocks, masks, temps = [], 0, []
    while time.monotonic() < t_e0 + seconds:
        sm, mask, temp = nvml.telemetry()
        if sm is not None:
            clocks.append(sm)
        masks |= int(mask or 0)
        if temp is not None:
            temps.append(float(temp))
        time.sleep(0.1)
    e1, t_e1 = nvml.next_update()
    # Busy at the last edge: the launcher is still launching (it stops only when told), and it has
    # launched more replays than the GPU could have finished by now.
    busy = launcher.is_alive() and not failure
    gpm_values: dict[str, float | None] = {}
    if gpm:
        gpm_end = gpm.sample()
        try:
            gpm_values = gpm.metrics(gpm_start, gpm_end)
        finally:
            gpm.free(gpm_start)
            gpm.free(gpm_end)
    stop.set()
    launcher.join(timeout=30)
    if failure:
        raise HardwareError(f"kernel {name}: the launcher failed: {failure[0]}") from failure[0]
    end.synchronize()
    kernel_s = start.elapsed_time(end) / 1000.0
    iters = launched[0] * reps
    # The GPU worked through every launched replay without a gap only if the event span covers the
    # host span from the first launch to the last edge (a launcher slower than the GPU would leave gaps).
    busy = busy and kernel_s >= 0.97 * (t_e1 - t_launch)
    log.info(
        "%s: %d × %d iterations in %.3f s (first edge %.2f s after launch), %.1f W, busy %s",
        name,
        launched[0],
        reps,
        kernel_s,
        t_e0 - t_launch,
        (e1 - e0) / 1000.0 / (t_e1 - t_e0),
        busy,
    )
    return KernelRun(
        name=name,
        hbm_bytes_per_iter=float(hbm_bytes),
        ops_per_iter=float(ops),
        iters=iters,
        kernel_s=kernel_s,
        energy_j=(e1 - e0) / 1000.0,
        energy_s=t_e1 - t_e0,
        sm_clock_mhz=sum(clocks) / len(clocks) if clocks else None,
        throttle_mask=masks,
        temperature_c=max(temps) if temps else None,
        gpm=gpm_values,
        busy_at_end=busy,
    )


def measure(seconds: float = 4.0, idle_s: float = 3.0) -> dict[str, Any]:
    """Run the calibration on the visible GPU (cuda:0). Returns the raw record (``summarise`` reads it)."""
    from specjoule.meter.gpm import GpmReader

    t_begin = time.monotonic()
    nvml = _open_nvml()
    torch = _import_torch()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")  # the context: part of the static power an engine also holds
    torch.cuda.synchronize()
    gpm, gpm_reason = GpmReader.probe(nvml.nv, nvml.handle)
    log.info(
        "GPU %s (%s), driver %s, limit %.0f W; GPM: %s",
        nvml.name,
        nvml.uuid,
        nvml.driver,
        nvml.power_limit_w,
        "yes" if gpm else gpm_reason,
    )

    # Idle first, before any kernel warmed the chip: the floor the engine's cells also stand on.
    time.sleep(0.5)
    e0, t0 = nvml.next_update()
    time.sleep(idle_s)
    e1, t1 = nvml.next_update()
    idle = {"energy_j": (e1 - e0) / 1000.0, "energy_s": t1 - t0}
    sm_idle, _, temp_idle = nvml.telemetry()
    idle.update(sm_clock_mhz=sm_idle, temperature_c=temp_idle)

    gen = torch.Generator(device="cuda").manual_seed(0)
    n_copy = COPY_BYTES // BF16_BYTES
    src = torch.randn(n_copy, device="cuda", dtype=torch.bfloat16, generator=gen)
    dst = torch.empty_like(src)
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.empty_like(a)
    out = torch.empty((), device="cuda", dtype=torch.bfloat16)

    kernels = {}
    # The copy runs on the SMs (an elementwise negation: read once, write once): copy_ captured in a
    # graph becomes a copy-engine memcpy node, which moved only 2.7 TB/s on an H200 (ADR 0100).
    kernels["copy"] = _metered_loop(
        torch,
        nvml,
        gpm,
        "copy",
        lambda: torch.neg(src, out=dst),  # noqa: F821 (run before the del)
        hbm_bytes=2 * src.numel() * BF16_BYTES,
        ops=0,
        seconds=seconds,
        lead_s=0.4,
    )
    kernels["reduce"] = _metered_loop(
        torch,
        nvml,
        gpm,
        "reduce",
        lambda: torch.sum(src, dim=0, out=out),  # noqa: F821
        hbm_bytes=src.numel() * BF16_BYTES,
        ops=0,
        seconds=seconds,
        lead_s=0.4,
    )
    kernels["matmul"] = _metered_loop(
        torch,
        nvml,
        gpm,
        "matmul",
        lambda: torch.matmul(a, b, out=c),  # noqa: F821
        hbm_bytes=3 * MATMUL_N * MATMUL_N * BF16_BYTES,
        ops=2 * MATMUL_N**3,
        seconds=seconds,
        lead_s=0.8,
    )
    # The result is used, so nothing above can be skipped; a non-finite one means broken data.
    if not bool(torch.isfinite(c[:64, :64].float()).all()) or not math.isfinite(float(out)):
        raise HardwareError("calibration kernels produced non-finite values")
    gpu_s = time.monotonic() - t_begin
    del src, dst, a, b, c
    torch.cuda.empty_cache()
    return {
        "idle": idle,
        "kernels": {k: asdict(v) for k, v in kernels.items()},
        "gpm_reason": gpm_reason,
        "gpu_uuid": nvml.uuid,
        "gpu_name": nvml.name,
        "driver_version": nvml.driver,
        "power_limit_w": nvml.power_limit_w,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "seconds_per_kernel": seconds,
        "idle_s": idle_s,
        "calibration_s": gpu_s,
        "matmul_n": MATMUL_N,
        "copy_buffer_bytes": COPY_BYTES,
    }


def calibrate(out_dir: str | Path, seconds: float = 4.0, force: bool = False, lease: bool = True) -> Path:
    """Lease a GPU, and measure it unless ``<out>/<uuid>-<driver>.json`` exists (then reuse it)."""
    from specjoule import gpu
    from specjoule.meter import MeterError

    try:  # before torch: CUDA reads CUDA_VISIBLE_DEVICES once
        held = gpu.acquire("cuda") if lease else None
    except (MeterError, gpu.GpuLeaseError) as exc:
        raise HardwareError(f"calibrate needs an NVIDIA GPU and its driver: {exc}") from exc
    try:
        nvml = _open_nvml()
        path = Path(out_dir) / cache_name(nvml.uuid, nvml.driver)
        if path.exists() and not force:
            load(path)
            log.info("calibration cached for %s, driver %s: %s (--force measures again)", nvml.uuid, nvml.driver, path)
            return path
        raw = measure(seconds=seconds)
        try:
            constants = summarise(raw)
        except HardwareError:
            failed = path.with_suffix(".failed.json")
            failed.parent.mkdir(parents=True, exist_ok=True)
            failed.write_text(json.dumps({"schema": SCHEMA, "raw": raw}, indent=1, sort_keys=True) + "\n")
            log.error("calibration not trusted; its raw measurements: %s", failed)
            raise
        data = {
            "schema": SCHEMA,
            "gpu_uuid": raw["gpu_uuid"],
            "gpu_name": raw["gpu_name"],
            "driver_version": raw["driver_version"],
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "hostname": os.uname().nodename,
            "git_commit": os.environ.get("SPECJOULE_GIT_COMMIT"),
            "constants": constants,
            "raw": raw,
        }
        from specjoule.records import atomic_path

        with atomic_path(path) as tmp:
            Path(tmp).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return path
    finally:
        if held is not None:
            held.release()


def describe(data: Mapping[str, Any]) -> str:
    c = data["constants"]
    return (
        f"{data['gpu_name']} {data['gpu_uuid']} driver {data['driver_version']}: "
        f"HBM {c['hbm_bytes_per_s'] / 1e12:.2f} TB/s ({c['hbm_source']}; copy {c['copy_bytes_per_s'] / 1e12:.2f}, "
        f"reduce {c['reduce_bytes_per_s'] / 1e12:.2f}), bf16 {c['bf16_ops_per_s'] / 1e12:.0f} TFLOP/s, "
        f"balance {c['balance_point_op_per_byte']:.0f} op/B; static {c['static_power_w']:.0f} W, "
        f"{c['energy_per_byte_pj']:.1f} pJ/B, {c['energy_per_op_pj']:.3f} pJ/op; "
        f"reduction predicted {c['reduce_check']['predicted_power_w']:.0f} W vs measured "
        f"{c['reduce_check']['measured_power_w']:.0f} W; power {', '.join(f'{k} {v:.0f} W' for k, v in c['power_w'].items())}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specjoule.hardware", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="measure the leased GPU (cached per UUID and driver)")
    cal.add_argument("--out", default=DEFAULT_OUT, help=f"directory of <uuid>-<driver>.json (default {DEFAULT_OUT})")
    cal.add_argument("--seconds", type=float, default=4.0, help="metered seconds per kernel (default 4)")
    cal.add_argument("--force", action="store_true", help="measure even where a calibration of this GPU exists")
    cal.add_argument("--pointer", help="also write this JSON naming the calibration used (a Snakemake output)")
    cal.add_argument("--no-lease", action="store_true", help="skip the GPU lock (the caller already holds it)")
    show = sub.add_parser("show", help="print a calibration's constants")
    show.add_argument("path")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "show":
            print(describe(load(args.path)))
            return 0
        path = calibrate(args.out, seconds=args.seconds, force=args.force, lease=not args.no_lease)
        data = load(path)
        print(describe(data))
        if args.pointer:
            Path(args.pointer).parent.mkdir(parents=True, exist_ok=True)
            Path(args.pointer).write_text(
                json.dumps({"path": str(path), "gpu_uuid": data["gpu_uuid"], "driver_version": data["driver_version"]})
                + "\n"
            )
        return 0
    except HardwareError as exc:
        print(f"specjoule.hardware: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
