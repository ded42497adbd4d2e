"""Cross-field checks of a validated config: every value fine alone, the combination impossible (issue 21).

Each check is something a GPU job would otherwise find out late — after a lease, an idle-power reading and an
engine start — or never (a window the pre-registered check discards, a threshold no campaign can pass). The
error names the key of the value to change and, in its reason, the other key of the pair (ADR 0130).

Called by ``config.validate`` after the schema, the defaults and the semantic checks.
"""

from __future__ import annotations

import logging

from specjoule.config import NVML_UPDATE_S, ConfigError

log = logging.getLogger("specjoule.config")

# The GPU a memory estimate is held against when the config does not say (protocol.gpu_memory_gb): the largest
# single GPU the project measures on (H200, 141 GB). A batch refused against it fits no GPU in use here.
DEFAULT_GPU_MEMORY_GB = 141.0
# vLLM's default share of GPU memory for weights and KV cache (gpu_memory_utilization).
DEFAULT_MEMORY_SHARE = 0.9

# Thresholds whose measured quantity is never negative: a negative threshold fails every campaign.
_NEVER_NEGATIVE = {
    "baseline_drift_max": "the drift |opening - closing| / opening",
    "acceptance_length_tolerance": "|realized L - configured L|",
    "committed_spread_max": "the committed-token spread across arms",
    "concurrency_spread_max": "the spread of mean running requests across arms",
    "max_failed_requests": "a count of failed requests",
}
# Thresholds where a negative value checks nothing: most likely a typo, never what was meant to be pre-registered.
_MEANINGLESS_NEGATIVE = {
    "min_window_s": "a window length",
    "min_energy_updates": "a count of energy-counter updates",
    "forbidden_throttle_mask": "a bit mask of NVML clock-event reasons (a negative int sets every bit)",
}


def check(config: dict, raw: dict | None = None) -> None:
    """``raw``: the config as written, to say when a value in a message is a default (of device: cuda)."""
    _grid_size(config)
    _tokenizer_paths(config)
    _windows_against_the_window_check(config, raw or {})
    _thresholds_that_cannot_pass(config)
    _unused_acceptance_vectors(config)
    _lengths_against_max_model_len(config)
    _batch_against_engine_limits(config)
    _gpu_memory(config)


# Cells one plan may hold. The largest grid planned so far held ~14,000; a million is a typo (windows: 1000000),
# and building it would hang the plan (and Snakemake) instead of failing it.
MAX_CELLS = 1_000_000


def _grid_size(config: dict) -> None:
    """The number of cells, counted before they are built; refused beyond MAX_CELLS at the key that grew it most."""
    points = sum(
        len(s.get("acceptance", list(config["acceptance"]))) if s.get("synthetic") else 1
        for s in config["schemes"].values()
        if s["method"] != "baseline"
    )
    arms = (1 + int(config["protocol"]["closing_baseline"]) + points) * config["windows"]
    factors = {
        "engines": len(config["engines"]),
        "models": len(config["models"]),
        "workloads": len(config["workloads"]),
        "cuda_graphs": len(config["cuda_graphs"]),
        "engine_replicates": config["engine_replicates"],
        "batch_sizes": len(config["batch_sizes"]),
        "corpora": len(config["corpora"]),
        "seeds": len(config["seeds"]),
        "windows": config["windows"],
        "schemes": arms // config["windows"],
    }
    total = 1
    for n in factors.values():
        total *= n
    if total > MAX_CELLS:
        key = max(factors, key=lambda k: factors[k])
        value = (
            config[key]
            if key in ("engine_replicates", "windows")
            else sorted(config[key])
            if isinstance(config[key], dict)
            else config[key]
        )
        raise ConfigError(
            key,
            value,
            f"the grid would hold {total:,} cells ({' × '.join(f'{k} {n}' for k, n in factors.items() if n > 1)}); "
            f"more than {MAX_CELLS:,} cannot be planned, let alone measured",
        )


