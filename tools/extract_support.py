"""Regenerate specjoule/support_tables.py: the model architectures each bundled engine registers.

Reads the engines' own registries straight out of their wheels (no import, no GPU):

- vLLM: every string key of the ``_*_MODELS`` dicts in ``vllm/model_executor/models/registry.py``
  (text, multimodal, speculative-decoding and Transformers-backend tables alike);
- SGLang: the ``__name__`` of every class named by ``EntryClass`` in ``sglang/srt/models/*.py`` — what
  ``sglang.srt.models.registry.import_model_classes`` builds at start-up.

    python tools/extract_support.py --vllm WHEEL --sglang WHEEL [--out specjoule/support_tables.py]

It writes the tables alone, then formats them with ruff as the repository's lint expects. The engines' defects
found by hand and the functions that answer from both live in specjoule/support.py, which it never writes.

The wheels the H200 runs are under .bundle/specjoule-bundle/wheels/ and .bundle/sglang/specjoule-bundle/wheels/.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

VLLM_REGISTRY = "vllm/model_executor/models/registry.py"
SGLANG_MODELS = re.compile(r"^sglang/srt/models/[A-Za-z0-9_]+\.py$")
SGLANG_MODEL_CONFIG = "sglang/srt/configs/model_config.py"
SGLANG_SERVER_ARGS = "sglang/srt/server_args.py"


def wheel_version(wheel: Path) -> str:
    # name-version-pyXX-abi-platform.whl
    return wheel.name.split("-")[1]


def vllm_architectures(wheel: Path) -> dict[str, str]:
    """architecture -> "module:Class" from vLLM's registry tables."""
    with zipfile.ZipFile(wheel) as zf:
        tree = ast.parse(zf.read(VLLM_REGISTRY).decode())
    out: dict[str, str] = {}
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if not any(n.startswith("_") and n.endswith("_MODELS") for n in names):
            continue
        if not isinstance(node.value, ast.Dict):
            continue
        for key, value in zip(node.value.keys, node.value.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                out[key.value] = _vllm_target(value)
    return out


def _vllm_target(value: ast.AST) -> str:
    if isinstance(value, ast.Tuple) and all(isinstance(e, ast.Constant) for e in value.elts[:2]):
        return f"{value.elts[0].value}:{value.elts[1].value}"
    return "?"


class _ModelFile(NamedTuple):
    """What the extractors read from one model file of a wheel: its ``EntryClass`` names (aliases followed) and
    each class definition's base names and directly defined methods (``None`` where the file does not parse:
    newer syntax than this interpreter, its ``EntryClass`` then read as text)."""

    name: str
    entry: tuple[str, ...]
    classes: tuple[tuple[str, frozenset[str], frozenset[str]], ...] | None


def _read_model_file(name: str, source: str) -> _ModelFile:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _ModelFile(name, tuple(_entry_class_by_text(source)), None)
    aliases = {
        t.id: n.value.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and isinstance(n.value, ast.Name)
    }
    entry = []
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets)
        ):
            continue
        elts = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
        for e in elts:
            if isinstance(e, ast.Name):
                cls = e.id
                while cls in aliases and cls != "EntryClass":
                    cls = aliases[cls]
                entry.append(cls)
    classes = tuple(
        (
            node.name,
            frozenset(
                b.id if isinstance(b, ast.Name) else b.attr
                for b in node.bases
                if isinstance(b, (ast.Name, ast.Attribute))
            ),
            frozenset(f.name for f in node.body if isinstance(f, ast.FunctionDef)),
        )
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    )
    return _ModelFile(name, tuple(entry), classes)


def _model_files(wheel: Path, pattern: re.Pattern) -> tuple[_ModelFile, ...]:
    """Every model file of the wheel that ``pattern`` matches, in name order, each parsed once per wheel: the
    architectures, EAGLE3 and DFlash tables all read SGLang's ~200 model files (parsing them is the costly part)."""
    stat = wheel.stat()
    return _model_files_of(wheel.resolve(), stat.st_mtime_ns, stat.st_size, pattern.pattern)


@functools.lru_cache(maxsize=4)
def _model_files_of(wheel: Path, mtime_ns: int, size: int, pattern: str) -> tuple[_ModelFile, ...]:
    match = re.compile(pattern).match
    with zipfile.ZipFile(wheel) as zf:
        return tuple(
            _read_model_file(name, zf.read(name).decode("utf-8-sig")) for name in sorted(zf.namelist()) if match(name)
        )


def sglang_architectures(wheel: Path) -> dict[str, str]:
    """architecture -> "module:Class" from every SGLang model module's EntryClass."""
    out: dict[str, str] = {}
    for f in _model_files(wheel, SGLANG_MODELS):
        for cls in f.entry:
            out[cls] = f"{Path(f.name).stem}:{cls}"
    return out


