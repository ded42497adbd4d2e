"""FIXTURE DATA for the figure and report tests — synthetic, not measurements.

The tables have exactly the columns of the pipeline's contracts (records.RECORD_FIELDS, the checks
table, curves.parquet, timelines), and identities come from the real cell table of a real, validated
config, so the figures meet the shapes they will meet in production. The numbers follow a made-up
but physically shaped model: the blog's H100 synthetic sweep at batch 1 (its published mJ/token),
savings that shrink with batch and turn into losses once batch × (k+1) passes the balance point,
TBT that falls with acceptance length, graphs-off runs that flatter speculation. Two scenarios:

* ``gpu``  — a 48-campaign grid (2 workloads × graphs on/off × 3 batches × 2 corpora × 2 seeds) on
  two H200s (seed 0 on one, seed 1 on the other), NVML meter, 10 Hz timelines, one campaign with a
  failed baseline-drift check (in the curves with ``failed_checks``, as derive writes it under
  ``allow_failed_checks: true``) and one flagged cell;
* ``cpu``  — the embedded CPU demo's cells with ``meter: none``: energy null everywhere, empty
  timelines, like ``make demo`` produces;
* ``engines`` — FIXTURE, not a measurement: vLLM and SGLang on one H200 (the same board for every
  cell) at matched synthetic acceptance, closed batches B = 1 and 32, two seeds. SGLang's made-up
  numbers differ from vLLM's (lower baseline energy, a slightly smaller saving) so the two curves
  are visibly apart; its cells carry ``acceptance_mechanism = sglang_simulate_acc_len``. One SGLang
  point (``ENGINES_UNMATCHED``) has no record, so one vLLM point has no partner. The real SGLang
  records come from the H200 later.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from specjoule import cells as cells_mod
from specjoule import config as config_mod
from specjoule import records
from specjoule.analysis import derive

REPO = Path(__file__).resolve().parent.parent

# The blog's published H100 PCIe numbers (mJ per committed token), used verbatim at batch 1.
BLOG_BASELINE_MJ = 328.744
BLOG_MJ = {("minvar", 1.0): 294.855, ("minvar", 2.0): 267.035, ("minvar", 3.0): 249.929,
           ("minvar", 4.0): 243.225, ("minvar", 5.0): 237.746, ("geometric", 2.0): 263.631,
           ("geometric", 3.0): 252.725, ("geometric", 4.0): 243.737, ("geometric", 5.0): 235.296}

GPU_CONFIG: dict[str, Any] = {
    "name": "fixture-h200",
    "device": "cuda",
    "engines": ["vllm"],
    "models": {"qwen3b": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
                          "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}}},
    "schemes": {"baseline": {"method": "baseline"},
                "ngram": {"method": "ngram", "k": 3},
                "draft": {"method": "draft_model", "k": 5},
                "syn": {"method": "draft_model", "k": 5, "synthetic": True}},
    "acceptance": {**{f"mv{L}": {"minvar": float(L)} for L in range(1, 6)},
                   **{f"geo{L}": {"geometric": float(L)} for L in range(2, 6)}},
    "batch_sizes": [1, 8, 64],
    "corpora": {"code": {"source": "builtin", "name": "humaneval"}, "chat": {"source": "random"}},
    "seeds": [0, 1],
    "cuda_graphs": [True, False],
    "workloads": {"closed": {"kind": "closed_batch", "prompt_len": 512, "output_len": 256},
                  "open": {"kind": "open_loop", "prompt_len": 512, "output_len": 256, "rate": 3.0,
                           "warmup_s": 60, "window_s": 180, "cooldown_s": 45}},
    "meter": "nvml",
    # As a user who wants to see a failed campaign's numbers would set it: derive then keeps the
    # campaign's points, listing the failure in `failed_checks` (figures leave them out).
    "checks": {"allow_failed_checks": True, "min_window_s": 1.0},
    "report": {"tbt_targets_ms": [10, 25], "balance_point_op_per_byte": 206},
}

ENGINES_CONFIG: dict[str, Any] = {
    "name": "fixture-engines",
    "device": "cuda",
    "engines": ["vllm", "sglang"],
    "models": {"qwen3b": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
                          "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}}},
    "schemes": {"baseline": {"method": "baseline"},
                "syn": {"method": "draft_model", "k": 5, "synthetic": True, "acceptance": ["mv1", "mv3", "mv5"]}},
    "acceptance": {"mv1": {"minvar": 1.0}, "mv3": {"minvar": 3.0}, "mv5": {"minvar": 5.0}},
    "batch_sizes": [1, 32],
    "corpora": {"random": {"source": "random"}},
    "seeds": [0, 1],
    "cuda_graphs": [True],
    "workloads": {"closed": {"kind": "closed_batch", "prompt_len": 512, "output_len": 256}},
    "meter": "nvml",
    "checks": {"allow_failed_checks": True, "min_window_s": 1.0},
    "report": {"tbt_targets_ms": [10, 25], "balance_point_op_per_byte": 206},
}
# The SGLang point left without a record: its vLLM twin must not appear in the engine comparison.
ENGINES_UNMATCHED = ("sglang-qwen3b-closed-b32-random-s1-cg1", "syn--mv5")
# Made-up engine differences (FIXTURE): SGLang's baseline costs 6 % less energy per token and keeps
# 3 % more of it under speculation; its simulated accept length lands a little under the configured L.
SGLANG_BASELINE_SCALE = 0.94
SGLANG_RATIO_SCALE = 1.03
ENGINE_VERSIONS = {"vllm": "0.26.0", "sglang": "0.5.17"}
MECHANISMS = {"vllm": "vllm_synthetic_rates", "sglang": "sglang_simulate_acc_len"}

GPUS = {0: ("NVIDIA H200", "GPU-6f1c2a7e-0d9b-4c55-a1f0-3b2e9d4c7a10"),
        1: ("NVIDIA H200", "GPU-91a0b3c4-77de-4e21-9c3a-58f6a2b1d0e4")}
FAILED_CAMPAIGN = "vllm-qwen3b-closed-b64-chat-s1-cg1"
CONCURRENCY_DRIFT_CAMPAIGN = "vllm-qwen3b-open-b8-chat-s0-cg1"
FLAGGED_CELL = ("vllm-qwen3b-open-b8-code-s0-cg1", "ngram")
MODEL_L = {("ngram", "code"): 2.3, ("ngram", "chat"): 1.45, ("draft", "code"): 3.6, ("draft", "chat"): 2.7}

# --- wave-2 columns (CONTEXT.md): the lead appends them to records.RECORD_FIELDS; until a column is
# there the fixture adds it beside the record schema with this type, so the report meets both shapes.
WAVE2_COLUMNS: dict[str, pl.DataType] = {
    "status": pl.String, "unsupported_reason": pl.String, "window_index": pl.Int64, "engine_replicate": pl.Int64,
    "verify_width": pl.Float64, "drafted_per_committed": pl.Float64, "draft_passes_per_round": pl.Int64,
    "target_architecture": pl.String, "target_family": pl.String, "target_moe": pl.Boolean,
    "draft_architecture": pl.String, "host_cpu_model": pl.String, "host_load_1m": pl.Float64,
    "gpu_busy_fraction": pl.Float64,
}
# Per-pass and shape columns the curves carry per point (derive may add them; the report falls back
# on the records by cell_id where it does not).
WAVE2_CURVE_COLUMNS = ("window_index", "engine_replicate", "verify_width", "drafted_per_committed",
                       "draft_passes_per_round", "target_family", "target_moe")
# Per request-step (ADR 0256) and their decode-step bounds (its addendum 2): derive writes them from 2026-12-07 on
# (the bounds from 2026-12-07e); curves derived before lack them.
STEP_CURVE_COLUMNS = ("drafted_step_share", "committed_per_step", "drafted_decode_share_low", "drafted_decode_share_high")
# Drafter forward passes per round, by scheme (CONTEXT.md): heads and a draft model one per drafted
# token, block drafters one, n-gram none on the GPU (host side).
DRAFT_PASSES = {"draft_model": lambda k: k, "eagle3": lambda k: k, "mtp": lambda k: k, "dflash": lambda k: 1,
                "dspark": lambda k: 1, "ngram": lambda k: 0}
DRAFT_ARCHITECTURES = {"eagle3": "LlamaForCausalLMEagle3", "mtp": None, "dflash": "DFlashDraftModel",
                       "dspark": "DSparkDraftModel"}

# --- scenario `schemes` (FIXTURE, made-up numbers): the paper's schemes on three attention families,
# both engines, B ∈ {1, 32}, graphs on and off, 2 seeds × 2 windows, and a second engine replicate of
# the vLLM Qwen3-8B campaigns. Shapes are the public models' architectures; nothing here was measured.
MODEL_SHAPES = {  # model pair → (target architecture, family, MoE)
    "qwen3_8b": ("Qwen3ForCausalLM", "gqa", False),
    "qwen3_30b_a3b": ("Qwen3MoeForCausalLM", "gqa", True),
    "glm47_flash": ("Glm4MoeLiteForCausalLM", "mla", True),
    "qwen36_27b": ("Qwen3_5ForConditionalGeneration", "gated_deltanet", False),
}
SCHEMES_CONFIG: dict[str, Any] = {
    "name": "fixture-schemes",
    "device": "cuda",
    "engines": ["vllm", "sglang"],
    "models": {name: {"target": {"model": f"config/models/{name}", "load_format": "dummy"}} for name in MODEL_SHAPES},
    "schemes": {"baseline": {"method": "baseline"},
                "eagle3": {"method": "eagle3", "k": 3, "synthetic": True, "drafter": "fixture/eagle3",
                           "acceptance": ["L1_5", "L2_5", "L3_5"]},
                "mtp": {"method": "mtp", "k": 3, "synthetic": True, "drafter": "fixture/mtp",
                        "acceptance": ["L1_5", "L2_5", "L3_5"]},
                "dflash": {"method": "dflash", "k": 7, "synthetic": True, "drafter": "fixture/dflash",
                           "acceptance": ["L2_5", "L4", "L6"]},
                # SGLang realises DSpark acceptance only at whole L (ADR 0076)
                "dspark": {"method": "dspark", "k": 7, "synthetic": True, "drafter": "fixture/dspark",
                           "acceptance": ["L2", "L4", "L6"]},
                "ngram": {"method": "ngram", "k": 3}},
    "acceptance": {"L1_5": {"minvar": 1.5}, "L2": {"minvar": 2.0}, "L2_5": {"minvar": 2.5}, "L3_5": {"minvar": 3.5},
                   "L4": {"minvar": 4.0}, "L6": {"minvar": 6.0}},
    "batch_sizes": [1, 32],
    "corpora": {"code": {"source": "builtin", "name": "humaneval"}},
    "seeds": [0, 1],
    "cuda_graphs": [True, False],
    "workloads": {"closed": {"kind": "closed_batch", "prompt_len": 512, "output_len": 256}},
    "meter": "nvml",
    "checks": {"allow_failed_checks": True, "min_window_s": 1.0},
    "report": {"tbt_targets_ms": [10, 25], "balance_point_op_per_byte": 163},
}
SCHEMES_WINDOWS = 2
# (engine, model pair) whose graphs-on campaigns ran a second engine replicate (campaign id -r1).
SCHEMES_REPLICATED = {("vllm", "qwen3_8b")}
# FIXTURE reasons, worded like the engines' own errors: cells the runner recorded as unsupported.
SCHEMES_UNSUPPORTED = {
    ("vllm", "qwen3_8b", "mtp"): "Qwen3ForCausalLM has no MTP layers (num_nextn_predict_layers is 0)",
    ("sglang", "qwen3_8b", "mtp"): "Qwen3ForCausalLM has no MTP layers (num_nextn_predict_layers is 0)",
    ("sglang", "glm47_flash", "dspark"): "DSPARK does not support Glm4MoeLiteForCausalLM (MLA attention)",
}
# Planned but never run (no record at all): the matrix must say "not run", not "unsupported".
SCHEMES_NOT_RUN = {("sglang", "qwen36_27b", "dflash")}
SCHEMES_BASE_MJ = {"qwen3_8b": 190.0, "qwen3_30b_a3b": 120.0, "glm47_flash": 150.0, "qwen36_27b": 520.0}
NGRAM_L = 1.62
# Capture bias the made-up physics credits to graphs-off runs (pp of saving): inside the paper's bars.
CAPTURE_BIAS_PP = {False: 7.0, True: 26.0}


@dataclass
class Scenario:
    config: dict
    records: pl.DataFrame
    checks: pl.DataFrame
    curves: pl.DataFrame
    summary: pl.DataFrame
    timeline_paths: list[Path]
    checks_md: str
    variance: pl.DataFrame | None = None


def gpu_config() -> dict:
    return config_mod.validate(GPU_CONFIG)


def engines_config() -> dict:
    return config_mod.validate(ENGINES_CONFIG)


def cpu_config() -> dict:
    return config_mod.load(REPO / "config" / "config.yaml")


def schemes_config() -> dict:
    """FIXTURE: the schemes scenario's model and drafter dirs are made up (its numbers are), so the checks that
    read model dirs at parse time (specjoule.models.check_models, the scheme inputs) are off while its defaults
    are filled in; nothing of it is planned onto an engine."""
    from unittest import mock

    with mock.patch.object(config_mod, "check_models", lambda cfg: None), \
            mock.patch.object(config_mod, "_check_scheme_inputs", lambda *a, **k: None):
        return config_mod.validate(SCHEMES_CONFIG)


# --- the made-up physics ---------------------------------------------------------------------

def _baseline_power_w(batch: int, graphs: bool) -> float:
    return min(650.0, 150 + 70 * math.log2(batch + 1)) * (1.0 if graphs else 0.93)


def _baseline_mj(cell: cells_mod.Cell) -> float:
    """Closed batch: power × TBT / B. Open loop: the blog's arrival-bound load (3 req/s × 256
    tokens at ≈ 252 W gives its 328.7 mJ per committed token)."""
    if cell.workload_kind == "open_loop":
        return BLOG_BASELINE_MJ * (1.0 if cell.cuda_graphs else 1.07)
    base = _tpot(replace(cell, method="baseline"), 1.0)
    return _baseline_power_w(cell.batch_size, cell.cuda_graphs) * base / cell.batch_size * 1000.0


def _ratio(cell: cells_mod.Cell, L: float) -> float:
    """Energy per committed token relative to the paired baseline."""
    if cell.synthetic and cell.batch_size == 1 and cell.workload_kind == "open_loop":
        key = (cell.acceptance_kind, round(cell.configured_L or 0))
        r = BLOG_MJ[key] / BLOG_BASELINE_MJ
    elif cell.method == "ngram":
        r = 0.99 - 0.07 * (L - 1)
    else:
        r = 0.897 - 0.045 * (L - 1)
    # Batching already amortises the weight read: less left for speculation to recover.
    r = 1 - (1 - r) / (1 + 0.25 * math.log2(cell.batch_size))
    # Past the roofline balance point every verified token costs arithmetic time.
    tokens = cell.batch_size * ((cell.k or 0) + 1)
    r *= 1 + 0.28 * max(0.0, math.log2(tokens / 150))
    if not cell.cuda_graphs:
        r -= 0.06  # launch overhead speculation removes, which capture would have removed anyway
    return r


def _tpot(cell: cells_mod.Cell, L: float) -> float:
    base = 0.0105 * (1 + 0.012 * cell.batch_size) * (1.0 if cell.cuda_graphs else 1.3)
    if cell.method == "baseline":
        return base
    cost = 1.03 if cell.method == "ngram" else 1 + 0.09 * (cell.k or 0)
    tokens = cell.batch_size * ((cell.k or 0) + 1)
    return base * cost / L * (1 + 0.2 * max(0.0, math.log2(tokens / 150)))


def _realized_L(cell: cells_mod.Cell, rng: random.Random) -> float | None:
    if cell.method == "baseline":
        return None
    if cell.synthetic:
        low = -0.02 if cell.engine == "sglang" else -0.008
        return cell.configured_L + (rng.uniform(low, 0.004) if cell.configured_L > 1 else 0.0)
    L = MODEL_L[(cell.scheme, cell.corpus)] * (1 - 0.01 * math.log2(cell.batch_size))
    return L + rng.uniform(-0.05, 0.05)


# --- records -----------------------------------------------------------------------------------

def _record(cell: cells_mod.Cell, rng: random.Random, start: datetime, meter: str, *, one_gpu: bool = False) -> dict:
    L = _realized_L(cell, rng)
    sglang = cell.engine == "sglang"
    mj = _baseline_mj(cell) * rng.uniform(0.997, 1.003) * (SGLANG_BASELINE_SCALE if sglang else 1.0)
    if cell.method != "baseline":
        mj *= _ratio(cell, L) * (SGLANG_RATIO_SCALE if sglang else 1.0)
    if (cell.campaign_id == FAILED_CAMPAIGN and cell.role == cells_mod.ROLE_CLOSING):
        mj *= 1.034  # the drift that fails this campaign's pre-registered check
    return _row(cell, rng, start, meter, L=L, mj=mj, gpu=GPUS[0 if one_gpu else cell.seed % 2])


def _row(cell: cells_mod.Cell, rng: random.Random, start: datetime, meter: str, *, L: float | None, mj: float,
         gpu: tuple[str, str], draft_share: float = 1.0, window_index: int = 0, engine_replicate: int = 0) -> dict:
    """One measured record from the made-up physics' L and mJ per committed token (counters, window
    and latency consistent with them). ``draft_share``: drafted tokens per round over k (ngram < 1)."""
    wl = cell.spec["workload"]
    repeats = None
    if cell.workload_kind == "open_loop":
        tpot = _tpot(cell, L or 1.0) * rng.uniform(0.99, 1.01)
        window = wl["window_s"]
        committed = int(wl["rate"] * window * wl["output_len"] * rng.uniform(0.995, 1.005))
        # Arrival-bound load: every arm runs at about the same concurrency (the blog's case);
        # one campaign's arms drift 4 % apart, inside the check's 5 % but worth a caveat.
        concurrency = min(cell.batch_size * 0.9, 7.5)
        if cell.method != "baseline":
            concurrency *= 0.96 if cell.campaign_id == CONCURRENCY_DRIFT_CAMPAIGN else rng.uniform(0.985, 1.0)
    else:
        # Closed batch: B streams at board power P commit B / TBT tokens per second, so
        # TBT = mJ × B / P — energy, latency and power stay consistent (the checks test power).
        power = _baseline_power_w(cell.batch_size, cell.cuda_graphs) * (1.0 if cell.method == "baseline" else 1.12)
        tpot = mj * cell.batch_size / (power * 1000.0)
        repeats = max(2, int(20 / (wl["output_len"] * tpot)))
        committed = cell.batch_size * wl["output_len"] * repeats
        window = wl["output_len"] * tpot * repeats
        concurrency = float(cell.batch_size)
    energy = mj * committed / 1000.0 if meter == "nvml" else None
    drafts = accepted = draft_tokens = None
    per_pos = None
    if cell.method != "baseline":
        drafts = int(committed / L)
        accepted = int(round(drafts * (L - 1)))
        draft_tokens = int(round(drafts * (cell.k or 0) * draft_share))
        per_pos = [int(accepted * w) for w in _position_weights(cell.k or 1)]
        per_pos[0] += accepted - sum(per_pos)  # the counters add up, as the engine's do
    name, uuid = gpu
    row = {
        **cell.identity(),
        "config_hash": "fixture0000hash",
        "git_commit": "fixture",
        "version_param": 1,
        "synthetic": cell.synthetic,
        "acceptance_mechanism": MECHANISMS[cell.engine] if cell.synthetic else ("none" if cell.method == "baseline" else "model"),
        "corpus_pool_hash": f"pool-{cell.corpus}",
        **_environment(cell, gpu),
        # one engine launch per cell here; held = idle 3 s + start + warm-up + window + counters 1 s
        "engine_instance": f"fixture:{cell.cell_id}",
        "device_held_s": (65.0 if cell.device == "cuda" else 40.0) + 4.0 + float(wl["warmup_s"]) + window,
        "window_start": start,
        "window_end": start + timedelta(seconds=window),
        "window_start_monotonic": 1000.0,
        "window_end_monotonic": 1000.0 + window,
        "window_s": window,
        "warmup_s": float(wl["warmup_s"]),
        "cooldown_s": float(wl["cooldown_s"]),
        "repeats": repeats,
        "meter": meter,
        "energy_j": energy,
        "energy_j_per_gpu": [energy] if energy is not None else None,
        "mean_power_w": energy / window if energy is not None else None,
        "idle_power_w": 72.0 if energy is not None else None,
        "energy_counter_updates": int(window * 10) if energy is not None else None,
        "timeline_samples": int(window * 10) if energy is not None else 0,
        "timeline_hz": 10.0 if energy is not None else None,
        "max_temperature_c": 61.0 if energy is not None else None,
        "throttle_reasons_mask": 0 if energy is not None else None,
        "other_gpu_processes": 0 if energy is not None else None,
        "committed_tokens": committed,
        "prompt_tokens": committed * 2,
        "requests_completed": committed // wl["output_len"],
        "requests_failed": 0,
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "accepted_per_position": per_pos,
        "mean_running_requests": concurrency,
        "max_running_requests": float(math.ceil(concurrency * 1.6)) if cell.workload_kind == "open_loop" else float(cell.batch_size),
        "ttft_mean_s": 0.04, "ttft_p50_s": 0.038, "ttft_p99_s": 0.09,
        "tpot_mean_s": tpot, "tpot_p50_s": tpot * 0.98, "tpot_p99_s": tpot * 1.4,
    }
    row = records.derive(row)
    # Wave-2 columns (CONTEXT.md): replicate indices, the paper's per-pass quantities, host load.
    row |= {"status": "measured", "unsupported_reason": None, "window_index": window_index,
            "engine_replicate": engine_replicate, "gpu_busy_fraction": 0.97 if cell.method != "baseline" else 0.95,
            **_per_pass(cell, drafts, draft_tokens, committed)}
    return row


def _environment(cell: cells_mod.Cell, gpu: tuple[str, str]) -> dict:
    """Environment and model-shape columns, the same on a measured and an unsupported record."""
    name, uuid = gpu
    cuda = cell.device == "cuda"
    arch, family, moe = MODEL_SHAPES.get(cell.model_pair, ("Qwen2ForCausalLM", "gqa", False))
    draft = cell.spec.get("draft")
    return {
        "engine_version": ENGINE_VERSIONS[cell.engine] if cuda else "0.32.0+cpu",
        "torch_version": "2.11.0+cu130" if cuda else "2.13.0+cpu",
        "cuda_version": "13.0" if cuda else None,
        "driver_version": "580.105.08" if cuda else None,
        "gpu_names": [name] if cuda else [],
        "gpu_uuids": [uuid] if cuda else [],
        "gpu_uuid": uuid if cuda else None,
        "power_limit_w": 700.0 if cuda else None,
        "hostname": "gpu-node-01" if cuda else "laptop",
        "python_version": "3.12.3",
        "engine_start_s": 65.0 if cuda else 40.0,
        "target_architecture": arch, "target_family": family, "target_moe": moe,
        "draft_architecture": DRAFT_ARCHITECTURES.get(cell.method) or ("Qwen2ForCausalLM" if draft else None),
        "host_cpu_model": "AMD EPYC 9654 96-Core Processor" if cuda else "fixture laptop CPU",
        "host_load_1m": 3.2 if cuda else 1.1,
    }


def _per_pass(cell: cells_mod.Cell, drafts: int | None, draft_tokens: int | None, committed: int) -> dict:
    """The paper's per-pass quantities as the records define them (CONTEXT.md, issue 16)."""
    if not drafts:
        return {"verify_width": None, "drafted_per_committed": None, "draft_passes_per_round": None}
    return {"verify_width": 1 + draft_tokens / drafts, "drafted_per_committed": draft_tokens / committed,
            "draft_passes_per_round": DRAFT_PASSES[cell.method](cell.k or 0)}


