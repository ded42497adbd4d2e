"""Process-group handling for engines: every engine runs in a session of its own, so that one
``killpg`` reaches it and everything it spawned (vLLM's EngineCore and workers, resource trackers).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

log = logging.getLogger("specjoule.engine")


def _stat_after_comm(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, ...), or None when the process is gone.
    The name may hold spaces and parentheses: split after the last ')'."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        rest = _stat_after_comm(int(entry.name))
        if rest is not None and len(rest) >= 3 and rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(int(entry.name))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running and not a zombie (a killed child stays a zombie until its parent reaps it)."""
    rest = _stat_after_comm(pid)
    return rest is not None and rest[0] != "Z"


class GroupWatch:
    """The engine's essential processes, captured when it became ready.

    vLLM's offline front end does not notice when its EngineCore is killed (measured on 0.32: a
    generate() hung for > 120 s), so the cell watches the processes itself: the group leader and
    every process vLLM titled ``VLLM::…`` (EngineCore, workers). Helpers such as multiprocessing's
    resource tracker are not essential.
    """

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        members = group_members(pgid)
        self.essential = {
            pid: cmdline(pid)
            for pid in members
            if pid == pgid or "VLLM::" in cmdline(pid) or "EngineCore" in cmdline(pid)
        }

    def dead(self) -> list[str]:
        return [f"pid {pid} ({cmd or '?'})" for pid, cmd in self.essential.items() if not alive(pid)]


SHM_DIR = "/dev/shm/"


def shm_segments(pids: list[int] | None = None) -> set[str]:
    """POSIX shared-memory files (under /dev/shm) that ``pids`` — every process when None — hold open or mapped."""
    found: set[str] = set()
    if pids is None:
        pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    for pid in pids:
        base = f"/proc/{pid}"
        try:
            for fd in os.listdir(f"{base}/fd"):
                try:
                    target = os.readlink(f"{base}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith(SHM_DIR):
                    found.add(target.removesuffix(" (deleted)"))
        except OSError:
            pass
        try:
            with open(f"{base}/maps") as fh:
                for line in fh:
                    i = line.find(SHM_DIR)
                    if i >= 0:
                        found.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            pass
    return found


def remove_orphaned_segments(segments: set[str]) -> list[str]:
    """Unlink those of ``segments`` that still exist and that no live process holds. A group killed with SIGKILL
    takes multiprocessing's resource tracker with it, and the tracker is what would have unlinked them; left, each
    keeps its pages in /dev/shm (vLLM: two of 160 and 240 MiB per engine) until the node reboots."""
    left = {s for s in segments if os.path.exists(s)}
    if not left:
        return []
    held = shm_segments()
    removed = []
    for path in sorted(left - held):
        try:
            os.unlink(path)
            removed.append(path)
        except OSError as exc:
            log.warning("engine: could not remove shared-memory segment %s the engine left: %s", path, exc)
    if removed:
        log.info("engine: removed %d shared-memory segment(s) the killed group left: %s", len(removed), removed)
    return removed


# How long a SIGKILLed group may take to empty. SIGKILL cannot be caught, but a process still has to exit (unmap its
# memory, close its files) before /proc stops listing it: on 2026-12-05 a CPU vLLM EngineCore was still listed 5 s
# after SIGKILL on this 2-core host while another engine started beside it, and its cell reported a survivor that
# died moments later. The wait ends as soon as the group is empty, so only a slow exit pays for it.
KILL_WAIT_S = 20.0
SLOW_EXIT_S = 5.0  # an exit slower than this is logged with its time


def describe(pid: int) -> str:
    """``pid N (state S, wchan W): cmdline`` — what a survivor was doing, for the log."""
    rest = _stat_after_comm(pid)
    if rest is None:
        return f"pid {pid} (gone)"
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
    except OSError:
        wchan = "?"
    return f"pid {pid} (state {rest[0]}, wchan {wchan}): {cmdline(pid) or '?'}"


def kill_group(pgid: int, grace_s: float = 5.0) -> list[int]:
    """SIGTERM the group, wait up to ``grace_s``, SIGKILL what is left and wait up to ``KILL_WAIT_S`` for it to
    exit. Returns survivors (should be []).

    Shared-memory segments the group held are unlinked once it is gone, where no other process holds them."""
    segments = shm_segments(group_members(pgid))
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        sent = time.monotonic()
        while time.monotonic() < sent + wait_s:
            if not group_members(pgid):
                if sig == signal.SIGKILL and time.monotonic() - sent > SLOW_EXIT_S:
                    log.warning("engine: process group %d emptied %.1f s after SIGKILL", pgid, time.monotonic() - sent)
                remove_orphaned_segments(segments)
                return []
            time.sleep(0.1)
    survivors = group_members(pgid)
    if not survivors:
        remove_orphaned_segments(segments)
    return survivors


def end_group(leader: subprocess.Popen, pgid: int, grace_s: float, what: str = "") -> list[int]:
    """Kill what is left of an engine's process group, reap its leader, and log whether the group is empty.
    ``what`` names the engine in the log line ("server "). Returns the survivors (should be [])."""
    survivors = kill_group(pgid, grace_s=grace_s)
    try:
        leader.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if survivors:
        log.error(
            "engine: %sprocess group %d survived SIGKILL (%g s after it): %s",
            what,
            pgid,
            KILL_WAIT_S,
            "; ".join(describe(pid) for pid in survivors),
        )
    else:
        log.info("engine: %sstopped (process group %d empty)", what, pgid)
    return survivors


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the server binds it next; a race is retried by the caller)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Linux: ask the kernel to signal this process when its parent dies (best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except Exception:
        pass


def tail(path: str | os.PathLike | None, n: int = 30) -> str:
    if not path:
        return ""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])