def _class_graph(wheel: Path, pattern: re.Pattern, marks: Callable[[set[str], set[str]], bool]) -> tuple[dict, set]:
    """Bases of every class in the model files (by simple name) and the classes a file marks directly
    (``marks(base names, method names)`` of one class definition)."""
    bases: dict[str, set[str]] = {}
    marked: set[str] = set()
    for f in _model_files(wheel, pattern):
        for name, names, methods in f.classes or ():
            bases.setdefault(name, set()).update(names)
            if marks(names, methods):
                marked.add(name)
    return bases, marked


def _closure(cls: str, bases: dict, marked: set, seen: set | None = None) -> bool:
    seen = seen or set()
    if cls in marked:
        return True
    if cls in seen:
        return False
    seen.add(cls)
    return any(_closure(b, bases, marked, seen) for b in bases.get(cls, ()))


def eagle3_targets(wheel: Path, engine: str, registered: dict[str, str]) -> list[str]:
    """Registered architectures whose class can hand EAGLE3 its auxiliary hidden states:
    vLLM — the class implements ``SupportsEagle3`` (the model runner raises "Model does not support EAGLE3
    interface" otherwise); SGLang — the class (or a base) defines ``set_eagle3_layers_to_capture``."""
    if engine == "vllm":
        pattern = re.compile(r"^vllm/model_executor/models/.*\.py$")

        def marks(names: set[str], methods: set[str]) -> bool:
            return "SupportsEagle3" in names
    else:
        pattern = SGLANG_MODELS

        def marks(names: set[str], methods: set[str]) -> bool:
            return "set_eagle3_layers_to_capture" in methods

    bases, marked = _class_graph(wheel, pattern, marks)
    return sorted(a for a, where in registered.items() if _closure(where.split(":")[-1], bases, marked))


def dflash_targets(wheel: Path, registered: dict[str, str]) -> list[str]:
    """SGLang architectures whose class (or a base) defines ``set_dflash_layers_to_capture``: the DFLASH worker
    asks the target for the hidden states of the drafter's ``target_layer_ids`` through it."""

    def marks(names: set[str], methods: set[str]) -> bool:
        return "set_dflash_layers_to_capture" in methods

    bases, marked = _class_graph(wheel, SGLANG_MODELS, marks)
    return sorted(a for a, where in registered.items() if _closure(where.split(":")[-1], bases, marked))


def _strings(node: ast.AST) -> list[str]:
    """The string constants of ``"X"`` or ``["X", "Y"]`` / ``("X", "Y")``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _is_architectures(node: ast.AST) -> bool:
    """``self.hf_config.architectures[0]`` or ``self.hf_config.architectures``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "architectures"


def sglang_nextn_drafts(wheel: Path) -> dict[str, str]:
    """target architecture -> the draft architecture SGLang loads for NEXTN/EAGLE when the draft path is the target
    itself: the ``if is_draft_model and ...architectures[0] == "X": ...architectures[0] = "Y"`` chain of
    ``ModelConfig._config_draft_model``. Where a branch assigns twice (DeepSeek-V4: a DSpark head or MTP), the last
    assignment (the MTP one) is kept. A target not in the table is loaded whole as its own draft."""
    with zipfile.ZipFile(wheel) as zf:
        tree = ast.parse(zf.read(SGLANG_MODEL_CONFIG).decode("utf-8-sig"))
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_config_draft_model")
    out: dict[str, str] = {}
    for branch in func.body:
        if not isinstance(branch, ast.If):
            continue
        targets = [
            name
            for cmp in ast.walk(branch.test)
            if isinstance(cmp, ast.Compare) and _is_architectures(cmp.left)
            for comparator in cmp.comparators
            for name in _strings(comparator)
        ]
        drafts = [
            name
            for node in ast.walk(ast.Module(body=branch.body, type_ignores=[]))
            if isinstance(node, ast.Assign) and any(_is_architectures(t) for t in node.targets)
            for name in _strings(node.value)
        ]
        for target in targets:
            if drafts:
                out[target] = drafts[-1]
    return out


def sglang_attention_backends(wheel: Path) -> dict[str, list[str]]:
    """architecture -> the attention backends SGLang accepts for it at all (prefill and decode), from the
    ``elif model_arch in (...): ... accepted_backends = (...); assert ...`` branches of ``ServerArgs`` that
    hold the list unconditionally (Gemma-4 in 0.5.17); an engine start with another backend fails that assert."""
    with zipfile.ZipFile(wheel) as zf:
        tree = ast.parse(zf.read(SGLANG_SERVER_ARGS).decode("utf-8-sig"))
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
            continue
        left = node.test.left
        if not (isinstance(left, ast.Name) and left.id == "model_arch"):
            continue
        if not any(isinstance(op, ast.In) for op in node.test.ops):
            continue
        archs = [name for c in node.test.comparators for name in _strings(c)]
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "accepted_backends" for t in stmt.targets)
                and _strings(stmt.value)
            ):
                for arch in archs:
                    out[arch] = _strings(stmt.value)
    return out


