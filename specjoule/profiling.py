"""Profile a handful of speculation rounds of a cell, on the engine the cell was measured on (ADR 0095).

Where a round's time goes (issue 17, item 6) cannot be read from a record: a record has the window, the counters
and the energy, so a round's *length* (``round_time_ms``) but not its parts. This module starts the cell's engine
through the project's own adapters (``specjoule.engines.make_engine``: the same arguments, environment and
synthetic-acceptance swap as the measurement), runs a short warm-up, times a few unprofiled batches as the
reference, then turns on the engine's own torch profiler for a few short closed batches. NVML utilization and power
are sampled at 10 Hz throughout (the meter's sampler), so the profiled and the unprofiled batches each get a GPU
busy fraction that does not depend on the profiler.

What the engine is asked to do, per engine:
- vLLM: ``profiler_config`` ({profiler: torch, torch_profiler_dir: DIR}) is an engine argument, fixed at start;
  ``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1`` makes Model Runner V1 emit its ``gpu_model_runner: forward | sample |
  draft | …`` labels (``vllm.v1.utils.record_function_or_nullcontext``: a null context without it). Model Runner V2
  (what 0.26 picks for a dense target with eagle3, mtp, dflash, dspark or no drafter) emits none, so there Python
  frames are recorded (``torch_profiler_with_stack``) and the phases are told apart by function
  (``analysis.rounds``). An MoE or hybrid target runs on V1 whatever the method (``VllmConfig.use_v2_model_runner``;
  the records' ``engine_config.model_runner`` says which ran): its cells get V1's labels, and frames by method.
- SGLang: ``Engine.start_profile(output_dir=…)`` / ``stop_profile()``. 0.5.17 labels its speculative stages
  itself whenever a torch profiler runs (``spec_stage_span``: ``draft``, ``draft_extend``; the model runner's
  ``step[TARGET_VERIFY bs=…]``), so no Python frames are needed there.

Nothing here writes a record: the profiler perturbs the host (every op is recorded), so profiled batches are never
energy windows. The output is a folder per cell: ``profile.json`` (what ran, the unprofiled reference, the NVML
summaries), ``timeline.parquet`` (10 Hz NVML), ``trace/`` (the engine's Chrome trace) and ``engine.log``;
``python -m specjoule.analysis.rounds DIR`` turns the folders into a table.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specjoule.cellspec import CellSpec

log = logging.getLogger("specjoule.profiling")

PROFILE_FILE = "profile.json"
TIMELINE_FILE = "timeline.parquet"
TRACE_SUBDIR = "trace"
ENGINE_LOG = "engine.log"

# vLLM 0.26 runs these methods on Model Runner V1, which labels its phases; every other method (and the baseline)
# on V2, which does not, for a dense target (config/vllm.py _get_v2_model_runner_unsupported_features; research note
# schemes-vllm026). An MoE target runs on V1 for every method (_is_default_v2_model_runner_model), so there the
# frames recorded by method are more than its labels need: harmless, the profiled batches are never windows.
VLLM_LABELLED_METHODS = ("draft_model", "ngram")
# Makes V1's record_function_or_nullcontext emit torch labels (vllm/v1/utils.py, 0.26 … 0.32).
VLLM_LABEL_ENV = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}


class ProfileError(ValueError):
    """A profiling request that cannot be served; names what was asked and why."""


@dataclass(frozen=True)
class ProfileSettings:
    """How much to profile. Defaults keep an H200 profile of one cell near one engine start plus ~20 s."""

    batches: int = 2  # profiled closed batches
    rounds: int = 12  # at most this many speculation rounds per profiled batch (sets the output length)
    warmup_batches: int = 2  # unprofiled, unmeasured
    reference_s: float = 3.0  # unprofiled batches, timed and NVML-sampled, at least this long
    with_stack: bool | None = None  # None: only where the engine has no labels (V2 runner, SGLang)
    overrides: dict = field(default_factory=dict)  # merged into the engine's engine_options (e.g. async_scheduling)

    def check(self) -> None:
        for name in ("batches", "rounds"):
            if int(getattr(self, name)) < 1:
                raise ProfileError(f"{name} = {getattr(self, name)!r}: must be at least 1")
        if self.warmup_batches < 0 or self.reference_s < 0:
            raise ProfileError(
                f"warmup_batches = {self.warmup_batches!r}, reference_s = {self.reference_s!r}: must not be negative"
            )


# -- which cells, which engine ---------------------------------------------------------------------


def select_cells(table: Any, selectors: list[str]) -> list[Any]:
    """Cells named by record path (``results/cells/C/N.parquet``) or ``C/N``; closed-batch cells only."""
    out = []
    for sel in selectors:
        key = sel if sel.endswith(".parquet") else f"results/cells/{sel.strip('/')}.parquet"
        cell = table.by_path.get(key)
        if cell is None:
            campaign, _, name = key[len("results/cells/") : -len(".parquet")].rpartition("/")
            near = sorted(c.record_path for c in table.cells if c.name == name or c.campaign_id == campaign)[:5]
            raise ProfileError(
                f"cell {sel!r} is not in this config's plan"
                + (f"; cells of that campaign or name: {', '.join(near)}" if near else "")
            )
        if cell.workload_kind != "closed_batch":
            raise ProfileError(
                f"cell {sel!r} is {cell.workload_kind}: only closed-batch cells are profiled "
                f"(the offline engines' profiler hook)"
            )
        out.append(cell)
    return out


def engine_group_cells(table: Any, cell: Any) -> list[Any]:
    """The cells that shared the cell's engine start in the measurement (itself alone without sharing)."""
    for group in table.engine_groups().values():
        if any(c.record_path == cell.record_path for c in group.cells):
            return list(group.cells)
    return [cell]