def _position_weights(k: int) -> list[float]:
    w = [0.6 ** i for i in range(k)]
    return [x / sum(w) for x in w]


def _timeline(cell: cells_mod.Cell, rec: dict, rng: random.Random) -> pa.Table:
    if rec["energy_j"] is None:
        return records.TIMELINE_SCHEMA.empty_table()
    # Keep fixture timelines short: a compressed warm-up/cool-down around the real window length.
    warm, window, cool = min(rec["warmup_s"], 5.0), rec["window_s"], min(rec["cooldown_s"], 3.0)
    gen = np.random.default_rng(rng.randrange(2**32))
    t = np.arange(int((warm + window + cool) * 10)) / 10
    in_window = (t >= warm) & (t < warm + window)
    level = np.where(in_window, 1.0, np.where(t < warm, 0.55, 0.4)) * rec["mean_power_w"]
    power = level * gen.uniform(0.96, 1.04, t.size)
    n = t.size
    return pa.Table.from_pydict({
        "t_monotonic": 1000.0 - warm + t, "t_rel_s": t - warm, "gpu_index": np.zeros(n, dtype=np.int32),
        "gpu_uuid": [rec["gpu_uuid"]] * n, "power_w": power,
        "energy_mj": (1_000_000_000 + np.cumsum(power * 100)).astype(np.int64),
        "sm_clock_mhz": np.where(in_window, 1980, 1410).astype(np.int64), "mem_clock_mhz": np.full(n, 3201, dtype=np.int64),
        "temperature_c": 45 + 15 * np.minimum(1.0, t / 30), "throttle_reasons": np.zeros(n, dtype=np.int64),
        "gpu_util_pct": np.where(in_window, 97.0, 10.0), "mem_util_pct": np.where(in_window, 60.0, 5.0),
        "in_window": in_window,
        # GPM counters (ADR 0101): null, as on a GPU or VM that refuses them
        "dram_bw_util_pct": [None] * n, "sm_active_pct": [None] * n, "tensor_active_pct": [None] * n,
    }, schema=records.TIMELINE_SCHEMA)


