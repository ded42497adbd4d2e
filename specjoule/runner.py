"""Run one cell: pin the GPU, meter idle, start the engine, run the workload, write one record.

Order matters (ADR 0014):
1. GPU lease — sets ``CUDA_VISIBLE_DEVICES`` before anything imports CUDA (this process never
   imports torch or vLLM; the engine runs in a child process group).
2. Meter open and idle power — before the engine exists, so idle is the GPU's, not the engine's.
3. Prompt pool (corpora.load_pool), engine start (timed: ``engine_start_s``).
4. Timeline sampling from engine ready; the workload marks the energy window and takes counter
   snapshots at its edges.
5. Only if everything succeeded: the timeline, then the record, each written atomically (the record
   last: its presence means success); then the engine's teardown (kill of its process group).
   A failed or cancelled cell writes neither. Several cells of one engine configuration can run on
   one engine start (``run_cells``, ADR 0015); each gets its own window and record.

SIGTERM / SIGINT (Snakemake, scancel): the first signal raises ``CellInterrupted`` in the main
thread; the engine's process group is killed at once, nothing is written, the process exits with
128 + signal. Later signals during teardown are ignored so that teardown itself is not cut short.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specjoule import cells, gpu, logtext, models, records, resolve_models, schemes, workloads
from specjoule import env as envmod
from specjoule.cellspec import CellSpec
from specjoule.engines import Engine, EngineHung, EngineUnsupported, compile_cache, make_engine
from specjoule.engines.base import latency_from_histograms, latency_from_requests
from specjoule.meter import Meter, MeterError, NoneMeter, make_meter

log = logging.getLogger("specjoule.runner")
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
LOG_DATEFMT = "%Y-%m-%dT%H:%M:%S"


class CellInterrupted(BaseException):
    """SIGTERM/SIGINT arrived: tear down, write nothing, exit 128 + signum.

    A BaseException so that no ``except Exception`` on the way swallows it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"cell interrupted by {signal.Signals(signum).name}")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn the first SIGTERM/SIGINT into CellInterrupted; ignore repeats while tearing down."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return
    fired: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if fired:
            log.warning("signal %s during teardown: ignored (teardown continues)", signal.Signals(signum).name)
            return
        fired.append(signum)
        log.warning("signal %s: cancelling the cell", signal.Signals(signum).name)
        raise CellInterrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def cell_log(log_path: str | os.PathLike | None) -> Iterator[None]:
    """Timestamped progress lines into the cell's log (stderr when there is none)."""
    root = logging.getLogger("specjoule")
    handler: logging.Handler
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_path, mode="a")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATEFMT))
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()


def load_prompts(spec: CellSpec) -> tuple[list[list[int]], str]:
    """The cell's prompt pool (token ids) and its content hash, from the corpus registry."""
    from specjoule import corpora

    pool = corpora.load_pool(spec.as_dict())
    return pool.token_ids, pool.content_hash


def acceptance_mechanism(spec: CellSpec) -> str:
    if spec.scheme.is_baseline:
        return "none"
    if spec.scheme.synthetic:
        return {"vllm": "vllm_synthetic_rates", "sglang": "sglang_simulate_acc_len"}[spec.engine.engine]
    return "model"


def _remove(*paths: str | os.PathLike) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


@dataclass
class CellJob:
    """One cell and where its outputs go."""

    cell: Any
    record_path: str | os.PathLike
    timeline_path: str | os.PathLike


class EngineStartUnsupported(Exception):
    """The engine refused the cells' configuration before it was ready (ADR 0063): nothing was measured,
    and the cells' records say ``unsupported`` with the engine's reason instead of failing the job."""

    def __init__(self, reason: str, engine_version: str | None = None) -> None:
        self.reason, self.engine_version = reason, engine_version
        super().__init__(reason)


class GpuInUse(RuntimeError):
    """``checks.gpu_in_use: refuse`` and another compute process holds the cell's GPU when the cell starts: no
    engine start, no record; the message lists the processes (ADR 0133)."""


# Where the runner keeps what must outlive a failed or preempted job (ADR 0134).
ATTEMPTS_DIR = "results/.specjoule/attempts"  # one marker per cell attempt that has not written its record yet
REQUEUE_DIR = "results/.specjoule/requeue"  # per SLURM job: links to the records it wrote, for its requeued run


def attempt_marker(cell) -> Path:
    return Path(ATTEMPTS_DIR) / cell.campaign_id / f"{cell.name}.{cell.cell_id}"


