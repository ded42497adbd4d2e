"""The drafting schemes (specjoule/schemes.py) and the engine arguments each adapter builds for them (issue 16).

Expected values come from the engines' sources or the published drafters, not from the implementation:
* field and method names: vLLM 0.32 (installed, imported) and vLLM 0.26.0 / SGLang 0.5.17 (the H200's versions,
  extracted with ``ast`` by tools/engine_fields.py into tests/data/*/speculative-*.json; re-extracted and compared
  when the source is on this machine);
* block layouts: the 0.26.0 speculators' own lines (``num_query_per_req = 1 + N`` for DFlash, ``N`` for DSpark)
  and the published z-lab DFlash b16 config (block_size 16, 15 drafted).
CPU only, no engine starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from specjoule import config as cfgmod
from specjoule import schemes
from specjoule.engines import vllm as V
from specjoule.engines.base import EngineUnsupported

DATA = Path(__file__).parent / "data"
VLLM026 = json.loads((DATA / "vllm" / "speculative-0.26.0.json").read_text())
VLLM026_SRC = Path(os.environ.get("SPECJOULE_VLLM026_SRC", "/work/src/vllm-0.26.0/vllm"))

SPECULATIVE = [m for m in schemes.METHODS if m != "baseline"]

# Published shapes (trimmed to the keys the engines read): z-lab/Qwen3-8B-DFlash-b16 and a DeepSpec DSpark block-7
# draft for Qwen3-8B; XiaomiMiMo/MiMo-7B-Base carries one MTP layer.
DFLASH_B16 = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 16,
              "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]}}
DSPARK_B7 = {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", "block_size": 7, "markov_rank": 64,
             "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]}}
EAGLE3_HEAD = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "draft_vocab_size": 32000}
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
MIMO_7B = {"architectures": ["MiMoForCausalLM"], "model_type": "qwen2", "num_nextn_predict_layers": 1}
TINY_DRAFT = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}


def _dir(tmp_path: Path, name: str, cfg: dict) -> str:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


@pytest.fixture
def models(tmp_path: Path) -> dict[str, str]:
    return {"qwen3": _dir(tmp_path, "qwen3-8b", QWEN3_8B), "mimo": _dir(tmp_path, "mimo-7b", MIMO_7B),
            "eagle3": _dir(tmp_path, "qwen3-8b-eagle3", EAGLE3_HEAD), "dflash": _dir(tmp_path, "qwen3-8b-dflash", DFLASH_B16),
            "dspark": _dir(tmp_path, "qwen3-8b-dspark", DSPARK_B7), "draft": _dir(tmp_path, "tiny-draft", TINY_DRAFT)}


# k each scheme runs with in these tests: the block drafters' k follows from the published blocks (see above).
K = {"ngram": 3, "draft_model": 3, "eagle3": 3, "mtp": 2, "dflash": 16 - 1, "dspark": 7}


def _scheme(method: str, models: dict[str, str]) -> dict:
    s: dict = {"name": method, "method": method, "k": K[method], "options": {}}
    if method in ("eagle3", "dflash", "dspark"):
        s["drafter"] = models[method]
    return s


def _spec(method: str, models: dict[str, str], synthetic: bool = True, rates: list[float] | None = None) -> dict:
    target = models["mimo"] if method == "mtp" else models["qwen3"]
    scheme = _scheme(method, models)
    scheme["synthetic"] = synthetic
    k = K[method]
    return {"engine": "vllm", "device": "cuda", "seed": 0, "batch_size": 2, "cuda_graphs": True,
            "target": {"model": target, "load_format": "dummy", "dtype": "auto"},
            "draft": {"model": models["draft"], "load_format": "dummy"}, "scheme": scheme,
            "acceptance_rates": rates if rates is not None else ([0.5] * k if synthetic else None),
            "workload": {"kind": "closed_batch", "prompt_len": 32, "output_len": 64}, "prefix_caching": False}


# -- the registry --------------------------------------------------------------------------------------------


def test_config_reads_the_registry():
    assert cfgmod.METHODS == schemes.METHODS
    assert set(cfgmod.DRAFTER_METHODS) == {"eagle3", "mtp", "dflash", "dspark"}
    assert cfgmod.DRAFT_MODEL_METHODS == ("draft_model",)


@pytest.mark.parametrize("method,k,passes", [
    ("baseline", None, 0), ("ngram", 4, 0), ("draft_model", 4, 4), ("eagle3", 4, 4), ("mtp", 3, 3),
    ("dflash", 15, 1), ("dspark", 7, 1)])
def test_draft_passes_per_round(method, k, passes):
    # issue 16 / CONTEXT.md: draft_model and heads k, block drafters 1, ngram 0 (host side)
    assert schemes.draft_passes_per_round(method, k) == passes


@pytest.mark.parametrize("method", SPECULATIVE)
def test_verify_width_is_drafts_plus_bonus(method):
    # Both engines verify the k drafts and the bonus position in one target pass.
    assert schemes.verify_width(method, 5) == 6
    assert schemes.max_acceptance_length(method, 5) == 6
    assert schemes.verify_width("baseline", None) == 1


def test_block_k_from_published_blocks():
    assert schemes.block_k("dflash", DFLASH_B16) == 15  # z-lab b16: anchor + 15 masks
    assert schemes.block_k("dspark", DSPARK_B7) == 7  # DeepSpec block 7: 7 drafted, 8 verified
    assert schemes.block_k("dspark", {**DSPARK_B7, "dspark_bonus_anchor": True}) == 6
    assert schemes.block_k("dspark", {"dspark_block_size": 5, "block_size": 7}) == 5  # the prefixed key wins
    assert schemes.block_k("dflash", {"dflash_config": {"block_size": 8}, "block_size": 16}) == 7
    assert schemes.block_k("dflash", {"architectures": ["DFlashDraftModel"]}) is None


def test_target_mtp_layers():
    assert schemes.target_mtp_layers(MIMO_7B) == 1
    assert schemes.target_mtp_layers(QWEN3_8B) == 0
    assert schemes.target_mtp_layers({"text_config": {"mtp_num_hidden_layers": 1}}) == 1


@pytest.mark.skipif(not VLLM026_SRC.is_dir(), reason="vLLM 0.26.0 source not on this machine")
def test_block_layouts_are_the_engine_sources():
    """The k = block − 1 (DFlash) / k = block (DSpark) rule rests on these lines of vLLM 0.26.0."""
    dflash = (VLLM026_SRC / "v1/worker/gpu/spec_decode/dflash/speculator.py").read_text()
    dspark = (VLLM026_SRC / "v1/worker/gpu/spec_decode/dspark/speculator.py").read_text()
    assert "self.num_query_per_req = 1 + self.num_speculative_steps" in dflash
    assert "self.num_query_per_req = self.num_speculative_steps" in dspark
    runner_cfg = (VLLM026_SRC / "config/vllm.py").read_text()
    # V2 runs only these speculative methods; ngram is named unsupported (so draft_model / ngram arms run on V1).
    assert '"eagle",\n                "eagle3",\n                "mtp",\n                "dflash",\n                "dspark",' in runner_cfg
    assert 'unsupported.append("ngram/ngram_gpu speculative decoding")' in runner_cfg


# -- vLLM arguments against the real config classes ----------------------------------------------------------


@pytest.mark.skipif(not VLLM026_SRC.is_dir(), reason="vLLM 0.26.0 source not on this machine")
def test_vllm026_fixture_matches_its_source():
    from tools.engine_fields import vllm as extract

    assert extract(VLLM026_SRC, "0.26.0") == VLLM026


def _vllm032_fields() -> tuple[set[str], set[str], set[str]]:
    from vllm.config import speculative as sm
    from vllm.engine.arg_utils import EngineArgs

    return (set(sm.SpeculativeConfig.__dataclass_fields__), V._literal_values(sm.SpeculativeMethod),
            {f.name for f in dataclasses.fields(EngineArgs)})


def test_the_token_mode_option_never_reaches_vllms_speculative_config(models):
    """ADR 0243: ``options.simulate_token_mode`` names what vLLM's synthetic sampler does anyway; the rest of the
    options still pass through."""
    spec = _spec("draft_model", models)
    spec["scheme"]["options"] = {"simulate_token_mode": "real-draft-token", "prompt_lookup_max": 3}
    cfg = V.speculative_config(spec)
    assert "simulate_token_mode" not in cfg and cfg["prompt_lookup_max"] == 3
    assert schemes.engine_options({"simulate_token_mode": "fixed"}) == {}


@pytest.mark.parametrize("method", SPECULATIVE)
@pytest.mark.parametrize("synthetic", [True, False])
def test_vllm_speculative_config_fields_exist(method, synthetic, models):
    cfg = V.speculative_config(_spec(method, models, synthetic))
    fields032, methods032, _ = _vllm032_fields()
    assert set(cfg) <= set(VLLM026["speculative_config_fields"]), set(cfg) - set(VLLM026["speculative_config_fields"])
    assert set(cfg) <= fields032
    assert cfg["method"] in VLLM026["speculative_methods"] and cfg["method"] in methods032
    assert cfg["num_speculative_tokens"] == K[method]
    if synthetic:
        assert cfg["rejection_sample_method"] in VLLM026["rejection_sample_methods"]
        from vllm.config.speculative import SpeculativeConfig

        # vLLM's own validation of the vector (length k, [0, 1], non-increasing) accepts it
        assert SpeculativeConfig._resolve_synthetic_acceptance_rates(K[method], cfg["synthetic_acceptance_rates"], None) \
            == [0.5] * K[method]
    else:
        assert "rejection_sample_method" not in cfg


@pytest.mark.parametrize("method", SPECULATIVE)
def test_vllm_engine_kwargs_are_engine_args(method, models):
    kw = V.engine_kwargs(_spec(method, models))
    _, _, engine_args032 = _vllm032_fields()
    assert set(kw) <= set(VLLM026["engine_args_fields"]), set(kw) - set(VLLM026["engine_args_fields"])
    assert set(kw) <= engine_args032


def test_vllm_model_per_scheme(models):
    """Which dir becomes SpeculativeConfig.model: the drafter for heads and blocks, the pair's draft for
    draft_model, none for mtp (vLLM takes the target: "use the draft model from the same model") and ngram."""
    got = {m: V.speculative_config(_spec(m, models)).get("model") for m in SPECULATIVE}
    assert got == {"ngram": None, "draft_model": models["draft"], "eagle3": models["eagle3"], "mtp": None,
                   "dflash": models["dflash"], "dspark": models["dspark"]}


def test_vllm_mtp_on_a_target_without_mtp_layers_is_unsupported(models):
    spec = _spec("mtp", models)
    spec["target"]["model"] = models["qwen3"]
    with pytest.raises(EngineUnsupported, match="Unsupported speculative method: 'mtp'"):
        V.speculative_config(spec)


def test_vllm_mtp_k_must_divide_by_its_layers(tmp_path, models):
    spec = _spec("mtp", models, rates=[0.5, 0.5, 0.5])
    spec["scheme"]["k"] = 3
    spec["target"]["model"] = _dir(tmp_path, "two-mtp", {**MIMO_7B, "num_nextn_predict_layers": 2})
    with pytest.raises(EngineUnsupported, match="must be divisible by n_predict=2"):
        V.speculative_config(spec)


def test_vllm_dspark_below_its_block_is_unsupported(tmp_path, models):
    spec = _spec("dspark", models, rates=[0.5] * 5)
    spec["scheme"]["k"] = 5
    spec["scheme"]["drafter"] = _dir(tmp_path, "dsv4-dspark", {**DSPARK_B7, "dspark_block_size": 7})
    with pytest.raises(EngineUnsupported, match=r"dspark_block_size \(7\); got 5"):
        V.speculative_config(spec)


def test_vllm_probe_knows_every_scheme():
    """vLLM 0.32 (installed) names every method the registry maps to."""
    _, methods032, _ = _vllm032_fields()
    assert {schemes.get(m).vllm_method for m in SPECULATIVE} <= methods032


# -- parse-time validation of a scheme's width ----------------------------------------------------------------


def _config(models: dict[str, str], scheme: dict, acceptance: dict, target: str = "qwen3",
            engines: tuple[str, ...] = ("vllm",)) -> dict:
    return {"device": "cuda", "engines": list(engines),
            "models": {"m": {"target": {"model": models[target], "load_format": "dummy"},
                             "draft": {"model": models["draft"], "load_format": "dummy"}}},
            "schemes": {"base": {"method": "baseline"}, "s": {**scheme, "synthetic": True}},
            "acceptance": acceptance, "batch_sizes": [1],
            "workloads": {"w": {"kind": "closed_batch", "prompt_len": 32, "output_len": 64}}}


def _block_scheme(method: str, models: dict[str, str], k: int) -> dict:
    return {"method": method, "k": k, "drafter": models[method]}


@pytest.mark.parametrize("method,block,k", [("dflash", 16, 15), ("dspark", 7, 7)])
def test_block_drafter_L_up_to_its_verify_width(method, block, k, models):
    top = k + 1  # DFlash: block (16); DSpark: block + 1 (8)
    assert top == (block if method == "dflash" else block + 1)
    cfg = cfgmod.validate(_config(models, _block_scheme(method, models, k), {"lo": {"minvar": 1.0}, "hi": {"minvar": top}}))
    assert cfg["schemes"]["s"]["k"] == k
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, _block_scheme(method, models, k), {"over": {"minvar": top + 0.5}}))
    assert e.value.key == "acceptance.over" and f"verifies {top} tokens" in str(e.value)


@pytest.mark.parametrize("method,wrong", [("dflash", 16), ("dflash", 7), ("dspark", 6), ("dspark", 8)])
def test_block_drafter_k_must_match_its_block(method, wrong, models):
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, _block_scheme(method, models, wrong), {"a": {"minvar": 1.5}}))
    assert e.value.key == "schemes.s.k" and e.value.value == wrong


def test_vector_longer_than_the_scheme_drafts(models):
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, {"method": "eagle3", "k": 3, "drafter": models["eagle3"]},
                                {"long": {"rates": [0.9, 0.8, 0.7, 0.6]}}))
    assert e.value.key == "acceptance.long" and "k=3" in str(e.value)


@pytest.mark.parametrize("method", ["eagle3", "dflash", "dspark"])
def test_drafter_required(method, models):
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, {"method": method, "k": 7}, {"a": {"minvar": 2.0}}))
    assert e.value.key == "schemes.s.drafter"


def test_mtp_needs_no_drafter_but_a_target_with_mtp_layers(models):
    cfgmod.validate(_config(models, {"method": "mtp", "k": 1}, {"a": {"minvar": 1.5}}, target="mimo"))
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, {"method": "mtp", "k": 1}, {"a": {"minvar": 1.5}}, target="qwen3"))
    assert e.value.key == "models.m.target.model" and e.value.value == models["qwen3"]


def test_drafter_on_a_scheme_without_one(models):
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, {"method": "ngram", "k": 3, "drafter": models["eagle3"]}, {"a": {"minvar": 2.0}}))
    assert e.value.key == "schemes.s.drafter"


# -- the GPU smoke's argument handling (tools/device/smoke_schemes.py; runs on the H200, not here) ----------


def _smoke():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tools" / "device" / "smoke_schemes.py"
    spec = importlib.util.spec_from_file_location("smoke_schemes", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["smoke_schemes"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_smoke_parses_arms(models):
    smoke = _smoke()
    dflash = smoke.parse_arm(f"{models['qwen3']}:dflash:{models['dflash']}")
    assert (dflash.method, dflash.k, dflash.drafter) == ("dflash", 15, models["dflash"])  # b16 → 15 drafted
    assert smoke.parse_arm(f"{models['qwen3']}:dspark:{models['dspark']}").k == 7
    assert smoke.parse_arm(f"{models['mimo']}:mtp:k=2") == smoke.Arm(models["mimo"], "mtp", None, 2)
    assert smoke.parse_arm(f"{models['qwen3']}:ngram").k == 3
    for bad in (f"{models['qwen3']}:eagle3", f"{models['qwen3']}:baseline", f"{models['qwen3']}:telepathy", "x"):
        with pytest.raises(Exception, match="needs a drafter|not a speculative scheme|expected TARGET"):
            smoke.parse_arm(bad)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_smoke_cells_span_L_1_to_the_verify_width(engine, models):
    smoke = _smoke()
    arm = smoke.parse_arm(f"{models['qwen3']}:dspark:{models['dspark']}")
    cs = smoke.arm_cells(arm, engine)
    assert [c.configured_L for c in cs] == [1.0, 8.0]  # block 7: 7 drafted, 8 verified
    assert [c.acceptance_rates for c in cs] == [(0.0,) * 7, (1.0,) * 7]
    assert all(c.spec["batch_size"] == 2 and c.spec["workload"]["output_len"] == 64 for c in cs)
    assert [c.configured_L for c in smoke.arm_cells(arm, engine, one_L=True)] == [8.0]


def test_smoke_refuses_an_arm_the_config_refuses(models):
    smoke = _smoke()
    with pytest.raises(cfgmod.ConfigError, match="declares none"):
        smoke.arm_cells(smoke.Arm(models["qwen3"], "mtp", None, 1), "vllm")


# -- SGLang 0.5.17 arguments against its ServerArgs fields ------------------------------------------------------

SGLANG0517 = json.loads((DATA / "sglang" / "speculative-0.5.17.json").read_text())
SGLANG_WHEEL = Path(os.environ.get("SPECJOULE_SGLANG_WHEEL", "/work/main/.bundle/sglang/specjoule-bundle/wheels/"
                                   "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl"))


@pytest.mark.skipif(not SGLANG_WHEEL.is_file(), reason="SGLang 0.5.17 wheel not on this machine")
def test_sglang0517_fixture_matches_its_wheel(tmp_path):
    import zipfile

    from tools.engine_fields import sglang as extract

    with zipfile.ZipFile(SGLANG_WHEEL) as z:
        for name in ("sglang/srt/server_args.py", "sglang/srt/speculative/spec_info.py",
                     "sglang/srt/speculative/spec_registry.py"):
            z.extract(name, tmp_path)
    assert extract(tmp_path / "sglang", "0.5.17") == SGLANG0517
    # the older field list the SGLang adapter tests read is the same extraction
    old = [ln for ln in (DATA / "sglang" / "server_args_fields-0.5.17.txt").read_text().splitlines()
           if ln and not ln.startswith("#")]
    assert old == SGLANG0517["server_args_fields"]


def _sg_spec(method: str, models: dict[str, str]) -> dict:
    spec = _spec(method, models)
    spec["engine"] = "sglang"
    spec["engine_options"] = {"mem_fraction_static": 0.85, "attention_backend": "fa3"}
    return spec


@pytest.mark.parametrize("method", SPECULATIVE)
def test_sglang_kwargs_are_server_args(method, models):
    from specjoule.engines import sglang as sg

    kw = sg.engine_kwargs(_sg_spec(method, models))
    assert set(kw) <= set(SGLANG0517["server_args_fields"]), set(kw) - set(SGLANG0517["server_args_fields"])
    assert kw["speculative_algorithm"] in SGLANG0517["speculative_algorithms"]


def test_sglang_verify_windows(models):
    """speculative_num_draft_tokens per algorithm, as the 0.5.17 handlers define it: a topk-1 chain verifies
    steps + 1 (``_handle_eagle_family`` adjusts it to that); DFLASH its block_size ("verify window length": the
    z-lab b16 → 16); DSPARK gamma + 1 (block 7 → 8); NGRAM a tree of that many nodes."""
    from specjoule.engines import sglang as sg

    got = {m: sg.speculative_kwargs(_sg_spec(m, models)) for m in SPECULATIVE}
    assert got["dflash"]["speculative_num_draft_tokens"] == DFLASH_B16["block_size"]
    assert got["dspark"]["speculative_num_draft_tokens"] == DSPARK_B7["block_size"] + 1
    for m in ("draft_model", "eagle3", "mtp"):
        assert got[m]["speculative_eagle_topk"] == 1
        assert got[m]["speculative_num_draft_tokens"] == got[m]["speculative_num_steps"] + 1 == K[m] + 1
    for m in ("dflash", "dspark"):  # both handlers force one step of topk 1
        assert (got[m]["speculative_num_steps"], got[m]["speculative_eagle_topk"]) == (1, 1)
    assert got["ngram"]["speculative_num_draft_tokens"] == K["ngram"] + 1
    assert {m: got[m]["speculative_algorithm"] for m in SPECULATIVE} == {
        "ngram": "NGRAM", "draft_model": "STANDALONE", "eagle3": "EAGLE3", "mtp": "NEXTN", "dflash": "DFLASH",
        "dspark": "DSPARK"}


def test_sglang_draft_paths(models):
    """NEXTN on MiMo: SGLang defaults the draft path to the target only for DeepSeek/GLM-MoE-style targets
    (speculative_hook._handle_eagle_family), so the adapter names the target itself; shape-only drafters load as
    the target does."""
    from specjoule.engines import sglang as sg

    got = {m: sg.speculative_kwargs(_sg_spec(m, models)) for m in SPECULATIVE}
    assert got["mtp"]["speculative_draft_model_path"] == models["mimo"]
    assert {m: got[m].get("speculative_draft_model_path") for m in ("eagle3", "dflash", "dspark", "ngram")} == {
        "eagle3": models["eagle3"], "dflash": models["dflash"], "dspark": models["dspark"], "ngram": None}
    assert all(got[m]["speculative_draft_load_format"] == "dummy" for m in ("eagle3", "mtp", "dflash", "dspark"))


@pytest.mark.parametrize("method", SPECULATIVE)
def test_sglang_refuses_a_per_position_vector(method, models):
    scheme = {"method": method, "k": K[method]}
    if method in ("eagle3", "dflash", "dspark"):
        scheme["drafter"] = models[method]
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, scheme, {"v": {"rates": [0.5] * K[method]}},
                                target="mimo" if method == "mtp" else "qwen3", engines=("sglang",)))
    assert e.value.key == "acceptance.v.rates"


def test_sglang_dspark_needs_a_whole_L(models):
    scheme = _block_scheme("dspark", models, 7)
    cfgmod.validate(_config(models, scheme, {"a": {"minvar": 4.0}}, engines=("sglang",)))
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.validate(_config(models, scheme, {"a": {"minvar": 3.5}}, engines=("sglang",)))
    assert e.value.key == "acceptance.a.minvar" and e.value.value == 3.5
    # the same fractional L is fine on vLLM (per-position rates) and for DFlash on SGLang (floor/ceil draws)
    cfgmod.validate(_config(models, scheme, {"a": {"minvar": 3.5}}))
    cfgmod.validate(_config(models, _block_scheme("dflash", models, 15), {"a": {"minvar": 3.5}}, engines=("sglang",)))


# -- vLLM 0.32 builds its engine config from our arguments (CPU; no model weights, no engine) -------------------

TINY = json.loads((Path(__file__).resolve().parents[1] / "config" / "models" / "tiny-target" / "config.json").read_text())
TINY_DRAFTERS = {  # the published layouts above, at the tiny target's width
    "eagle3": {**TINY, **EAGLE3_HEAD, "num_hidden_layers": 1, "draft_vocab_size": 1024},
    "dflash": {**TINY, **DFLASH_B16, "num_hidden_layers": 1, "head_dim": 64,
               "dflash_config": {"mask_token_id": 8000, "target_layer_ids": [1, 2]}},
    "dspark": {**TINY, **DSPARK_B7, "num_hidden_layers": 1, "head_dim": 64,
               "dflash_config": {"mask_token_id": 8000, "target_layer_ids": [1, 2]}},
}


@pytest.fixture(scope="module")
def inspection_root(tmp_path_factory) -> Path:
    """One vLLM cache root for this module's in-process inspections: each class inspected once per run, as before
    ADR 0255 (the tests' shared root now outlives the run)."""
    return tmp_path_factory.mktemp("vllm-cache")


@pytest.fixture
def vllm_inspects_models_in_process(monkeypatch, inspection_root):
    """vLLM inspects each model class it meets (what the class supports) in a fresh interpreter, only to keep CUDA
    out of the caller (registry.py ``_run_in_subprocess``): one more vLLM import per architecture, six here, most
    of this test's time. A CPU build has no CUDA to keep out, so the same inspection (vLLM's function, the real
    classes) runs in this process (ADR 0231). The engine tests' starts keep vLLM's subprocess. In a root of the
    module's: the tests' root outlives the run (ADR 0255), where vLLM would answer from an earlier run's inspection."""
    from vllm.model_executor.models import registry

    monkeypatch.setattr(registry, "_run_in_subprocess", lambda inspect: inspect())
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(inspection_root))


