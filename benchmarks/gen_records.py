"""Write realistic cell records for the analysis benchmark: one Parquet per cell, as the pipeline does.

The grid is the paper's scale — 11 model pairs × 6 schemes (baseline, ngram, draft_model, eagle3,
mtp, dflash) × 7 batch sizes × 5 corpora × 3 seeds × 2 graph modes = 13,860 cells — expanded by the
real cell table (specjoule.cells.build), so identity columns, campaign ids and paths are the
pipeline's own. Measured columns come from a small roofline model of an H200 (weight read vs
tokens per verification, drafter cost, power between idle and the limit) with seeded noise, and go
through records.derive / records.to_table / records.write_atomic like a runner's record.

A few cells carry an injected violation (``--violations``, default 0.2 %: HW thermal slowdown,
90 °C, a failed request, another process on the GPU) so the checks have something to find.

    .venv/bin/python benchmarks/gen_records.py --out /tmp/specjoule-bench      # 13,860 records
    .venv/bin/python benchmarks/bench_analysis.py --records /tmp/specjoule-bench
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import math
import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specjoule import cells as _cells  # noqa: E402
from specjoule import config as _config  # noqa: E402
from specjoule import records  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_paper_grid import grid  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# Mean accepted tokens per verification, by method (before the corpus factor), and drafter cost
# per speculation round in seconds.
ACCEPT = {"ngram": 0.55, "draft_model": 1.8, "eagle3": 2.6, "mtp": 0.75, "dflash": 3.6}
DRAFT_S = {"ngram": 0.00008, "draft_model": 0.00032, "eagle3": 0.00014, "mtp": 0.00020, "dflash": 0.00055}
CORPUS_FACTOR = [1.0, 0.55, 0.8, 0.7, 0.62]  # code, conversation, long docs, news en, news rm
WEIGHT_READ_S = 6.2e9 / 4.4e12  # 3B bf16 weights over H200 HBM
S_PER_TOKEN_FLOP = 2 * 3.1e9 / 650e12
GRAPH_OVERHEAD_S = {True: 0.00025, False: 0.0021}
POWER_LIMIT_W = 700.0
FORBIDDEN = [0x40, 0x8, 0x20, 0x80]


def grid_config(pairs: int, closing: bool) -> dict:
    """The paper-scale grid of benchmarks/gen_paper_grid.py, validated."""
    return _config.validate(grid(pairs, [1, 2, 4, 8, 16, 32, 64], 5, 3, closing))


def _rng(*parts: object) -> random.Random:
    return random.Random(hashlib.sha1(":".join(map(str, parts)).encode()).hexdigest())


def measure(cell: _cells.Cell, config_hash: str, violation_rate: float) -> dict:
    """One cell's record: a roofline step model plus noise, deterministic per cell id."""
    r = _rng(cell.campaign_id, cell.name)  # cell_id is content-addressed: equal across identical pairs
    camp = _rng(cell.campaign_id)
    corpus_i = ["code", "conversation", "longdoc", "news_en", "news_rm"].index(cell.corpus)
    B, out_len, prompt_len = cell.batch_size, cell.spec["workload"]["output_len"], cell.spec["workload"]["prompt_len"]
    k = cell.k or 0
    spec = cell.method != "baseline"
    a = min(k, ACCEPT.get(cell.method, 0.0) * CORPUS_FACTOR[corpus_i] * r.uniform(0.93, 1.07)) if spec else 0.0
    # Tokens per forward pass and step time: max(weight read, arithmetic) + launch overhead.
    T = B * (k + 1) if spec else B
    t_step = max(WEIGHT_READ_S, T * S_PER_TOKEN_FLOP) + GRAPH_OVERHEAD_S[cell.cuda_graphs]
    t_round = t_step + (DRAFT_S.get(cell.method, 0.0) * (k if cell.method in ("draft_model", "eagle3") else 1))
    steps = math.ceil(out_len / (1 + a))
    prefill_s = WEIGHT_READ_S + B * prompt_len * S_PER_TOKEN_FLOP
    gen_s = (prefill_s + steps * t_round) * r.uniform(0.995, 1.005) * camp.uniform(0.98, 1.02)
    repeats = max(1, math.ceil(20.0 / gen_s))
    window = repeats * gen_s
    idle = 75.0 + camp.uniform(-4, 4)
    util = min(1.0, 0.30 + 0.55 * min(1.0, T / 180.0) + (0.1 if cell.cuda_graphs else 0.0))
    power = idle + (POWER_LIMIT_W - 15 - idle) * util * r.uniform(0.98, 1.02)
    energy = power * window
    committed = repeats * B * out_len
    drafts = repeats * B * steps if spec else 0
    per_draft = k * (0.72 if cell.method == "ngram" else 1.0)
    draft_tokens = int(drafts * per_draft)
    accepted = min(draft_tokens, int(round(drafts * a)))
    per_pos = None
    if spec:
        left, per_pos = accepted, []
        for i in range(k):
            take = left if i == k - 1 else min(left, int(round(drafts * max(0.0, min(1.0, a - i)))))
            per_pos.append(take)
            left -= take
    gpu = camp.randrange(8)
    host = f"gh{camp.randrange(40):03d}"
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC) + dt.timedelta(
        seconds=camp.randrange(10**6) + 120 * cell.run_order_index
    )
    row = cell.identity() | {
        "config_hash": config_hash,
        "git_commit": "0" * 40,
        "version_param": 1,
        "acceptance_mechanism": "model" if spec else "none",
        "corpus_pool_hash": hashlib.sha1(cell.corpus.encode()).hexdigest()[:16],
        "engine_version": "0.26.0",
        "torch_version": "2.11.0+cu130",
        "cuda_version": "13.0",
        "driver_version": "580.105.08",
        "gpu_names": ["NVIDIA H200"],
        "gpu_uuids": [f"GPU-{host}-{gpu}"],
        "gpu_uuid": f"GPU-{host}-{gpu}",
        "power_limit_w": POWER_LIMIT_W,
        "hostname": host,
        "slurm_job_id": str(4_000_000 + camp.randrange(10**5)),
        "cuda_visible_devices": str(gpu),
        "python_version": "3.12.3",
        "engine_start_s": r.uniform(55, 75),
        "window_start": start,
        "window_end": start + dt.timedelta(seconds=window),
        "window_start_monotonic": 1000.0 + 120 * cell.run_order_index,
        "window_end_monotonic": 1000.0 + 120 * cell.run_order_index + window,
        "window_s": window,
        "warmup_s": 5.0,
        "cooldown_s": 5.0,
        "repeats": repeats,
        "meter": "nvml",
        "energy_j": energy,
        "energy_j_per_gpu": [energy],
        "mean_power_w": power,
        "idle_power_w": idle,
        "energy_counter_updates": int(window / 0.1),
        "timeline_samples": int(window * 10),
        "timeline_hz": 10.0,
        "power_min_w": power * 0.9,
        "power_max_w": min(POWER_LIMIT_W, power * 1.06),
        "max_temperature_c": 48 + 22 * util + r.uniform(-2, 2),
        "throttle_reasons_mask": 0x4 if util > 0.95 else 0,
        "other_gpu_processes": 0,
        "committed_tokens": committed,
        "prompt_tokens": repeats * B * prompt_len,
        "requests_completed": repeats * B,
        "requests_failed": 0,
        "drafts": drafts if spec else None,
        "draft_tokens": draft_tokens if spec else None,
        "accepted_tokens": accepted if spec else None,
        "accepted_per_position": per_pos,
        "mean_running_requests": float(B),
        "max_running_requests": float(B),
        "ttft_mean_s": prefill_s,
        "ttft_p50_s": prefill_s,
        "ttft_p99_s": prefill_s * 1.1,
        "tpot_mean_s": steps * t_round / out_len,
        "tpot_p50_s": steps * t_round / out_len,
        "tpot_p99_s": t_round * 1.2,
    }
    if r.random() < violation_rate:
        kind = r.randrange(4)
        if kind == 0:
            row["throttle_reasons_mask"] = FORBIDDEN[r.randrange(4)]
        elif kind == 1:
            row["max_temperature_c"] = 90.0
        elif kind == 2:
            row["requests_failed"] = 1
        else:
            row["other_gpu_processes"] = 1
    return records.derive(row)