def mark_attempt(cell) -> None:
    """Note that this cell's measurement started (removed once its record is written)."""
    marker = attempt_marker(cell)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(
        json.dumps(
            {
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "host": envmod.capture()["hostname"],
                "started": time.time(),
            }
        )
    )


# Exception lines of a cell's log, in the order written. Engines wrap their root cause: vLLM's front end raises
# "Engine core initialization failed" after EngineCore's own traceback, and its model inspection re-raises a
# subprocess's error as CalledProcessError / RuntimeError; those wrappers are passed over when naming the cause.
_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception)): (.*)")
_WRAPPERS = ("CalledProcessError", "RuntimeError", "EngineError", "ValidationError", "WorkflowError")


def exception_lines(lines: Iterable[str], limit: int = 5, found: list[str] | None = None) -> list[str]:
    """The first ``limit`` distinct exception lines (``Type: message``, log prefixes dropped), after ``found``."""
    found = list(found or [])
    for line in lines:
        if len(found) >= limit:
            break
        hit = _EXCEPTION_LINE.search(line)
        text = hit and f"{hit.group(1)}: {hit.group(2).strip()}"[:500]
        if text and text not in found:
            found.append(text)
    return found


def logged_exceptions(log_path: str | os.PathLike | None, limit: int = 5) -> list[str]:
    """The first ``limit`` distinct exception lines a log names (``Type: message``, log prefixes dropped)."""
    if not log_path:
        return []
    try:
        with logtext.open_log(log_path) as fh:  # a committed log is gzipped (ADR 0212)
            return exception_lines(fh, limit)
    except OSError:
        return []


def root_cause(exceptions: list[str]) -> str | None:
    """The first exception that is not an engine's or Python's wrapper of another, else the first."""
    for text in exceptions:
        if text.split(":", 1)[0].rsplit(".", 1)[-1] not in _WRAPPERS:
            return text
    return exceptions[0] if exceptions else None


def note_failed_attempt(jobs, exc: BaseException, log_path: str | os.PathLike | None) -> None:
    """Say, in the attempt marker of each cell that started and wrote no record, why its attempt ended (ADR 0197):
    a failed cell writes no record, and this is how the coverage matrix tells "failed at start" from "not run"."""
    # The log first, then the error's own text: an offline worker that fails in its own process (not in vLLM's
    # engine-core subprocess, which logs) sends its traceback through the pipe, and the log has none of it yet
    # (2026-12-02d: Qwen3.6's image-processor OSError reached the marker only as the EngineError's text).
    exceptions = exception_lines(f"{type(exc).__name__}: {exc}".splitlines(), found=logged_exceptions(log_path))
    for job in jobs:
        marker = attempt_marker(job.cell)
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue  # this cell had not started
        data.update(
            failed_at=time.time(),
            error=f"{type(exc).__name__}: {exc}"[:2000],
            root_cause=root_cause(exceptions),
            logged_exceptions=exceptions,
        )
        try:
            with records.atomic_path(marker) as tmp:
                Path(tmp).write_text(json.dumps(data))
        except OSError as write_error:  # a full disk must not hide the failure being reported
            log.warning("cell %s: could not note the failure in %s: %s", job.cell.name, marker, write_error)


def slurm_restart_count() -> int | None:
    """How often SLURM has requeued the job this runs in: 0 first, null outside SLURM. From SLURM_RESTART_COUNT,
    else from ``scontrol show job`` (a job step may not carry the variable)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    given = os.environ.get("SLURM_RESTART_COUNT")
    if given is not None and given.strip().isdigit():
        return int(given)
    import subprocess

    try:
        out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    import re

    m = re.search(r"\bRestarts=(\d+)", out)
    return int(m[1]) if m else None


def _requeue_copy(job: CellJob, slurm_job: str) -> tuple[Path, Path]:
    base = Path(REQUEUE_DIR) / slurm_job / job.cell.campaign_id
    return base / f"{job.cell.name}.parquet", base / f"{job.cell.name}.timeline.parquet"


def _link_or_copy(src: str | os.PathLike, dst: Path) -> None:
    """``dst`` becomes ``src``'s content atomically (a hard link where the filesystem allows, else a copy)."""
    import shutil

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def keep_for_requeue(job: CellJob) -> None:
    """Under SLURM, keep a link to the cell's record where a requeued run of this job finds it: Snakemake removes
    a job's outputs before running it, and the requeued job runs every cell of its campaign again (ADR 0134)."""
    slurm_job = os.environ.get("SLURM_JOB_ID")
    if not slurm_job:
        return
    record, timeline = _requeue_copy(job, slurm_job)
    try:
        _link_or_copy(job.timeline_path, timeline)
        _link_or_copy(job.record_path, record)
    except OSError as exc:  # the record stands; only a requeue would measure it again
        log.warning("requeue: could not keep %s for a requeued run: %s", job.record_path, exc)


