"""The meter's hardware counters on a real GPU (issue 18, ADR 0101): three windows through NvmlMeter —
idle, a device-to-device copy, a bf16 matmul — with their GPM columns, timelines and the raw per-tick
readings, written as JSON (commit it under tests/data/ as a recorded NVML sequence).

    python3 tools/device/check_counters.py --out $OUT/counters.json [--seconds 2]

Needs torch with CUDA and NVML; about 10 s of GPU time. Where GPM is refused the JSON says why, and
the columns are null: that outcome is a result too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specjoule import gpu  # noqa: E402


def _window(meter, torch, fn, seconds: float) -> dict:
    meter.reset_window()
    meter.start_sampling()
    time.sleep(0.3)
    meter.mark_window_start()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        if fn is not None:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        else:
            time.sleep(0.05)
    meter.mark_window_end()
    time.sleep(0.2)
    meter.stop_sampling()
    res = meter.result().columns()
    tl = meter.timeline().to_pylist()
    keep = (
        "t_rel_s",
        "power_w",
        "energy_mj",
        "sm_clock_mhz",
        "gpu_util_pct",
        "mem_util_pct",
        "in_window",
        "dram_bw_util_pct",
        "sm_active_pct",
        "tensor_active_pct",
    )
    return {
        "result": {k: v for k, v in res.items() if k not in ("gpu_names",)},
        "timeline": [{k: r[k] for k in keep} for r in tl],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    lease = gpu.acquire("cuda")
    import torch

    from specjoule.meter.nvml import NvmlMeter

    meter = NvmlMeter()
    meter.open()
    out: dict = {
        "gpm_reason_at_open": meter._gpm_reason,
        "devices": [d.__dict__ for d in meter.devices],
        "driver": meter.driver,
    }
    try:
        meter.measure_idle(0)
        x = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn_like(a)
        c = torch.empty_like(a)
        torch.cuda.synchronize()
        out["idle"] = _window(meter, torch, None, args.seconds)
        out["copy"] = _window(meter, torch, lambda: y.copy_(x), args.seconds)
        out["matmul"] = _window(meter, torch, lambda: torch.matmul(a, b, out=c), args.seconds)
    finally:
        meter.close()
        lease.release()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    for name in ("idle", "copy", "matmul"):
        r = out[name]["result"]
        print(
            f"{name:7s} energy {r['energy_j']:.1f} J  source {r['counters_source']}  dram {r['dram_bw_util_pct']}  "
            f"sm {r['sm_active_pct']}  tensor {r['tensor_active_pct']}  mem_busy {r['mem_busy_pct']}  "
            f"reason {r['counters_reason']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
