"""Check an installed offline bundle on the node it was installed on (ADR 0060).

Run with the bundle's environment sourced (tools/device/install_bundle.sh does):

    python3 tools/device/check_env.py --manifest /tmp/specjoule-bundle-unpacked/specjoule-bundle/manifest.json \
        [--out DIR]

Prints the versions and locations of what the pipeline imports (node image, bundle, this checkout, or a
stand-in), the import time of ``from vllm import LLM``, CUDA and NVML as torch and pynvml see them, an
``nvidia-smi`` summary, and every declared requirement of a bundled package that the installed set violates
(those the bundle omits on purpose are listed apart). Writes ``bundle-check.json`` to ``--out``.
Exit 0 when every import the bundle's profiles need works; 1 otherwise. Only the standard library is assumed
before the imports it tests.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

ENGINES = ("vllm", "sglang")
# module to import, distribution name for its version, profiles that need it (a module is imported only when a
# profile of the bundle needs it; it must import when the profile is critical: all but the four structured-output
# packages, whose failure the stand-ins cover)
IMPORTS: list[tuple[str, str, tuple[str, ...]]] = [
    ("torch", "torch", ENGINES),
    ("transformers", "transformers", ENGINES),
    ("pynvml", "nvidia-ml-py", ("vllm", "sglang", "pipeline")),
    ("vllm", "vllm", ("vllm",)),
    ("pydantic", "pydantic", ("vllm", "sglang")),
    ("fastapi", "fastapi", ("vllm", "sglang")),
    ("openai", "openai", ("vllm", "sglang")),
    ("xgrammar", "xgrammar", ("vllm",)),
    ("llguidance", "llguidance", ("vllm",)),
    ("lmformatenforcer", "lm-format-enforcer", ("vllm",)),
    ("outlines_core", "outlines-core", ("vllm",)),
    # imported only once a model needs them (ADR 0193): the Gated-DeltaNet models at inspection, gemma-4's
    # FlashAttention 4 at its first forward; checked here so that a bundle without them fails at install
    ("compressed_tensors", "compressed-tensors", ("vllm",)),
    ("cutlass", "nvidia-cutlass-dsl-libs-base", ("vllm",)),
    ("quack", "quack-kernels", ("vllm",)),
    ("sglang", "sglang", ("sglang",)),
    ("snakemake", "snakemake", ("pipeline",)),
    ("polars", "polars", ("analysis",)),
    ("pyarrow", "pyarrow", ("pipeline",)),
    ("jsonschema", "jsonschema", ("pipeline",)),
    ("yaml", "pyyaml", ("pipeline",)),
    ("specjoule", "specjoule", ("pipeline",)),
]


def where(path: str | None, site: str | None, repo: str | None) -> str:
    if not path:
        return "?"
    if "_specjoule_standins" in path:
        return "STAND-IN"
    if site and path.startswith(site.rstrip("/") + "/"):
        return "bundle"
    # An installed package is the node's even when its environment lives inside the checkout (a repository's own
    # .venv, as on CI): only the checkout's sources count as "checkout".
    if "/site-packages/" in path or "/dist-packages/" in path:
        return "node"
    if repo and path.startswith(repo.rstrip("/") + "/"):
        return "checkout"
    return "node"


def try_import(module: str, dist: str, site: str | None, repo: str | None) -> dict:
    t0 = time.perf_counter()
    row: dict = {"module": module, "dist": dist}
    try:
        m = importlib.import_module(module)
        row["ok"] = True
        # a namespace package (no __init__.py) has no __file__, only __path__
        row["file"] = getattr(m, "__file__", None) or next(iter(getattr(m, "__path__", [])), None)
        row["from"] = where(row["file"], site, repo)
        if getattr(m, "SPECJOULE_STANDIN", False):
            row["from"] = "STAND-IN"
    except Exception as exc:  # the point is to report any failure, whatever its kind
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["traceback"] = traceback.format_exc(limit=6)
    row["import_s"] = round(time.perf_counter() - t0, 2)
    try:
        row["version"] = md.version(dist)
    except md.PackageNotFoundError:
        row["version"] = getattr(sys.modules.get(module), "__version__", None)
    return row


def requirement_violations(manifest: dict) -> tuple[list[str], list[str]]:
    """Declared requirements of bundled packages that the installed set does not meet: (unmet, unmet on purpose).

    On purpose: what a ``--no-deps`` top declares beyond its profile's keep list (vLLM's flashinfer, numba pin
    ...), what the bundle omits, and the specifiers a profile overrides (llguidance)."""
    try:
        from packaging.markers import default_environment
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:
        return ["packaging is not importable: requirement check skipped"], []
    omitted = {o["name"] for o in manifest.get("omitted", [])}
    tops = {t["name"]: t for t in manifest.get("tops", [])}
    env = default_environment()
    violations, by_design = [], []
    for w in manifest.get("wheels", []):
        try:
            requires = md.distribution(w["name"]).requires or []
        except md.PackageNotFoundError:
            violations.append(f"{w['name']}: bundled but not installed")
            continue
        top = tops.get(w["name"])
        for text in requires:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            name = canonicalize_name(req.name)
            try:
                have = md.version(req.name)
            except md.PackageNotFoundError:
                have = None
            if have is not None and req.specifier.contains(have, prereleases=True):
                continue
            line = f"{w['name']} {w['version']} needs {req.name}{req.specifier or ''}: has {have or 'none'}"
            on_purpose = name in omitted or (
                top is not None
                and ((top.get("keep") is not None and name not in top["keep"]) or name in top.get("override", {}))
            )
            (by_design if on_purpose else violations).append(line)
    return violations, by_design


def cuda_summary(with_torch: bool) -> dict:
    out: dict = {}
    try:
        if not with_torch:
            raise ImportError("no engine profile in this bundle: torch not imported")
        import torch

        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
        out["cuda_available"] = torch.cuda.is_available()
        if out["cuda_available"]:
            out["devices"] = [
                {"name": torch.cuda.get_device_name(i), "capability": list(torch.cuda.get_device_capability(i))}
                for i in range(torch.cuda.device_count())
            ]
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import pynvml

        pynvml.nvmlInit()
        out["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            g = {"index": i, "name": _text(pynvml.nvmlDeviceGetName(h)), "uuid": _text(pynvml.nvmlDeviceGetUUID(h))}
            for key, fn, scale in (
                ("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, 1000),
                ("power_w", pynvml.nvmlDeviceGetPowerUsage, 1000),
                ("energy_counter_mj", pynvml.nvmlDeviceGetTotalEnergyConsumption, 1),
            ):
                try:
                    g[key] = fn(h) / scale
                except Exception as exc:  # a counter this GPU lacks is a finding, not a crash
                    g[key] = f"unavailable: {exc}"
            gpus.append(g)
        out["nvml_gpus"] = gpus
        pynvml.nvmlShutdown()
    except Exception as exc:
        out["nvml_error"] = f"{type(exc).__name__}: {exc}"
    try:
        q = "index,name,uuid,driver_version,power.limit,power.draw,memory.total,memory.used,temperature.gpu,clocks.sm"
        smi = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True, timeout=30
        )
        out["nvidia_smi"] = (smi.stdout or smi.stderr).strip()
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        out["gpu_processes"] = apps.stdout.strip()
    except Exception as exc:
        out["nvidia_smi_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    manifest = json.loads(args.manifest.read_text())
    profiles = set(manifest.get("profiles", []))
    site = os.environ.get("SPECJOULE_SITE")  # written by the bundle's install.sh into specjoule-env.sh
    repo = os.environ.get("SPECJOULE_REPO")
    print(f"check_env: Python {sys.version.split()[0]} at {sys.executable}; bundle profiles {sorted(profiles)}")
    print(f"check_env: stand-ins in use: {os.environ.get('SPECJOULE_BUNDLE_STANDINS') or 'none'}")

    rows = []
    optional = {"xgrammar", "llguidance", "lmformatenforcer", "outlines_core"}  # the stand-ins cover these
    for module, dist, needed_by in IMPORTS:
        if not profiles & set(needed_by):
            continue
        row = try_import(module, dist, site, repo)
        row["critical"] = module not in optional
        rows.append(row)
    llm = {"module": "vllm.LLM"}
    if "vllm" in profiles:
        t0 = time.perf_counter()
        try:
            from vllm import LLM  # noqa: F401  (the import chain the engine takes)

            llm["ok"] = True
        except Exception as exc:
            llm.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=8))
        llm["import_s"] = round(time.perf_counter() - t0, 2)
        llm["critical"] = True
        rows.append(llm)

    print(f"{'module':18s} {'ok':3s} {'version':22s} {'from':9s} {'import s':>8s}")
    for r in rows:
        print(
            f"{r['module']:18s} {'yes' if r['ok'] else 'NO':3s} {str(r.get('version') or ''):22s} "
            f"{r.get('from', ''):9s} {r['import_s']:8.2f}"
        )
    for r in rows:
        if not r["ok"]:
            print(f"--- {r['module']} failed: {r['error']}\n{r.get('traceback', '')}")

    violations, by_design = requirement_violations(manifest)
    print(f"check_env: {len(violations)} requirement(s) of bundled packages unmet by the installed set")
    for v in violations:
        print(f"  UNMET {v}")
    if by_design:
        names = sorted({v.split(" needs ", 1)[1].split(":")[0] for v in by_design})
        print(
            f"check_env: {len(by_design)} unmet on purpose (declared by a --no-deps top beyond its keep list, or "
            f"omitted; details in bundle-check.json): {', '.join(names)}"
        )

    gpu = cuda_summary(with_torch=bool(profiles & set(ENGINES)))
    print("check_env: CUDA/NVML:", json.dumps({k: v for k, v in gpu.items() if k != "nvidia_smi"}, default=str))
    if "nvidia_smi" in gpu:
        print(gpu["nvidia_smi"])

    failed = [r["module"] for r in rows if r.get("critical") and not r["ok"]]
    # A bundled package must be the one imported: the bundle ships some over the node's copy on purpose
    # (transformers for gemma-4, ADR 0183), and a node copy that wins would bring the old failure back silently.
    bundled = {w["name"] for w in manifest.get("wheels", [])}
    shadowed = [
        r["module"]
        for r in rows
        if site
        and r.get("ok")
        and r.get("from") == "node"
        and re.sub(r"[-_.]+", "-", str(r.get("dist", ""))).lower() in bundled
    ]
    result = {
        "python": sys.version,
        "profiles": sorted(profiles),
        "standins": os.environ.get("SPECJOULE_BUNDLE_STANDINS", ""),
        "imports": rows,
        "unmet_requirements": violations,
        "unmet_by_design": by_design,
        "gpu": gpu,
        "failed": failed,
        "bundled_but_node_imported": shadowed,
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bundle-check.json").write_text(json.dumps(result, indent=1, default=str))
    versions = {r["module"]: r.get("version") for r in rows if r["ok"]}
    gpus = [g.get("name") for g in gpu.get("nvml_gpus", [])]
    if failed:
        print(f"BUNDLE CHECK: FAILED: {', '.join(failed)} did not import")
        return 1
    if shadowed:
        print(
            f"BUNDLE CHECK: FAILED: {', '.join(shadowed)} bundled, but the node's copy is imported "
            f"(is {site} first on PYTHONPATH?)"
        )
        return 1
    specjoule_from = next((r["from"] for r in rows if r["module"] == "specjoule"), "-")
    print(
        f"BUNDLE CHECK: OK: vllm {versions.get('vllm')}, transformers {versions.get('transformers')}, "
        f"torch {versions.get('torch')}, "
        f"snakemake {versions.get('snakemake')}, specjoule from {specjoule_from}, "
        f"GPUs {gpus}, stand-ins: {os.environ.get('SPECJOULE_BUNDLE_STANDINS') or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