def current_device(device: str) -> dict[str, Any]:
    """Host and GPU UUIDs this job runs on (CUDA_VISIBLE_DEVICES resolved through NVML), as records name them."""
    out: dict[str, Any] = {
        "hostname": envmod.capture()["hostname"],
        "gpu_uuid": None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if device == "cuda":
        try:
            from specjoule.meter.nvml import list_devices, resolve_visible

            uuids = [d.uuid for d in resolve_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), list_devices())]
            out["gpu_uuid"] = ",".join(uuids) or None
        except Exception as exc:  # noqa: BLE001 - without UUIDs the device cannot be shown to be the same
            log.info("requeue: GPU UUIDs unavailable (%s)", exc)
            out["gpu_uuid"] = "unknown"
    return out


def restorable(job: CellJob, here: dict[str, Any], config_hash: str | None, version_param: Any) -> Path | None:
    """The record this job wrote for the cell before SLURM requeued it, if it may stand: same cell id, config and
    version, measured on this very device (host and GPU UUIDs; a campaign is compared on one GPU). Else None."""
    slurm_job = os.environ.get("SLURM_JOB_ID")
    restarts = slurm_restart_count()
    if not slurm_job or not restarts:
        return None
    record, timeline = _requeue_copy(job, slurm_job)
    if not (record.is_file() and timeline.is_file()):
        return None
    try:
        row = records.read_records([record]).to_pylist()[0]
    except Exception as exc:  # noqa: BLE001 - unreadable: measure again
        log.warning("requeue: %s unreadable (%s): measuring again", record, exc)
        return None
    same_cell = (
        row.get("cell_id") == job.cell.cell_id
        and row.get("config_hash") == config_hash
        and str(row.get("version_param")) == str(version_param)
    )
    device_keys = ("hostname", "gpu_uuid") if here["gpu_uuid"] else ("hostname", "cuda_visible_devices")
    same_device = all(row.get(k) == here[k] for k in device_keys)
    if not (same_cell and same_device):
        log.warning(
            "requeue: %s/%s was measured before the requeue on %s, this run is on %s%s: measuring again",
            job.cell.campaign_id,
            job.cell.name,
            {k: row.get(k) for k in device_keys},
            {k: here[k] for k in device_keys},
            "" if same_cell else " (and the cell, config or version differ)",
        )
        return None
    return record


def unsupported_row(cell, reason: str, engine_version: str | None = None) -> dict[str, Any]:
    """The record of a cell the engine cannot run: identity and environment, the reason, nothing measured."""
    row: dict[str, Any] = dict(cell.identity())
    row.update(envmod.capture(cell.engine))
    if engine_version:
        row["engine_version"] = engine_version
    row["acceptance_mechanism"] = acceptance_mechanism(cell.setup)
    row.update(status=records.STATUS_UNSUPPORTED, unsupported_reason=reason)
    row.update(model_columns(cell.setup))
    return row


def _write_unsupported(
    jobs: list[CellJob], reason: str, engine_version: str | None, *, config_hash, commit, version_param
) -> list[dict[str, Any]]:
    rows = []
    for job in jobs:
        row = unsupported_row(job.cell, reason, engine_version)
        row.update(config_hash=config_hash, git_commit=commit, version_param=version_param)
        table = records.to_table([row])
        try:
            records.write_atomic(records.TIMELINE_SCHEMA.empty_table(), job.timeline_path)
            records.write_record_table(table, job.record_path)
        except BaseException:
            _remove(job.record_path, job.timeline_path)
            raise
        log.warning("cell %s/%s: unsupported, record says so: %s", job.cell.campaign_id, job.cell.name, reason)
        rows.append(row)
    return rows


def run_cell(cell, record_path: str | os.PathLike, timeline_path: str | os.PathLike, **kwargs) -> dict[str, Any]:
    """Measure one cell and write its record and timeline. Returns the record row.

    Raises on any failure (nothing written) and ``CellInterrupted`` on SIGTERM/SIGINT.
    Keyword arguments as for :func:`run_cells`.
    """
    return run_cells([CellJob(cell, record_path, timeline_path)], **kwargs)[0]


