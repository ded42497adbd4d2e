"""How NVML's utilization reads a known duty cycle (ADR 0258): windows of a GPU spin kernel of fixed length and a host
gap of fixed length, measured by the project's own meter as a cell's window is (NvmlMeter at its 10 Hz, the
record's ``gpu_busy_fraction`` from its timeline), beside the busy fraction CUDA events time on the kernels.

    python3 tools/device/nvml_busy_probe.py --out $OUT/nvml-busy.json [--seconds 3]

Needs torch with CUDA and NVML (the GPU image has both, and pyarrow: no bundle). About 60 s of GPU time. Each row:
the kernel and gap asked for, the kernels' event-timed busy fraction of the window, NVML's, and the idle part of a
period (kernel + gap) each implies — what compare-evidence's round split reads (``idle_ms``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specjoule import gpu, records  # noqa: E402

#: (kernel ms, host gap ms): a B = 1 round's length with the waits the two-board pairs showed (0.01-4 ms), a long
#: round, and one duty cycle (half) at three grains, the finest below a launch-and-sync's own cost.
GRID: tuple[tuple[float, float], ...] = (
    (7.5, 0.0),
    (7.5, 0.1),
    (7.5, 0.25),
    (7.5, 0.5),
    (7.5, 1.0),
    (7.5, 2.0),
    (7.5, 4.0),
    (20.0, 1.0),
    (20.0, 5.0),
    (0.05, 0.05),
    (0.2, 0.2),
    (1.0, 1.0),
)


def summarize(
    kernel_ms: float, gap_ms: float, kernel_times_ms: Sequence[float], window_s: float, nvml_busy: float | None
) -> dict:
    """One row: the event-timed busy fraction (kernel time over the window), NVML's, and the idle part of one
    period each implies (period = the window over the kernels run, as a round is the window over its steps)."""
    n = len(kernel_times_ms)
    busy = sum(kernel_times_ms) / (1e3 * window_s) if window_s > 0 else None
    period_ms = 1e3 * window_s / n if n else None
    row = {
        "kernel_ms": kernel_ms,
        "gap_ms": gap_ms,
        "kernels": n,
        "window_s": window_s,
        "kernel_ms_timed": sum(kernel_times_ms) / n if n else None,
        "period_ms": period_ms,
        "event_busy": busy,
        "nvml_busy": nvml_busy,
        "busy_difference": None if busy is None or nvml_busy is None else nvml_busy - busy,
        "event_idle_ms": None if busy is None or period_ms is None else period_ms * (1 - busy),
        "nvml_idle_ms": None if nvml_busy is None or period_ms is None else period_ms * (1 - nvml_busy),
    }
    return row


def _spin_cycles_per_ms(torch) -> float:
    """torch.cuda._sleep's cycles for one millisecond on this board, from one long timed spin."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 50_000_000
    torch.cuda._sleep(1_000_000)  # warm the launch path
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def _load(torch, cycles: int, gap_ms: float, until: float, events: list | None) -> None:
    """Spin kernels of ``cycles`` with ``gap_ms`` of host time after each, until ``until`` (monotonic)."""
    while time.monotonic() < until:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        if events is not None:
            events.append((start, end))
        if gap_ms:
            resume = time.perf_counter() + gap_ms / 1e3
            while time.perf_counter() < resume:  # spin: a sleep's wake-up is coarser than the finest gaps
                pass


def _window(
    meter, torch, cycles: int, gap_ms: float, seconds: float, warmup_s: float
) -> tuple[list[float], float, float | None, list[float]]:
    """One window as a cell's: sampling starts, ``warmup_s`` of the same load (a cell's warm-up runs its workload,
    and NVML's utilization looks back over its own sample period), then the timed window; the event-timed kernels,
    the window's length, the record's busy fraction and the in-window samples."""
    events: list = []
    meter.reset_window()
    meter.start_sampling()
    _load(torch, cycles, gap_ms, time.monotonic() + warmup_s, None)
    t0 = meter.mark_window_start()
    _load(torch, cycles, gap_ms, time.monotonic() + seconds, events)
    t1 = meter.mark_window_end()
    time.sleep(0.2)
    meter.stop_sampling()
    timeline = meter.timeline()
    busy = records.window_gpu_busy_fraction(timeline)
    samples = records.window_gpu_util_samples(timeline)
    return [s.elapsed_time(e) for s, e in events], t1 - t0, busy, samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of the same load before each window")
    args = parser.parse_args(argv)
    lease = gpu.acquire("cuda")
    import torch

    from specjoule.meter.nvml import NvmlMeter

    meter = NvmlMeter()
    meter.open()
    out: dict = {
        "devices": [d.__dict__ for d in meter.devices],
        "driver": meter.driver,
        "sample_hz": 1 / meter.period,
        "warmup_s": args.warmup,
    }
    rows = []
    try:
        torch.cuda.init()
        per_ms = _spin_cycles_per_ms(torch)
        out["spin_cycles_per_ms"] = per_ms
        for kernel_ms, gap_ms in GRID:
            times, window_s, nvml_busy, samples = _window(
                meter, torch, int(kernel_ms * per_ms), gap_ms, args.seconds, args.warmup
            )
            row = summarize(kernel_ms, gap_ms, times, window_s, nvml_busy) | {"util_samples": samples}
            rows.append(row)
            print(
                f"kernel {kernel_ms:5.2f} ms gap {gap_ms:4.2f} ms: {row['kernels']:6d} kernels, period "
                f"{row['period_ms']:.3f} ms, busy events {row['event_busy']:.3f} nvml {row['nvml_busy']:.3f}, idle "
                f"{row['event_idle_ms']:.3f} vs {row['nvml_idle_ms']:.3f} ms",
                flush=True,
            )
    finally:
        meter.close()
        lease.release()
    out["rows"] = rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
