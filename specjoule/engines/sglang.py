"""SGLang adapter (issue 9): offline ``sglang.Engine`` in a child process group, or a
``python -m sglang.launch_server`` subprocess. Written against SGLang 0.5.17 (ADR 0016).

Same shape as the vLLM adapter: the engine runs in a session of its own (``start_new_session``),
teardown is one ``killpg`` that also reaches SGLang's scheduler and detokenizer processes, and the
cell process never imports sglang or torch.

Offline (closed batches): ``python -m specjoule.engines.sglang worker FD`` builds
``sglang.Engine(**kwargs)`` and answers init / generate / snapshot / stop over a socketpair. A batch
is one ``engine.generate(input_ids=[...B prompts...], sampling_params=...)``. Counters are
cumulative sums the worker keeps over the finished requests' ``meta_info`` (``MetaCounters``) — not
the ``/server_info`` accept-length totals, which SGLang refreshes only every 40 decode steps.

Counting (sglang/srt/managers/tokenizer_manager.py, 0.5.17):
* ``completion_tokens`` includes the token the prefill produced, so decode tokens = completion − 1;
* every verify step commits its accepted drafts + 1 (the bonus token), so per request the committed
  view is accepted = (completion − 1) − ``spec_verify_ct``, drafts = ``spec_verify_ct``; the record
  takes the scheduler's own ``spec_num_correct_drafts`` (counted before the last step is cut to
  max_new_tokens, as vLLM counts) and falls back to the committed view (``MetaCounters``);
* ``speculative_num_draft_tokens`` is the verify width *including* the root/bonus position
  (SGLang itself computes proposed drafts as verify_ct × (num_draft_tokens − 1)), so with a topk-1
  chain it is k + 1 and draft tokens = drafts × k;
* committed tokens = Σ completion_tokens — what vLLM's ``generation_tokens`` counts too (every
  output token, the first included), so the two engines' records compare.

Server (open loop; closed batches when forced): ``python -m sglang.launch_server`` on 127.0.0.1 and a
free port with ``--enable-metrics``; ready when ``/health`` answers 200; counters from ``/metrics``
(``sglang:*`` names, ``snapshot_from_prometheus``); prompts as token ids to ``/generate`` with
streaming, so TTFT/TPOT are measured at the client.

Synthetic acceptance: ``SGLANG_SIMULATE_ACC_LEN`` = the cell's configured mean acceptance length
(1 + Σ rates) and ``SGLANG_SIMULATE_ACC_METHOD=match-expected`` are put in the engine process's
environment before it starts (SGLang reads them at import). ``match-expected`` draws, once per
verify step for the whole batch, floor(L) or ceil(L) with the weights that make the mean L —
per request the minimum-variance distribution (``minvar``). A cell that is not synthetic gets both
variables *removed*, so a value left in the shell cannot fake a model-acceptance cell.

Environment of the engine process (``engine_env``): when ``SPECJOULE_SGLANG_PYTHONPATH`` is set, the
engine's PYTHONPATH is ``<repo root>:<that value>`` instead of the inherited one (SGLang 0.5.17 needs
transformers 5.12.1 and its own package set, kept in a site dir apart from vLLM's); else the repo
root is prepended to the inherited PYTHONPATH. ``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1`` and
``SGLANG_USE_SGL_FA3_KERNEL=1`` are set only when not already set.

A multimodal-wrapper target (a ``vision_config`` beside its text config, e.g. Qwen3.6-35B-A3B) gets
``enable_multimodal=False``: 0.5.17's tokenizer manager loads the HF processor even with ``skip_tokenizer_init``, and a
shape-only dir has none (ADR 0211). ``launch_server`` cannot say False, so such a server cell is refused.

Detected, not assumed (``probe``, run in the engine's interpreter): SGLang/torch/CUDA versions, the
``ServerArgs`` dataclass fields and CLI option strings (the CUDA-graph flags changed between 0.5.12
and 0.5.23: 0.5.17 has ``cuda_graph_max_bs_decode`` and a Python-only ``disable_cuda_graph``), the
speculative algorithms ``SpeculativeAlgorithm.from_string`` accepts, and the simulate methods.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specjoule import env as envmod
from specjoule import schemes
from specjoule.cellspec import CellSpec
from specjoule.engines import proc
from specjoule.engines.base import (
    BatchResult,
    CounterDelta,
    CounterSnapshot,
    EngineError,
    EngineUnsupported,
    Histogram,
    RequestResult,
)
from specjoule.engines.server import TEARDOWN_GRACE_S, ServerProcessEngine, StreamTally
from specjoule.engines.vllm import _model_path
from specjoule.engines.worker import WorkerProcessEngine, accept_init, report_start_failure, serve
from specjoule.models import is_multimodal_wrapper

log = logging.getLogger("specjoule.engine")

# Offline TTFT/TPOT from meta_info timestamps (request_result). Records before 2026-12-01 say
# "request_metrics" for SGLang: their latency came from decode_throughput and is wrong (aggregate nulls it).
LATENCY_SOURCE_OFFLINE = "request_timestamps"

REPO_ROOT = Path(__file__).resolve().parents[2]

# scheme method → SGLang --speculative-algorithm (0.5.17 builtins: EAGLE, EAGLE3, NEXTN, STANDALONE,
# NGRAM, DFLASH, DSPARK; server_args.py "speculative_algorithm" help text); read from specjoule/schemes.py.
ALGORITHMS = {m: s.sglang_algorithm for m, s in schemes.SCHEMES.items() if s.sglang_algorithm}
# SGLANG_SIMULATE_ACC_METHOD values of 0.5.17 (speculative/spec_utils.py, _sample_simulated_acc_len):
# "match-expected" (floor/ceil with mean L: what we use) and "multinomial" (round(clamp(N(L, 1)))): its
# mean is not L near the clamps, so it is never used here.
SIMULATE_METHOD = "match-expected"
SIMULATE_ENV = ("SGLANG_SIMULATE_ACC_LEN", "SGLANG_SIMULATE_ACC_METHOD", "SGLANG_SIMULATE_ACC_TOKEN_MODE")
# Environment variables that change how SGLang builds or runs the engine; recorded in engine_config as
# env_<NAME>, except the simulate ones: those are the arm's own (synthetic acceptance), recorded as
# speculative_simulate_* so that the campaign check (analysis/checks.py, ENGINE_CONFIG_ARM_PREFIXES)
# treats them like the other speculative_* keys instead of failing every synthetic arm on them.
ENGINE_ENV_VARS = (
    "SGLANG_USE_SGL_FA3_KERNEL",
    # how a tensor-parallel engine all-reduces (ADR 0155): part of what its energy measured
    "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
)

# -- arguments (pure: testable without sglang) -------------------------------------------------


def configured_length(spec: CellSpec | Mapping[str, Any]) -> float | None:
    """The cell's configured mean acceptance length, 1 + Σ rates (specjoule.acceptance)."""
    rates = CellSpec.of(spec).acceptance.rates
    return 1.0 + float(sum(rates)) if rates else None


