"""The running-requests sampler of closed batches (ADR 0013): every batch gets a reading, even one shorter than the
sampling interval, and readings that are not an observed concurrency are skipped. ``read`` here is a plain
callable standing in for a /metrics scrape: the timing is what is under test, not an engine."""

from __future__ import annotations

import threading
import time

from specjoule.engines.base import RUNNING_FIRST_SAMPLE_S, RUNNING_SAMPLE_S, sample_running


def _sampler(read, stop: threading.Event) -> tuple[threading.Thread, list[float]]:
    samples: list[float] = []
    th = threading.Thread(target=sample_running, args=(stop, read, samples), daemon=True)
    th.start()
    return th, samples


class ScriptedStop:
    """Stands in for the batch's stop event: records how long the sampler asked to wait, and says the batch ended
    after ``waits_before_stop`` waits. The schedule is what is under test, not how fast a loaded machine runs it."""

    def __init__(self, waits_before_stop: int) -> None:
        self.left = waits_before_stop
        self.delays: list[float] = []

    def wait(self, delay: float) -> bool:
        self.delays.append(delay)
        self.left -= 1
        return self.left < 0


def test_a_batch_shorter_than_one_interval_still_gets_a_reading():
    # The CPU test engines' closed batches take about 0.14 s: with the first reading one interval in, they got none.
    stop = ScriptedStop(waits_before_stop=1)  # the batch ends before the second wait is over
    samples: list[float] = []
    sample_running(stop, lambda: 4.0, samples)
    assert samples == [4.0]
    assert stop.delays[0] == RUNNING_FIRST_SAMPLE_S < 0.14 < RUNNING_SAMPLE_S


def test_the_first_reading_comes_early_and_the_next_ones_an_interval_apart():
    stop = ScriptedStop(waits_before_stop=4)
    samples: list[float] = []
    sample_running(stop, lambda: 2.0, samples)
    assert samples == [2.0] * 4
    assert stop.delays == [RUNNING_FIRST_SAMPLE_S] + [RUNNING_SAMPLE_S] * 4


def test_on_a_real_thread_the_readings_are_at_least_an_interval_apart():
    # A loaded machine only stretches the gaps, so lower bounds are what can be asserted in wall-clock time.
    stop = threading.Event()
    times: list[float] = []
    t0 = time.monotonic()

    def read() -> float:
        times.append(time.monotonic() - t0)
        if len(times) == 3:
            stop.set()
        return 2.0

    th, samples = _sampler(read, stop)
    th.join(timeout=30.0)
    assert not th.is_alive() and samples == [2.0] * 3
    assert times[0] >= RUNNING_FIRST_SAMPLE_S
    assert all(b - a >= 0.95 * RUNNING_SAMPLE_S for a, b in zip(times, times[1:]))


def test_zero_and_missing_readings_are_skipped_and_a_failing_read_ends_sampling():
    stop = threading.Event()
    values = [0.0, None, 3.0, 0.0, 5.0]
    calls = iter(range(len(values)))

    def read() -> float | None:
        i = next(calls)
        if i == len(values) - 1:
            stop.set()
        return values[i]

    th, samples = _sampler(read, stop)
    th.join(timeout=30.0)  # returns as soon as the sampler ends; generous for a loaded machine
    assert samples == [3.0, 5.0]

    attempts: list[int] = []

    def gone() -> float:
        attempts.append(1)
        raise ConnectionError("server went away")

    th, samples = _sampler(gone, threading.Event())
    th.join(timeout=30.0)  # returns as soon as the sampler ends; generous for a loaded machine
    assert not th.is_alive() and samples == [] and attempts == [1]
