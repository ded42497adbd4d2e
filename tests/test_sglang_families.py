"""SGLang 0.5.17 across the paper's model families, known before any GPU time (issue 16, ADR 0194).

What SGLang can run per family × scheme is read from its own sources (tools/extract_support.py →
specjoule/support_tables.py; the defects written by hand are in specjoule/support.py):
the NEXTN draft class its ModelConfig maps each MTP-carrying target to, the targets that hand EAGLE3 and DFlash their
hidden states, and the attention backends it accepts for Gemma-4. The pre-registered configs must plan exactly the
supported cells as measured and every other one as unsupported with a reason, and the adapter must ask SGLang for
the speculative settings each new cell configures."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path, PurePath

import pytest

from specjoule import cells, config, support
from specjoule.engines import sglang as sglang_adapter

REPO = Path(__file__).resolve().parents[1]
FAMILIES = REPO / "config" / "h200-schemes-sglang-families.yaml"
GEMMA4 = REPO / "config" / "h200-schemes-sglang-gemma4.yaml"
RAN_1202B = REPO / "validation" / "h200-2026-12" / "config" / "h200-schemes-sglang.yaml"
SGLANG0517 = json.loads((REPO / "tests" / "data" / "sglang" / "speculative-0.5.17.json").read_text())
SGLANG_WHEEL = Path(
    os.environ.get(
        "SPECJOULE_SGLANG_WHEEL",
        "/work/main/.bundle/sglang/specjoule-bundle/wheels/sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl",
    )
)

# Read in SGLang 0.5.17's sources (ADR 0194 cites file:line): the NEXTN draft each target's MTP layers load as
# (configs/model_config.py, ModelConfig._config_draft_model) ...
NEXTN_DRAFT = {
    "MiMoForCausalLM": "MiMoMTP",
    "Glm4MoeLiteForCausalLM": "Glm4MoeLiteForCausalLMNextN",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5ForCausalLMMTP",
    "Qwen3MoeForCausalLM": "Qwen3MoeForCausalLMMTP",
}
# ... and the family × scheme matrix that follows for the shipped shapes and drafters.
MEASURED = {
    ("mimo_7b", "mtp"),
    ("qwen3_30b_a3b", "eagle3"),
    ("glm47_flash", "eagle3"),
    # ("glm47_flash", "mtp") is planned unsupported since the H200 run of 2026-12-03: SGLang 0.5.17's NEXTN draft
    # for GLM-4.7-Flash does not start under dummy weights (ADR 0194 addendum, tests/test_sglang_nextn_dummy_load.py)
    ("qwen36_35b_a3b", "mtp"),
    ("qwen36_35b_a3b", "dflash"),
}
ALGORITHM = {"eagle3": "EAGLE3", "mtp": "NEXTN", "dflash": "DFLASH"}


def _plan(path: Path) -> list[cells.Cell]:
    return list(cells.build(config.load(path)))


def test_support_tables_hold_what_sglang_0517_sources_say():
    assert {t: support.SGLANG_NEXTN_DRAFTS.get(t) for t in NEXTN_DRAFT} == NEXTN_DRAFT
    for draft in NEXTN_DRAFT.values():
        assert draft in support.SGLANG_ARCHITECTURES, draft
    # set_eagle3_layers_to_capture: qwen3_moe.py, glm4_moe_lite.py, gemma4_causal.py, and qwen3_vl.py's
    # Qwen3VLForConditionalGeneration, which Qwen3_5MoeForConditionalGeneration extends; not mimo.py
    for arch in (
        "Qwen3MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "Gemma4ForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
    ):
        assert arch in support.SGLANG_EAGLE3_TARGETS, arch
    assert "MiMoForCausalLM" not in support.SGLANG_EAGLE3_TARGETS
    assert "Qwen3_5MoeForConditionalGeneration" in support.SGLANG_DFLASH_TARGETS  # qwen3_vl.py
    assert "MiMoForCausalLM" not in support.SGLANG_DFLASH_TARGETS
    assert set(support.SGLANG_ATTENTION_BACKENDS["Gemma4ForCausalLM"]) == {
        "trtllm_mha",
        "triton",
        "ascend",
        "intel_xpu",
    }
    assert "Qwen3MoeForCausalLM" not in support.SGLANG_ATTENTION_BACKENDS


@pytest.mark.skipif(not SGLANG_WHEEL.is_file(), reason="SGLang 0.5.17 wheel not on this machine")
def test_new_sglang_tables_are_what_the_extractor_reads_from_the_wheel():
    from tools import extract_support as extract

    registered = extract.sglang_architectures(SGLANG_WHEEL)
    assert registered == support.SGLANG_ARCHITECTURES
    assert extract.sglang_nextn_drafts(SGLANG_WHEEL) == support.SGLANG_NEXTN_DRAFTS
    assert frozenset(extract.dflash_targets(SGLANG_WHEEL, registered)) == support.SGLANG_DFLASH_TARGETS
    backends = {a: tuple(b) for a, b in extract.sglang_attention_backends(SGLANG_WHEEL).items()}
    assert backends == support.SGLANG_ATTENTION_BACKENDS


def test_mtp_support_needs_a_nextn_draft_class():
    ok, reason = support.mtp_target_supported("sglang", "Glm4MoeLiteForCausalLM")
    assert ok and "Glm4MoeLiteForCausalLMNextN" in reason
    # Qwen3-8B's class is registered, but SGLang maps no MTP draft for it: NEXTN would load the whole target
    ok, reason = support.mtp_target_supported("sglang", "Qwen3ForCausalLM")
    assert not ok and "maps no NextN/MTP draft architecture" in reason and "Qwen3ForCausalLM" in reason
    ok, reason = support.mtp_target_supported("sglang", "NoSuchForCausalLM")
    assert not ok and "does not register" in reason
    assert support.mtp_target_supported("vllm", "MiMoForCausalLM")[0]  # vLLM: the MTP-layer check is at parse


def test_dflash_support_needs_the_hidden_state_taps():
    assert support.dflash_target_supported("sglang", "Qwen3_5MoeForConditionalGeneration")[0]
    ok, reason = support.dflash_target_supported("sglang", "MiMoForCausalLM")
    assert not ok and "set_dflash_layers_to_capture" in reason


@pytest.mark.parametrize(
    "options,ok",
    [
        ({"attention_backend": "triton"}, True),
        ({}, True),  # SGLang picks its own Gemma-4 default (triton on SM90)
        ({"attention_backend": "fa3"}, False),
        ({"attention_backend": "triton", "decode_attention_backend": "fa3"}, False),
        (
            {"attention_backend": "fa3", "prefill_attention_backend": "triton", "decode_attention_backend": "triton"},
            True,
        ),
    ],
)
def test_gemma4_attention_backends(options, ok):
    got, reason = support.attention_backend_supported("sglang", "Gemma4ForCausalLM", options)
    assert got is ok
    if not ok:
        assert "Gemma4ForCausalLM" in reason and "fa3" in reason and "triton" in reason
    assert support.attention_backend_supported("sglang", "Qwen3MoeForCausalLM", {"attention_backend": "fa3"})[0]
    assert support.attention_backend_supported("vllm", "Gemma4ForCausalLM", {"attention_backend": "fa3"})[0]


def test_families_config_keeps_the_options_and_checks_of_the_run_it_extends():
    raw, ran = config.read_yaml(FAMILIES), config.read_yaml(RAN_1202B)
    assert raw["checks"] == ran["checks"]
    assert raw["engine_options"] == ran["engine_options"]
    assert raw["workloads"] == ran["workloads"] and raw["batch_sizes"] == ran["batch_sizes"] == [1]
    gemma = config.read_yaml(GEMMA4)
    assert gemma["checks"] == ran["checks"]
    assert {**gemma["engine_options"]["sglang"], "attention_backend": "fa3"} == ran["engine_options"]["sglang"]
    for text in (FAMILIES.read_text(), GEMMA4.read_text()):
        assert "pre-registered 2026-12-02c, not yet run" in text


def test_families_plan_measures_exactly_the_supported_pairs_cheapest_first():
    planned = _plan(FAMILIES)
    points = {(c.model_pair, c.scheme) for c in planned if c.role == cells.ROLE_POINT}
    measured = {(c.model_pair, c.scheme) for c in planned if c.role == cells.ROLE_POINT and not c.unsupported_reason}
    assert measured == MEASURED
    assert points - measured  # the grid keeps the rest, planned unsupported
    for c in planned:
        if c.role == cells.ROLE_POINT and (c.model_pair, c.scheme) not in MEASURED:
            assert c.unsupported_reason, c.name
    # each measured scheme at L = 1 and its maximum (verify width k + 1)
    for pair, scheme in MEASURED:
        got = sorted(c.configured_L for c in planned if (c.model_pair, c.scheme) == (pair, scheme))
        assert got == [1.0, float(planned_k(planned, pair, scheme) + 1)], (pair, scheme)
    families = list(dict.fromkeys(c.family_id for c in planned))
    assert families[0] == "sglang-mimo_7b-closed-cg1"
    assert families[-1] == "sglang-gemma4_26b_a4b-closed-cg1"


def planned_k(planned: list[cells.Cell], pair: str, scheme: str) -> int:
    return next(int(c.k) for c in planned if (c.model_pair, c.scheme) == (pair, scheme))


def test_unsupported_reasons_name_the_cause():
    planned = {(c.model_pair, c.scheme, c.role): c for c in _plan(FAMILIES)}
    gemma = planned[("gemma4_26b_a4b", "baseline", cells.ROLE_OPENING)].unsupported_reason
    assert "Gemma4ForCausalLM" in gemma and "triton" in gemma and "'fa3'" in gemma
    assert "Gemma4ForCausalLM" in planned[("gemma4_26b_a4b", "eagle3", cells.ROLE_POINT)].unsupported_reason
    assert "no MTP layers" in planned[("qwen3_30b_a3b", "mtp", cells.ROLE_POINT)].unsupported_reason
    assert "no eagle3 drafter" in planned[("mimo_7b", "eagle3", cells.ROLE_POINT)].unsupported_reason
    assert "no dflash drafter" in planned[("glm47_flash", "dflash", cells.ROLE_POINT)].unsupported_reason
    for pair in ("mimo_7b", "qwen3_30b_a3b", "glm47_flash", "qwen36_35b_a3b"):
        assert not planned[(pair, "baseline", cells.ROLE_OPENING)].unsupported_reason
        assert not planned[(pair, "baseline", cells.ROLE_CLOSING)].unsupported_reason


def test_gemma4_config_is_planned_unsupported_since_its_h200_start():
    """On the H200 (2026-12-03b) the triton config's opening baseline failed at start: SGLang 0.5.17 remaps
    Gemma-4's attention attributes only for the published multimodal model types, not the text-only shape this
    project ships. Every cell now says so in the plan, while the EAGLE3 cells' arguments stay what SGLang would be
    asked (they run unchanged from a config SGLang remaps)."""
    planned = _plan(GEMMA4)
    assert len(planned) == 4
    for cell in planned:
        reason = cell.unsupported_reason or ""
        assert "'gemma4_text'" in reason and "swa_num_key_value_heads" in reason, cell.name
    points = [c for c in planned if c.role == cells.ROLE_POINT]
    assert sorted(c.configured_L for c in points) == [1.0, 4.0]
    for cell in points:
        kw = sglang_adapter.engine_kwargs(cell.setup)
        assert kw["speculative_algorithm"] == "EAGLE3" and kw["attention_backend"] == "triton"
    ok, reason = support.model_type_supported("sglang", "gemma4")
    assert ok, reason  # the multimodal model type is remapped
    assert support.model_type_supported("vllm", "gemma4_text")[0]  # vLLM ran this shape (2026-12-02d)
    assert not support.model_type_supported("sglang", "gemma4_text")[0]


def test_adapter_asks_sglang_for_each_new_cells_speculative_settings(path=FAMILIES):
    """What the 2026-12-02b check compares against SGLang's own /server_info (algorithm, steps, top-k, verify
    width, draft path and load format), built here for each new measured cell; expectations from the config."""
    raw = config.read_yaml(path)
    checked = set()
    for cell in _plan(path):
        if cell.role != "point" or cell.unsupported_reason:
            continue
        pair = raw["models"][cell.model_pair]
        scheme = raw["schemes"][cell.scheme]
        kw = sglang_adapter.speculative_kwargs(cell.setup)
        k = scheme["k"]
        assert kw["speculative_algorithm"] == ALGORITHM[scheme["method"]]
        assert kw["speculative_eagle_topk"] == 1
        assert kw["speculative_num_draft_tokens"] == k + 1
        assert kw["speculative_num_steps"] == (1 if scheme["method"] == "dflash" else k)
        # MTP drafts with the layers the target carries: the draft path is the target's own dir
        draft = pair["target"]["model"] if scheme["method"] == "mtp" else pair["drafters"][scheme["method"]]
        assert PurePath(kw["speculative_draft_model_path"]).name == PurePath(draft).name
        assert kw["speculative_draft_load_format"] == "dummy"
        assert sglang_adapter.configured_length(cell.setup) == cell.configured_L
        whole = sglang_adapter.engine_kwargs(cell.setup)
        assert set(whole) <= set(SGLANG0517["server_args_fields"]), set(whole) - set(SGLANG0517["server_args_fields"])
        assert whole["attention_backend"] == raw["engine_options"]["sglang"]["attention_backend"]
        checked.add((cell.model_pair, scheme["method"]))
    assert checked == MEASURED


def test_mtp_on_a_target_without_mtp_layers_beside_ones_with_them_is_planned_unsupported():
    raw = config.read_yaml(FAMILIES)
    two = copy.deepcopy(raw)
    two["models"] = {p: raw["models"][p] for p in ("mimo_7b", "qwen3_30b_a3b")}
    two["schemes"] = {s: raw["schemes"][s] for s in ("baseline", "eagle3", "mtp")}
    planned = {(c.model_pair, c.scheme, c.configured_L): c for c in cells.build(config.validate(two))}
    assert "no MTP layers" in planned[("qwen3_30b_a3b", "mtp", 4.0)].unsupported_reason
    assert not planned[("mimo_7b", "mtp", 4.0)].unsupported_reason
    # no pair carries MTP layers: the scheme can run nowhere, a config error naming the target
    none = copy.deepcopy(two)
    none["models"] = {"qwen3_30b_a3b": raw["models"]["qwen3_30b_a3b"]}
    with pytest.raises(config.ConfigError, match="declares none") as err:
        config.validate(none)
    assert err.value.key == "models.qwen3_30b_a3b.target.model"


def test_the_extractor_writes_the_committed_tables_and_nothing_written_by_hand():
    """tools/extract_support.py regenerates specjoule/support_tables.py alone: rendered from the committed tables,
    it gives the committed file byte for byte, and none of the engines' defects written by hand in
    specjoule/support.py (which a regeneration used to drop) is in what it writes."""
    import inspect

    from specjoule import support_tables
    from tools import extract_support as extract

    text = extract.formatted(
        extract.render(
            support.VLLM_ARCHITECTURES,
            support.VERSIONS["vllm"],
            support.SGLANG_ARCHITECTURES,
            support.VERSIONS["sglang"],
            sorted(support.VLLM_EAGLE3_TARGETS),
            sorted(support.SGLANG_EAGLE3_TARGETS),
            support.SGLANG_NEXTN_DRAFTS,
            sorted(support.SGLANG_DFLASH_TARGETS),
            {a: list(b) for a, b in support.SGLANG_ATTENTION_BACKENDS.items()},
        )
    )
    assert text == inspect.getsource(support_tables)
    hand_written = ("SGLANG_EAGLE3_TARGET_BROKEN", "SGLANG_NEXTN_DUMMY_LOAD_BROKEN", "SGLANG_MODEL_TYPE_BROKEN")
    assert not any(name in text for name in hand_written) and "def " not in text
    assert all(name in inspect.getsource(support) for name in hand_written)
    # the tool's default output is the tables module, never support.py
    assert "support_tables.py" in inspect.getsource(extract.main)
