"""Parse and validate a specjoule config.

Two layers: the JSON schema in ``config/schema.yaml`` (shape, types, unknown keys, defaults) and
the semantic checks here (names that must exist, acceptance vectors that must be realisable,
what the device and engine can run). Every error names the key path and the offending value.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from specjoule import acceptance as acc
from specjoule import schemes as scheme_registry
from specjoule.models import check_models

# The scheme lists live in specjoule/schemes.py (one source of truth, ADR 0075); re-exported here.
from specjoule.schemes import DRAFT_MODEL_METHODS as DRAFT_MODEL_METHODS  # re-exported
from specjoule.schemes import DRAFTER_METHODS, METHODS

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO_ROOT / "config" / "schema.yaml"

ENGINES = ("vllm", "sglang")
# Section names (models, schemes, corpora, workloads, acceptance) build record paths, ids and shell words:
# nothing a shell or a path treats specially (issue 21 item 3, ADR 0131).
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")
CORPUS_SOURCES = ("random", "file", "hf", "package", "builtin")

log = logging.getLogger("specjoule.config")

# Paper grade (issue 17 item 7, ADR 0097): what a GPU campaign must hold to be compared with the paper. The
# schema's ``x-cuda-default`` fills these where a cuda config leaves them out; ``paper_grade`` decides what an
# explicit lower setting does.
PAPER_OUTPUT_LEN = 512  # generated tokens per request, as the paper
PAPER_MIN_SEEDS = 3  # prompt samples, as the paper
# NVML's energy counter advances every ~100 ms on Hopper (ADR 0011): one update is < 0.5 % of a window from 20 s.
NVML_UPDATE_S = 0.1
PAPER_WINDOW_SHARE = 0.005
PAPER_MIN_WINDOW_S = NVML_UPDATE_S / PAPER_WINDOW_SHARE
# Draft tokens per round a scheme may ask for: 8x the largest block drafter in use (16).
MAX_K = 128


class ConfigError(ValueError):
    """A config problem, reported as ``key: value — reason``."""

    def __init__(self, key: str, value: Any, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"config error at {key} = {value!r}: {reason}")


def _schema() -> dict:
    """The schema, read once per file version and shared: parsing it is most of a validation's time, and a plan
    validates and hashes several times (the fuzzer thousands). It is read-only (:class:`_FrozenDict`,
    :class:`_FrozenList`): a caller that changes it gets a TypeError, never a schema changed for every later
    validation; ``copy.deepcopy`` of any part gives plain, changeable dicts and lists (a filled-in default)."""
    stat = SCHEMA_PATH.stat()
    return _read_schema(str(SCHEMA_PATH), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _read_schema(path: str, mtime_ns: int, size: int) -> dict:
    with open(path) as fh:
        return _frozen(yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def _read_only(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise TypeError("the config schema is shared and read-only (config._schema()); copy.deepcopy a part to change it")


class _FrozenDict(dict):
    """A dict that refuses every change: the cached schema's mappings. jsonschema and the code here read it as a
    dict; a copy (``copy``, ``deepcopy``, ``dict(...)``, pickling) is a plain dict."""

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple:
        return (dict, (dict(self),))


class _FrozenList(list):
    """A list that refuses every change: the cached schema's arrays (enums, defaults); a copy is a plain list."""

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only
    append = clear = extend = insert = pop = remove = reverse = sort = _read_only

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple:
        return (list, (list(self),))


def _frozen(node: Any) -> Any:
    if isinstance(node, dict):
        return _FrozenDict((k, _frozen(v)) for k, v in node.items())
    if isinstance(node, list):
        return _FrozenList(_frozen(v) for v in node)
    return node


