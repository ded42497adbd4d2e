"""Issue 21 item 1: every class of bad input a new user writes is refused when the plan is parsed, in one format.

One test per class, each with the example the README lists ("What a config error looks like"). Expected numbers
(token counts, GB) are computed here from the model's config.json, not by the code under test.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specjoule import cells, config

REPO = Path(__file__).resolve().parent.parent
FORMAT = re.compile(r"config error at (?P<key>.+?) = (?P<value>.+?): (?P<reason>.+)", re.S)
DEMO = config.read_yaml(REPO / "config" / "config.yaml")

# A cuda grid on the shape-only Qwen2.5-3B pair (no GPU needed to plan it).
CUDA = {
    "name": "t", "device": "cuda", "paper_grade": False,
    "models": {"qwen": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
                        "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"},
                        "max_model_len": 2048}},
    "schemes": {"baseline": {"method": "baseline"}, "draft": {"method": "draft_model", "k": 5, "synthetic": True}},
    "acceptance": {"L3": {"minvar": 3.0}},
    "batch_sizes": [1, 32],
    "workloads": {"closed": {"kind": "closed_batch", "prompt_len": 512, "output_len": 256}},
}


def refused(raw: dict, key: str) -> config.ConfigError:
    """The parse-time pass (config.plan: what Snakemake runs before any job) refuses ``raw`` at ``key``, in the
    one message format."""
    with pytest.raises(config.ConfigError) as info:
        config.plan(raw)
    m = FORMAT.fullmatch(str(info.value))
    assert m, str(info.value)
    assert m["key"] == key, str(info.value)
    return info.value


def demo(**top) -> dict:
    raw = copy.deepcopy(DEMO)
    raw.update(top)
    return raw


def cuda(**top) -> dict:
    raw = copy.deepcopy(CUDA)
    raw.update(top)
    return raw


# ----------------------------------------------------------------------------------- files: syntax, duplicates


def test_yaml_syntax_error_names_file_line_column_and_key(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text("name: x\nworkloads:\n  closed: {kind: closed_batch, output_len: 32\nbatch_sizes: [4]\n")
    with pytest.raises(config.ConfigError) as info:
        config.read_yaml(f)
    msg = str(info.value)
    # The mapping left open, as written, and where the parser stopped.
    assert msg.startswith("config error at workloads.closed = 'closed: {kind: closed_batch, output_len: 32': "), msg
    assert f"YAML syntax error in {f} line 4, column 12" in msg, msg
    assert "while parsing a flow mapping that starts at line 3" in msg, msg


def test_tab_indentation_is_named(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text("models:\n\ttiny: {}\n")
    msg = str(pytest.raises(config.ConfigError, config.read_yaml, f).value)
    assert "line 2, column 1" in msg and "tab" in msg, msg


def test_duplicate_key_at_any_depth_names_its_path_and_both_lines(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text("models:\n  tiny:\n    target: {model: a}\n    max_model_len: 512\n    max_model_len: 1024\n")
    err = pytest.raises(config.ConfigError, config.read_yaml, f).value
    assert err.key == "models.tiny.max_model_len" and err.value == 1024
    assert "(line 5; also at line 4)" in str(err)


def test_duplicate_inside_a_list_item(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text("report:\n  tbt_targets_ms: [1]\nitems:\n  - {a: 1, a: 2}\n")
    assert pytest.raises(config.ConfigError, config.read_yaml, f).value.key == "items[0].a"


# Every YAML the project reads as a config (shipped examples, past runs' configs, evidence copies).
CONFIG_YAMLS = sorted({*REPO.glob("config/*.yaml"), *REPO.glob("validation/**/*.yaml")})


def test_libyaml_parses_every_config_the_project_ships_as_pyyaml_does(monkeypatch):
    """read_yaml parses with libyaml (ADR 0238); PyYAML's own parser must give every shipped config the same data,
    the same types (1 and 1.0, "1" and 1, yes and "yes") and the same key order."""
    from specjoule import configfile

    assert configfile._COMPOSER is yaml.CSafeLoader, "PyYAML without libyaml: the fast path is not taken here"
    assert len(CONFIG_YAMLS) > 40, CONFIG_YAMLS
    fast = {f: config.read_yaml(f) for f in CONFIG_YAMLS}
    monkeypatch.setattr(configfile, "_COMPOSER", yaml.SafeLoader)
    for f in CONFIG_YAMLS:
        slow = config.read_yaml(f)
        assert repr(fast[f]) == repr(slow), f


@pytest.mark.parametrize("composer", ["libyaml", "pyyaml"])
def test_a_duplicate_key_and_a_syntax_error_read_the_same_through_either_parser(tmp_path, monkeypatch, composer):
    from specjoule import configfile

    monkeypatch.setattr(configfile, "_COMPOSER", yaml.CSafeLoader if composer == "libyaml" else yaml.SafeLoader)
    dup = tmp_path / "dup.yaml"
    dup.write_text("schemes:\n  ngram: {method: ngram, k: 3}\n  ngram: {method: ngram, k: 4}\n")
    err = pytest.raises(config.ConfigError, config.read_yaml, dup).value
    assert (err.key, err.value) == ("schemes.ngram", {"method": "ngram", "k": 4})
    assert "(line 3; also at line 2)" in str(err)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nseeds: [0, 1\nbatch_sizes: [4]\n")
    msg = str(pytest.raises(config.ConfigError, config.read_yaml, bad).value)
    # PyYAML's words and place, whichever parser read the file first.
    assert f"YAML syntax error in {bad} line 3, column 12: expected ',' or ']', but got ':'" in msg, msg
    assert "while parsing a flow sequence that starts at line 2" in msg, msg


def test_snakemake_cli_reports_duplicate_and_syntax_errors_before_planning(tmp_path):
    """`snakemake -n --configfile` (the profile's pre-check): our message, exit 1, no planning."""
    good = yaml.safe_dump(DEMO, sort_keys=False)
    (tmp_path / "dup.yaml").write_text(good + "seeds: [1]\n")
    (tmp_path / "bad.yaml").write_text(good.replace("batch_sizes:\n- 4", "batch_sizes: [4"))
    for name, expect in (("dup.yaml", r"config error at seeds = \[1\]: duplicate key in dup\.yaml \(line \d+; also at line \d+\)"),
                         ("bad.yaml", r"config error at batch_sizes\S* = .*: YAML syntax error in bad\.yaml line \d+, column \d+")):
        out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "--configfile",
                              name], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert out.returncode == 1, out.stderr[-2000:]
        assert re.search(expect, out.stderr), out.stderr[-2000:]
        assert not (tmp_path / "results").exists()  # nothing planned, nothing written


