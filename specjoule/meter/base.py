"""The meter interface: energy read at the window edges, a timeline sampled around it.

A meter is driven by the runner in this order (ADR 0011)::

    meter.open()                  # find the GPUs, read static facts (names, UUIDs, power limit, driver)
    meter.measure_idle(seconds)   # before the engine starts
    meter.start_sampling()        # timeline thread, from engine ready to the end of the workload
    meter.mark_window_start()     # energy counters read here ...
    meter.mark_window_end()       # ... and here
    meter.stop_sampling()
    meter.result() / meter.timeline()
    meter.close()

Energy is never 0 or NaN for "not measured": a meter that cannot measure is the ``none`` meter,
whose energy columns are null.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


class MeterError(RuntimeError):
    """A meter that was asked to measure and cannot. Names the call that failed and why."""


@dataclass
class MeterResult:
    """What a meter contributes to the record (column names as in records.RECORD_FIELDS)."""

    meter: str
    energy_j: float | None = None
    energy_j_per_gpu: list[float] | None = None
    idle_power_w: float | None = None
    energy_counter_updates: int | None = None
    timeline_samples: int | None = None
    timeline_hz: float | None = None
    power_min_w: float | None = None
    power_max_w: float | None = None
    max_temperature_c: float | None = None
    throttle_reasons_mask: int | None = None
    other_gpu_processes: int | None = None
    other_gpu_process_list: str | None = None  # "pid N name (MiB) on GPU i; ..." (ADR 0133)
    # environment facts the meter is the authority on
    driver_version: str | None = None
    gpu_names: list[str] | None = None
    gpu_uuids: list[str] | None = None
    power_limit_w: float | None = None
    # hardware counters over the window (ADR 0101): null with a reason where unsupported, never 0
    counters_source: str | None = None
    counters_reason: str | None = None
    dram_bw_util_pct: float | None = None
    sm_active_pct: float | None = None
    tensor_active_pct: float | None = None
    mem_busy_pct: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def columns(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "extra"}
        out["gpu_uuid"] = ",".join(self.gpu_uuids) if self.gpu_uuids else None
        return out


class Meter(abc.ABC):
    name: str = "abstract"

    @abc.abstractmethod
    def open(self) -> None: ...

    @abc.abstractmethod
    def measure_idle(self, seconds: float) -> float | None:
        """Mean power (W, summed over GPUs) over ``seconds`` before the engine starts; None if 0 s."""

    @abc.abstractmethod
    def start_sampling(self) -> None: ...

    @abc.abstractmethod
    def mark_window_start(self) -> float:
        """Read the energy counters; return the monotonic time of the edge."""

    @abc.abstractmethod
    def mark_window_end(self) -> float: ...

    @abc.abstractmethod
    def stop_sampling(self) -> None: ...

    def reset_window(self) -> None:  # noqa: B027 — a default no-op, not abstract: most meters keep no window state
        """Forget the last window and its samples (the next cell on a shared engine starts clean)."""

    def other_processes(self) -> list[dict[str, Any]]:
        """Compute processes on the cell's GPU(s) that are not this cell's: ``{pid, name, gpu, used_mib}`` each
        (ADR 0133). A meter that sees no GPU sees none."""
        return []

    @abc.abstractmethod
    def result(self) -> MeterResult: ...

    @abc.abstractmethod
    def timeline(self) -> pa.Table:
        """The samples as a records.TIMELINE_SCHEMA table (empty for the none meter)."""

    def close(self) -> None:  # noqa: B027 — a default no-op, not abstract: the none meter holds nothing
        """Release the library; safe to call twice and after a failed open."""

    def __enter__(self) -> Meter:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop_sampling()
        finally:
            self.close()