def _tokenizer_paths(config: dict) -> None:
    """A ``tokenizer`` that is neither the project's, a hub id nor an existing directory (models and drafters are
    checked in specjoule.models; a mistyped tokenizer dir would otherwise reach the engine as a hub id)."""
    from specjoule import models, tokenizer

    for pair_name, pair in config["models"].items():
        for role in ("target", "draft"):
            tok = (pair.get(role) or {}).get("tokenizer")
            if not tok or tok in tokenizer.SHIPPED_ALIASES:
                continue
            kind, path = models.classify_model_ref(tok)
            if kind == "missing":
                raise ConfigError(
                    f"models.{pair_name}.{role}.tokenizer",
                    tok,
                    f"no such local tokenizer directory ({path}); a local path is relative to the "
                    f"working directory or the repo, a hub id has the form org/name",
                )


def _metered(config: dict) -> bool:
    return config["device"] == "cuda" and config["meter"] != "none"


def _default_note(config: dict, raw: dict, section: str, key: str) -> str:
    """' (the default on device: cuda; ...)' when the config left ``section.key`` out and the device chose it."""
    if key in (raw.get(section) or {}):
        return ""
    return f" (its default on device: {config['device']}; the config does not set it)"


def _windows_against_the_window_check(config: dict, raw: dict) -> None:
    """A planned window shorter than the pre-registered ``checks.min_window_s`` fails the window check in every
    cell; an open-loop window too short for ``checks.min_energy_updates`` fails the counter check in every cell."""
    checks = config["checks"]
    min_window = checks["min_window_s"]
    for name, wl in config["workloads"].items():
        key = "min_window_s" if wl["kind"] == "closed_batch" else "window_s"
        if wl[key] < min_window:
            raise ConfigError(
                f"workloads.{name}.{key}",
                wl[key],
                f"shorter than the pre-registered checks.min_window_s = {min_window}"
                f"{_default_note(config, raw, 'checks', 'min_window_s')}: the window check "
                f"would discard every cell of this workload; lengthen the window, or pre-register a "
                f"shorter checks.min_window_s before anything runs",
            )
        if wl["kind"] != "closed_batch" and _metered(config):  # a loop's window is exactly window_s long
            possible = int(wl["window_s"] / NVML_UPDATE_S) + 1
            if checks["min_energy_updates"] > possible:
                raise ConfigError(
                    "checks.min_energy_updates",
                    checks["min_energy_updates"],
                    f"a {wl['window_s']} s window (workloads.{name}.window_s) sees at most {possible} "
                    f"updates of an energy counter that advances every {NVML_UPDATE_S * 1000:.0f} ms: "
                    f"the counter check could never pass",
                )


def _thresholds_that_cannot_pass(config: dict) -> None:
    checks = config["checks"]
    for key, what in _NEVER_NEGATIVE.items():
        if checks.get(key) is not None and checks[key] < 0:
            raise ConfigError(
                f"checks.{key}",
                checks[key],
                f"{what} is never negative, so this threshold can never pass: every campaign would be discarded",
            )
    for key, what in _MEANINGLESS_NEGATIVE.items():
        if checks.get(key) is not None and checks[key] < 0:
            raise ConfigError(
                f"checks.{key}",
                checks[key],
                f"{what} is never negative: a negative threshold checks nothing (0 says that on purpose)",
            )
    if checks["max_temperature_c"] <= 0:
        raise ConfigError(
            "checks.max_temperature_c",
            checks["max_temperature_c"],
            "a working GPU is warmer than 0 °C: this threshold can never pass",
        )


