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
from pathlib import Path
from typing import Any

log = logging.getLogger("specjoule.engine")


class EngineError(RuntimeError):
    """The engine failed: did not start, died, timed out or answered nonsense."""


class EngineHung(EngineError):
    """The engine stopped making progress: a request or batch outlived its watchdog (protocol.stall_timeout_s,
    ADR 0132). Its process group is killed at once, without the polite stop a hung engine would not answer."""


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
    # Streamed at an HTTP client only: chunks that carried tokens, and the gaps between them shorter than
    # BURST_GAP_S (a starved client reads a buffered stream in one go: its per-token times collapse, ADR 0110).
    token_chunks: int | None = None
    burst_gaps: int | None = None


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
        return Histogram(
            self.count - other.count,
            self.sum - other.sum,
            {le: c - other.buckets.get(le, 0.0) for le, c in self.buckets.items()},
        )

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


@dataclass
class TimedSnapshot:
    """A counter snapshot read over HTTP while the engine runs: the engine rendered it at some instant between
    ``sent`` and ``received`` (monotonic), not at either; ``mid`` estimates when (ADR 0110)."""

    sent: float
    received: float
    snapshot: CounterSnapshot

    @property
    def mid(self) -> float:
        return (self.sent + self.received) / 2

    @property
    def duration_s(self) -> float:
        return self.received - self.sent


def counters_at(t: float, before: TimedSnapshot, after: TimedSnapshot | None) -> CounterSnapshot:
    """The engine's counters at instant ``t``, from the snapshots read before and after it (ADR 0110).

    Counters only grow, so the value at ``t`` lies between the two snapshots exactly. Of the two, the one rendered
    nearer to ``t`` (render time estimated by ``mid``) stands for it: integer counts, so the counters stay
    consistent with each other (accepted = Σ per position, draft tokens ≤ k × drafts — a linear interpolation
    rounded counter by counter would not), and the choice is unbiased where the old rule (always the snapshot
    before the start, always the one after the end) overstated the window by both reads' durations. Without a
    snapshot after ``t`` the one before stands for it."""
    chosen = before if after is None or abs(t - before.mid) <= abs(after.mid - t) else after
    c = chosen.snapshot
    return CounterSnapshot(
        t, dict(c.counters), dict(c.finished), list(c.accepted_per_pos), dict(c.histograms), dict(c.gauges)
    )


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


# A gap between two token-bearing reads of one stream shorter than this is not an engine step (the fastest decode
# step measured on the H200 is several ms): the client read several buffered chunks in one go (ADR 0110).
BURST_GAP_S = 0.0005
# A request is starved when at least this share of its gaps are bursts; a window's TBT/TPOT are unreliable when
# more than STARVED_REQUEST_SHARE of its requests are (ADR 0110).
STARVED_GAP_SHARE = 0.5
STARVED_REQUEST_SHARE = 0.05


def starved(r: RequestResult) -> bool:
    """The stream of ``r`` reached the client in bursts: its per-token times are the client's, not the engine's."""
    if r.token_chunks is None or r.burst_gaps is None or r.token_chunks < 3:
        return False
    return r.burst_gaps >= STARVED_GAP_SHARE * (r.token_chunks - 1)


