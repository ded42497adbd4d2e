"""Workloads: what runs between the window edges (ADR 0013).

closed batch (the paper's protocol): B requests submitted together, fixed prompt and output length,
EOS ignored, greedy; whole generations repeated until the window reaches ``min_window_s`` (or
``max_repeats``); the energy window spans whole generations, so the batch shape never changes
inside it. Request i of repeat r uses prompt ``pool[(r*B + i) % len(pool)]``.

open loop (the blog's protocol): arrivals at ``rate`` on a seeded schedule; warm-up (unsampled), the
window, then a cooldown during which arrivals continue so that the window's end is not a drain.
Concurrency is an outcome: ``vllm:num_requests_running`` is sampled through the window and recorded.

closed loop (fixed concurrency): ``concurrency`` clients, each sending its next request when its last
completes; the same warm-up / window / cooldown; arms compare at equal concurrency by construction and
the record shows the throughput each reached. Both loops run in ``specjoule.loadgen`` (ADR 0110-0112).

Counters are window deltas. Closed batch: a snapshot right before the window's first edge and right
after its last, with the meter's edges in between (the engine is idle at both). Loops: the engine is
busy at the edges, so its counters at each edge come from the bracketing snapshot rendered nearer to it
(ADR 0110).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from specjoule import loadgen
from specjoule.cellspec import CellSpec
from specjoule.engines.base import CounterDelta, Engine, EngineError, EngineHung, RequestResult
from specjoule.meter.base import Meter

log = logging.getLogger("specjoule.workload")

KINDS = ("closed_batch", "open_loop", "closed_loop")
LOOP_KINDS = ("open_loop", "closed_loop")  # a server engine, warm-up / window / cooldown, the load generator


@dataclass
class WindowResult:
    window_start_monotonic: float
    window_end_monotonic: float
    window_start: dt.datetime
    window_end: dt.datetime
    warmup_s: float
    cooldown_s: float
    repeats: int | None
    requests: list[RequestResult]
    running_samples: list[float]
    delta: CounterDelta
    extra: dict[str, Any] = field(default_factory=dict)
    # Record columns the workload measured (loops: send lag, realized rate, in flight, edges, steady state;
    # records.RECORD_FIELDS names them); empty for a closed batch.
    columns: dict[str, Any] = field(default_factory=dict)

    @property
    def window_s(self) -> float:
        return self.window_end_monotonic - self.window_start_monotonic


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _timeout(spec: CellSpec) -> float:
    # One bound for "the engine stopped answering": the same as for its start (ADR 0013).
    return float(spec.protocol.engine_ready_timeout_s)


# Watchdog defaults (ADR 0132): a batch 10x slower than the slowest this engine has finished is a hang, not noise.
STALL_FACTOR = 10.0
STALL_FLOOR_S = 60.0


class Watchdog:
    """How long one closed batch may take before the engine counts as hung (ADR 0132).

    ``stall_timeout_s`` (protocol.stall_timeout_s) is used as given; unset, a batch may take STALL_FACTOR x the
    slowest batch this engine has finished (at least STALL_FLOOR_S), and the engine's start timeout
    (engine_ready_timeout_s) before its first. One watchdog lives as long as its engine: the cells of a shared
    engine teach it their batch times, so a replicate window without a warm-up is still guarded. (Loops end their
    window on the clock; a hung server fails them at its next counter read.)"""

    def __init__(self, ready_timeout_s: float, stall_timeout_s: float | None = None) -> None:
        self.ready_timeout_s = float(ready_timeout_s)
        self.stall_timeout_s = float(stall_timeout_s) if stall_timeout_s else None
        self.slowest_s: float | None = None

    def batch_timeout(self) -> float:
        if self.stall_timeout_s is not None:
            return self.stall_timeout_s
        if self.slowest_s is None:
            return self.ready_timeout_s
        return min(self.ready_timeout_s, max(STALL_FLOOR_S, STALL_FACTOR * self.slowest_s))

    def observe(self, seconds: float) -> None:
        self.slowest_s = seconds if self.slowest_s is None else max(self.slowest_s, seconds)

    def generate(self, engine: Engine, prompts: list[list[int]], out_len: int) -> Any:
        """One batch under the watchdog; a batch that outlives it raises EngineHung (the engine's own timeout)."""
        limit = self.batch_timeout()
        t0 = time.monotonic()
        try:
            res = engine.generate_batch(prompts, out_len, limit)
        except EngineHung as exc:
            log.error(
                "watchdog: no answer from the engine within %.0f s (%s): the engine is hung; %s",
                limit,
                "protocol.stall_timeout_s"
                if self.stall_timeout_s is not None
                else ("10 x its slowest batch" if self.slowest_s is not None else "engine_ready_timeout_s"),
                exc,
            )
            raise
        self.observe(time.monotonic() - t0)
        return res


def closed_batch(
    engine: Engine, meter: Meter, pool: list[list[int]], spec: CellSpec, watchdog: Watchdog | None = None
) -> WindowResult:
    wl = spec.workload
    b, out_len = int(spec.batch_size), wl.output_len
    min_window, max_repeats, warmup = wl.min_window_s, wl.max_repeats, wl.warmup_s
    watchdog = watchdog or Watchdog(_timeout(spec))
    n = len(pool)
    if n == 0:
        raise EngineError("closed batch: the prompt pool is empty")

    def prompts(r: int) -> list[list[int]]:
        return [pool[(r * b + i) % n] for i in range(b)]

    # Warm-up: whole batches, unsampled, until warmup_s has passed (0 = none).
    t0 = time.monotonic()
    w = 0
    if warmup > 0:
        log.info("warm-up: start (%.1f s of batches of %d, unsampled)", warmup, b)
        while time.monotonic() - t0 < warmup:
            res = watchdog.generate(engine, prompts(w), out_len)
            w += 1
            bad = [r for r in res.requests if not r.ok]
            if bad:
                raise EngineError(f"warm-up batch {w}: {len(bad)} of {b} requests failed: {bad[0].error}")
        log.info("warm-up: done, %d batch(es) in %.1f s", w, time.monotonic() - t0)
    warmup_used = time.monotonic() - t0 if warmup > 0 else 0.0

    before = engine.snapshot()
    t_start = meter.mark_window_start()
    wall_start = _now()
    log.info("window: start (closed batch B=%d, %d in / %d out, at least %.1f s)", b, len(pool[0]), out_len, min_window)
    requests: list[RequestResult] = []
    running: list[float] = []
    r = 0
    next_report = t_start + 5.0
    while True:
        res = watchdog.generate(engine, prompts(r), out_len)
        r += 1
        requests += res.requests
        running += res.running_samples
        now = time.monotonic()
        if now >= next_report:
            log.info("window: %d generation(s), %.1f s", r, now - t_start)
            next_report = now + 5.0
        if now - t_start >= min_window or r >= max_repeats:
            break
    t_end = meter.mark_window_end()
    wall_end = _now()
    after = engine.snapshot()
    log.info("window: end after %d generation(s), %.2f s", r, t_end - t_start)
    if r >= max_repeats and t_end - t_start < min_window:
        log.warning(
            "window: max_repeats=%d reached before min_window_s=%.1f (window %.2f s)",
            max_repeats,
            min_window,
            t_end - t_start,
        )
    return WindowResult(
        t_start,
        t_end,
        wall_start,
        wall_end,
        warmup_used,
        0.0,
        r,
        requests,
        running,
        after.minus(before),
        extra={"expected_committed": r * b * out_len},
    )


def poisson_arrivals(rate: float, duration_s: float, seed: int) -> list[float]:
    """Arrival offsets (s) of a Poisson process on [0, duration_s), reproducible from ``seed`` (the
    ``independent`` schedule at burstiness 1: every open-loop record before ADR 0110 ran it)."""
    return loadgen.arrival_offsets(rate, duration_s, seed, "independent", 1.0)


def loop(engine: Engine, meter: Meter, pool: list[list[int]], spec: CellSpec, drain: bool = False) -> WindowResult:
    """Open or closed loop through a server engine. ``drain``: wait for the requests still in flight after the
    cooldown (a shared engine's next cell must not see them); otherwise they are cancelled and the engine's
    teardown ends them."""
    wl = spec.workload
    out = loadgen.run(engine, meter, pool, spec, drain=drain)
    return WindowResult(
        out.t_start,
        out.t_end,
        out.wall_start,
        out.wall_end,
        wl.warmup_s,
        wl.cooldown_s,
        None,
        out.requests,
        out.running_samples,
        out.delta,
        extra=out.extra,
        columns=out.columns,
    )


def open_loop(engine: Engine, meter: Meter, pool: list[list[int]], spec: CellSpec, drain: bool = False) -> WindowResult:
    return loop(engine, meter, pool, spec, drain=drain)


def closed_loop(
    engine: Engine, meter: Meter, pool: list[list[int]], spec: CellSpec, drain: bool = False
) -> WindowResult:
    return loop(engine, meter, pool, spec, drain=drain)


def run(
    engine: Engine,
    meter: Meter,
    pool: list[list[int]],
    spec: CellSpec,
    drain: bool = False,
    watchdog: Watchdog | None = None,
) -> WindowResult:
    kind = spec.workload.kind
    if kind == "closed_batch":
        return closed_batch(engine, meter, pool, spec, watchdog=watchdog)
    if kind in LOOP_KINDS:
        return loop(engine, meter, pool, spec, drain=drain)
    raise EngineError(f"workload kind = {kind!r}: expected one of {', '.join(KINDS)}")