def run_cells(
    jobs: list[CellJob],
    *,
    log_path: str | os.PathLike | None = None,
    config_hash: str | None = None,
    git_commit: str | None = None,
    version_param: int | None = None,
    server_url: str | None = None,
    server_command: list[str] | None = None,
    force_server: bool = False,
    lock_dir: str | None = None,
    gpu_in_use: str = "flag",
    stall_timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    """Measure cells that share one engine configuration on one engine start, in the given order.

    One cell is the ordinary case. Several cells must have equal ``engine_key`` (ADR 0015); each
    gets its own window, counters, timeline and record, written as soon as it is measured. The
    first failure stops the group: cells not yet written get nothing.
    """
    if not jobs:
        raise ValueError("run_cells: no cells")
    keys = {j.cell.engine_key for j in jobs}
    if len(keys) > 1:
        raise ValueError(
            f"run_cells: cells of different engine configurations cannot share an engine: "
            f"{sorted((j.cell.name, j.cell.engine_key) for j in jobs)}"
        )
    if len(jobs) > 1 and any(j.cell.setup.engine.prefix_caching for j in jobs):
        raise ValueError(
            "run_cells: prefix caching on: a shared engine would serve one cell's prompts "
            "from another's cache; share engines only with prefix_caching: false"
        )
    commit = git_commit or envmod.git_commit()
    rows: list[dict[str, Any]] = []
    with cell_log(log_path), interruptible():
        names = ", ".join(f"{j.cell.campaign_id}/{j.cell.name}" for j in jobs)
        log.info("cell%s %s: start", "s" if len(jobs) > 1 else "", names)
        jobs, rows = _resume_after_requeue(jobs, config_hash, version_param)
        if not jobs:
            return rows
        for j in jobs:  # a stale record from an earlier run must not survive a failed re-run
            _remove(j.record_path, j.timeline_path)
        planned = {getattr(j.cell, "unsupported_reason", None) for j in jobs}
        if planned != {None}:
            # Known at planning time (specjoule.support): no device lease, no engine start.
            reason = next(r for r in planned if r)
            return rows + _write_unsupported(
                jobs, reason, None, config_hash=config_hash, commit=commit, version_param=version_param
            )
        # An attempt marker left by an earlier attempt that wrote no record: this one is a retry (ADR 0134).
        retried = {j.cell.cell_id: attempt_marker(j.cell).exists() for j in jobs}
        for j in jobs:
            if retried[j.cell.cell_id]:
                log.warning(
                    "cell %s/%s: an earlier attempt started and wrote no record (%s): this is a retry, and "
                    "its record says so (retried)",
                    j.cell.campaign_id,
                    j.cell.name,
                    attempt_marker(j.cell).read_text(errors="replace")[:200],
                )
        restarts = slurm_restart_count()
        mark_attempt(jobs[0].cell)
        try:
            for job, row, timeline in _measure(
                jobs,
                log_path,
                server_url=server_url,
                server_command=server_command,
                force_server=force_server,
                lock_dir=lock_dir,
                gpu_in_use=gpu_in_use,
                stall_timeout_s=stall_timeout_s,
            ):
                row.update(
                    config_hash=config_hash,
                    git_commit=commit,
                    version_param=version_param,
                    retried=retried[job.cell.cell_id],
                    slurm_restart_count=restarts,
                )
                row = records.derive(row)
                records.validate_row(row)
                table = records.to_table([row])
                try:
                    records.write_atomic(timeline, job.timeline_path)
                    records.write_record_table(table, job.record_path)  # last: its presence means success
                except BaseException as exc:
                    _remove(job.record_path, job.timeline_path)
                    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        log.error(
                            "cell %s/%s: the results disk is full (%s) while writing %s: nothing of this cell "
                            "is kept (no record, no timeline); free space and run again",
                            job.cell.campaign_id,
                            job.cell.name,
                            os.strerror(exc.errno),
                            job.record_path,
                        )
                    raise
                log.info("cell %s/%s: record written to %s", job.cell.campaign_id, job.cell.name, job.record_path)
                with contextlib.suppress(FileNotFoundError):
                    attempt_marker(job.cell).unlink()
                keep_for_requeue(job)
                rows.append(row)
        except EngineStartUnsupported as exc:
            return _write_unsupported(
                jobs,
                exc.reason,
                exc.engine_version,
                config_hash=config_hash,
                commit=commit,
                version_param=version_param,
            )
        except CellInterrupted as exc:
            log.error("cell: cancelled (%s); no record written for the cell in progress", exc)
            raise
        except BaseException as exc:
            note_failed_attempt(jobs, exc, log_path)
            # The log is where a user looks first: say why, and that nothing was written.
            log.error("cell: failed, no record written for the cell in progress: %s: %s", type(exc).__name__, exc)
            raise
    return rows


def _resume_after_requeue(
    jobs: list[CellJob], config_hash: str | None, version_param: Any
) -> tuple[list[CellJob], list[dict[str, Any]]]:
    """After SLURM requeued this job: the leading cells it had measured on this device keep their records (put
    back from the job's requeue links, not measured again); the rest are measured. Returns (to measure, kept rows).
    Only a leading run of cells is kept: the campaign's order holds for what is measured again (ADR 0134)."""
    if not os.environ.get("SLURM_JOB_ID") or not slurm_restart_count():
        return jobs, []
    here = current_device(jobs[0].cell.device)
    kept: list[dict[str, Any]] = []
    for i, job in enumerate(jobs):
        record = restorable(job, here, config_hash, version_param)
        if record is None:
            return jobs[i:], kept
        _, timeline = _requeue_copy(job, os.environ["SLURM_JOB_ID"])
        _link_or_copy(timeline, Path(job.timeline_path))
        _link_or_copy(record, Path(job.record_path))
        row = records.read_records([job.record_path]).to_pylist()[0]
        log.warning(
            "cell %s/%s: measured before SLURM requeued job %s (restart %s now), on this device (%s): "
            "record kept, not measured again",
            job.cell.campaign_id,
            job.cell.name,
            os.environ["SLURM_JOB_ID"],
            slurm_restart_count(),
            here,
        )
        kept.append(row)
    return [], kept


def _engine_spec(jobs: list[CellJob]) -> CellSpec:
    """The spec the engine is built from: the first cell's, with room for the largest batch."""
    spec = jobs[0].cell.setup.replace(batch_size=max(j.cell.batch_size for j in jobs))
    open_loop = [j.cell.setup.workload for j in jobs if j.cell.workload_kind == "open_loop"]
    return spec.replace(workload=open_loop[0]) if open_loop else spec


def _check_metered_gpus(meter: Meter, n_gpus: int) -> None:
    """The meter reads exactly the GPUs the cell holds (ADR 0155): one more counts an idle GPU's energy, one
    fewer misses a tensor-parallel rank's. Fails before the engine starts, not in the analysis."""
    devices = getattr(meter, "devices", None)
    if devices and len(devices) != n_gpus:
        raise MeterError(
            f"meter {meter.name} reads {len(devices)} GPU(s) ({', '.join(d.uuid for d in devices)}; "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}) but the cell holds "
            f"{n_gpus} (target tensor_parallel_size): its energy would "
            f"{'include a GPU the engine does not use' if len(devices) > n_gpus else 'miss a rank'}"
        )


