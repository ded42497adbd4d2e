"""The explicit no-meter: used where NVML is absent (CPU) or was switched off.

Every energy column stays null and ``meter = "none"`` — never 0, so a reader cannot mistake a
missing measurement for a free one. Window edges are still timestamped (the window is real).
"""

from __future__ import annotations

import time

import pyarrow as pa

from specjoule.meter.base import Meter, MeterResult
from specjoule.records import TIMELINE_SCHEMA


class NoneMeter(Meter):
    name = "none"

    def __init__(self, reason: str = "meter: none") -> None:
        self.reason = reason

    def open(self) -> None:
        pass

    def measure_idle(self, seconds: float) -> float | None:
        # Nothing to read; do not burn the idle seconds either.
        return None

    def start_sampling(self) -> None:
        pass

    def mark_window_start(self) -> float:
        return time.monotonic()

    def mark_window_end(self) -> float:
        return time.monotonic()

    def stop_sampling(self) -> None:
        pass

    def result(self) -> MeterResult:
        return MeterResult(
            meter="none", counters_source="none", counters_reason=self.reason, extra={"reason": self.reason}
        )

    def timeline(self) -> pa.Table:
        return TIMELINE_SCHEMA.empty_table()
