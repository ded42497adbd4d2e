"""Run one cell (or only the meter) on a GPU machine and print what the record says.

    python scripts/smoke_cell.py CONFIG CELL_NAME [--campaign ID] [--out DIR]
    python scripts/smoke_cell.py --meter-only [--seconds 10]   # NVML meter around a torch matmul load

Prints energy, counters, timeline rate and realized vs configured L, so the NVML happy path and the
engine's counters can be checked by eye on the GPU validation node.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def summarize(row: dict, timeline_path: Path | None) -> str:
    keys = [
        "cell_name",
        "method",
        "k",
        "acceptance_mechanism",
        "meter",
        "gpu_names",
        "gpu_uuid",
        "driver_version",
        "power_limit_w",
        "engine_version",
        "engine_start_s",
        "window_s",
        "repeats",
        "energy_j",
        "energy_j_per_gpu",
        "mean_power_w",
        "idle_power_w",
        "energy_counter_updates",
        "timeline_samples",
        "timeline_hz",
        "power_min_w",
        "power_max_w",
        "max_temperature_c",
        "throttle_reasons_mask",
        "other_gpu_processes",
        "committed_tokens",
        "prompt_tokens",
        "requests_completed",
        "requests_failed",
        "drafts",
        "draft_tokens",
        "accepted_tokens",
        "accepted_per_position",
        "mean_running_requests",
        "mj_per_committed_token",
        "tokens_per_s",
        "configured_L",
        "realized_L",
        "ttft_p50_s",
        "tpot_p50_s",
        "latency_source",
    ]
    lines = [f"{k:>24}: {_fmt(row.get(k))}" for k in keys]
    if row.get("configured_L") and row.get("realized_L"):
        lines.append(f"{'realized - configured L':>24}: {row['realized_L'] - row['configured_L']:+.4f}")
    if timeline_path and timeline_path.exists():
        import pyarrow.parquet as pq

        tl = pq.read_table(timeline_path)
        lines.append(f"{'timeline rows':>24}: {tl.num_rows} ({sum(tl.column('in_window').to_pylist())} in window)")
    return "\n".join(lines)


def meter_only(seconds: float) -> int:
    """The NVML meter around a known load: idle, then bf16 matmuls for `seconds`."""
    import torch

    from specjoule.meter import make_meter

    meter = make_meter("nvml", "cuda")
    meter.open()
    try:
        idle = meter.measure_idle(3.0)
        meter.start_sampling()
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t0 = meter.mark_window_start()
        n = 0
        while time.monotonic() - t0 < seconds:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
            n += 20
        t1 = meter.mark_window_end()
        time.sleep(0.5)
        meter.stop_sampling()
        res = meter.result()
        tl = meter.timeline()
    finally:
        meter.close()
    flops = 2 * 8192**3 * n
    print(f"idle {idle:.1f} W; window {t1 - t0:.2f} s; {n} matmuls, {flops / (t1 - t0) / 1e12:.0f} TFLOP/s")
    for k, v in res.columns().items():
        print(f"{k:>24}: {_fmt(v)}")
    print(f"{'J per PFLOP':>24}: {res.energy_j / (flops / 1e15):.1f}")
    in_win = [r for r in tl.to_pylist() if r["in_window"]]
    powers = [r["power_w"] for r in in_win if r["power_w"] is not None]
    print(
        f"{'timeline rows':>24}: {tl.num_rows} ({len(in_win)} in window), mean sampled power "
        f"{sum(powers) / len(powers):.1f} W vs counter {res.energy_j / (t1 - t0):.1f} W"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="?")
    ap.add_argument("cell", nargs="?", help="cell name, e.g. baseline--open or draft--L3")
    ap.add_argument("--campaign", default=None, help="campaign id when the config has several")
    ap.add_argument("--out", default="results/smoke", help="where the record, timeline and log go")
    ap.add_argument("--server", action="store_true", help="closed batch through `vllm serve` instead of offline LLM")
    ap.add_argument("--meter-only", action="store_true")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    if args.meter_only:
        return meter_only(args.seconds)
    if not args.config or not args.cell:
        ap.error("CONFIG and CELL are required (or --meter-only)")

    from specjoule import cells, config, records, runner

    cfg = config.load(args.config)
    table = cells.build(cfg)
    found = [c for c in table if c.name == args.cell and (args.campaign is None or c.campaign_id == args.campaign)]
    if len(found) != 1:
        names = sorted({f"{c.campaign_id}/{c.name}" for c in table})
        ap.error(f"{len(found)} cells match {args.cell!r}; choose one of: {', '.join(names[:40])}")
    cell = found[0]
    out = Path(args.out) / cell.campaign_id
    rec, tl, log = out / f"{cell.name}.parquet", out / f"{cell.name}.timeline.parquet", out / f"{cell.name}.log"
    t0 = time.monotonic()
    try:
        runner.run_cell(
            cell,
            rec,
            tl,
            log_path=log,
            config_hash=config.config_hash(cfg),
            version_param=cfg["version"],
            force_server=args.server,
        )
    except runner.CellInterrupted as exc:
        return 128 + exc.signum
    row = records.read_records([rec]).to_pylist()[0]
    print(summarize(row, tl))
    print(f"{'cell wall time':>24}: {time.monotonic() - t0:.1f} s  (log: {log})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