def speculative_kwargs(spec: CellSpec | Mapping[str, Any]) -> dict[str, Any]:
    """``ServerArgs`` speculative fields for a cell's scheme (SGLang 0.5.17; ADR 0076).

    Every algorithm gets ``speculative_num_draft_tokens`` = k + 1, the tokens verified per request per pass
    (root / bonus position included), so that SGLang's own proposed-draft count, verify_ct × (num_draft_tokens − 1),
    is verify_ct × k on every path (MetaCounters). Chains (STANDALONE, EAGLE3, NEXTN): k steps of topk 1.
    DFLASH / DSPARK: one step of topk 1 (their handlers force it), the verify window k + 1 = DFlash's block /
    DSpark's gamma + 1. NGRAM: a tree of k + 1 nodes. NEXTN drafts with the target's own MTP layers, so its draft
    path is the target (SGLang defaults it only for DeepSeek / GLM-MoE-style targets). Drafters of shape-only
    dirs load as the target does (``speculative_draft_load_format``)."""
    spec = CellSpec.of(spec)
    scheme = spec.scheme
    method = scheme.method
    if method == "baseline":
        return {}
    if method not in ALGORITHMS:
        raise EngineUnsupported(
            f"scheme {scheme.name!r}: method {method!r} has no SGLang speculative algorithm "
            f"(known: {', '.join(sorted(ALGORITHMS))})"
        )
    desc = schemes.get(method)
    k = scheme.draft_tokens
    kw: dict[str, Any] = {
        "speculative_algorithm": ALGORITHMS[method],
        "speculative_num_draft_tokens": desc.verify_width(k),
    }
    if desc.kind in ("draft_model", "head_chain"):
        kw.update(speculative_num_steps=k, speculative_eagle_topk=1)
    elif desc.kind == "block":
        kw.update(speculative_num_steps=1, speculative_eagle_topk=1)
    target_format = spec.engine.target.load_format
    if desc.needs_pair_draft:
        draft = spec.engine.draft
        if draft is None or not draft.entry.get("model"):
            raise EngineError(f"scheme {scheme.name!r} ({method}) needs the pair's draft model")
        kw["speculative_draft_model_path"] = _model_path(draft.model)
        if draft.load_format != "auto":
            kw["speculative_draft_load_format"] = draft.load_format
    elif desc.needs_drafter or (desc.drafter_optional and scheme.drafter):
        if not scheme.drafter:
            raise EngineError(f"scheme {scheme.name!r} ({method}) needs a drafter (schemes.{scheme.name}.drafter)")
        kw["speculative_draft_model_path"] = _model_path(scheme.drafter)
        if target_format != "auto":
            kw["speculative_draft_load_format"] = target_format
    elif desc.needs_target_mtp:
        kw["speculative_draft_model_path"] = _model_path(spec.engine.target.model)
        if target_format != "auto":
            kw["speculative_draft_load_format"] = target_format
    kw.update(schemes.engine_options(scheme.options))  # pass-through last (speculative_ngram_*, …)
    return kw


def engine_kwargs(spec: CellSpec | Mapping[str, Any]) -> dict[str, Any]:
    """``sglang.Engine(**kwargs)`` / ``ServerArgs`` field names (0.5.17) for a cell (ADR 0016).

    ``spec.batch_size`` is the largest B of the engine group (runner._engine_spec), so the
    running-request cap and the decode CUDA-graph size cover every cell on this engine.
    """
    spec = CellSpec.of(spec)
    engine = spec.engine
    target = engine.target
    options = dict(engine.options)
    options.pop("env", None)  # environment variables, not arguments (engine_env)
    batch = int(spec.batch_size)
    kw: dict[str, Any] = {
        "model_path": _model_path(target.model),
        "load_format": target.load_format,
        "dtype": target.dtype,
        "tp_size": target.tensor_parallel_size,
        # Prompts go in as token ids and text is never needed.
        "skip_tokenizer_init": True,
        "random_seed": int(spec.seed),
        # Repeated prompts would turn prefill into cache hits (ARCHITECTURE.md: measure with it off).
        "disable_radix_cache": not engine.prefix_caching,
        # Per-request timestamps in meta_info (request_result) and /metrics on a server.
        "enable_metrics": True,
    }
    if target.tokenizer:
        kw["tokenizer_path"] = _model_path(target.tokenizer)
    if is_multimodal_wrapper(target.model):
        # SGLang builds an HF processor for a multimodal model even with skip_tokenizer_init, and a shape-only dir
        # has none to load; text decoding needs none (ADR 0211). The vision tower is still built: 0.5.17 has no
        # switch that skips it for this architecture.
        kw["enable_multimodal"] = False
    if engine.max_model_len:
        kw["context_length"] = int(engine.max_model_len)
    if engine.cuda_graphs:
        kw["cuda_graph_max_bs_decode"] = batch  # renamed for older/newer SGLang by adapt_kwargs
    else:
        kw["disable_cuda_graph"] = True  # both phases (0.5.17: a Python-only legacy switch, see server_command)
    kw.update(speculative_kwargs(spec))
    max_running = options.pop("max_running_requests", None)
    if max_running is not None and int(max_running) < batch and spec.workload.kind == "closed_batch":
        raise EngineError(
            f"engine_options.sglang.max_running_requests = {max_running} is below batch size {batch}: "
            f"the closed batch could not run all requests together"
        )
    kw["max_running_requests"] = int(max_running) if max_running is not None else batch
    kw.update(options)  # engine_options.sglang last: attention_backend, sampling_backend, mem_fraction_static …
    return kw


# Older / newer names of the same settings: (ours, alternatives in order of preference).
_RENAMES = {"cuda_graph_max_bs_decode": ("cuda_graph_max_bs",), "cuda_graph_max_bs": ("cuda_graph_max_bs_decode",)}