def _check_gpu_free(meter: Meter, policy: str) -> None:
    """Another compute process on the cell's GPU when it starts (ADR 0133): refuse (no engine start) or flag
    (measure; the record lists the processes and the other_gpu_processes check fails the cell)."""
    from specjoule.meter.nvml import _process_list

    others = meter.other_processes()
    if not others:
        return
    listing = _process_list(others)
    if policy == "refuse":
        raise GpuInUse(
            f"the cell's GPU is in use by {len(others)} other compute process(es): {listing}; "
            f"checks.gpu_in_use = refuse: no engine started, nothing measured; run again once the GPU "
            f"is free"
        )
    log.warning(
        "GPU in use by %d other compute process(es): %s; measuring anyway (checks.gpu_in_use = flag): the "
        "record lists them (other_gpu_process_list) and the other_gpu_processes check fails the cell",
        len(others),
        listing,
    )


def _measure(
    jobs: list[CellJob],
    log_path,
    *,
    server_url,
    server_command,
    force_server,
    lock_dir,
    gpu_in_use: str = "flag",
    stall_timeout_s: float | None = None,
) -> Iterator[tuple[CellJob, dict, Any]]:
    # Local copies of hub models that resolve_models fetched (ADR 0121), and their revisions for the record.
    spec, revisions = resolve_models.localize(_engine_spec(jobs))
    device = spec.engine.device
    n_gpus = spec.engine.n_gpus
    lease = gpu.acquire(device, n_gpus=n_gpus, lock_dir=lock_dir)
    leased_at = time.monotonic()  # device time is counted from here (device_held_s, ADR 0038)
    meter: Meter | None = None
    engine: Engine | None = None
    try:
        meter = make_meter(spec.campaign.meter, device)
        meter.open()
        log.info("meter: %s", meter.name)
        _check_metered_gpus(meter, n_gpus)
        _check_gpu_free(meter, gpu_in_use)
        idle_s = float(spec.protocol.idle_s)
        if idle_s > 0 and not isinstance(meter, NoneMeter):
            log.info("idle: measuring for %.1f s before the engine starts", idle_s)
        idle_w = meter.measure_idle(idle_s)
        pools = {}
        for j in jobs:
            pools[j.cell.cell_id] = load_prompts(resolve_models.localize(j.cell.setup)[0])
            ids, pool_hash = pools[j.cell.cell_id]
            log.info(
                "prompts for %s/%s: %d × %d tokens from corpus %s (pool %s)",
                j.cell.campaign_id,
                j.cell.name,
                len(ids),
                len(ids[0]) if ids else 0,
                j.cell.corpus,
                pool_hash[:12],
            )
        try:
            engine = make_engine(
                spec,
                log_path,
                server_url=server_url,
                server_command=server_command,
                force_server=force_server or len({j.cell.workload_kind for j in jobs}) > 1,
            )
        except EngineUnsupported as exc:
            raise EngineStartUnsupported(str(exc)) from exc
        log.info("engine: start (%s, %s)", spec.engine.engine, engine.kind)
        try:
            cache_root = engine.compile_cache_root()
            cache_before = compile_cache.keys(cache_root) if cache_root is not None else None
            try:
                start_s = engine.start()
            except EngineUnsupported as exc:
                raise EngineStartUnsupported(str(exc), (engine.info() or {}).get("engine_version")) from exc
            # Read outside engine.start(): the walk is not part of engine_start_s (ADR 0189).
            cache_warm = (
                compile_cache.started_warm(cache_before, compile_cache.keys(cache_root))
                if cache_root is not None and cache_before is not None
                else None
            )
            if cache_root is not None:
                log.info(
                    "engine: compile cache %s: %s",
                    cache_root,
                    {
                        True: "warm (no new compiled-graph entry)",
                        False: "cold (this start compiled)",
                        None: "nothing compiled into it",
                    }[cache_warm],
                )
            instance = (
                f"{envmod.capture(spec.engine.engine)['hostname']}:{getattr(engine, 'pgid', None)}:{time.time():.0f}"
            )
            log.info("engine: ready after %.1f s", start_s)
            watchdog = workloads.Watchdog(float(spec.protocol.engine_ready_timeout_s), stall_timeout_s)
            applied = jobs[0].cell.acceptance_rates  # what the engine was built with (_engine_spec)
            previous = None
            for i, j in enumerate(jobs):
                if len(jobs) > 1:
                    log.info("cell %s/%s: start on the shared engine", j.cell.campaign_id, j.cell.name)
                    mark_attempt(j.cell)
                if j.cell.acceptance_rates != applied:
                    # One engine for a scheme's acceptance vectors (ADR 0039): swap before the warm-up,
                    # so the warm-up runs at this cell's rates too.
                    applied = j.cell.acceptance_rates
                    engine.set_synthetic_rates(list(applied or ()))
                    log.info("engine: synthetic acceptance rates set to %s", list(applied or ()))
                cell_spec = j.cell.setup
                warmup_skipped = False
                if not cells.warmup_planned(previous, j.cell) and cell_spec.workload.warmup_s > 0:
                    # The window before ran this configuration on this engine, only its prompts' seed or window
                    # index differ (ADR 0188): the engine is in the state a warm-up would bring it to.
                    cell_spec = cell_spec.replace(workload=cell_spec.workload.without_warmup())
                    warmup_skipped = True
                    log.info(
                        "warm-up: skipped, the window before on this engine ran the same configuration (%s/%s)",
                        previous.campaign_id,
                        previous.name,
                    )
                meter.reset_window()
                meter.start_sampling()
                result = workloads.run(
                    engine, meter, pools[j.cell.cell_id][0], cell_spec, drain=i < len(jobs) - 1, watchdog=watchdog
                )
                previous = j.cell
                meter.stop_sampling()
                mres = meter.result()
                row = _row(j.cell, result, mres, engine, start_s, idle_w, pools[j.cell.cell_id][1], instance, len(jobs))
                row.update(revisions, warmup_skipped=warmup_skipped, compile_cache_warm=cache_warm)
                row["device_held_s"] = time.monotonic() - leased_at
                timeline = meter.timeline()
                row.update(host_columns(timeline))
                yield j, row, timeline
        except CellInterrupted:
            log.warning("engine: killing its process group (cell cancelled)")
            if hasattr(engine, "kill_now"):
                engine.kill_now()
            raise
        except EngineHung:
            # A hung engine answers no polite stop: its group is killed now (ADR 0132).
            log.error("engine: hung; killing its process group")
            if hasattr(engine, "kill_now"):
                engine.kill_now()
            raise
        finally:
            _teardown(engine)
    finally:
        if meter is not None:
            meter.stop_sampling()
            meter.close()
        lease.release()