def uses_stack(spec: CellSpec | Mapping[str, Any], settings: ProfileSettings) -> bool:
    """Python frames are needed only where the engine labels nothing (ADR 0095: vLLM's Model Runner V2); they
    cost host time on every call, so not elsewhere."""
    if settings.with_stack is not None:
        return bool(settings.with_stack)
    spec = CellSpec.of(spec)
    if spec.engine.engine == "sglang":
        return False
    return spec.scheme.method not in VLLM_LABELLED_METHODS


def merge_overrides(options: dict, overrides: dict) -> dict:
    """``engine_options.<engine>`` with ``overrides`` on top; ``env`` is merged key by key."""
    out = copy.deepcopy(dict(options or {}))
    for key, value in (overrides or {}).items():
        if key == "env" and isinstance(value, dict):
            out["env"] = {**(out.get("env") or {}), **{str(k): str(v) for k, v in value.items()}}
        else:
            out[key] = copy.deepcopy(value)
    return out


def engine_spec(table: Any, cell: Any, trace_dir: Path, settings: ProfileSettings) -> CellSpec:
    """The spec the engine is built from: as the measurement built it (the engine group's first cell, room for
    its largest batch: ``runner._engine_spec``), the overrides, and the engine's profiler switched on."""
    group = engine_group_cells(table, cell)
    spec = group[0].setup.replace(batch_size=max(c.batch_size for c in group))
    options = merge_overrides(dict(spec.engine.options), settings.overrides)
    if spec.engine.engine == "vllm":
        options["profiler_config"] = {
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir.resolve()),
            "torch_profiler_with_stack": uses_stack(cell.setup, settings),
            "torch_profiler_record_shapes": False,
            "torch_profiler_use_gzip": True,
            # The per-op table vLLM prints on stop walks every event: seconds of device time for nothing we read.
            "torch_profiler_dump_cuda_time_total": False,
        }
        options["env"] = {**(options.get("env") or {}), **VLLM_LABEL_ENV}
    return spec.with_engine(options=options)


def profile_output_len(cell: Any, rounds: int) -> int:
    """Output tokens of a profiled batch: at most ``rounds`` verify rounds after the prefill token, at the cell's
    configured acceptance length (1 where it is not known: then fewer rounds, never more); never longer than
    the cell's own output length."""
    mean_len = float(cell.configured_L) if cell.configured_L else 1.0
    return max(2, min(cell.setup.workload.output_len, 1 + math.ceil(rounds * mean_len)))


# -- the run ---------------------------------------------------------------------------------------


def _decode_rounds(cell: Any, delta_counters: dict, batch: int, output_len: int, batches: int) -> float:
    """Verify rounds per request from the engine's counters (drafts are counted per request per round);
    a baseline decodes one token per step."""
    if cell.method == "baseline":
        return float((output_len - 1) * batches)
    drafts = delta_counters.get("drafts") or 0
    return drafts / batch if batch else 0.0


