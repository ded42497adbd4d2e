"""SGLang adapter (ADR 0016) without a GPU: argument construction, config errors, the meta_info →
counter arithmetic, /metrics parsing and the engine environment.

Parsing tests read the raw outputs captured on an H200 by tools/device/smoke_sglang.py, committed under
tests/data/sglang/; while a file is missing they FAIL and say which (never skipped, never invented).
Field names are checked against tests/data/sglang/server_args_fields-0.5.17.txt (extracted from the 0.5.17
wheel's server_args.py) and, once captured, the device's probe.json (the installed parser's own options).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specjoule import cells, config
from specjoule.engines import make_engine
from specjoule.engines import sglang as sg
from specjoule.engines.base import EngineUnsupported

DATA = Path(__file__).parent / "data" / "sglang"
SMOKE = "tools/device/smoke_sglang.py --out DIR"


def fixture(name: str) -> Path:
    p = DATA / name
    if not p.exists():
        pytest.fail(f"fixture {p} is missing: capture it on the GPU machine with `{SMOKE}` and commit DIR/{name} "
                    f"as tests/data/sglang/{name}")
    return p


def fields_0517() -> set[str]:
    lines = (DATA / "server_args_fields-0.5.17.txt").read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


CFG = {
    "name": "t", "device": "cuda", "engines": ["sglang"],
    "models": {"qwen": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy", "dtype": "bfloat16"},
                        "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy", "dtype": "bfloat16"},
                        "max_model_len": 2048}},
    "schemes": {"baseline": {"method": "baseline"},
                "draft": {"method": "draft_model", "k": 5, "synthetic": True},
                "ngram": {"method": "ngram", "k": 4}},
    "acceptance": {"mv3": {"minvar": 3.4}},
    "batch_sizes": [1, 8],
    "cuda_graphs": [True, False],
    "workloads": {"closed": {"kind": "closed_batch"}},
    "engine_options": {"sglang": {"mem_fraction_static": 0.8, "attention_backend": "fa3",
                                  "sampling_backend": "pytorch"}},
}


def cell_spec(scheme: str = "draft", graphs: bool = True, batch: int = 8, cfg: dict | None = None) -> dict:
    table = cells.build(config.validate(cfg or CFG))
    return next(c.spec for c in table.cells
                if c.scheme == scheme and c.cuda_graphs is graphs and c.batch_size == batch)


# -- argument construction ------------------------------------------------------------------------


def test_engine_kwargs_draft_model_synthetic():
    kw = sg.engine_kwargs(cell_spec())
    assert kw["model_path"].endswith("config/models/qwen2.5-3b") and Path(kw["model_path"]).is_absolute()
    assert kw["load_format"] == "dummy" and kw["speculative_draft_load_format"] == "dummy"
    assert kw["speculative_algorithm"] == "STANDALONE"
    assert kw["speculative_draft_model_path"].endswith("config/models/qwen2.5-0.5b")
    assert (kw["speculative_num_steps"], kw["speculative_eagle_topk"], kw["speculative_num_draft_tokens"]) == (5, 1, 6)
    assert kw["skip_tokenizer_init"] is True and kw["dtype"] == "bfloat16" and kw["tp_size"] == 1
    assert kw["max_running_requests"] == 8 and kw["cuda_graph_max_bs_decode"] == 8
    assert "disable_cuda_graph" not in kw
    assert kw["disable_radix_cache"] is True and kw["context_length"] == 2048 and kw["random_seed"] == 0
    assert (kw["mem_fraction_static"], kw["attention_backend"], kw["sampling_backend"]) == (0.8, "fa3", "pytorch")


def test_engine_kwargs_graphs_off_baseline_and_ngram():
    base = sg.engine_kwargs(cell_spec("baseline", graphs=False, batch=1))
    assert base["disable_cuda_graph"] is True and "cuda_graph_max_bs_decode" not in base
    assert not any(k.startswith("speculative_") for k in base) and base["max_running_requests"] == 1
    ng = sg.engine_kwargs(cell_spec("ngram"))
    assert ng["speculative_algorithm"] == "NGRAM" and ng["speculative_num_draft_tokens"] == 5


def test_engine_kwargs_names_are_serverargs_fields_of_0517():
    fields = fields_0517()
    for scheme in ("baseline", "draft", "ngram"):
        for graphs in (True, False):
            kw = sg.engine_kwargs(cell_spec(scheme, graphs))
            assert set(sg.adapt_kwargs(kw, fields, "0.5.17")) <= fields


def test_adapt_kwargs_renames_and_refuses():
    kw = {"cuda_graph_max_bs_decode": 8, "tp_size": 1}
    assert sg.adapt_kwargs(kw, {"cuda_graph_max_bs", "tp_size"}) == {"cuda_graph_max_bs": 8, "tp_size": 1}
    per_phase = {"disable_decode_cuda_graph", "disable_prefill_cuda_graph"}
    assert sg.adapt_kwargs({"disable_cuda_graph": True}, per_phase) == dict.fromkeys(per_phase, True)
    with pytest.raises(EngineUnsupported, match="no field 'attention_backnd'"):
        sg.adapt_kwargs({"attention_backnd": "fa3"}, fields_0517(), "0.5.17")


def test_closed_batch_refuses_a_running_cap_below_b():
    spec = copy.deepcopy(cell_spec())
    spec["engine_options"] = {"max_running_requests": 4}
    with pytest.raises(Exception, match="max_running_requests = 4 is below batch size 8"):
        sg.engine_kwargs(spec)


def test_server_command_0517_layout():
    cmd = sg.server_command(cell_spec(graphs=False), "127.0.0.1", 31000)
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    assert cmd[cmd.index("--port") + 1] == "31000" and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    # disable_cuda_graph has no CLI flag in 0.5.17: the two per-phase switches
    assert "--disable-decode-cuda-graph" in cmd and "--disable-prefill-cuda-graph" in cmd
    assert "--disable-cuda-graph" not in cmd
    assert "--enable-metrics" in cmd and "--skip-tokenizer-init" in cmd and "--disable-radix-cache" in cmd
    assert cmd[cmd.index("--speculative-algorithm") + 1] == "STANDALONE"
    assert cmd[cmd.index("--model-path") + 1].endswith("qwen2.5-3b")


def test_server_command_against_the_device_parser():
    probe = json.loads(fixture("probe.json").read_text())
    assert probe["engine_version"].startswith("0.5."), probe["engine_version"]
    opts = set(probe["cli_options"])
    fields = set(probe["fields"])
    for scheme in ("baseline", "draft", "ngram"):
        for graphs in (True, False):
            spec = cell_spec(scheme, graphs)
            kw = sg.adapt_kwargs(sg.engine_kwargs(spec), fields, probe["engine_version"])
            cmd = sg.server_command(spec, "127.0.0.1", 1, kw, opts)  # raises on an option the parser lacks
            assert all(a in opts for a in cmd[3:] if a.startswith("--"))
    assert {"STANDALONE", "NGRAM"} <= set(probe["spec_algorithms"])
    assert sg.SIMULATE_METHOD in probe["simulate_methods"]


def test_make_engine_picks_sglang_adapters():
    spec = cell_spec()
    assert isinstance(make_engine(spec), sg.SglangOfflineEngine)
    assert isinstance(make_engine(spec, force_server=True), sg.SglangServerEngine)


# -- config errors --------------------------------------------------------------------------------


def test_config_rejects_per_position_vector_on_sglang():
    cfg = copy.deepcopy(CFG)
    cfg["acceptance"] = {"r": {"rates": [0.9, 0.8, 0.5, 0.2, 0.1]}}
    with pytest.raises(config.ConfigError, match=r"acceptance\.r\.rates.*not a per-position vector") as e:
        config.validate(cfg)
    assert e.value.key == "acceptance.r.rates" and e.value.value == [0.9, 0.8, 0.5, 0.2, 0.1]


def test_config_rejects_geometric_on_sglang_but_not_on_vllm():
    cfg = copy.deepcopy(CFG)
    cfg["acceptance"] = {"g": {"geometric": 3.0}}
    with pytest.raises(config.ConfigError, match=r"acceptance\.g\.geometric.*minvar: 3\.0"):
        config.validate(cfg)
    cfg["engines"] = ["vllm"]
    config.validate(cfg)  # vLLM draws per position: fine there


def test_config_rejects_sglang_on_cpu():
    cfg = copy.deepcopy(CFG)
    cfg.update(device="cpu", cuda_graphs=[False], schemes={"baseline": {"method": "baseline"}})
    with pytest.raises(config.ConfigError, match="runs on cuda only") as e:
        config.validate(cfg)
    assert e.value.key == "device"


def test_unsupported_algorithm_is_refused_by_the_detected_engine():
    spec = cell_spec("ngram")
    with pytest.raises(EngineUnsupported, match=r"NGRAM \(ngram\) is not supported by the installed SGLang 0\.5\.9"):
        sg.check_supported(spec, {"engine_version": "0.5.9", "spec_algorithms": ["EAGLE", "STANDALONE"]})
    spec = copy.deepcopy(spec)
    spec["scheme"]["method"] = "medusa"
    with pytest.raises(EngineUnsupported, match="'medusa' has no SGLang speculative algorithm"):
        sg.speculative_kwargs(spec)


# -- environment ----------------------------------------------------------------------------------


def test_engine_env_synthetic_and_pythonpath():
    base = {"PATH": "/bin", "PYTHONPATH": "/vllm-site", "SPECJOULE_SGLANG_PYTHONPATH": "/sgl-site",
            "HF_HUB_OFFLINE": "0", "SGLANG_SIMULATE_ACC_METHOD": "multinomial"}
    env = sg.engine_env(cell_spec(), base)
    assert env["PYTHONPATH"] == f"{sg.REPO_ROOT}:/sgl-site"  # the vLLM site is not inherited
    assert env["SGLANG_SIMULATE_ACC_LEN"] == "3.4" and env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    assert env["HF_HUB_OFFLINE"] == "0"  # set by the user: kept
    assert env["TRANSFORMERS_OFFLINE"] == "1" and env["SGLANG_USE_SGL_FA3_KERNEL"] == "1"
    assert base["PYTHONPATH"] == "/vllm-site"  # the caller's dict is not modified


def _token_mode_cfg(mode: str = "real-draft-token") -> dict:
    cfg = copy.deepcopy(CFG)
    cfg["schemes"]["draft_rt"] = {"method": "draft_model", "k": 5, "synthetic": True,
                                  "options": {"simulate_token_mode": mode}}
    return cfg


def test_the_token_mode_option_reaches_the_environment_never_the_arguments_and_changes_only_its_own_ids():
    """ADR 0243: SGLANG_SIMULATE_ACC_TOKEN_MODE for the scheme that sets it (a stray one in the caller's environment
    is dropped for the others, which keep SGLang's default), and never a ServerArgs field."""
    cfg = _token_mode_cfg()
    rt = cell_spec("draft_rt", cfg=cfg)
    env = sg.engine_env(rt, {"PYTHONPATH": "/x"})
    assert env["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == "real-draft-token" and env["SGLANG_SIMULATE_ACC_LEN"] == "3.4"
    assert "simulate_token_mode" not in sg.engine_kwargs(rt) and "simulate_token_mode" not in sg.speculative_kwargs(rt)
    plain = sg.engine_env(cell_spec("draft", cfg=cfg), {"PYTHONPATH": "/x", "SGLANG_SIMULATE_ACC_TOKEN_MODE": "fixed"})
    assert "SGLANG_SIMULATE_ACC_TOKEN_MODE" not in plain
    # the recorded engine configuration names it beside the other simulate values
    recorded = sg.config_from_server_info({}, env)
    ids = {c.cell_id for c in cells.build(config.validate(CFG)).cells}
    with_rt = cells.build(config.validate(cfg)).cells
    assert ids == {c.cell_id for c in with_rt if c.scheme != "draft_rt"}  # the other schemes' ids are unchanged
    assert recorded["speculative_simulate_acc_token_mode"] == "real-draft-token"


def test_the_engine_must_run_the_token_mode_the_cell_configures():
    rt = cell_spec("draft_rt", cfg=_token_mode_cfg())
    info = {"engine_version": "0.5.17", "spec_algorithms": None, "simulate_methods": ["match-expected"],
            "simulate_acc_len": 3.4}
    sg.check_supported(rt, {**info, "simulate_acc_token_mode": "real-draft-token"})
    with pytest.raises(Exception, match="TOKEN_MODE in the engine is 'fixed'"):
        sg.check_supported(rt, {**info, "simulate_acc_token_mode": "fixed"})
    with pytest.raises(EngineUnsupported, match="has no SGLANG_SIMULATE_ACC_TOKEN_MODE"):
        sg.check_supported(rt, {**info, "simulate_acc_token_mode": None})


def test_the_token_mode_is_refused_at_parse_time_where_no_engine_of_the_config_has_it():
    with pytest.raises(config.ConfigError, match=r"schemes\.draft_rt\.options\.simulate_token_mode = 'last'"):
        config.validate(_token_mode_cfg("last"))
    vllm_too = _token_mode_cfg("fixed")
    vllm_too["engines"] = ["sglang", "vllm"]
    with pytest.raises(config.ConfigError, match="vllm commits only real-draft-token tokens"):
        config.validate(vllm_too)
    vllm_too["schemes"]["draft_rt"]["options"]["simulate_token_mode"] = "real-draft-token"
    config.validate(vllm_too)  # what vLLM's sampler always does
    not_synthetic = _token_mode_cfg()
    not_synthetic["schemes"]["draft_rt"]["synthetic"] = False
    with pytest.raises(config.ConfigError, match="the scheme is not synthetic"):
        config.validate(not_synthetic)


def test_engine_env_model_acceptance_drops_a_stray_simulate_value():
    base = {"PYTHONPATH": "/x", "SGLANG_SIMULATE_ACC_LEN": "6", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    env = sg.engine_env(cell_spec("ngram"), base)
    assert "SGLANG_SIMULATE_ACC_LEN" not in env and "SGLANG_SIMULATE_ACC_METHOD" not in env
    assert env["PYTHONPATH"] == f"{sg.REPO_ROOT}:/x"
    with pytest.raises(Exception, match="measures the model's own acceptance"):
        sg.check_supported(cell_spec("ngram"), {"simulate_acc_len": 6.0, "spec_algorithms": None})


# -- meta_info arithmetic -------------------------------------------------------------------------


def test_meta_counters_arithmetic():
    """Hand-built from the identity (not captured): 64 tokens, 1 from prefill, 21 verifies of 3."""
    mc = sg.MetaCounters(k=5)
    row = mc.add({"completion_tokens": 64, "prompt_tokens": 128, "spec_verify_ct": 21,
                  "finish_reason": {"type": "length", "length": 64}, "spec_correct_drafts_histogram": [0, 0, 21]})
    assert row["accepted"] == 42
    before = sg.MetaCounters(k=5).snapshot()
    cols = mc.snapshot().minus(before).columns(True)
    assert cols == {"committed_tokens": 64, "prompt_tokens": 128, "requests_completed": 1, "requests_failed": 0,
                    "drafts": 21, "draft_tokens": 105, "accepted_tokens": 42, "accepted_per_position": [21, 21, 0, 0, 0]}
    with pytest.raises(Exception, match="inconsistent"):
        mc.add({"completion_tokens": 5, "prompt_tokens": 1, "spec_verify_ct": 9, "finish_reason": None})


def test_meta_counters_take_the_schedulers_accepted_count_over_the_committed_view():
    """L = k + 1 = 6, 256 tokens: 255 decode tokens = 42 full steps + a 43rd cut from 6 tokens to 3."""
    mc = sg.MetaCounters(k=5)
    mc.add({"completion_tokens": 256, "prompt_tokens": 8, "spec_verify_ct": 43, "spec_num_correct_drafts": 215,
            "finish_reason": {"type": "length", "length": 256}, "spec_correct_drafts_histogram": [0, 0, 0, 0, 0, 43]})
    d = mc.snapshot().minus(sg.MetaCounters(k=5).snapshot())
    cols = d.columns(True)
    assert 1 + cols["accepted_tokens"] / cols["drafts"] == 6.0  # vLLM's semantics (counted before the cut)
    assert d.counters["spec_accepted_committed"] == 255 - 43  # committed view: 5.93
    assert cols["accepted_per_position"] == [43] * 5
    before = mc.snapshot()
    mc.add({"completion_tokens": 64, "prompt_tokens": 8, "spec_verify_ct": 21, "spec_num_correct_drafts": 42,
            "finish_reason": None, "spec_correct_drafts_histogram": [0, 0, 20]})  # sums to 40, not 42: unusable
    window = mc.snapshot().minus(before)
    assert window.accepted_per_pos == [] and window.columns(True)["accepted_per_position"] is None  # never negative
    without = sg.MetaCounters(k=5)  # an SGLang without the scheduler's count: the committed view
    without.add({"completion_tokens": 256, "prompt_tokens": 8, "spec_verify_ct": 43, "finish_reason": None})
    assert without.counters["spec_decode_num_accepted_tokens"] == 212


def test_generate_meta_info_realizes_configured_length():
    """Real meta_info from the H200 (server /generate, STANDALONE k=5, SGLANG_SIMULATE_ACC_LEN=3, 64 tokens).

    The server path's /generate returns the same tokenizer-manager meta_info as the offline engine (whose own
    capture, from a later run, is tested below), so both paths are counted by the same code.
    """
    m = json.loads(fixture("server_generate.json").read_text())["meta_info"]
    assert m["completion_tokens"] == 64 and m["prompt_tokens"] == 128
    assert sg.finish_type(m["finish_reason"]) == "length"
    mc = sg.MetaCounters(k=5)
    mc.add(m)
    cols = mc.snapshot().minus(sg.MetaCounters(k=5).snapshot()).columns(True)
    assert cols["committed_tokens"] == 64
    assert cols["drafts"] == m["spec_verify_ct"] == 21
    assert cols["draft_tokens"] == 5 * cols["drafts"]
    realized = 1 + cols["accepted_tokens"] / cols["drafts"]
    assert realized == pytest.approx(3.0, abs=1e-9)
    # SGLang's own accept length counts the token produced by prefill: 64 / 21, not 3
    assert m["spec_accept_length"] == pytest.approx(64 / 21) and m["spec_accept_length"] != pytest.approx(realized)
    r = sg.request_result(m, 64)
    assert r.ok and r.tpot_s is not None and r.tpot_s > 0


def _offline_window(name: str) -> tuple[list[dict], dict, dict]:
    """The offline engine's raw meta_info of one batch (4 requests) counted as a window: metas, columns, counters."""
    metas = json.loads(fixture(name).read_text())
    mc = sg.MetaCounters(k=5)
    for m in metas:
        mc.add(m)
    d = mc.snapshot().minus(sg.MetaCounters(k=5).snapshot())
    return metas, d.columns(True), d.counters


def test_offline_meta_info_64_tokens_counts_what_the_engine_delta_recorded():
    """Offline ``sglang.Engine`` on the H200 (2026-12-01, STANDALONE k=5, SIMULATE_ACC_LEN=3, B=4, 64 tokens):
    64 = 1 prefill token + 21 verify steps of 3, none cut, so the scheduler's count equals the committed view;
    and counting the raw meta_info again gives exactly the delta the adapter wrote during that run."""
    metas, cols, counters = _offline_window("offline_meta_info.json")
    assert len(metas) == 4 and all(m["completion_tokens"] == 64 and m["spec_verify_ct"] == 21 for m in metas)
    assert cols["accepted_tokens"] == counters["spec_accepted_committed"] == 4 * 42
    assert 1 + cols["accepted_tokens"] / cols["drafts"] == 3.0
    recorded = json.loads(fixture("offline_delta.json").read_text())
    assert recorded["columns"] == cols
    assert recorded["realized_L"] == 3.0


def test_offline_meta_info_65_tokens_confirms_the_cut_step():
    """The 65-token batch of the same run: 64 decode tokens = 21 steps of 3 + a 22nd cut from 3 tokens to 1.
    ADR 0016 predicted, before this capture, that the scheduler counts 44 accepted drafts per request and the
    committed view 42; the record must take the scheduler's count (realized L stays 3, as vLLM counts)."""
    metas, cols, counters = _offline_window("offline_meta_info_65.json")
    assert {(m["completion_tokens"], m["spec_verify_ct"], m["spec_num_correct_drafts"]) for m in metas} == {(65, 22, 44)}
    assert counters["spec_accepted_committed"] == 4 * ((65 - 1) - 22) == 4 * 42
    assert cols["accepted_tokens"] == 4 * 44 and cols["drafts"] == 4 * 22 and cols["committed_tokens"] == 4 * 65
    assert 1 + cols["accepted_tokens"] / cols["drafts"] == 3.0
    assert 1 + counters["spec_accepted_committed"] / cols["drafts"] == pytest.approx(2.909, abs=1e-3)
    assert cols["accepted_per_position"] == [88, 88, 0, 0, 0]  # the histogram agrees with the scheduler's count
    # SGLang's own spec_accept_length is completion / verify steps (65 / 22 = 2.95): it counts the prefill token
    # and leaves out the cut drafts, so the record never uses it
    assert metas[0]["spec_accept_length"] == pytest.approx(65 / 22)


def test_latency_from_meta_info_timestamps_not_decode_throughput():
    """The captured /generate meta_info (L = 3, 64 tokens) has decode_throughput ≈ 2.6e7 tokens/s: SGLang
    dated the first token at the first output batch, which a non-streamed request got only at the end.
    TTFT and TPOT must come from the received / prefill-finished / finished stamps instead."""
    m = json.loads(fixture("server_generate.json").read_text())["meta_info"]
    assert m["decode_throughput"] > 1e6  # the trap is in the recorded data
    r = sg.request_result(m, 64)
    ttft = m["prefill_finished_time"] - m["request_received_ts"]
    tpot = (m["request_finished_ts"] - m["prefill_finished_time"]) / 63
    assert r.ttft_s == pytest.approx(ttft) and 0.01 < r.ttft_s < 0.5
    assert r.tpot_s == pytest.approx(tpot) and 1e-3 < r.tpot_s < 0.05  # 9.3 ms; the smoke's stream read 9.7 ms
    # without the stamps: e2e / completion, prefill included, and no TTFT
    bare = {k: v for k, v in m.items() if k not in ("prefill_finished_time",)}
    r2 = sg.request_result(bare, 64)
    assert r2.ttft_s is None and r2.tpot_s == pytest.approx(m["e2e_latency"] / 64)


def test_offline_info_fixture_has_engine_config():
    info = json.loads(fixture("offline_info.json").read_text())
    cfg = info["engine_config"]
    assert info["engine_version"].startswith("0.5.")
    assert cfg["speculative_algorithm"] == "STANDALONE" and cfg["speculative_num_steps"] == 5
    assert cfg["cudagraph_mode"] != "NONE" and cfg["attention_backend"] == "fa3"


# -- /metrics and /server_info ------------------------------------------------------------------------


def test_prometheus_fixture_counts_the_batch():
    before = sg.snapshot_from_prometheus(fixture("server_metrics_before.txt").read_text(), 5)
    after = sg.snapshot_from_prometheus(fixture("server_metrics_after.txt").read_text(), 5)
    assert "num_requests_running" in after.gauges
    cols = after.minus(before).columns(True)
    assert cols["committed_tokens"] == 4 * 64 and cols["prompt_tokens"] == 4 * 128
    assert cols["requests_completed"] == 4 and cols["requests_failed"] == 0
    assert cols["draft_tokens"] == 5 * cols["drafts"]
    assert abs(1 + cols["accepted_tokens"] / cols["drafts"] - 3.0) < 0.05
    # truncation tally from the client moves accepted, nothing else
    shifted = sg.snapshot_from_prometheus(fixture("server_metrics_after.txt").read_text(), 5, truncated=7.0)
    assert shifted.counters["spec_decode_num_accepted_tokens"] == after.counters["spec_decode_num_accepted_tokens"] + 7
    assert shifted.counters["spec_accepted_committed"] == after.counters["spec_accepted_committed"]


def test_prometheus_baseline_has_no_spec_counters():
    snap = sg.snapshot_from_prometheus(fixture("server_metrics_after.txt").read_text(), None)
    assert not any(k.startswith("spec_decode") for k in snap.counters)


def test_server_info_fixture_to_engine_config():
    raw = json.loads(fixture("server_info.json").read_text())
    cfg = sg.config_from_server_info(raw)
    assert cfg["speculative_algorithm"] == "STANDALONE" and cfg["max_running_requests"] == 4
    assert cfg["disable_radix_cache"] is True and isinstance(cfg["async_scheduling"], bool)
    # the decode graphs must cover the batch (SGLang may round the captured sizes up, never below B)
    assert (cfg.get("cuda_graph_decode_max_bs") or cfg.get("cuda_graph_max_bs") or 0) >= 4
    assert cfg["cudagraph_mode"] != "NONE"


def test_generate_response_fixture_has_the_meta_info_keys_we_read():
    body = json.loads(fixture("server_generate.json").read_text())
    meta = body["meta_info"]
    for key in ("completion_tokens", "prompt_tokens", "finish_reason", "e2e_latency", "spec_verify_ct"):
        assert key in meta, key
    assert meta["completion_tokens"] == 64
    stream = fixture("server_generate_stream.txt").read_text()
    assert stream.strip().endswith("data: [DONE]")


def test_server_info_fixture_records_the_simulate_settings_as_arm_keys():
    raw = json.loads(fixture("server_info.json").read_text())
    env = sg.engine_env(cell_spec(), {"PYTHONPATH": "/x"})
    cfg = sg.config_from_server_info(raw, env)
    assert cfg["speculative_simulate_acc_len"] == "3.4" and cfg["speculative_simulate_acc_method"] == "match-expected"
    assert not any(k.startswith("env_SGLANG_SIMULATE") for k in cfg)


# -- process handling without SGLang (this machine cannot import it: the start must fail clearly) --------


def test_offline_start_without_sglang_fails_clearly_and_leaves_no_process(tmp_path):
    from specjoule.engines import proc

    spec = cell_spec()
    eng = sg.SglangOfflineEngine(spec, tmp_path / "engine.log", ready_timeout_s=60)
    eng.env["SPECJOULE_SGLANG_PYTHONPATH"] = ""
    eng.env["PYTHONPATH"] = str(sg.REPO_ROOT) + ":/nonexistent-sglang-site"
    try:
        with pytest.raises(Exception, match="SGLang engine failed to start: ModuleNotFoundError.*sglang"):
            eng.start()
        pgid = eng.pgid
    finally:
        eng.stop()
    assert pgid is not None and proc.group_members(pgid) == []
    eng.stop()  # idempotent


def test_server_start_without_sglang_fails_in_the_probe(tmp_path):
    eng = sg.SglangServerEngine(cell_spec(), tmp_path / "server.log", ready_timeout_s=30)
    try:
        with pytest.raises(Exception, match="SGLang probe failed"):
            eng.start()
        assert eng.proc is None  # nothing was launched
    finally:
        eng.stop()


def test_worker_snapshots_unpickle_in_the_cell_process() -> None:
    """The worker runs as ``python -m specjoule.engines.sglang``; a class it pickles must not be named
    ``__main__.X`` (the first H200 run failed reading counters with exactly that)."""
    import base64
    import pickle
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "specjoule.engines.sglang", "pickle-check"], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).resolve().parent.parent)
    snap = pickle.loads(base64.b64decode(out.stdout.strip()))
    assert type(snap) is sg.MetaSnapshot
