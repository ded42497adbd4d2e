"""Which transformers release can vLLM 0.26.0 read our shape-only configs with? (ADR 0183; CPU only)

    python tools/check_transformers.py                       # the version bundle/lock-vllm+pipeline.txt pins
    python tools/check_transformers.py --transformers 5.14.1 --transformers 5.17.0
    python tools/check_transformers.py --offline --wheels .bundle/cache   # no index: wheels already there

For each version, the transformers wheel (and, where its declared range excludes the ones this interpreter has,
tokenizers and huggingface-hub wheels) is unpacked into a scratch directory put first on PYTHONPATH of a child
Python, so the running environment is never changed. The child reads every model dir the way vLLM 0.26.0 does
when it builds its ModelConfig: ``get_config`` → ``get_hf_text_config`` → the model type's
``ModelArchConfigConvertor.convert()`` (head size, KV heads, layers, experts ...), executed from the vLLM 0.26.0
wheel's own Python sources (``--vllm-wheel``; the bundle's cache has it after ``make bundle``). Without that
wheel, ``--replica`` runs :func:`replica_arch` instead, a copy of the attribute reads of that path.

On 2026-12-02 the GPU image's transformers 5.17.0 failed gemma-4 there with AmbiguousGlobalPerLayerAttributeError
(validation/h200-2026-12/session-2026-12-02). Exit status 1 when any model dir fails on any version asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from packaging.requirements import Requirement  # noqa: E402
from packaging.version import Version  # noqa: E402

from tools import bundle as B  # noqa: E402

LOCK = REPO / "bundle" / "lock-vllm+pipeline.txt"
MODELS = REPO / "config" / "models"
#: Model dirs the vLLM bundle runs (targets and drafters); the trained pair and the tiny CPU shapes are not
#: shape-only H200 models.
VLLM_MODEL_DIRS: tuple[str, ...] = (
    "gemma-4-26b-a4b",
    "gemma-4-26b-a4b-eagle3",
    "glm-4.7-flash",
    "glm-4.7-flash-eagle3",
    "mimo-7b",
    "qwen2.5-0.5b",
    "qwen2.5-3b",
    "qwen3-30b-a3b",
    "qwen3-30b-a3b-eagle3",
    "qwen3-8b",
    "qwen3-8b-dflash",
    "qwen3-8b-dspark",
    "qwen3-8b-eagle3",
    "qwen3.6-35b-a3b",
    "qwen3.6-35b-a3b-dflash",
)
#: What this script measured on 2026-12-02 for gemma-4-26b-a4b through vLLM 0.26.0's own code (CPU; every other
#: dir in VLLM_MODEL_DIRS read alike on 5.14.1, 5.16.0, 5.16.1 and 5.17.0): "raises" is the H200's
#: AmbiguousGlobalPerLayerAttributeError. 5.15.0 is the release whose Gemma4TextConfig turns `global_head_dim` and
#: `num_global_key_value_heads` into a per-layer config. ADR 0183.
MEASURED_GEMMA4: dict[str, str] = {
    "5.5.3": "works",
    "5.10.4": "works",
    "5.13.1": "works",
    "5.14.0": "works",
    "5.14.1": "works",
    "5.15.0": "raises",
    "5.15.1": "raises",
    "5.16.0": "raises",
    "5.16.1": "raises",
    "5.17.0": "raises",
}
#: Packages a transformers release pins tightly that this interpreter may hold at a version outside its range.
COMPANIONS = ("tokenizers", "huggingface-hub")


def replica_arch(hf_config: Any) -> dict[str, Any]:
    """vLLM 0.26.0's attribute reads for a non-MLA model, copied from ``model_arch_config_convertor.py``
    (``get_hf_text_config`` and ``ModelArchConfigConvertorBase`` / ``Gemma4ModelArchConfigConvertor``): the same
    ``getattr`` calls in the same order, so the same transformers exception comes out of them."""
    text = hf_config.get_text_config()
    if text is not hf_config and not hasattr(text, "num_attention_heads"):
        raise ValueError("text_config has no num_attention_heads")
    heads = getattr(text, "num_attention_heads", 0)
    if hf_config.model_type in ("gemma4", "gemma4_text"):
        head_size = max(getattr(text, "head_dim", 0), getattr(text, "global_head_dim", 0))
    else:
        head_dim = getattr(text, "head_dim", None)
        head_size = head_dim if head_dim is not None and head_dim > 0 else getattr(text, "hidden_size", 0) // heads
    kv_heads = next(
        (
            getattr(text, a)
            for a in (
                "n_head_kv",
                "num_kv_heads",
                "num_key_value_heads",
                "multi_query_group_num",
                "num_attention_groups",
            )
            if getattr(text, a, None) is not None
        ),
        heads,
    )
    return {
        "head_size": head_size,
        "total_num_kv_heads": kv_heads,
        "total_num_attention_heads": heads,
        "total_num_hidden_layers": getattr(text, "num_hidden_layers", 0),
        "hidden_size": getattr(text, "hidden_size", 0),
        "vocab_size": getattr(text, "vocab_size", 0),
    }


# The child process: reads each dir and prints one JSON line per dir. Kept as source so it runs under the
# scratch PYTHONPATH, not this process's imports.
_CHILD = r"""
import json, sys, traceback
mode, dirs = sys.argv[1], sys.argv[2:]
import transformers
if mode == "vllm":
    import vllm.config  # first: the convertor module and vllm.config import each other
    from vllm.transformers_utils.config import get_config, get_hf_text_config
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS, ModelArchConfigConvertorBase)
else:
    sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
    from transformers import AutoConfig
    from check_transformers_replica import replica_arch
