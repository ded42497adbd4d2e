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


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ... — comm may hold spaces and parentheses: split after the last ')'
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) >= 3 and rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(int(entry.name))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running and not a zombie (a killed child stays a zombie until its parent reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


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


def kill_group(pgid: int, grace_s: float = 5.0) -> list[int]:
    """SIGTERM the group, wait up to ``grace_s``, SIGKILL what is left. Returns survivors (should be [])."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not group_members(pgid):
                return []
            time.sleep(0.1)
    return group_members(pgid)


def end_group(leader: subprocess.Popen, pgid: int, grace_s: float, what: str = "") -> list[int]:
    """Kill what is left of an engine's process group, reap its leader, and log whether the group is empty.
    ``what`` names the engine in the log line ("server "). Returns the survivors (should be [])."""
    survivors = kill_group(pgid, grace_s=grace_s)
    try:
        leader.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if survivors:
        log.error("engine: %sprocess group %d survived SIGKILL: %s", what, pgid, survivors)
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