@pytest.mark.parametrize("method", SPECULATIVE)
def test_vllm032_builds_the_speculative_config(method, tmp_path, vllm_inspects_models_in_process):
    """``EngineArgs(**engine_kwargs).create_engine_config()`` of the installed vLLM: the method survives, k is
    ours, and the draft is what the scheme says — for mtp the *target*, rewritten by vLLM into its MTP draft."""
    from vllm.engine.arg_utils import EngineArgs

    repo = Path(__file__).resolve().parents[1]
    mimo = _dir(tmp_path, "tiny-mimo", {**TINY, "architectures": ["MiMoForCausalLM"], "num_nextn_predict_layers": 1})
    drafter = _dir(tmp_path, f"tiny-{method}", TINY_DRAFTERS[method]) if method in TINY_DRAFTERS else None
    target = mimo if method == "mtp" else str(repo / "config" / "models" / "tiny-target")
    k = {"dflash": 15, "dspark": 7}.get(method, 2)
    spec = {"engine": "vllm", "device": "cpu", "seed": 0, "batch_size": 2, "cuda_graphs": False,
            "target": {"model": target, "load_format": "dummy"},
            "draft": {"model": str(repo / "config" / "models" / "tiny-draft"), "load_format": "dummy"},
            "scheme": {"name": method, "method": method, "k": k, "drafter": drafter, "options": {}, "synthetic": False},
            "acceptance_rates": None, "workload": {"kind": "closed_batch"}, "prefix_caching": False}
    args = EngineArgs(**V.engine_kwargs(spec))
    if method == "dspark":
        # vLLM implements DSpark only in the V2 GPU model runner; on a CPU (V1) it says so in its own words.
        with pytest.raises(ValueError, match="does not support: dspark"):
            args.create_engine_config()
        return
    sc = args.create_engine_config().speculative_config
    assert (sc.method, sc.num_speculative_tokens) == (method, k)
    expected_draft = {"draft_model": spec["draft"]["model"], "eagle3": drafter, "dflash": drafter, "mtp": target,
                      "ngram": target}[method]
    assert sc.draft_model_config.model == expected_draft
    if method == "mtp":
        assert sc.draft_model_config.hf_config.architectures == ["MiMoMTPModel"]