def adapt_kwargs(kw: dict[str, Any], fields: set[str] | list[str] | None, version: str | None = None) -> dict[str, Any]:
    """Rename to the installed ServerArgs' field names; refuse a name it does not have.

    ``fields`` None (not detected): pass through and let SGLang reject what it does not know."""
    if fields is None:
        return dict(kw)
    fields = set(fields)
    out: dict[str, Any] = {}
    for key, value in kw.items():
        if (
            key == "disable_cuda_graph"
            and key not in fields
            and {"disable_decode_cuda_graph", "disable_prefill_cuda_graph"} <= fields
        ):
            out["disable_decode_cuda_graph"] = out["disable_prefill_cuda_graph"] = value  # per-phase switches only
            continue
        if key not in fields:
            alt = next((a for a in _RENAMES.get(key, ()) if a in fields), None)
            if alt is None:
                raise EngineUnsupported(
                    f"SGLang {version or '?'}: ServerArgs has no field {key!r} (from the cell's "
                    f"engine arguments or engine_options.sglang); value {value!r}"
                )
            key = alt
        out[key] = value
    return out


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


# ServerArgs fields whose default is None (SGLang decides from the model) but whose CLI flag is a bare store_true:
# False cannot be said on the command line, and leaving the flag out means None, not False (0.5.17:
# server_args.py:584 enable_multimodal; arg_groups/arg_utils.py:313, Optional[bool] -> store_true; a --config YAML
# drops a False store_true too, server_args_config_parser.py:173). ADR 0211.
NONE_DEFAULT_FLAGS = ("enable_multimodal",)


def server_command(
    spec: CellSpec | Mapping[str, Any],
    host: str,
    port: int,
    kwargs: dict | None = None,
    cli_options: set[str] | list[str] | None = None,
) -> list[str]:
    """``python -m sglang.launch_server`` argv. ``cli_options``: the installed parser's option strings
    (``probe()["cli_options"]``); None = assume 0.5.17's."""
    kw = dict(kwargs if kwargs is not None else engine_kwargs(spec))
    opts = set(cli_options) if cli_options is not None else None
    cmd = [sys.executable, "-m", "sglang.launch_server", "--host", host, "--port", str(port)]
    if kw.pop("disable_cuda_graph", False):
        if opts is not None and "--disable-cuda-graph" in opts:
            cmd.append("--disable-cuda-graph")
        else:  # 0.5.17: disable_cuda_graph is no_cli; the per-phase switches say the same
            per_phase = ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]
            if opts is not None and not set(per_phase) <= opts:
                raise EngineUnsupported(
                    "sglang.launch_server has neither --disable-cuda-graph nor "
                    "--disable-decode-cuda-graph/--disable-prefill-cuda-graph: cannot turn CUDA graphs off"
                )
            cmd += per_phase
    kw["enable_metrics"] = True  # the server's counters are the record's counters
    for key, value in kw.items():
        flag = _flag(key)
        if value is None:
            continue
        if opts is not None and flag not in opts:
            raise EngineUnsupported(f"sglang.launch_server has no option {flag} (engine argument {key} = {value!r})")
        if isinstance(value, bool):
            if value:
                cmd.append(flag)
            elif opts is not None and "--no-" + flag[2:] in opts:
                cmd.append("--no-" + flag[2:])
            elif key in NONE_DEFAULT_FLAGS:
                raise EngineUnsupported(
                    f"sglang.launch_server cannot set {key} = False: {flag} is a store_true flag over a None "
                    f"default, and None lets SGLang decide from the model (a multimodal-wrapper target then loads an "
                    f"HF processor its shape-only dir lacks); the offline engine takes it (ADR 0211)"
                )
            # else: False is the store_true default
        elif isinstance(value, dict):
            cmd += [flag, json.dumps(value)]
        elif isinstance(value, (list, tuple)):
            cmd += [flag, *[str(v) for v in value]]
        else:
            cmd += [flag, str(value)]
    return cmd


def engine_env(spec: CellSpec | Mapping[str, Any] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The engine process's environment (module docstring)."""
    env = dict(os.environ if base is None else base)
    own = env.get("SPECJOULE_SGLANG_PYTHONPATH")
    if own:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), own])
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for key, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("SGLANG_USE_SGL_FA3_KERNEL", "1")):
        if not env.get(key):
            env[key] = value
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("DO_NOT_TRACK", "1")
    if spec is not None:
        # engine_options.sglang.env: settings that exist only as variables (e.g. SGLANG_ENABLE_JIT_DEEPGEMM)
        spec = CellSpec.of(spec)
        for key, value in (spec.engine.options.get("env") or {}).items():
            env[str(key)] = str(value)
        for key in SIMULATE_ENV:
            env.pop(key, None)
        if not spec.scheme.is_baseline and spec.scheme.synthetic:
            L = configured_length(spec)
            k = spec.scheme.draft_tokens
            if L is None or not (1.0 <= L <= k + 1 + 1e-9):
                raise EngineError(
                    f"scheme {spec.scheme.name!r}: synthetic acceptance needs a configured mean "
                    f"length in [1, k+1] = [1, {k + 1}], got {L!r} from rates {spec.acceptance.as_list()!r}"
                )
            env["SGLANG_SIMULATE_ACC_LEN"] = repr(round(float(L), 9))  # no float noise from summing rates
            env["SGLANG_SIMULATE_ACC_METHOD"] = SIMULATE_METHOD
            token_mode = spec.scheme.options.get(schemes.SIMULATE_TOKEN_OPTION)
            if token_mode is not None:  # else SGLang's default, fixed (ADR 0016, 0243)
                env["SGLANG_SIMULATE_ACC_TOKEN_MODE"] = str(token_mode)
    return env


# -- detection (runs in the engine's interpreter) ----------------------------------------------


