"""Reading config files the way the project means them: every mapping key once, every syntax error placed.

Plain YAML keeps the last of two equal keys without a word, and Snakemake reads ``--configfile`` with such a
loader (and says only "Config file is not valid JSON or YAML" for a syntax error). This module reads a file
once more with the project's rules (issue 21, ADR 0130):

- a duplicate key in any mapping, at any depth, is a ``ConfigError`` at its full key path, with the file and
  both lines;
- a YAML syntax error is a ``ConfigError`` at the key path being read when the parser stopped, with the file,
  line and column, and the offending line as written.

``precheck_argv`` runs these checks on the files of a Snakemake command line before Snakemake reads them
(called from ``profiles/default/config.yaml``, which Snakemake loads first on every run); the Snakefile
re-reads every file Snakemake was given (``rules/common.smk``) for the runs that bypass the profile.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

# The document is parsed into nodes by libyaml where PyYAML was built with it (0.13x the time of PyYAML's own parser,
# the same nodes: tags resolved by the same Python resolver, the same lines in their marks); the values are then
# built by PyYAML's SafeLoader as before. Every `snakemake` command line reads its config files twice (ADR 0238).
_COMPOSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _config_error(key: str, value: Any, reason: str) -> Exception:
    from specjoule.config import ConfigError  # config imports this module

    return ConfigError(key, value, reason)


def key_path(parts: Sequence[str | int]) -> str:
    """The one key-path notation of every config error: ``models.tiny.target``, ``batch_sizes[1]``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or "(top level)"


def _scalar_key(node: yaml.Node) -> Any:
    """A mapping key as YAML resolves it (``1`` and ``"1"`` differ, ``yes`` is True in YAML 1.1)."""
    if isinstance(node, yaml.ScalarNode):
        return yaml.SafeLoader("").construct_object(node) if node.tag != "tag:yaml.org,2002:str" else node.value
    return None  # a complex key: YAML allows it, the schema refuses it later


def _duplicates(node: yaml.Node, path: list[str | int], text: str, name: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Node] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges, by design, and may repeat
                continue
            key = _scalar_key(key_node)
            if key is not None and key in seen:
                first = seen[key].start_mark.line + 1
                here = key_node.start_mark.line + 1
                value = yaml.SafeLoader(text).construct_object(value_node, deep=True)
                raise _config_error(
                    key_path([*path, str(key)]),
                    value,
                    f"duplicate key in {name} (line {here}; also at line {first}): YAML would keep "
                    f"only the last one, silently; write each key once",
                )
            if key is not None:
                seen[key] = key_node
            _duplicates(value_node, [*path, str(key)], text, name)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _duplicates(item, [*path, i], text, name)


def _path_at_error(text: str) -> list[str | int]:
    """The key path the parser was reading when it stopped (events up to the error)."""
    frames: list[dict[str, Any]] = []  # {"map": bool, "key": last key, "want_key": bool, "index": int}

    def value_done() -> None:
        if frames and frames[-1]["map"]:
            frames[-1]["want_key"] = True

    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                top = frames[-1] if frames else None
                if top is not None and top["map"] and top["want_key"]:
                    if isinstance(ev, yaml.ScalarEvent):
                        top["key"], top["want_key"] = ev.value, False
                        continue
                if top is not None and not top["map"]:
                    top["index"] += 1
                if isinstance(ev, yaml.MappingStartEvent):
                    frames.append({"map": True, "key": None, "want_key": True, "index": -1})
                elif isinstance(ev, yaml.SequenceStartEvent):
                    frames.append({"map": False, "key": None, "want_key": False, "index": -1})
                else:
                    value_done()
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                frames.pop()
                value_done()
    except yaml.YAMLError:
        pass
    path: list[str | int] = []
    for f in frames:
        # A mapping names its key only while that key's value is being read: after a finished value the parser
        # stopped between entries, and the place is the mapping itself.
        if f["map"] and f["key"] is not None and not f["want_key"]:
            path.append(f["key"])
        elif not f["map"] and f["index"] >= 0:
            path.append(f["index"])
    return path


def _syntax_error(exc: yaml.YAMLError, text: str, name: str) -> Exception:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    if mark is None:
        return _config_error("(top level)", None, f"YAML syntax error in {name}: {problem}")
    lines = text.splitlines()
    where = f"{name} line {mark.line + 1}, column {mark.column + 1}"
    extra = ""
    ctx = getattr(exc, "context_mark", None)
    shown = mark.line
    if context and ctx is not None and ctx.line != mark.line:
        # The construct left open (a bracket, a quote) is usually the mistake: show the line it starts on.
        extra = f" ({context} that starts at line {ctx.line + 1})"
        shown = ctx.line
    elif context:
        extra = f" ({context})"
    line_text = lines[shown].rstrip() if shown < len(lines) else ""
    problem_line = lines[mark.line] if mark.line < len(lines) else ""
    if "\t" in problem_line[: mark.column + 1] and "tab" not in problem:
        extra += "; YAML does not allow a tab for indentation"
    return _config_error(
        key_path(_path_at_error(text)), line_text.strip(), f"YAML syntax error in {where}: {problem}{extra}"
    )


def read_yaml(path: str | Path) -> dict:
    """A config file (YAML or JSON) as a dict; ``ConfigError`` for a duplicate key, a syntax error, a file that
    is not there or a document that is not a mapping."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _config_error("(config file)", name, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _config_error("(config file)", name, f"cannot be read: {exc}") from None
    try:
        node = yaml.compose(text, Loader=_COMPOSER)
    except yaml.YAMLError:
        # libyaml words and places an error its own way: the message comes from PyYAML, as it always has.
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            raise _syntax_error(exc, text, name) from None
    if node is None:
        return {}
    _duplicates(node, [], text, name)
    data = yaml.SafeLoader(text).construct_document(node)
    if not isinstance(data, dict):
        raise _config_error("(top level)", data, f"{name} holds a {type(data).__name__}, not a mapping of config keys")
    return data


def configfiles_in_argv(argv: Sequence[str]) -> list[str]:
    """The files a Snakemake command line passes with ``--configfile`` / ``--configfiles`` (any spelling the CLI
    accepts: repeated, several after one flag, ``--configfile=F``)."""
    out: list[str] = []
    taking = False
    for arg in argv[1:]:
        if arg.startswith("--configfile=") or arg.startswith("--configfiles="):
            out.append(arg.split("=", 1)[1])
            taking = False
        elif arg in ("--configfile", "--configfiles"):
            taking = True
        elif taking and not arg.startswith("-"):
            out.append(arg)
        else:
            taking = False
    return out


def precheck_argv(argv: Sequence[str] | None = None) -> None:
    """Read the command line's config files with the project's rules; on a problem print the config error and
    exit 1 before Snakemake reads them its own way. Files that do not exist are left to Snakemake's message."""
    from specjoule.config import ConfigError

    for f in configfiles_in_argv(sys.argv if argv is None else argv):
        if not Path(f).is_file():
            continue
        try:
            read_yaml(f)
        except ConfigError as exc:
            sys.stderr.write(f"{exc}\n")
            raise SystemExit(1) from None
