"""What SGLang 0.5.17's own config path makes of our shape-only model dirs (ADR 0225; CPU only, no GPU, no network)

    python tools/check_sglang_config.py                                  # gemma-4, text-only and multimodal form
    python tools/check_sglang_config.py --model config/models/X --offline --wheels DIR

SGLang itself does not import here (its compiled parts are cp312/CUDA). Its config reading is plain Python over
transformers, so a child Python runs the wheel's *own source* of it, cut out with ``ast``: ``HfModelConfigParser.parse``
(``sglang/srt/utils/hf_transformers/config.py``: where Gemma-4's sliding/full attention attributes are remapped),
``get_hf_text_config`` with the helpers it calls (``utils/hf_transformers/common.py``,
``utils/hf_transformers_patches.py``) and ``is_hybrid_swa_model`` / ``get_hybrid_layer_ids``
(``configs/model_config.py``), under the transformers release SGLang's bundle ships (5.12.1), unpacked the way
tools/check_transformers.py does. The one stand-in: SGLang's own config-class registry (``_CONFIG_REGISTRY``) is
empty in the child, so the tool first checks in the wheel that no SGLang config class claims a model type it
reads (it refuses otherwise).

Per dir it prints what SGLang's ModelConfig then reads from the text config (``hf_text_config``): head_dim,
v_head_dim, swa_head_dim, num_key_value_heads, swa_num_key_value_heads, and the sliding/full layer ids. Exit
status 1 when a dir lacks ``swa_num_key_value_heads``, which the hybrid-SWA KV pool of a Gemma-4 target reads
(``mem_cache/kv_cache_configurator.py:1261``): the H200 start of 2026-12-03b failed exactly there.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools import check_transformers as CT  # noqa: E402

SGLANG_WHEEL = Path(
    os.environ.get(
        "SPECJOULE_SGLANG_WHEEL",
        "/work/main/.bundle/sglang/specjoule-bundle/wheels/sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl",
    )
)
#: The transformers release the SGLang bundle ships beside the wheel (bundle/lock-sglang*.txt).
SGLANG_TRANSFORMERS = "5.12.1"
GEMMA4_DIRS = ("gemma-4-26b-a4b", "gemma-4-26b-a4b-mm")

# (file in the wheel under sglang/srt/, top-level names to cut out of it)
PIECES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utils/hf_transformers_patches.py", ("normalize_rope_scaling_compat",)),
    (
        "utils/hf_transformers/common.py",
        (
            "_patch_text_config",
            "get_hf_text_config",
            "_is_deepseek_ocr_model",
            "_is_deepseek_ocr2_model",
            "_override_v_head_dim_if_zero",
        ),
    ),
    (
        "utils/hf_transformers/config.py",
        (
            "_set_architectures",
            "_apply_deepseek_ocr_overrides",
            "_LONGCAT_ARCHS",
            "_try_load_longcat_config",
            "HfModelConfigParser",
        ),
    ),
    ("configs/model_config.py", ("MIMO_V2_MODEL_ARCHS", "is_hybrid_swa_model", "get_hybrid_layer_ids")),
)

# What the cut-out pieces import in their own modules, given to them here; _CONFIG_REGISTRY is SGLang's registry of
# its own config classes, empty here (claimed_model_types checks that it would not hold the model types we read).
PRELUDE = """
from typing import Any, Dict, List, Optional, Type
import torch
from transformers import AutoConfig, PretrainedConfig
_CONFIG_REGISTRY = {}
DeepseekVLV2Config = None
"""


def _top_level(tree: ast.Module, name: str) -> ast.stmt:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node
    raise LookupError(name)


def _strip(node: ast.stmt) -> ast.stmt:
    """Registration decorators and SGLang base classes are module plumbing the child does not have."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        node.decorator_list = []
    if isinstance(node, ast.ClassDef):
        node.bases = []
    return node


def sglang_config_source(wheel: Path) -> str:
    """The child module: PRELUDE and the named pieces of SGLang's own source, in dependency order."""
    parts = [PRELUDE]
    with zipfile.ZipFile(wheel) as whl:
        for path, names in PIECES:
            text = whl.read("sglang/srt/" + path).decode()
            tree = ast.parse(text)
            for name in names:
                node = _strip(_top_level(tree, name))
                parts.append(f"# --- sglang/srt/{path}: {name}\n" + ast.unparse(node))
    return "\n\n".join(parts) + "\n"


def claimed_model_types(wheel: Path) -> set[str]:
    """Model types an SGLang config class declares (``model_type = "..."`` in sglang/srt/configs or the registry's
    aliases in common.py): the keys _CONFIG_REGISTRY may hold, which the child's empty registry leaves out."""
    found: set[str] = set()
    with zipfile.ZipFile(wheel) as whl:
        for name in whl.namelist():
            if (name.startswith("sglang/srt/configs/") and name.endswith(".py")) or name.endswith(
                "utils/hf_transformers/common.py"
            ):
                found |= set(re.findall(r'^\s+model_type\s*=\s*"([^"]+)"', whl.read(name).decode(), re.M))
                found |= set(re.findall(r'_CONFIG_REGISTRY\["([^"]+)"\]', whl.read(name).decode()))
    return found