# --- scenario `schemes` (FIXTURE): the made-up per-scheme physics --------------------------------

def _noise(sd: float, *key: Any) -> float:
    """A reproducible Gaussian draw per key (str-seeded Random is stable across runs)."""
    return random.Random(":".join(map(str, key))).gauss(0.0, sd)


def _scheme_ratio(cell: cells_mod.Cell, L: float, verify_width: float) -> float:
    """Energy per committed token over the baseline: each round reads the weights once, verifies
    ``verify_width`` tokens per request (cheap while memory-bound, costly at B=32 and on MoE, where
    each verified token pulls its experts), runs the drafter's passes, and commits L tokens, of which
    the accepted ones save only part of a step (KV writes, sampling and the drafter's KV stay)."""
    moe = MODEL_SHAPES[cell.model_pair][2]
    per_token = {1: 0.015, 32: 0.12}[cell.batch_size] * (2.5 if moe and cell.batch_size == 1 else 1.0)
    per_pass = {"eagle3": 0.035, "mtp": 0.03, "dflash": 0.12, "dspark": 0.11, "ngram": 0.0}[cell.method]
    r = (1 + per_token * (verify_width - 1) + per_pass * DRAFT_PASSES[cell.method](cell.k or 0)) / (1 + 0.25 * (L - 1))
    if not cell.cuda_graphs:
        r -= CAPTURE_BIAS_PP[moe] / 100  # launch overhead speculation removes and capture would have removed
    return r * (SGLANG_RATIO_SCALE if cell.engine == "sglang" else 1.0)


