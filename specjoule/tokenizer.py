"""Tokenizers for prompt pools: the target's own, or the one the project ships.

A prompt pool is token ids, so every pool needs a tokenizer. Real models bring their own
(``tokenizer.json`` / ``tokenizer_config.json`` in the model dir, or a hub id) and are read
through ``transformers``. Shape-only models (a ``config.json`` and dummy weights) have none, so
the project ships one: a byte-level BPE of exactly :data:`SHIPPED_VOCAB_SIZE` ids trained by
``scripts/build_tokenizer.py`` on the built-in corpora (ADR 0041). Its ids fit every model the
project ships (the tiny demo pair has 8192 ids; the Qwen2.5 shapes 151936).

Both kinds expose one small interface, :class:`TextTokenizer`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED_TOKENIZER_PATH = DATA_DIR / "tokenizer.json"
SHIPPED_TOKENIZER_CONFIG_PATH = DATA_DIR / "tokenizer_config.json"
SHIPPED_NAME = "specjoule-bpe-8192"
SHIPPED_VOCAB_SIZE = 8192
# Special ids line up with the shipped shape-only configs (bos_token_id 1, eos_token_id 2), and the
# ChatML markers give shape-only targets a chat template of the Qwen family's form.
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>")
# ChatML, as the Qwen2.5 family uses (without its default system prompt).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Names that select the shipped tokenizer explicitly in a model's ``tokenizer`` field.
SHIPPED_ALIASES = ("specjoule", SHIPPED_NAME)
_HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class TokenizerError(ValueError):
    """No tokenizer can be had for a target (missing files, no hub access, missing package)."""


class TextTokenizer(Protocol):
    name: str  # what the record states: "specjoule-bpe-8192@<sha>" or the HF dir / hub id
    size: int  # number of ids it can produce (ids are in [0, size))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def has_chat_template(self) -> bool: ...

    def render_chat(self, messages: list[dict[str, str]], **kwargs: Any) -> str: ...


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=4)
def _read_shipped(path: str, mtime_ns: int, size: int) -> tuple[Any, int, str]:
    """The parsed tokenizer file, its vocabulary size and its SHA-256, read once per file version and shared (a
    pool per cell resolves its tokenizer again; parsing the file is ~9 ms). Only ``encode``, ``decode`` and
    ``get_vocab_size`` are called on it, none of which changes it (no truncation or padding is ever set)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    return tok, tok.get_vocab_size(with_added_tokens=True), file_sha256(Path(path))


@dataclass
class ShippedTokenizer:
    """The project's byte-level BPE, read with the ``tokenizers`` library (no transformers)."""

    path: Path = SHIPPED_TOKENIZER_PATH
    name: str = ""
    size: int = 0
    _tok: Any = field(default=None, repr=False)
    _template: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        try:
            import tokenizers  # noqa: F401 - read in _read_shipped; missing, it is said here
        except ImportError as exc:  # pragma: no cover - tokenizers is a core dependency
            raise TokenizerError(
                "the shipped tokenizer needs the `tokenizers` package (pip install tokenizers)"
            ) from exc
        if not self.path.is_file():
            raise TokenizerError(
                f"shipped tokenizer missing at {self.path}; rebuild it with scripts/build_tokenizer.py"
            )
        stat = self.path.stat()
        self._tok, self.size, sha = _read_shipped(str(self.path), stat.st_mtime_ns, stat.st_size)
        self.name = f"{SHIPPED_NAME}@{sha[:12]}"

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        # No post-processor: the shipped tokenizer adds no BOS, like Qwen's.
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def has_chat_template(self) -> bool:
        return True

    def render_chat(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        if self._template is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            self._template = ImmutableSandboxedEnvironment().from_string(shipped_chat_template())
        return self._template.render(messages=messages, **{"add_generation_prompt": True, **kwargs})


@dataclass
class HFTokenizer:
    """A model's own tokenizer through ``transformers`` (local dir, or hub id when the hub is reachable
    or cached)."""

    source: str
    name: str = ""
    size: int = 0
    _tok: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise TokenizerError(f"tokenizer {self.source!r} needs the `transformers` package") from exc
        try:
            self._tok = AutoTokenizer.from_pretrained(self.source)
        except Exception as exc:  # transformers raises OSError, ValueError, hub errors…
            raise TokenizerError(f"cannot load tokenizer {self.source!r}: {type(exc).__name__}: {exc}") from exc
        self.size = len(self._tok)
        self.name = self.source

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)

    def has_chat_template(self) -> bool:
        return bool(getattr(self._tok, "chat_template", None))

    def render_chat(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        return self._tok.apply_chat_template(messages, tokenize=False, **{"add_generation_prompt": True, **kwargs})


def shipped_chat_template() -> str:
    if SHIPPED_TOKENIZER_CONFIG_PATH.is_file():
        return json.loads(SHIPPED_TOKENIZER_CONFIG_PATH.read_text())["chat_template"]
    return CHATML_TEMPLATE


def _local_dir(model: str, repo_root: Path) -> Path | None:
    for base in (Path.cwd(), repo_root):
        p = Path(model) if Path(model).is_absolute() else base / model
        if p.is_dir():
            return p
    return None


def has_own_tokenizer(model_dir: Path) -> bool:
    return any((model_dir / f).is_file() for f in _HF_TOKENIZER_FILES)


def resolve(target: dict[str, Any], repo_root: Path) -> TextTokenizer:
    """The tokenizer prompts for ``target`` are made with.

    ``target.tokenizer`` wins when set ("specjoule" selects the shipped one). Otherwise a local model
    dir with tokenizer files, or a hub id, uses its own; a local dir without any (a shape-only model)
    uses the shipped tokenizer.
    """
    explicit = target.get("tokenizer")
    if explicit:
        if explicit in SHIPPED_ALIASES:
            return ShippedTokenizer()
        local = _local_dir(explicit, repo_root)
        return HFTokenizer(str(local) if local else explicit)
    model = target.get("model")
    if not model:
        raise TokenizerError("target has no `model` to take a tokenizer from")
    local = _local_dir(model, repo_root)
    if local is None:
        return HFTokenizer(model)  # a hub id
    if has_own_tokenizer(local):
        return HFTokenizer(str(local))
    return ShippedTokenizer()


def vocab_size(target: dict[str, Any], repo_root: Path) -> int | None:
    """The target's embedding size from a local ``config.json``; None when the model is not local."""
    model = target.get("model")
    local = _local_dir(model, repo_root) if model else None
    if local is None or not (local / "config.json").is_file():
        return None
    cfg = json.loads((local / "config.json").read_text())
    for node in (cfg, cfg.get("text_config") or {}, cfg.get("llm_config") or {}):
        if isinstance(node.get("vocab_size"), int):
            return node["vocab_size"]
    return None