def test_snakefile_rereads_config_files_when_the_profile_is_bypassed(tmp_path):
    """The Snakemake API loads no profile: the Snakefile's own re-read still refuses the duplicate."""
    from snakemake_api import plan
    from snakemake_interface_common.exceptions import WorkflowError

    f = tmp_path / "dup.yaml"
    f.write_text(yaml.safe_dump(DEMO, sort_keys=False) + "batch_sizes: [8]\n")
    with pytest.raises(WorkflowError, match=r"config error at batch_sizes = \[8\]: duplicate key"):
        plan(tmp_path, f)


# ----------------------------------------------------------------------------------- shape and types


def test_one_key_path_notation_for_schema_and_semantic_errors():
    assert refused(demo(seeds=[0, "one"]), "seeds[1]").value == "one"  # schema
    assert refused(demo(batch_sizes=[4, -2]), "batch_sizes[1]").value == -2  # semantic


def test_unknown_key_names_the_key_and_what_is_allowed():
    raw = demo()
    raw["workloads"]["closed"]["ouput_len"] = 8
    err = refused(raw, "workloads.closed.ouput_len")
    assert "allowed here: burstiness, concurrency, cooldown_s, kind" in err.reason


def test_missing_required_key_is_named_itself():
    raw = demo()
    del raw["workloads"]["closed"]["kind"]
    assert refused(raw, "workloads.closed.kind").value is None