def probe() -> dict[str, Any]:
    """What the importable SGLang can do. Imports sglang (and torch) — never in the cell process."""
    import argparse
    import importlib.util

    import sglang

    info: dict[str, Any] = {"engine_version": getattr(sglang, "__version__", None)}
    # --enable-metrics needs prometheus_client (a declared sglang dependency the offline bundle may lack)
    info["prometheus_client"] = importlib.util.find_spec("prometheus_client") is not None
    try:
        import torch

        info["torch_version"] = torch.__version__
        info["cuda_version"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    info["transformers_version"] = envmod.imported_version("transformers")
    try:
        from sglang.srt.server_args import ServerArgs

        info["fields"] = sorted(getattr(ServerArgs, "__dataclass_fields__", {}))
        parser = argparse.ArgumentParser(add_help=False)
        ServerArgs.add_cli_args(parser)
        info["cli_options"] = sorted(o for a in parser._actions for o in a.option_strings)
        algo_help = next((a.help or "" for a in parser._actions if "--speculative-algorithm" in a.option_strings), "")
    except Exception as exc:  # noqa: BLE001 - let SGLang reject what it cannot do
        info["fields"] = info["cli_options"] = None
        algo_help = ""
        info["probe_error"] = f"server_args: {type(exc).__name__}: {exc}"
    try:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        ok = []
        for name in sorted(set(ALGORITHMS.values())):
            try:
                SpeculativeAlgorithm.from_string(name)
                ok.append(name)
            except Exception:  # noqa: BLE001
                # NEXTN is an alias ServerArgs maps before the enum sees it (0.5.17 help text lists it).
                if name in algo_help:
                    ok.append(name)
        info["spec_algorithms"] = ok
    except Exception as exc:  # noqa: BLE001
        info["spec_algorithms"] = None
        info["probe_error"] = (info.get("probe_error", "") + f"; spec_info: {type(exc).__name__}: {exc}").lstrip("; ")
    try:
        from sglang.srt.speculative import spec_utils

        methods = []
        for m in ("match-expected", "multinomial"):
            try:
                spec_utils._sample_simulated_acc_len(2.5, m, 4)  # CPU tensors only
                methods.append(m)
            except ValueError:
                pass
        info["simulate_methods"] = methods
        info["simulate_acc_len"] = getattr(spec_utils, "SIMULATE_ACC_LEN", None)
        info["simulate_acc_method"] = getattr(spec_utils, "SIMULATE_ACC_METHOD", None)
        info["simulate_acc_token_mode"] = getattr(spec_utils, "SIMULATE_ACC_TOKEN_MODE", None)
    except Exception as exc:  # noqa: BLE001
        info["simulate_methods"] = None
        info["probe_error"] = (info.get("probe_error", "") + f"; spec_utils: {type(exc).__name__}: {exc}").lstrip("; ")
    return info


def check_supported(spec: CellSpec | Mapping[str, Any], info: dict) -> None:
    """Fail clearly when the cell asks for something this SGLang does not have."""
    spec = CellSpec.of(spec)
    scheme = spec.scheme
    method = scheme.method
    version = info.get("engine_version")
    if method != "baseline":
        algo = ALGORITHMS.get(method)
        if algo is None:
            raise EngineUnsupported(f"scheme {scheme.name!r}: method {method!r} has no SGLang speculative algorithm")
        if info.get("spec_algorithms") is not None and algo not in info["spec_algorithms"]:
            raise EngineUnsupported(
                f"scheme {scheme.name!r}: speculative algorithm {algo} ({method}) is not supported "
                f"by the installed SGLang {version} (it accepts: {', '.join(info['spec_algorithms'])})"
            )
    if not scheme.synthetic or method == "baseline":
        got = info.get("simulate_acc_len")
        if got is not None and float(got) > 0:
            raise EngineError(
                f"SGLANG_SIMULATE_ACC_LEN = {got} in the engine, but cell {scheme.name!r} measures the "
                f"model's own acceptance"
            )
    elif scheme.synthetic:
        if spec.engine.device == "cpu":
            raise EngineUnsupported("synthetic acceptance (SGLANG_SIMULATE_ACC_LEN) is measured on cuda only")
        methods = info.get("simulate_methods")
        if methods is not None and SIMULATE_METHOD not in methods:
            raise EngineUnsupported(
                f"scheme {scheme.name!r}: SGLang {version} has no SGLANG_SIMULATE_ACC_METHOD="
                f"{SIMULATE_METHOD} (it has: {', '.join(methods) or 'none'})"
            )
        want = configured_length(spec)
        got = info.get("simulate_acc_len")
        if got is not None and want is not None and abs(float(got) - want) > 1e-9:
            raise EngineError(f"SGLANG_SIMULATE_ACC_LEN in the engine is {got}, the cell configures {want}")
        want_mode = scheme.options.get(schemes.SIMULATE_TOKEN_OPTION)
        if want_mode is not None and "simulate_acc_token_mode" in info:
            got_mode = info["simulate_acc_token_mode"]
            if got_mode is None:
                raise EngineUnsupported(
                    f"scheme {scheme.name!r}: options.{schemes.SIMULATE_TOKEN_OPTION} = {want_mode!r}, but SGLang "
                    f"{version} has no SGLANG_SIMULATE_ACC_TOKEN_MODE"
                )
            if got_mode != want_mode:
                raise EngineError(
                    f"SGLANG_SIMULATE_ACC_TOKEN_MODE in the engine is {got_mode!r}, the cell configures {want_mode!r}"
                )


# -- effective configuration (ADR 0029) --------------------------------------------------------

_CONFIG_KEYS = (
    "disable_cuda_graph",
    "attention_backend",
    "decode_attention_backend",
    "prefill_attention_backend",
    "sampling_backend",
    "disable_overlap_schedule",
    "disable_radix_cache",
    "mem_fraction_static",
    "max_running_requests",
    "chunked_prefill_size",
    "context_length",
    "dtype",
    "tp_size",
    "load_format",
    "random_seed",
    "page_size",
    "max_prefill_tokens",
    "schedule_policy",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "speculative_draft_load_format",
    "speculative_attention_mode",
    "speculative_draft_attention_backend",
    "enable_metrics",
    "cuda_graph_max_bs",
    "cuda_graph_bs",
    "enable_torch_compile",
    "kv_cache_dtype",
    "disable_custom_all_reduce",
    "enforce_disable_flashinfer_allreduce_fusion",
    "flashinfer_allreduce_fusion_backend",
    "enable_symm_mem",
    "enable_torch_symm_mem",
)


def config_from_server_info(info: dict, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Flat dict of the settings that shape a measurement, from the *started* engine's resolved server
    args (``Engine.get_server_info()`` offline, ``/server_info`` on a server: the same dict).

    ``env``: the engine process's environment (default this process's: right in the offline worker).
    Not recorded: ``max_total_num_tokens`` (KV-cache capacity left after the weights — a draft model
    lowers it, so every STANDALONE arm would differ from its baseline on a number that is an outcome
    of memory, not a setting; it limits nothing at B ≤ max_running_requests)."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for key in _CONFIG_KEYS:
        if key in info and (info[key] is None or isinstance(info[key], (bool, int, float, str, list))):
            out[key] = info[key]
    cg = info.get("cuda_graph_config")
    if isinstance(cg, dict):  # 0.5.17: {"decode": {"backend", "max_bs", "bs", …}, "prefill": {…}}
        for phase in ("decode", "prefill"):
            p = cg.get(phase)
            if isinstance(p, dict):
                for k2 in ("backend", "max_bs", "bs"):
                    if k2 in p:
                        out[f"cuda_graph_{phase}_{k2}"] = p[k2]
    decode_backend = str(out.get("cuda_graph_decode_backend", "")).lower()
    graphs_off = bool(out.get("disable_cuda_graph")) or decode_backend in ("disabled", "backend.disabled")
    # The runner's engine_config_columns read vLLM's words: say the same thing in them.
    out["cudagraph_mode"] = "NONE" if graphs_off else (decode_backend.upper() or "ON")
    sizes = out.get("cuda_graph_decode_bs", out.get("cuda_graph_bs"))
    if isinstance(sizes, list):
        out["cudagraph_capture_sizes"] = sizes
    if "disable_overlap_schedule" in out:
        # SGLang's overlap scheduler (CPU scheduling of step n+1 while the GPU runs step n) is the
        # counterpart of vLLM's async scheduling; one column for both engines.
        out["async_scheduling"] = not bool(out["disable_overlap_schedule"])
    if info.get("enable_multimodal") is not None:
        # Set only for a multimodal-wrapper target run text-only (ADR 0211); None (SGLang decides from the model)
        # leaves every other record's engine_config as it was.
        out["enable_multimodal"] = bool(info["enable_multimodal"])
    out["speculative"] = bool(info.get("speculative_algorithm"))
    for name in ENGINE_ENV_VARS:
        if env.get(name) is not None:
            out[f"env_{name}"] = env[name]
    for name in SIMULATE_ENV:
        if env.get(name) is not None:
            out["speculative_" + name[len("SGLANG_") :].lower()] = env[name]
    out["engine_config_source"] = "server_args"
    return out


# -- counters from per-request meta_info -------------------------------------------------------


def finish_type(reason: Any) -> str | None:
    """0.5.17 gives finish_reason as a dict ({"type": "length", "length": N}) or None."""
    if reason is None:
        return None
    if isinstance(reason, dict):
        return str(reason.get("type")) if reason.get("type") is not None else None
    return str(reason)


@dataclass
class MetaSnapshot(CounterSnapshot):
    """A snapshot that knows whether its per-position counts are usable: a window whose either edge
    has lost them (a histogram that did not sum to accepted) gets none, never a negative difference."""

    per_pos_valid: bool = True

    def minus(self, before: CounterSnapshot) -> CounterDelta:
        delta = super().minus(before)
        if not (self.per_pos_valid and getattr(before, "per_pos_valid", True)):
            delta.accepted_per_pos = []
        return delta


@dataclass
class MetaCounters:
    """Cumulative counters over finished requests, in the names runner._row reads (ADR 0016).

    Accepted tokens are the scheduler's own count (``spec_num_correct_drafts``: drafts accepted by
    verification, counted before the output is cut to ``max_new_tokens``) — what vLLM's
    ``spec_decode_num_accepted_tokens`` counts too (its scheduler counts before the stop check). The
    committed view, (completion − 1) − spec_verify_ct, is lower by the drafts of the last step that
    fell past max_new_tokens (at most k per request); it is kept as ``spec_accepted_committed`` and is
    the fallback when meta_info lacks the scheduler's count. Why it matters: at L = k + 1 = 6 and 256
    output tokens the committed view reads 5.93, the scheduler's count 6.00.

    ``k`` is None for a baseline (no speculation counters at all)."""

    k: int | None
    counters: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    per_pos: list[float] = field(default_factory=list)
    per_pos_valid: bool = True

    def add(self, meta: dict) -> dict[str, Any]:
        """Count one finished request; return what it contributed (for logs and fixtures)."""
        c = int(meta["completion_tokens"])
        p = int(meta["prompt_tokens"])
        reason = finish_type(meta.get("finish_reason")) or "?"
        self._inc("prompt_tokens", p)
        self._inc("generation_tokens", c)
        self.finished[reason] = self.finished.get(reason, 0.0) + 1.0
        row: dict[str, Any] = {"completion_tokens": c, "prompt_tokens": p, "finish_reason": reason}
        if self.k is None:
            return row
        verify = int(meta.get("spec_verify_ct") or 0)  # absent when the request never verified
        committed_acc = (c - 1) - verify if verify > 0 else 0
        if committed_acc < 0:
            raise EngineError(f"meta_info inconsistent: completion_tokens {c} - 1 < spec_verify_ct {verify}")
        correct = meta.get("spec_num_correct_drafts") if verify > 0 else None
        accepted = int(correct) if correct is not None else committed_acc
        if correct is not None and not 0 <= accepted - committed_acc <= self.k:
            # Only the last verify step can be cut; anything else means the counting model is wrong.
            log.warning(
                "meta_info: spec_num_correct_drafts %s vs committed accepted %s (k=%s) for request %s",
                correct,
                committed_acc,
                self.k,
                meta.get("id"),
            )
            self._inc("spec_meta_inconsistent", 1)
        self._inc("spec_decode_num_drafts", verify)
        self._inc("spec_decode_num_draft_tokens", verify * self.k)
        self._inc("spec_decode_num_accepted_tokens", accepted)
        self._inc("spec_accepted_committed", committed_acc)
        row.update(
            spec_verify_ct=verify, accepted=accepted, accepted_committed=committed_acc, spec_num_correct_drafts=correct
        )
        hist = meta.get("spec_correct_drafts_histogram")
        # histogram[j] = verify steps that accepted j drafts → position i accepted in Σ_{j>i} histogram[j]
        if isinstance(hist, list) and hist:
            pos = [float(sum(hist[j] for j in range(i + 1, len(hist)))) for i in range(max(self.k, len(hist) - 1))]
            # The record's check wants Σ per position = accepted; a histogram that disagrees is not used.
            if int(sum(pos)) == accepted:
                self.per_pos += [0.0] * (len(pos) - len(self.per_pos))
                for i, v in enumerate(pos):
                    self.per_pos[i] += v
            else:
                self.per_pos_valid = False
        elif verify > 0:
            self.per_pos_valid = False
        return row

    def _inc(self, name: str, v: float) -> None:
        self.counters[name] = self.counters.get(name, 0.0) + float(v)

    def snapshot(self, running: float = 0.0) -> MetaSnapshot:
        return MetaSnapshot(
            time.monotonic(),
            dict(self.counters),
            dict(self.finished),
            list(self.per_pos),
            {},
            {"num_requests_running": running, "num_running_reqs": running},
            self.per_pos_valid,
        )


def request_result(meta: dict, output_len: int) -> RequestResult:
    """Latency per request from meta_info timestamps (latency_source ``request_timestamps``, ADR 0016):

    TTFT = ``prefill_finished_time`` − ``request_received_ts`` and TPOT = (``request_finished_ts`` −
    ``prefill_finished_time``) / (completion − 1), all realtime seconds (``--enable-metrics``). Never
    ``decode_throughput``: SGLang dates the first token when the tokenizer manager gets its first *output
    batch*, and a non-streamed request sends one only every SGLANG_FORCE_STREAM_INTERVAL (50) tokens or at
    the end; at L = 6 the output length never hits a multiple of 50, so on the H200 (0.5.17) it read TPOT
    ≈ 1e-8 s, and at L ≤ 3 it ran 20-40 % low. Without the timestamps: TPOT = e2e / completion (prefill
    included: an overestimate), TTFT unknown (null)."""
    c = int(meta.get("completion_tokens") or 0)
    reason = finish_type(meta.get("finish_reason"))
    e2e = meta.get("e2e_latency")
    received, prefilled, finished = (
        meta.get(k) for k in ("request_received_ts", "prefill_finished_time", "request_finished_ts")
    )
    ttft = tpot = None
    if received and prefilled and finished and c > 1 and finished > prefilled >= received:
        ttft = float(prefilled) - float(received)
        tpot = (float(finished) - float(prefilled)) / (c - 1)
    elif e2e is not None and c > 0:
        tpot = float(e2e) / c
    ok = reason in ("length", "stop") and c == output_len
    return RequestResult(
        prompt_tokens=int(meta.get("prompt_tokens") or 0),
        output_tokens=c,
        finish_reason=reason,
        ok=ok,
        ttft_s=ttft,
        tpot_s=tpot,
        error=None if ok else f"finish_reason={reason}, {c} tokens, expected {output_len}",
    )


def _sampling_params(output_len: int) -> dict[str, Any]:
    return {"max_new_tokens": int(output_len), "ignore_eos": True, "temperature": 0.0}


# -- counters from a server's /metrics -----------------------------------------------------------


def snapshot_from_prometheus(text: str, k: int | None, truncated: float = 0.0) -> CounterSnapshot:
    """From an SGLang server's ``/metrics`` (0.5.17 names, observability/metrics_collector.py).

    Counters move when a request finishes (``observe_one_finished_request``): generation_tokens_total
    = Σ completion_tokens, num_requests_total = finished requests, spec_verify_calls_total = Σ
    spec_verify_ct. SGLang exports no accepted-token counter, so accepted = generation − requests −
    verify calls (the per-request identity summed; exact for deltas, since it is linear) — the
    committed view. ``truncated``: Σ (spec_num_correct_drafts − committed accepted) over the requests
    the client has seen finish (``SglangServerEngine.complete``), added so that accepted is the
    scheduler's count, as offline and in vLLM (``MetaCounters``). Requests are filed as finished by
    "length" (closed batches ignore EOS) except the aborted ones. ``k`` None: a baseline, no
    speculation counters."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    gauges: dict[str, float] = {}
    hists: dict[str, dict] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.startswith("sglang:"):
                continue
            name = s.name[len("sglang:") :]
            if name.endswith("_created"):
                continue
            suffix = next((x for x in ("_bucket", "_count", "_sum") if name.endswith(x)), None)
            if suffix and fam.type in ("histogram", "unknown") and (suffix != "_bucket" or "le" in s.labels):
                h = hists.setdefault(name[: -len(suffix)], {"count": 0.0, "sum": 0.0, "buckets": {}})
                if suffix == "_bucket":
                    le = float(s.labels["le"])
                    h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
                else:
                    h[suffix[1:]] += s.value
            elif fam.type == "counter" or name.endswith("_total"):
                base = name[:-6] if name.endswith("_total") else name
                sums[base] = sums.get(base, 0.0) + s.value
            else:
                gauges[name] = gauges.get(name, 0.0) + s.value
    counters: dict[str, float] = {}
    for ours, theirs in (("prompt_tokens", "prompt_tokens"), ("generation_tokens", "generation_tokens")):
        if theirs in sums:
            counters[ours] = sums[theirs]
    requests = sums.get("num_requests", 0.0)
    aborted = sums.get("num_aborted_requests", 0.0)
    finished = {"length": max(0.0, requests - aborted), "abort": aborted}
    if k is not None and "spec_verify_calls" in sums:
        verify = sums["spec_verify_calls"]
        counters["spec_decode_num_drafts"] = verify
        counters["spec_decode_num_draft_tokens"] = verify * k
        committed = counters.get("generation_tokens", 0.0) - requests - verify
        counters["spec_accepted_committed"] = committed
        counters["spec_decode_num_accepted_tokens"] = committed + truncated
    if "num_running_reqs" in gauges:
        gauges["num_requests_running"] = gauges["num_running_reqs"]  # the name workloads.open_loop samples
    if "num_queue_reqs" in gauges:
        gauges["num_requests_waiting"] = gauges["num_queue_reqs"]  # vLLM's name, which the loop workloads read
    hists = {n: v for n, v in hists.items() if v["buckets"] or v["count"]}
    return CounterSnapshot(
        time.monotonic(),
        counters,
        finished,
        [],
        {n: Histogram(v["count"], v["sum"], v["buckets"]) for n, v in hists.items()},
        gauges,
    )


# -- process watching ----------------------------------------------------------------------------


class SglangGroupWatch(proc.GroupWatch):
    """The group leader and every process SGLang titled ``sglang::…`` (scheduler, detokenizer)."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.essential = {
            pid: proc.cmdline(pid) for pid in proc.group_members(pgid) if pid == pgid or "sglang::" in proc.cmdline(pid)
        }