def remapped_model_types(wheel: Path) -> tuple[str, ...]:
    """The model types whose Gemma-4 attention attributes HfModelConfigParser.parse remaps (the tuple of its
    ``if config.model_type in (...)`` that sets ``swa_num_key_value_heads``)."""
    with zipfile.ZipFile(wheel) as whl:
        tree = ast.parse(whl.read("sglang/srt/utils/hf_transformers/config.py").decode())
    for node in ast.walk(_top_level(tree, "HfModelConfigParser")):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.ops[0], ast.In)
            and "swa_num_key_value_heads" in ast.unparse(node)
        ):
            return tuple(ast.literal_eval(node.test.comparators[0]))
    raise LookupError("no Gemma-4 remap in HfModelConfigParser.parse")


_CHILD = r"""
import json, sys
from sglang_config_pieces import HfModelConfigParser, get_hf_text_config, is_hybrid_swa_model, get_hybrid_layer_ids
import transformers

FIELDS = ("head_dim", "v_head_dim", "swa_head_dim", "swa_v_head_dim", "num_key_value_heads",
          "swa_num_key_value_heads", "num_attention_heads", "hidden_size", "vocab_size", "num_hidden_layers")
for model in sys.argv[1:]:
    row = {"dir": model, "transformers": transformers.__version__}
    try:
        hf_config = HfModelConfigParser().parse(model, trust_remote_code=False)
        text = get_hf_text_config(hf_config)  # what ModelConfig keeps as hf_text_config
        row.update(model_type=hf_config.model_type, architectures=list(hf_config.architectures or []),
                   text_class=type(text).__name__, ok=True)
        row.update({f: getattr(text, f, None) for f in FIELDS})
        row["hybrid_swa"] = is_hybrid_swa_model(hf_config.architectures, text)
        if row["hybrid_swa"]:
            swa, full = get_hybrid_layer_ids(hf_config.architectures, text)
            row.update(swa_layer_ids=list(swa), full_layer_ids=list(full))
    except Exception as exc:  # the row says what SGLang's own code raised
        row.update(ok=False, error=type(exc).__name__, message=str(exc))
    print("ROW " + json.dumps(row), flush=True)
"""


def probe(dirs: list[Path], *, wheel: Path, wheels: Path, scratch: Path, offline: bool) -> list[dict[str, Any]]:
    """Rows of what SGLang's config path makes of each dir, from a child running the wheel's own source."""
    claimed = claimed_model_types(wheel)
    for d in dirs:
        model_type = json.loads((d / "config.json").read_text()).get("model_type")
        if model_type in claimed:
            raise SystemExit(
                f"{d}: SGLang registers its own config class for model_type {model_type!r}: "
                "the child's empty _CONFIG_REGISTRY would not stand in for it"
            )
    # transformers from the SGLang wheel's folder, companions from the cache: linked into one scratch folder, so a
    # download (not --offline) lands there and neither folder is written to
    merged = scratch / "wheels"
    merged.mkdir(exist_ok=True)
    for folder in (wheel.parent, wheels):
        for w in sorted(folder.glob("*.whl")) if folder.is_dir() else ():
            if not (merged / w.name).exists():
                (merged / w.name).symlink_to(w.resolve())
    path = CT.site_for(SGLANG_TRANSFORMERS, merged, scratch, offline)
    (scratch / "sglang_config_pieces.py").write_text(sglang_config_source(wheel))
    (scratch / "sglang_config_child.py").write_text(_CHILD)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(scratch), *map(str, path)]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    proc = subprocess.run(
        [sys.executable, str(scratch / "sglang_config_child.py"), *map(str, dirs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=scratch,
    )
    rows = [json.loads(ln[4:]) for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
    if len(rows) != len(dirs):
        raise RuntimeError(f"SGLang config child failed\n{proc.stderr[-3000:]}")
    return rows


def starts_hybrid_swa_pool(row: dict[str, Any]) -> bool:
    """Whether SGLang's hybrid-SWA KV pool finds what it reads (a non-hybrid model needs nothing more)."""
    return bool(row["ok"]) and (not row.get("hybrid_swa") or row.get("swa_num_key_value_heads") is not None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", type=Path, help="model dir (repeat); default: the gemma-4 shapes")
    ap.add_argument("--sglang-wheel", type=Path, default=SGLANG_WHEEL, help="SGLang 0.5.17 wheel")
    ap.add_argument(
        "--wheels",
        type=Path,
        default=REPO / ".bundle" / "cache",
        help="wheel cache for transformers' companions (tokenizers, huggingface-hub < 2); read only: "
        "transformers 5.12.1 comes from the SGLang wheel's folder",
    )
    ap.add_argument("--offline", action="store_true", help="use only wheels already there (no pip download)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    dirs = [p.resolve() for p in (args.model or [REPO / "config" / "models" / d for d in GEMMA4_DIRS])]
    wheels = args.wheels
    with tempfile.TemporaryDirectory(prefix="check-sglang-config-") as tmp:
        rows = probe(dirs, wheel=args.sglang_wheel, wheels=wheels, scratch=Path(tmp), offline=args.offline)
    print(f"SGLang remaps Gemma-4 attention attributes for model_type in {remapped_model_types(args.sglang_wheel)}")
    for r in rows:
        name = Path(r["dir"]).name
        if not r["ok"]:
            print(f"{name:22s} RAISES {r['error']}: {r['message'][:100]}")
            continue
        shape = {k: r.get(k) for k in ("head_dim", "swa_head_dim", "num_key_value_heads", "swa_num_key_value_heads")}
        verdict = "ok" if starts_hybrid_swa_pool(r) else "MISSING swa_num_key_value_heads"
        print(f"{name:22s} {r['model_type']:12s} {json.dumps(shape)} {verdict}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(starts_hybrid_swa_pool(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
