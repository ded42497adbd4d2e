"""A real single-node SLURM cluster for the tests (and for trying `profiles/slurm` by hand).

Debian's `slurm-wlm` and `munge` (installed by `scripts/install_system_deps.sh`), daemons started
here in the foreground so that their PIDs are ours, and stopped by those PIDs afterwards.
Nothing is mocked: jobs go through sbatch, slurmctld schedules them, slurmd/slurmstepd run them.

Facts this module is built on (Debian bookworm, slurm 22.05, inside a container):
- no cgroups: ``TaskPlugin=task/none`` and ``ProctrackType=proctrack/pgid``. A job step's processes
  are its task's process group: SIGTERM/SIGKILL reach everything the job started *except* what put
  itself in a group of its own (the vLLM engine does): stopping that is the cell's job, so the tests
  see it. (``proctrack/linuxproc`` follows parent links instead, and loses processes orphaned when
  the batch shell dies, e.g. Snakemake 9.27.1's job-side process after a deadlock in its SIGTERM
  handler);
- the config must sit at ``/etc/slurm/slurm.conf``: the slurm-jobstep executor strips every
  ``SLURM_*`` variable before its nested ``srun``, so a ``SLURM_CONF`` elsewhere breaks every job.
  An existing file is backed up and put back on teardown;
- no slurmdbd: ``sacct`` cannot answer, so the cluster keeps finished jobs visible to ``squeue``
  for ``MinJobAge`` seconds (≥ 3 × the executor's initial status delay; see ADR 0050);
- one GPU GRES whose device file is /dev/null (``gpu:fake:1``): the GPU request path of the profile
  (``--gpus``, ``--gpus=<model>:N``) is scheduled for real on a machine that has no GPU. Nothing
  inside a job can use it; it exists only so that sbatch accepts and slurmctld books GPU requests.

Use it as a pytest plugin (``pytest_plugins = ["slurm_cluster"]`` in a test module) for the
session fixture ``slurm_cluster``, or from a shell: ``python tests/slurm_cluster.py up|down|status``
(see ``scripts/slurm_local.sh``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SLURM_CONF = Path("/etc/slurm/slurm.conf")
GRES_CONF = Path("/etc/slurm/gres.conf")
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
# One cluster per machine: a second test session waits here instead of clobbering the first.
LOCK_PATH = Path("/tmp/specjoule-slurm.lock")
# `up` from the shell records what `down` must stop and restore.
STATE_FILE = Path("/tmp/specjoule-slurm.json")
BACKUP_SUFFIX = ".specjoule-backup"
# The first line of every file this module installs. A file that starts with it is never a machine's own: it is what a
# test cluster left when its process was killed before teardown, pointing at a slurmctld that is gone. Kept as "the
# original", it was restored by the next teardown, and every `scontrol` then waited for that controller: each
# Snakemake start too, whose SLURM executor plugin asks `scontrol show config` (about 10 s a start, 2026-12-06).
WRITTEN_MARK = "# Written by tests/slurm_cluster.py"
PARTITION = "debug"
# Finished jobs stay in squeue this long. The executor's squeue status check needs
# MinJobAge ≥ 3 × init-seconds-before-status-checks (40 s by default) or it falls back to sacct,
# which hangs here; 600 s also outlasts the executor's longest poll interval (180 s).
MIN_JOB_AGE_S = 600
# SIGTERM → SIGKILL grace on scancel / time limit. Real clusters use 30 s; the cell must be gone
# well inside it either way.
KILL_WAIT_S = 30
REQUIRED = ("munged", "munge", "unmunge", "slurmctld", "slurmd", "slurmstepd", "sbatch", "squeue",
            "scontrol", "scancel", "sinfo", "srun")


class SlurmSetupError(RuntimeError):
    """The cluster could not be brought up; the message says which step and shows the log tail."""


def _run(cmd: list[str], timeout: float = 30, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check, **kw)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no {path})"


def _written_by_a_test_cluster(path: Path) -> bool:
    try:
        with open(path) as fh:
            return fh.readline().startswith(WRITTEN_MARK)
    except (OSError, UnicodeDecodeError):
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line() -> dict[str, str]:
    """The hardware as slurmd sees it (`slurmd -C`), so the node never drains for a mismatch."""
    out = _run(["slurmd", "-C"]).stdout.splitlines()[0]
    return dict(item.split("=", 1) for item in out.split())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie we have not reaped still answers kill(0); read its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _stop_pid(pid: int, grace_s: float = 15) -> None:
    """SIGTERM, then SIGKILL after a grace period: one process, by its id."""
    if not _pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass  # not our child (started by `up` in another process): poll /proc instead
        if not _pid_alive(pid):
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class SlurmCluster:
    """One node (this machine), one partition (``debug``), munge auth, no accounting."""

    state_dir: Path
    reserve_mem_mb: int = 4096  # RealMemory = what slurmd sees minus this (OS, page cache, tests)
    hostname: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    # Unique per bring-up: every process a job of this cluster starts carries it in its environment.
    cluster_name: str = field(default_factory=lambda: f"specjoule{os.getpid():x}{int(time.time()) % 65536:x}")
    pids: dict[str, int] = field(default_factory=dict)
    started_munged: bool = False
    conf_backups: dict[str, str] = field(default_factory=dict)  # path -> backup path ("" = none existed)
    bringup_s: float | None = None
    ctld_port: int = 0  # free ports, chosen when the config is written
    slurmd_port: int = 0
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    # ---------------------------------------------------------------- checks
    @staticmethod
    def preflight() -> None:
        if os.geteuid() != 0:
            raise SlurmSetupError("the SLURM tests start slurmctld/slurmd/munged and write /etc/slurm/slurm.conf: "
                                  "run them as root (CI does)")
        missing = [b for b in REQUIRED if shutil.which(b) is None]
        if missing:
            raise SlurmSetupError(f"missing SLURM/munge binaries {missing}: run `bash scripts/install_system_deps.sh` "
                                  "(make test does)")

    # ---------------------------------------------------------------- bring-up
    def start(self, timeout_s: float = 120) -> SlurmCluster:
        t0 = time.monotonic()
        self.preflight()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_munge()
            self._write_conf()
            self._start_daemons()
            self._wait_node_idle(deadline=t0 + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.bringup_s = time.monotonic() - t0
        return self

    def _munge_works(self) -> bool:
        try:
            cred = _run(["munge", "-n"], timeout=10).stdout
            return _run(["unmunge"], input=cred, timeout=10, check=False).returncode == 0
        except (subprocess.SubprocessError, OSError):
            return False

    def _start_munge(self) -> None:
        if MUNGE_SOCKET.exists() and self._munge_works():
            return  # a munged is already serving this machine: use it, and leave it running
        if not MUNGE_KEY.exists():
            MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
            _run(["mungekey", "--create", "--keyfile", str(MUNGE_KEY)])
            shutil.chown(MUNGE_KEY, "munge", "munge")
            MUNGE_KEY.chmod(0o400)
        for d in (MUNGE_SOCKET.parent, Path("/var/log/munge"), Path("/var/lib/munge")):
            d.mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        MUNGE_SOCKET.parent.chmod(0o755)
        log = open(self.state_dir / "munged.out", "w")
        # Foreground, so the PID we hold is munged itself; munge's own user, as on a real node.
        proc = subprocess.Popen(["munged", "--foreground", "--force"], user="munge", group="munge",
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._procs["munged"] = proc
        self.pids["munged"] = proc.pid
        self.started_munged = True
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SlurmSetupError(f"munged exited with {proc.returncode}:\n{_tail(self.state_dir / 'munged.out')}")
            if MUNGE_SOCKET.exists() and self._munge_works():
                return
            time.sleep(0.2)
        raise SlurmSetupError(f"munged did not answer within 20 s:\n{_tail(self.state_dir / 'munged.out')}")

    def conf_text(self) -> str:
        node = _node_line()
        real_mb = int(node["RealMemory"])
        mem_mb = max(1024, real_mb - self.reserve_mem_mb)
        hw = " ".join(f"{k}={node[k]}" for k in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
                      if k in node)
        s = self.state_dir
        return f"""\
{WRITTEN_MARK}: a single-node test cluster. Restored/removed on teardown.
ClusterName={self.cluster_name}
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={s}/ctld
SlurmdSpoolDir={s}/slurmd
SlurmctldPidFile={s}/slurmctld.pid
SlurmdPidFile={s}/slurmd.pid
SlurmctldLogFile={s}/slurmctld.log
SlurmdLogFile={s}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in this container: a step is its task's process group.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge={MIN_JOB_AGE_S}
KillWait={KILL_WAIT_S}
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=60
# No slurmdbd: status comes from squeue (see MinJobAge).
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
NodeName={self.hostname} NodeAddr=127.0.0.1 {hw} RealMemory={mem_mb} Gres=gpu:fake:1 State=UNKNOWN
PartitionName={PARTITION} Nodes={self.hostname} Default=YES MaxTime=INFINITE State=UP
"""

    def _install(self, path: Path, text: str) -> None:
        """Write one config file, keeping what teardown must put back: the machine's own file (backed up), else
        nothing (removed). A killed test cluster's leftover (WRITTEN_MARK) is not the machine's: teardown removes it,
        or restores the backup that cluster made of the machine's own file."""
        if str(path) not in self.conf_backups:
            backup = path.with_name(path.name + BACKUP_SUFFIX)
            if path.exists() and not _written_by_a_test_cluster(path):
                shutil.copy2(path, backup)
                self.conf_backups[str(path)] = str(backup)
            elif backup.exists() and not _written_by_a_test_cluster(backup):
                self.conf_backups[str(path)] = str(backup)
            else:
                self.conf_backups[str(path)] = ""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def _write_conf(self) -> None:
        self.ctld_port, self.slurmd_port = _free_port(), _free_port()
        (self.state_dir / "ctld").mkdir(exist_ok=True)
        (self.state_dir / "slurmd").mkdir(exist_ok=True)
        self._install(SLURM_CONF, self.conf_text())
        # slurmd counts a GPU GRES only with a File; /dev/null books the request and binds
        # nothing (task/none: no device cgroup).
        self._install(GRES_CONF, f"{WRITTEN_MARK}: the test cluster's fake GPU.\n"
                                 f"NodeName={self.hostname} Name=gpu Type=fake File=/dev/null\n")

    def _start_daemons(self) -> None:
        for name, cmd in (("slurmctld", ["slurmctld", "-D", "-i"]), ("slurmd", ["slurmd", "-D"])):
            out = open(self.state_dir / f"{name}.out", "w")
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            self._procs[name] = proc
            self.pids[name] = proc.pid
            if name == "slurmctld":
                self._wait(lambda: _run(["scontrol", "ping"], check=False, timeout=10).stdout.count("UP") > 0,
                           30, "slurmctld did not answer `scontrol ping`", "slurmctld")

    def _wait(self, ok, timeout_s: float, what: str, daemon: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc = self._procs.get(daemon)
            if proc is not None and proc.poll() is not None:
                raise SlurmSetupError(f"{daemon} exited with {proc.returncode}:\n{self.logs(daemon)}")
            if ok():
                return
            time.sleep(0.5)
        raise SlurmSetupError(f"{what} within {timeout_s:.0f} s:\n{self.logs(daemon)}")

    def node_state(self) -> str:
        r = _run(["sinfo", "-h", "-N", "-n", self.hostname, "-o", "%T"], check=False, timeout=10)
        return r.stdout.strip().lower()

    def _wait_node_idle(self, deadline: float) -> None:
        def idle() -> bool:
            state = self.node_state()
            if state.startswith(("down", "drain")):
                # ReturnToService=2 revives a node that registers validly; a leftover reason does not.
                _run(["scontrol", "update", f"nodename={self.hostname}", "state=resume"], check=False)
            return state == "idle"

        self._wait(idle, max(5.0, deadline - time.monotonic()), f"node {self.hostname} did not become idle", "slurmd")

    # ---------------------------------------------------------------- use
    def logs(self, daemon: str = "slurmctld", n: int = 30) -> str:
        return (f"--- {daemon}.log ---\n{_tail(self.state_dir / f'{daemon}.log', n)}\n"
                f"--- {daemon}.out ---\n{_tail(self.state_dir / f'{daemon}.out', n)}")

    def jobs(self) -> dict[str, str]:
        """job id -> state for every job slurmctld still knows (finished ones for MinJobAge)."""
        r = _run(["squeue", "-h", "--states=all", "-o", "%i|%T"], timeout=15)
        return dict(line.split("|", 1) for line in r.stdout.split())

    def job_info(self, job_id: str) -> dict[str, str]:
        r = _run(["scontrol", "show", "job", "-o", str(job_id)], timeout=15)
        return dict(m.groups() for m in re.finditer(r"(\w[\w:/]*)=(\S*)", r.stdout))

    def cancel_all(self, timeout_s: float = 60) -> None:
        """Cancel every job of this (test-only) cluster and wait until none is left running."""
        active = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
        try:
            live = [j for j, s in self.jobs().items() if s in active]
        except (subprocess.SubprocessError, OSError):
            return
        if live:
            _run(["scancel", *live], check=False)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if not any(s in active for s in self.jobs().values()):
                    return
            except (subprocess.SubprocessError, OSError):
                return
            time.sleep(1)

    def job_processes(self) -> list[int]:
        """PIDs of live processes started by jobs of this cluster (SLURM_CLUSTER_NAME in their env)."""
        marker = f"SLURM_CLUSTER_NAME={self.cluster_name}".encode()
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                if marker in (d / "environ").read_bytes().split(b"\0") and _pid_alive(int(d.name)):
                    found.append(int(d.name))
            except OSError:
                continue
        return found

    def wait_no_job_processes(self, timeout_s: float = KILL_WAIT_S + 15) -> list[int]:
        """Wait until no process of a (finished) job is left; return what is still there."""
        deadline = time.monotonic() + timeout_s
        while (left := self.job_processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    # ---------------------------------------------------------------- teardown
    def stop(self) -> None:
        if self.pids.get("slurmctld") and _pid_alive(self.pids["slurmctld"]):
            self.cancel_all()
        # Whatever a job left behind once its job is over (SLURM normally kills it): stop each by
        # its PID, and say so.
        strays = self.job_processes()
        if strays:
            print(f"[slurm] stopping {len(strays)} process(es) left by finished jobs: {strays}", file=sys.stderr)
            for pid in strays:
                _stop_pid(pid, grace_s=5)
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is not None and (name != "munged" or self.started_munged):
                _stop_pid(pid)
            proc = self._procs.pop(name, None)
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for path, backup in list(self.conf_backups.items()):
            if backup:
                shutil.move(backup, path)
            else:
                Path(path).unlink(missing_ok=True)
            del self.conf_backups[path]

    # ---------------------------------------------------------------- shell use
    def to_json(self) -> str:
        return json.dumps({"state_dir": str(self.state_dir), "pids": self.pids, "started_munged": self.started_munged,
                           "conf_backups": self.conf_backups, "hostname": self.hostname,
                           "cluster_name": self.cluster_name})

    @classmethod
    def from_json(cls, text: str) -> SlurmCluster:
        d = json.loads(text)
        return cls(state_dir=Path(d["state_dir"]), pids=d["pids"], started_munged=d["started_munged"],
                   conf_backups=d["conf_backups"], hostname=d["hostname"], cluster_name=d["cluster_name"])


# -------------------------------------------------------------------- running Snakemake on it
REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "slurm"
CI_OVERLAY = REPO / "tests" / "data" / "slurm_ci.yaml"
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def ci_overlay(cpu: bool = False) -> tuple[dict[str, str], list[str]]:
    """(environment, extra CLI args) that adapt the shipped profile to the test cluster."""
    import yaml

    overlay = yaml.safe_load(CI_OVERLAY.read_text())
    env, args = dict(overlay["env"]), list(overlay["args"])
    if cpu:
        env.update(overlay["cpu"]["env"])
        args += overlay["cpu"]["args"]
    return env, args


@dataclass
class SnakemakeRun:
    returncode: int
    output: str
    wall_s: float
    timed_out: bool


def run_snakemake(args: list[str], cwd: Path, *, cpu: bool = False, timeout_s: float = 300,
                  env: dict[str, str] | None = None, on_start=None) -> SnakemakeRun:
    """`snakemake --profile profiles/slurm <CI overlay> <args>` in ``cwd``, bounded in time.

    On timeout Snakemake gets SIGTERM first (it then scancels its jobs), SIGKILL after 30 s.
    ``on_start(proc)`` runs right after launch (the scancel test watches the run from there).
    """
    overlay_env, overlay_args = ci_overlay(cpu)
    full_env = {**os.environ, **overlay_env, **(env or {})}
    for k in [k for k in full_env if k.startswith("SLURM_")]:
        del full_env[k]  # never inherit a job context
    cmd = [str(SNAKEMAKE), "--profile", str(PROFILE), *overlay_args, *args]
    log_path = Path(cwd) / "snakemake.out"
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        try:
            if on_start is not None:
                on_start(proc)
            proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop_pid(proc.pid, grace_s=30)
            proc.wait()
        except BaseException:
            _stop_pid(proc.pid, grace_s=30)
            proc.wait()
            raise
    return SnakemakeRun(proc.returncode, log_path.read_text(errors="replace"), time.monotonic() - t0, timed_out)


# -------------------------------------------------------------------- pytest plugin
try:
    import pytest
except ImportError:  # shell use without pytest
    pytest = None

if pytest is not None:

    @pytest.fixture(scope="session")
    def slurm_cluster(tmp_path_factory):
        """A running single-node cluster for the whole session, stopped by PID afterwards."""
        from filelock import FileLock, Timeout

        lock = FileLock(str(LOCK_PATH))
        try:
            # Another session on this machine holds the cluster: wait for it, bounded.
            lock.acquire(timeout=900)
        except Timeout:
            pytest.fail(f"another test session has held the single-node SLURM cluster ({LOCK_PATH}) for 15 min")
        if STATE_FILE.exists():
            lock.release()
            pytest.fail(f"a cluster started by `scripts/slurm_local.sh up` is running ({STATE_FILE}); "
                        "stop it with `scripts/slurm_local.sh down` first")
        cluster = SlurmCluster(state_dir=tmp_path_factory.mktemp("slurm"))
        try:
            try:
                cluster.start()
            except SlurmSetupError as exc:
                pytest.fail(f"SLURM bring-up failed: {exc}")
            print(f"\n[slurm] single-node cluster up in {cluster.bringup_s:.1f} s ({cluster.state_dir})")
            yield cluster
        finally:
            cluster.stop()
            lock.release()


# -------------------------------------------------------------------- shell
def _main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "status"
    if cmd == "up":
        if STATE_FILE.exists():
            print(f"already up ({STATE_FILE}); `down` first", file=sys.stderr)
            return 1
        try:
            from filelock import FileLock, Timeout

            with FileLock(str(LOCK_PATH), timeout=0):
                pass
        except ImportError:
            pass
        except Timeout:
            print(f"a test session holds the cluster ({LOCK_PATH}); try again when it ends", file=sys.stderr)
            return 1
        cluster = SlurmCluster(state_dir=Path(tempfile.mkdtemp(prefix="specjoule-slurm-")))
        try:
            cluster.start()
        except SlurmSetupError as exc:
            print(exc, file=sys.stderr)
            return 1
        # The daemons must outlive this process: forget the Popen objects, keep the PIDs.
        cluster._procs.clear()
        STATE_FILE.write_text(cluster.to_json())
        print(f"up in {cluster.bringup_s:.1f} s: node {cluster.hostname}, partition {PARTITION}, "
              f"logs in {cluster.state_dir}")
        return 0
    if cmd == "down":
        if not STATE_FILE.exists():
            print("not up (no state file)", file=sys.stderr)
            return 1
        SlurmCluster.from_json(STATE_FILE.read_text()).stop()
        STATE_FILE.unlink()
        print("down")
        return 0
    if cmd == "status":
        print(_run(["sinfo"], check=False).stdout or "no cluster answering")
        return 0
    print(f"usage: {argv[0]} up|down|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