def _unused_acceptance_vectors(config: dict) -> None:
    """Vectors no synthetic scheme measures. With no synthetic scheme at all they are a plan that does not say what
    it runs (a scheme left ``synthetic: false``): an error. Left out of every scheme's explicit ``acceptance`` list,
    they are a selection (validation/h200-2026-12/config/h200-diag-graphs.yaml measures one of two on purpose): a warning."""
    used: set[str] = set()
    synthetic = [n for n, s in config["schemes"].items() if s.get("synthetic")]
    for name in synthetic:
        used.update(config["schemes"][name].get("acceptance", list(config["acceptance"])))
    for vname, vector in config["acceptance"].items():
        if vname in used:
            continue
        if not synthetic:
            raise ConfigError(
                f"acceptance.{vname}",
                vector,
                f"defined but never measured: no entry of schemes ({', '.join(config['schemes'])}) has "
                f"synthetic: true (acceptance vectors apply only to synthetic schemes); set synthetic: "
                f"true on the scheme meant, or remove the vector",
            )
        log.warning(
            "config %s: acceptance.%s = %r is defined but no synthetic scheme lists it (%s select others); "
            "it is not measured",
            config.get("name"),
            vname,
            vector,
            ", ".join(synthetic),
        )


def _target_positions(pair: dict) -> tuple[int | None, str]:
    """The longest sequence the target's config.json allows (max_position_embeddings, text_config first), and where
    that was read; None for a hub id or a config without it, or with RoPE scaling (the engine derives its own)."""
    from specjoule import models

    ref = pair["target"]["model"]
    kind, _ = models.classify_model_ref(ref)
    if kind != "local":
        return None, ""
    try:
        raw, path = models.read_config(ref)
    except models.ModelShapeError:
        return None, ""
    text: dict = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    if text.get("rope_scaling") or raw.get("rope_scaling"):
        return None, ""
    value = text.get("max_position_embeddings", raw.get("max_position_embeddings"))
    return (int(value), f"max_position_embeddings in {path}") if isinstance(value, int) else (None, "")


def _lengths_against_max_model_len(config: dict) -> None:
    for pair_name, pair in config["models"].items():
        positions, where = _target_positions(pair)
        set_len = pair.get("max_model_len")
        if set_len is not None and positions is not None and set_len > positions:
            raise ConfigError(
                f"models.{pair_name}.max_model_len",
                set_len,
                f"longer than the target allows ({positions}, {where}): the engine refuses to start",
            )
        limit, source = (set_len, f"models.{pair_name}.max_model_len") if set_len is not None else (positions, where)
        if limit is None:
            continue
        for wl_name, wl in config["workloads"].items():
            total = wl["prompt_len"] + wl["output_len"]
            if total > limit:
                raise ConfigError(
                    f"workloads.{wl_name}.output_len",
                    wl["output_len"],
                    f"prompt_len {wl['prompt_len']} + output_len {wl['output_len']} = {total} tokens "
                    f"exceed the {limit} of pair {pair_name!r} ({source}): the engine would refuse the "
                    f"prompts or cut the generations short, and the committed tokens would not be the "
                    f"configured ones",
                )


def _batch_against_engine_limits(config: dict) -> None:
    """``max_num_seqs`` (vLLM) or ``max_running_requests`` (SGLang) below a batch size: a closed batch cannot run
    its B requests together, and an open loop would record B as its cap while the engine caps lower."""
    biggest = max(config["batch_sizes"])
    for engine, key in (("vllm", "gpu_memory_utilization"), ("sglang", "mem_fraction_static")):
        value = (config["engine_options"].get(engine) or {}).get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1):
            raise ConfigError(
                f"engine_options.{engine}.{key}", value, "a share of the GPU's memory: a number in (0, 1]"
            )
    for engine, key in (("vllm", "max_num_seqs"), ("sglang", "max_running_requests")):
        if engine not in config["engines"]:
            continue
        value = (config["engine_options"].get(engine) or {}).get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"engine_options.{engine}.{key}", value, "a number of requests: a whole number >= 1")
        if value < biggest:
            i = config["batch_sizes"].index(biggest)
            raise ConfigError(
                f"engine_options.{engine}.{key}",
                value,
                f"below the largest batch size {biggest} (batch_sizes[{i}]): a closed batch could not run "
                f"its requests together, and an open loop would record batch_size {biggest} as the "
                f"cap of running requests while the engine caps at {value}",
            )


