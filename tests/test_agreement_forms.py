"""The agreement benchmark's request forms (benchmarks/openloop_agreement.py, ADR 0113 addendum 2): the project's
client in the reference's form sends the same prompt as text that re-encodes to its own length and does not ask
for token ids back; the probe's statistics compare medians with a bootstrap interval. No server: the adapter builds
requests without one."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from specjoule import corpora
from specjoule.engines.vllm import VllmServerEngine

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import openloop_agreement as agreement  # noqa: E402


@pytest.fixture(scope="module")
def spec():
    return agreement.cell_spec(2.0, 32, 32, 1.0, 4.0, 1.0, 0, 8)


def test_the_reference_form_sends_the_same_prompt_as_text_and_asks_no_token_ids(spec):
    engine = VllmServerEngine(spec, url="http://127.0.0.1:9")  # never started: requests are built, not sent
    ids = list(range(1000, 1032))
    own_path, own = engine.stream_request(ids, 32)
    form = agreement.RequestForm(engine, text=True, ids_back=False)
    path, body = form.stream_request(ids, 32)
    assert path == own_path and form.url == engine.url and form.name == "text prompt, text back"
    assert isinstance(body["prompt"], str) and own["prompt"] == ids and own["return_token_ids"] is True
    assert "return_token_ids" not in body
    tok = Tokenizer.from_file(str(agreement.TOKENIZER_DIR / "tokenizer.json"))
    # the text re-encodes to the prompt's own length, the reference's way; these ids' plain decode re-encodes to 34
    assert _reencoded(tok, body["prompt"]) == len(ids) == 32
    assert _reencoded(tok, tok.decode(ids)) == 34 and body["prompt"] != tok.decode(ids)
    # where the plain decode already re-encodes to the prompt's length, the text is that decode
    words = tok.encode("The quick brown fox jumps over the lazy dog and keeps running far away").ids
    assert _reencoded(tok, tok.decode(words)) == len(words) == 19
    assert form.stream_request(words, 32)[1]["prompt"] == tok.decode(words)
    # everything else is the project's request, unchanged
    assert {k: v for k, v in body.items() if k != "prompt"} == {
        k: v for k, v in own.items() if k not in ("prompt", "return_token_ids")}
    same = agreement.RequestForm(engine, text=False, ids_back=True)
    assert same.stream_request(ids, 32) == (own_path, own) and same.name == "ids prompt, ids back"
    assert type(same.new_tally()) is type(engine.new_tally())  # the adapter's own tally


def _reencoded(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


def test_the_reference_form_re_encodes_a_gpu_configs_prompts_to_their_own_length():
    """A GPU config's pool holds the target's ids (up to 151,935), beyond the project tokenizer's 8,192 entries: a
    plain decode dropped them (a 512-token prompt became ~30 tokens). The form folds them into the vocabulary and
    decodes, re-encodes, truncates or extends the reference's way: every text the form sends re-encodes to 512 tokens
    but for a few that settle 1 or 2 long, as the reference's do (a split character's bytes re-encode to 3 tokens),
    and the same prompt gives the same text. The demo's pool (ids inside the vocabulary) likewise."""
    tok = Tokenizer.from_file(str(agreement.TOKENIZER_DIR / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    gpu = agreement.cell_spec(2.0, 512, 256, 5.0, 20.0, 5.0, 0, 64, REPO / "config" / "h200-openloop-matched.yaml",
                              "qwen3b")
    demo = agreement.cell_spec(2.0, 512, 256, 5.0, 20.0, 5.0, 0, 64)
    pool = [list(p) for p in corpora.load_pool(gpu).token_ids]
    assert vocab == 8192 and any(max(p) >= vocab for p in pool) and {len(p) for p in pool} == {512}
    assert max(_reencoded(tok, tok.decode(p)) for p in pool[:20]) < 100  # what a plain decode sent

    engine = VllmServerEngine(gpu, url="http://127.0.0.1:9")  # never started
    form = agreement.RequestForm(engine, text=True, ids_back=False)
    texts = [form.stream_request(p, 256)[1]["prompt"] for p in pool[:20]]
    assert [_reencoded(tok, t) for t in texts] == [512] * 20
    assert len(form._texts) == 20 and [form.stream_request(p, 256)[1]["prompt"] for p in pool[:20]] == texts
    again = agreement.RequestForm(engine, text=True, ids_back=False)  # a fresh cache: the same texts
    assert [again.stream_request(p, 256)[1]["prompt"] for p in pool[:20]] == texts
    assert agreement.text_prompt(tok, pool[0]) == agreement.text_prompt(tok, [i % vocab for i in pool[0]])

    demo_pool = [list(p) for p in corpora.load_pool(demo).token_ids]
    assert max(max(p) for p in demo_pool) < vocab
    for prompts in (pool, demo_pool):
        made = [agreement.text_prompt(tok, p) for p in prompts]
        lengths = [_reencoded(tok, text) for text, _ in made]
        assert [n for _, n in made] == lengths  # the length it returns is the text's own
        assert min(lengths) == 512 and max(lengths) <= 514
        assert sum(n == 512 for n in lengths) >= 0.9 * len(prompts)


def test_form_stats_reads_medians_and_a_shift_only_when_the_samples_carry_one():
    base = [0.010 + 0.0001 * i for i in range(60)]
    slow = [x + 0.002 for x in base]  # every request 2 ms later
    tail = base[:54] + [0.12] * 6  # the same requests, six of them a scheduler quantum late
    rows = agreement.form_stats({"own": base, "slow": slow, "tail": tail},
                                {"own": [0.003], "slow": [0.003], "tail": [0.003]})
    by = {r["form"]: r for r in rows}
    assert [r["form"] for r in rows] == ["own", "slow", "tail"] and by["own"]["n"] == 60
    d, lo, hi = by["slow"]["ttft_median_minus_own_ms"]
    assert d == pytest.approx(2.0) and lo > 0 < hi
    # the tail moves the mean by 10 ms and the median by less than 0.5 ms, inside its interval
    assert statistics.fmean(tail) - statistics.fmean(base) > 0.005
    d, lo, hi = by["tail"]["ttft_median_minus_own_ms"]
    assert abs(d) < 0.5 and lo <= 0 <= hi
    table = agreement.probe_table(rows)
    assert table.count("\n") == 4 and "| slow | 60 |" in table and "+2.00 (" in table


@pytest.mark.parametrize("argv, says", [
    (["--rates", ""], "--rates '' and no --prompt-form-probe: nothing to measure"),
    (["--rates", "2,x"], "--rates '2,x': requests/s, comma-separated numbers"),
    (["--rates", "4,0"], "--rates '4,0': every rate must be above 0"),
    (["--prompt-form-probe", "-3"], "--prompt-form-probe -3: a number of requests per form, 0 or more"),
])
def test_bad_arguments_are_refused_before_any_server_starts(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        agreement.main(argv)
    err = capsys.readouterr()
    assert exit_.value.code == 2 and says in err.err and "starting the server" not in err.out


def test_a_gpu_configs_model_pair_serves_its_target_on_its_device():
    """--config/--model: the benchmark serves a GPU config's target (its device, model and engine options), vLLM only,
    with the project's tokenizer for the reference's random dataset; the demo's cell stays the default."""
    gpu = REPO / "config" / "h200-openloop-matched.yaml"
    spec = agreement.cell_spec(3.0, 512, 256, 5.0, 30.0, 5.0, 0, 64, gpu, "qwen3b")
    assert (spec["engine"], spec["device"]) == ("vllm", "cuda")
    assert spec["target"]["model"] == "config/models/qwen2.5-3b" and spec["workload"]["rate"] == 3.0
    cmd = agreement.server_cmd(spec)
    assert cmd[cmd.index("--model") + 1].endswith("config/models/qwen2.5-3b")
    assert cmd[cmd.index("--tokenizer") + 1] == str(agreement.TOKENIZER_DIR)
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.85"
    demo = agreement.cell_spec(2.0, 32, 32, 1.0, 4.0, 1.0, 0, 8)
    assert demo["device"] == "cpu" and demo["target"]["model"] != spec["target"]["model"]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--config", "config/no-such.yaml"], "--config 'config/no-such.yaml': no such file"),
        (["--config", "config/h200-openloop-matched.yaml", "--model", "qwen9b"], "--model 'qwen9b'"),
    ],
    ids=["missing-config", "unknown-model"],
)
def test_a_bad_config_or_model_is_refused_before_any_server_starts(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        agreement.main([*argv, "--rates", "2"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert named in err
    if "--model" in named:
        assert "['qwen3b']" in err  # the keys it has


def _installed_get_request():
    """``get_request`` (and the rate helper it calls) of the installed vLLM's ``benchmarks/serve.py``, read with ``ast``
    and run apart: importing vLLM costs ~11 s on this host, and the function needs only numpy, time and asyncio."""
    import ast
    import asyncio
    import importlib.util
    import time
    import typing
    from collections.abc import AsyncGenerator, Iterable

    import numpy as np

    spec = importlib.util.find_spec("vllm")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed here")
    source = (Path(next(iter(spec.submodule_search_locations))) / "benchmarks" / "serve.py").read_text()
    tree = ast.parse(source)
    wanted = {"get_request", "_get_current_request_rate"}
    found = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in wanted]
    assert {f.name for f in found} == wanted, "vLLM's get_request moved: read the reference's schedule again"
    namespace = {"np": np, "time": time, "asyncio": asyncio, "Iterable": Iterable, "AsyncGenerator": AsyncGenerator,
                 "Literal": typing.Literal, "SampleRequest": object}
    exec(compile(ast.Module(body=found, type_ignores=[]), "vllm/benchmarks/serve.py", "exec"), namespace)  # noqa: S102
    return namespace["get_request"], time, asyncio


@pytest.mark.parametrize(("rate", "n", "seed"), [(8.0, 240, 0), (2.0, 60, 3)])
def test_reference_offsets_are_the_instants_vllm_bench_serve_sends_at(rate, n, seed, monkeypatch):
    """--reference-arrivals: the offsets are those the installed ``vllm bench serve`` sends its requests at (its
    ``main`` seeds numpy's global generator; its ``get_request`` draws, cumulates and rescales), driven here on a fake
    clock; and they are not the project's own ``scaled`` schedule (the same law from another generator)."""
    import numpy as np

    get_request, time_module, asyncio_module = _installed_get_request()
    clock = [1000.0]
    monkeypatch.setattr(time_module, "time", lambda: clock[0])

    async def fake_sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(asyncio_module, "sleep", fake_sleep)

    async def instants() -> list[float]:
        out = []
        async for _request, _rate in get_request(list(range(n)), rate, 1.0):
            out.append(clock[0] - 1000.0)
        return out

    np.random.seed(seed)  # what the reference's main does with --seed
    loop = asyncio_module.new_event_loop()
    try:
        sent = loop.run_until_complete(instants())
    finally:
        loop.close()
    monkeypatch.undo()
    mine = agreement.reference_offsets(rate, n, seed)
    assert len(sent) == len(mine) == n and sent[-1] == pytest.approx(n / rate)
    assert mine == pytest.approx(sent, abs=1e-9)
    scaled = agreement.loadgen.arrival_offsets(rate, n / rate, seed, "scaled")
    assert len(scaled) == n and scaled[-1] == pytest.approx(mine[-1]) and scaled[:5] != pytest.approx(mine[:5])
    with pytest.raises(ValueError, match="must be positive"):
        agreement.reference_offsets(rate, 0, seed)


def test_the_prompt_lengths_the_server_saw_are_kept_and_a_mismatch_is_said():
    """Each client's prompt length as the served tokenizer counts it (the reference's from its own result, the
    project's from what it sent); a rate where they differ by more than 1 % gets a line saying its TTFT ratio compares
    two prefills — what would have flagged 2026-12-06f's ~30-token text prompts against the reference's 512."""
    base = {"request_throughput": 2.0, "output_throughput": 64.0, "mean_ttft_ms": 30.0, "mean_tpot_ms": 3.0,
            "completed": 60, "duration": 30.0, "mean_e2el_ms": 120.0, "itls": []}
    assert agreement.reference_metrics({**base, "total_input_tokens": 60 * 512})["mean_prompt_tokens"] == 512
    assert agreement.reference_metrics(base)["mean_prompt_tokens"] is None  # an older result without the count

    tok = Tokenizer.from_file(str(agreement.TOKENIZER_DIR / "tokenizer.json"))
    gpu = agreement.cell_spec(2.0, 512, 256, 5.0, 20.0, 5.0, 0, 64, REPO / "config" / "h200-openloop-matched.yaml",
                              "qwen3b")
    pool = [list(p) for p in corpora.load_pool(gpu).token_ids]
    engine = VllmServerEngine(gpu, url="http://127.0.0.1:9")  # never started
    text, ids = (agreement.RequestForm(engine, text=t, ids_back=not t) for t in (True, False))
    for p in pool[:3] + pool[:1]:
        text.stream_request(p, 256)
        ids.stream_request(p, 256)
    assert ids.sent_prompt_tokens == [512] * 4
    assert text.sent_prompt_tokens == [_reencoded(tok, agreement.text_prompt(tok, p)[0]) for p in pool[:3] + pool[:1]]

    run = {"req_tput": 2.0, "tok_tput": 64.0, "ttft_mean": 0.03, "tpot_mean": 0.003, "ttft_p99": 0.05,
           "tpot_p99": 0.004, "rec_req_tput": 2.0, "rec_tok_tput": 64.0, "failed": 0}
    ref = {**run, "n": 60, "e2e_mean": 1.0, "mean_prompt_tokens": 512.0}
    same = agreement._row(2.0, "PR", [{**run, "mean_prompt_tokens": 512.0}], [ref])
    short = agreement._row(8.0, "PR", [{**run, "mean_prompt_tokens": 30.2}], [ref])
    assert same["prompt_tokens"] == 1.0 and short["prompt_tokens"] == pytest.approx(30.2 / 512)
    warnings = agreement.prompt_length_warnings([same, short])
    assert warnings == ["rate 8/s: prompts differ, project 30.2 against reference 512.0 tokens (0.059): its TTFT "
                        "ratio compares two prefills, not two clients"]
    inside, outside = (agreement._row(2.0, "PR", [{**run, "mean_prompt_tokens": 512.0 * f}], [ref]) for f in (1.009, 1.011))
    assert agreement.prompt_length_warnings([inside]) == [] and len(agreement.prompt_length_warnings([outside])) == 1