def _timed_batches(
    engine: Any, prompts_for, n_or_seconds: tuple[int, float], output_len: int, timeout_s: float, cell: Any
) -> dict[str, Any]:
    """Run whole batches (at least ``n``, and until ``seconds`` passed); their times and counter deltas."""
    n_min, seconds = n_or_seconds
    before = engine.snapshot()
    t0 = time.monotonic()
    walls, ttfts, r = [], [], 0
    while r < n_min or time.monotonic() - t0 < seconds:
        res = engine.generate_batch(prompts_for(r), output_len, timeout_s)
        bad = [q for q in res.requests if not q.ok]
        if bad:
            raise ProfileError(f"batch {r}: {len(bad)} of {len(res.requests)} requests failed: {bad[0].error}")
        walls.append(res.ended_monotonic - res.started_monotonic)
        ttfts.extend(q.ttft_s for q in res.requests if q.ttft_s is not None)
        r += 1
    t1 = time.monotonic()
    delta = engine.snapshot().minus(before).columns(cell.method != "baseline")
    batch = int(cell.batch_size)
    rounds = _decode_rounds(cell, delta, batch, output_len, r)
    ttft = sum(ttfts) / len(ttfts) if ttfts else None
    decode_s = sum(walls) - (ttft or 0.0) * r
    return {
        "t_start": t0,
        "t_end": t1,
        "batches": r,
        "batch_wall_s": walls,
        "ttft_mean_s": ttft,
        "rounds": rounds,
        "committed_tokens": delta.get("committed_tokens"),
        "drafts": delta.get("drafts"),
        "accepted_tokens": delta.get("accepted_tokens"),
        # Wall time per verify round with the prefill (TTFT) taken out: what the profiled rounds compare to.
        "round_ms": 1000.0 * decode_s / rounds if rounds else None,
    }


def nvml_window(timeline: Any, t_start: float, t_end: float) -> dict[str, float | None]:
    """Mean NVML utilization (0–1) and power in [t_start, t_end], from the 10 Hz timeline; mean power from the
    energy counter where it advanced (the better instrument, ADR 0011)."""
    if timeline is None or timeline.num_rows == 0:
        return {"gpu_util": None, "power_w": None, "samples": 0}
    t = timeline.column("t_monotonic").to_pylist()
    util = timeline.column("gpu_util_pct").to_pylist()
    power = timeline.column("power_w").to_pylist()
    energy = timeline.column("energy_mj").to_pylist()
    inside = [i for i, x in enumerate(t) if t_start <= x <= t_end]
    u = [util[i] for i in inside if util[i] is not None]
    p = [power[i] for i in inside if power[i] is not None]
    e = [(t[i], energy[i]) for i in inside if energy[i] is not None]
    counter_w = None
    if len(e) >= 2 and e[-1][1] > e[0][1] and e[-1][0] > e[0][0]:
        counter_w = (e[-1][1] - e[0][1]) / 1000.0 / (e[-1][0] - e[0][0])
    return {
        "gpu_util": sum(u) / len(u) / 100.0 if u else None,
        "power_w": counter_w if counter_w is not None else (sum(p) / len(p) if p else None),
        "samples": len(inside),
    }


