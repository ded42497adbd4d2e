"""ADR 0219: every engine process asks Triton to keep its autotune winners on disk (TRITON_CACHE_AUTOTUNING=1), so a
campaign's later starts reuse the first start's kernel configurations instead of benchmarking them again; a value
the environment or the config's engine_options.<engine>.env gives wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from specjoule import config
from specjoule.engines import sglang as S
from specjoule.engines import vllm as V

REPO = Path(__file__).resolve().parent.parent


def _spec(path: str, engine: str, env: dict | None = None):
    raw = config.read_yaml(REPO / path)
    if env is not None:
        raw.setdefault("engine_options", {}).setdefault(engine, {})["env"] = env
    _, table = config.plan(raw, path)
    return next(c for c in table.cells if c.spec["engine"] == engine and not c.unsupported_reason).spec


CASES = [
    ("config/h200-schemes-gdn.yaml", "vllm", V.engine_env),
    ("config/h200-schemes-sglang-families.yaml", "sglang", S.engine_env),
]


@pytest.mark.parametrize("path,engine,engine_env", CASES)
def test_every_engine_keeps_triton_autotune_winners(path, engine, engine_env, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    assert engine_env(_spec(path, engine))["TRITON_CACHE_AUTOTUNING"] == "1"


@pytest.mark.parametrize("path,engine,engine_env", CASES)
def test_the_config_or_the_environment_can_turn_it_off(path, engine, engine_env, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    assert engine_env(_spec(path, engine, {"TRITON_CACHE_AUTOTUNING": "0"}))["TRITON_CACHE_AUTOTUNING"] == "0"
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    assert engine_env(_spec(path, engine))["TRITON_CACHE_AUTOTUNING"] == "0"