def _scheme_record(cell: cells_mod.Cell, rng: random.Random, start: datetime, *, window: int, replicate: int) -> dict:
    """A measured record: baseline mJ of the model pair and batch, three replicate levels of noise
    (window 0.4 %, seed 1 %, engine replicate 1.5 %), realized L wandering around the configured one."""
    base = SCHEMES_BASE_MJ[cell.model_pair] * (1.0 if cell.batch_size == 1 else
                                                (0.25 if MODEL_SHAPES[cell.model_pair][2] else 0.09))
    base *= (1.0 if cell.cuda_graphs else 1.08) * (SGLANG_BASELINE_SCALE if cell.engine == "sglang" else 1.0)
    # Opening and closing baselines share their seed and replicate draws (the same configuration): their
    # drift is the window noise, inside the pre-registered baseline_drift_max.
    arm = cell.scheme if cell.method == "baseline" else cell.name.split("--w")[0]
    key = (cell.engine, cell.model_pair, cell.batch_size, cell.cuda_graphs, arm)
    scale = (1 + _noise(0.004, *key, cell.seed, replicate, window) + _noise(0.01, *key, cell.seed)
             + _noise(0.015, *key, cell.seed, "r", replicate))
    L = None
    share = 1.0
    if cell.method != "baseline":
        if cell.synthetic:
            L = cell.configured_L + _noise(0.012 if cell.batch_size == 1 else 0.004, *key, cell.seed, replicate, window, "L")
        else:  # host-side n-gram: model acceptance on the code pool, drafting fewer than k when nothing matches
            L = NGRAM_L + _noise(0.02, *key, cell.seed, replicate, window, "L")
            share = 0.8
        L = min(max(L, 1.0), (cell.k or 0) + 1.0)
        base *= _scheme_ratio(cell, L, 1 + (cell.k or 0) * share)
    gpu = GPUS[(cell.seed + replicate) % 2]
    return _row(cell, rng, start, "nvml", L=L, mj=base * scale, gpu=gpu, draft_share=share, window_index=window,
                engine_replicate=replicate)