def profile_cell(
    table: Any,
    cell: Any,
    out_dir: str | os.PathLike,
    settings: ProfileSettings = ProfileSettings(),
    lock_dir: str | None = None,
) -> dict[str, Any]:
    """Profile one cell into ``out_dir`` (created; an old profile there is replaced). Returns ``profile.json``."""
    from specjoule import env as envmod
    from specjoule import gpu
    from specjoule.engines import make_engine
    from specjoule.meter import NoneMeter, make_meter
    from specjoule.records import write_atomic
    from specjoule.runner import _teardown, load_prompts

    settings.check()
    out = Path(out_dir)
    trace_dir = out / TRACE_SUBDIR
    for old in (out / PROFILE_FILE, out / TIMELINE_FILE):
        old.unlink(missing_ok=True)
    if trace_dir.exists():
        for f in trace_dir.iterdir():
            f.unlink()
    trace_dir.mkdir(parents=True, exist_ok=True)
    spec = engine_spec(table, cell, trace_dir, settings)
    output_len = profile_output_len(cell, settings.rounds)
    batch = int(cell.batch_size)
    timeout_s = float(spec.protocol.engine_ready_timeout_s)
    pool, pool_hash = load_prompts(cell.setup)

    def prompts_for(r: int) -> list[list[int]]:
        return [pool[(r * batch + i) % len(pool)] for i in range(batch)]

    result: dict[str, Any] = {
        "cell_id": cell.cell_id,
        "campaign_id": cell.campaign_id,
        "cell_name": cell.name,
        "engine": cell.engine,
        "scheme": cell.scheme,
        "method": cell.method,
        "k": cell.k,
        "batch_size": batch,
        "acceptance_name": cell.acceptance_name,
        "configured_L": cell.configured_L,
        "device": cell.device,
        "cuda_graphs": cell.cuda_graphs,
        "prompt_len": cell.setup.workload.prompt_len,
        "profile_output_len": output_len,
        "cell_output_len": cell.setup.workload.output_len,
        "corpus_pool_hash": pool_hash,
        "settings": {**asdict(settings), "with_stack": uses_stack(cell.setup, settings)},
        "engine_overrides": settings.overrides or None,
        "git_commit": envmod.git_commit(),
        **{
            k: v
            for k, v in envmod.capture(cell.engine).items()
            if k in ("hostname", "host_cpu_model", "host_cpu_signature", "host_cpu_count")
        },
        # before the lease and the engine start: the host's one-core speed beside its host-side round (ADR 0254)
        "host_speed_mops": envmod.host_speed(),
    }
    lease = gpu.acquire(cell.device, n_gpus=spec.engine.n_gpus, lock_dir=lock_dir)
    meter = None
    engine = None
    timeline = None
    t_begin = time.monotonic()
    try:
        meter = make_meter(spec.campaign.meter, cell.device)
        meter.open()
        engine = make_engine(spec, out / ENGINE_LOG)
        result["engine_start_s"] = engine.start()
        if cell.acceptance_rates is not None and tuple(cell.acceptance_rates) != (spec.acceptance.rates or ()):
            engine.set_synthetic_rates(list(cell.acceptance_rates))  # the measurement's swap (ADR 0039)
        info = engine.info()  # after the swap: its engine_config names the rates this profile ran with
        result["engine_version"] = info.get("engine_version")
        result["engine_config"] = info.get("engine_config")
        sampling = not isinstance(meter, NoneMeter)
        if sampling:
            meter.start_sampling()
        for r in range(settings.warmup_batches):
            engine.generate_batch(prompts_for(r), output_len, timeout_s)
        log.info(
            "profile %s/%s: warm-up done (%d batch(es) of %d × %d tokens)",
            cell.campaign_id,
            cell.name,
            settings.warmup_batches,
            batch,
            output_len,
        )
        result["reference"] = _timed_batches(
            engine, prompts_for, (1, settings.reference_s), output_len, timeout_s, cell
        )
        started = engine.profile(
            "start",
            str(trace_dir.resolve()) if cell.engine == "sglang" else None,
            {"prefix": "specjoule", "with_stack": uses_stack(cell.setup, settings)},
        )
        result["profiler_start_s"] = started.get("seconds")
        result["profiled"] = _timed_batches(engine, prompts_for, (settings.batches, 0.0), output_len, timeout_s, cell)
        stopped = engine.profile("stop", str(trace_dir.resolve()) if cell.engine == "sglang" else None, {})
        result["profiler_stop_s"] = stopped.get("seconds")
        result["trace_files"] = [os.path.relpath(f, out) for f in stopped.get("files") or []]
        if sampling:
            meter.stop_sampling()
            timeline = meter.timeline()
        for part in ("reference", "profiled"):
            result[part]["nvml"] = nvml_window(timeline, result[part]["t_start"], result[part]["t_end"])
    finally:
        if engine is not None:
            _teardown(engine)
        if meter is not None:
            meter.stop_sampling()
            meter.close()
        lease.release()
    result["device_s"] = time.monotonic() - t_begin
    if not result.get("trace_files"):
        raise ProfileError(f"{cell.campaign_id}/{cell.name}: the engine's profiler wrote no trace under {trace_dir}")
    if timeline is not None:
        write_atomic(timeline, out / TIMELINE_FILE)
    (out / PROFILE_FILE).write_text(json.dumps(result, indent=1, default=str))
    log.info(
        "profile %s/%s: %s, round %.2f ms unprofiled, %.2f ms profiled, %.0f s of device time",
        cell.campaign_id,
        cell.name,
        result["trace_files"],
        result["reference"]["round_ms"] or float("nan"),
        result["profiled"]["round_ms"] or float("nan"),
        result["device_s"],
    )
    return result