def _dtype_bytes(model: dict, raw: dict) -> int:
    dtype = str(model.get("dtype", "auto")).lower()
    if dtype == "auto":
        text: dict = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
        dtype = str(text.get("torch_dtype") or raw.get("torch_dtype") or raw.get("dtype") or "bfloat16").lower()
    from specjoule import models

    return models.DTYPE_BYTES.get(dtype.replace("torch.", ""), 2)


def _gpu_memory(config: dict) -> None:
    """A lower bound of the GPU memory the largest batch needs — weights plus the KV cache of B sequences of
    prompt + output + k tokens, activations and graphs left out — held against one GPU's memory share × the
    tensor-parallel GPUs. Only where the estimate can be made: cuda, a local target whose shape is known."""
    if config["device"] != "cuda":
        return
    from specjoule import models

    gb = config["protocol"].get("gpu_memory_gb")
    gpu_gb, gpu_source = (
        (gb, "protocol.gpu_memory_gb") if gb else (DEFAULT_GPU_MEMORY_GB, "an H200: protocol.gpu_memory_gb unset")
    )
    k_max = max([int(s["k"]) for s in config["schemes"].values() if s.get("k")] or [0])
    drafts_pair = any(s["method"] == "draft_model" for s in config["schemes"].values())
    biggest = max(config["batch_sizes"])
    for engine in config["engines"]:
        opts = config["engine_options"].get(engine) or {}
        share_key = "gpu_memory_utilization" if engine == "vllm" else "mem_fraction_static"
        share = float(opts.get(share_key) or DEFAULT_MEMORY_SHARE)
        share_source = f"engine_options.{engine}.{share_key}" if opts.get(share_key) else "the engine's default"
        kv_dtype = str(opts.get("kv_cache_dtype", "auto")).lower()
        for pair_name, pair in config["models"].items():
            parts = [("target", pair["target"])] + (
                [("draft", pair["draft"])] if drafts_pair and pair.get("draft") else []
            )
            shapes = []
            try:
                for role, model in parts:
                    if models.classify_model_ref(model["model"])[0] != "local":
                        raise models.ModelShapeError("model", model["model"], "not local")
                    raw, _ = models.read_config(model["model"])
                    shapes.append((role, models.describe(model["model"]), _dtype_bytes(model, raw)))
            except (models.ModelShapeError, OSError, KeyError, TypeError, ValueError):
                continue  # a hub id or a shape this module cannot count: the engine decides
            tp = int(pair["target"].get("tensor_parallel_size", 1))
            budget = gpu_gb * share * tp
            for wl_name, wl in config["workloads"].items():
                context = wl["prompt_len"] + wl["output_len"] + k_max
                weights = sum(shape.params_total * nbytes for _, shape, nbytes in shapes) / 1e9
                kv = (
                    sum(
                        biggest * shape.kv_bytes(context, 1 if kv_dtype.startswith("fp8") else nbytes)
                        for _, shape, nbytes in shapes
                    )
                    / 1e9
                )
                if weights + kv > budget:
                    i = config["batch_sizes"].index(biggest)
                    raise ConfigError(
                        f"batch_sizes[{i}]",
                        biggest,
                        f"does not fit one GPU: pair {pair_name!r} on {engine} with workload {wl_name!r} "
                        f"needs at least ≈ {weights + kv:.1f} GB (weights {weights:.1f} GB + KV cache "
                        f"{kv:.1f} GB for {biggest} sequences × {context} tokens; "
                        f"activations and graphs not counted) but {tp} GPU(s) of {gpu_gb:g} GB "
                        f"({gpu_source}) × memory share {share:g} ({share_source}) hold {budget:.1f} GB",
                    )