def latency_from_requests(requests: list[RequestResult]) -> dict[str, float | str | int | None]:
    """Per-request latency statistics (percentiles nearest-rank, ADR 0013).

    Requests streamed at a client are judged for starvation (ADR 0110): when more than STARVED_REQUEST_SHARE of
    them were read in bursts, the time-between-tokens columns are null and ``latency_unreliable_reason`` says why;
    TTFT stays (a starved client reads the first token late, so it is an upper bound, and the reason says that too).
    """
    ok = [r for r in requests if r.ok]
    ttft = sorted(r.ttft_s for r in ok if r.ttft_s is not None)
    tpot = sorted(r.tpot_s for r in ok if r.tpot_s is not None)
    out: dict[str, float | str | int | None] = {
        "ttft_mean_s": _mean(ttft),
        "ttft_p50_s": _pct(ttft, 0.5),
        "ttft_p99_s": _pct(ttft, 0.99),
        "tpot_mean_s": _mean(tpot),
        "tpot_p50_s": _pct(tpot, 0.5),
        "tpot_p99_s": _pct(tpot, 0.99),
    }
    streamed = [r for r in ok if r.token_chunks is not None]
    if not streamed:
        return out  # offline metrics or older adapters: nothing to judge; the starvation columns stay null
    n_starved = sum(starved(r) for r in streamed)
    out["starved_requests"] = n_starved
    if n_starved > STARVED_REQUEST_SHARE * len(streamed):
        out.update(tpot_mean_s=None, tpot_p50_s=None, tpot_p99_s=None)
        out["latency_unreliable_reason"] = (
            f"stream read in bursts: {n_starved} of {len(streamed)} requests (at least "
            f"{STARVED_GAP_SHARE:.0%} of their gaps between token reads under {BURST_GAP_S * 1e3:g} ms); "
            f"the client or the server front end was starved; time between tokens not measurable, TTFT an upper "
            f"bound"
        )
    return out


def latency_from_histograms(delta: CounterDelta) -> dict[str, float | None]:
    """Window latency from engine histograms: exact means, bucket-interpolated percentiles.

    TPOT here is ``inter_token_latency_seconds`` (time between token *deliveries*, one observation
    per engine step that produced tokens for a request) — with speculation a step can deliver
    several tokens, so we prefer ``request_time_per_output_token_seconds`` (per request: decode
    time / (tokens - 1)), which is what the per-request path computes too.
    """
    ttft = delta.histograms.get("time_to_first_token_seconds")
    tpot = delta.histograms.get("request_time_per_output_token_seconds") or delta.histograms.get(
        "time_per_output_token_seconds"
    )
    out: dict[str, float | None] = {}
    for prefix, h in (("ttft", ttft), ("tpot", tpot)):
        out[f"{prefix}_mean_s"] = h.mean() if h else None
        out[f"{prefix}_p50_s"] = h.quantile(0.5) if h else None
        out[f"{prefix}_p99_s"] = h.quantile(0.99) if h else None
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _pct(xs: list[float], q: float, method: str = "nearest_rank") -> float | None:
    """Percentile ``q`` (0..1) of sorted data.

    ``nearest_rank`` (the records', ADR 0013): the smallest observed value with at least q·n values at or below it
    — every value was observed. ``linear``: numpy's default (``np.percentile``), interpolating between the two
    closest ranks — what ``vllm bench serve`` reports, used where the two are compared (ADR 0110)."""
    if not xs:
        return None
    if method == "nearest_rank":
        return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]
    if method == "linear":
        pos = q * (len(xs) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
    raise ValueError(f"percentile method {method!r}: expected nearest_rank or linear")


percentile = _pct


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

    def compile_cache_root(self) -> Path | None:
        """The compile cache this engine's start reads and fills (specjoule.engines.compile_cache, ADR 0189), for
        the record's compile_cache_warm; None where the engine keeps none the runner can read."""
        return None

    def set_synthetic_rates(self, rates: list[float]) -> None:
        """Replace a running engine's synthetic acceptance rates in place (ADR 0039); only adapters that
        can do so override this."""
        raise EngineUnsupported(
            f"{type(self).__name__} cannot change synthetic acceptance on a running engine; "
            f"run without protocol.swap_synthetic_acceptance"
        )

    def profile(
        self, action: str, trace_dir: str | None = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Start (``action`` "start") or stop ("stop") the engine's own torch profiler (ADR 0095).

        Returns what the engine reports: the trace directory and, on stop, the trace files written there. Only
        adapters whose engine has a profiler hook override this."""
        raise EngineUnsupported(f"{type(self).__name__} has no profiler hook")

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
