"""Bad config fails at parse time, naming key and value. One test per case."""

import copy
import re

import pytest

from specjoule import cells, config

BASE = {
    "name": "t",
    "device": "cuda",
    "engines": ["vllm"],
    "models": {
        "qwen": {
            "target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
            "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"},
        }
    },
    "schemes": {
        "baseline": {"method": "baseline"},
        "draft": {"method": "draft_model", "k": 5, "synthetic": True},
        "ngram": {"method": "ngram", "k": 5},
    },
    "acceptance": {"L3": {"minvar": 3.0}, "G3": {"geometric": 3.0}},
    "batch_sizes": [1, 32],
    "corpora": {"rand": {"source": "random"}},
    "workloads": {"closed": {"kind": "closed_batch"}},
}


def variant(**changes):
    cfg = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[p]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return cfg


DELETE = object()


def expect_error(cfg, key_fragment, value_fragment=None):
    with pytest.raises(config.ConfigError) as info:
        config.validate(cfg)
    message = str(info.value)
    assert key_fragment in info.value.key, message
    if value_fragment is not None:
        assert value_fragment in repr(info.value.value) or value_fragment in message, message
    return message


def test_base_is_valid_and_defaults_filled():
    cfg = config.validate(BASE)
    assert cfg["protocol"]["closing_baseline"] is True
    assert cfg["workloads"]["closed"]["prompt_len"] == 128
    assert cfg["models"]["qwen"]["target"]["tensor_parallel_size"] == 1
    # a cuda config without seeds gets three (paper grade, ADR 0097): 3 seeds × 2 batch sizes × (open + 2
    # synthetic + ngram + close)
    assert cfg["seeds"] == [0, 1, 2]
    assert len(cells.build(cfg)) == 3 * 2 * 5


def test_unknown_scheme_method():
    msg = expect_error(variant(schemes__draft__method="medusa"), "schemes.draft.method", "medusa")
    assert "known:" in msg


def test_unknown_engine():
    expect_error(variant(engines=["tgi"]), "engines[0]", "tgi")


def test_unknown_corpus_source():
    expect_error(variant(corpora__rand={"source": "s3"}), "corpora.rand.source", "s3")


def test_corpus_source_missing_its_field():
    expect_error(variant(corpora__rand={"source": "file"}), "corpora.rand.path")


def test_acceptance_vector_too_long():
    msg = expect_error(variant(acceptance={"R": {"rates": [1, 1, 1, 1, 1, 1]}}), "acceptance.R")
    assert "k=5" in msg


def test_acceptance_rate_above_one():
    msg = expect_error(variant(acceptance={"R": {"rates": [1.2, 1, 0, 0, 0]}}), "acceptance.R", "1.2")
    assert "outside [0, 1]" in msg


def test_acceptance_vector_increasing():
    msg = expect_error(variant(acceptance={"R": {"rates": [0.5, 0.9, 0, 0, 0]}}), "acceptance.R")
    assert "cannot increase" in msg


@pytest.mark.parametrize("L", [0.5, 6.5])
def test_mean_length_outside_range(L):
    msg = expect_error(variant(acceptance={"L": {"minvar": L}}), "acceptance.L", str(L))
    assert "[1" in msg


def test_batch_size_not_positive():
    expect_error(variant(batch_sizes=[4, 0]), "batch_sizes[1]", "0")


def test_pair_without_target():
    expect_error(variant(models__qwen__target=DELETE), "models.qwen", None)


def test_draft_scheme_without_draft():
    msg = expect_error(variant(models__qwen__draft=DELETE), "models.qwen.draft")
    assert "draft_model" in msg


def test_synthetic_on_cpu():
    msg = expect_error(variant(device="cpu", cuda_graphs=[False]), "schemes.draft.synthetic", "True")
    assert "GPU-only" in msg