def _unsupported_record(cell: cells_mod.Cell, reason: str) -> dict:
    """Identity and environment only: no window, counters or energy (CONTEXT.md)."""
    return {**cell.identity(), "config_hash": "fixture0000hash", "git_commit": "fixture", "version_param": 1,
            "synthetic": cell.synthetic, "acceptance_mechanism": None, "corpus_pool_hash": f"pool-{cell.corpus}",
            **_environment(cell, GPUS[cell.seed % 2]), "engine_instance": f"fixture:{cell.cell_id}",
            "status": "unsupported", "unsupported_reason": reason, "window_index": None, "engine_replicate": 0}


def _replicate_cell(cell: cells_mod.Cell, window: int, replicate: int) -> cells_mod.Cell:
    """Window w ≥ 1 is its own cell named <name>--w<w>; engine replicate r ≥ 1 its own campaign
    <campaign>-r<r> (CONTEXT.md). Ids are the fixture's own (the cell table does not plan them yet)."""
    name = cell.name + (f"--w{window}" if window else "")
    campaign = cell.campaign_id + (f"-r{replicate}" if replicate else "")
    cell_id = cell.cell_id if not (window or replicate) else \
        hashlib.sha256(f"{cell.cell_id}:w{window}:r{replicate}".encode()).hexdigest()[:12]
    return replace(cell, name=name, campaign_id=campaign, cell_id=cell_id,
                   run_order_index=cell.run_order_index * SCHEMES_WINDOWS + window)


def _schemes_rows(table: cells_mod.CellTable, rng: random.Random, start: datetime) -> list[dict]:
    rows = []
    i = 0
    for cell in table:
        key = (cell.engine, cell.model_pair, cell.scheme)
        if key in SCHEMES_NOT_RUN or (not cell.cuda_graphs and cell.batch_size != 1):
            continue  # planned, never run: graphs off only at single stream, as the paper measured it
        if key in SCHEMES_UNSUPPORTED:
            rows.append(_unsupported_record(cell, SCHEMES_UNSUPPORTED[key]))
            continue
        replicates = 2 if (cell.engine, cell.model_pair) in SCHEMES_REPLICATED and cell.cuda_graphs else 1
        for r in range(replicates):
            for w in range(SCHEMES_WINDOWS):
                rows.append(_scheme_record(_replicate_cell(cell, w, r), rng, start + timedelta(minutes=2 * i),
                                           window=w, replicate=r))
                i += 1
    return rows


def _frame(rows: list[dict]) -> pl.DataFrame:
    """Records as the aggregate writes them: the record schema (measured rows validated by the real
    records.validate_row), plus any wave-2 column the schema does not hold yet, typed."""
    cols = records.RECORD_COLUMNS
    for r in rows:
        if r.get("status") != "unsupported":
            records.validate_row({k: v for k, v in r.items() if k in cols})
    full = [{n: r.get(n) for n in cols} | {"record_version": records.RECORD_VERSION} for r in rows]
    out = pl.from_arrow(pa.Table.from_pylist(full, schema=records.RECORD_SCHEMA))
    extra = {k: t for k, t in WAVE2_COLUMNS.items() if k not in cols}
    if extra:
        out = out.with_columns(pl.DataFrame({k: [r.get(k) for r in rows] for k in extra}, schema=extra))
    return out


