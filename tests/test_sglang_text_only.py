"""ADR 0211: a target whose checkpoint wraps its language model with a vision (or audio) tower runs on SGLang with
``enable_multimodal = False``, so SGLang's tokenizer manager loads no HF processor (which the shape-only dir cannot
give); every other target is untouched. The same question as vLLM's ADR 0210, answered from SGLang 0.5.17's sources.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import pytest

from specjoule import config, models
from specjoule.cellspec import CellSpec
from specjoule.engines import sglang as sg
from specjoule.engines import vllm as V
from specjoule.engines.base import EngineUnsupported

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "sglang"
FAMILIES = "config/h200-schemes-sglang-families.yaml"
QWEN36 = "config/models/qwen3.6-35b-a3b"
SGLANG_WHEEL = Path(os.environ.get("SPECJOULE_SGLANG_WHEEL", "/work/main/.bundle/sglang/specjoule-bundle/wheels/"
                                   "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl"))


def _cells(config_path: str, raw: dict | None = None):
    _, table = config.plan(raw or config.read_yaml(REPO / config_path), config_path)
    return [c for c in table.cells if not c.unsupported_reason]


def _target(cell) -> str:
    return CellSpec.of(cell.spec).engine.target.model


def _fields_0517() -> set[str]:
    lines = (DATA / "server_args_fields-0.5.17.txt").read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def test_gated_deltanet_target_runs_with_multimodal_off():
    # Qwen3.6-35B-A3B's published config is Qwen3_5MoeForConditionalGeneration with a vision_config.
    cells = [c for c in _cells(FAMILIES) if _target(c).endswith(QWEN36)]
    assert {c.name.split("--")[0] for c in cells} >= {"baseline", "mtp", "dflash"}, [c.name for c in cells]
    fields = _fields_0517()
    for cell in cells:
        kw = sg.engine_kwargs(cell.spec)
        assert kw["enable_multimodal"] is False, cell.name
        # a ServerArgs field of 0.5.17 (extracted from the wheel): adapt_kwargs keeps it as it is
        assert sg.adapt_kwargs(kw, fields, "0.5.17")["enable_multimodal"] is False
    # and of the parser the H200 ran (probe.json, captured on the device)
    assert "enable_multimodal" in json.loads((DATA / "probe.json").read_text())["fields"]
    # one helper decides for both engines (ADR 0210, 0211)
    assert V.is_multimodal_wrapper is models.is_multimodal_wrapper


@pytest.mark.parametrize("config_path", [FAMILIES, "validation/h200-2026-12/config/h200-schemes-sglang.yaml"])
def test_text_targets_are_untouched(config_path):
    # MiMo-7B, Qwen3-30B-A3B, GLM-4.7-Flash (families) and Qwen3-8B (run in 2026-12-02b) are text configs: their
    # arguments keep SGLang's own default (None: decided from the model).
    cells = [c for c in _cells(config_path) if not _target(c).endswith(QWEN36)]
    assert len({_target(c) for c in cells}) >= (3 if config_path == FAMILIES else 1)
    assert not any("enable_multimodal" in sg.engine_kwargs(c.spec) for c in cells)


def test_engine_options_win():
    # A config that sets enable_multimodal itself keeps its own value (engine options are applied last).
    raw = config.read_yaml(REPO / FAMILIES)
    raw["engine_options"]["sglang"]["enable_multimodal"] = True
    cell = next(c for c in _cells(FAMILIES, raw) if _target(c).endswith(QWEN36))
    assert sg.engine_kwargs(cell.spec)["enable_multimodal"] is True


def test_server_command_refuses_what_its_parser_cannot_say():
    # 0.5.17's --enable-multimodal is store_true over a None default: leaving it out would mean "decide from the
    # model" (multimodal on), so the server path refuses instead of silently loading the processor.
    cell = next(c for c in _cells(FAMILIES) if _target(c).endswith(QWEN36))
    probe_opts = set(json.loads((DATA / "probe.json").read_text())["cli_options"])
    assert "--enable-multimodal" in probe_opts and "--no-enable-multimodal" not in probe_opts
    for opts in (None, probe_opts):
        with pytest.raises(EngineUnsupported, match="cannot set enable_multimodal = False"):
            sg.server_command(cell.spec, "127.0.0.1", 31000, cli_options=opts)
    # a parser that can say it gets the flag
    cmd = sg.server_command(cell.spec, "127.0.0.1", 31000, cli_options=probe_opts | {"--no-enable-multimodal"})
    assert "--no-enable-multimodal" in cmd and "--enable-multimodal" not in cmd
    # a text target's server command is as before
    text = next(c for c in _cells(FAMILIES) if not _target(c).endswith(QWEN36))
    assert not any("multimodal" in a for a in sg.server_command(text.spec, "127.0.0.1", 31000, cli_options=probe_opts))


def test_the_record_says_enable_multimodal():
    # The H200's own /server_info of a text model (2026-11-30) says None: its engine_config keeps its keys.
    raw = json.loads((DATA / "server_info.json").read_text())
    assert raw["enable_multimodal"] is None
    assert "enable_multimodal" not in sg.config_from_server_info(raw)
    assert sg.config_from_server_info({**raw, "enable_multimodal": False})["enable_multimodal"] is False


def test_the_shape_only_dir_gives_no_processor():
    # Why the switch is needed: with multimodal on, SGLang's tokenizer manager calls get_processor, i.e.
    # transformers' AutoProcessor.from_pretrained on the model dir (utils/hf_transformers/processor.py:211), even with
    # skip_tokenizer_init. The shipped dir holds config.json only, so transformers cannot build it. (Here the venv's
    # transformers; the H200's SGLang env pins 5.12.1, and vLLM's start there failed on the same loader.)
    from transformers import AutoProcessor

    assert sorted(p.name for p in (REPO / QWEN36).iterdir()) == ["config.json"]
    with pytest.raises(OSError, match="preprocessor_config.json"):
        AutoProcessor.from_pretrained(str(REPO / QWEN36), use_fast=True)


@pytest.mark.skipif(not SGLANG_WHEEL.is_file(), reason="SGLang 0.5.17 wheel not on this machine")
def test_sglang_0517_sources_say_what_adr_0211_cites():
    with zipfile.ZipFile(SGLANG_WHEEL) as whl:
        def src(path: str) -> str:
            return whl.read("sglang/srt/" + path).decode()

        # enable_multimodal: Optional[bool] = None; is_multimodal is gated on it
        assert re.search(r"enable_multimodal: A\[\s*Optional\[bool\],.*?\] = None", src("server_args.py"), re.S)
        mc = src("configs/model_config.py")
        assert "self.is_multimodal = enable_multimodal and (" in mc
        assert '    "Qwen3_5MoeForConditionalGeneration",\n' in mc.split("multimodal_model_archs = [", 1)[1]
        # the tokenizer manager builds the processor before it looks at skip_tokenizer_init
        tm = src("managers/tokenizer_manager.py")
        body = tm.split("def init_tokenizer_and_processor(self):", 1)[1]
        assert (body.index("if self.model_config.is_multimodal:") < body.index("_get_processor_wrapper(server_args)")
                < body.index("if server_args.skip_tokenizer_init:"))
        # the vision tower is built unconditionally for Qwen3-VL-derived wrappers (Qwen3.5/3.6-MoE among them)
        vl = src("models/qwen3_vl.py")
        assert re.search(r"\n        self\.visual = Qwen3VLMoeVisionModel\(", vl)
        assert "class Qwen3_5MoeForConditionalGeneration(Qwen3VLForConditionalGeneration):" in src("models/qwen3_5.py")