def _write(args: tuple[list[dict], list[str]]) -> int:
    rows, paths = args
    table = records.to_table(rows)
    for i, p in enumerate(paths):
        records.write_atomic(table.slice(i, 1), p)
    return len(paths)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/specjoule-bench", help="root; records go to OUT/results/cells/...")
    ap.add_argument("--pairs", type=int, default=11)
    ap.add_argument("--closing-baseline", action="store_true", help="add a closing baseline to every campaign")
    ap.add_argument("--violations", type=float, default=0.002, help="share of cells with an injected violation")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    cfg = grid_config(a.pairs, a.closing_baseline)
    h = _config.config_hash(cfg)
    table = _cells.build(cfg)
    out = Path(a.out)
    rows = [measure(c, h, a.violations) for c in table]
    paths = [str(out / c.record_path) for c in table]
    for p in {str(Path(p).parent) for p in paths}:
        Path(p).mkdir(parents=True, exist_ok=True)
    n = 500
    chunks = [(rows[i : i + n], paths[i : i + n]) for i in range(0, len(rows), n)]
    with mp.Pool(a.jobs) as pool:
        written = sum(pool.imap_unordered(_write, chunks))
    (out / "config_hash").write_text(h + "\n")
    (out / "paths.txt").write_text("\n".join(paths) + "\n")
    print(
        f"{written} records in {len(table.campaigns)} campaigns under {out / 'results/cells'} "
        f"(config hash {h}) in {time.perf_counter() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