def _entry_class_by_text(source: str) -> list[str]:
    m = re.search(r"^EntryClass\s*=\s*\[?([^\]\n]*)\]?", source, re.M)
    return [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []


def render(
    vllm: dict[str, str],
    vllm_version: str,
    sglang: dict[str, str],
    sglang_version: str,
    vllm_eagle3: list[str],
    sglang_eagle3: list[str],
    sglang_nextn: dict[str, str],
    sglang_dflash: list[str],
    sglang_backends: dict[str, list[str]],
) -> str:
    def table(d: dict[str, str]) -> str:
        return "\n".join(f"    {k!r}: {v!r}," for k, v in sorted(d.items()))

    def names(items: list[str]) -> str:
        return "\n".join(f"    {k!r}," for k in items)

    def tuples(d: dict[str, list[str]]) -> str:
        return "\n".join(f"    {k!r}: {tuple(v)!r}," for k, v in sorted(d.items()))

    return f'''"""Model architectures each bundled engine version registers — generated, do not edit.

Regenerate with ``python tools/extract_support.py --vllm WHEEL --sglang WHEEL`` from the wheels the H200
runs: vLLM {vllm_version} (``vllm/model_executor/models/registry.py``, every ``_*_MODELS`` table) and
SGLang {sglang_version} (``EntryClass`` of every ``sglang/srt/models/*.py``). Only these tables: what they mean, and the
engines' defects found by hand, are in ``specjoule.support``, which the tool never writes.
"""

from __future__ import annotations

VERSIONS = {{"vllm": {vllm_version!r}, "sglang": {sglang_version!r}}}

# architecture -> "module:Class" in vLLM {vllm_version}
VLLM_ARCHITECTURES: dict[str, str] = {{
{table(vllm)}
}}

# architecture -> "module:Class" in SGLang {sglang_version}
SGLANG_ARCHITECTURES: dict[str, str] = {{
{table(sglang)}
}}

# Target architectures that hand an EAGLE3 head its auxiliary hidden states: vLLM — the class implements
# SupportsEagle3 (else the model runner raises "Model does not support EAGLE3 interface"); SGLang — the
# class or a base defines set_eagle3_layers_to_capture.
VLLM_EAGLE3_TARGETS: frozenset[str] = frozenset({{
{names(vllm_eagle3)}
}})
SGLANG_EAGLE3_TARGETS: frozenset[str] = frozenset({{
{names(sglang_eagle3)}
}})

# SGLang NEXTN (its MTP; an alias of EAGLE): target architecture -> the draft class that
# ModelConfig._config_draft_model (sglang/srt/configs/model_config.py) loads when the draft path is the target
# itself. A target not here is loaded whole as its own draft: no MTP layers run.
SGLANG_NEXTN_DRAFTS: dict[str, str] = {{
{table(sglang_nextn)}
}}

# SGLang targets whose class or a base defines set_dflash_layers_to_capture: the DFLASH worker takes the
# drafter's target_layer_ids hidden states through it.
SGLANG_DFLASH_TARGETS: frozenset[str] = frozenset({{
{names(sglang_dflash)}
}})

# SGLang architectures that accept only these attention backends, prefill and decode alike: ServerArgs
# asserts it at start (sglang/srt/server_args.py, the model_arch branch holding accepted_backends).
SGLANG_ATTENTION_BACKENDS: dict[str, tuple[str, ...]] = {{
{tuples(sglang_backends)}
}}
'''


def formatted(text: str) -> str:
    """``text`` as ``ruff format`` writes it (the ruff beside this interpreter, as `make lint` runs it)."""
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run([str(ruff), "format", "-"], input=text, capture_output=True, text=True, check=True)
    return done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", type=Path, required=True, help="the vLLM wheel")
    ap.add_argument("--sglang", type=Path, required=True, help="the SGLang wheel")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "specjoule" / "support_tables.py")
    args = ap.parse_args()
    vllm, sglang = vllm_architectures(args.vllm), sglang_architectures(args.sglang)
    text = render(
        vllm,
        wheel_version(args.vllm),
        sglang,
        wheel_version(args.sglang),
        eagle3_targets(args.vllm, "vllm", vllm),
        eagle3_targets(args.sglang, "sglang", sglang),
        sglang_nextn_drafts(args.sglang),
        dflash_targets(args.sglang, sglang),
        sglang_attention_backends(args.sglang),
    )
    args.out.write_text(formatted(text))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