def test_duplicate_names_in_yaml(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(
        "models:\n  a: {target: {model: x}}\n  a: {target: {model: y}}\n"
        "schemes: {baseline: {method: baseline}}\nbatch_sizes: [1]\nworkloads: {w: {kind: closed_batch}}\n"
    )
    with pytest.raises(config.ConfigError, match=r"config error at models\.a = \{'target': \{'model': 'y'\}\}: "
                                                 r"duplicate key in .*dup\.yaml \(line 3; also at line 2\)"):
        config.load(path)


def test_duplicate_batch_sizes():
    expect_error(variant(batch_sizes=[1, 1]), "batch_sizes", "[1, 1]")


def test_unknown_top_level_key():
    msg = expect_error(variant(batchsizes=[1]), "batchsizes", "[1]")
    assert "allowed here" in msg


def test_unknown_nested_key():
    expect_error(variant(workloads__closed={"kind": "closed_batch", "ouput_len": 4}), "workloads.closed.ouput_len", "4")


def test_wrong_type_names_the_key():
    expect_error(variant(seeds=["zero"]), "seeds[0]", "zero")


def test_unknown_acceptance_name_in_scheme():
    expect_error(variant(schemes__draft__acceptance=["L9"]), "schemes.draft.acceptance", "L9")


def test_acceptance_on_non_synthetic_scheme():
    expect_error(variant(schemes__ngram__acceptance=["L3"]), "schemes.ngram.acceptance")


def test_missing_baseline():
    expect_error(variant(schemes__baseline=DELETE), "schemes")


def test_open_loop_without_rate():
    expect_error(variant(workloads__ol={"kind": "open_loop"}), "workloads.ol.rate")


def test_cuda_graphs_on_cpu():
    cfg = variant(device="cpu", schemes__draft__synthetic=False, acceptance={}, cuda_graphs=[True])
    expect_error(cfg, "cuda_graphs")


def test_name_with_separator_rejected():
    cfg = variant()
    cfg["models"]["qwen-3b"] = cfg["models"].pop("qwen")
    expect_error(cfg, "models.qwen-3b")


def test_shipped_configs_validate():
    from pathlib import Path

    shipped = sorted(Path(config.REPO_ROOT, "config").glob("*.yaml"))
    shipped = [p for p in shipped if p.name != "schema.yaml"]
    assert shipped, "no shipped configs found"
    for path in shipped:
        cfg = config.load(path)
        assert len(cells.build(cfg)) > 0, path


def test_error_message_format():
    with pytest.raises(config.ConfigError) as info:
        config.validate(variant(batch_sizes=[-3]))
    assert re.fullmatch(r"config error at batch_sizes\[0\] = -3: .+", str(info.value))


def test_every_validation_reads_one_schema_that_no_caller_can_change():
    # The schema is read once and shared by every validation and hash (no copy per call: the fuzzer's thousands
    # of plans spent a fifth of their time copying it). Sharing is safe only because it refuses every change.
    from pathlib import Path

    import yaml

    schema = config._schema()
    as_written = yaml.safe_load(config.SCHEMA_PATH.read_text())
    shipped = [p for p in sorted(Path(config.REPO_ROOT, "config").glob("*.yaml")) if p.name != "schema.yaml"]
    for raw in [*(config.read_yaml(p) for p in shipped), BASE]:
        validated = config.validate(copy.deepcopy(raw))
        config.config_hash(validated)
        # a filled-in default is the config's own: plain, changeable, not the schema's object
        for node in (validated, *validated.values()):
            assert type(node) in (dict, list, str, int, float, bool, type(None)), type(node)
        validated["report"]["tbt_targets_ms"].append(99)
        validated["engine_options"]["vllm"] = {"changed": True}
    with pytest.raises(config.ConfigError, match=r"batch_sizes\[0\] = -3"):
        config.validate(variant(batch_sizes=[-3]))
    assert config._schema() is schema and schema == as_written

    report = schema["properties"]["report"]
    changes = [
        lambda: schema.__setitem__("title", "changed"),
        lambda: schema["properties"].pop("device"),
        lambda: schema["properties"]["device"].update(default="cuda"),
        lambda: schema["$defs"].clear(),
        lambda: report["properties"].setdefault("new", {}),
        lambda: report["properties"]["tbt_targets_ms"]["default"].append(99),
        lambda: report["properties"]["tbt_targets_ms"]["default"].__setitem__(0, 1),
        lambda: schema["properties"]["engines"]["default"].extend(["sglang"]),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert schema == as_written
    # a deep copy is the caller's own, as before
    mine = copy.deepcopy(schema)
    mine["properties"]["report"]["properties"]["tbt_targets_ms"]["default"].append(99)
    assert type(mine) is dict and schema == as_written
