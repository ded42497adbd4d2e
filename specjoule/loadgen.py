"""The loop workloads' load generator: an asynchronous client over a connection pool (ADR 0110, 0111, 0112).

open loop: requests sent on a seeded arrival schedule at ``rate`` — ``independent`` gaps until the horizon (the
count is a random draw, the project's original schedule) or ``scaled`` gaps (N = ⌊rate × horizon⌋ gaps scaled so
that the N arrivals take N / rate, as ``vllm bench serve`` does); gaps are gamma-distributed with shape
``burstiness`` (1 = exponential, Poisson arrivals), as vLLM's benchmark draws them.

closed loop: ``concurrency`` clients, each sending its next request the moment its last one completed; their
first requests are spread over the first half of the warm-up so that the clients do not move in lock step (with
equal output lengths, clients that start together would finish together: a closed batch with extra steps).

Both run on one asyncio event loop in a thread of its own — the main thread stays free for the runner's signal
handling and watches the server — with one ``aiohttp`` session (keep-alive connections, no connect per request,
the client ``vllm bench serve`` uses). The window's edges are a task of their own, so no request waits for a
counter snapshot; ``/metrics`` is read in a worker thread every SAMPLE_RUNNING_S from the loop's start to its end,
and the engine's counters at each window edge are those of the bracketing snapshot rendered nearer to it (ADR 0110).
What the client saw — send lag, realized arrival rate, requests in flight, starvation — goes into the record.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from typing import Any

from specjoule.cellspec import CellSpec
from specjoule.engines.base import (
    OK_REASONS,
    CounterSnapshot,
    EngineError,
    RequestResult,
    TimedSnapshot,
    counters_at,
    percentile,
)
from specjoule.engines.server import StreamTimer
from specjoule.meter.base import Meter

log = logging.getLogger("specjoule.workload")

SAMPLE_RUNNING_S = 0.25  # pause between two /metrics reads (the rate the open loop always sampled at)
SEGMENTS = 4  # the window is judged for steady state in this many equal parts
CLOSED_LOOP_RAMP_SHARE = 0.5  # closed-loop clients start spread over this share of the warm-up
SCHEDULES = ("independent", "scaled")
DEFAULT_SCHEDULE = "independent"
DEFAULT_BURSTINESS = 1.0
KEEPALIVE_S = 60.0  # as vllm bench serve


# ---------------------------------------------------------------------------------------------------------------
# arrival schedules


def arrival_offsets(
    rate: float, horizon_s: float, seed: int, schedule: str = DEFAULT_SCHEDULE, burstiness: float = DEFAULT_BURSTINESS
) -> list[float]:
    """Arrival offsets (s from the loop's start) on [0, horizon_s], reproducible from ``seed``.

    ``independent``: gaps drawn until the horizon (the number of arrivals is random; with burstiness 1 exactly the
    schedule every open-loop record before ADR 0110 ran). ``scaled``: N = ⌊rate × horizon_s⌋ gaps, cumulated and
    scaled so that the N-th arrival lands at N / rate (``vllm bench serve``'s normalisation). Gaps are
    Gamma(shape = burstiness, scale = 1 / (rate × burstiness)): mean 1 / rate, exponential at burstiness 1."""
    if rate <= 0 or burstiness <= 0:
        raise ValueError(f"rate {rate} and burstiness {burstiness} must be positive")
    rng = random.Random(f"arrivals:{seed}:{rate}")

    def gap() -> float:
        if burstiness == 1.0:
            return rng.expovariate(rate)
        return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))

    if schedule == "independent":
        t, out = 0.0, []
        while True:
            t += gap()
            if t >= horizon_s:
                return out
            out.append(t)
    if schedule == "scaled":
        n = int(math.floor(rate * horizon_s + 1e-9))
        return scaled_to_rate([gap() for _ in range(n)], rate) if n else []
    raise ValueError(f"arrival schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")


def scaled_to_rate(gaps: list[float], rate: float) -> list[float]:
    """Arrival offsets from ``gaps``: cumulated in order, then scaled so that the last of the N lands at N / rate
    (``vllm bench serve``'s normalisation, the ``scaled`` schedule's)."""
    cum, t = [], 0.0
    for g in gaps:
        t += g
        cum.append(t)
    scale = (len(gaps) / rate) / cum[-1]
    return [c * scale for c in cum]


# ---------------------------------------------------------------------------------------------------------------
# one request


@dataclass
class Sent:
    """One request as the client handled it (monotonic times)."""

    index: int  # arrival number (open loop) or client × round (closed loop)
    scheduled: float  # when it was due: its arrival (open), its client's previous completion (closed)
    sent: float  # handed to the HTTP client (``vllm bench serve``'s start_time)
    done: float | None = None
    result: RequestResult | None = None

    @property
    def lag_s(self) -> float:
        return self.sent - self.scheduled


class StreamClient:
    """Streamed requests over one aiohttp session; the engine adapter says what to send and how to read the answer
    (``stream_request``, ``new_tally``)."""

    def __init__(self, engine: Any, output_len: int, timeout_s: float, limit: int) -> None:
        self.engine = engine
        self.output_len = output_len
        self.timeout_s = timeout_s
        self.limit = limit  # connections; 0 = as many as requests in flight, each kept alive for reuse
        self.session: Any = None

    async def __aenter__(self) -> StreamClient:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=self.limit, limit_per_host=self.limit, keepalive_timeout=KEEPALIVE_S, force_close=False
        )
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.session.close()

    async def send(self, prompt: list[int], record: Sent) -> None:
        """Send, stream, and fill ``record`` (sent time, completion time, result)."""
        path, body = self.engine.stream_request(prompt, self.output_len)
        tally = self.engine.new_tally()
        record.sent = time.monotonic()
        timer = StreamTimer(record.sent)
        error: str | None = None
        try:
            async with self.session.post(self.engine.url + path, json=body) as resp:
                if resp.status != 200:
                    error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                else:
                    await self._read(resp, tally, timer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed request is data, not a crash
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            tally.close()
        record.done = time.monotonic()
        record.result = timer.result(len(prompt), self.output_len, tally, error=error)

    @staticmethod
    async def _read(resp: Any, tally: Any, timer: StreamTimer) -> None:
        """Server-sent events: one timestamp per network read, for every object in it (as vllm bench serve)."""
        buf = b""
        async for data in resp.content.iter_any():
            now = time.monotonic()
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return
                timer.tokens_at(tally.feed(json.loads(payload)), now)


# ---------------------------------------------------------------------------------------------------------------
# the loop


@dataclass
class LoopOutcome:
    """What the loop hands back to workloads.WindowResult."""

    t_start: float
    t_end: float
    wall_start: dt.datetime
    wall_end: dt.datetime
    requests: list[RequestResult]  # finished inside the window: the latency population (ADR 0110)
    running_samples: list[float]
    delta: Any  # CounterDelta
    columns: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


class Loop:
    """One open- or closed-loop window on a server engine (``run`` blocks until it is over)."""

    def __init__(
        self,
        engine: Any,
        meter: Meter,
        pool: list[list[int]],
        spec: CellSpec | Mapping[str, Any],
        drain: bool = False,
        sample_s: float | None = SAMPLE_RUNNING_S,
    ) -> None:
        if not pool:
            raise EngineError("loop workload: the prompt pool is empty")
        spec = CellSpec.of(spec)  # the planned dict form too, as make_engine takes it (benchmarks, tools)
        wl = spec.workload
        self.engine, self.meter, self.pool, self.spec, self.drain = engine, meter, pool, spec, drain
        self.kind = wl.kind
        self.output_len = wl.output_len
        self.warmup, self.window, self.cooldown = wl.warmup_s, wl.window_s, wl.cooldown_s
        self.horizon = self.warmup + self.window + self.cooldown
        self.timeout = float(spec.protocol.engine_ready_timeout_s)
        self.sample_s = sample_s  # None: no sampler; the counters at the marks then come from the edge reads alone
        self.concurrency = wl.concurrency if self.kind == "closed_loop" else None
        self.rate = wl.rate if self.kind == "open_loop" else None
        # Left out of the config: the load generator's defaults (not in the cell id, ADR 0110).
        self.schedule = wl.schedule or DEFAULT_SCHEDULE
        self.burstiness = wl.burstiness if wl.burstiness is not None else DEFAULT_BURSTINESS
        self.arrivals = (
            arrival_offsets(self.rate, self.horizon, int(spec.seed), self.schedule, self.burstiness)
            if self.rate is not None
            else []
        )
        self.sent: list[Sent] = []
        self.snaps: list[TimedSnapshot] = []
        self.edge_snaps: dict[str, TimedSnapshot] = {}
        self.t0 = self.t_start = self.t_end = 0.0
        self.wall_start = self.wall_end = _now()
        self._tasks: set[asyncio.Task] = set()
        self._stop_sampler: asyncio.Event | None = None  # made on the event loop (_main)

    # -- the thread the event loop runs in --------------------------------------------------------------------
    def run(self) -> LoopOutcome:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="loadgen", daemon=True)
        thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._main(), loop)
        try:
            while True:
                try:
                    fut.result(timeout=0.5)
                    break
                except FuturesTimeout:
                    # A dead server fails the cell now, not at the next timeout (the main thread is free for it).
                    if hasattr(self.engine, "_check_alive"):
                        self.engine._check_alive()
        except BaseException:
            self._cancel(loop, fut)
            raise
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not loop.is_running():
                loop.close()
        return self._outcome()

    def _cancel(self, loop: asyncio.AbstractEventLoop, fut: Any) -> None:
        fut.cancel()

        async def settle() -> None:
            me = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not me]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(settle(), loop).result(timeout=15)
        except Exception as exc:  # noqa: BLE001 - tearing down after a failure: say so, do not mask the failure
            log.warning("load generator: tasks not settled on cancel: %s: %s", type(exc).__name__, exc)

    # -- on the event loop ------------------------------------------------------------------------------------
    async def _main(self) -> None:
        limit = self.concurrency or 0
        self._stop_sampler = asyncio.Event()
        async with StreamClient(self.engine, self.output_len, self.timeout, limit) as client:
            # The engine is idle here (a shared engine's previous cell drained): an exact counter reading that
            # brackets the window's start from below even when the warm-up is shorter than one scrape.
            self.snaps.append(await asyncio.to_thread(self.engine.timed_snapshot, True))
            self.t0 = time.monotonic()
            sampler = asyncio.create_task(self._sample()) if self.sample_s is not None else None
            edges = asyncio.create_task(self._edges())
            try:
                log.info("warm-up: start (%.1f s, unsampled)", self.warmup)
                if self.kind == "open_loop":
                    await self._open_loop(client)
                else:
                    await self._closed_loop(client)
                await edges
                log.info("cooldown: done")
                await self._finish_in_flight()
            finally:
                self._stop_sampler.set()
                if sampler is not None:
                    await sampler
                for t in list(self._tasks):
                    t.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                edges.cancel()

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _open_loop(self, client: StreamClient) -> None:
        log.info(
            "open loop: %d arrivals at %.2f/s (%s schedule, burstiness %g) over %.1f s (warm-up %.1f, "
            "window %.1f, cooldown %.1f)",
            len(self.arrivals),
            self.rate,
            self.schedule,
            self.burstiness,
            self.horizon,
            self.warmup,
            self.window,
            self.cooldown,
        )
        for j, at in enumerate(self.arrivals):
            due = self.t0 + at
            await _sleep_until(due)
            record = Sent(j, due, due)
            self.sent.append(record)
            self._spawn(client.send(self.pool[j % len(self.pool)], record))
        await _sleep_until(self.t0 + self.horizon)

    async def _closed_loop(self, client: StreamClient) -> None:
        n = int(self.concurrency)  # type: ignore[arg-type]
        ramp = CLOSED_LOOP_RAMP_SHARE * self.warmup
        log.info(
            "closed loop: %d clients, started over %.2f s (warm-up %.1f, window %.1f, cooldown %.1f)",
            n,
            ramp,
            self.warmup,
            self.window,
            self.cooldown,
        )
        for c in range(n):
            self._spawn(self._client(client, c, self.t0 + ramp * c / n, n))
        # The clients stop sending at the horizon; their last requests are drained or cancelled (_main).
        await _sleep_until(self.t0 + self.horizon)

    async def _client(self, client: StreamClient, c: int, start: float, n: int) -> None:
        """Client c: request k uses prompt (k·N + c) mod |pool| (the closed batch's rule, ADR 0013), each sent as
        soon as the previous one completed; no new request after the cooldown."""
        await _sleep_until(start)
        due, k = start, 0
        while time.monotonic() < self.t0 + self.horizon:
            record = Sent(k * n + c, due, due)
            self.sent.append(record)
            await client.send(self.pool[(k * n + c) % len(self.pool)], record)
            due = record.done  # type: ignore[assignment]
            k += 1

    async def _edges(self) -> None:
        await _sleep_until(self.t0 + self.warmup)
        self.t_start = self.meter.mark_window_start()
        self.wall_start = _now()
        log.info("window: start (%.1f s)", self.window)
        self.edge_snaps["start"] = await asyncio.to_thread(self.engine.timed_snapshot, True)
        # Never shorter than window_s (ADR 0013 addendum); the marks no longer wait for a snapshot, so the end is
        # exactly window_s after the start.
        await _sleep_until(self.t_start + self.window)
        self.t_end = self.meter.mark_window_end()
        self.wall_end = _now()
        log.info("window: end (%.2f s); cooldown: start (%.1f s)", self.t_end - self.t_start, self.cooldown)
        self.edge_snaps["end"] = await asyncio.to_thread(self.engine.timed_snapshot, True)

    async def _sample(self) -> None:
        assert self._stop_sampler is not None
        while not self._stop_sampler.is_set():
            try:
                self.snaps.append(await asyncio.to_thread(self.engine.timed_snapshot, True))
            except EngineError as exc:  # the engine is going away: the loop reports that, not the sampler
                log.debug("sampler stopped: %s", exc)
                return
            try:
                await asyncio.wait_for(self._stop_sampler.wait(), timeout=self.sample_s)
            except TimeoutError:
                pass

    async def _finish_in_flight(self) -> None:
        left = [t for t in self._tasks if not t.done()]
        if not self.drain:
            # Outside the window; the engine's teardown (or this cancel) ends them.
            return
        log.info("drain: waiting for %d request(s) still in flight", len(left))
        if left:
            done, pending = await asyncio.wait(left, timeout=self.timeout)
            if pending:
                raise EngineError(
                    f"drain: requests still in flight after {self.timeout:.0f} s; the next cell on "
                    f"this engine would measure them"
                )
        log.info("drain: done")

    # -- after the loop ---------------------------------------------------------------------------------------
    def _outcome(self) -> LoopOutcome:
        snaps = sorted(self.snaps + list(self.edge_snaps.values()), key=lambda s: s.sent)
        before_start, after_start = _bracket(snaps, self.t_start)
        before_end, after_end = _bracket(snaps, self.t_end)
        c_start = counters_at(self.t_start, before_start, after_start)
        c_end = counters_at(self.t_end, before_end, after_end)
        delta = c_end.minus(c_start)
        in_window = [s for s in self.sent if s.done is not None and self.t_start <= s.done <= self.t_end]
        readings = [s for s in self.snaps if self.t_start <= s.mid <= self.t_end]
        running = [s.snapshot.gauges.get("num_requests_running", 0.0) for s in readings]
        columns = self._columns(readings, (before_start, after_start), (before_end, after_end))
        extra = {"arrivals": len(self.arrivals)} if self.kind == "open_loop" else {}
        return LoopOutcome(
            self.t_start,
            self.t_end,
            self.wall_start,
            self.wall_end,
            [s.result for s in in_window if s.result is not None],
            running,
            delta,
            columns,
            extra,
        )

    def _columns(self, readings: list[TimedSnapshot], start: tuple, end: tuple) -> dict[str, Any]:
        t0, t1 = self.t_start, self.t_end
        window = t1 - t0
        sent_in = [s for s in self.sent if t0 <= s.sent <= t1]
        lags = sorted(max(0.0, s.lag_s) for s in sent_in)
        # Every read while the loop ran (the first snapshot is the idle one before it).
        polls = [s.duration_s for s in self.snaps[1:]] + [s.duration_s for s in self.edge_snaps.values()]
        out: dict[str, Any] = {
            "arrival_schedule": self.schedule if self.kind == "open_loop" else None,
            "burstiness": self.burstiness if self.kind == "open_loop" else None,
            "requests_sent": len(sent_in),
            "realized_request_rate": len(sent_in) / window if window > 0 else None,
            "send_lag_p50_s": percentile(lags, 0.5),
            "send_lag_p99_s": percentile(lags, 0.99),
            "send_lag_max_s": lags[-1] if lags else None,
            "inflight_at_start": self._inflight(t0),
            "inflight_at_end": self._inflight(t1),
            "mean_inflight": self._mean_inflight(t0, t1),
            "snapshot_start_s": self.edge_snaps["start"].duration_s if "start" in self.edge_snaps else None,
            "snapshot_end_s": self.edge_snaps["end"].duration_s if "end" in self.edge_snaps else None,
            "edge_committed_tokens": _edge_width(start, end, _committed),
            "edge_requests_completed": _edge_width(start, end, _completed),
            "metrics_polls": len(polls),
            "metrics_poll_mean_s": sum(polls) / len(polls) if polls else None,
            "running_requests_segments": self._segments(readings, "num_requests_running"),
            "waiting_requests_mean": _mean(
                [s.snapshot.gauges[g] for s in readings for g in ("num_requests_waiting",) if g in s.snapshot.gauges]
            ),
        }
        return out

    def _inflight(self, t: float) -> int:
        return sum(1 for s in self.sent if s.sent <= t and (s.done is None or s.done > t))

    def _mean_inflight(self, t0: float, t1: float) -> float | None:
        """Time-average of the requests in flight at the client over [t0, t1]: exact, from the send and completion
        times (a request still in flight at the end counts to the end)."""
        if t1 <= t0:
            return None
        busy = sum(max(0.0, min(t1, s.done if s.done is not None else t1) - max(t0, s.sent)) for s in self.sent)
        return busy / (t1 - t0)

    def _segments(self, readings: list[TimedSnapshot], gauge: str) -> list[float | None]:
        """Mean gauge reading in each of SEGMENTS equal parts of the window (None where no reading fell)."""
        window = self.t_end - self.t_start
        parts: list[list[float]] = [[] for _ in range(SEGMENTS)]
        for s in readings:
            if gauge in s.snapshot.gauges:
                i = min(SEGMENTS - 1, int((s.mid - self.t_start) / window * SEGMENTS)) if window > 0 else 0
                parts[i].append(s.snapshot.gauges[gauge])
        return [_mean(p) for p in parts]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _bracket(snaps: list[TimedSnapshot], t: float) -> tuple[TimedSnapshot, TimedSnapshot | None]:
    """The last snapshot received at or before ``t`` and the first sent at or after it (ADR 0110)."""
    before = [s for s in snaps if s.received <= t]
    after = [s for s in snaps if s.sent >= t]
    if not before:
        raise EngineError("no counter snapshot before the window's edge")
    return max(before, key=lambda s: s.received), (min(after, key=lambda s: s.sent) if after else None)


def _committed(s: CounterSnapshot) -> float:
    return s.counters.get("generation_tokens", 0.0)


def _completed(s: CounterSnapshot) -> float:
    """Requests the engine completed, as ``requests_completed`` counts them (CounterDelta.columns)."""
    return sum(s.finished.get(r, 0.0) for r in OK_REASONS)


def _edge_width(start: tuple, end: tuple, count: Callable[[CounterSnapshot], float]) -> int | None:
    """``count`` (a counter of a snapshot) between the two snapshots around each edge, summed over both edges: the
    window's delta of that counter, taken at the snapshots ``counters_at`` chose, is within this of the exact one
    (ADR 0110, 0226). None without a snapshot after an edge."""
    widths = [_bracket_width(before, after, count) for before, after in (start, end)]
    return None if None in widths else sum(w for w in widths if w is not None)


def _bracket_width(
    before: TimedSnapshot, after: TimedSnapshot | None, count: Callable[[CounterSnapshot], float]
) -> int | None:
    """``count`` between the two snapshots around an edge: its exact value at the edge is within this."""
    if after is None:
        return None
    return int(round(count(after.snapshot) - count(before.snapshot)))


def run(engine: Any, meter: Meter, pool: list[list[int]], spec: CellSpec, drain: bool = False) -> LoopOutcome:
    if not hasattr(engine, "stream_request"):
        raise EngineError(f"{spec.workload.kind} needs a server engine (requests arrive while others run)")
    return Loop(engine, meter, pool, spec, drain=drain).run()


__all__ = ["Loop", "LoopOutcome", "Sent", "StreamClient", "arrival_offsets", "run"]
