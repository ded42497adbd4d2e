"""Engine adapters. ``make_engine`` picks the adapter a cell needs.

vLLM and SGLang alike (``specjoule.engines.vllm`` / ``.sglang``):
closed batch → offline (``vllm.LLM`` / ``sglang.Engine`` in a child process group), unless the cell attaches to a
shared server (``server_url``) — then the batch goes over HTTP;
open loop and closed loop → a ``vllm serve`` / ``sglang.launch_server`` subprocess (requests arrive while others run).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from specjoule.cellspec import CellSpec
from specjoule.engines.base import (
    BatchResult,
    CounterDelta,
    CounterSnapshot,
    Engine,
    EngineError,
    EngineHung,
    EngineUnsupported,
    RequestResult,
)

__all__ = [
    "BatchResult",
    "CounterDelta",
    "CounterSnapshot",
    "Engine",
    "EngineError",
    "EngineHung",
    "EngineUnsupported",
    "RequestResult",
    "make_engine",
]


def make_engine(
    spec: CellSpec | Mapping[str, Any],
    log_file: str | os.PathLike | None = None,
    *,
    server_url: str | None = None,
    server_command: list[str] | None = None,
    force_server: bool = False,
) -> Engine:
    spec = CellSpec.of(spec)
    engine = spec.engine.engine
    timeout = float(spec.protocol.engine_ready_timeout_s)
    # Loop workloads send requests while others run: only a server engine takes them.
    server = bool(server_url or server_command or force_server or spec.workload.is_loop)
    if engine == "sglang":
        from specjoule.engines.sglang import SglangOfflineEngine, SglangServerEngine

        if server:
            return SglangServerEngine(spec, log_file, ready_timeout_s=timeout, command=server_command, url=server_url)
        return SglangOfflineEngine(spec, log_file, ready_timeout_s=timeout)
    if engine != "vllm":
        raise EngineUnsupported(f"engine = {engine!r}: no adapter for it in this build (vllm, sglang)")
    from specjoule.engines.vllm import VllmOfflineEngine, VllmServerEngine

    if server:
        return VllmServerEngine(spec, log_file, ready_timeout_s=timeout, command=server_command, url=server_url)
    return VllmOfflineEngine(spec, log_file, ready_timeout_s=timeout)
