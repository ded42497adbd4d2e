"""CRAFTED RECORDS for the analysis tests — hand-built, not measurements.

Identities come from the real cell table of a validated config; measured columns are simple,
internally consistent numbers (energy = power × window, counters that add up, one GPU per
campaign). Every record goes through the pipeline's own schema path (records.derive →
records.to_table → records.write_record), one Parquet per cell, so the analysis reads exactly what
a runner would have written. ``mutate`` lets a test inject one violation into one cell.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specjoule import cells, config, records, runner

GPU_CONFIG: dict[str, Any] = {
    "name": "crafted",
    "device": "cuda",
    "models": {"p": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
                     "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}}},
    "schemes": {"baseline": {"method": "baseline"},
                "syn": {"method": "draft_model", "k": 4, "synthetic": True},
                "ngram": {"method": "ngram", "k": 3}},
    "acceptance": {"L2": {"minvar": 2.0}, "L4": {"geometric": 4.0}},
    "batch_sizes": [8],
    "corpora": {"code": {"source": "random"}},
    "seeds": [0, 1, 2],
    "cuda_graphs": [True],
    "workloads": {"closed": {"kind": "closed_batch", "prompt_len": 64, "output_len": 64, "min_window_s": 10},
                  "open": {"kind": "open_loop", "prompt_len": 64, "output_len": 64, "rate": 3.0, "window_s": 30}},
    "meter": "nvml",
}
CONFIG_HASH = "crafted0000hash"
CLOSED = "vllm-p-closed-b8-code-s0-cg1"
OPEN = "vllm-p-open-b8-code-s0-cg1"

Row = dict[str, Any]
Mutation = Callable[[Row], None]


def cell_table(cfg: dict | None = None) -> cells.CellTable:
    return cells.build(config.validate(cfg or GPU_CONFIG))


def _point_energy_factor(cell: cells.Cell) -> float:
    # Speculation at a higher acceptance spends less per token; a fixed shape keeps ratios predictable.
    return {None: 1.0, 2.0: 0.85, 4.0: 0.7}.get(cell.configured_L, 0.95)


def measure(cell: cells.Cell, *, meter: str = "nvml", gpu: str = "GPU-aaaa", host: str = "node01") -> Row:
    """A clean record: every pre-registered check passes on it."""
    wl = cell.spec["workload"]
    closed = wl["kind"] == "closed_batch"
    B, out_len, k = cell.batch_size, wl["output_len"], cell.k or 0
    # Seeds move the points, not the baselines, so ratios differ across seeds (the bootstrap has width).
    seed_jitter = 1.0 + 0.01 * cell.seed if cell.method != "baseline" else 1.0
    repeats = 10 if closed else None
    requests = 10 * B if closed else 90
    committed = requests * out_len
    window = 20.0 if closed else 30.0
    power = 300.0 * _point_energy_factor(cell) * seed_jitter
    row: Row = cell.identity() | {
        "config_hash": CONFIG_HASH, "git_commit": "f" * 40, "version_param": 1,
        "acceptance_mechanism": "vllm_synthetic_rates" if cell.synthetic else ("none" if cell.method == "baseline" else "model"),
        "engine_version": "0.26.0", "hostname": host, "window_s": window,
        "window_start_monotonic": 100.0, "window_end_monotonic": 100.0 + window,
        "warmup_s": 5.0, "cooldown_s": 5.0, "repeats": repeats,
        "meter": meter, "committed_tokens": committed, "prompt_tokens": requests * wl["prompt_len"],
        "requests_completed": requests, "requests_failed": 0,
        "mean_running_requests": float(B) if closed else 6.0, "max_running_requests": float(B),
        "ttft_mean_s": 0.05, "ttft_p50_s": 0.05, "ttft_p99_s": 0.07,
        "tpot_mean_s": 0.010 * _point_energy_factor(cell), "tpot_p50_s": 0.010, "tpot_p99_s": 0.013,
        "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": [],
    }
    if not closed:  # what the load generator records (ADR 0110): on schedule, in a steady state, streamed in time
        n = wl.get("concurrency")  # closed loop: N clients, N running throughout
        sent = int(wl["rate"] * window) if n is None else requests
        row |= {"requests_sent": sent, "realized_request_rate": sent / window, "send_lag_p50_s": 0.0005,
                "send_lag_p99_s": 0.002, "send_lag_max_s": 0.004, "waiting_requests_mean": 0.0, "starved_requests": 0}
        if n is None:
            row |= {"arrival_schedule": "independent", "burstiness": 1.0, "inflight_at_start": 6, "inflight_at_end": 7,
                    "mean_inflight": 6.0, "running_requests_segments": [6.0, 5.8, 6.2, 6.0]}
        else:
            row |= {"inflight_at_start": n, "inflight_at_end": n, "mean_inflight": n - 0.001,
                    "running_requests_segments": [float(n)] * 4, "mean_running_requests": float(n)}
    if meter != "none":
        row |= {
            "gpu_names": ["NVIDIA H200"], "gpu_uuids": [gpu], "gpu_uuid": gpu, "power_limit_w": 700.0,
            "energy_j": power * window, "energy_j_per_gpu": [power * window], "mean_power_w": power,
            "idle_power_w": 80.0, "energy_counter_updates": int(window * 10), "timeline_samples": int(window * 10),
            "timeline_hz": 10.0, "power_min_w": power * 0.9, "power_max_w": power * 1.1,
            "max_temperature_c": 62.0, "throttle_reasons_mask": 0, "other_gpu_processes": 0,
        }
    # The effective engine configuration as the vLLM adapter records it (ADR 0029): every arm the
    # baseline's, apart from the speculative_* keys intrinsic to the arm.
    engine_cfg: dict[str, Any] = {"async_scheduling": True, "max_num_seqs": B, "cudagraph_mode": "FULL_AND_PIECEWISE",
                                  "cudagraph_capture_sizes": [1, 2, 4, 8], "model_runner": "v2",
                                  "speculative": cell.method != "baseline"}
    if cell.method != "baseline":
        engine_cfg |= {"speculative_method": cell.method, "speculative_num_tokens": k}
    row |= runner.engine_config_columns(engine_cfg)
    if cell.method != "baseline":
        drafts = committed // 3
        if cell.acceptance_rates is not None:
            per_pos = [round(drafts * r) for r in cell.acceptance_rates]
            dtok = drafts * k
        else:  # ngram proposes fewer than k when its lookup matches short
            per_pos = [drafts // 2, drafts // 4, 0][:k]
            dtok = drafts * 2
        row |= {"drafts": drafts, "draft_tokens": dtok, "accepted_tokens": sum(per_pos),
                "accepted_per_position": per_pos}
    return row


def write_campaigns(root: Path, *, cfg: dict | None = None, mutate: dict[tuple[str, str], Mutation] | None = None,
                    drop: set[tuple[str, str]] | None = None, meter: str = "nvml") -> list[Path]:
    """Write one record per cell under ``root`` (pipeline layout); returns the paths written.

    ``mutate[(campaign_id, cell_name)]`` edits that cell's row before it is derived and written;
    ``drop`` leaves cells out (as if their job never produced a record)."""
    mutate, drop = mutate or {}, drop or set()
    config_key = (json.dumps(cfg or GPU_CONFIG, sort_keys=True, default=repr), meter, os.getcwd())
    paths = []
    for cell in cell_table(cfg):
        key = (cell.campaign_id, cell.name)
        if key in drop:
            continue
        path = root / cell.record_path
        clean = _CLEAN_RECORDS.get((config_key, key)) if key not in mutate else None
        if clean is not None:
            _write_again(clean, path)
        else:
            row = measure(cell, meter=meter)
            if key in mutate:
                mutate[key](row)
            row = records.derive(row)
            encoded = write_row(row, path)
            if key not in mutate:
                _CLEAN_RECORDS[(config_key, key)] = encoded
        paths.append(path)
    return paths


# A clean (unmutated) cell's record as write_record wrote it, by (config, meter, working directory) and cell:
# measure, derive and write_record are pure, so a later write of the same clean cell in this process writes these
# bytes again (through the same atomic_path) instead of encoding the same row once more: 0.55 ms a record instead of
# 5.0 (ADR 0257, addendum 1). A mutated cell is always derived and written anew.
_CLEAN_RECORDS: dict[tuple[tuple[str, str, str], tuple[str, str]], bytes] = {}

# A derived row's record as write_record wrote it, by the row's content (repr of its items in key order: 1, 1.0
# and True are told apart). write_record's bytes are a function of the row alone (to_table, then the one Parquet
# writer with fixed options; nothing of the path, the time or the host goes in), so a later row equal to one
# written before gets those bytes again through the same atomic_path: the replicated campaigns of ten tests write
# the same rows again and again (about a third of write_replicated's writes a run), and a test's effect leaves most
# of its cells as another test's (ADR 0257, addendum 3).
_WRITTEN_ROWS: dict[str, bytes] = {}


def write_row(row: Row, path: Path) -> bytes:
    """``records.write_record(row, path)``, or the bytes it wrote for an equal row before; returns the bytes."""
    key = repr(sorted(row.items()))
    encoded = _WRITTEN_ROWS.get(key)
    if encoded is None:
        records.write_record(row, path)
        encoded = _WRITTEN_ROWS[key] = path.read_bytes()
    else:
        _write_again(encoded, path)
    return encoded


def _write_again(encoded: bytes, path: Path) -> None:
    """A record's bytes written before, written to ``path`` as write_record writes (atomically, through atomic_path)."""
    with records.atomic_path(path) as tmp:
        Path(tmp).write_bytes(encoded)