def _fill_defaults(instance: Any, schema: dict, root: dict, device: str | None = None) -> None:
    """Fill ``default`` values from the schema, recursing through properties, $ref and
    additionalProperties (jsonschema validates but does not fill). On ``device`` cuda a property's
    ``x-cuda-default`` replaces its ``default`` (paper-grade GPU defaults, ADR 0097)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = root["$defs"][name]
    if not isinstance(instance, dict):
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            use_cuda = device == "cuda" and "x-cuda-default" in sub
            instance[key] = copy.deepcopy(sub["x-cuda-default"] if use_cuda else sub["default"])
        if key in instance:
            _fill_defaults(instance[key], sub, root, device)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key, value in instance.items():
            if key not in schema.get("properties", {}):
                _fill_defaults(value, extra, root, device)


def _path(error) -> str:
    from specjoule.configfile import key_path

    return key_path(list(error.absolute_path))


def _schema_error(e) -> ConfigError:
    """One jsonschema error as a ConfigError at the key it is about (an unknown or a missing key is named itself,
    not its parent)."""
    from specjoule.configfile import key_path

    parts = list(e.absolute_path)
    if e.validator == "additionalProperties":
        allowed = sorted(e.schema.get("properties", {}))
        unknown = sorted(set(e.instance) - set(allowed), key=str)
        return ConfigError(
            key_path([*parts, str(unknown[0])]),
            e.instance[unknown[0]],
            f"unknown key; allowed here: {', '.join(allowed)}",
        )
    if e.validator == "required":
        missing = [k for k in e.validator_value if k not in e.instance]
        return ConfigError(key_path([*parts, missing[0]]), None, f"required key missing ({e.message})")
    return ConfigError(_path(e), e.instance, e.message)


def validate(raw: Mapping[str, Any]) -> dict:
    """Validate a config mapping and return a new dict with defaults filled in: a well-formed config.

    First error raised (issue 21, ADR 0130): the schema (shape, types, unknown and missing keys), number
    normalisation (a value's type must not change a cell's identity), defaults, the semantic checks (names,
    schemes, acceptance, models, corpora) and paper grade. Every error is ``config error at <key path> = <value>:
    <reason>``. A config about to be run also gets :func:`validate_plan`'s cross-field checks."""
    import jsonschema

    schema = _schema()
    if not isinstance(raw, Mapping):
        raise ConfigError("(top level)", raw, "a config is a mapping of keys (name, models, schemes, ...)")
    config = copy.deepcopy(dict(raw))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise _schema_error(errors[0])
    _refuse_non_finite(config, [])
    config = normalise_numbers(config, schema, schema)
    device = config.get("device", schema["properties"]["device"]["default"])
    _fill_defaults(config, schema, schema, device)
    _check_semantics(config)
    _check_paper_grade(config)
    return config


def validate_plan(raw: Mapping[str, Any]) -> dict:
    """:func:`validate` and the cross-field checks of a config about to be run (specjoule.crosscheck): windows
    against the pre-registered window check, lengths against max_model_len, batch sizes against engine limits
    and GPU memory, thresholds that can never pass, vectors never measured. What Snakemake calls when it plans.

    Kept apart from ``validate`` because configs that already ran are read again for their evidence (the golden
    cells, the reference evidence): a smoke that ran a 20 s window against a 30 s check is a finding in its
    records, and its config must still load to show it."""
    from specjoule import crosscheck

    config = validate(raw)
    crosscheck.check(config, dict(raw))
    return config


def plan(raw: Mapping[str, Any], config_file: str = "CONFIG") -> tuple[dict, Any]:
    """Every parse-time check in one pass, and the cell table: what Snakemake does before it plans any job.

    :func:`validate_plan` (schema, types, names, semantics, cross-field), the local models' shards and tokenizer
    (specjoule.resolve_models), the corpora's files and hub datasets, the cells, and the reference evidence
    against them. The first problem is a ``ConfigError``; nothing here starts a job, an engine or a download.
    ``config_file`` names the config in the corpus fetch hint."""
    from specjoule import cells, resolve_models

    config = validate_plan(raw)
    resolve_models.check_config(config)
    resolve_models.check_corpora(config, config_file)
    table = cells.build(config)
    _check_reference_evidence(config, table)
    for warning in hybrid_block_size_warnings(config, table) + moe_token_mode_warnings(table):
        log.warning("%s", warning)
    return config, table


def moe_token_mode_warnings(table: Any) -> list[str]:
    """One line per MoE target whose synthetic SGLang arms leave ``options.simulate_token_mode`` unset, so SGLang
    commits its default ``fixed`` token (id 100) at every accepted position (ADR 0243). Dummy routers route by
    token id, and on an H100 that made an L = 1 round at B = 32 read fewer experts than its routed-expert floor: 10.75
    against 25.39 ms with ``real-draft-token`` on one board (ADR 0244). A warning, not an error: the registered
    configs run unchanged, and a scheme that names the mode (either) is the user's choice, silent here."""
    from specjoule import models
    from specjoule import schemes as scheme_registry

    batches: dict[str, dict[str, set[int]]] = {}  # target -> scheme -> batch sizes
    for cell in table.cells:
        engine, scheme = cell.setup.engine, cell.setup.scheme
        if engine.engine != "sglang" or engine.device != "cuda" or cell.unsupported_reason:
            continue
        if not scheme.synthetic or scheme_registry.SIMULATE_TOKEN_OPTION in scheme.options:
            continue
        target = engine.target.entry.get("model")
        if target:
            batches.setdefault(target, {}).setdefault(str(scheme.name), set()).add(cell.batch_size)
    out = []
    for target, by_scheme in sorted(batches.items()):
        shape = models.local_shape(target)
        if shape is None or not shape.moe:
            continue
        arms = "; ".join(f"{name} at B = {', '.join(map(str, sorted(b)))}" for name, b in sorted(by_scheme.items()))
        out.append(
            f"{target} is MoE and its synthetic SGLang arms ({arms}) leave schemes.<name>.options."
            f"{scheme_registry.SIMULATE_TOKEN_OPTION} unset: SGLang then commits token id 100 at every accepted "
            f"position, dummy routers route by token id, and a round can read fewer experts than real traffic "
            f"(ADR 0244: 10.75 against 25.39 ms at B = 32, L = 1 on one H100); set it to real-draft-token to "
            f"commit the drafted tokens as vLLM does, or to fixed to keep SGLang's default knowingly"
        )
    return out