for d in dirs:
    row = {"dir": d, "transformers": transformers.__version__, "mode": mode}
    try:
        if mode == "vllm":
            hf = get_config(d, trust_remote_code=False)
            text = get_hf_text_config(hf)
            arch = MODEL_ARCH_CONFIG_CONVERTORS.get(hf.model_type, ModelArchConfigConvertorBase)(hf, text).convert()
            row["arch"] = {k: getattr(arch, k) for k in ("head_size", "total_num_kv_heads",
                "total_num_attention_heads", "total_num_hidden_layers", "hidden_size", "vocab_size", "num_experts")}
        else:
            row["arch"] = replica_arch(AutoConfig.from_pretrained(d, trust_remote_code=False))
        row["ok"] = True
    except Exception as exc:
        row.update(ok=False, error=type(exc).__name__, message=str(exc).splitlines()[0][:300])
    print("ROW " + json.dumps(row, default=str), flush=True)
"""


def lock_version(name: str, lock: Path = LOCK) -> str:
    for n, v, _h, _g in B.read_lock(lock):
        if n == name:
            return v
    raise SystemExit(f"{lock.name} ships no {name}")


def _metadata(wheel: Path) -> Any:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(meta).decode())


def _find(wheels: Path, name: str, spec: str) -> Path | None:
    """The newest wheel in ``wheels`` of ``name`` inside ``spec`` that installs here."""
    req = Requirement(f"{name}{spec}")
    best: tuple[Version, Path] | None = None
    for w in wheels.glob("*.whl"):
        fname, fver, _b, tags = B.parse_wheel_filename(w.name)
        if B.canonical(str(fname)) != B.canonical(name) or not req.specifier.contains(fver, prereleases=True):
            continue
        if not any(t.platform == "any" or t.platform.startswith(("manylinux", "linux")) for t in tags):
            continue
        if best is None or fver > best[0]:
            best = (fver, w)
    return best[1] if best else None


def _get(wheels: Path, name: str, spec: str, offline: bool) -> Path:
    found = _find(wheels, name, spec)
    if found is None and not offline:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--quiet",
                "-d",
                str(wheels),
                f"{name}{spec}",
            ],
            check=True,
        )
        found = _find(wheels, name, spec)
    if found is None:
        raise FileNotFoundError(f"no wheel of {name}{spec} in {wheels}" + (" (--offline)" if offline else ""))
    return found


def _installed(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def site_for(version: str, wheels: Path, scratch: Path, offline: bool) -> list[Path]:
    """Unpacked transformers==version, plus the companions this interpreter lacks at a version it accepts."""
    tf = _get(wheels, "transformers", f"=={version}", offline)
    paths = [tf]
    for text in _metadata(tf).get_all("Requires-Dist") or ():
        req = Requirement(text)
        if B.canonical(req.name) in COMPANIONS and req.marker is None:
            have = _installed(req.name)
            if have is None or not req.specifier.contains(have, prereleases=True):
                paths.append(_get(wheels, req.name, str(req.specifier), offline))
    out = []
    for w in paths:
        dest = scratch / w.stem
        if not dest.exists():
            with zipfile.ZipFile(w) as z:
                z.extractall(dest)
        out.append(dest)
    return out


def vllm_source(wheel: Path, scratch: Path) -> Path:
    """vLLM's Python files and dist-info (no compiled parts: config reading needs none)."""
    dest = scratch / "vllm-src"
    if not dest.exists():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest, [n for n in z.namelist() if n.endswith(".py") or ".dist-info/" in n])
    return dest


