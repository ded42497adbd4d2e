"""One "cell" of the SLURM mechanics workflow: record where and how it ran, like a real cell would.

Writes a JSON record atomically (temp file + rename) at the end, and nothing on failure. On
SIGTERM it writes a marker under signals/ (the scheduler's signal reached the cell process) and
exits 143 without a record, as the real runner must.
"""

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

out = Path(snakemake.output[0])  # noqa: F821 (injected by Snakemake's script directive)
campaign, cell = snakemake.wildcards.campaign, snakemake.wildcards.cell  # noqa: F821
signals = Path("signals") / campaign
signals.mkdir(parents=True, exist_ok=True)
started = time.time()


def write_marker(path: Path, obj: dict) -> None:
    """Atomically (temp file + rename): the test polls for the marker and reads it the moment it exists
    (a plain write was once read empty, in a CI-like run)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def on_sigterm(signum, frame):
    write_marker(signals / f"{cell}.sigterm", {"t": time.time(), "pid": os.getpid()})
    sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)

record = {
    "campaign": campaign,
    "cell": cell,
    "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
    "slurm_step_id": os.environ.get("SLURM_STEP_ID", ""),
    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "python": sys.executable,
    "hostname": socket.gethostname(),
    "pid": os.getpid(),
    # The time limit this attempt was given (2 min × attempt, see the Snakefile).
    "runtime_min": snakemake.resources.get("runtime"),  # noqa: F821
    "start": started,
}

record["attempt"] = record["runtime_min"] // 2
hold_s = float(snakemake.params.hold_s) if record["attempt"] == 1 else 0  # noqa: F821
if hold_s:
    # Announce that the cell is running (and in which job), then wait to be cancelled.
    write_marker(signals / f"{cell}.running", record)
    deadline = time.time() + hold_s
    while time.time() < deadline:
        time.sleep(0.1)

time.sleep(1.0)  # long enough that overlapping cells would show in the start/end times
if snakemake.params.fail:  # noqa: F821
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("partial")  # a failed cell leaves garbage behind; Snakemake must remove it
    sys.exit(f"cell {campaign}/{cell} forced to fail")

record["end"] = time.time()
out.parent.mkdir(parents=True, exist_ok=True)
tmp = out.with_suffix(".tmp")
tmp.write_text(json.dumps(record))
os.replace(tmp, out)