def setter(**values: Any) -> Mutation:
    def apply(row: Row) -> None:
        row.update(values)
    return apply


# ----------------------------------------------------------------------------------------------
# Replicates and unsupported cells (issue 17, ADR 0063, 0064), named as the wave-2 cell table names them.

# (row, cell, engine replicate, window) -> None: edit a replicate's row before it is derived and written.
ReplicateEffect = Callable[[Row, cells.Cell, int, int], None]


def scale_energy(row: Row, factor: float) -> None:
    """Energy (and so power and mJ/token) times ``factor``: what a noisier or hungrier window looks like."""
    row["energy_j"] = row["energy_j"] * factor
    row["energy_j_per_gpu"] = [row["energy_j"]]
    row["mean_power_w"] = row["mean_power_w"] * factor


def replicated_config(cfg: dict | None = None, *, windows: int = 1, engine_replicates: int = 1) -> dict:
    """``cfg`` with replicate counts; windows share one warm engine, so they need shared engines (ADR 0064)."""
    out = {**(cfg or GPU_CONFIG), "windows": windows, "engine_replicates": engine_replicates}
    if windows > 1:
        out["protocol"] = {**out.get("protocol", {}), "share_engines": True}
    return out


def write_replicated(root: Path, *, windows: int = 1, engine_replicates: int = 1, cfg: dict | None = None,
                     effect: ReplicateEffect | None = None, unsupported: set[str] | None = None,
                     meter: str = "nvml") -> list[Path]:
    """One clean record per cell of the real cell table of ``cfg`` with ``windows`` and ``engine_replicates``
    (window w >= 1 is cell ``<name>--w<w>``, replicate r >= 1 campaign ``<campaign>-r<r>``), under ``root``.
    ``effect(row, cell, r, w)`` edits a measured row; ``unsupported``: point names (without window suffix)
    written as unsupported records, as the runner writes them when the engine refuses the cell."""
    paths = []
    for cell in cell_table(replicated_config(cfg, windows=windows, engine_replicates=engine_replicates)):
        base = cell.name.removesuffix(f"--w{cell.window_index}") if cell.window_index else cell.name
        if unsupported and base in unsupported:
            row = cell.identity() | {"config_hash": CONFIG_HASH, "git_commit": "f" * 40, "hostname": "node01",
                                     "status": "unsupported",
                                     "unsupported_reason": "engine: this scheme is not supported (crafted)"}
        else:
            row = measure(cell, meter=meter) | {"status": "measured"}
            if effect:
                effect(row, cell, cell.engine_replicate, cell.window_index)
        row = records.derive(row)
        path = root / cell.record_path
        write_row(row, path)
        paths.append(path)
    return paths


def frame_campaigns(cfg: dict | None = None, *, mutate: dict[tuple[str, str], Mutation] | None = None,
                    drop: set[tuple[str, str]] | None = None, meter: str = "nvml"):
    """The records write_campaigns would write (same ``mutate`` and ``drop``), as the analysis reads them
    (record columns and record_path), without the files: through records.derive and records.to_table, so the
    same schema path and validation (tests/test_check_thresholds.py compares the two)."""
    import polars as pl

    mutate, drop = mutate or {}, drop or set()
    rows, paths = [], []
    for cell in cell_table(cfg):
        key = (cell.campaign_id, cell.name)
        if key in drop:
            continue
        row = measure(cell, meter=meter)
        if key in mutate:
            mutate[key](row)
        rows.append(records.derive(row))
        paths.append(cell.record_path)
    return pl.from_arrow(records.to_table(rows)).with_columns(pl.Series("record_path", paths))