def test_integral_float_is_the_same_cell_as_the_int():
    """4.0 where 4 is meant is normalised, never a different cell (ids hash the value as written)."""
    as_int = cells.build(config.validate_plan(demo()))
    raw = demo(batch_sizes=[4.0], seeds=[0.0], version=1.0)
    raw["schemes"]["ngram"]["k"] = 3.0
    raw["workloads"]["closed"]["min_window_s"] = 2.0
    as_float = cells.build(config.validate_plan(raw))
    assert [c.cell_id for c in as_float] == [c.cell_id for c in as_int]
    assert [c.record_path for c in as_float] == [c.record_path for c in as_int]
    assert config.config_hash(config.validate(raw)) == config.config_hash(config.validate(demo()))


def test_rates_and_lengths_written_as_ints_are_the_same_cells_as_floats():
    a = cuda(acceptance={"L3": {"minvar": 3}})
    b = cuda()
    assert [c.cell_id for c in cells.build(config.validate_plan(a))] == [c.cell_id for c in cells.build(config.validate_plan(b))]


def test_non_finite_numbers_are_refused(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(DEMO, sort_keys=False).replace("baseline_drift_max: 0.25", "baseline_drift_max: .nan"))
    err = refused(config.read_yaml(f), "checks.baseline_drift_max")
    assert "not a finite number" in err.reason


def test_non_integral_batch_is_refused():
    assert refused(demo(batch_sizes=[4.5]), "batch_sizes[0]").value == 4.5


# ----------------------------------------------------------------------------------- names and paths


@pytest.mark.parametrize("name", ["a;touch x", "a$(id)", "a b", "a-b", "../a", ".hidden"])
def test_names_with_shell_or_path_characters_are_refused(name):
    raw = demo()
    raw["schemes"][name] = raw["schemes"].pop("ngram")
    err = refused(raw, f"schemes.{name}")
    assert "letters, digits" in err.reason


def test_model_dir_that_does_not_exist():
    raw = demo()
    raw["models"]["tiny"]["target"]["model"] = "config/models/tiny-targte"
    assert "no such local model directory" in refused(raw, "models.tiny.target.model").reason


def test_tokenizer_dir_that_does_not_exist():
    raw = demo()
    raw["models"]["tiny"]["target"]["tokenizer"] = "tokenizers/mine/v2"  # not org/name: a local path
    assert "no such local tokenizer directory" in refused(raw, "models.tiny.target.tokenizer").reason


def test_corpus_file_that_does_not_exist():
    raw = demo(corpora={"mine": {"source": "file", "path": "no/such/corpus.jsonl"}})
    assert refused(raw, "corpora.mine.path").value == "no/such/corpus.jsonl"


# ----------------------------------------------------------------------------------- cross-field


def test_window_shorter_than_the_preregistered_window_check():
    raw = demo()
    raw["checks"]["min_window_s"] = 5
    err = refused(raw, "workloads.closed.min_window_s")
    assert err.value == 2 and "checks.min_window_s = 5" in err.reason


def test_open_loop_window_too_short_for_the_energy_update_check():
    raw = cuda(workloads={"ol": {"kind": "open_loop", "rate": 2.0, "prompt_len": 64, "output_len": 64,
                                 "window_s": 30}})
    raw["checks"] = {"min_window_s": 20, "min_energy_updates": 400}
    err = refused(raw, "checks.min_energy_updates")
    assert "at most 301 updates" in err.reason  # 30 s / 0.1 s + the first reading


def test_prompt_plus_output_longer_than_max_model_len():
    raw = demo()
    raw["workloads"]["closed"].update(prompt_len=400, output_len=200)  # 600 > the pair's 512
    err = refused(raw, "workloads.closed.output_len")
    assert "= 600 tokens exceed the 512 of pair 'tiny' (models.tiny.max_model_len)" in err.reason


def test_max_model_len_beyond_the_models_positions():
    positions = json.loads((REPO / "config/models/tiny-target/config.json").read_text())["max_position_embeddings"]
    raw = demo()
    raw["models"]["tiny"]["max_model_len"] = positions * 2
    assert f"longer than the target allows ({positions}" in refused(raw, "models.tiny.max_model_len").reason


