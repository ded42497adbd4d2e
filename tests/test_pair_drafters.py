"""Each target its own drafter (issue 16: "an EAGLE3 head per target"): `models.<pair>.drafters.<method>`.

A scheme without a `drafter` of its own runs, on each pair, that pair's drafter for its method; the cell's id is the
one the same drafter given on the scheme would give; a pair without one plans the scheme's cells as unsupported
(no GPU time) instead of starting an engine with another target's head; a drafter dir of the wrong kind or a block
drafter whose block does not match k is a config error naming the pair's key."""

from __future__ import annotations

import copy

import pytest

from specjoule import cells, config

QWEN8 = "config/models/qwen3-8b"
BASE = {
    "device": "cuda", "engines": ["vllm"], "seeds": [0], "batch_sizes": [1],
    "models": {
        "qwen3_8b": {"target": {"model": QWEN8, "load_format": "dummy"},
                     "drafters": {"eagle3": "config/models/qwen3-8b-eagle3", "dflash": "config/models/qwen3-8b-dflash"}},
        "qwen3_30b_a3b": {"target": {"model": "config/models/qwen3-30b-a3b", "load_format": "dummy"},
                          "drafters": {"eagle3": "config/models/qwen3-30b-a3b-eagle3"}},
    },
    "schemes": {"baseline": {"method": "baseline"},
                "eagle3": {"method": "eagle3", "k": 3, "synthetic": True, "acceptance": ["mv2"]},
                "dflash": {"method": "dflash", "k": 15, "synthetic": True, "acceptance": ["mv2"]}},
    "acceptance": {"mv2": {"minvar": 2.0}},
    "workloads": {"closed": {"kind": "closed_batch"}},
}


def _cells(raw: dict) -> dict[tuple[str, str], cells.Cell]:
    return {(c.model_pair, c.name): c for c in cells.build(config.validate(raw))}


def test_each_pair_runs_its_own_drafter():
    got = _cells(BASE)
    assert got[("qwen3_8b", "eagle3--mv2")].spec["scheme"]["drafter"] == "config/models/qwen3-8b-eagle3"
    assert got[("qwen3_30b_a3b", "eagle3--mv2")].spec["scheme"]["drafter"] == "config/models/qwen3-30b-a3b-eagle3"
    assert got[("qwen3_30b_a3b", "eagle3--mv2")].identity()["draft_model"] == "config/models/qwen3-30b-a3b-eagle3"


def test_a_pair_without_a_drafter_for_the_method_is_planned_unsupported():
    got = _cells(BASE)
    missing = got[("qwen3_30b_a3b", "dflash--mv2")]
    assert missing.unsupported_reason and "models.qwen3_30b_a3b.drafters.dflash" in missing.unsupported_reason
    assert missing.estimated_s == 0 and got[("qwen3_8b", "dflash--mv2")].unsupported_reason is None


def test_the_pairs_drafter_gives_the_id_the_schemes_drafter_gives():
    on_scheme = copy.deepcopy(BASE)
    on_scheme["models"] = {"qwen3_8b": {"target": {"model": QWEN8, "load_format": "dummy"}}}
    on_scheme["schemes"] = {"baseline": {"method": "baseline"},
                            "eagle3": {**BASE["schemes"]["eagle3"], "drafter": "config/models/qwen3-8b-eagle3"}}
    on_pair = copy.deepcopy(BASE)
    on_pair["models"] = {"qwen3_8b": {"target": {"model": QWEN8, "load_format": "dummy"},
                                      "drafters": {"eagle3": "config/models/qwen3-8b-eagle3"}}}
    on_pair["schemes"] = {"baseline": {"method": "baseline"}, "eagle3": BASE["schemes"]["eagle3"]}
    a = {c.name: c.cell_id for c in cells.build(config.validate(on_scheme)) if c.role == cells.ROLE_POINT}
    b = {c.name: c.cell_id for c in cells.build(config.validate(on_pair)) if c.role == cells.ROLE_POINT}
    assert a == b and a


@pytest.mark.parametrize("mutate,key", [
    (lambda r: r["models"]["qwen3_8b"]["drafters"].update(eagle3="config/models/qwen3-8b-dflash"),
     "models.qwen3_8b.drafters.eagle3"),
    (lambda r: r["models"]["qwen3_8b"]["drafters"].update(eagle3="config/models/no-such-head"),
     "models.qwen3_8b.drafters.eagle3"),
    (lambda r: r["schemes"]["dflash"].update(k=7), "schemes.dflash.k"),
    (lambda r: r["models"]["qwen3_8b"]["drafters"].update(medusa="x/y"), "models.qwen3_8b.drafters"),
])
def test_bad_pair_drafters_are_config_errors_naming_the_key(mutate, key):
    raw = copy.deepcopy(BASE)
    mutate(raw)
    with pytest.raises(config.ConfigError) as err:
        config.validate(raw)
    assert err.value.key.startswith(key), str(err.value)


def test_a_drafter_method_with_no_drafter_anywhere_is_a_config_error():
    raw = copy.deepcopy(BASE)
    for pair in raw["models"].values():
        pair.pop("drafters")
    with pytest.raises(config.ConfigError, match=r"schemes\.eagle3\.drafter.*models\.<pair>\.drafters\.eagle3"):
        config.validate(raw)
