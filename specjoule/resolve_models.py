"""Resolve every model of a config before any GPU job (ADR 0121).

A model is a local directory or a hub id. Before a cell can run, its weights must be where the
engine will look, and what was loaded must be known:

- a **local directory** is checked: a ``config.json``; weights (``*.safetensors``, every shard an
  index names) unless ``load_format: dummy``; a tokenizer whose largest id fits the model's
  ``vocab_size`` (prompts are token ids the model must embed). Its revision is the sha256 of its
  weights (``sha256:…``; ``fp:…`` when the weights exceed :data:`FULL_HASH_MAX_BYTES` and only their
  sizes, first and last MiB are hashed) or, inside a hub cache snapshot, the snapshot's commit;
- a **hub id** is fetched once, on the machine that plans (a login node: compute nodes are often
  offline), with ``huggingface_hub.snapshot_download`` into the hub cache the environment configures
  (``HF_HUB_CACHE``, else ``HF_HOME``/hub; on a cluster a shared filesystem), then checked as a local
  directory. Its
  revision is the snapshot's commit.

The rule ``resolve_models`` writes one manifest per distinct model (:func:`manifest_path`), which
the GPU jobs take as input, so the scheduler runs it first; the runner reads the manifests
(:func:`localize`) to load hub models from the snapshot directory (no network on the node) and to
record ``target_revision`` / ``draft_revision``.

:func:`check_config` adds, at parse time (``rules/resolve.smk``), what config validation does not
check: every shard a weight index names, and a prompt tokenizer whose ids fit the vocabulary of the
target and the draft. A missing path, a directory without ``config.json`` or without weights is
``specjoule.models.check_models``' error (config validation), not repeated here; the rule repeats
those checks only on what it fetched from the hub.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specjoule import tokenizer as tk
from specjoule.cellspec import CellSpec
from specjoule.config import ConfigError

MANIFEST_DIR = "results/.specjoule/models"
MANIFEST_VERSION = 1
# What an engine loads per load_format; `auto` as specjoule.models.WEIGHT_GLOBS (safetensors, else .bin).
WEIGHT_PATTERNS = {
    "auto": ("*.safetensors", "*.bin"),
    "safetensors": ("*.safetensors",),
    "pt": ("*.bin", "*.pt", "*.pth"),
}
# Files fetched from the hub besides the weights: config, tokenizer and generation settings.
METADATA_PATTERNS = ("*.json", "*.model", "*.tiktoken", "*.txt", "*.jinja")
FULL_HASH_MAX_BYTES = 2 * 1024**3
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{40})(/|$)")


@dataclass(frozen=True)
class ModelRef:
    """One model the config names, with the config key that names it (for messages)."""

    key: str  # e.g. models.tiny.target.model
    model: str  # local path or hub id
    load_format: str  # auto | dummy | …; "tokenizer" for a tokenizer-only reference
    revision: str | None  # a hub revision to pin (branch, tag or commit); None = the default branch

    @property
    def needs_weights(self) -> bool:
        return self.load_format not in ("dummy", "tokenizer")

    @property
    def manifest_key(self) -> str:
        """Depends on what is fetched, not on where the config names it: a model used as the target of
        one pair and the draft of another resolves once."""
        blob = json.dumps([self.model, self.revision, self.load_format if self.needs_weights else "no-weights"])
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


class ResolveError(ConfigError):
    """A model that cannot be used as configured; ``key`` is the config key, ``value`` the path or id."""


# -- which models a config names ------------------------------------------------------------------


def model_refs(config: dict[str, Any]) -> list[ModelRef]:
    """Every model of a validated config: each pair's target and draft, each scheme's drafter, and an
    explicit tokenizer that is neither the shipped one nor the model itself."""
    refs: list[ModelRef] = []
    for pair_name, pair in config["models"].items():
        for role in ("target", "draft"):
            m = pair.get(role)
            if not m:
                continue
            base = f"models.{pair_name}.{role}"
            refs.append(ModelRef(f"{base}.model", m["model"], m.get("load_format", "auto"), m.get("revision")))
            tok = m.get("tokenizer")
            if tok and tok not in tk.SHIPPED_ALIASES and tok != m["model"]:
                refs.append(ModelRef(f"{base}.tokenizer", tok, "tokenizer", None))
    for name, scheme in config["schemes"].items():
        if scheme.get("drafter"):
            for fmt in sorted({drafter_load_format(pair["target"]) for pair in config["models"].values()}):
                refs.append(ModelRef(f"schemes.{name}.drafter", scheme["drafter"], fmt, None))
    for pair_name, pair in config["models"].items():  # each target's own drafters (models.<pair>.drafters)
        for method, drafter in (pair.get("drafters") or {}).items():
            refs.append(
                ModelRef(f"models.{pair_name}.drafters.{method}", drafter, drafter_load_format(pair["target"]), None)
            )
    return refs


def drafter_load_format(target: Mapping[str, Any]) -> str:
    """A scheme's drafter is loaded the way its target is (one engine, one load_format): shape-only
    with a dummy target, real weights otherwise."""
    return "dummy" if target.get("load_format", "auto") == "dummy" else "auto"


def unique_refs(refs: Iterable[ModelRef]) -> dict[str, ModelRef]:
    """manifest key → the first reference to it."""
    out: dict[str, ModelRef] = {}
    for r in refs:
        out.setdefault(r.manifest_key, r)
    return out


def manifest_path(ref: ModelRef) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", ref.model.strip("/"))[-48:]
    return f"{MANIFEST_DIR}/{slug}-{ref.manifest_key}.json"


def local_dir(model: str) -> Path | None:
    """The model as an existing directory (absolute, relative to the working directory, or to the repository)."""
    from specjoule.models import classify_model_ref

    kind, path = classify_model_ref(model)
    return path if kind == "local" and path is not None and path.is_dir() else None


def is_hub_id(model: str) -> bool:
    from specjoule.models import classify_model_ref

    return classify_model_ref(model)[0] == "hub"


# -- checks of a checkpoint directory -----------------------------------------------------------------


def _config_json(ref: ModelRef, path: Path) -> dict[str, Any]:
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ResolveError(ref.key, str(path), "no config.json in this directory: not a model checkpoint")
    try:
        return json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise ResolveError(ref.key, str(path), f"config.json is not JSON ({exc.msg}, line {exc.lineno})") from None


def vocab_size_of(cfg: dict[str, Any]) -> int | None:
    for node in (cfg, cfg.get("text_config") or {}, cfg.get("llm_config") or {}):
        if isinstance(node.get("vocab_size"), int):
            return node["vocab_size"]
    return None


def weight_files(ref: ModelRef, path: Path) -> list[Path]:
    """The checkpoint's weight files; an error when there are none or an index names a missing shard."""
    patterns = WEIGHT_PATTERNS.get(ref.load_format, WEIGHT_PATTERNS["auto"])
    files: list[Path] = []
    for pattern in patterns:  # the first pattern that matches: safetensors before .bin, as engines load
        files = sorted(f for f in path.iterdir() if f.is_file() and fnmatch.fnmatch(f.name, pattern))
        if files:
            break
    if not files:
        raise ResolveError(
            ref.key,
            str(path),
            f"no weights ({', '.join(patterns)}) in this checkpoint while load_format is "
            f"{ref.load_format!r}; a shape-only model (config.json alone) needs load_format: dummy",
        )
    check_shards(ref, path)
    return files


