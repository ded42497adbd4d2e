"""Where a speculation round's time goes, from the engine's own torch profiler trace (ADR 0095).

    python -m specjoule.analysis.rounds TRACE_DIR   # → TRACE_DIR/rounds.parquet (+ _detail, _kernels .parquet)
    python -m specjoule.analysis.rounds trim SRC DST [--rounds N] [--around-admission]   # a small copy of a trace
    python -m specjoule.analysis.rounds resummarize ROUNDS_DIR [--out P]   # an older SGLang table, admission out

TRACE_DIR holds the folders ``specjoule.profiling`` writes (``profile.json`` beside ``trace/*.json[.gz]``), at any
depth, or bare Chrome traces. One output row per profiled cell (engine, scheme, acceptance, B, engine overrides).

**Rounds.** A round is the time from one decode step's start to the next's, on the thread that runs the engine
step: vLLM marks every worker step with ``execute_context_<n>(<tokens>)_generation_<n>(<tokens>)`` (the worker's
profiler annotation, 0.26 and 0.32 alike; decode when the context count is 0); SGLang 0.5.17 marks each decode
round's drafting ``draft`` (``spec_stage_span``), its block drafters (DFLASH) only the verify step
``step[TARGET_VERIFY bs=…]``, a baseline's forward ``step[DECODE bs=…]``. Only full-batch
decode rounds followed by another decode round count (the last round of a batch runs into the next batch's
admission, and partial batches are the ramp-up). A round ends at a non-decode step: vLLM's prefill steps are
markers with a context count; SGLang's are ``step[EXTEND bs=… toks=…]`` (or another forward mode no decode round
runs, e.g. ``MIXED``, ``IDLE``), and a round whose interval holds one's start is admission, not counted (ADR 0232).

**Phases.** A GPU kernel (or copy) belongs to the phase whose labelled span, on the thread that launched it,
encloses its launch (innermost span wins), through the trace's launch–kernel correlation ids: CUDA-graph kernels
carry their ``cudaGraphLaunch``'s id. The label table ``PHASE_PATTERNS`` (read in the 0.26.0 / 0.5.17 sources):

- ``verify``: vLLM V1 ``gpu_model_runner: forward`` (the target's forward over the verified tokens); V2 (frames)
  ``…/v1/worker/gpu/model_runner.py(N): execute_model``; SGLang ``step[TARGET_VERIFY bs=…]``.
- ``draft``: vLLM V1 ``gpu_model_runner: draft`` (``propose_draft_token_ids``: every drafter pass); V2 (frames)
  ``…spec_decode/….py(N): propose``; SGLang ``draft`` and ``draft_extend``.
- ``sample``: vLLM V1 ``gpu_model_runner: sample`` (the rejection sampler); V2 (frames) ``model_runner.py(N):
  sample``. SGLang has no label around its accept step: it is in ``other``.

Kernels under no phase are ``other`` (input preparation, bookkeeping copies). **Host time** is the round's wall
time during which no kernel or copy ran on the GPU (union of device intervals, clipped to the round): time the GPU
waits for the host. On a CPU trace there are no kernels: phases are the labelled spans' wall time, host time the
rest, and the GPU columns are null (``profile_method`` says which).

**Kernel classes** (ADR 0249). Each phase's GPU time is split by what its kernels do, told from the kernel's name
alone: ``KERNEL_CLASSES`` is an ordered table of (class, regex), the first match wins (``norm``, ``moe``,
``attention`` with its KV-cache write and rotary embedding, ``gemm``, ``copy`` for memcpy/memset and torch's copy
kernels); a name no pattern finds is ``other`` (activations, logits, sampling, bookkeeping). The patterns were read
off the kernel names of the project's vLLM 0.26 and SGLang 0.5.17 traces (H100/H200: Qwen3, Qwen3-30B-A3B,
GLM-4.7-Flash, MiMo, Gemma 4 26B-A4B) and, for kernels those lack (flashinfer attention, vLLM's Triton attention),
the engines' sources. ``rounds_kernels.parquet``: one row per cell × phase × class; a phase's classes sum to its
``*_ms_per_round`` column.

**Round width** (vLLM). A decode step's annotation also says how many tokens it scheduled (requests × (1 + the
drafts they carry)): ``rounds_detail.parquet``'s ``scheduled_tokens``. A round that scheduled fewer than the widest
counted round carried fewer drafts than k (e.g. an n-gram proposer that found no match) and can run another CUDA
graph mode; ``rounds_narrower_than_widest`` counts them, and ``widest_round_ms_profiled`` /
``widest_host_ms_per_round`` are the widest rounds' own means (ADR 0249 addendum 5). Null for SGLang traces.

The profiler records every op on the host, so profiled rounds are longer than unprofiled ones; ``profile.json``
carries the unprofiled reference (same engine, same batches, no profiler) and NVML utilization for both, and the
table reports both round times and their ratio (``profiler_inflation``).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

PHASES = ("verify", "draft", "sample")

# (phase, regex over the event name, event categories it applies to). Innermost enclosing span wins.
_LABEL = ("user_annotation",)
_FRAME = ("python_function",)
PHASE_PATTERNS: tuple[tuple[str, re.Pattern, tuple[str, ...]], ...] = (
    ("verify", re.compile(r"^gpu_model_runner: forward$"), _LABEL),
    ("draft", re.compile(r"^gpu_model_runner: draft$"), _LABEL),
    ("sample", re.compile(r"^gpu_model_runner: sample$"), _LABEL),
    ("verify", re.compile(r"^step\[TARGET_VERIFY\b"), _LABEL),
    ("draft", re.compile(r"^draft(_extend)?$"), _LABEL),
    ("verify", re.compile(r"v1/worker/gpu/model_runner\.py\(\d+\): execute_model$"), _FRAME),
    ("sample", re.compile(r"v1/worker/gpu/model_runner\.py\(\d+\): sample$"), _FRAME),
    ("draft", re.compile(r"spec_decode/.+\.py\(\d+\): propose$"), _FRAME),
)

# Round markers, in order of preference: the first kind present in a trace is used.
VLLM_STEP = re.compile(r"^execute_(?:\d+_)?context_(\d+)\((?:sq)?\d+.*?\)_generation_(\d+)\((?:sq)?(\d+)")
SGLANG_DRAFT = re.compile(r"^draft$")
# SGLang 0.5.17's DFLASH worker drafts its block with no ``draft`` span: its drafter's forward and the target's
# verify are both ``step[TARGET_VERIFY bs=…]`` of one ``scheduler.run_batch`` (dflash_worker_v2.py
# forward_batch_generation: "1) Draft a fixed block", then verify). Such a trace's rounds are its run_batch spans
# holding verify steps, and every verify step of a run_batch but the last is the drafter's (ADR 0179).
SGLANG_VERIFY = re.compile(r"^step\[TARGET_VERIFY bs=(\d+)\]")
SGLANG_RUN_BATCH = "scheduler.run_batch"
SGLANG_DECODE = re.compile(r"^step\[DECODE bs=(\d+)\]")
# SGLang 0.5.17 names every forward ``step[<ForwardMode> bs=N]`` (``step[EXTEND bs=N toks=T]`` for a prefill):
# model_runner.py ``_build_step_span_name``. A decode round runs only these modes; any other (EXTEND, MIXED, IDLE,
# PREBUILT, SPLIT_PREFILL, DLLM_EXTEND, or one a later version adds) is admission or no decode, and ends the round.
SGLANG_STEP = re.compile(r"^step\[([A-Z][A-Z0-9_]*) bs=\d+")
SGLANG_ROUND_MODES = frozenset({"DECODE", "TARGET_VERIFY", "DRAFT_EXTEND", "DRAFT_EXTEND_V2"})

# Kernel classes: what a device event does, read from its name alone (ADR 0249). First match wins, so the order is
# part of the table: norm before gemm (Gemma's ``_gemma_qkv_rmsnorm_kernel`` contains "gemm"; torch.compile's
# ``triton_red_fused_add_moe_forward_mul_rms_norm_0`` is the residual add + norm after the experts), moe before
# attention and gemm (vLLM's ``_fwd_kernel_ep_scatter_1`` is an expert scatter; MoE GEMMs may be CUTLASS), attention
# before gemm (FlashAttention 3 is ``cutlass::device_kernel<flash::FlashAttnFwdSm90…>``). A bare ``topk`` is no MoE
# pattern: SGLang's EAGLE drafter samples with ``_draft_topk1_partial_argmax_kernel``.
KERNEL_CLASSES: tuple[tuple[str, re.Pattern], ...] = (
    # flashinfer RMSNormKernel / FusedAddRMSNormKernel, vLLM rms_norm_kernel, Gemma's q/k and dual norms, SGLang's
    # fused_qknorm_warp, inductor's fused add + norm kernels, LayerNorm
    ("norm", re.compile(r"rms_?norm|layer_?norm|qk_?norm", re.IGNORECASE)),
    # fused_moe_kernel, moe_align_block_size, moe_sum(_reduce), count_and_sort_expert_tokens, vllm::moe::topkGating,
    # grouped_topk, the routers (_gemma4_routing_kernel, _router_triton_kernel), the expert-parallel scatter/gather,
    # and SGLang's torch.compiled expert combine: fused_moe.py moe_sum_reduce_torch_compile, which Inductor names
    # triton_{per,poi}_fused_copy__mul_sum_0 (taken for small token counts: the B = 32 baseline decode step has it)
    (
        "moe",
        re.compile(
            r"moe|expert|topkGating|topk_?softmax|grouped_topk|rout(er|ing)|_ep_(scatter|gather)"
            r"|^triton_\w+_fused_copy__mul_sum_\d+$",
            re.IGNORECASE,
        ),
    ),
    # The attention itself: FlashAttention (cutlass and CuTe builds, combine), flashinfer's prefill/decode and
    # state merges, vLLM's Triton kernel_unified_attention, SGLang's Triton extend ``_fwd_kernel`` and decode
    # ``_fwd_grouped_kernel_stage1`` / ``_fwd_kernel_stage2``; and what exists only for it: the KV-cache write
    # (reshape_and_cache, concat_and_cache_mla, store_kvcache, set_kv_buffer), its index/split/slot metadata, the
    # rotary embedding of q and k.
    (
        "attention",
        re.compile(
            r"attn|attention|flash_fwd|fmha|With(Paged|Ragged)?KVCache|MergeStates?"
            r"|^_fwd_(grouped_)?kernel(_stage[12]|_alibi)?$"
            r"|reshape_and_cache|concat_and_cache|store_kvcache|set_kv_buffer|kv_indices|kv_splits|slot_mapping"
            r"|prepare_varlen"
            r"|rope|rotary",
            re.IGNORECASE,
        ),
    ),
    # cuBLAS(Lt) nvjet_* and its split-K reduction, CUTLASS, sm90_xmma, gemv; "gemm" but not "gemma"
    ("gemm", re.compile(r"nvjet|cublas|cutlass|xmma|gemm(?!a)|gemv|matmul", re.IGNORECASE)),
    # data movement: the profiler's memcpy/memset events ("Memcpy DtoD …", "Memset (Device)"), the driver's
    # memcpy32_post, torch's copy and cat kernels
    ("copy", re.compile(r"memcpy|memset|copy_kernel_cuda|CatArrayBatchedCopy", re.IGNORECASE)),
)
# the order of the tables' rows and columns, not of the matching
KERNEL_CLASS_NAMES = ("attention", "moe", "gemm", "norm", "copy", "other")


@functools.lru_cache(maxsize=8192)
def kernel_class(name: str) -> str:
    """The class of a kernel (or copy) name in ``KERNEL_CLASSES``: the first pattern found in it, else ``other``."""
    for cls, pattern in KERNEL_CLASSES:
        if pattern.search(name):
            return cls
    return "other"


DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
FLOW_PHASES = (
    "s",
    "t",
    "f",
)  # Chrome-trace flow events (kineto's "ac2g" launch→kernel arrows); the analysis reads none
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
GRAPH_LAUNCH = re.compile(r"^(cudaGraphLaunch|cuGraphLaunch)")
KERNEL_LAUNCH = re.compile(r"^(cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel)")
SYNC = re.compile(r"Synchronize")


class TraceError(ValueError):
    """A trace the analysis cannot read or find rounds in; names the file."""


# -- reading -----------------------------------------------------------------------------------------


def read_trace(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError, EOFError) as exc:
        raise TraceError(f"{path}: not a readable Chrome trace ({type(exc).__name__}: {exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: no traceEvents list (not a torch profiler Chrome trace)")
    return data


@dataclass(frozen=True)
class Span:
    start: float  # µs
    end: float
    name: str
    thread: tuple


@dataclass
class Trace:
    """The events the analysis needs, in µs on the trace's clock."""

    markers: list[tuple[Span, int]]  # (step span, requests if a pure decode step else 0) of the chosen kind
    generation_requests: int  # vLLM: requests in decode summed over every step, mixed prefill steps included
    marker_kind: str
    phase_spans: dict[tuple, list[tuple[Span, str]]]  # thread → (span, phase), by start
    launches: list[tuple[float, float, str, tuple, int | None]]  # runtime calls: (ts, dur, name, thread, correlation)
    device: list[tuple[float, float, int | None, str]]  # kernels and copies: (ts, end, correlation, kernel class)
    phase_sources: frozenset[str]  # which event kinds marked phases: "labels", "python_frames"
    draft_by_step_order: bool = False  # SGLang DFLASH: drafter steps told from the target's by their order
    non_decode_starts: list[float] = field(default_factory=list)  # SGLang: starts of non-decode steps, sorted
    step_tokens: dict[float, int] = field(default_factory=dict)  # vLLM: a decode step's start → tokens it scheduled


