"""An engine as an HTTP server subprocess on 127.0.0.1, in its own process group (ADR 0010, 0016).

Both server adapters (``vllm serve``, ``sglang.launch_server``) run this way for open loop: launch on a free
port, wait for ``/health`` with death detection, stream requests from a thread pool while sampling the running
gauge, and tear the whole process group down. What differs per engine — the command line, the readiness of its
processes, the request body and how a streamed chunk counts tokens, the counters — is in the subclasses;
the lifecycle and the batch loop are here, once (the offline twin is ``worker.WorkerProcessEngine``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any

from specjoule.cellspec import CellSpec
from specjoule.engines import proc
from specjoule.engines.base import (
    BURST_GAP_S,
    BatchResult,
    CounterSnapshot,
    Engine,
    EngineError,
    EngineHung,
    RequestResult,
    TimedSnapshot,
    sample_running,
)

log = logging.getLogger("specjoule.engine")

TEARDOWN_GRACE_S = 10.0


class StreamTally:
    """What one streamed response says, object by object — the engine-specific part of reading a stream.

    ``feed`` returns the tokens an object carried (0 for a usage-only or keep-alive object); ``output_tokens``
    the final count (the engine's own when it sent one); ``close`` runs once the stream ended normally."""

    finish_reason: str | None = None

    def feed(self, obj: dict) -> int:
        raise NotImplementedError

    def output_tokens(self, counted: int) -> int:
        return counted

    def close(self) -> None:
        pass


class StreamTimer:
    """Client-side times of one streamed request (ADR 0013, 0110): TTFT from the send to the first object that
    carried tokens, TPOT = (last − first) / (tokens − 1), and the gaps between token-bearing objects shorter than
    BURST_GAP_S — read back to back from a buffer, which is how a starved client's per-token times collapse.
    The definitions are ``vllm bench serve``'s (its latency ends at the last object with choices, too)."""

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.first: float | None = None
        self.last: float | None = None
        self.tokens = 0
        self.chunks = 0
        self.bursts = 0

    def tokens_at(self, k: int, now: float) -> None:
        if k <= 0:
            return
        if self.first is None:
            self.first = now
        elif now - self.last < BURST_GAP_S:  # type: ignore[operator]
            self.bursts += 1
        self.last = now
        self.tokens += k
        self.chunks += 1

    def result(self, prompt_len: int, output_len: int, tally: StreamTally, error: str | None = None) -> RequestResult:
        n = tally.output_tokens(self.tokens) if error is None else self.tokens
        reason = tally.finish_reason
        if error is not None:
            return RequestResult(
                prompt_len, n, reason, False, error=error, token_chunks=self.chunks, burst_gaps=self.bursts
            )
        ttft = (self.first - self.sent) if self.first is not None else None
        tpot = (self.last - self.first) / (n - 1) if (self.first is not None and n > 1) else None  # type: ignore[operator]
        ok = reason in ("length", "stop") and n == output_len
        return RequestResult(
            prompt_len,
            n,
            reason,
            ok,
            ttft_s=ttft,
            tpot_s=tpot,
            error=None if ok else f"finish_reason={reason}, {n} tokens, expected {output_len}",
            token_chunks=self.chunks,
            burst_gaps=self.bursts,
        )


class ServerProcessEngine(Engine):
    """``command`` replaces the server command line (templated with {host} and {port}) — for fault
    injectors; ``url`` attaches to a running shared server instead of launching one."""

    kind = "server"
    label = "engine"  # "vLLM", "SGLang": how errors and log lines name it
    group_watch: type[proc.GroupWatch] = proc.GroupWatch

    def __init__(
        self,
        spec: CellSpec | Mapping[str, Any],
        log_file: str | os.PathLike | None = None,
        ready_timeout_s: float = 900.0,
        command: list[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        url: str | None = None,
    ) -> None:
        self.spec = CellSpec.of(spec)
        self.log_file = str(log_file) if log_file else None
        self.ready_timeout_s = ready_timeout_s
        self.command = command
        self.host = host
        self.port = port
        self.url = url  # an already-running shared engine: attach, do not launch
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self._info: dict[str, Any] = {}
        self.watch: proc.GroupWatch | None = None

    # lifecycle
    def _bind(self) -> None:
        self.port = self.port or proc.free_port(self.host)
        self.url = f"http://{self.host}:{self.port}"

    def _given_command(self) -> list[str] | None:
        """The ``command`` override, templated with this engine's host and port (None: build the engine's own)."""
        return [c.format(host=self.host, port=self.port) for c in self.command] if self.command else None

    def _launch(self, cmd: list[str], env: dict[str, str], t0: float) -> None:
        """Start the server in its own process group and wait until it answers /health."""
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                cmd,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=os.getcwd(),
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        self.pgid = self.proc.pid
        log.info(
            "engine: %s server pid %d (own process group) at %s: %s", self.label, self.proc.pid, self.url, " ".join(cmd)
        )
        self._wait_ready(t0)

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.ready_timeout_s
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise EngineError(
                    f"{self.label} server exited with code {self.proc.returncode} before it was ready; "
                    f"last log lines:\n{proc.tail(self.log_file)}"
                )
            try:
                # SGLang's /health answers 503 while its status is Starting (http_server.py, 0.5.17)
                with urllib.request.urlopen(self.url + "/health", timeout=2.0) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                raise EngineError(
                    f"{self.label} server at {self.url} did not answer /health within "
                    f"{self.ready_timeout_s:.0f} s (engine_ready_timeout_s); last log lines:\n"
                    f"{proc.tail(self.log_file)}"
                )
            time.sleep(0.5)

    def _watch(self) -> None:
        if self.pgid is not None:
            self.watch = self.group_watch(self.pgid)

    def stop(self) -> None:
        if self.proc is None:
            return
        proc.end_group(self.proc, self.pgid, TEARDOWN_GRACE_S, "server ")
        self.proc = None

    def kill_now(self) -> None:
        if self.pgid is not None and self.proc is not None:
            proc.kill_group(self.pgid, grace_s=2.0)

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    @property
    def latency_source(self) -> str:
        return "client_stream"

    # requests
    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise EngineError(
                f"{self.label} server exited with code {self.proc.returncode}; last log lines:\n"
                f"{proc.tail(self.log_file)}"
            )
        dead = self.watch.dead() if self.watch is not None else []
        if dead:
            raise EngineError(
                f"{self.label} server process died: {', '.join(dead)}; last log lines:\n{proc.tail(self.log_file)}"
            )

    # counters
    def metrics_text(self) -> str:
        """The server's ``/metrics`` page (Prometheus text)."""
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=30.0) as r:
                return r.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            self._check_alive()
            raise EngineError(f"{self.label} server {self.url}/metrics did not answer: {exc}") from exc

    def parse_metrics(self, text: str, lean: bool = False) -> CounterSnapshot:
        """``lean``: only what a loop window needs (the counters of a record, the running and waiting gauges) —
        an adapter may then skip the rest, histograms above all, to keep the client's share of the CPU small."""
        raise NotImplementedError

    def snapshot(self) -> CounterSnapshot:
        return self.parse_metrics(self.metrics_text())

    def timed_snapshot(self, lean: bool = False) -> TimedSnapshot:
        """A snapshot with the interval in which the server rendered it: from sending the request to receiving
        the page (parsing, which is ours, comes after), ADR 0110."""
        sent = time.monotonic()
        text = self.metrics_text()
        received = time.monotonic()
        return TimedSnapshot(sent, received, self.parse_metrics(text, lean))

    def stream_request(self, prompt: list[int], output_len: int) -> tuple[str, dict]:
        """(path, JSON body) of one streamed, greedy, EOS-ignoring request for exactly ``output_len`` tokens."""
        raise NotImplementedError

    def new_tally(self) -> StreamTally:
        raise NotImplementedError

    def complete(self, prompt: list[int], output_len: int, timeout_s: float) -> RequestResult:
        """One streamed request over a new connection (the closed-batch path); TTFT and TPOT measured here."""
        path, body = self.stream_request(prompt, output_len)
        tally = self.new_tally()
        timer = StreamTimer(time.monotonic())
        try:
            for obj in self._post_stream(path, body, timeout_s):
                timer.tokens_at(tally.feed(obj), time.monotonic())
        except Exception as exc:  # noqa: BLE001 - a failed request is data, not a crash
            return timer.result(len(prompt), output_len, tally, error=f"{type(exc).__name__}: {exc}")
        tally.close()
        return timer.result(len(prompt), output_len, tally)

    def _post_stream(self, path: str, body: dict, timeout_s: float) -> Iterator[dict]:
        """POST ``body`` to ``path`` and yield each server-sent ``data:`` object until ``[DONE]``; raise
        TimeoutError once the request has run ``timeout_s``."""
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        deadline = time.monotonic() + timeout_s
        with urllib.request.urlopen(req, timeout=min(timeout_s, 120.0)) as resp:
            for raw in resp:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"request exceeded {timeout_s:.0f} s")
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                yield json.loads(data)

    def generate_batch(self, prompts: list[list[int]], output_len: int, timeout_s: float) -> BatchResult:
        self._check_alive()
        samples: list[float] = []
        stop = threading.Event()

        def running() -> float | None:
            # both servers' snapshots name it so (SGLang's num_running_reqs is mapped to it)
            return self.snapshot().gauges.get("num_requests_running")

        th = threading.Thread(target=sample_running, args=(stop, running, samples), daemon=True)
        t0 = time.monotonic()
        th.start()
        pool = ThreadPoolExecutor(max_workers=len(prompts), thread_name_prefix="batch")
        try:
            futures = [pool.submit(self.complete, p, output_len, timeout_s) for p in prompts]
            deadline = t0 + timeout_s
            # Watch the engine while waiting: a dead server must fail the cell now, not at the timeout.
            while not all(f.done() for f in futures):
                futures_wait(futures, timeout=0.5)
                self._check_alive()
                if time.monotonic() > deadline:
                    raise EngineHung(
                        f"{self.label} server: batch of {len(prompts)} did not finish within {timeout_s:.0f} s"
                    )
            results = [f.result() for f in futures]
        finally:
            stop.set()
            th.join()
            pool.shutdown(wait=False, cancel_futures=True)
        t1 = time.monotonic()
        self._check_alive()
        return BatchResult(results, t0, t1, samples)