def check_shards(ref: ModelRef, path: Path) -> None:
    """Every shard a ``*.index.json`` names must be in the directory (an interrupted copy or download
    leaves an index and some shards: the engine would fail after the lease)."""
    for index in sorted(path.glob("*.index.json")):
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except json.JSONDecodeError as exc:
            raise ResolveError(ref.key, str(index), f"weight index is not JSON ({exc.msg})") from None
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            raise ResolveError(
                ref.key,
                str(path),
                f"{index.name} names {len(missing)} shard(s) not in the directory: {', '.join(missing[:3])}",
            )


def tokenizer_top_id(path: Path) -> int | None:
    """The largest id a directory's tokenizer can produce, read from its files without transformers;
    None when it has no ``tokenizer.json`` (a sentencepiece-only tokenizer is not checked)."""
    tok_file = path / "tokenizer.json"
    if not tok_file.is_file():
        return None
    return _tokenizer_top_id(str(path), tok_file.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _tokenizer_top_id(directory: str, mtime_ns: int) -> int | None:
    # Cached per file version: every plan checks the prompt tokenizer, and loading one takes tens of ms.
    from tokenizers import Tokenizer

    path = Path(directory)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    top = max(tok.get_vocab(with_added_tokens=True).values())
    cfg_file = path / "tokenizer_config.json"
    if cfg_file.is_file():
        added = json.loads(cfg_file.read_text()).get("added_tokens_decoder") or {}
        top = max([top, *(int(i) for i in added)])
    return top


def prompt_tokenizer(model_ref: ModelRef, explicit: str | None, path: Path) -> tuple[str, int | None]:
    """(where the prompt tokenizer comes from, its largest id) for a model dir, as corpora resolve it."""
    if explicit in tk.SHIPPED_ALIASES or (not explicit and not tk.has_own_tokenizer(path)):
        return str(tk.SHIPPED_TOKENIZER_PATH), tokenizer_top_id(tk.SHIPPED_TOKENIZER_PATH.parent)
    if explicit:
        tdir = local_dir(explicit)
        return explicit, tokenizer_top_id(tdir) if tdir else None
    return str(path), tokenizer_top_id(path)


def check_vocab_covers(key: str, model_path: Path, vocab: int | None, tok_source: str, top: int | None) -> None:
    if vocab is None or top is None:
        return
    if top >= vocab:
        raise ResolveError(
            key,
            tok_source,
            f"this tokenizer produces ids up to {top}, but the model at {model_path} "
            f"embeds only vocab_size {vocab}: prompts would hold ids it cannot embed",
        )


def check_dir(ref: ModelRef, path: Path) -> dict[str, Any]:
    """Check one checkpoint directory; returns its config.json."""
    if not path.is_dir():
        raise ResolveError(ref.key, str(path), "not a directory")
    if ref.load_format == "tokenizer":
        if not tk.has_own_tokenizer(path):
            raise ResolveError(
                ref.key,
                str(path),
                "no tokenizer files (tokenizer.json, tokenizer_config.json, "
                "tokenizer.model, vocab.json) in this directory",
            )
        return {}
    cfg = _config_json(ref, path)
    if ref.needs_weights:
        weight_files(ref, path)
    return cfg


# -- parse-time checks ------------------------------------------------------------------------------


def check_config(config: dict[str, Any]) -> None:
    """What config validation (specjoule.models.check_models) leaves to this module, for every local
    model of a validated config: every shard a weight index names is there, and the prompt tokenizer's
    ids fit the vocabulary of the target and of the draft (the draft reads the target's prompt ids).
    Hub ids are checked by the rule after their download."""
    for pair_name, pair in config["models"].items():
        prompt_tok: tuple[str, str, int | None] | None = None  # (config key, source, largest id)
        for role in ("target", "draft"):
            m = pair.get(role)
            if not m:
                continue
            ref = ModelRef(
                f"models.{pair_name}.{role}.model", m["model"], m.get("load_format", "auto"), m.get("revision")
            )
            path = local_dir(ref.model)
            if path is None:
                continue
            if ref.needs_weights:
                check_shards(ref, path)
            if role == "target":
                prompt_tok = (_tokenizer_key(pair_name, m), *prompt_tokenizer(ref, m.get("tokenizer"), path))
            if prompt_tok is not None:
                check_vocab_covers(
                    prompt_tok[0], path, vocab_size_of(_config_json(ref, path)), prompt_tok[1], prompt_tok[2]
                )


def _tokenizer_key(pair_name: str, target: dict[str, Any]) -> str:
    """The config key that chose the prompt tokenizer: the target's ``tokenizer`` when set, else its model."""
    return f"models.{pair_name}.target." + ("tokenizer" if target.get("tokenizer") else "model")


# -- corpora: available before any GPU time (ADR 0122) ---------------------------------------------------

FETCH_HINT = "python -m specjoule.corpora {config} {name} --fetch"


def check_corpora(config: dict[str, Any], config_file: str = "CONFIG") -> None:
    """Every file and hf corpus loads here, now, in its layout, with enough distinct documents for
    its pool; a hub dataset must already be in the local hub cache (compute nodes are often offline,
    and a missing corpus found inside a GPU job wastes the lease). One error names every corpus that
    needs a download and the command that fetches it; any other problem names the corpus's key."""
    from specjoule import corpora

    needs_download = []
    for name, spec in config["corpora"].items():
        if (
            spec["source"] == "hf"
            and corpora.is_hub_dataset_id(spec["dataset"])
            and corpora.hub_snapshot(spec["dataset"], spec.get("revision")) is None
        ):
            needs_download.append(name)
    if needs_download:
        first = needs_download[0]
        commands = "; ".join(FETCH_HINT.format(config=config_file, name=n) for n in needs_download)
        raise ConfigError(
            f"corpora.{first}.dataset",
            config["corpora"][first]["dataset"],
            f"corpora {', '.join(needs_download)} need a download: not in the local hub cache "
            f"({cache_dir()}); fetch once on a machine that reaches the hub (the cache must be "
            f"visible where cells run): {commands}",
        )
    for name, spec in config["corpora"].items():
        if spec["source"] not in ("file", "hf"):
            continue  # random needs nothing; builtin and package data come with the install
        try:
            docs = corpora.load_documents(name, spec)
        except corpora.CorpusError as exc:
            key = exc.key or ("path" if spec["source"] == "file" else "dataset")
            value = exc.value if exc.key else spec.get(key)
            raise ConfigError(f"corpora.{name}.{key}", value, exc.reason) from None
        pool_size = spec.get("pool_size") or config.get("pool_size") or corpora.DEFAULT_POOL_SIZE
        if len(docs.docs) < pool_size:
            raise ConfigError(
                f"corpora.{name}.pool_size",
                pool_size,
                f"{docs.source} has {len(docs.docs)} distinct documents, fewer than the pool needs",
            )


# -- resolution (the rule) ----------------------------------------------------------------------------


def weights_revision(path: Path, files: list[Path]) -> str:
    """The snapshot commit inside a hub cache; else a hash of the weights (``sha256:`` of every byte
    up to FULL_HASH_MAX_BYTES in all, above it ``fp:`` over names, sizes and first and last MiB)."""
    m = _SNAPSHOT.search(str(path.resolve()) + "/") or _SNAPSHOT.search(str(path) + "/")
    if m:
        return m.group(1)
    total = sum(f.stat().st_size for f in files)
    digest = hashlib.sha256()
    full = total <= FULL_HASH_MAX_BYTES
    for f in files:
        # Full: sha256 over each file's name and bytes, as specjoule.pair.weights_sha256 (the trained
        # pair's revision is the prefix of the hash its training manifest states).
        digest.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            if full:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            else:
                digest.update(str(f.stat().st_size).encode() + b"\0" + fh.read(1 << 20))
                fh.seek(max(0, f.stat().st_size - (1 << 20)))
                digest.update(fh.read(1 << 20))
    return ("sha256:" if full else "fp:") + digest.hexdigest()[:16]


def config_revision(path: Path) -> str:
    """Shape-only models: the sha256 of their config.json (dummy weights are drawn from the seed)."""
    return "config-sha256:" + hashlib.sha256((path / "config.json").read_bytes()).hexdigest()[:16]


def cache_dir() -> str:
    """Where hub snapshots go: huggingface_hub's cache (``HF_HUB_CACHE``, else ``HF_HOME``/hub, else
    ~/.cache/huggingface/hub). On a cluster, point it at a shared filesystem the compute nodes see."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def fetch(ref: ModelRef, cache: str) -> Path:
    """The hub snapshot of ``ref`` in ``cache`` (downloaded when absent; offline, the cached one)."""
    from huggingface_hub import snapshot_download

    if ref.load_format == "tokenizer":
        patterns = list(METADATA_PATTERNS)
    elif ref.needs_weights:
        patterns = [*METADATA_PATTERNS, *WEIGHT_PATTERNS.get(ref.load_format, WEIGHT_PATTERNS["auto"])]
    else:  # dummy weights: the config and tokenizer are enough
        patterns = list(METADATA_PATTERNS)
    try:
        return Path(snapshot_download(ref.model, revision=ref.revision, cache_dir=cache, allow_patterns=patterns))
    except Exception as exc:  # offline with nothing cached, unknown repo, gated repo, network…
        raise ResolveError(
            ref.key,
            ref.model,
            f"cannot fetch this hub model into {cache}: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}",
        ) from None


def resolve(ref: ModelRef, cache: str) -> dict[str, Any]:
    """The manifest of one model: where the engine loads it from and which revision that is."""
    path = local_dir(ref.model)
    source = "local"
    if path is None:
        if not is_hub_id(ref.model):
            raise ResolveError(ref.key, ref.model, "neither a local directory nor a hub id (org/name)")
        path, source = fetch(ref, cache), "hub"
    cfg = check_dir(ref, path)
    if ref.needs_weights:
        revision = weights_revision(path, weight_files(ref, path))
    elif source == "hub":
        revision = path.name
    else:
        revision = config_revision(path) if (path / "config.json").is_file() else weights_revision_of_tokenizer(path)
    return {
        "manifest_version": MANIFEST_VERSION,
        "key": ref.key,
        "model": ref.model,
        "source": source,
        "path": str(path.resolve()),
        "revision": revision,
        "load_format": ref.load_format,
        "requested_revision": ref.revision,
        "vocab_size": vocab_size_of(cfg),
        "cache": cache,
    }


def weights_revision_of_tokenizer(path: Path) -> str:
    files = sorted(f for f in path.iterdir() if f.is_file() and f.name.startswith("tokenizer"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return "sha256:" + digest.hexdigest()[:16]


def check_resolved_pairs(config: dict[str, Any], manifests: dict[str, dict[str, Any]]) -> None:
    """After hub downloads: the prompt tokenizer must fit every model of each pair (as check_config
    does for local dirs, now for snapshots too)."""
    by_key = {m["key"]: m for m in manifests.values()}
    for pair_name, pair in config["models"].items():
        target = pair["target"]
        tref = ModelRef(
            f"models.{pair_name}.target.model",
            target["model"],
            target.get("load_format", "auto"),
            target.get("revision"),
        )
        tman = manifests.get(tref.manifest_key) or by_key.get(tref.key)
        if tman is None:
            continue
        explicit = target.get("tokenizer")
        tok_key = _tokenizer_key(pair_name, target)
        if explicit and explicit not in tk.SHIPPED_ALIASES and explicit != target["model"]:
            tokm = manifests.get(ModelRef("", explicit, "tokenizer", None).manifest_key)
            tok_source, top = explicit, tokenizer_top_id(Path(tokm["path"])) if tokm else None
        else:
            tok_source, top = prompt_tokenizer(tref, explicit, Path(tman["path"]))
        for role in ("target", "draft"):
            m = pair.get(role)
            if not m:
                continue
            ref = ModelRef(
                f"models.{pair_name}.{role}.model", m["model"], m.get("load_format", "auto"), m.get("revision")
            )
            man = manifests.get(ref.manifest_key)
            if man:
                check_vocab_covers(tok_key, Path(man["path"]), man.get("vocab_size"), tok_source, top)


def resolve_all(config: dict[str, Any], log=print) -> dict[str, dict[str, Any]]:
    """Resolve every model of the config (hub ids fetched); manifest path → manifest."""
    cache = cache_dir()
    out: dict[str, dict[str, Any]] = {}
    by_key: dict[str, dict[str, Any]] = {}
    for mkey, ref in unique_refs(model_refs(config)).items():
        log(f"resolve {ref.key} = {ref.model} (load_format {ref.load_format}, revision {ref.revision or 'default'})")
        man = resolve(ref, cache)
        log(f"  {man['source']}: {man['path']} @ {man['revision']}")
        out[manifest_path(ref)] = man
        by_key[mkey] = man
    check_resolved_pairs(config, by_key)
    return out


def write_manifests(manifests: dict[str, dict[str, Any]], workdir: str | Path = ".") -> None:
    """Write each manifest atomically, leaving an unchanged one untouched (its mtime too)."""
    from specjoule.records import atomic_path

    for rel, man in manifests.items():
        path = Path(workdir) / rel
        text = json.dumps(man, indent=1, sort_keys=True) + "\n"
        if path.is_file() and path.read_text() == text:
            continue
        with atomic_path(path) as tmp:
            Path(tmp).write_text(text)


# -- what the GPU jobs read --------------------------------------------------------------------------


def cell_refs(spec: CellSpec | Mapping[str, Any]) -> dict[str, ModelRef]:
    """The models a cell loads, by record role: ``target`` and the drafter as ``draft`` (the pair's
    draft for draft_model, the scheme's drafter for eagle3/mtp/dflash/dspark; none for ngram and
    baseline)."""
    spec = CellSpec.of(spec)
    out = {}
    t, d, scheme = spec.engine.target, spec.engine.draft, spec.scheme
    out["target"] = ModelRef("target", t.model, t.load_format, t.revision)
    if scheme.method == "draft_model" and d is not None:
        out["draft"] = ModelRef("draft", d.model, d.load_format, d.revision)
    elif scheme.drafter:
        out["draft"] = ModelRef("drafter", scheme.drafter, drafter_load_format(t.entry), None)
    return out


def cell_manifest_paths(spec: CellSpec | Mapping[str, Any]) -> list[str]:
    """The manifests a cell's job waits for (inputs of the GPU rules)."""
    return sorted({manifest_path(r) for r in cell_refs(spec).values()})


def read_manifest(ref: ModelRef, workdir: str | Path = ".") -> dict[str, Any] | None:
    path = Path(workdir) / manifest_path(ref)
    return json.loads(path.read_text()) if path.is_file() else None


def localize(spec: CellSpec | Mapping[str, Any], workdir: str | Path = ".") -> tuple[CellSpec, dict[str, str | None]]:
    """(the spec with hub models replaced by their fetched snapshot directories, the record's
    ``target_revision`` and ``draft_revision``) from the manifests ``resolve_models`` wrote.

    Without a manifest (a cell run by hand, outside Snakemake) the spec is unchanged and the revision
    null: unknown, never guessed."""
    out = CellSpec.of(spec)  # frozen: the cell's own spec stays as planned
    revisions: dict[str, str | None] = {"target_revision": None, "draft_revision": None}
    for role, ref in cell_refs(spec).items():
        man = read_manifest(ref, workdir)
        column = "target_revision" if role == "target" else "draft_revision"
        if man is None:
            continue
        revisions[column] = man["revision"]
        if man["source"] != "hub":
            continue
        # The record role "draft" is the pair's draft only for draft_model; for a head or block drafter it is the
        # scheme's drafter, even when the pair also has a draft (for its draft_model arms).
        if role == "target":
            out = out.with_engine(target=out.engine.target.with_model(man["path"]))
        elif ref.key == "draft" and out.engine.draft is not None:
            out = out.with_engine(draft=out.engine.draft.with_model(man["path"]))
        else:
            out = out.with_scheme(out.scheme.with_drafter(man["path"]))
    return out, revisions


def main(argv: list[str] | None = None) -> int:
    """``python -m specjoule.resolve_models CONFIG [--log PATH]``: resolve (and fetch) every model of a
    config, writing one manifest per model under results/.specjoule/models/ in the working directory."""
    import argparse

    from specjoule import config as cfgmod

    ap = argparse.ArgumentParser(prog="python -m specjoule.resolve_models", description=main.__doc__)
    ap.add_argument("config", help="a config file (YAML, or the validated JSON the workflow writes)")
    ap.add_argument("--workdir", default=".")
    ap.add_argument("--log", default=None, help="append progress lines here as well")
    args = ap.parse_args(argv)
    log_fh = open(args.log, "a") if args.log else None

    def say(msg: str) -> None:
        print(msg, flush=True)
        if log_fh:
            log_fh.write(msg + "\n")
            log_fh.flush()

    try:
        cfg = cfgmod.load(args.config)
        write_manifests(resolve_all(cfg, log=say), args.workdir)
    except ConfigError as exc:
        say(str(exc))
        return 1
    finally:
        if log_fh:
            log_fh.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