def hybrid_block_size_warnings(config: Mapping[str, Any], table: Any) -> list[str]:
    """One line per Gated-DeltaNet target whose vLLM arms would run different attention block sizes (ADR 0217):
    vLLM sizes the block to hold the recurrent state, which grows with k, and ``engine_config_matched`` would then
    fail after the run. Known here, before any GPU time; silent when the config pins
    ``engine_options.vllm.block_size`` or pre-registers ``block_size`` in ``checks.engine_config_may_differ``."""
    from specjoule import models

    if (config.get("engine_options", {}).get("vllm") or {}).get("block_size") is not None:
        return []
    if "block_size" in (config.get("checks", {}).get("engine_config_may_differ") or []):
        return []
    ks: dict[str, set[int]] = {}
    for cell in table.cells:
        # The typed parts, not cell.spec: its dict form costs more than the rest of this loop (0.2 s on a paper grid).
        engine = cell.setup.engine
        if engine.engine != "vllm" or engine.device != "cuda" or cell.unsupported_reason:
            continue
        target = engine.target.entry.get("model")
        if target:
            ks.setdefault(target, set()).add(int(cell.setup.scheme.entry.get("k") or 0))
    out = []
    for target, k_set in sorted(ks.items()):
        if len(k_set) < 2 or not models.has_gated_deltanet_layers(target):
            continue
        blocks = {k: models.gated_deltanet_attention_block_tokens(target, k) for k in sorted(k_set)}
        if len(set(blocks.values())) > 1:
            out.append(
                f"config {config.get('name')}: engine_options.vllm.block_size is not set and {target} is a "
                f"Gated-DeltaNet hybrid: vLLM would give its arms attention blocks of "
                f"{', '.join(f'{b} (k = {k})' for k, b in blocks.items())} tokens, and engine_config_matched would "
                f"fail; pin block_size: {max(blocks.values())} for every arm (ADR 0217)"
            )
    return out


def resolve_evidence_path(path: str | Path) -> Path:
    """A configured evidence path: absolute as given; relative to the working directory, else the repository."""
    p = Path(path)
    if p.is_absolute() or evidence_exists(p):
        return p
    return REPO_ROOT / p if evidence_exists(REPO_ROOT / p) else p


def evidence_exists(p: Path) -> bool:
    """The path exists, or names a run's ``cells`` folder committed packed as ``cells.parquet`` beside it (ADR
    0246; the analysis reads it under its old name)."""
    return p.exists() or (p.name == "cells" and p.with_name("cells.parquet").is_file())


def reference_evidence_path(config: Mapping[str, Any]) -> Path | None:
    """``report.reference_evidence`` resolved, None when not configured; a ConfigError when it does not exist."""
    path = config.get("report", {}).get("reference_evidence")
    if path is None:
        return None
    where = resolve_evidence_path(path)
    if not evidence_exists(where):
        raise ConfigError(
            "report.reference_evidence",
            path,
            "no such file or folder (relative paths are taken from the working directory, then the repository)",
        )
    return where


def _check_reference_evidence(config: dict, table: Any) -> None:
    """The reference evidence against the planned cells (ADR 0083). Reading its records needs polars, which a
    measurement-only node need not have (the offline bundle's pipeline profile, issue 22): there only its
    existence is checked, and the warning says the comparison is left to the analysis stages."""
    if reference_evidence_path(config) is None:
        return  # the usual case: the analysis package is not even imported
    try:
        from specjoule.analysis import evidence
    except ModuleNotFoundError as exc:
        from specjoule.extras import INSTALL_HINT, missing_analysis_module

        module = missing_analysis_module(exc)
        if module is None:
            raise
        log.warning(
            "report.reference_evidence = %s: it exists; its records were not compared with this config's "
            "cells (%s is not installed here: %s); the reproducibility stage compares them",
            config["report"]["reference_evidence"],
            module,
            INSTALL_HINT,
        )
        return
    evidence.check_reference(config, table)


def _refuse_non_finite(node: Any, path: list) -> None:
    """YAML reads ``.nan`` and ``.inf`` as numbers, and the schema lets them through: a NaN threshold compares false
    with everything, an infinite window never ends. Refused everywhere."""
    import math

    from specjoule.configfile import key_path

    if isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(key_path(path), node, "not a finite number (YAML .nan / .inf)")
    if isinstance(node, dict):
        for k, v in node.items():
            _refuse_non_finite(v, [*path, k])
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _refuse_non_finite(v, [*path, i])


