"""Regenerate specjoule/support.py: the model architectures each bundled engine registers.

Reads the engines' own registries straight out of their wheels (no import, no GPU):

- vLLM: every string key of the ``_*_MODELS`` dicts in ``vllm/model_executor/models/registry.py``
  (text, multimodal, speculative-decoding and Transformers-backend tables alike);
- SGLang: the ``__name__`` of every class named by ``EntryClass`` in ``sglang/srt/models/*.py`` — what
  ``sglang.srt.models.registry.import_model_classes`` builds at start-up.

    python tools/extract_support.py --vllm WHEEL --sglang WHEEL [--out specjoule/support.py]

The wheels the H200 runs are under .bundle/specjoule-bundle/wheels/ and .bundle/sglang/specjoule-bundle/wheels/.
"""

from __future__ import annotations

import argparse
import ast
import re
import zipfile
from pathlib import Path

VLLM_REGISTRY = "vllm/model_executor/models/registry.py"
SGLANG_MODELS = re.compile(r"^sglang/srt/models/[A-Za-z0-9_]+\.py$")


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


def sglang_architectures(wheel: Path) -> dict[str, str]:
    """architecture -> "module:Class" from every SGLang model module's EntryClass."""
    out: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            if not SGLANG_MODELS.match(name):
                continue
            module = Path(name).stem
            source = zf.read(name).decode("utf-8-sig")
            try:
                tree = ast.parse(source)
            except SyntaxError:  # newer syntax than this interpreter: read EntryClass textually
                for cls in _entry_class_by_text(source):
                    out[cls] = f"{module}:{cls}"
                continue
            aliases = {
                t.id: n.value.id
                for n in tree.body
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name) and isinstance(n.value, ast.Name)
            }
            for node in tree.body:
                if not (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets)
                ):
                    continue
                elts = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                for e in elts:
                    if isinstance(e, ast.Name):
                        cls = e.id
                        while cls in aliases and cls != "EntryClass":
                            cls = aliases[cls]
                        out[cls] = f"{module}:{cls}"
    return out


def _class_graph(zf: zipfile.ZipFile, pattern: re.Pattern, marks: callable) -> tuple[dict, set]:
    """Bases of every class in the model files (by simple name) and the classes a file marks directly."""
    bases: dict[str, set[str]] = {}
    marked: set[str] = set()
    for name in zf.namelist():
        if not pattern.match(name):
            continue
        try:
            tree = ast.parse(zf.read(name).decode("utf-8-sig"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {
                    b.id if isinstance(b, ast.Name) else b.attr
                    for b in node.bases
                    if isinstance(b, (ast.Name, ast.Attribute))
                }
                bases.setdefault(node.name, set()).update(names)
                if marks(node, names):
                    marked.add(node.name)
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

        def marks(node: ast.ClassDef, names: set[str]) -> bool:
            return "SupportsEagle3" in names
    else:
        pattern = SGLANG_MODELS

        def marks(node: ast.ClassDef, names: set[str]) -> bool:
            return any(isinstance(f, ast.FunctionDef) and f.name == "set_eagle3_layers_to_capture" for f in node.body)

    with zipfile.ZipFile(wheel) as zf:
        bases, marked = _class_graph(zf, pattern, marks)
    return sorted(a for a, where in registered.items() if _closure(where.split(":")[-1], bases, marked))


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
) -> str:
    def table(d: dict[str, str]) -> str:
        return "\n".join(f"    {k!r}: {v!r}," for k, v in sorted(d.items()))

    def names(items: list[str]) -> str:
        return "\n".join(f"    {k!r}," for k in items)

    return f'''"""Model architectures each bundled engine version registers — generated, do not edit.

Regenerate with ``python tools/extract_support.py --vllm WHEEL --sglang WHEEL`` from the wheels the H200
runs: vLLM {vllm_version} (``vllm/model_executor/models/registry.py``, every ``_*_MODELS`` table) and
SGLang {sglang_version} (``EntryClass`` of every ``sglang/srt/models/*.py``). ``supported(engine,
architecture)`` answers from these tables alone; an architecture an engine does not register becomes a
planned ``unsupported`` record, not a config error (an engine may still run it through a generic backend,
which this project does not measure).
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

_TABLES = {{"vllm": VLLM_ARCHITECTURES, "sglang": SGLANG_ARCHITECTURES}}
_EAGLE3 = {{"vllm": VLLM_EAGLE3_TARGETS, "sglang": SGLANG_EAGLE3_TARGETS}}


def supported(engine: str, architecture: str) -> tuple[bool, str]:
    """Whether ``engine``'s bundled version registers ``architecture``; the reason in words either way."""
    table = _TABLES.get(engine)
    if table is None:
        return False, f"unknown engine {{engine!r}}; known: {{', '.join(sorted(_TABLES))}}"
    where = table.get(architecture)
    version = VERSIONS[engine]
    if where is None:
        return False, f"{{engine}} {{version}} does not register architecture {{architecture!r}} in its model registry"
    return True, f"{{engine}} {{version}} registers {{architecture!r}} ({{where}})"


def eagle3_target_supported(engine: str, architecture: str) -> tuple[bool, str]:
    """Whether ``engine`` can run an EAGLE3 head on a target of ``architecture`` (aux hidden states)."""
    ok, reason = supported(engine, architecture)
    if not ok:
        return ok, reason
    version = VERSIONS[engine]
    if architecture in _EAGLE3[engine]:
        return True, f"{{engine}} {{version}}: {{architecture!r}} provides EAGLE3 auxiliary hidden states"
    hook = "implement SupportsEagle3" if engine == "vllm" else "define set_eagle3_layers_to_capture"
    return False, (f"{{engine}} {{version}}: target {{architecture!r}} does not {{hook}}, so it cannot feed an "
                   f"EAGLE3 head (vLLM raises 'Model does not support EAGLE3 interface')" if engine == "vllm"
                   else f"{{engine}} {{version}}: target {{architecture!r}} does not {{hook}}, so it cannot feed an EAGLE3 head")
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", type=Path, required=True, help="the vLLM wheel")
    ap.add_argument("--sglang", type=Path, required=True, help="the SGLang wheel")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "specjoule" / "support.py")
    args = ap.parse_args()
    vllm, sglang = vllm_architectures(args.vllm), sglang_architectures(args.sglang)
    text = render(
        vllm,
        wheel_version(args.vllm),
        sglang,
        wheel_version(args.sglang),
        eagle3_targets(args.vllm, "vllm", vllm),
        eagle3_targets(args.sglang, "sglang", sglang),
    )
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