# The warm-up decision is the plan's (ADR 0188): the runner and the planner's estimate use one rule.
same_engine_state = cells.same_engine_state


def draft_passes(spec: CellSpec) -> float | None:
    """Drafter forward passes per speculation round, from the scheme table (specjoule.schemes)."""
    if spec.scheme.is_baseline:
        return None
    return float(schemes.draft_passes_per_round(spec.scheme.method, spec.scheme.draft_tokens))


def model_columns(spec: CellSpec | dict) -> dict[str, Any]:
    """Target and drafter shape columns from their config.json (specjoule.models); null for a hub id not on disk."""
    spec = CellSpec.of(spec)
    out: dict[str, Any] = {}
    try:
        shape = models.local_shape(spec.engine.target.model)
    except models.ModelShapeError as exc:  # the record says what it could not read; the measurement stands
        log.warning("model shape: %s", exc)
        shape = None
    if shape is not None:
        out.update(target_architecture=shape.architecture, target_family=shape.family, target_moe=shape.moe)
    drafter = spec.drafter_model
    if drafter and models.classify_model_ref(drafter)[0] == "local":
        try:
            raw, _ = models.read_config(drafter)
            archs = raw.get("architectures") or []
            out["draft_architecture"] = str(archs[0]) if archs else None
        except models.ModelShapeError as exc:
            log.warning("drafter shape: %s", exc)
    elif spec.scheme.method == "mtp" and shape is not None:
        out["draft_architecture"] = f"{shape.architecture} (MTP layers)"
    return out