# Engine options passed through unchecked whose values are counts: 4.0 and 4 must build one engine (and one id).
INTEGER_ENGINE_OPTIONS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "max_running_requests",
    "max_total_tokens",
    "chunked_prefill_size",
    "cuda_graph_max_bs",
    "tp_size",
    "seed",
)


def _integral(value: Any) -> bool:
    return isinstance(value, float) and value.is_integer()


def normalise_numbers(instance: Any, schema: dict, root: dict, key: str | None = None) -> Any:
    """One spelling per number, so that a value's YAML type never changes a cell id (issue 21).

    jsonschema accepts 4.0 where the schema says integer, and a cell id hashes the value as written: ``4.0`` and
    ``4`` would be two cells. Integer fields and counts take ints (4.0 → 4); number fields take ints when
    integral (20.0 → 20), except those the schema marks ``x-float`` (acceptance lengths and rates, request rates),
    which take floats (3 → 3.0), and a value equal to its default takes the default's spelling (1 → 1.0 where the
    default is 1.0). Each rule is what the shipped configs already write, so no id or hash changes; and a
    validated config validates to itself (the runner re-validates the plan's JSON and must hash it alike)."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    if not isinstance(instance, bool) and isinstance(instance, (int, float)):
        for name in ("default", "x-cuda-default"):
            # A value equal to a default is spelt as the default is: a config validated once (defaults written
            # out, as the runner receives it) must hash as it did the first time (checks.min_window_s: 1.0).
            default = schema.get(name)
            if not isinstance(default, bool) and isinstance(default, (int, float)) and instance == default:
                return type(default)(instance)
        if schema.get("x-float") and "number" in types:
            return float(instance)
        if _integral(instance) and ("integer" in types or "number" in types):
            return int(instance)
        return instance
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {}
        for k, v in instance.items():
            if k in props:
                out[k] = normalise_numbers(v, props[k], root, k)
            elif isinstance(extra, dict) and extra:
                out[k] = normalise_numbers(v, extra, root, k)
            elif k in INTEGER_ENGINE_OPTIONS and _integral(v):
                out[k] = int(v)
            else:
                out[k] = v
        return out
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [normalise_numbers(v, schema["items"], root) for v in instance]
    return instance


def paper_grade_shortfalls(config: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """(key, value, reason) of every setting of a validated cuda config below paper grade (ADR 0097); [] on cpu."""
    if config.get("device") != "cuda":
        return []
    out: list[tuple[str, Any, str]] = []
    for name, wl in config["workloads"].items():
        if wl["output_len"] < PAPER_OUTPUT_LEN:
            out.append(
                (
                    f"workloads.{name}.output_len",
                    wl["output_len"],
                    f"the paper generated {PAPER_OUTPUT_LEN} tokens per request",
                )
            )
        key = "min_window_s" if wl["kind"] == "closed_batch" else "window_s"
        if wl[key] < PAPER_MIN_WINDOW_S:
            out.append(
                (
                    f"workloads.{name}.{key}",
                    wl[key],
                    f"below {PAPER_MIN_WINDOW_S:.0f} s one {NVML_UPDATE_S * 1000:.0f} ms NVML counter update is more "
                    f"than {PAPER_WINDOW_SHARE:.1%} of the window",
                )
            )
    if len(config["seeds"]) < PAPER_MIN_SEEDS:
        out.append(("seeds", config["seeds"], f"the paper ran at least {PAPER_MIN_SEEDS} seeds"))
    if config["checks"]["min_window_s"] < PAPER_MIN_WINDOW_S:
        out.append(
            (
                "checks.min_window_s",
                config["checks"]["min_window_s"],
                f"the pre-registered window check accepts windows shorter than {PAPER_MIN_WINDOW_S:.0f} s",
            )
        )
    return out


def _check_paper_grade(config: dict) -> None:
    """``paper_grade: true``: the first shortfall is a config error; null: each is a warning; false: silence."""
    setting = config.get("paper_grade")
    if setting is False:
        return
    shortfalls = paper_grade_shortfalls(config)
    if setting is True and shortfalls:
        key, value, reason = shortfalls[0]
        raise ConfigError(
            key,
            value,
            f"below paper grade ({reason}); paper_grade: true asks for it "
            f"(set paper_grade: false for an exploratory run)",
        )
    for key, value, reason in shortfalls:
        log.warning(
            "config %s: not paper grade at %s = %r: %s (ADR 0097; paper_grade: false silences this)",
            config.get("name"),
            key,
            value,
            reason,
        )


def read_yaml(path: str | Path) -> dict:
    """A config file with every mapping key once and syntax errors placed (specjoule.configfile, ADR 0130)."""
    from specjoule.configfile import read_yaml as _read

    return _read(path)


def load(path: str | Path, overrides: Mapping[str, Any] | None = None) -> dict:
    raw = read_yaml(path)
    if overrides:
        raw = {**raw, **overrides}
    return validate(raw)


def write_resolved(config: Mapping[str, Any], path: str | Path) -> str:
    """Write the validated config as JSON (once; the name carries its hash) and return the path."""
    import os
    import tempfile

    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-")
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh, indent=1, sort_keys=True, default=str)
        os.replace(tmp, path)
    return str(path)


def _hash_neutral_paths(schema: dict) -> list[tuple[tuple[str, ...], Any]]:
    """(key path, default) of every property the schema marks ``hash_neutral: true``."""
    out: list[tuple[tuple[str, ...], Any]] = []

    def walk(node: dict, path: tuple[str, ...]) -> None:
        for key, sub in node.get("properties", {}).items():
            if sub.get("hash_neutral"):
                out.append(((*path, key), sub.get("default")))
            walk(sub, (*path, key))

    walk(schema, ())
    return out


def _hash_excluded_keys(schema: dict) -> list[str]:
    """Top-level keys the schema marks ``hash_excluded: true``: how a run is analysed, never what is measured."""
    return [key for key, sub in schema.get("properties", {}).items() if sub.get("hash_excluded")]


def config_hash(config: Mapping[str, Any]) -> str:
    """Content hash of the validated config, pre-registered checks included.

    A key the schema marks ``hash_neutral`` is left out while it holds its default: such keys were added
    after configs had been run (replicate counts, new checks' thresholds), and their default reproduces
    what ran before, so adding them must not make every committed record look measured under another
    config (the ``preregistration`` check, ADR 0064). Set to anything else, they are hashed.

    A key marked ``hash_excluded`` is never hashed, whatever its value: it says how the records are analysed
    (``analysis_scope``, ADR 0216), so a pre-registered config analysed another way stays that config."""
    config = copy.deepcopy(dict(config))
    for key in _hash_excluded_keys(_schema()):
        config.pop(key, None)
    for path, default in _hash_neutral_paths(_schema()):
        parent = config
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent and parent[path[-1]] == default:
            del parent[path[-1]]
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _check_semantics(config: dict) -> None:
    device = config["device"]
    for i, engine in enumerate(config["engines"]):
        if engine not in ENGINES:
            raise ConfigError(f"engines[{i}]", engine, f"unknown engine; known: {', '.join(ENGINES)}")
    if len(set(config["engines"])) != len(config["engines"]):
        raise ConfigError("engines", config["engines"], "duplicate engine")
    if "sglang" in config["engines"] and device == "cpu":
        raise ConfigError(
            "device", device, "the sglang adapter runs on cuda only (ADR 0016); use engines: [vllm] on cpu"
        )

    for key in ("batch_sizes", "seeds", "cuda_graphs"):
        values = config[key]
        if len(set(values)) != len(values):
            raise ConfigError(key, values, "duplicate value")
    for i, b in enumerate(config["batch_sizes"]):
        if b <= 0:
            raise ConfigError(f"batch_sizes[{i}]", b, "batch size must be a positive integer")
    if device == "cpu" and True in config["cuda_graphs"]:
        raise ConfigError("cuda_graphs", config["cuda_graphs"], "CUDA graphs need device: cuda; use [false] on cpu")

    protocol = config["protocol"]
    if config["windows"] > 1 and not protocol.get("share_engines"):
        raise ConfigError(
            "windows",
            config["windows"],
            "replicate windows run back to back on one warm engine: "
            "needs protocol.share_engines: true (without it every window would be an engine start; "
            "use engine_replicates for that)",
        )
    if protocol.get("swap_synthetic_acceptance") and not protocol.get("share_engines"):
        raise ConfigError(
            "protocol.swap_synthetic_acceptance",
            True,
            "it shares one engine across a scheme's acceptance vectors: needs protocol.share_engines: true",
        )

    warm = protocol.get("engine_start_warm_s")
    if warm is not None and warm > protocol["engine_start_s"]:
        raise ConfigError(
            "protocol.engine_start_warm_s",
            warm,
            f"above protocol.engine_start_s = {protocol['engine_start_s']}: a start that loads its "
            f"compiled graphs from the compile cache is never planned longer than one that compiles them "
            f"(ADR 0189)",
        )

    for name, pair in config["models"].items():
        if "target" not in pair:
            raise ConfigError(f"models.{name}", pair, "a model pair needs a target")

    for section in ("models", "schemes", "corpora", "workloads", "acceptance"):
        for name in config[section]:
            if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                raise ConfigError(
                    f"{section}.{name}",
                    name,
                    "a name holds only letters, digits, '_' and '.', and starts with a letter, digit or "
                    "'_' (names build record paths, ids and the words of the cell's shell command; "
                    "'-' separates the parts of an id)",
                )

    for name, vector in config["acceptance"].items():
        ((kind, value),) = vector.items()
        if kind in ("minvar", "geometric") and value < 1:
            raise ConfigError(f"acceptance.{name}.{kind}", value, "mean acceptance length must be in [1, k+1]")

    # Before the scheme checks: a drafter of the wrong kind or a missing dir is the first thing to say.
    check_models(config)  # local model dirs, their config.json and weights, drafter kinds, MTP layers
    for name, scheme in config["schemes"].items():
        key = f"schemes.{name}"
        method = scheme["method"]
        if method not in METHODS:
            raise ConfigError(f"{key}.method", method, f"unknown scheme method; known: {', '.join(METHODS)}")
        if method == "baseline":
            if scheme.get("synthetic") or scheme.get("acceptance") or "k" in scheme:
                raise ConfigError(key, scheme, "a baseline drafts nothing: no k, synthetic or acceptance")
            if "batch_sizes" in scheme:
                raise ConfigError(
                    f"{key}.batch_sizes",
                    scheme["batch_sizes"],
                    "the baseline runs at every batch size of the grid (every speculative cell pairs "
                    "with the baseline of its batch size); give the speculative schemes their own "
                    "batch_sizes instead",
                )
            continue
        _check_scheme_batch_sizes(key, scheme.get("batch_sizes"), config["batch_sizes"])
        _check_token_mode(key, scheme, config["engines"])
        if "k" not in scheme:
            raise ConfigError(f"{key}.k", None, f"{method} needs k (draft tokens per round)")
        k = scheme["k"]
        if k > MAX_K:
            raise ConfigError(
                f"{key}.k",
                k,
                f"no drafter proposes more than {MAX_K} tokens per round (block drafters "
                f"16); a larger k is a typo, and resolving its acceptance vectors would "
                f"hang the plan",
            )
        _check_scheme_inputs(config, name, scheme)
        if scheme["synthetic"]:
            if device == "cpu":
                raise ConfigError(
                    f"{key}.synthetic",
                    True,
                    "synthetic acceptance is GPU-only in vLLM (CPU sampling asserts); use device: cuda or synthetic: false",
                )
            chosen = scheme.get("acceptance", list(config["acceptance"]))
            if not chosen:
                raise ConfigError(
                    f"{key}.acceptance", chosen, "a synthetic scheme needs at least one acceptance vector"
                )
            for vname in chosen:
                if vname not in config["acceptance"]:
                    raise ConfigError(
                        f"{key}.acceptance",
                        vname,
                        f"unknown acceptance vector (no acceptance.{vname}); "
                        f"defined: {', '.join(config['acceptance']) or 'none'}",
                    )
                try:
                    acc.resolve(config["acceptance"][vname], k)
                except acc.AcceptanceError as exc:
                    width = scheme_registry.verify_width(method, k)
                    raise ConfigError(
                        f"acceptance.{vname}",
                        config["acceptance"][vname],
                        f"{exc} (for scheme {name!r}: {method} drafts k={k} and verifies {width} tokens "
                        f"per pass, so L lies in [1, {width}])",
                    ) from None
                if "sglang" in config["engines"]:
                    _check_sglang_acceptance(vname, config["acceptance"][vname], name, method, config)
        elif scheme.get("acceptance"):
            raise ConfigError(
                f"{key}.acceptance", scheme["acceptance"], "acceptance vectors apply only to synthetic: true schemes"
            )

    if not any(s["method"] == "baseline" for s in config["schemes"].values()):
        raise ConfigError(
            "schemes", sorted(config["schemes"]), "needs a baseline scheme: every speculative cell is paired with one"
        )
    if sum(s["method"] == "baseline" for s in config["schemes"].values()) > 1:
        raise ConfigError("schemes", sorted(config["schemes"]), "more than one baseline scheme")

    # The corpus registry owns corpus validation (sources, required fields, builtin names).
    from specjoule import corpora as corpus_registry

    for name, corpus in config["corpora"].items():
        try:
            corpus_registry.validate_spec(name, corpus)
        except corpus_registry.CorpusError as exc:
            raise ConfigError(f"corpora.{name}.{exc.key}", exc.value, exc.reason) from None

    for name, wl in config["workloads"].items():
        _check_workload(name, wl, config)


# Per engine: the option that caps the requests it runs at once, and the adapter's default for it (the batch size).
MAX_RUNNING_OPTION = {"vllm": "max_num_seqs", "sglang": "max_running_requests"}
OPEN_LOOP_ONLY = ("rate", "schedule", "burstiness")


def _check_token_mode(key: str, scheme: Mapping[str, Any], engines: Sequence[str]) -> None:
    """``options.simulate_token_mode`` (ADR 0243): a mode the config's every engine has, on a synthetic scheme."""
    option = scheme_registry.SIMULATE_TOKEN_OPTION
    mode = (scheme.get("options") or {}).get(option)
    if mode is None:
        return
    if mode not in scheme_registry.SIMULATE_TOKEN_MODES:
        raise ConfigError(f"{key}.options.{option}", mode, f"one of {', '.join(scheme_registry.SIMULATE_TOKEN_MODES)}")
    if not scheme.get("synthetic"):
        raise ConfigError(
            f"{key}.options.{option}",
            mode,
            "names the tokens synthetic acceptance commits: the scheme is not synthetic",
        )
    for engine in engines:
        has = scheme_registry.ENGINE_SIMULATE_TOKEN_MODES.get(engine, ())
        if mode not in has:
            raise ConfigError(
                f"{key}.options.{option}",
                mode,
                f"{engine} commits only {' or '.join(has) or 'its own'} tokens under synthetic acceptance "
                "(its sampler accepts the drafted tokens and the target's after)",
            )


def _check_scheme_batch_sizes(key: str, only: list | None, grid: list) -> None:
    """A scheme's own batch sizes: a subset of the grid's, each once (ADR 0180)."""
    if only is None:
        return
    if len(set(only)) != len(only):
        raise ConfigError(f"{key}.batch_sizes", only, "duplicate value")
    for i, b in enumerate(only):
        if b not in grid:
            raise ConfigError(
                f"{key}.batch_sizes[{i}]",
                b,
                f"not one of the grid's batch_sizes {grid}: a scheme's own batch sizes choose among "
                f"them (the baseline of that batch size is what its cells pair with)",
            )


def _check_workload(name: str, wl: dict, config: dict) -> None:
    key = f"workloads.{name}"
    kind = wl["kind"]
    for option in OPEN_LOOP_ONLY:
        if option in wl and kind != "open_loop":
            raise ConfigError(f"{key}.{option}", wl[option], f"{option} belongs to open_loop; {kind} has no arrivals")
    if "concurrency" in wl and kind != "closed_loop":
        raise ConfigError(
            f"{key}.concurrency",
            wl["concurrency"],
            f"concurrency belongs to closed_loop (N clients); {kind} does not take it",
        )
    if kind == "open_loop":
        if "rate" not in wl:
            raise ConfigError(f"{key}.rate", None, "open_loop needs a request rate (requests/s)")
        if "burstiness" in wl and not wl["burstiness"] > 0:
            raise ConfigError(
                f"{key}.burstiness",
                wl["burstiness"],
                "burstiness is the gamma shape of the gaps between arrivals: must be > 0 (1 = Poisson)",
            )
    if kind == "closed_loop":
        _check_concurrency(key, wl.get("concurrency"), config)


def _check_concurrency(key: str, n: Any, config: dict) -> None:
    if n is None:
        raise ConfigError(f"{key}.concurrency", None, "closed_loop needs a concurrency (the number of clients)")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{key}.concurrency", n, "the number of clients must be an integer ≥ 1")
    for engine in config["engines"]:
        option = MAX_RUNNING_OPTION.get(engine)
        cap = (config["engine_options"].get(engine) or {}).get(option) if option else None
        if cap is not None:
            if n > int(cap):
                raise ConfigError(
                    f"{key}.concurrency",
                    n,
                    f"above engine_options.{engine}.{option} = {cap}: the engine would queue the clients "
                    f"beyond it and run fewer than {n} at once",
                )
            continue
        for i, b in enumerate(config["batch_sizes"]):
            if n > b:
                raise ConfigError(
                    f"{key}.concurrency",
                    n,
                    f"above batch_sizes[{i}] = {b}, which sets {engine}'s {option} when "
                    f"engine_options.{engine}.{option} is not given: the engine would run fewer than "
                    f"{n} at once; raise the batch size or set {option}",
                )


def _check_scheme_inputs(config: dict, name: str, scheme: dict) -> None:
    """What a scheme needs besides k (specjoule/schemes.py): the pair's draft model, a drafter of its own, a
    target carrying MTP layers, and for a block drafter a k equal to the block it was trained with. Configs that
    a local model dir can answer are checked here, at parse time; hub ids are left to the engine."""
    key = f"schemes.{name}"
    method, k = scheme["method"], scheme["k"]
    desc = scheme_registry.get(method)
    drafter = scheme.get("drafter")
    if desc.needs_pair_draft:
        missing = [n for n in config["models"] if "draft" not in config["models"][n]]
        if missing:
            raise ConfigError(
                f"models.{missing[0]}.draft", None, f"scheme {name!r} ({method}) needs a draft model in every pair"
            )
    sources = scheme_registry.drafter_sources(config, name, scheme)
    if desc.needs_drafter and not sources:
        raise ConfigError(
            f"{key}.drafter",
            None,
            f"{method} needs drafter weights (hub id or dir): give the scheme a "
            f"`drafter`, or each target its own under models.<pair>.drafters.{method}",
        )
    if drafter and method not in DRAFTER_METHODS:
        raise ConfigError(
            f"{key}.drafter", drafter, f"{method} takes no drafter of its own (only {', '.join(DRAFTER_METHODS)} do)"
        )
    if desc.needs_target_mtp and not drafter:
        without = []
        for pair_name, pair in config["models"].items():
            if (pair.get("drafters") or {}).get(method):
                continue  # this target's own MTP drafter (an assistant model)
            target_cfg = scheme_registry.read_model_config(pair["target"]["model"])
            if target_cfg is not None and scheme_registry.target_mtp_layers(target_cfg) == 0:
                without.append(pair_name)
        # A grid across families keeps the targets without MTP layers as planned unsupported cells (the plan
        # and the report show them; cells.planned_unsupported, ADR 0194); a scheme no pair can run is an error.
        if without and len(without) == len(config["models"]):
            pair_name = without[0]
            raise ConfigError(
                f"models.{pair_name}.target.model",
                config["models"][pair_name]["target"]["model"],
                f"scheme {name!r} (mtp) drafts with the target's own MTP layers, and this target's "
                f"config.json declares none ({', '.join(scheme_registry.MTP_LAYER_KEYS)}); "
                f"vLLM would fail with \"Unsupported speculative method: 'mtp'\"",
            )
    for where, source in sources if desc.is_block else []:
        drafter_cfg = scheme_registry.read_model_config(source)
        want = scheme_registry.block_k(method, drafter_cfg) if drafter_cfg is not None else None
        if want is not None and int(k) != want:
            block = scheme_registry.trained_block(method, drafter_cfg)
            raise ConfigError(
                f"{key}.k",
                k,
                f"{method} drafter {source} ({where}) was trained with block {block}, so "
                f"it drafts k = {want} per round (verify width {want + 1}); a different k changes the "
                f"block the drafter fills",
            )


def _check_sglang_acceptance(vname: str, vector: dict, scheme_name: str, method: str, config: dict) -> None:
    """SGLang fakes acceptance with one mean length per verify step (SGLANG_SIMULATE_ACC_LEN,
    method match-expected: floor(L) or ceil(L) with mean L — per request exactly the ``minvar``
    distribution). It has no per-position vector and no way to draw a geometric one (ADR 0016)."""
    ((kind, value),) = vector.items()
    if kind == "rates":
        raise ConfigError(
            f"acceptance.{vname}.rates",
            value,
            f"engine sglang simulates a mean acceptance length per verify step (SGLANG_SIMULATE_ACC_LEN), "
            f"not a per-position vector (scheme {scheme_name!r}); give it as minvar: L, or leave sglang "
            f"out of engines",
        )
    if kind == "geometric":
        raise ConfigError(
            f"acceptance.{vname}.geometric",
            value,
            f"engine sglang can only draw floor(L) or ceil(L) accepted per step (SGLANG_SIMULATE_ACC_METHOD "
            f"match-expected), i.e. the minvar distribution; a geometric one it cannot reproduce "
            f"(scheme {scheme_name!r}); use minvar: {value}",
        )
    if method == "dspark":
        # SGLang 0.5.17's DSpark verify (dspark_components/dspark_verify.py, _simulated_correct_len) does not draw
        # floor/ceil like the other workers: it accepts round(L − 1) drafts on every step, so only a whole L is
        # realised; and it refuses L > 1 unless every request is verified in full (dspark_worker_v2.py).
        if value != int(value):
            raise ConfigError(
                f"acceptance.{vname}.minvar",
                value,
                f"engine sglang simulates DSpark acceptance as a constant round(L - 1) accepted drafts "
                f"per step (scheme {scheme_name!r}), so only a whole L is realised; use an integer L",
            )
        sg_opts = config["engine_options"].get("sglang") or {}
        mode = str((sg_opts.get("env") or {}).get("SGLANG_RAGGED_VERIFY_MODE", "static"))
        trimmed = mode == "cap-accept" or (mode == "compact" and sg_opts.get("speculative_dspark_sps_table_path"))
        if value != 1 and trimmed:
            raise ConfigError(
                "engine_options.sglang.env.SGLANG_RAGGED_VERIFY_MODE",
                mode,
                f"SGLANG_SIMULATE_ACC_LEN>1.0 with DSpark requires a verify-all schedule "
                f"(SGLANG_RAGGED_VERIFY_MODE=static, or =compact with the uninitialized/flat SPS table) "
                f"(scheme {scheme_name!r})",
            )
