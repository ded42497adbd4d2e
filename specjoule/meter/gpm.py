"""NVML GPU performance monitoring (GPM): DRAM bandwidth, SM and tensor-core activity between two samples.

GPM (``nvmlGpmSampleGet`` / ``nvmlGpmMetricsGet``, Hopper and later) gives each metric as an
average over the interval between two device samples, so a window's value is exact to its edges:
one sample at window start, one at window end (ADR 0101). The 10 Hz timeline takes a sample every
tick and reports the metrics since the previous tick.

Where GPM is not there — an older GPU, an older driver, a virtual machine that refuses the
profiling interface — ``probe`` says why in NVML's own words, once, and the meter carries on
without it: the columns are null with that reason, never 0. The probe is two or three NVML calls,
so a refusal costs nothing measurable.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

# One GPM call at a time in this process: NVML refuses a sample taken while another is being taken
# ("In use by another client", NVMLError_InUse, seen on an H200 2026-12-01 when the window edge and the
# timeline thread sampled together). A call refused for that reason is retried a few times.
_LOCK = threading.RLock()
_IN_USE = 19  # NVML_ERROR_IN_USE
_RETRIES = 5

# Record / timeline column → pynvml metric constant name. SM_UTIL is "percentage of SMs that were
# busy" (SM activity); ANY_TENSOR_UTIL "percentage of time the SMs were doing any tensor operation".
GPM_METRICS: dict[str, str] = {
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_active_pct": "NVML_GPM_METRIC_SM_UTIL",
    "tensor_active_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}
GPM_COLUMNS = tuple(GPM_METRICS)


def _describe(exc: BaseException) -> str:
    return f"{exc} ({type(exc).__name__})"


@dataclass
class GpmReader:
    """GPM on one GPU: samples and the metrics between two of them. Build it with ``probe``."""

    nv: Any
    handle: Any

    @classmethod
    def probe(cls, nv: Any, handle: Any) -> tuple[GpmReader | None, str | None]:
        """(reader, None) where GPM works on this device, else (None, the reason)."""
        if not hasattr(nv, "nvmlGpmQueryDeviceSupport"):
            return None, "nvidia-ml-py has no GPM bindings (nvmlGpmQueryDeviceSupport); upgrade nvidia-ml-py"
        try:
            support = nv.nvmlGpmQueryDeviceSupport(handle)
        except nv.NVMLError as exc:
            return None, f"nvmlGpmQueryDeviceSupport failed: {_describe(exc)}"
        if not getattr(support, "isSupportedDevice", 0):
            return None, "nvmlGpmQueryDeviceSupport: GPM not supported on this device (needs Hopper or later)"
        reader = cls(nv, handle)
        # A VM may report support and still refuse the sample or the metrics: try one full read now.
        first = second = None
        try:
            first = reader.sample()
            second = reader.sample()
            values = reader.metrics(first, second)
        except nv.NVMLError as exc:
            return None, f"GPM sample or metrics read failed: {_describe(exc)}"
        finally:
            for s in (first, second):
                if s is not None:
                    reader.free(s)
        refused = [k for k, v in values.items() if v is None]
        if len(refused) == len(values):
            return None, f"nvmlGpmMetricsGet returned no metric ({', '.join(refused)} refused)"
        return reader, None

    def _call(self, fn: Any, *args: Any) -> Any:
        """fn(*args) under the process-wide GPM lock, retried while NVML says another client holds GPM."""
        with _LOCK:
            for attempt in range(_RETRIES):
                try:
                    return fn(*args)
                except self.nv.NVMLError as exc:
                    if (
                        getattr(exc, "value", None) != getattr(self.nv, "NVML_ERROR_IN_USE", _IN_USE)
                        or attempt == _RETRIES - 1
                    ):
                        raise
                time.sleep(0.002 * (attempt + 1))
        raise AssertionError("unreachable")

    def sample(self) -> Any:
        s = self._call(self.nv.nvmlGpmSampleAlloc)
        try:
            self._call(self.nv.nvmlGpmSampleGet, self.handle, s)
        except BaseException:
            self.free(s)
            raise
        return s

    def free(self, s: Any) -> None:
        try:
            self._call(self.nv.nvmlGpmSampleFree, s)
        except self.nv.NVMLError:
            pass

    def metrics(self, first: Any, second: Any) -> dict[str, float | None]:
        """Each metric averaged over the interval between the two samples; None for one NVML refused."""
        nv = self.nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = first
        request.sample2 = second
        for i, const in enumerate(GPM_METRICS.values()):
            request.metrics[i].metricId = getattr(nv, const)
        result = self._call(nv.nvmlGpmMetricsGet, request)
        out: dict[str, float | None] = {}
        for i, column in enumerate(GPM_METRICS):
            m = result.metrics[i]
            ok = int(m.nvmlReturn) == int(getattr(nv, "NVML_SUCCESS", 0))
            out[column] = float(m.value) if ok else None
        return out