def host_columns(timeline: Any) -> dict[str, Any]:
    """Host load and speed at the window's end, and the GPU's busy fraction and mean temperature over the window
    (issue 17: is the loop host-bound? ADR 0254: was this host slower than another's? ADR 0083 addendum 4: was
    this board warmer?)."""
    out: dict[str, Any] = {
        "host_load_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        # after the load average, so that the probe's own CPU time (~0.1-0.2 s) does not enter it
        "host_speed_mops": envmod.host_speed(),
        "gpu_busy_fraction": records.window_gpu_busy_fraction(timeline),
        "mean_temperature_c": records.window_mean_temperature_c(timeline),
    }
    return out


def engine_config_columns(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """The record's engine_config (JSON, sorted keys) and its two flat columns (ADR 0029)."""
    if not cfg:
        return {"engine_config": None, "async_scheduling": None, "cuda_graph_sizes": None}
    sizes = cfg.get("cudagraph_capture_sizes")
    graphs_off = cfg.get("enforce_eager") is True or str(cfg.get("cudagraph_mode", "")).upper() == "NONE"
    asy = cfg.get("async_scheduling")
    return {
        "engine_config": json.dumps(cfg, sort_keys=True, default=str),
        "async_scheduling": asy if isinstance(asy, bool) else None,
        # No graphs are captured with graphs off, whatever size list the config still carries.
        "cuda_graph_sizes": 0 if graphs_off else (len(sizes) if isinstance(sizes, list) else None),
    }


def _row(
    cell,
    result: workloads.WindowResult,
    mres,
    engine: Engine,
    start_s: float,
    idle_w: float | None,
    pool_hash: str,
    instance: str,
    shared: int,
) -> dict[str, Any]:
    spec = cell.setup
    info = engine.info()
    row: dict[str, Any] = dict(cell.identity())
    row["status"] = records.STATUS_MEASURED
    row["acceptance_mechanism"] = acceptance_mechanism(spec)
    row["corpus_pool_hash"] = pool_hash
    row.update(model_columns(spec))
    row["draft_passes_per_round"] = draft_passes(spec)
    row.update(envmod.capture(spec.engine.engine))
    for key in ("engine_version", "torch_version", "cuda_version", "transformers_version"):
        if info.get(key):
            row[key] = info[key]
    row["engine_start_s"] = start_s
    row["engine_instance"] = instance
    row["engine_shared_cells"] = shared
    row.update(engine_config_columns(info.get("engine_config")))
    meter_cols = mres.columns()
    if meter_cols.get("idle_power_w") is None:
        meter_cols["idle_power_w"] = idle_w
    row.update(meter_cols)
    row.update(
        window_start=result.window_start,
        window_end=result.window_end,
        window_start_monotonic=result.window_start_monotonic,
        window_end_monotonic=result.window_end_monotonic,
        window_s=result.window_s,
        warmup_s=result.warmup_s,
        cooldown_s=result.cooldown_s,
        repeats=result.repeats,
    )
    row["mean_power_w"] = (
        (mres.energy_j / result.window_s) if mres.energy_j is not None and result.window_s > 0 else None
    )

    speculative = not spec.scheme.is_baseline
    counters = result.delta.columns(speculative)
    client_failed = sum(1 for r in result.requests if not r.ok)
    # The engine counts aborts/errors; the client also sees requests that never reached it.
    # Take the larger so that one failure is not counted twice (ADR 0013).
    counters["requests_failed"] = max(counters["requests_failed"], client_failed)
    row.update(counters)
    if result.running_samples:
        row["mean_running_requests"] = sum(result.running_samples) / len(result.running_samples)
        row["max_running_requests"] = max(result.running_samples)
    latency_source = engine.latency_source
    if latency_source == "engine_histogram":
        row.update(latency_from_histograms(result.delta))
    else:
        row.update(latency_from_requests(result.requests))
    row["latency_source"] = latency_source
    row.update(result.columns)  # what the workload measured beyond the counters (loops: ADR 0110)

    expected = result.extra.get("expected_committed")
    if expected is not None and row.get("committed_tokens") != expected:
        log.warning(
            "counters: committed tokens %s != %s expected from %d repeat(s) × B × output_len",
            row.get("committed_tokens"),
            expected,
            result.repeats,
        )
    energy = f"{mres.energy_j:.1f} J" if mres.energy_j is not None else "null (meter none)"
    log.info(
        "cell %s/%s: window %.2f s, committed %s, drafts %s, accepted %s, energy %s",
        cell.campaign_id,
        cell.name,
        result.window_s,
        row.get("committed_tokens"),
        row.get("drafts"),
        row.get("accepted_tokens"),
        energy,
    )
    return row


def _teardown(engine: Engine) -> None:
    t = time.monotonic()
    try:
        engine.stop()
    except CellInterrupted:  # the first signal arrived during a normal teardown: finish it the hard way
        if hasattr(engine, "kill_now"):
            engine.kill_now()
        engine.stop()
        raise
    log.info("engine: torn down in %.1f s", time.monotonic() - t)


def main(argv: list[str] | None = None) -> int:
    """``python -m specjoule.runner CONFIG RECORD_PATH [RECORD_PATH …] [--log PATH]``: cells without Snakemake.

    Several record paths of cells with one engine configuration run on one engine start, in the order given.
    """
    import argparse

    from specjoule import config

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("config")
    ap.add_argument("records", nargs="+", help="record paths as in the plan (results/cells/<campaign>/<cell>.parquet)")
    ap.add_argument("--log", default=None)
    ap.add_argument("--server", action="store_true", help="run closed batches through `vllm serve` over HTTP")
    ap.add_argument(
        "--cell-id",
        action="append",
        default=[],
        help="the id the plan gave each record (in order); a mismatch refuses to measure",
    )
    args = ap.parse_args(argv)
    cfg = config.load(args.config)
    table = cells.build(cfg)
    jobs = []
    for i, path in enumerate(args.records):
        cell = table.get(path)
        # The plan and this process each rebuild the cell table; if they disagree (a changed library, a
        # config copy that differs), measuring would file a record under the wrong identity.
        if i < len(args.cell_id) and args.cell_id[i] != cell.cell_id:
            ap.exit(
                2,
                f"runner: cell id mismatch for {path}: the plan says {args.cell_id[i]}, this runner builds "
                f"{cell.cell_id}; nothing measured\n",
            )
        jobs.append(CellJob(cell, cell.record_path, cell.timeline_path))
    try:
        run_cells(
            jobs,
            log_path=args.log,
            config_hash=config.config_hash(cfg),
            version_param=cfg.get("version"),
            force_server=args.server,
            gpu_in_use=cfg["checks"].get("gpu_in_use", "flag"),
            stall_timeout_s=cfg["protocol"].get("stall_timeout_s"),
        )
    except CellInterrupted as exc:
        return 128 + exc.signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
