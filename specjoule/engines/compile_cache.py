"""The campaign's compile cache: where vLLM keeps the graphs it compiled, and whether a start found them (ADR 0189).

vLLM keys its torch.compile cache on everything that shapes the compiled graphs — its config, the traced source
files, the compiler and torch versions, the vLLM environment variables that matter — and redirects Inductor's and
Triton's caches below it (``compilation/backends.py``, ``compiler_interface.py``, 0.26.0). A start whose key is
already there loads the graphs instead of compiling them: on the H200 a Qwen3-8B start took 39.6 s from a warm cache
against 96-104 s cold (validation/h200-2026-12/session-2026-12-01d). The runner points ``VLLM_CACHE_ROOT`` of every
vLLM engine at one directory under the results tree, so every start of a campaign — on this machine, or on any node
that sees the results tree — can reuse what an earlier start compiled, and the record says whether it did.

A start is *warm* when the cache already held compiled-graph entries and the start added no new one: every graph it
needed was there. *Cold* when it added an entry (it compiled). Null when the cache holds none before or after (an
eager engine compiles nothing).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# Relative to the workflow's working directory, beside the runner's other state (results/.specjoule/).
VLLM_CACHE_DIR = "results/.specjoule/engine-cache/vllm"
# vLLM's own layout under VLLM_CACHE_ROOT: one directory per compile key, and the AOT artifacts' keys below it.
_COMPILED = "torch_compile_cache"
_AOT = "torch_aot_compile"


def default_vllm_root(cwd: str | os.PathLike | None = None) -> Path:
    """The campaign's vLLM cache root, absolute (an engine process may run elsewhere)."""
    return Path(cwd or os.getcwd()).resolve() / VLLM_CACHE_DIR


def vllm_root(env: Mapping[str, str]) -> Path | None:
    """The cache root a vLLM engine with environment ``env`` compiles into; None where its environment turns the
    compile cache or compilation off (nothing to find warm)."""
    for off in ("VLLM_DISABLE_COMPILE_CACHE", "TORCH_COMPILE_DISABLE"):
        if env.get(off, "0").strip().lower() not in ("", "0", "false"):
            return None
    root = env.get("VLLM_CACHE_ROOT")
    return Path(root).expanduser() if root else None


def keys(root: str | os.PathLike) -> frozenset[str]:
    """The compiled-graph entries under a vLLM cache root: one per compile key (plain and AOT)."""
    base = Path(root) / _COMPILED
    found: set[str] = set()
    for parent in (base, base / _AOT):
        try:
            with os.scandir(parent) as it:
                found.update(f"{parent.name}/{e.name}" for e in it if e.is_dir() and e.name != _AOT)
        except (FileNotFoundError, NotADirectoryError):
            continue
    return frozenset(found)


def started_warm(before: frozenset[str], after: frozenset[str]) -> bool | None:
    """True: the cache held entries and the start added none; False: the start added one (it compiled); None: no
    entry before or after (nothing compiled into this cache)."""
    if after - before:
        return False
    return True if before else None
