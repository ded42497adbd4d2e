"""Extract, with ``ast`` (no import: the GPU engines do not import on a CPU box), the config fields and speculative
method names of the engine versions the H200 runs, for the CPU tests of the adapters' arguments (ADR 0075).

    python tools/engine_fields.py vllm /work/src/vllm-0.26.0/vllm 0.26.0 > tests/data/vllm/speculative-0.26.0.json
    python tools/engine_fields.py sglang /tmp/sglang-src/sglang 0.5.17 > tests/data/sglang/speculative-0.5.17.json

The tests re-extract from the source when it is on this machine and compare with the shipped file.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"class {name} not found")


def class_fields(path: Path, name: str) -> list[str]:
    """Annotated class-level names of a dataclass (its fields), in order."""
    cls = _class(ast.parse(path.read_text()), name)
    return [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def _literal_strings(node: ast.AST, aliases: dict[str, ast.AST]) -> list[str]:
    """String values of a (nested) ``Literal[...]`` expression; names of other module-level Literals expand."""
    out: list[str] = []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in aliases:
        return _literal_strings(aliases[node.id], aliases)
    if isinstance(node, ast.Subscript):
        return _literal_strings(node.slice, aliases)
    if isinstance(node, ast.Tuple):
        for elt in node.elts:
            out += _literal_strings(elt, aliases)
    return out


def module_literals(path: Path) -> dict[str, list[str]]:
    """Every module-level ``Name = Literal[...]`` with its string values (nested aliases expanded)."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, ast.AST] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Subscript)
            and getattr(node.value.value, "id", None) == "Literal"
        ):
            aliases[node.targets[0].id] = node.value
    return {name: _literal_strings(value, aliases) for name, value in aliases.items()}


def enum_members(path: Path, name: str) -> list[str]:
    cls = _class(ast.parse(path.read_text()), name)
    return [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]


def frozenset_strings(path: Path, name: str) -> list[str]:
    """String members of a module-level ``NAME = frozenset({...})``."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return sorted(
                c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    raise LookupError(name)


def vllm(root: Path, version: str) -> dict:
    literals = module_literals(root / "config" / "speculative.py")
    return {
        "engine": "vllm",
        "version": version,
        "source": "vllm/config/speculative.py, vllm/engine/arg_utils.py",
        "speculative_config_fields": class_fields(root / "config" / "speculative.py", "SpeculativeConfig"),
        "speculative_methods": sorted(set(literals["SpeculativeMethod"])),
        "rejection_sample_methods": sorted(set(literals["RejectionSampleMethod"])),
        "engine_args_fields": class_fields(root / "engine" / "arg_utils.py", "EngineArgs"),
    }


def sglang(root: Path, version: str) -> dict:
    srt = root / "srt"
    return {
        "engine": "sglang",
        "version": version,
        "source": "sglang/srt/server_args.py, sglang/srt/speculative/spec_info.py, spec_registry.py",
        "server_args_fields": class_fields(srt / "server_args.py", "ServerArgs"),
        "speculative_algorithms": sorted(
            set(enum_members(srt / "speculative" / "spec_info.py", "SpeculativeAlgorithm"))
            | set(frozenset_strings(srt / "speculative" / "spec_registry.py", "_RESERVED_ALIASES"))
        ),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("vllm", "sglang"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, root, version = argv
    data = (vllm if kind == "vllm" else sglang)(Path(root), version)
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