def _variance(curves: pl.DataFrame) -> pl.DataFrame:
    """FIXTURE variance budget in the spread helper's shape (results/variance.parquet): one row per
    campaign family × level. Made up from the physics' noise levels; GPU and run are not estimable
    here (one board per seed, one run), and say so."""
    rows = []
    for fam in sorted(set(curves["target_family"].drop_nulls().to_list())):
        parts = {"window": (0.004 ** 2, 2, True, ""), "seed": (0.01 ** 2, 2, True, ""),
                 "engine_replicate": ((0.015 ** 2, 2, True, "") if fam == "gqa" else
                                      (None, 1, False, "one engine replicate in this family")),
                 "gpu": (None, 2, False, "GPU board is confounded with seed (seed s ran on board s mod 2)"),
                 "run": (None, 1, False, "one run of this campaign family in the evidence"),
                 "residual": (0.002 ** 2, 40, True, "")}
        total = sum(v for v, *_ in parts.values() if v is not None)
        for level, (var, n, est, note) in parts.items():
            rows.append({"family": fam, "metric": "energy_ratio", "level": level, "variance": var,
                         "share": var / total if var is not None else None, "n_units": n, "estimable": est,
                         "note": note or None})
    return pl.DataFrame(rows, schema={"family": pl.String, "metric": pl.String, "level": pl.String,
                                      "variance": pl.Float64, "share": pl.Float64, "n_units": pl.Int64,
                                      "estimable": pl.Boolean, "note": pl.String})


# --- checks and curves (what the analysis produces; built here from the fixture records) ------

def _checks(recs: pl.DataFrame, cfg: dict) -> pl.DataFrame:
    rows = []
    # Unsupported records stay in records.parquet but out of checks, pairing and curves (CONTEXT.md).
    recs = recs.filter(pl.col("status").fill_null("measured") == "measured")
    for (cid,), grp in recs.group_by(["campaign_id"], maintain_order=True):
        names = grp["cell_name"].to_list()
        base = grp.filter(pl.col("role") != "point")
        opening = base.filter(pl.col("role") == cells_mod.ROLE_OPENING)["mj_per_committed_token"]
        closing = base.filter(pl.col("role") == cells_mod.ROLE_CLOSING)["mj_per_committed_token"]
        if base["mj_per_committed_token"].null_count() == 0 and opening.len() and closing.len():
            a, b = opening.mean(), closing.mean()  # one value per window
            drift = abs(b - a) / a
            limit = cfg["checks"]["baseline_drift_max"]
            rows.append(("baseline_drift", cid, base["cell_name"].to_list(), "fail" if drift > limit else "pass",
                         drift, limit, f"opening {a:.1f} vs closing {b:.1f} mJ/token"))
        else:
            rows.append(("baseline_drift", cid, base["cell_name"].to_list(), "not_applicable", None,
                         cfg["checks"]["baseline_drift_max"], "meter none: no energy to compare"))
        no_meter = int((grp["meter"] == "none").sum())
        rows.append(("energy_measured", cid, names, "fail" if no_meter else "pass", float(no_meter), 0.0,
                     f"energy not measured on {no_meter} of {grp.height} cells (meter: none): no energy curve for this campaign"
                     if no_meter else f"meter nvml on all {grp.height} cells"))
        ct = grp["committed_tokens"].cast(pl.Float64)
        spread = (ct.max() - ct.min()) / ct.mean()
        rows.append(("committed_spread", cid, names, "pass" if spread <= cfg["checks"]["committed_spread_max"] or grp["workload_kind"][0] == "closed_batch" else "fail",
                     spread, cfg["checks"]["committed_spread_max"], "committed tokens across arms"))
        if grp["workload_kind"][0] == "open_loop":
            mr = grp["mean_running_requests"]
            cs = (mr.max() - mr.min()) / mr.mean()
            rows.append(("concurrency_spread", cid, names, "pass" if cs <= cfg["checks"]["concurrency_spread_max"] else "fail",
                         cs, cfg["checks"]["concurrency_spread_max"], "open-loop mean running requests across arms"))
        syn = grp.filter(pl.col("synthetic"))
        if syn.height:
            dev = (syn["realized_L"] - syn["configured_L"]).abs().max()
            rows.append(("acceptance_length", cid, syn["cell_name"].to_list(), "pass", dev,
                         cfg["checks"]["acceptance_length_tolerance"], "|realized − configured| L"))
        rows.append(("failed_requests", cid, names, "pass", 0.0, float(cfg["checks"]["max_failed_requests"]), ""))
        if cid == FLAGGED_CELL[0]:
            rows.append(("idle_regime", cid, [FLAGGED_CELL[1]], "flag", 1.08, cfg["checks"]["idle_regime_ratio"],
                         "mean power below idle × 1.15: GPU mostly idle in the window"))
    return pl.DataFrame(rows, schema={"check": pl.String, "campaign_id": pl.String, "cell_names": pl.List(pl.String),
                                      "status": pl.String, "value": pl.Float64, "threshold": pl.Float64,
                                      "detail": pl.String}, orient="row")


