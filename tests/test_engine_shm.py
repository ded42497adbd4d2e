"""A killed engine group leaves no POSIX shared memory behind (specjoule.engines.proc.kill_group).

Real parts: a Python process in its own session creates a multiprocessing shared-memory segment, which starts
multiprocessing's resource tracker in the same process group, exactly as vLLM's EngineCore does. The fault injected
is a hang: the process ignores SIGTERM (named so below), so the group dies by SIGKILL and the tracker, which would
have unlinked the segment, dies with it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest

from specjoule.engines import proc

HANGS_ON_SIGTERM = r"""
import signal, sys, time
from multiprocessing import shared_memory
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the injected fault: a hung engine that does not end on SIGTERM
seg = shared_memory.SharedMemory(create=True, size=1 << 20)
print(seg.name, flush=True)
time.sleep(120)
"""

ENDS_ON_SIGTERM = HANGS_ON_SIGTERM.replace("signal.signal(signal.SIGTERM, signal.SIG_IGN)", "pass")


@contextlib.contextmanager
def _group(code: str):
    """A process group running ``code``; yields (leader, segment path), and leaves neither behind."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    path = ""
    try:
        name = child.stdout.readline().strip()
        assert name, "the child printed no segment name"
        path = "/dev/shm/" + name.lstrip("/")
        deadline = time.monotonic() + 10
        while len(proc.group_members(child.pid)) < 2 and time.monotonic() < deadline:  # the tracker joined the group
            time.sleep(0.05)
        yield child, path
    finally:
        proc.kill_group(child.pid, grace_s=0.1)
        child.wait()
        if path and os.path.exists(path):
            os.unlink(path)


pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")


def test_a_group_killed_by_sigkill_leaves_no_shared_memory():
    with _group(HANGS_ON_SIGTERM) as (child, path):
        assert os.path.exists(path)
        assert path in proc.shm_segments(proc.group_members(child.pid))
        assert proc.kill_group(child.pid, grace_s=0.5) == []
        assert not os.path.exists(path), "the SIGKILLed group's segment is still in /dev/shm"


def test_a_segment_another_process_still_holds_is_kept():
    holds = "import mmap, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR)\nm = mmap.mmap(fd, 0)\nprint(1, flush=True)\ntime.sleep(60)"
    with _group(HANGS_ON_SIGTERM) as (child, path):
        holder = subprocess.Popen([sys.executable, "-c", holds, path], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "1"
            assert proc.kill_group(child.pid, grace_s=0.5) == []
            assert os.path.exists(path), "a segment another process maps was removed"
        finally:
            holder.kill()
            holder.wait()


def test_a_group_that_ends_on_sigterm_is_cleaned_by_its_own_tracker():
    """The polite path is unchanged: the tracker outlives SIGTERM and unlinks the segment itself."""
    with _group(ENDS_ON_SIGTERM) as (child, path):
        assert proc.kill_group(child.pid, grace_s=5.0) == []
        assert not os.path.exists(path)
