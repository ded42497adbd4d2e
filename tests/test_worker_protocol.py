"""The worker side of the offline engines' pipe protocol (specjoule/engines/worker.py: serve,
report_start_failure), shared by the vLLM and SGLang workers. Driven over a real pipe with plain
handler functions: the engines behind it are exercised by the real-vLLM tests (test_runner_cpu,
test_engine_faults); here, what the loop does with replies, unknown commands, failures and stop."""

from __future__ import annotations

import threading
from multiprocessing import Pipe

from specjoule.engines import EngineUnsupported
from specjoule.engines.worker import report_start_failure, serve


def _serve_in_thread(handlers):
    cell_end, worker_end = Pipe()
    th = threading.Thread(target=serve, args=(worker_end, handlers), daemon=True)
    th.start()
    return cell_end, th


def test_serve_answers_reports_failures_keeps_serving_and_stops():
    calls = []

    def generate(prompts, n):
        calls.append((prompts, n))
        if n < 0:
            raise ValueError("negative length")
        return ("result", len(prompts) * n)

    conn, th = _serve_in_thread({"generate": generate, "snapshot": lambda: ("snapshot", len(calls))})
    conn.send(("generate", [[1, 2], [3]], 4))
    assert conn.recv() == ("result", 8)
    conn.send(("generate", [[1]], -1))
    kind, message, trace = conn.recv()
    assert kind == "error" and message == "ValueError: negative length" and "Traceback" in trace
    conn.send(("nonsense",))
    assert conn.recv() == ("error", "unknown command 'nonsense'", "")
    conn.send(("snapshot",))  # still serving after an error
    assert conn.recv() == ("snapshot", 2)
    conn.send(("stop",))
    th.join(5)
    assert not th.is_alive() and calls == [([[1, 2], [3]], 4), ([[1]], -1)]


def test_serve_returns_when_the_cell_process_goes_away():
    conn, th = _serve_in_thread({})
    conn.close()
    th.join(5)
    assert not th.is_alive()


def test_start_failure_says_unsupported_apart_from_a_crash():
    cell_end, worker_end = Pipe()
    assert report_start_failure(worker_end, "SGLang", EngineUnsupported("no NGRAM here"), "tb") == 2
    assert cell_end.recv() == ("error", "no NGRAM here", "unsupported")
    assert report_start_failure(worker_end, "vLLM", RuntimeError("CUDA out of memory"), "tb") == 1
    assert cell_end.recv() == ("error", "vLLM engine failed to start: RuntimeError: CUDA out of memory", "tb")