def _curves(recs: pl.DataFrame, checks: pl.DataFrame) -> pl.DataFrame:
    fails = checks.filter((pl.col("status") == "fail") & (pl.col("check") != "energy_measured"))
    failed = {r["campaign_id"]: r["check"] for r in fails.iter_rows(named=True)}
    energy_fail = {r["campaign_id"]: f"energy_measured fail: {r['detail']}" for r in
                   checks.filter((pl.col("check") == "energy_measured") & (pl.col("status") == "fail")).iter_rows(named=True)}
    flagged = checks.filter(pl.col("status") == "flag")
    base = (recs.filter((pl.col("role") != "point") & (pl.col("status").fill_null("measured") == "measured"))
            .group_by("campaign_id")
            .agg(baseline_mj_per_committed_token=pl.col("mj_per_committed_token").mean(),
                 baseline_tpot_mean_s=pl.col("tpot_mean_s").mean(),
                 baseline_mean_running_requests=pl.col("mean_running_requests").mean(),
                 baseline_round_time_ms=pl.col("round_time_ms").mean()))
    measured = pl.col("status").fill_null("measured") == "measured"
    pts = recs.filter((pl.col("role") == "point") & measured).join(base, on="campaign_id")
    out = pts.with_columns(
        *derive.request_step_columns(),  # drafted_step_share, committed_per_step (ADR 0256), as derive writes them
        *derive.decode_step_columns(),  # their decode-step bounds (ADR 0256 addendum 2)
        tokens_per_verify_pass=(pl.col("batch_size") * pl.col("verify_width")).cast(pl.Float64),
        energy_ratio=pl.col("mj_per_committed_token") / pl.col("baseline_mj_per_committed_token"),
        mj_per_accepted_token=pl.col("energy_j") * 1000 / pl.col("accepted_tokens"),
        tbt_ratio=pl.col("tpot_mean_s") / pl.col("baseline_tpot_mean_s"),
        energy_refused_reason=pl.col("campaign_id").replace_strict(energy_fail, default=None, return_dtype=pl.String),
        failed_checks=pl.col("campaign_id").replace_strict({k: [v] for k, v in failed.items()}, default=[],
                                                           return_dtype=pl.List(pl.String)),
    )
    flag_map = {(r["campaign_id"], n): r["check"] for r in flagged.iter_rows(named=True) for n in r["cell_names"]}
    out = out.with_columns(flags=pl.struct("campaign_id", "cell_name").map_elements(
        lambda s: [flag_map[(s["campaign_id"], s["cell_name"])]] if (s["campaign_id"], s["cell_name"]) in flag_map else [],
        return_dtype=pl.List(pl.String)))
    cols = ["campaign_id", "cell_id", "cell_name", "engine", "model_pair", "scheme", "method", "k", "acceptance_name",
            "acceptance_kind", "configured_L", "batch_size", "corpus", "seed", "cuda_graphs", "workload", "workload_kind",
            "gpu_uuid", "realized_L", "accepted_per_verification", "tokens_per_verify_pass", "mj_per_committed_token",
            "baseline_mj_per_committed_token", "energy_ratio", "mj_per_accepted_token", "tpot_mean_s",
            "baseline_tpot_mean_s", "tbt_ratio", "mean_running_requests", "baseline_mean_running_requests",
            "energy_refused_reason", "failed_checks", "flags", "round_time_ms", "baseline_round_time_ms"]
    # What derive adds for replicates (ADR 0080): each point's own window's baseline (here the campaign's: the
    # fixture's baselines have one value per campaign) and the configuration's name without its window suffix.
    out = out.with_columns(baseline_window_mj_per_committed_token=pl.col("baseline_mj_per_committed_token"),
                           baseline_window_tpot_mean_s=pl.col("baseline_tpot_mean_s"),
                           point_name=pl.col("cell_name").str.replace(r"--w\d+$", ""))
    cols += ["point_name", "baseline_window_mj_per_committed_token", "baseline_window_tpot_mean_s", *STEP_CURVE_COLUMNS]
    out = _with_roofline(out)
    cols += list(ROOFLINE_CURVE_COLUMNS)
    return out.select(cols + [c for c in WAVE2_CURVE_COLUMNS if c in out.columns])


# What derive appends after rule roofline (ADR 0102): a made-up but self-consistent model per method — the
# host-bound draft_model loop missed by +50 % with a third of its energy idle, n-gram +20 % with no GPU draft,
# the heads and block drafters within 5 %. Energy a check refused keeps its prediction, not its residual.
ROOFLINE_CURVE_COLUMNS = ("predicted_mj_per_committed_token", "residual", "energy_verify_share", "energy_draft_share",
                          "energy_idle_share", "model_status", "not_modelled_reason")
_FIXTURE_MODEL = {"draft_model": (0.5, 0.4, 0.25), "ngram": (0.2, 0.0, 0.3)}  # residual, draft share, idle share


def _with_roofline(curves: pl.DataFrame) -> pl.DataFrame:
    method = pl.col("method")
    res = method.replace_strict({m: v[0] for m, v in _FIXTURE_MODEL.items()}, default=0.05, return_dtype=pl.Float64)
    draft = method.replace_strict({m: v[1] for m, v in _FIXTURE_MODEL.items()}, default=0.2, return_dtype=pl.Float64)
    idle = method.replace_strict({m: v[2] for m, v in _FIXTURE_MODEL.items()}, default=0.0, return_dtype=pl.Float64)
    return curves.with_columns(
        (pl.col("mj_per_committed_token") / (1.0 + res)).alias("predicted_mj_per_committed_token"),
        pl.when(pl.col("energy_refused_reason").is_null()).then(res).alias("residual"),
        (1.0 - draft - idle).alias("energy_verify_share"), draft.alias("energy_draft_share"),
        idle.alias("energy_idle_share"), pl.lit("modelled").alias("model_status"),
        pl.lit(None, pl.String).alias("not_modelled_reason"))


def _summary(curves: pl.DataFrame) -> pl.DataFrame:
    """Today's seed summary, from the real analysis code (derive.summarize_seeds, ADR 0027)."""
    from specjoule.analysis import derive

    return derive.summarize_seeds(curves, resamples=200)


SPREAD_SUMMARY_KEYS = ("engine", "model_pair", "scheme", "method", "k", "acceptance_name", "acceptance_kind",
                       "configured_L", "batch_size", "corpus", "cuda_graphs", "workload", "workload_kind")
SPREAD_SUMMARY_METRICS = ("energy_ratio", "realized_L", "tbt_ratio", "mj_per_committed_token", "accepted_per_verification")
LEVELS = ("window_index", "seed", "engine_replicate")  # innermost first; the interval resamples the highest present
LEVEL_NAMES = {"window_index": "window", "seed": "seed", "engine_replicate": "engine_replicate"}


def _spread_summary(curves: pl.DataFrame) -> pl.DataFrame:
    """FIXTURE summary in the shape the spread helper writes (CONTEXT of the report task): per
    configuration ``{metric}_mean/_ci_low/_ci_high/_n`` plus ``n_windows``, ``n_seeds``,
    ``n_engine_replicates``, ``n_gpus`` and ``interval_level``. The interval here is the min–max of
    the unit means at the highest replicate level with two or more units — what the exact percentile
    bootstrap of ADR 0027 gives for two or three units; null with one unit."""
    rows = []
    for keys, grp in curves.group_by(list(SPREAD_SUMMARY_KEYS), maintain_order=True):
        row = dict(zip(SPREAD_SUMMARY_KEYS, keys))
        counts = {c: grp[c].n_unique() for c in LEVELS}
        level = next((c for c in reversed(LEVELS) if counts[c] > 1), None)
        row |= {"n_windows": counts["window_index"], "n_seeds": counts["seed"],
                "n_engine_replicates": counts["engine_replicate"], "n_gpus": grp["gpu_uuid"].n_unique(),
                "interval_level": LEVEL_NAMES[level] if level else None,
                "failed_checks": sorted({c for x in grp["failed_checks"].to_list() for c in x}),
                "flags": sorted({c for x in grp["flags"].to_list() for c in x})}
        for m in SPREAD_SUMMARY_METRICS:
            vals = grp.filter(pl.col(m).is_not_null())
            row[f"{m}_mean"] = vals[m].mean() if vals.height else None
            row[f"{m}_n"] = vals.height
            lo = hi = None
            if level and vals.height:
                units = vals.group_by(level).agg(pl.col(m).mean())[m]
                if units.len() > 1:
                    lo, hi = units.min(), units.max()
            row[f"{m}_ci_low"], row[f"{m}_ci_high"] = lo, hi
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def _checks_md(checks: pl.DataFrame) -> str:
    lines = ["| check | campaign | status | value | threshold |", "|---|---|---|---|---|"]
    for r in checks.iter_rows(named=True):
        lines.append(f"| {r['check']} | {r['campaign_id']} | {r['status']} | {r['value']} | {r['threshold']} |")
    return "\n".join(lines) + "\n"