def _spec_k(spec: CellSpec | Mapping[str, Any]) -> int | None:
    scheme = CellSpec.of(spec).scheme
    return None if scheme.is_baseline else scheme.draft_tokens


# -- offline engine (parent side) ----------------------------------------------------------------


class SglangOfflineEngine(WorkerProcessEngine):
    """``sglang.Engine`` in a worker process that leads its own process group."""

    label = "SGLang"
    worker_module = "specjoule.engines.sglang"
    teardown_grace_s = TEARDOWN_GRACE_S  # Engine.shutdown() stops its scheduler and frees the device

    def __init__(
        self,
        spec: CellSpec | Mapping[str, Any],
        log_file: str | os.PathLike | None = None,
        ready_timeout_s: float = 900.0,
        worker_cmd: list[str] | None = None,
    ) -> None:
        super().__init__(spec, log_file, ready_timeout_s, worker_cmd, engine_kwargs(spec))
        self.env = engine_env(spec)  # here, not at start: a bad synthetic length fails before any launch
        self.last_metas: list[dict] = []  # raw meta_info of the last batch (smoke script, fixtures)

    def worker_env(self) -> dict[str, str]:
        return self.env

    def make_watch(self, pgid: int) -> proc.GroupWatch:
        return SglangGroupWatch(pgid)

    def log_started(self) -> None:
        log.info(
            "engine: SGLang offline worker pid %d (own process group) starting: %s; env %s",
            self.proc.pid,
            json.dumps(self.kwargs, default=str),
            {k: self.env[k] for k in SIMULATE_ENV + ENGINE_ENV_VARS + ("PYTHONPATH",) if k in self.env},
        )

    def generate_batch(self, prompts: list[list[int]], output_len: int, timeout_s: float) -> BatchResult:
        msg = self._request(("generate", prompts, int(output_len)), timeout_s, f"generating a batch of {len(prompts)}")
        self.last_metas = msg[2]
        return msg[1]

    def snapshot(self) -> CounterSnapshot:
        return self._request(("snapshot",), 60.0, "reading counters")[1]

    @property
    def latency_source(self) -> str:
        return LATENCY_SOURCE_OFFLINE