def _thread(e: dict) -> tuple:
    return (e.get("pid"), e.get("tid"))


def _phase_of(name: str, cat: str) -> str | None:
    for phase, pattern, cats in PHASE_PATTERNS:
        if cat in cats and pattern.search(name):
            return phase
    return None


def parse(data: dict[str, Any]) -> Trace:
    vllm, draft, verify, decode, run_batch, non_decode = [], [], [], [], [], []
    step_tokens: dict[float, int] = {}
    generation = 0
    phase_spans: dict[tuple, list[tuple[Span, str]]] = {}
    launches, device = [], []
    sources: set[str] = set()
    for e in data["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat, name = e.get("cat", ""), e.get("name", "")
        ts, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
        if cat in DEVICE_CATS:
            device.append((ts, ts + dur, (e.get("args") or {}).get("correlation"), kernel_class(name)))
            continue
        if cat in RUNTIME_CATS:
            launches.append((ts, dur, name, _thread(e), (e.get("args") or {}).get("correlation")))
            continue
        span = Span(ts, ts + dur, name, _thread(e))
        if cat == "user_annotation":
            if (m := VLLM_STEP.match(name)) is not None:
                generation += int(m.group(2))
                if int(m.group(1)) == 0 and int(m.group(2)) > 0:
                    vllm.append((span, int(m.group(2))))
                    step_tokens[span.start] = int(m.group(3))
                else:  # a prefill (or empty) step ends the decode round before it
                    vllm.append((span, 0))
            elif SGLANG_DRAFT.match(name):
                draft.append((span, 0))
            elif (m := SGLANG_VERIFY.match(name)) is not None:
                verify.append((span, int(m.group(1))))
            elif name == SGLANG_RUN_BATCH:
                run_batch.append(span)
            elif (m := SGLANG_DECODE.match(name)) is not None:
                decode.append((span, int(m.group(1))))
            elif (m := SGLANG_STEP.match(name)) is not None and m.group(1) not in SGLANG_ROUND_MODES:
                non_decode.append(ts)
        phase = _phase_of(name, cat)
        if phase is not None:
            phase_spans.setdefault(span.thread, []).append((span, phase))
            sources.add("python_frames" if cat == "python_function" else "labels")
    by_order = False
    if verify and not draft and run_batch:
        verify, by_order = _rounds_of_run_batches(run_batch, verify, phase_spans)
    for spans in phase_spans.values():
        spans.sort(key=lambda x: (x[0].start, -x[0].end))
    # by time only: ties would compare thread tuples or correlation ids, which may be None
    launches.sort(key=lambda x: x[0])
    device.sort(key=lambda x: x[0])
    for kind, markers in (
        ("vllm_step", vllm),
        ("sglang_draft", draft),
        ("sglang_verify", verify),
        ("sglang_decode", decode),
    ):
        if markers:
            markers.sort(key=lambda x: x[0].start)
            return Trace(
                markers,
                generation,
                kind,
                phase_spans,
                launches,
                device,
                frozenset(sources),
                draft_by_step_order=by_order and kind == "sglang_verify",
                non_decode_starts=sorted(non_decode),
                step_tokens=step_tokens if kind == "vllm_step" else {},
            )
    return Trace([], generation, "none", phase_spans, launches, device, frozenset(sources))


def _rounds_of_run_batches(
    run_batch: list[Span], verify: list[tuple[Span, int]], phase_spans: dict[tuple, list[tuple[Span, str]]]
) -> tuple[list[tuple[Span, int]], bool]:
    """SGLang DFLASH: one round per ``scheduler.run_batch`` holding verify steps (marker: the run_batch span, count:
    its steps' batch size); in a run_batch with several verify steps, all but the last become ``draft`` phase
    spans. Returns (markers, whether any step was re-labelled)."""
    steps = sorted(verify, key=lambda x: x[0].start)
    starts = [sp.start for sp, _ in steps]
    markers, drafter_steps = [], set()
    for rb in sorted(run_batch, key=lambda x: x.start):
        lo, hi = bisect.bisect_left(starts, rb.start), bisect.bisect_left(starts, rb.end)
        inside = [st for st in steps[lo:hi] if st[0].thread == rb.thread]
        if not inside:
            continue
        markers.append((rb, inside[-1][1]))
        drafter_steps.update((sp.start, sp.end, sp.thread) for sp, _ in inside[:-1])
    if not drafter_steps:
        return verify, False
    for thread, spans in phase_spans.items():
        phase_spans[thread] = [
            (sp, "draft" if (sp.start, sp.end, sp.thread) in drafter_steps else ph) for sp, ph in spans
        ]
    return markers, True


# -- rounds ------------------------------------------------------------------------------------------


def decode_rounds(trace: Trace) -> list[tuple[float, float, int]]:
    """(start, end, requests) of every full-batch decode round followed by another decode step.

    vLLM markers carry the number of requests in decode (0 for prefill and empty steps), SGLang's verify step its
    batch size; SGLang's ``draft`` marker carries neither, so every one of its rounds counts as full. SGLang's
    prefill is no marker: a round whose interval holds a non-decode step's start is the next batch's admission
    and is not counted (ADR 0232)."""
    markers = trace.markers
    if not markers:
        return []
    if trace.marker_kind == "sglang_draft":
        full = 1
        counts = [1] * len(markers)
    else:
        counts = [n for _, n in markers]
        full = max(counts)
    admissions = trace.non_decode_starts
    out = []
    for i in range(len(markers) - 1):
        a, b = markers[i][0].start, markers[i + 1][0].start
        if bisect.bisect_left(admissions, a) < bisect.bisect_left(admissions, b):
            continue  # a non-decode step starts inside: admission, not a decode round
        if counts[i] == full and counts[i + 1] == full and full > 0:
            out.append(
                (markers[i][0].start, markers[i + 1][0].start, full if trace.marker_kind != "sglang_draft" else None)
            )
    return out


def _union_within(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of intervals clipped to [lo, hi)."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in clipped:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def _innermost_phase(spans: list[tuple[Span, str]], starts: list[float], t: float) -> str | None:
    """The phase of the innermost span (latest start) that encloses t."""
    i = bisect.bisect_right(starts, t) - 1
    while i >= 0:
        span, phase = spans[i]
        if span.start <= t < span.end:
            return phase
        i -= 1
        # spans are short and few per round: a bounded walk back finds any enclosing span
        if i >= 0 and t - spans[i][0].start > 5e6:
            break
    return None


@dataclass
class RoundStats:
    start: float
    end: float
    requests: int | None
    gpu_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys((*PHASES, "other"), 0.0))
    span_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    busy_ms: float = 0.0
    graph_launches: dict[str, int] = field(default_factory=dict)
    kernel_launches: dict[str, int] = field(default_factory=dict)
    syncs: int = 0
    sync_wait_ms: float = 0.0
    class_gpu_ms: dict[tuple[str, str], float] = field(default_factory=dict)  # (phase, kernel class) → ms
    scheduled_tokens: int | None = None  # vLLM: the tokens its decode step scheduled (requests × (1 + drafts))

    @property
    def wall_ms(self) -> float:
        return (self.end - self.start) / 1000.0


def round_stats(trace: Trace) -> list[RoundStats]:
    rounds = [RoundStats(a, b, n, scheduled_tokens=trace.step_tokens.get(a)) for a, b, n in decode_rounds(trace)]
    if not rounds:
        return []
    starts = [r.start for r in rounds]

    def round_of(t: float) -> RoundStats | None:
        i = bisect.bisect_right(starts, t) - 1
        return rounds[i] if i >= 0 and t < rounds[i].end else None

    span_starts = {th: [s.start for s, _ in spans] for th, spans in trace.phase_spans.items()}
    for spans in trace.phase_spans.values():
        open_until: dict[str, float] = {}  # phase → end of its outermost span so far (spans sorted by start)
        for span, phase in spans:
            if span.start < open_until.get(phase, float("-inf")):
                continue  # nested in a span of the same phase (a frame inside its label): counted once
            open_until[phase] = span.end
            r = round_of(span.start)
            if r is not None:
                r.span_ms[phase] += (span.end - span.start) / 1000.0
    phase_by_corr: dict[int, tuple[RoundStats, str]] = {}
    for ts, dur, name, thread, corr in trace.launches:
        r = round_of(ts)
        if r is None:
            continue
        spans = trace.phase_spans.get(thread, [])
        phase = _innermost_phase(spans, span_starts.get(thread, []), ts) if spans else None
        key = phase or "other"
        if GRAPH_LAUNCH.match(name):
            r.graph_launches[key] = r.graph_launches.get(key, 0) + 1
        elif KERNEL_LAUNCH.match(name):
            r.kernel_launches[key] = r.kernel_launches.get(key, 0) + 1
        if SYNC.search(name):
            r.syncs += 1
            r.sync_wait_ms += dur / 1000.0
        if corr is not None:
            phase_by_corr[corr] = (r, key)
    for a, b, corr, cls in trace.device:
        hit = phase_by_corr.get(corr) if corr is not None else None
        if hit is not None:
            r, phase = hit
            r.gpu_ms[phase] += (b - a) / 1000.0
            r.class_gpu_ms[(phase, cls)] = r.class_gpu_ms.get((phase, cls), 0.0) + (b - a) / 1000.0
    # device events are sorted by start: only those starting within one longest event before a round can reach it
    dev_starts = [d[0] for d in trace.device]
    longest = max((d[1] - d[0] for d in trace.device), default=0.0)
    for r in rounds:
        lo = bisect.bisect_left(dev_starts, r.start - longest)
        hi = bisect.bisect_left(dev_starts, r.end)
        r.busy_ms = _union_within([(d[0], d[1]) for d in trace.device[lo:hi]], r.start, r.end) / 1000.0
    return rounds


# -- one profiled cell -------------------------------------------------------------------------------


# each phase's column of rounds.parquet: its GPU ms per round (on a CPU trace, its labelled spans' wall ms)
PHASE_COLUMNS = {
    "verify": "verify_ms_per_round",
    "draft": "draft_ms_per_round",
    "sample": "sample_ms_per_round",
    "other": "other_gpu_ms_per_round",
}


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def summarize(rounds: list[RoundStats], has_device: bool, sources: frozenset[str]) -> dict[str, Any]:
    """Per-round means of one trace. GPU columns are null on a trace without device events (a CPU run)."""
    n = len(rounds)
    out: dict[str, Any] = {"rounds_profiled": n, "round_ms_profiled": _mean(r.wall_ms for r in rounds)}
    # "labels" wins where both marked phases (a frame nested in its phase's label adds nothing)
    labels = "labels" if "labels" in sources else ("python_frames" if sources else "no_phase_marks")
    if has_device:
        out["profile_method"] = f"{labels}+gpu_kernels"
        for p, column in PHASE_COLUMNS.items():
            out[column] = _mean(r.gpu_ms[p] for r in rounds)
        out["gpu_ms_per_round"] = _mean(r.busy_ms for r in rounds)
        out["host_ms_per_round"] = _mean(r.wall_ms - r.busy_ms for r in rounds)
        total_wall = sum(r.wall_ms for r in rounds)
        out["gpu_busy_fraction"] = sum(r.busy_ms for r in rounds) / total_wall if total_wall else None
    else:
        out["profile_method"] = f"{labels}+cpu_wall"
        for p in PHASES:
            out[PHASE_COLUMNS[p]] = _mean(r.span_ms[p] for r in rounds)
        out[PHASE_COLUMNS["other"]] = out["gpu_ms_per_round"] = out["gpu_busy_fraction"] = None
        out["host_ms_per_round"] = _mean(r.wall_ms - sum(r.span_ms.values()) for r in rounds)
    for p in PHASES:
        out[f"{p}_span_ms_per_round"] = _mean(r.span_ms[p] for r in rounds)
    for kind, attr in (("graph", "graph_launches"), ("kernel", "kernel_launches")):
        out[f"{kind}_launches_per_round"] = _mean(float(sum(getattr(r, attr).values())) for r in rounds) if n else None
        for p in ("draft", "verify"):
            out[f"{p}_{kind}_launches_per_round"] = (
                _mean(float(getattr(r, attr).get(p, 0)) for r in rounds) if n else None
            )
    out["syncs_per_round"] = _mean(float(r.syncs) for r in rounds) if n else None
    out["sync_wait_ms_per_round"] = _mean(r.sync_wait_ms for r in rounds) if n else None
    out.update(_widest_rounds(rounds, has_device))
    return out


def _widest_rounds(rounds: list[RoundStats], has_device: bool) -> dict[str, Any]:
    """vLLM: how many counted rounds scheduled fewer tokens than the widest (a step whose requests carried fewer
    drafts than k; such a step can leave the full CUDA graph, ADR 0249 addendum 5), and the widest rounds' own wall
    and host time, so that a mean over mixed rounds is not read as the drafted round's. Null where the trace does
    not say what each step scheduled (SGLang)."""
    tokens = [r.scheduled_tokens for r in rounds]
    if not rounds or any(t is None for t in tokens):
        return dict.fromkeys(("rounds_narrower_than_widest", "widest_round_ms_profiled", "widest_host_ms_per_round"))
    width = max(t for t in tokens if t is not None)
    widest = [r for r in rounds if r.scheduled_tokens == width]

    def host(r: RoundStats) -> float:
        return r.wall_ms - (r.busy_ms if has_device else sum(r.span_ms.values()))

    return {
        "rounds_narrower_than_widest": len(rounds) - len(widest),
        "widest_round_ms_profiled": _mean(r.wall_ms for r in widest),
        "widest_host_ms_per_round": _mean(host(r) for r in widest),
    }


def detail_rows(rounds: list[RoundStats]) -> list[dict[str, Any]]:
    """One row per round (``rounds_detail.parquet``): the distribution behind the means."""
    return [
        {
            "round": i,
            "wall_ms": r.wall_ms,
            "busy_ms": r.busy_ms,
            **{f"{p}_gpu_ms": r.gpu_ms[p] for p in (*PHASES, "other")},
            **{f"{p}_span_ms": r.span_ms[p] for p in PHASES},
            "graph_launches": sum(r.graph_launches.values()),
            "kernel_launches": sum(r.kernel_launches.values()),
            "syncs": r.syncs,
            "sync_wait_ms": r.sync_wait_ms,
            "scheduled_tokens": r.scheduled_tokens,
        }
        for i, r in enumerate(rounds)
    ]


def kernel_class_rows(rounds: list[RoundStats], row: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per phase × kernel class (``rounds_kernels.parquet``): the class's GPU ms per round, a mean over the
    counted rounds as the phase's column in ``row`` is, and its share of that phase. A phase's classes sum to its
    column; where the column is null (a draft not separable in the trace) its classes are too. A trace without
    kernels (a CPU run) has no rows."""
    if not str(row.get("profile_method")).endswith("+gpu_kernels"):
        return []
    out = []
    for phase in (*PHASES, "other"):
        phase_ms = row[PHASE_COLUMNS[phase]]
        for cls in KERNEL_CLASS_NAMES:
            ms = None if phase_ms is None else _mean(r.class_gpu_ms.get((phase, cls), 0.0) for r in rounds)
            share = ms / phase_ms if ms is not None and phase_ms else None
            out.append({"phase": phase, "kernel_class": cls, "kernel_ms_per_round": ms, "share_of_phase": share})
    return out


def analyze_trace(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One trace's row of ``rounds.parquet`` and its rows of ``rounds_detail.parquet``."""
    row, rounds = trace_rounds(path)
    return row, detail_rows(rounds)


def trace_rounds(path: str | Path) -> tuple[dict[str, Any], list[RoundStats]]:
    """One trace's row of ``rounds.parquet`` and the counted rounds it summarizes."""
    trace = parse(read_trace(path))
    if trace.marker_kind == "none":
        raise TraceError(
            f"{path}: no round markers (vLLM 'execute_context_…' step annotations or SGLang 'draft' / "
            f"'step[TARGET_VERIFY …]' / 'step[DECODE …]' labels): was the engine's profiler running "
            f"during decode?"
        )
    rounds = round_stats(trace)
    if not rounds:
        raise TraceError(
            f"{path}: {len(trace.markers)} step marker(s) but no two consecutive full-batch decode "
            f"rounds: profile longer batches (--rounds)"
        )
    row = summarize(rounds, bool(trace.device), trace.phase_sources)
    row["round_marker"] = trace.marker_kind
    # No span marked the drafting and no step order told it apart: its kernels are in other_gpu, so a draft
    # time of 0 would be a false reading. Null says "not separable in this trace".
    # how the draft phase was told apart: an engine label, the order of SGLang DFLASH's steps, or not at all
    has_draft = any(phase == "draft" for spans in trace.phase_spans.values() for _, phase in spans)
    row["draft_phase_source"] = ("step_order" if trace.draft_by_step_order else "label") if has_draft else None
    if not has_draft and trace.marker_kind == "sglang_verify":
        for key in (
            "draft_ms_per_round",
            "draft_span_ms_per_round",
            "draft_graph_launches_per_round",
            "draft_kernel_launches_per_round",
        ):
            row[key] = None
    # requests × decode steps over the whole trace: the engine counts one draft per request per verify step,
    # so this equals the profiled batches' draft counter (a cross-check of trace against counters)
    row["decode_request_steps"] = trace.generation_requests if trace.marker_kind == "vllm_step" else None
    return row, rounds


# the cell a profile is of, as profile.json names it
CELL_KEY = (
    "campaign_id",
    "cell_name",
    "engine",
    "scheme",
    "method",
    "k",
    "batch_size",
    "acceptance_name",
    "configured_L",
)
# what the profile ran on: the cell, the board, the engine, the host
IDENTITY = (
    *CELL_KEY,
    "device",
    "engine_version",
    "profile_output_len",
    "hostname",
    "host_cpu_model",
    "host_cpu_signature",  # ADR 0254: null in profiles before 2026-12-07
)
# what the profile measured of its host before the engine started (ADR 0254): a reading, not an identity
HOST_READINGS = ("host_speed_mops",)

# what keys a cell's rows in rounds_kernels.parquet: a row of rounds.parquet is one profile_dir
KERNEL_TABLE_KEY = (*CELL_KEY, "engine_overrides", "profile_dir")


@dataclass(frozen=True)
class ProfileTables:
    """One profiled cell's rows: of ``rounds.parquet``, ``rounds_detail.parquet`` and ``rounds_kernels.parquet``."""

    row: dict[str, Any]
    detail: list[dict[str, Any]]
    kernels: list[dict[str, Any]]


def analyze_profile(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One profiled cell's row (and its per-round rows) from ``profile.json`` and its trace(s)."""
    tables = profile_tables(folder)
    return tables.row, tables.detail


def profile_tables(folder: Path) -> ProfileTables:
    """One profiled cell's rows of the three tables from ``profile.json`` and its trace(s)."""
    meta_path = folder / "profile.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    traces = [folder / f for f in meta.get("trace_files") or []] or sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and re.search(r"\.json(\.gz)?$", p.name) and p.name != "profile.json"
    )
    if not traces:
        raise TraceError(f"{folder}: no trace file")
    row: dict[str, Any] = {k: meta.get(k) for k in (*IDENTITY, *HOST_READINGS)}
    cfg = meta.get("engine_config") or {}
    row["model_runner"] = cfg.get("model_runner")
    row["async_scheduling"] = cfg.get("async_scheduling")
    row["cudagraph_mode"] = cfg.get("cudagraph_mode")
    row["engine_overrides"] = (
        json.dumps(meta["engine_overrides"], sort_keys=True) if meta.get("engine_overrides") else None
    )
    stats, rounds = trace_rounds(traces[0])
    row.update(stats)
    ref, prof = meta.get("reference") or {}, meta.get("profiled") or {}
    row["round_ms_unprofiled"] = ref.get("round_ms")
    row["profiler_inflation"] = (
        row["round_ms_profiled"] / ref["round_ms"] if ref.get("round_ms") and row.get("round_ms_profiled") else None
    )
    row["rounds_counted"] = prof.get("rounds")  # the engine's own count over the profiled batches (cross-check)
    row["nvml_util_unprofiled"] = (ref.get("nvml") or {}).get("gpu_util")
    row["nvml_util_profiled"] = (prof.get("nvml") or {}).get("gpu_util")
    row["nvml_power_w_unprofiled"] = (ref.get("nvml") or {}).get("power_w")
    row["trace_file"] = str(traces[0].relative_to(folder)) if traces[0].is_relative_to(folder) else str(traces[0])
    row["profile_dir"] = str(folder)
    key = {k: row[k] for k in KERNEL_TABLE_KEY}
    return ProfileTables(
        row,
        [{"profile_dir": str(folder), **d} for d in detail_rows(rounds)],
        [{**key, **k} for k in kernel_class_rows(rounds, row)],
    )


def profile_folders(root: Path) -> list[Path]:
    """Folders holding a ``profile.json``, or (no such folder anywhere) the root itself if it holds a trace."""
    found = sorted({p.parent for p in root.rglob("profile.json")})
    return found or [root]


def analyze_dir_tables(root: str | Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``rounds.parquet``, ``rounds_detail.parquet`` and ``rounds_kernels.parquet`` of every profile under root
    (a table without rows is an empty frame)."""
    root = Path(root)
    if not root.is_dir():
        raise TraceError(f"{root}: not a directory")
    rows, details, kernels = [], [], []
    for folder in profile_folders(root):
        tables = profile_tables(folder)
        rows.append(tables.row)
        details.extend(tables.detail)
        kernels.extend(tables.kernels)
    return _frame(rows), _frame(details), _frame(kernels)


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


TABLE_COLUMNS = (
    "engine",
    "scheme",
    "acceptance_name",
    "batch_size",
    "engine_overrides",
    "rounds_profiled",
    "round_ms_unprofiled",
    "round_ms_profiled",
    "draft_ms_per_round",
    "verify_ms_per_round",
    "sample_ms_per_round",
    "other_gpu_ms_per_round",
    "host_ms_per_round",
    "gpu_busy_fraction",
    "nvml_util_unprofiled",
    "draft_graph_launches_per_round",
    "draft_kernel_launches_per_round",
    "syncs_per_round",
    "profile_method",
)


def format_table(df: pl.DataFrame) -> str:
    cols = [c for c in TABLE_COLUMNS if c in df.columns]
    lines = ["\t".join(cols)]
    for row in df.select(cols).iter_rows():
        lines.append("\t".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
    return "\n".join(lines)


def format_kernel_table(kernels: pl.DataFrame) -> str:
    """``rounds_kernels.parquet`` one line per cell and phase with GPU time: the phase's ms per round, then each
    kernel class's."""
    cell = ["engine", "scheme", "acceptance_name", "batch_size", "engine_overrides"]
    lines = ["\t".join([*cell, "phase", "phase_ms", *KERNEL_CLASS_NAMES])]
    if not kernels.height:
        return lines[0]
    for (_, phase), rows in kernels.group_by(["profile_dir", "phase"], maintain_order=True):
        ms = dict(zip(rows["kernel_class"], rows["kernel_ms_per_round"]))
        total = sum(v for v in ms.values() if v is not None)
        if not total:
            continue  # a phase without GPU time (SGLang's sample, a null draft): nothing to split
        first = rows.row(0, named=True)
        values = [*(first[c] for c in cell), phase, total, *(ms.get(c) for c in KERNEL_CLASS_NAMES)]
        lines.append("\t".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in values))
    return "\n".join(lines)


# -- tables written before ADR 0232 -------------------------------------------------------------------


def admission_rows(n_rows: int, batches: int, rounds_counted: float) -> list[int]:
    """Indices of the admission rounds in an SGLang per-round table written before ADR 0232.

    Its rows are the trace's marker intervals in order: each of the ``batches`` batches gives ``r`` decode rounds
    (``rounds_counted / batches``, the engine's own count) and every batch but the last one more interval that runs
    into the next batch's prefill. So ``n_rows = batches * r + batches - 1`` and the admission rounds are rows
    ``k * (r + 1) - 1``; where the table's length says otherwise, the structure is not this one and no row is named."""
    r = rounds_counted / batches if batches else 0.0
    if batches < 1 or r < 1 or r != int(r) or n_rows != batches * int(r) + batches - 1:
        raise TraceError(
            f"{n_rows} rows are not {batches} batch(es) of {r:g} rounds and {batches - 1} admission round(s) "
            f"(a table written since ADR 0232 has none to drop)"
        )
    return [k * (int(r) + 1) - 1 for k in range(1, batches)]


def _round_of_row(d: dict[str, Any]) -> RoundStats:
    r = RoundStats(0.0, d["wall_ms"] * 1000.0, None, busy_ms=d["busy_ms"], syncs=d["syncs"])
    r.gpu_ms = {p: d[f"{p}_gpu_ms"] for p in (*PHASES, "other")}
    r.span_ms = {p: d[f"{p}_span_ms"] for p in PHASES}
    r.graph_launches, r.kernel_launches = {"any": d["graph_launches"]}, {"any": d["kernel_launches"]}
    r.sync_wait_ms = d["sync_wait_ms"]
    return r


def resummarize(rounds_dir: str | Path) -> pl.DataFrame:
    """A committed ``rounds.parquet`` re-summarized from its ``rounds_detail.parquet`` without the admission rounds
    that SGLang tables written before ADR 0232 counted (named by ``admission_rows`` from each cell's
    ``profile.json``: profiled batches, under ``rounds_dir`` by campaign and cell). vLLM rows are unchanged (their
    prefill steps always ended a round). The detail has no per-phase launch counts: those columns are null."""
    rounds_dir = Path(rounds_dir)
    table = pl.read_parquet(rounds_dir / "rounds.parquet")
    detail = pl.read_parquet(rounds_dir / "rounds_detail.parquet")
    metas = {}
    for path in rounds_dir.rglob("profile.json"):
        meta = json.loads(path.read_text())
        metas[(meta.get("campaign_id"), meta.get("cell_name"))] = meta
    out = []
    for row in table.iter_rows(named=True):
        row = dict(row)
        row["admission_rows_dropped"] = 0
        if not str(row.get("round_marker") or "").startswith("sglang"):
            out.append(row)
            continue
        meta = metas.get((row["campaign_id"], row["cell_name"]))
        if meta is None:
            raise TraceError(f"{rounds_dir}: no profile.json for {row['campaign_id']}/{row['cell_name']}")
        rows = detail.filter(pl.col("profile_dir") == row["profile_dir"]).sort("round").to_dicts()
        drop = set(admission_rows(len(rows), int(meta["profiled"]["batches"]), float(row["rounds_counted"])))
        kept = [_round_of_row(d) for i, d in enumerate(rows) if i not in drop]
        method = str(row["profile_method"])
        labels = method.split("+")[0]
        stats = summarize(
            kept, method.endswith("+gpu_kernels"), frozenset() if labels == "no_phase_marks" else frozenset({labels})
        )
        for kind in ("graph", "kernel"):
            for p in ("draft", "verify"):
                stats[f"{p}_{kind}_launches_per_round"] = None
        if row.get("draft_ms_per_round") is None:  # not separable in that trace: stays unknown, not 0
            stats["draft_ms_per_round"] = stats["draft_span_ms_per_round"] = None
        stats.pop("profile_method")
        row.update(stats)
        unprofiled = row.get("round_ms_unprofiled")
        row["profiler_inflation"] = row["round_ms_profiled"] / unprofiled if unprofiled else None
        row["admission_rows_dropped"] = len(drop)
        out.append(row)
    return pl.DataFrame(out, infer_schema_length=None)


# -- trimming ------------------------------------------------------------------------------------------


def _window_around_first_admission(trace: Trace, rounds: int, src: str | Path) -> tuple[float, float, int]:
    """(lo, hi, intervals) of the ``rounds`` marker intervals before the first admission after the first decode
    step, the interval that holds it, and ``rounds`` after it."""
    starts = [s.start for s, _ in trace.markers]
    after_first = [t for t in trace.non_decode_starts if starts and t > starts[0]]
    if not after_first:
        raise TraceError(f"{src}: no non-decode step after the first decode step: no admission to keep")
    boundary = bisect.bisect_right(starts, after_first[0]) - 1  # the marker whose interval holds the admission
    if boundary + 1 >= len(starts):
        raise TraceError(f"{src}: no decode step after the first admission")
    first, last = max(0, boundary - rounds), min(len(starts) - 1, boundary + 1 + rounds)
    return starts[first], starts[last], last - first


def trim(
    src: str | Path, dst: str | Path, rounds: int = 6, around_admission: bool = False, drop_python_frames: bool = False
) -> dict[str, int]:
    """Write a copy of a trace that keeps its metadata and only the events of its first ``rounds`` decode rounds
    (plus the next step's marker, which closes the last one): a fixture or evidence file of a few hundred kB.

    ``around_admission``: keep instead the ``rounds`` marker intervals either side of the first admission (an
    SGLang non-decode step after the first decode step) and the interval that holds it: the batch boundary, for a
    fixture of how admission is told from decode (ADR 0232). ``rounds`` in the result counts the kept intervals.

    ``drop_python_frames``: leave out the Python stack frames (``python_function``; a ``with_stack`` profile holds
    ~95 % of its events there, 3.4 MB of a 3-round vLLM trim). Only where the copy reads the same: its rounds table
    row, without the frames, must equal the one with them, or nothing is written and ``TraceError`` says which
    column moved (a trace whose phases only frames mark keeps them)."""
    data = read_trace(src)
    trace = parse(data)
    if around_admission:
        lo, hi, kept = _window_around_first_admission(trace, rounds, src)
    else:
        kept_rounds = decode_rounds(trace)[:rounds]
        if not kept_rounds:
            raise TraceError(f"{src}: no decode rounds to keep")
        lo, hi, kept = kept_rounds[0][0], kept_rounds[-1][1], len(kept_rounds)
    closing = [s for s, _ in trace.markers if s.start >= hi][:1]
    hi_keep = closing[0].end if closing else hi
    corr_kept = {
        e.get("args", {}).get("correlation")
        for e in data["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS and lo <= float(e.get("ts", 0)) < hi_keep
    }
    events = []
    for e in data["traceEvents"]:
        if e.get("ph") in FLOW_PHASES:
            # launch→kernel arrows: only those of the kept span (a whole trace's are most of its events)
            if lo <= float(e.get("ts", 0.0)) < hi_keep:
                events.append(e)
            continue
        if e.get("ph") != "X":
            events.append(e)
            continue
        ts = float(e.get("ts", 0.0))
        if e.get("cat") in DEVICE_CATS:
            # a kernel still running at lo keeps the first round's busy time what it was in the whole trace
            keep = (e.get("args") or {}).get("correlation") in corr_kept or (
                ts < hi_keep and ts + float(e.get("dur", 0.0)) > lo
            )
        else:
            keep = lo <= ts < hi_keep or (
                ts < lo and ts + float(e.get("dur", 0.0)) > lo and e.get("cat") == "user_annotation"
            )
        if keep:
            events.append(e)
    if drop_python_frames:
        events = _without_python_frames(data, events, src)
    out = {**data, "traceEvents": events}
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wt") if dst.suffix == ".gz" else open(dst, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
    return {"events_in": len(data["traceEvents"]), "events_out": len(events), "rounds": kept}


def _without_python_frames(data: dict[str, Any], events: list[dict[str, Any]], src: str | Path) -> list[dict[str, Any]]:
    """``events`` less the Python stack frames, if the rounds read from them stay what they were with the frames."""
    framed = {**data, "traceEvents": events}
    bare_events = [e for e in events if e.get("cat") not in _FRAME]
    bare = {**data, "traceEvents": bare_events}
    readings = []
    for trace_data in (framed, bare):
        trace = parse(trace_data)
        readings.append(summarize(round_stats(trace), bool(trace.device), trace.phase_sources))
    moved = sorted(k for k in readings[0] if readings[0][k] != readings[1].get(k))
    if moved:
        raise TraceError(
            f"{src}: without its Python frames the trimmed trace reads otherwise ({', '.join(moved)}): keep them"
        )
    return bare_events


def write_tables(df: pl.DataFrame, detail: pl.DataFrame, kernels: pl.DataFrame, out: Path) -> str:
    """``rounds.parquet`` at ``out`` and, where they have rows, its ``_detail`` and ``_kernels`` tables beside it (a
    CPU trace has no kernels to class), each written atomically; returns the tables as printed."""
    from specjoule.analysis import write_parquet_atomic

    write_parquet_atomic(df, out)
    for table, suffix in ((detail, "_detail"), (kernels, "_kernels")):
        if table.height:
            write_parquet_atomic(table, out.with_name(out.stem + suffix + ".parquet"))
    return format_table(df) + (f"\n\n{format_kernel_table(kernels)}" if kernels.height else "")


def main(argv: list[str] | None = None) -> int:
    import argparse

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "resummarize":
        ap = argparse.ArgumentParser(
            prog="python -m specjoule.analysis.rounds resummarize",
            description="a rounds table written before ADR 0232, without its SGLang admission rounds",
        )
        ap.add_argument("rounds_dir", help="holds rounds.parquet, rounds_detail.parquet and the profile folders")
        ap.add_argument("--out", default=None, help="write the table here (nothing is written by default)")
        a = ap.parse_args(argv[1:])
        try:
            df = resummarize(a.rounds_dir)
        except TraceError as exc:
            print(f"rounds: {exc}", file=sys.stderr)
            return 2
        if a.out:
            from specjoule.analysis import write_parquet_atomic

            write_parquet_atomic(df, Path(a.out))
        print(format_table(df))
        return 0
    if argv and argv[0] == "trim":
        ap = argparse.ArgumentParser(prog="python -m specjoule.analysis.rounds trim")
        ap.add_argument("src")
        ap.add_argument("dst")
        ap.add_argument("--rounds", type=int, default=6)
        ap.add_argument(
            "--around-admission",
            action="store_true",
            help="keep the --rounds rounds either side of the first admission (the batch boundary) and it",
        )
        ap.add_argument(
            "--drop-python-frames",
            action="store_true",
            help="leave out the Python stack frames where the rounds read the same without them",
        )
        a = ap.parse_args(argv[1:])
        try:
            print(json.dumps(trim(a.src, a.dst, a.rounds, a.around_admission, a.drop_python_frames)))
        except TraceError as exc:
            print(f"rounds: {exc}", file=sys.stderr)
            return 2
        return 0
    ap = argparse.ArgumentParser(
        prog="python -m specjoule.analysis.rounds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("trace_dir")
    ap.add_argument("--out", default=None, help="default TRACE_DIR/rounds.parquet")
    a = ap.parse_args(argv)
    try:
        df, detail, kernels = analyze_dir_tables(a.trace_dir)
    except TraceError as exc:
        print(f"rounds: {exc}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else Path(a.trace_dir) / "rounds.parquet"
    print(write_tables(df, detail, kernels, out))
    print(f"rounds: {df.height} profile(s) → {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
