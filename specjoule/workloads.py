"""Workloads: what runs between the window edges (ADR 0013).

closed batch (the paper's protocol): B requests submitted together, fixed prompt and output length,
EOS ignored, greedy; whole generations repeated until the window reaches ``min_window_s`` (or
``max_repeats``); the energy window spans whole generations, so the batch shape never changes
inside it. Request i of repeat r uses prompt ``pool[(r*B + i) % len(pool)]``.

open loop (the blog's protocol): Poisson arrivals at ``rate`` from a seeded generator; warm-up
(unsampled), the window, then a cooldown during which arrivals continue so that the window's end
is not a drain. Concurrency is an outcome: ``vllm:num_requests_running`` is sampled through the
window and recorded.

Counters are window deltas: a snapshot right before the window's first edge and right after its
last, with the meter's edges in between.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from typing import Any

from specjoule.engines.base import CounterDelta, Engine, EngineError, RequestResult
from specjoule.meter.base import Meter

log = logging.getLogger("specjoule.workload")

SAMPLE_RUNNING_S = 0.25


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

    @property
    def window_s(self) -> float:
        return self.window_end_monotonic - self.window_start_monotonic


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _timeout(spec: dict) -> float:
    # One bound for "the engine stopped answering": the same as for its start (ADR 0013).
    return float(spec.get("protocol", {}).get("engine_ready_timeout_s", 900))


def closed_batch(engine: Engine, meter: Meter, pool: list[list[int]], spec: dict) -> WindowResult:
    wl = spec["workload"]
    b, out_len = int(spec["batch_size"]), int(wl["output_len"])
    min_window, max_repeats, warmup = float(wl["min_window_s"]), int(wl["max_repeats"]), float(wl["warmup_s"])
    timeout = _timeout(spec)
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
            res = engine.generate_batch(prompts(w), out_len, timeout)
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
        res = engine.generate_batch(prompts(r), out_len, timeout)
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
        log.warning("window: max_repeats=%d reached before min_window_s=%.1f (window %.2f s)",
                    max_repeats, min_window, t_end - t_start)
    return WindowResult(t_start, t_end, wall_start, wall_end, warmup_used, 0.0, r, requests, running,
                        after.minus(before), extra={"expected_committed": r * b * out_len})


def poisson_arrivals(rate: float, duration_s: float, seed: int) -> list[float]:
    """Arrival offsets (s) of a Poisson process on [0, duration_s), reproducible from ``seed``."""
    rng = random.Random(f"arrivals:{seed}:{rate}")
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s:
            return out
        out.append(t)


def open_loop(engine: Engine, meter: Meter, pool: list[list[int]], spec: dict, drain: bool = False) -> WindowResult:
    """``drain``: wait for the requests still in flight after the cooldown (a shared engine's next
    cell must not see them); otherwise the engine's teardown ends them."""
    if not hasattr(engine, "complete"):
        raise EngineError("open loop needs a server engine (requests arrive while others run)")
    wl = spec["workload"]
    rate, out_len = float(wl["rate"]), int(wl["output_len"])
    warmup, window, cooldown = float(wl["warmup_s"]), float(wl["window_s"]), float(wl["cooldown_s"])
    timeout = _timeout(spec)
    arrivals = poisson_arrivals(rate, warmup + window + cooldown, int(spec["seed"]))
    log.info("open loop: %d arrivals at %.2f/s over %.1f s (warm-up %.1f, window %.1f, cooldown %.1f)",
             len(arrivals), rate, warmup + window + cooldown, warmup, window, cooldown)

    done: list[tuple[float, float, RequestResult]] = []
    done_lock = threading.Lock()

    def one(j: int, submitted: float) -> None:
        res = engine.complete(pool[j % len(pool)], out_len, timeout)  # type: ignore[attr-defined]
        with done_lock:
            done.append((submitted, time.monotonic(), res))

    running: list[float] = []
    sampling = threading.Event()
    stop_sampler = threading.Event()

    def sampler() -> None:
        while not stop_sampler.wait(SAMPLE_RUNNING_S):
            if sampling.is_set():
                try:
                    running.append(engine.snapshot().gauges.get("num_requests_running", 0.0))
                except EngineError:
                    return

    pool_exec = ThreadPoolExecutor(max_workers=max(16, min(1024, len(arrivals) + 1)), thread_name_prefix="arrival")
    futures: list[Future] = []
    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    t0 = time.monotonic()
    edges = [(warmup, "start"), (warmup + window, "end"), (warmup + window + cooldown, "over")]
    events = sorted([(a, "arrive", j) for j, a in enumerate(arrivals)] + [(t, e, -1) for t, e in edges],
                    key=lambda x: (x[0], x[1] != "arrive"))
    before = after = None
    t_start = t_end = 0.0
    wall_start = wall_end = _now()
    log.info("warm-up: start (%.1f s, unsampled)", warmup)
    try:
        for at, what, j in events:
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if what == "arrive":
                futures.append(pool_exec.submit(one, j, time.monotonic()))
            elif what == "start":
                before = engine.snapshot()
                t_start = meter.mark_window_start()
                wall_start = _now()
                sampling.set()
                log.info("window: start (%.1f s)", window)
            elif what == "end":
                # The start mark follows the counter snapshot, so it lands one scrape late: hold the end
                # until the window has its full length, never less than window_s.
                short = t_start + window - time.monotonic()
                if short > 0:
                    time.sleep(short)
                t_end = meter.mark_window_end()
                wall_end = _now()
                sampling.clear()
                after = engine.snapshot()
                log.info("window: end (%.2f s); cooldown: start (%.1f s)", t_end - t_start, cooldown)
            else:
                log.info("cooldown: done")
            if hasattr(engine, "_check_alive"):
                engine._check_alive()  # a dead server fails the cell now, not at the next edge
        if drain:
            left = [f for f in futures if not f.done()]
            log.info("drain: waiting for %d request(s) still in flight", len(left))
            deadline = time.monotonic() + timeout
            for f in left:
                try:
                    f.result(timeout=max(0.0, deadline - time.monotonic()))
                except FuturesTimeout as exc:
                    raise EngineError(f"drain: requests still in flight after {timeout:.0f} s; the next cell on "
                                      f"this engine would measure them") from exc
            log.info("drain: done")
    finally:
        stop_sampler.set()
        th.join(timeout=5)
        # In-flight requests after the cooldown are outside the window; the engine's teardown ends them.
        pool_exec.shutdown(wait=False, cancel_futures=True)
    assert before is not None and after is not None
    with done_lock:
        in_window = [r for s, e, r in done if t_start <= e <= t_end]
    return WindowResult(t_start, t_end, wall_start, wall_end, warmup, cooldown, None, in_window, running,
                        after.minus(before), extra={"arrivals": len(arrivals)})


def run(engine: Engine, meter: Meter, pool: list[list[int]], spec: dict, drain: bool = False) -> WindowResult:
    kind = spec["workload"]["kind"]
    if kind == "closed_batch":
        return closed_batch(engine, meter, pool, spec)
    if kind == "open_loop":
        return open_loop(engine, meter, pool, spec, drain=drain)
    raise EngineError(f"workload kind = {kind!r}: expected closed_batch or open_loop")
