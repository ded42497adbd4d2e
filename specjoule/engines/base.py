"""Engine adapter interface, and the engine-independent shape of counters and request results.

An adapter starts an engine (ready when it answers), runs batches of token-id prompts, takes
counter snapshots, and is always torn down — also on an exception or a signal (``stop`` is
idempotent and kills the engine's whole process group). Workloads and the runner see only this.
"""

from __future__ import annotations

import abc
import bisect
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("specjoule.engine")


class EngineError(RuntimeError):
    """The engine failed: did not start, died, timed out or answered nonsense."""


class EngineUnsupported(EngineError):
    """The installed engine cannot run what the cell asks for (method, synthetic acceptance …)."""


@dataclass
class RequestResult:
    """One finished request, as the engine reported it."""

    prompt_tokens: int
    output_tokens: int
    finish_reason: str | None
    ok: bool
    ttft_s: float | None = None
    tpot_s: float | None = None  # (last token - first token) / (output tokens - 1)
    error: str | None = None


@dataclass
class BatchResult:
    requests: list[RequestResult]
    started_monotonic: float
    ended_monotonic: float
    running_samples: list[float] = field(default_factory=list)  # vllm:num_requests_running during the batch


RUNNING_SAMPLE_S = 0.2
# The first reading comes sooner: a closed batch shorter than one interval (0.14 s on two CPU cores) still gets one.
RUNNING_FIRST_SAMPLE_S = 0.05


def sample_running(stop: threading.Event, read: Callable[[], float | None], samples: list[float]) -> None:
    """Append running-request readings taken during one closed batch until ``stop`` is set (ADR 0013).

    A zero, or no reading, while the batch is in flight is the gauge not yet updated for it (the request has not
    reached the scheduler, or the sampler lost the GIL race), not an observed concurrency: it is skipped. A read
    that raises ends the sampling (the engine is going away; the batch loop reports that, not this thread)."""
    delay = RUNNING_FIRST_SAMPLE_S
    while not stop.wait(delay):
        delay = RUNNING_SAMPLE_S
        try:
            v = read()
        except Exception as exc:  # noqa: BLE001 - a sampler thread must not die with a traceback
            log.debug("running-requests sampler stopped: %s: %s", type(exc).__name__, exc)
            return
        if v:
            samples.append(v)


@dataclass
class Histogram:
    count: float
    sum: float
    buckets: dict[float, float]  # upper bound → cumulative count (Prometheus semantics)

    def minus(self, other: Histogram | None) -> Histogram:
        if other is None:
            return self
        return Histogram(self.count - other.count, self.sum - other.sum,
                         {le: c - other.buckets.get(le, 0.0) for le, c in self.buckets.items()})

    def quantile(self, q: float) -> float | None:
        """Linear interpolation inside the bucket (as Prometheus' histogram_quantile)."""
        if self.count <= 0:
            return None
        bounds = sorted(self.buckets)
        rank = q * self.count
        counts = [self.buckets[b] for b in bounds]
        i = bisect.bisect_left(counts, rank)
        if i >= len(bounds):
            return None
        upper = bounds[i]
        if math.isinf(upper):  # in the open top bucket: the best bound is the last finite one
            return bounds[i - 1] if i > 0 else None
        lower = bounds[i - 1] if i > 0 else 0.0
        below = counts[i - 1] if i > 0 else 0.0
        inside = counts[i] - below
        if inside <= 0:
            return upper
        return lower + (upper - lower) * (rank - below) / inside

    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass
class CounterSnapshot:
    """Engine counters at one instant, summed over engine replicas; names without ``vllm:``."""

    t_monotonic: float
    counters: dict[str, float]  # prompt_tokens, generation_tokens, spec_decode_num_drafts, …
    finished: dict[str, float]  # request_success by finished_reason
    accepted_per_pos: list[float]
    histograms: dict[str, Histogram]
    gauges: dict[str, float]

    def minus(self, before: CounterSnapshot) -> CounterDelta:
        c = {k: v - before.counters.get(k, 0.0) for k, v in self.counters.items()}
        f = {k: v - before.finished.get(k, 0.0) for k, v in self.finished.items()}
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda xs: list(xs) + [0.0] * (n - len(xs))  # noqa: E731
        app = [a - b for a, b in zip(pad(self.accepted_per_pos), pad(before.accepted_per_pos))]
        h = {k: v.minus(before.histograms.get(k)) for k, v in self.histograms.items()}
        return CounterDelta(c, f, app, h, self.t_monotonic - before.t_monotonic)


# finished_reason values that mean "the request did what it was asked"
OK_REASONS = ("stop", "length", "repetition")
FAILED_REASONS = ("abort", "error")