def build(kind: str, root: Path, *, timelines: bool = True) -> Scenario:
    """Write the scenario's tables under ``root`` (results layout) and return them."""
    cfg = {"gpu": gpu_config, "cpu": cpu_config, "engines": engines_config, "schemes": schemes_config}[kind]()
    meter = "none" if kind == "cpu" else "nvml"
    table = cells_mod.build(cfg)
    rng = random.Random(20261130)
    start = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    rows, tl_paths = [], []
    if kind == "schemes":
        return _finish(cfg, root, _schemes_rows(table, rng, start), [], spread=True)
    for i, cell in enumerate(table):
        if kind == "engines" and (cell.campaign_id, cell.name) == ENGINES_UNMATCHED:
            continue  # a cell that left no record (its twin on the other engine has no partner)
        rec = _record(cell, rng, start + timedelta(minutes=5 * i), meter, one_gpu=kind == "engines")
        rows.append(rec)
        if timelines:
            path = root / cell.timeline_path
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(_timeline(cell, rec, rng), path)  # no fsync: fixture, not a measurement
            tl_paths.append(path)
    return _finish(cfg, root, rows, tl_paths, spread=False)


def figure_inputs(s: Scenario, **overrides: Any) -> Any:
    """The figures' inputs from a scenario's tables, its timelines read as the figures rule reads them;
    ``overrides`` replace tables (``figures.FigureInputs.from_config``)."""
    from specjoule.report import figures

    tl, note = _timelines(s)
    tables = dict(curves=s.curves, records=s.records, checks=s.checks, timelines=tl, timeline_note=note, summary=s.summary)
    tables.update(overrides)
    return figures.FigureInputs.from_config(s.config, **tables)


# figures.load_timelines of each scenario, read once a process (issue 22): the session scenarios (conftest's gpu, cpu,
# engines) had their timelines read again by every test that asked for figure_inputs, 26 reads of the same files in
# a run (the GPU scenario's 624 timelines, 0.1-0.4 s a read). What it reads is the scenario's own: its timeline
# files, records and checks (``overrides`` do not reach it), which no test changes; a frame is not changed in place.
# Keyed by the scenario object, kept alive beside its result so that its id is not reused.
_TIMELINES: dict[int, tuple[Scenario, tuple[Any, str]]] = {}


def _timelines(s: Scenario) -> tuple[Any, str]:
    from specjoule.report import figures

    kept = _TIMELINES.get(id(s))
    if kept is None or kept[0] is not s:
        kept = _TIMELINES[id(s)] = (s, figures.load_timelines(s.timeline_paths, s.records, s.checks))
    return kept[1]


def _finish(cfg: dict, root: Path, rows: list[dict], tl_paths: list[Path], *, spread: bool) -> Scenario:
    recs = _frame(rows)
    checks = _checks(recs, cfg)
    curves = _curves(recs, checks)
    summary = _spread_summary(curves) if spread else _summary(curves)
    variance = _variance(curves) if spread else None
    md = _checks_md(checks)
    res = root / "results"
    res.mkdir(parents=True, exist_ok=True)
    # records.parquet as aggregate writes it: the records with their pairing columns (ADR 0020), so rules that
    # read it (variance, reproducibility) see what they see after a real aggregate.
    from specjoule.analysis import aggregate

    paths = pl.format("results/cells/{}/{}.parquet", pl.col("campaign_id"), pl.col("cell_name")).alias("record_path")
    aggregate.pair(recs.with_columns(paths).lazy()).collect().write_parquet(res / "records.parquet")
    # Rule roofline's tables, empty (the fixture's model lives in the curves' columns), written before the
    # checks and curves that read them so that Snakemake sees nothing to re-run.
    from specjoule.analysis import roofline

    for name, schema in (("roofline", roofline.ROOFLINE_SCHEMA), ("roofline_fit", roofline.FIT_SCHEMA),
                         ("roofline_time", roofline.TIME_SCHEMA), ("crossover", roofline.CROSSOVER_SCHEMA)):
        pl.DataFrame(schema=schema).write_parquet(res / f"{name}.parquet")
    roofline.hardware_table([]).write_parquet(res / "hardware.parquet")
    checks.write_parquet(res / "checks.parquet")
    curves.write_parquet(res / "curves.parquet")
    summary.write_parquet(res / "curves_summary.parquet")
    if variance is not None:
        variance.write_parquet(res / "variance.parquet")
    (res / "checks.md").write_text(md)
    return Scenario(cfg, recs, checks, curves, summary, tl_paths, md, variance)


def shared_figures(figs: list[Any]) -> dict[str, Any]:
    """Figures by name whose specs are read more than once (conftest's ``*_figs`` and ``sch_figs``, which many tests
    read; a test that reads each spec and then exports them): each figure's Vega-Lite spec is made by
    ``Figure.spec`` at its first use, as before, and every later call hands out a deep copy of it (a test may change
    what it gets) instead of building and checking it again: the same dict, about 15-20 ms less a call (issue 22).
    Made again where the figure's chart was replaced; a spec that fails raises at every call (nothing is kept)."""
    import copy
    from dataclasses import dataclass, field, fields

    from specjoule.report import figures

    @dataclass
    class SpecOnce(figures.Figure):
        _made: tuple[Any, dict] | None = field(default=None, init=False, repr=False, compare=False)

        def spec(self) -> dict:
            if self._made is None or self._made[0] is not self.chart:
                self._made = (self.chart, super().spec())
            return copy.deepcopy(self._made[1])

    init = [x.name for x in fields(figures.Figure) if x.init]  # every field a Figure carries, not a copied list
    return {f.name: SpecOnce(**{k: getattr(f, k) for k in init}) for f in figs}