# -- offline engine (worker side) ----------------------------------------------------------------


def profile_handler(engine: Any) -> Any:
    """The worker's ``("profile", "start"|"stop", trace_dir, options)`` handler (ADR 0095): SGLang's own
    ``Engine.start_profile`` / ``stop_profile`` (0.5.17: a torch profiler in the scheduler process, CPU and GPU
    activities, the trace exported to ``output_dir`` as ``<profile_id>-TP-<rank>.trace.json.gz`` on stop).
    ``options``: ``with_stack`` (Python frames; default False: 0.5.17 labels its speculative stages itself while a
    torch profiler runs, ``draft`` / ``draft_extend`` / ``step[TARGET_VERIFY …]``), ``prefix``."""
    from specjoule.engines.vllm import _trace_files

    state: dict[str, Any] = {"dir": None}

    def profile(action: str, trace_dir: str | None = None, options: dict | None = None) -> tuple:
        opts = dict(options or {})
        t0 = time.monotonic()
        if action == "start":
            if not trace_dir:
                raise EngineError("SGLang profile start needs a trace directory")
            os.makedirs(trace_dir, exist_ok=True)
            state["dir"] = os.path.abspath(trace_dir)
            state["before"] = set(_trace_files(state["dir"]))
            engine.start_profile(
                output_dir=state["dir"],
                activities=["CPU", "GPU"],
                with_stack=bool(opts.get("with_stack", False)),
                record_shapes=False,
                profile_prefix=str(opts.get("prefix") or "specjoule"),
            )
            files: list[str] = []
        elif action == "stop":
            if state["dir"] is None:
                raise EngineError("SGLang profile stop without a start")
            engine.stop_profile()
            files = [f for f in _trace_files(state["dir"]) if f not in state["before"]]
        else:
            raise EngineError(f"profile action {action!r}: expected start or stop")
        return (
            "profile",
            {
                "action": action,
                "trace_dir": state["dir"],
                "files": files,
                "t_monotonic": t0,
                "seconds": time.monotonic() - t0,
            },
        )

    return profile