@dataclass
class CounterDelta:
    counters: dict[str, float]
    finished: dict[str, float]
    accepted_per_pos: list[float]
    histograms: dict[str, Histogram]
    seconds: float

    def _int(self, name: str) -> int | None:
        v = self.counters.get(name)
        return int(round(v)) if v is not None else None

    def columns(self, speculative: bool) -> dict[str, Any]:
        """Record columns (committed tokens, drafts …) from the delta."""
        out: dict[str, Any] = {
            "committed_tokens": self._int("generation_tokens"),
            "prompt_tokens": self._int("prompt_tokens"),
            "requests_completed": int(round(sum(self.finished.get(r, 0.0) for r in OK_REASONS))),
            "requests_failed": int(round(sum(self.finished.get(r, 0.0) for r in FAILED_REASONS))),
        }
        if speculative:
            out["drafts"] = self._int("spec_decode_num_drafts") or 0
            out["draft_tokens"] = self._int("spec_decode_num_draft_tokens") or 0
            out["accepted_tokens"] = self._int("spec_decode_num_accepted_tokens") or 0
            out["accepted_per_position"] = [int(round(x)) for x in self.accepted_per_pos] or None
        else:
            # A baseline drafts nothing; the engine has no spec-decode counters to read.
            out.update(drafts=0, draft_tokens=0, accepted_tokens=0, accepted_per_position=None)
        return out


def latency_from_requests(requests: list[RequestResult]) -> dict[str, float | None]:
    ttft = sorted(r.ttft_s for r in requests if r.ok and r.ttft_s is not None)
    tpot = sorted(r.tpot_s for r in requests if r.ok and r.tpot_s is not None)
    return {
        "ttft_mean_s": _mean(ttft), "ttft_p50_s": _pct(ttft, 0.5), "ttft_p99_s": _pct(ttft, 0.99),
        "tpot_mean_s": _mean(tpot), "tpot_p50_s": _pct(tpot, 0.5), "tpot_p99_s": _pct(tpot, 0.99),
    }


def latency_from_histograms(delta: CounterDelta) -> dict[str, float | None]:
    """Window latency from engine histograms: exact means, bucket-interpolated percentiles.

    TPOT here is ``inter_token_latency_seconds`` (time between token *deliveries*, one observation
    per engine step that produced tokens for a request) — with speculation a step can deliver
    several tokens, so we prefer ``request_time_per_output_token_seconds`` (per request: decode
    time / (tokens - 1)), which is what the per-request path computes too.
    """
    ttft = delta.histograms.get("time_to_first_token_seconds")
    tpot = delta.histograms.get("request_time_per_output_token_seconds") or delta.histograms.get(
        "time_per_output_token_seconds")
    out: dict[str, float | None] = {}
    for prefix, h in (("ttft", ttft), ("tpot", tpot)):
        out[f"{prefix}_mean_s"] = h.mean() if h else None
        out[f"{prefix}_p50_s"] = h.quantile(0.5) if h else None
        out[f"{prefix}_p99_s"] = h.quantile(0.99) if h else None
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _pct(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile on sorted data (no interpolation: every value was observed)."""
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


class Engine(abc.ABC):
    """One running engine. Context manager: ``with engine: ...`` guarantees teardown."""

    kind: str = "abstract"  # offline | server

    @abc.abstractmethod
    def start(self) -> float:
        """Start and wait until ready (bounded). Returns seconds from launch to ready."""

    @abc.abstractmethod
    def generate_batch(self, prompts: list[list[int]], output_len: int, timeout_s: float) -> BatchResult:
        """Submit every prompt together (greedy, EOS ignored, exactly ``output_len`` tokens) and wait."""

    @abc.abstractmethod
    def snapshot(self) -> CounterSnapshot: ...

    @abc.abstractmethod
    def stop(self) -> None:
        """Tear down; idempotent; never raises for an engine that is already gone."""

    @abc.abstractmethod
    def info(self) -> dict[str, Any]:
        """Environment facts: engine_version, torch_version, cuda_version, cuda_uuids (when known)."""

    @property
    @abc.abstractmethod
    def latency_source(self) -> str:
        """Where TTFT/TPOT come from: request_metrics | request_timestamps | client_stream | engine_histogram."""

    def set_synthetic_rates(self, rates: list[float]) -> None:
        """Replace a running engine's synthetic acceptance rates in place (ADR 0039); only adapters that
        can do so override this."""
        raise EngineUnsupported(f"{type(self).__name__} cannot change synthetic acceptance on a running engine; "
                                f"run without protocol.swap_synthetic_acceptance")

    def profile(self, action: str, trace_dir: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Start (``action`` "start") or stop ("stop") the engine's own torch profiler (ADR 0095).

        Returns what the engine reports: the trace directory and, on stop, the trace files written there. Only
        adapters whose engine has a profiler hook override this."""
        raise EngineUnsupported(f"{type(self).__name__} has no profiler hook")

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
