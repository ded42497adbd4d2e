"""NVML meter: the GPU's own total-energy counter read at the window edges, plus a 10 Hz timeline.

Why the energy counter and not integrated power (ADR 0011): ``nvmlDeviceGetTotalEnergyConsumption``
is a hardware accumulator (mJ since driver load) that updates every ~100 ms on Hopper, while
``nvmlDeviceGetPowerUsage`` is a 1 s moving average on recent GPUs; integrating the average smears
the window edges by up to a second. Power, clocks, temperature, clock-event reasons and utilization
are still sampled (timeline) so that checks can see throttling and drift.

Every NVML failure becomes a ``MeterError`` naming the call and the GPU (Zeus style): a meter that
was asked to measure never returns a silent 0.

Hardware counters (ADR 0101): where NVML's GPM works (Hopper and later, not refused by a VM), DRAM
bandwidth utilization, SM activity and tensor-core activity are read at the window edges (exact
window averages) and every timeline tick; elsewhere those columns are null with the reason, and
the memory-busy share of ``nvmlDeviceGetUtilizationRates`` is what remains.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from specjoule.meter.base import Meter, MeterError, MeterResult
from specjoule.meter.gpm import GPM_COLUMNS, GpmReader
from specjoule.records import TIMELINE_SCHEMA

log = logging.getLogger("specjoule.meter")

SAMPLE_HZ = 10.0


def _pynvml():
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise MeterError("meter nvml: the Python package nvidia-ml-py (import pynvml) is not installed") from exc
    return pynvml


def _err(call: str, exc: Exception, where: str = "") -> MeterError:
    return MeterError(f"NVML {call}{' on ' + where if where else ''} failed: {exc} ({type(exc).__name__})")


_init_lock = threading.Lock()


def nvml_init() -> Any:
    """nvmlInit with a clear error; returns the pynvml module. NVML refcounts init/shutdown."""
    nv = _pynvml()
    with _init_lock:
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise MeterError(
                f"NVML cannot initialise: {exc} ({type(exc).__name__}). No NVIDIA driver is "
                f"reachable from this process; use meter: none (or auto) on machines without one"
            ) from exc
    return nv


def nvml_shutdown() -> None:
    nv = _pynvml()
    with _init_lock:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


@dataclass(frozen=True)
class DeviceInfo:
    """Plain data about one GPU as NVML numbers it (index = NVML / PCI bus order)."""

    index: int
    uuid: str
    name: str = ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def list_devices() -> list[DeviceInfo]:
    """Every GPU NVML sees. Raises MeterError when NVML is absent."""
    nv = nvml_init()
    try:
        out = []
        count = nv.nvmlDeviceGetCount()
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                out.append(DeviceInfo(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h))))
            except nv.NVMLError as exc:
                raise _err("nvmlDeviceGetHandleByIndex/GetUUID", exc, f"GPU index {i}") from exc
        return out
    finally:
        nvml_shutdown()


def resolve_visible(cuda_visible_devices: str | None, devices: list[DeviceInfo]) -> list[DeviceInfo]:
    """Map a ``CUDA_VISIBLE_DEVICES`` value to NVML devices, in CUDA's order.

    Entries may be NVML indices ("0,3") or UUIDs, also abbreviated as CUDA allows ("GPU-6f0d").
    Indices assume ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (NVML's order; the lease sets it). Unset means
    every device. MIG instances are refused: their energy is not metered per instance.
    """
    if cuda_visible_devices is None:
        return list(devices)
    entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip() != ""]
    out: list[DeviceInfo] = []
    for entry in entries:
        if entry.startswith("MIG-"):
            raise MeterError(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} is a MIG instance: NVML's energy counter covers "
                f"the whole GPU, not the instance; use meter: none or a whole GPU"
            )
        if entry.lstrip("-").isdigit():
            idx = int(entry)
            match = [d for d in devices if d.index == idx]
            if not match:
                raise MeterError(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r}: no GPU with NVML index {idx} "
                    f"(NVML sees {len(devices)} GPU(s))"
                )
        elif entry.startswith("GPU-"):
            match = [d for d in devices if d.uuid.startswith(entry)]
            if len(match) > 1:
                raise MeterError(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {len(match)} GPU UUIDs; use more digits"
                )
            if not match:
                raise MeterError(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r}: no GPU with that UUID "
                    f"(NVML sees {[d.uuid for d in devices]})"
                )
        else:
            raise MeterError(f"CUDA_VISIBLE_DEVICES entry {entry!r}: neither an index nor a GPU-UUID")
        if match[0] in out:
            raise MeterError(f"CUDA_VISIBLE_DEVICES = {cuda_visible_devices!r} names {match[0].uuid} twice")
        out.append(match[0])
    return out


class NvmlMeter(Meter):
    name = "nvml"

    def __init__(
        self,
        cuda_visible_devices: str | None = None,
        sample_hz: float = SAMPLE_HZ,
        own_pids: Callable[[], set[int]] | None = None,
        gpm: bool = True,
    ) -> None:
        self.cuda_visible_devices = (
            cuda_visible_devices if cuda_visible_devices is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
        )
        self.period = 1.0 / sample_hz
        self.own_pids = own_pids or _own_pid_tree
        self._nv = None
        self.devices: list[DeviceInfo] = []
        self._handles: list[Any] = []
        self._samples: list[tuple] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._sampler_error: BaseException | None = None
        self._t_start: float | None = None
        self._t_end: float | None = None
        self._e_start: list[int] | None = None
        self._e_end: list[int] | None = None
        self._idle_w: float | None = None
        self._others_before: int | None = None
        self._others_end: int | None = None
        self._others_seen: dict[tuple[int, int], dict[str, Any]] = {}  # (pid, GPU) -> process, start and window end
        self._sample_errors = 0  # timeline readings NVML refused (a GPU lost mid-window shows here first)
        self.driver: str | None = None
        self.power_limit_w: float | None = None
        # SPECJOULE_GPM=0 switches the counters off without a code change (a GPU or VM where GPM misbehaves).
        self.want_gpm = gpm and os.environ.get("SPECJOULE_GPM", "1") != "0"
        self._gpm: list[GpmReader | None] = []
        self._gpm_reason: str | None = (
            None if self.want_gpm else "GPM switched off (NvmlMeter(gpm=False) or SPECJOULE_GPM=0)"
        )
        self._gpm_prev: list[Any] = []  # the last tick's sample per GPU (timeline deltas)
        self._gpm_edges: dict[str, list[Any]] = {}  # "start" / "end" → one sample per GPU
        self._gpm_all: list[GpmReader | None] = []  # every reader opened, for freeing samples after a stop

    # -- setup -------------------------------------------------------------------------------
    def open(self) -> None:
        nv = nvml_init()
        self._nv = nv
        try:
            count = nv.nvmlDeviceGetCount()
            all_devices = []
            for i in range(count):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                all_devices.append(DeviceInfo(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h))))
        except nv.NVMLError as exc:
            self.close()
            raise _err("device enumeration", exc) from exc
        try:
            self.devices = resolve_visible(self.cuda_visible_devices, all_devices)
        except MeterError:
            self.close()
            raise
        if not self.devices:
            self.close()
            raise MeterError(f"meter nvml: no GPU visible (CUDA_VISIBLE_DEVICES={self.cuda_visible_devices!r})")
        self._handles = [self._call("nvmlDeviceGetHandleByIndex", d, d.index, raw=True) for d in self.devices]
        self.driver = _text(self._call("nvmlSystemGetDriverVersion", None))
        limits = [self._call("nvmlDeviceGetEnforcedPowerLimit", d, h) for d, h in zip(self.devices, self._handles)]
        self.power_limit_w = sum(limits) / 1000.0
        self._read_energy()  # fail now, not at the window edge, where a GPU lacks the counter
        self._open_gpm()
        log.info(
            "meter nvml: %s, driver %s, power limit %.0f W",
            [f"{d.index}:{d.name}:{d.uuid}" for d in self.devices],
            self.driver,
            self.power_limit_w,
        )

    def _open_gpm(self) -> None:
        """Probe GPM once per GPU; any GPU without it turns GPM off for the cell (the columns are means
        over the cell's GPUs), with NVML's reason."""
        self._gpm = [None] * len(self.devices)
        self._gpm_prev = [None] * len(self.devices)
        if not self.want_gpm:
            return
        readers = []
        for d, h in zip(self.devices, self._handles):
            reader, reason = GpmReader.probe(self._nv, h)
            if reader is None:
                self._gpm_reason = f"GPU {d.index} ({d.name}): {reason}"
                log.info("meter nvml: no GPM counters: %s", self._gpm_reason)
                return
            readers.append(reader)
        self._gpm = readers
        self._gpm_all = list(readers)

    def _gpm_on(self) -> bool:
        return bool(self._gpm) and all(r is not None for r in self._gpm)

    def _gpm_off(self, reason: str) -> None:
        """GPM failed after a good probe: stop using it (the timeline stays cheap), keep the reason."""
        if self._gpm_reason is None:
            self._gpm_reason = reason
            log.warning("meter nvml: GPM counters stopped: %s", reason)
        self._gpm = [None] * len(self.devices)

    def _free_gpm(self, samples: list[Any]) -> None:
        for reader, s in zip(self._gpm_all, samples):
            if reader is not None and s is not None:
                reader.free(s)

    def _gpm_edge(self, edge: str) -> None:
        self._free_gpm(self._gpm_edges.pop(edge, []))
        if not self._gpm_on():
            return
        try:
            self._gpm_edges[edge] = [r.sample() for r in self._gpm]
        except self._nv.NVMLError as exc:
            self._gpm_off(f"nvmlGpmSampleGet at window {edge} failed: {exc} ({type(exc).__name__})")

    def close(self) -> None:
        if self._nv is not None:
            for edge in list(self._gpm_edges):
                self._free_gpm(self._gpm_edges.pop(edge))
            self._free_gpm(self._gpm_prev)
            self._gpm_prev = [None] * len(self.devices)
            self._nv = None
            nvml_shutdown()

    def _call(self, fn: str, dev: DeviceInfo | None, *args, raw: bool = False) -> Any:
        nv = self._nv
        if nv is None:
            raise MeterError(f"NVML {fn}: the meter is not open")
        try:
            return getattr(nv, fn)(*args)
        except nv.NVMLError as exc:
            raise _err(fn, exc, f"GPU {dev.index} ({dev.uuid})" if dev else "") from exc

    def _read_energy(self) -> list[int]:
        return [
            int(self._call("nvmlDeviceGetTotalEnergyConsumption", d, h)) for d, h in zip(self.devices, self._handles)
        ]

    # -- idle and processes ------------------------------------------------------------------
    def _compute_pids(self) -> list[int]:
        pids: list[int] = []
        for d, h in zip(self.devices, self._handles):
            procs = self._call("nvmlDeviceGetComputeRunningProcesses", d, h)
            pids.extend(int(p.pid) for p in procs)
        return pids

    def _process_name(self, pid: int) -> str:
        """NVML's name for a process (the host's view, right in a container too), else /proc's, else '?'."""
        try:
            return _text(self._nv.nvmlSystemGetProcessName(pid)).rsplit("/", 1)[-1] or "?"
        except (self._nv.NVMLError, AttributeError):
            pass
        try:
            with open(f"/proc/{pid}/comm") as fh:
                return fh.read().strip() or "?"
        except OSError:
            return "?"

    def other_processes(self) -> list[dict[str, Any]]:
        ours = self.own_pids()
        out: list[dict[str, Any]] = []
        for d, h in zip(self.devices, self._handles):
            for p in self._call("nvmlDeviceGetComputeRunningProcesses", d, h):
                pid = int(p.pid)
                if pid in ours:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                out.append(
                    {
                        "pid": pid,
                        "name": self._process_name(pid),
                        "gpu": d.index,
                        "used_mib": int(used) // 2**20 if isinstance(used, int) and used >= 0 else None,
                    }
                )
        self._others_seen.update({(o["pid"], o["gpu"]): o for o in out})
        return out

    def measure_idle(self, seconds: float) -> float | None:
        self._others_before = len(set(self._compute_pids()))
        if seconds <= 0:
            return None
        t0, e0 = time.monotonic(), self._read_energy()
        powers: list[float] = []
        while time.monotonic() - t0 < seconds:
            powers.append(
                sum(self._call("nvmlDeviceGetPowerUsage", d, h) for d, h in zip(self.devices, self._handles)) / 1000.0
            )
            time.sleep(self.period)
        t1, e1 = time.monotonic(), self._read_energy()
        delta = sum(b - a for a, b in zip(e0, e1))
        # The counter is the better instrument when it advanced; the 1 s power average otherwise.
        self._idle_w = (delta / 1000.0) / (t1 - t0) if delta > 0 else (sum(powers) / len(powers) if powers else None)
        log.info(
            "meter nvml: idle %.1f W over %.1f s; %d other compute process(es) on the GPU(s)",
            self._idle_w or float("nan"),
            t1 - t0,
            self._others_before,
        )
        return self._idle_w

    # -- timeline ----------------------------------------------------------------------------
    def _optional(self, fn: str, *args) -> Any:
        """A timeline field some GPUs do not report: None instead of an error (counted: a GPU that stops
        answering shows in the log before the window edge fails)."""
        try:
            return getattr(self._nv, fn)(*args)
        except self._nv.NVMLError as exc:
            self._sample_errors += 1
            if self._sample_errors == 1 or self._sample_errors % 500 == 0:
                log.warning(
                    "meter nvml: timeline reading %s failed (%d so far): %s (%s)",
                    fn,
                    self._sample_errors,
                    exc,
                    type(exc).__name__,
                )
            return None

    def _gpm_tick(self) -> list[dict[str, float | None]]:
        """Per GPU: the GPM metrics since the previous tick (nulls on the first tick or without GPM)."""
        empty = [dict.fromkeys(GPM_COLUMNS) for _ in self.devices]
        if not self._gpm_on():
            return empty
        out = []
        try:
            for i, reader in enumerate(self._gpm):
                new = reader.sample()
                prev, self._gpm_prev[i] = self._gpm_prev[i], new
                if prev is None:
                    out.append(dict.fromkeys(GPM_COLUMNS))
                    continue
                try:
                    out.append(reader.metrics(prev, new))
                finally:
                    reader.free(prev)
        except self._nv.NVMLError as exc:
            self._gpm_off(f"GPM read in the timeline failed: {exc} ({type(exc).__name__})")
            return empty
        return out

    def _sample_once(self) -> None:
        nv = self._nv
        t = time.monotonic()
        gpm = self._gpm_tick()
        for d, h, counters in zip(self.devices, self._handles, gpm):
            util = self._optional("nvmlDeviceGetUtilizationRates", h)
            reasons = self._optional("nvmlDeviceGetCurrentClocksEventReasons", h)
            if reasons is None:
                reasons = self._optional("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            power = self._optional("nvmlDeviceGetPowerUsage", h)
            temp = self._optional("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU)
            self._samples.append(
                (
                    t,
                    d.index,
                    d.uuid,
                    power / 1000.0 if power is not None else None,
                    self._optional("nvmlDeviceGetTotalEnergyConsumption", h),
                    self._optional("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
                    self._optional("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
                    float(temp) if temp is not None else None,
                    int(reasons) if reasons is not None else None,
                    float(util.gpu) if util is not None else None,
                    float(util.memory) if util is not None else None,
                    *(counters[c] for c in GPM_COLUMNS),
                )
            )

    def _run(self) -> None:
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                self._sample_once()
                next_t += self.period
                delay = next_t - time.monotonic()
                if delay < 0:  # fell behind (a slow NVML call): skip, do not burst
                    next_t = time.monotonic()
                    delay = 0
                self._stop.wait(delay)
        except BaseException as exc:  # surfaced by stop_sampling / result
            self._sampler_error = exc

    def start_sampling(self) -> None:
        if self._thread is not None:
            return
        # The first tick's GPM delta must not span the pause since the last sampling run.
        self._free_gpm(self._gpm_prev)
        self._gpm_prev = [None] * len(self.devices)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="specjoule-nvml-sampler", daemon=True)
        self._thread.start()

    def stop_sampling(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._thread = None

    # -- window ------------------------------------------------------------------------------
    def reset_window(self) -> None:
        if self._thread is not None:
            raise MeterError("meter nvml: reset_window while sampling")
        self._samples = []
        self._sampler_error = None
        self._t_start = self._t_end = None
        self._e_start = self._e_end = None
        self._others_end = None
        for edge in list(self._gpm_edges):
            self._free_gpm(self._gpm_edges.pop(edge))

    def mark_window_start(self) -> float:
        self._e_start = self._read_energy()
        self._t_start = time.monotonic()
        self._gpm_edge("start")  # after the energy edge: a GPM sample must not delay it
        return self._t_start

    def mark_window_end(self) -> float:
        self._e_end = self._read_energy()
        self._t_end = time.monotonic()
        self._gpm_edge("end")
        try:
            ours = self.own_pids()
            seen = self._compute_pids()
            # PIDs from NVML are the host's; inside a container they do not match ours. Trust the
            # count only when at least one of our own processes shows up (same PID namespace).
            if any(p in ours for p in seen):
                self._others_end = len({p for p in seen if p not in ours})
                if self._others_end:
                    self.other_processes()
        except MeterError as exc:
            log.warning("meter nvml: process list at window end unavailable: %s", exc)
        return self._t_end

    def result(self) -> MeterResult:
        if self._sampler_error is not None:
            raise MeterError(f"NVML timeline sampler failed: {self._sampler_error}") from self._sampler_error
        if self._e_start is None or self._e_end is None:
            raise MeterError("meter nvml: the window edges were not both read")
        per_gpu = [(b - a) / 1000.0 for a, b in zip(self._e_start, self._e_end)]
        window = self._t_end - self._t_start
        for d, e in zip(self.devices, per_gpu):
            if e <= 0:
                raise MeterError(
                    f"NVML energy counter of GPU {d.index} ({d.uuid}) did not advance over a "
                    f"{window:.3f} s window (delta {e} J); the window is shorter than the counter's "
                    f"update interval — lengthen the window"
                )
        rows = [s for s in self._samples if self._t_start <= s[0] <= self._t_end]
        ticks: dict[float, list[tuple]] = {}
        for s in rows:
            ticks.setdefault(s[0], []).append(s)
        tick_power = [sum(x[3] for x in g) for g in ticks.values() if all(x[3] is not None for x in g)]
        temps = [s[7] for s in rows if s[7] is not None]
        mask = 0
        for s in rows:
            mask |= s[8] or 0
        updates = [len({s[4] for s in rows if s[1] == d.index and s[4] is not None}) for d in self.devices]
        all_ticks = sorted({s[0] for s in self._samples})
        span = (all_ticks[-1] - all_ticks[0]) if len(all_ticks) > 1 else 0.0
        others = [x for x in (self._others_before, self._others_end) if x is not None]
        return MeterResult(
            meter="nvml",
            energy_j=sum(per_gpu),
            energy_j_per_gpu=per_gpu,
            idle_power_w=self._idle_w,
            energy_counter_updates=min(updates) if rows else 0,
            timeline_samples=len(all_ticks),
            timeline_hz=(len(all_ticks) - 1) / span if span > 0 else None,
            power_min_w=min(tick_power) if tick_power else None,
            power_max_w=max(tick_power) if tick_power else None,
            max_temperature_c=max(temps) if temps else None,
            throttle_reasons_mask=mask if rows else None,
            other_gpu_processes=max(others) if others else None,
            other_gpu_process_list=_process_list(self._others_seen.values()) or None,
            driver_version=self.driver,
            gpu_names=[d.name for d in self.devices],
            gpu_uuids=[d.uuid for d in self.devices],
            power_limit_w=self.power_limit_w,
            **self._counter_columns(rows),
        )

    def _window_gpm(self) -> tuple[dict[str, float | None], str | None]:
        """GPM over the window from its edge samples, mean over GPUs; nulls and the reason otherwise."""
        nulls = dict.fromkeys(GPM_COLUMNS)
        start, end = self._gpm_edges.get("start"), self._gpm_edges.get("end")
        if self._gpm_reason is not None or not self._gpm_on() or start is None or end is None:
            return nulls, self._gpm_reason or "GPM edge samples missing"
        try:
            per_gpu = [r.metrics(a, b) for r, a, b in zip(self._gpm, start, end)]
        except self._nv.NVMLError as exc:
            return nulls, f"nvmlGpmMetricsGet over the window failed: {exc} ({type(exc).__name__})"
        out: dict[str, float | None] = {}
        refused = []
        for c in GPM_COLUMNS:
            vals = [m[c] for m in per_gpu]
            if any(v is None for v in vals):
                out[c] = None
                refused.append(c)
            else:
                out[c] = sum(vals) / len(vals)
        return out, (f"nvmlGpmMetricsGet refused {', '.join(refused)}" if refused else None)

    def _counter_columns(self, rows: list[tuple]) -> dict[str, Any]:
        gpm, reason = self._window_gpm()
        mem = [s[10] for s in rows if s[10] is not None]
        source = "gpm" if any(v is not None for v in gpm.values()) else ("utilization" if mem else None)
        return dict(
            counters_source=source, counters_reason=reason, mem_busy_pct=sum(mem) / len(mem) if mem else None, **gpm
        )

    def timeline(self) -> pa.Table:
        t0 = self._t_start if self._t_start is not None else (self._samples[0][0] if self._samples else 0.0)
        t1 = self._t_end
        cols: dict[str, list] = {name: [] for name in TIMELINE_SCHEMA.names}
        for s in self._samples:
            t, idx, uuid, power, energy, sm, mem, temp, reasons, gutil, mutil, *gpm = s
            cols["t_monotonic"].append(t)
            cols["t_rel_s"].append(t - t0)
            cols["gpu_index"].append(idx)
            cols["gpu_uuid"].append(uuid)
            cols["power_w"].append(power)
            cols["energy_mj"].append(int(energy) if energy is not None else None)
            cols["sm_clock_mhz"].append(sm)
            cols["mem_clock_mhz"].append(mem)
            cols["temperature_c"].append(temp)
            cols["throttle_reasons"].append(reasons)
            cols["gpu_util_pct"].append(gutil)
            cols["mem_util_pct"].append(mutil)
            cols["in_window"].append(bool(self._t_start is not None and t1 is not None and self._t_start <= t <= t1))
            for name, value in zip(GPM_COLUMNS, gpm):
                cols[name].append(value)
        return pa.table(cols, schema=TIMELINE_SCHEMA)


def _process_list(processes) -> str:
    """'pid 4242 python3 (1024 MiB) on GPU 0; …' — how logs and the record name other processes (ADR 0133)."""
    return "; ".join(
        f"pid {p['pid']} {p['name']}"
        + (f" ({p['used_mib']} MiB)" if p.get("used_mib") is not None else "")
        + f" on GPU {p['gpu']}"
        for p in sorted(processes, key=lambda p: (p["gpu"], p["pid"]))
    )


def _own_pid_tree() -> set[int]:
    import psutil

    me = psutil.Process()
    pids = {me.pid}
    try:
        pids.update(c.pid for c in me.children(recursive=True))
    except psutil.Error:
        pass
    return pids