def worker_main(fd: int) -> int:
    accepted = accept_init(fd)
    if accepted is None:
        return 1
    conn, payload = accepted
    spec = CellSpec.of(payload["spec"])
    try:
        info = probe()
        check_supported(spec, info)
        kwargs = adapt_kwargs(payload["kwargs"], info.get("fields"), info.get("engine_version"))
        if (
            kwargs.get("enable_metrics")
            and info.get("prometheus_client") is False
            and "enable_metrics" not in spec.engine.options
        ):
            # Offline only the per-request time stats need it: run without them (TPOT from e2e_latency,
            # TTFT null) rather than not at all; engine_config records enable_metrics false.
            log.warning(
                "prometheus_client is not importable in the SGLang environment: enable_metrics off, "
                "latency from e2e_latency only"
            )
            kwargs["enable_metrics"] = False
        import sglang

        engine = sglang.Engine(**kwargs)
    except BaseException as exc:  # noqa: BLE001 - report whatever broke the start
        return report_start_failure(conn, "SGLang", exc, traceback.format_exc())
    info.pop("fields", None)
    info.pop("cli_options", None)
    try:
        info["engine_config"] = config_from_server_info(engine.get_server_info())
    except Exception as exc:  # noqa: BLE001 - recording the config must never fail a start
        log.warning("engine config: not read (%s: %s)", type(exc).__name__, exc)
        try:
            info["engine_config"] = {
                **config_from_server_info(vars(engine.server_args)),
                "engine_config_source": "server_args_object",
            }
        except Exception:  # noqa: BLE001
            pass
    counts = MetaCounters(_spec_k(spec))

    def generate(prompts: list[list[int]], output_len: int) -> tuple:
        t0 = time.monotonic()
        outs = engine.generate(input_ids=[list(p) for p in prompts], sampling_params=_sampling_params(output_len))
        t1 = time.monotonic()
        if isinstance(outs, dict):
            outs = [outs]
        metas = [o["meta_info"] for o in outs]
        for m in metas:
            counts.add(m)
        results = [request_result(m, output_len) for m in metas]
        # Closed batch: B requests submitted together; the running gauge cannot be read while
        # generate() blocks this thread, so no samples (mean_running_requests stays null).
        return ("result", BatchResult(results, t0, t1, []), metas)

    conn.send(("ready", info))
    serve(
        conn,
        {"generate": generate, "profile": profile_handler(engine), "snapshot": lambda: ("snapshot", counts.snapshot())},
    )
    try:
        engine.shutdown()
    except Exception:  # noqa: BLE001 - the parent kills the group anyway
        pass
    conn.close()
    return 0