def probe(
    version: str, dirs: list[Path], *, wheels: Path, scratch: Path, vllm_wheel: Path | None, offline: bool
) -> list[dict[str, Any]]:
    path = site_for(version, wheels, scratch, offline)
    child = scratch / "check_transformers_child.py"
    child.write_text(_CHILD)
    if vllm_wheel is None:
        mode = "replica"
        (scratch / "check_transformers_replica.py").write_text("from typing import Any\n\n" + _source_of(replica_arch))
    else:
        mode = "vllm"
        path.insert(0, vllm_source(vllm_wheel, scratch))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(map(str, path)),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    proc = subprocess.run(
        [sys.executable, str(child), mode, *map(str, dirs)], capture_output=True, text=True, env=env, cwd=scratch
    )
    rows = [json.loads(ln[4:]) for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
    if len(rows) != len(dirs):
        raise RuntimeError(f"transformers {version} ({mode}): the child failed\n{proc.stderr[-3000:]}")
    return rows


def _source_of(fn: Any) -> str:
    import inspect

    return inspect.getsource(fn)


def default_vllm_wheel() -> Path | None:
    return next(iter(sorted((REPO / ".bundle" / "cache").glob("vllm-0.26.0-*.whl"))), None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transformers", action="append", help="version to check (repeat); default: the lock's")
    ap.add_argument("--model", action="append", type=Path, help="model dir (repeat); default: VLLM_MODEL_DIRS")
    ap.add_argument("--vllm-wheel", type=Path, default=None, help="vLLM 0.26.0 wheel (default: .bundle/cache)")
    ap.add_argument("--replica", action="store_true", help="no vLLM wheel: run replica_arch instead")
    ap.add_argument("--wheels", type=Path, default=REPO / ".bundle" / "cache", help="wheel cache (read, filled)")
    ap.add_argument("--offline", action="store_true", help="use only wheels already in --wheels")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    versions = args.transformers or [lock_version("transformers")]
    dirs = [p.resolve() for p in (args.model or [MODELS / d for d in VLLM_MODEL_DIRS])]
    vllm_wheel = None if args.replica else (args.vllm_wheel or default_vllm_wheel())
    if vllm_wheel is None and not args.replica:
        raise SystemExit("no vLLM 0.26.0 wheel: pass --vllm-wheel, or --replica for the copied attribute path")
    args.wheels.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="check-transformers-") as tmp:
        for v in versions:
            rows += probe(v, dirs, wheels=args.wheels, scratch=Path(tmp), vllm_wheel=vllm_wheel, offline=args.offline)
    for r in rows:
        what = json.dumps(r["arch"]) if r["ok"] else f"RAISES {r['error']}: {r['message'][:90]}"
        print(f"transformers {r['transformers']:8s} [{r['mode']}] {Path(r['dir']).name:26s} {what}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
