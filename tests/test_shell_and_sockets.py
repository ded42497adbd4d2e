"""Issue 21 items 3 and 5, on one real server cell run by Snakemake (one vLLM engine start on CPU, ≈ 1-2 min).

Item 3, no shell from config values: config *names* reach a shell only through record paths and are limited to
shell-safe characters at parse time (tests/test_config_parse.py); model *paths* never reach a shell. Here a
model directory whose path holds a space, a quote, ``;``, ``$(...)`` and backticks is planned and measured for
real through the pipeline's own rules (resolve_models, run_cell) and `vllm serve`: the cell's record is written
for that path, and no command hidden in it ran.

Item 5, servers stay private: while that server cell measures, every socket listening in the engine's process
group is bound to 127.0.0.1, on a port from the kernel's ephemeral range.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from specjoule import config

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
# One directory name holding every shell metacharacter that matters; each command would leave a file behind.
WEIRD = "it's a dir;touch PWNED_SEMI;$(touch PWNED_SUBST)`touch PWNED_TICK`"
MARKERS = ("PWNED_SEMI", "PWNED_SUBST", "PWNED_TICK")


def listening_sockets(pids: list[int]) -> list[tuple[str, str, int, int]]:
    """(protocol, address, port, pid) of every TCP socket in LISTEN and every bound UDP socket owned by ``pids``."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owner[target[8:-1]] = pid
        except OSError:
            continue
    out = []
    for proto, listen_state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        try:
            lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, state, inode = f[1], f[3], f[9]
            if state != listen_state or inode not in owner:
                continue
            addr_hex, port_hex = local.split(":")
            out.append((proto, _address(addr_hex), int(port_hex, 16), owner[inode]))
    return out


def _address(hex_addr: str) -> str:
    import ipaddress

    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]  # /proc prints IPv6 as four little-endian words
    return str(ipaddress.IPv6Address(b"".join(words)))


def group_pids(pgid: int) -> list[int]:
    from specjoule.engines import proc

    return proc.group_members(pgid)


@pytest.fixture(scope="module")
def server_cell_run(tmp_path_factory):
    """The demo pair under a weird path, one open-loop (server) baseline cell run through Snakemake, with the
    engine's listening sockets sampled while its window is open."""
    work = tmp_path_factory.mktemp("weird")
    models = work / WEIRD
    for name in ("tiny-target", "tiny-draft"):
        shutil.copytree(REPO / "config" / "models" / name, models / name)
    raw = config.read_yaml(REPO / "config" / "config.yaml")
    raw["models"] = {"tiny": {"target": {"model": str(models / "tiny-target"), "load_format": "dummy",
                                         "dtype": "bfloat16"}, "max_model_len": 512}}
    raw["schemes"] = {"baseline": {"method": "baseline"}}
    raw["workloads"] = {"ol": {"kind": "open_loop", "rate": 2.0, "prompt_len": 32, "output_len": 16, "warmup_s": 0,
                               "window_s": 6, "cooldown_s": 0}}
    (work / "grid.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    cfg, table = config.plan(raw)
    cell = next(c for c in table if c.role == "opening_baseline")
    log = work / cell.log_path
    seen: dict = {"sockets": [], "ephemeral": tuple(int(x) for x in
                                                    Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())}

    def watch(p: subprocess.Popen) -> None:
        deadline = time.monotonic() + 600
        while p.poll() is None and time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if "window: start" in text and "window: end" not in text:
                m = re.findall(r"server pid (\d+) \(own process group\) at (http://[^/\s]+:\d+)", text)
                if m:
                    seen["pgid"], seen["url"] = int(m[-1][0]), m[-1][1]
                    seen["sockets"].extend(listening_sockets(group_pids(seen["pgid"])))
                    seen["members"] = group_pids(seen["pgid"])
            time.sleep(0.5)

    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "1", "--resources", "gpu=1",
           "--configfile", "grid.yaml", "-p", cell.record_path]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    th = threading.Thread(target=watch, args=(p,), daemon=True)
    th.start()
    out, _ = p.communicate(timeout=900)
    th.join(timeout=5)
    print(f"\n[shell+sockets] one server cell through Snakemake: {time.monotonic() - t0:.0f} s, rc={p.returncode}")
    return {"work": work, "cell": cell, "rc": p.returncode, "out": out, "seen": seen, "models": models}


@pytest.mark.engine
@pytest.mark.engine_reader
def test_model_path_with_shell_metacharacters_runs_and_runs_nothing_else(server_cell_run):
    from specjoule import records

    run = server_cell_run
    assert run["rc"] == 0, run["out"][-5000:]
    row = records.read_records([run["work"] / run["cell"].record_path]).to_pylist()[0]
    assert row["target_model"] == str(run["models"] / "tiny-target")
    assert row["committed_tokens"] > 0
    # The shell commands Snakemake ran (printed by -p) hold the record path, never the model path.
    commands = [line for line in run["out"].splitlines() if "-m specjoule." in line]
    assert any("specjoule.runner" in c for c in commands) and any("specjoule.resolve_models" in c for c in commands)
    assert not any(WEIRD in c or "PWNED" in c for c in commands), commands
    for root in (run["work"], run["models"], REPO, Path.cwd()):
        for marker in MARKERS:
            assert not (root / marker).exists(), f"{root / marker}: a command hidden in the model path ran"


@pytest.mark.engine
@pytest.mark.engine_reader
def test_server_listens_only_on_loopback_on_an_ephemeral_port(server_cell_run):
    seen = server_cell_run["seen"]
    assert server_cell_run["rc"] == 0, server_cell_run["out"][-5000:]
    assert seen.get("members"), "the engine's process group was not seen while its window was open"
    assert seen["sockets"], "no listening socket seen in the engine's process group"
    lo, hi = seen["ephemeral"]
    public = sorted({s for s in seen["sockets"] if s[1] not in ("127.0.0.1", "::1")})
    assert not public, f"sockets listening beyond loopback: {public}"
    url_port = int(seen["url"].rsplit(":", 1)[1])
    assert seen["url"].startswith("http://127.0.0.1:") and lo <= url_port <= hi, seen["url"]
    assert any(s[2] == url_port and s[0] == "tcp" for s in seen["sockets"]), seen["sockets"]
    print(f"\n[sockets] listening in the engine's process group: {sorted(set(seen['sockets']))}")
    for proto, addr, port, pid in seen["sockets"]:
        assert lo <= port <= hi, f"{proto} {addr}:{port} (pid {pid}) is not an ephemeral port"
