"""ADR 0210: a target whose checkpoint wraps its language model with a vision (or audio) tower runs on vLLM
language-model-only, so no image processor is loaded and no tower is built; every other target is untouched.
The 2026-12-02d H200 start of Qwen3.6-35B-A3B failed without it: ``OSError: Can't load image processor``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specjoule import config, models
from specjoule.engines import vllm as V

REPO = Path(__file__).resolve().parent.parent
VLLM026 = json.loads((REPO / "tests" / "data" / "vllm" / "speculative-0.26.0.json").read_text())


def _cells(config_path: str):
    _, table = config.plan(config.read_yaml(REPO / config_path), config_path)
    return [c for c in table.cells if not c.unsupported_reason]


def test_gated_deltanet_target_runs_language_model_only():
    # Qwen3.6-35B-A3B's published config is Qwen3_5MoeForConditionalGeneration with a vision_config.
    cells = _cells("config/h200-schemes-gdn.yaml")
    assert {c.name for c in cells} >= {"baseline--open", "mtp--mv4", "dflash--mv16", "baseline--close"}
    for cell in cells:
        kw = V.engine_kwargs(cell.spec)
        assert kw["language_model_only"] is True, cell.name
        assert "--language-model-only" in V.server_command(cell.spec, "127.0.0.1", 8000, kw)
    # the argument exists in the engine the H200 runs (0.26.0's EngineArgs, extracted from the wheel)
    assert "language_model_only" in VLLM026["engine_args_fields"]


@pytest.mark.parametrize("config_path", ["validation/h200-2026-12/config/h200-families-sweep.yaml",
                                         "config/config.yaml"])
def test_text_targets_are_untouched(config_path):
    # gemma-4 ships as Gemma4ForCausalLM (text config at top level), Qwen3-30B-A3B and the demo pair are text
    # models: their engine arguments keep vLLM's default.
    cells = _cells(config_path)
    assert cells
    assert not any("language_model_only" in V.engine_kwargs(c.spec) for c in cells)


def test_multimodal_wrapper_reads_the_local_config(model_config_dir):
    model = model_config_dir
    assert models.is_multimodal_wrapper(model("vl", {"architectures": ["X"], "vision_config": {"depth": 2}}))
    assert models.is_multimodal_wrapper(model("audio", {"audio_config": {"d_model": 8}}))
    assert not models.is_multimodal_wrapper(model("text", {"architectures": ["Qwen3ForCausalLM"]}))
    # a null sub-config is no tower
    assert not models.is_multimodal_wrapper(model("nulled", {"vision_config": None}))
    # a hub id: its config is not here, so nothing is assumed
    assert not models.is_multimodal_wrapper("Qwen/Qwen3.6-35B-A3B")


def test_engine_options_cannot_be_overridden_silently():
    # A config that sets language_model_only itself keeps its own value (engine options are applied last).
    raw = config.read_yaml(REPO / "config/h200-schemes-gdn.yaml")
    raw["engine_options"]["vllm"]["language_model_only"] = False
    _, table = config.plan(raw, "config/h200-schemes-gdn.yaml")
    cell = next(c for c in table.cells if c.name == "baseline--open")
    assert V.engine_kwargs(cell.spec)["language_model_only"] is False


def test_the_record_says_language_model_only():
    # The offline path reads the built VllmConfig; a text model has no multimodal_config and keeps its keys.
    class Multimodal:
        language_model_only = True

    class Model:
        dtype = "bfloat16"
        multimodal_config = Multimodal()

    class TextModel:
        dtype = "bfloat16"
        multimodal_config = None

    class Vc:
        model_config = Model()
        speculative_config = None

    class TextVc(Vc):
        model_config = TextModel()

    assert V.config_from_vllm_config(Vc())["language_model_only"] is True
    assert "language_model_only" not in V.config_from_vllm_config(TextVc())
    # The server path without /server_info: what the command set.
    cell = _cells("config/h200-schemes-gdn.yaml")[0]
    assert V.config_from_kwargs(V.engine_kwargs(cell.spec))["language_model_only"] is True