# -- server engine -------------------------------------------------------------------------------


def _probe_subprocess(env: dict[str, str], timeout_s: float = 300.0) -> dict[str, Any]:
    """``probe()`` in the engine's interpreter and environment (this process never imports sglang)."""
    out = subprocess.run(
        [sys.executable, "-m", "specjoule.engines.sglang", "probe"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    # SGLang may log to stdout on import: the answer is the last line that is a JSON object.
    line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
    if out.returncode != 0 or line is None:
        raise EngineError(f"SGLang probe failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(line)


class SglangStreamTally(StreamTally):
    """Streamed ``/generate`` objects: the tokens an object carried are the growth of
    ``meta_info.completion_tokens`` (works whether output_ids stream cumulatively or not); at the end the last
    ``meta_info`` goes to the engine's truncation tally (``on_close``)."""

    def __init__(self, on_close) -> None:
        self.meta: dict = {}
        self.count = 0
        self.on_close = on_close

    def feed(self, obj: dict) -> int:
        self.meta = obj.get("meta_info") or self.meta
        self.finish_reason = finish_type(self.meta.get("finish_reason"))
        c = int(self.meta.get("completion_tokens") or 0)
        grew = max(0, c - self.count)
        self.count = max(self.count, c)
        return grew

    def close(self) -> None:
        self.on_close(self.meta)


class SglangServerEngine(ServerProcessEngine):
    """``python -m sglang.launch_server`` on 127.0.0.1, in its own process group (``server.ServerProcessEngine``)."""

    label = "SGLang"
    group_watch = SglangGroupWatch

    def __init__(
        self,
        spec: CellSpec | Mapping[str, Any],
        log_file: str | os.PathLike | None = None,
        ready_timeout_s: float = 900.0,
        command: list[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(spec, log_file, ready_timeout_s, command, host, port, url)
        self.k = _spec_k(spec)
        self.kwargs = engine_kwargs(spec)
        self.env = engine_env(spec)
        # Σ (scheduler's accepted − committed accepted) over finished requests, from their final meta_info
        # (snapshot_from_prometheus ``truncated``). Requests finishing right at a window edge may land in
        # /metrics and here on different sides of it: at most k tokens each, open loop only.
        self._truncated = 0.0
        self._tally = threading.Lock()

    def start(self) -> float:
        t0 = time.monotonic()
        if self.url is not None:
            self._wait_ready(t0)
            self._info = self._server_info({})
            return time.monotonic() - t0
        self._bind()
        probed: dict[str, Any] = {}
        cmd = self._given_command()
        if cmd is None:
            probed = _probe_subprocess(self.env, timeout_s=min(300.0, self.ready_timeout_s))
            check_supported(self.spec, probed)
            if probed.get("prometheus_client") is False:
                raise EngineUnsupported(
                    "the SGLang server's counters need --enable-metrics, which needs "
                    "prometheus_client: not importable in the SGLang environment "
                    "(SPECJOULE_SGLANG_PYTHONPATH); add prometheus-client to its site"
                )
            kw = adapt_kwargs(self.kwargs, probed.get("fields"), probed.get("engine_version"))
            cmd = server_command(self.spec, self.host, self.port, kw, probed.get("cli_options"))
        self._launch(cmd, self.env, t0)
        self._info = self._server_info(probed)
        self._watch()
        return time.monotonic() - t0

    def server_info_raw(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/server_info", timeout=30.0) as r:
            return json.loads(r.read())

    def _server_info(self, probed: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {"server_url": self.url}
        for key in ("engine_version", "torch_version", "cuda_version", "transformers_version"):
            if probed.get(key):
                info[key] = probed[key]
        try:
            raw = self.server_info_raw()
            info["engine_config"] = config_from_server_info(raw, self.env)
            info.setdefault("engine_version", raw.get("version"))
        except Exception as exc:  # noqa: BLE001 - what the command set, said so in the source key
            log.warning("engine config: /server_info unavailable (%s); recording the server command's settings", exc)
            info["engine_config"] = {
                **config_from_server_info(self.kwargs, self.env),
                "engine_config_source": "server_command",
            }
        return info

    def generate_raw(self, prompt: list[int], output_len: int, stream: bool, timeout_s: float = 120.0) -> bytes:
        """One ``/generate`` call, the response body as bytes (smoke script: fixtures)."""
        body = {"input_ids": list(prompt), "sampling_params": _sampling_params(output_len), "stream": stream}
        req = urllib.request.Request(
            self.url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.read()

    def stream_request(self, prompt: list[int], output_len: int) -> tuple[str, dict]:
        return "/generate", {"input_ids": list(prompt), "sampling_params": _sampling_params(output_len), "stream": True}

    def new_tally(self) -> SglangStreamTally:
        return SglangStreamTally(self._count_truncation)

    def _count_truncation(self, meta: dict) -> None:
        if self.k is None or meta.get("spec_num_correct_drafts") is None or not meta.get("spec_verify_ct"):
            return
        committed = int(meta["completion_tokens"]) - 1 - int(meta["spec_verify_ct"])
        with self._tally:
            self._truncated += int(meta["spec_num_correct_drafts"]) - committed

    def parse_metrics(self, text: str, lean: bool = False) -> CounterSnapshot:  # lean: the whole page (not measured)
        with self._tally:
            truncated = self._truncated
        return snapshot_from_prometheus(text, self.k, truncated)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "worker":
        return worker_main(int(argv[1]))
    if argv and argv[0] == "probe":
        print(json.dumps(probe(), default=str))
        return 0
    if argv and argv[0] == "pickle-check":
        # What the worker sends the cell process, as the worker pickles it (tests/test_sglang_adapter.py)
        import base64
        import pickle

        snap = MetaSnapshot(t_monotonic=0.0, counters={}, finished={}, accepted_per_pos=[], histograms={}, gauges={})
        print(base64.b64encode(pickle.dumps(snap)).decode())
        return 0
    print("usage: python -m specjoule.engines.sglang worker FD | probe | pickle-check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    # Run as the imported module, not as __main__: what the worker pickles (MetaSnapshot) must name a
    # module the cell process can import. On the H200, `__main__.MetaSnapshot` failed to unpickle there.
    from specjoule.engines import sglang as _module

    sys.exit(_module.main(sys.argv[1:]))
