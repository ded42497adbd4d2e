"""FakeNvml: a stand-in for the ``pynvml`` module, named as a fake, for fault injection in meter tests.

It replays recorded reading sequences (GPM metrics per tick, memory utilization) and produces the
failures a real NVML cannot be made to produce on demand here: GPM unsupported, refused by a VM at
the support query or at the first sample, or failing in the middle of a run, and bindings too old
to have GPM at all. The real happy path runs on the GPU (``tools/device/check_counters.py``).

GPM semantics kept from the real library: every ``nvmlGpmSampleGet`` is a snapshot taken at the
current "tick"; ``nvmlGpmMetricsGet`` over two snapshots returns each metric averaged over the
recorded ticks between them. Every ``nvmlGpmSampleGet`` advances the tick by one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(text or f"NVML error {value}")
        self.value = value


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(3, "Not Supported")


class NVMLError_NoPermission(NVMLError):
    def __init__(self) -> None:
        super().__init__(4, "Insufficient Permissions")


class NVMLError_InUse(NVMLError):
    def __init__(self) -> None:
        super().__init__(19, "In use by another client")


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self) -> None:
        super().__init__(15, "GPU is lost")


@dataclass
class _Metric:
    metricId: int = 0
    nvmlReturn: int = 0
    value: float = 0.0


@dataclass
class _MetricsGet:
    version: int = 0
    numMetrics: int = 0
    sample1: Any = None
    sample2: Any = None
    metrics: list = field(default_factory=lambda: [_Metric() for _ in range(8)])


@dataclass
class _Sample:
    tick: int | None = None
    freed: bool = False


# Metric ids as in nvidia-ml-py.
GPM_IDS = {"NVML_GPM_METRIC_SM_UTIL": 2, "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 5, "NVML_GPM_METRIC_DRAM_BW_UTIL": 10}
ID_TO_COLUMN = {2: "sm_active_pct", 5: "tensor_active_pct", 10: "dram_bw_util_pct"}


class FakeNvml:
    """Module-like: pass ``fake`` where ``pynvml`` is expected.

    gpm: ``ok`` | ``unsupported`` (the device says no) | ``refused_query`` (the support query itself
    fails, as in a VM) | ``refused_sample`` (support says yes, the first sample fails) |
    ``refused_metric`` (one metric refused in every read) | ``no_bindings`` (old nvidia-ml-py) |
    ``fails_after:N`` (the N-th sample and every one after it fails) | ``in_use_every:K`` (every K-th sample
    is refused as in use by another client, once: a retry succeeds) | ``in_use_after:N`` (from the N-th
    sample on, every sample is refused as in use: what an H200 did when two threads sampled at once).

    Faults of issue 21: ``lose_gpu()`` makes every device call from then on fail as NVML does for a GPU that fell
    off the bus (``NVMLError_GpuIsLost``, 15); ``processes`` lists (pid, bytes) the GPU's compute processes, as
    ``nvmlDeviceGetComputeRunningProcesses`` reports another job's CUDA context (names from /proc, as NVML's
    ``nvmlSystemGetProcessName`` reads them).
    """

    NVMLError = NVMLError
    NVML_SUCCESS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_ERROR_IN_USE = 19

    def __init__(self, *, gpm: str = "ok", ticks: list[dict[str, float]] | None = None,
                 mem_util: list[float] | None = None, n_gpus: int = 1, energy_step_mj: int = 1000,
                 power_mw: int = 300_000, clock_power_mw: list[int] | None = None,
                 processes: list[tuple[int, int]] | None = None) -> None:
        """``clock_power_mw``: one power per GPU; each GPU's energy counter is then start + power × ``now``
        (seconds of a fake clock the test advances; mW × s = mJ), as a real counter integrates a steady
        draw — a per-GPU window energy is then known in advance, whatever the reads in between. Every
        counter read is logged in ``energy_reads`` as (now, handle): which GPUs a window edge read, when."""
        self.processes = list(processes or [])
        self.lost = False
        self.gpm_mode = gpm
        self.ticks = ticks or [{"dram_bw_util_pct": 50.0, "sm_active_pct": 80.0, "tensor_active_pct": 10.0}]
        self.mem_util = mem_util or [40.0]
        self.n_gpus = n_gpus
        self.energy_step_mj = energy_step_mj
        self.power_mw = power_mw
        self.calls: Counter[str] = Counter()
        self._tick = 0
        self._energy = [1_000_000] * n_gpus
        self.clock_power_mw = clock_power_mw
        self.now = 0.0
        self.energy_reads: list[tuple[float, int]] = []
        self._util_i = 0
        self.live_samples = 0
        self.refused_in_use = 0
        self._gets = 0
        for name, value in GPM_IDS.items():
            setattr(self, name, value)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            if name.startswith("nvmlGpm") and object.__getattribute__(self, "gpm_mode") == "no_bindings":
                raise AttributeError(name)
            object.__getattribute__(self, "calls")[name] += 1
            if object.__getattribute__(self, "lost") and name.startswith(("nvmlDevice", "nvmlGpm")):
                def lost(*args: Any) -> Any:
                    raise NVMLError_GpuIsLost()
                return lost
        return object.__getattribute__(self, name)

    def lose_gpu(self) -> None:
        """From now on the GPU is gone: every device call fails (GPU is lost)."""
        self.lost = True

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        try:
            with open(f"/proc/{pid}/comm") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise NVMLError(3, "Not Found") from exc

    # -- the plain NVML calls the meter makes ---------------------------------------------------
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def _device(self, h: Any) -> int:
        """A handle this library handed out; anything else is refused as the real binding would (not as an
        NVMLError, which the meter may treat as a reading the GPU does not give)."""
        if not (isinstance(h, int) and 0 <= h < self.n_gpus):
            raise TypeError(f"not a device handle: {h!r}")
        return h

    def nvmlDeviceGetCount(self) -> int:
        return self.n_gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return self._device(i)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake{self._device(h):04d}-0000-0000-0000-000000000000"

    def nvmlDeviceGetName(self, h: int) -> str:
        self._device(h)
        return "NVIDIA H200 (FakeNvml)"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04-fake"

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._device(h)
        return 700_000

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list:
        self._device(h)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._device(h)
        return self.clock_power_mw[h] if self.clock_power_mw is not None else self.power_mw

    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int:
        self._device(h)
        return 1980 if which == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetTemperature(self, h: int, which: int) -> int:
        self._device(h)
        return 45

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        self._device(h)
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self.energy_reads.append((self.now, self._device(h)))
        if self.clock_power_mw is not None:
            return 1_000_000 + round(self.clock_power_mw[h] * self.now)
        self._energy[h] += self.energy_step_mj
        return self._energy[h]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._device(h)
        v = self.mem_util[self._util_i % len(self.mem_util)]
        self._util_i += 1
        return SimpleNamespace(gpu=90.0, memory=v)

    # -- GPM ----------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: int) -> SimpleNamespace:
        if self.gpm_mode == "refused_query":
            raise NVMLError_NoPermission()
        return SimpleNamespace(version=1, isSupportedDevice=0 if self.gpm_mode == "unsupported" else 1)

    def nvmlGpmSampleAlloc(self) -> _Sample:
        self.live_samples += 1
        return _Sample()

    def nvmlGpmSampleFree(self, s: _Sample) -> None:
        assert not s.freed, "GPM sample freed twice"
        s.freed = True
        self.live_samples -= 1

    def nvmlGpmSampleGet(self, h: int, s: _Sample) -> _Sample:
        self._gets += 1
        n_gets = self._gets  # this call included (a retry of a bound method is a call too)
        if self.gpm_mode == "refused_sample":
            raise NVMLError_NotSupported()
        if self.gpm_mode.startswith("fails_after:") and n_gets >= int(self.gpm_mode.split(":")[1]):
            raise NVMLError(999, "Unknown Error")
        if self.gpm_mode.startswith("in_use_after:") and n_gets >= int(self.gpm_mode.split(":")[1]):
            raise NVMLError_InUse()
        if self.gpm_mode.startswith("in_use_every:") and n_gets % int(self.gpm_mode.split(":")[1]) == 0:
            self.refused_in_use += 1
            raise NVMLError_InUse()
        if h == 0:
            self._tick += 1
        s.tick = self._tick
        return s

    def c_nvmlGpmMetricsGet_t(self) -> _MetricsGet:
        return _MetricsGet()

    def mean_between(self, first_tick: int, second_tick: int, column: str) -> float:
        """The value a real GPM gives over (first, second]: the mean of the recorded ticks in it."""
        vals = [self.ticks[(t - 1) % len(self.ticks)][column] for t in range(first_tick + 1, second_tick + 1)]
        return sum(vals) / len(vals)

    def nvmlGpmMetricsGet(self, request: _MetricsGet) -> _MetricsGet:
        a, b = request.sample1, request.sample2
        assert not a.freed and not b.freed, "metrics over a freed GPM sample"
        for i in range(request.numMetrics):
            m = request.metrics[i]
            column = ID_TO_COLUMN[m.metricId]
            if self.gpm_mode == "refused_metric" and column == "tensor_active_pct":
                m.nvmlReturn, m.value = 3, 0.0
                continue
            m.nvmlReturn = 0
            m.value = self.mean_between(a.tick, b.tick, column) if b.tick > a.tick else 0.0
        return request


class ReplayNvml(FakeNvml):
    """FakeNvml that replays a recorded NVML sample sequence, tick by tick, per GPU.

    ``ticks[i][g]`` is what GPU ``g`` reported at tick ``i`` (keys as in records.TIMELINE_SCHEMA: power_w,
    energy_mj, temperature_c, throttle_reasons, gpu_util_pct, mem_util_pct, sm_clock_mhz, mem_clock_mhz).
    The driver moves the cursor (``at``); the window-edge energy reads return ``edge_mj`` while it is set,
    as the real counter is read at the edges between two timeline ticks. Readings are handed out in
    NVML's own units (mW, mJ, integer °C), so the meter's conversions are what is under test.
    """

    def __init__(self, ticks: list[list[dict[str, Any]]], *, uuids: list[str] | None = None,
                 uuid_bytes: bool = False) -> None:
        n_gpus = len(ticks[0])
        super().__init__(gpm="no_bindings", n_gpus=n_gpus)
        self.replay = ticks
        self.cursor = 0
        self.edge_mj: list[int] | None = None
        self.uuids = uuids or [f"GPU-replay{g:02d}-0000-0000-0000-000000000000" for g in range(n_gpus)]
        self.uuid_bytes = uuid_bytes  # nvidia-ml-py before 11.5 returned bytes

    def at(self, i: int) -> None:
        self.cursor = i

    def _now(self, h: int, key: str) -> Any:
        value = self.replay[self.cursor][self._device(h)][key]
        if value is None:  # a reading this GPU did not give at this tick
            raise NVMLError_NotSupported()
        return value

    def nvmlDeviceGetUUID(self, h: int) -> Any:
        uuid = self.uuids[self._device(h)]
        return uuid.encode() if self.uuid_bytes else uuid

    def nvmlDeviceGetName(self, h: int) -> Any:
        name = f"NVIDIA H200 #{self._device(h)}"
        return name.encode() if self.uuid_bytes else name

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return (700_000, 650_000)[self._device(h)]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if self.edge_mj is not None:
            return self.edge_mj[self._device(h)]
        return int(self._now(h, "energy_mj"))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(round(self._now(h, "power_w") * 1000))

    def nvmlDeviceGetTemperature(self, h: int, which: int) -> int:
        if which != self.NVML_TEMPERATURE_GPU:
            raise NVMLError(2, "Invalid Argument")
        return int(self._now(h, "temperature_c"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._now(h, "throttle_reasons"))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:  # the same bits, the older name
        return int(self._now(h, "throttle_reasons"))

    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int:
        if which not in (self.NVML_CLOCK_SM, self.NVML_CLOCK_MEM):
            raise NVMLError(2, "Invalid Argument")
        return int(self._now(h, "sm_clock_mhz" if which == self.NVML_CLOCK_SM else "mem_clock_mhz"))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._now(h, "gpu_util_pct"), memory=self._now(h, "mem_util_pct"))


class ReplayClock:
    """Stands in for the ``time`` module inside specjoule.meter.nvml: the replay sets the clock; sleep advances it."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