def test_batch_above_the_engines_max_num_seqs():
    raw = demo(batch_sizes=[4, 16])
    raw["engine_options"]["vllm"]["max_num_seqs"] = 8
    err = refused(raw, "engine_options.vllm.max_num_seqs")
    assert "below the largest batch size 16" in err.reason


@pytest.mark.parametrize("key", ["baseline_drift_max", "committed_spread_max", "max_failed_requests"])
def test_threshold_that_can_never_pass(key):
    raw = demo()
    raw["checks"][key] = -1
    assert "can never pass" in refused(raw, f"checks.{key}").reason


def test_acceptance_vectors_without_a_synthetic_scheme():
    raw = cuda()
    raw["schemes"]["draft"]["synthetic"] = False
    raw["schemes"]["ngram"] = {"method": "ngram", "k": 3}
    raw["acceptance"] = {"L3": {"minvar": 3.0}}
    assert "no entry of schemes (baseline, draft, ngram) has synthetic: true" in refused(raw, "acceptance.L3").reason


def test_vector_left_out_of_an_explicit_selection_is_a_warning(caplog):
    raw = cuda(acceptance={"L3": {"minvar": 3.0}, "L5": {"minvar": 5.0}})
    raw["schemes"]["draft"]["acceptance"] = ["L3"]
    config.validate_plan(raw)
    assert "acceptance.L5" in caplog.text and "not measured" in caplog.text


def test_batch_that_cannot_fit_the_gpu_names_the_estimate():
    """Qwen2.5-3B at B=4096 with 4096 + 512 tokens per sequence: the KV cache alone is far beyond one GPU."""
    c = json.loads((REPO / "config/models/qwen2.5-3b/config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    kv_per_token = 2 * c["num_key_value_heads"] * head_dim * c["num_hidden_layers"] * 2  # K and V, bf16
    tokens = 4096 + 512 + 5  # prompt + output + k
    raw = cuda(batch_sizes=[1, 4096])
    raw["models"]["qwen"]["max_model_len"] = 8192
    raw["workloads"]["closed"].update(prompt_len=4096, output_len=512)
    err = refused(raw, "batch_sizes[1]")
    kv_gb = 4096 * tokens * kv_per_token / 1e9
    draft = json.loads((REPO / "config/models/qwen2.5-0.5b/config.json").read_text())
    d_head = draft.get("head_dim") or draft["hidden_size"] // draft["num_attention_heads"]
    kv_gb += 4096 * tokens * 2 * draft["num_key_value_heads"] * d_head * draft["num_hidden_layers"] * 2 / 1e9
    m = re.search(r"KV cache (\d+\.\d) GB for 4096 sequences × 4613 tokens", err.reason)
    assert m and float(m[1]) == pytest.approx(kv_gb, abs=0.1), (err.reason, kv_gb)
    assert ("141 GB (an H200: protocol.gpu_memory_gb unset) × memory share 0.9 (the engine's default) hold 126.9 GB"
            in err.reason)
    # The same grid at B=32 fits; a GPU declared smaller refuses a smaller batch.
    config.validate_plan(cuda())
    small = cuda(batch_sizes=[64])
    small["protocol"] = {"gpu_memory_gb": 8}
    assert "8 GB (protocol.gpu_memory_gb)" in refused(small, "batch_sizes[0]").reason


def test_shipped_configs_pass_the_plan_time_checks():
    """Every config under config/ plans (the cross-field checks too); a smoke under validation/ that ran a 20 s
    window against a 30 s pre-registered check is exactly what they catch."""
    for path in sorted((REPO / "config").glob("*.yaml")):
        if path.name != "schema.yaml":
            config.validate_plan(config.read_yaml(path))
    smoke = REPO / "validation/h200-2026-12/session-2026-12-01c/smoke-openloop.yaml"
    config.validate(config.read_yaml(smoke))  # still readable as evidence
    assert "checks.min_window_s = 30" in refused(config.read_yaml(smoke), "workloads.poisson3.window_s").reason
