"""GPU pinning: which GPU(s) a cell runs on, decided before anything imports CUDA.

Three cases (ADR 0012):
- ``device: cpu`` — no lease, ``CUDA_VISIBLE_DEVICES`` untouched.
- Under SLURM (``SLURM_JOB_ID`` and ``CUDA_VISIBLE_DEVICES`` set) — the allocation is used as given:
  the scheduler already made it exclusive.
- Locally — one file lock per GPU (keyed by the GPU's UUID, so renumbering cannot alias two GPUs),
  held for the whole cell; ``CUDA_VISIBLE_DEVICES`` is set to the leased NVML indices together with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA numbers the GPUs the way NVML does (vLLM itself maps
  ``CUDA_VISIBLE_DEVICES`` entries to NVML handles by index, so UUIDs there would break older vLLM).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("specjoule.gpu")

DEFAULT_LOCK_DIR = "/tmp/specjoule-gpu-locks"
LOCK_DIR_ENV = "SPECJOULE_GPU_LOCK_DIR"


class GpuLeaseError(RuntimeError):
    pass


@dataclass
class GpuLease:
    """The GPUs a cell holds. ``release()`` frees the locks; the env stays as it was set."""

    source: str  # cpu | slurm | lease
    cuda_visible_devices: str | None
    uuids: list[str] = field(default_factory=list)
    _locks: list = field(default_factory=list, repr=False)

    def release(self) -> None:
        for lock in self._locks:
            try:
                lock.release(force=True)
            except Exception:  # a lock file removed under us is already free
                pass
        self._locks.clear()

    def __enter__(self) -> GpuLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _visible_candidates() -> list[tuple[int, str]]:
    """(NVML index, UUID) of the GPUs a lease may choose from."""
    from specjoule.meter import nvml as nvml_meter  # pure NVML, no CUDA

    devices = nvml_meter.list_devices()  # raises MeterError with a clear reason when NVML is absent
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None and given.strip() != "":
        # A user-restricted set locally: lease only inside it.
        wanted = nvml_meter.resolve_visible(given, devices)
        return [(d.index, d.uuid) for d in wanted]
    return [(d.index, d.uuid) for d in devices]


def acquire(
    device: str, n_gpus: int = 1, lock_dir: str | None = None, timeout_s: float = 3600.0, poll_s: float = 2.0
) -> GpuLease:
    """Decide and pin the GPUs for one cell. Must run before any CUDA import in this process."""
    if device == "cpu":
        return GpuLease(source="cpu", cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    if device != "cuda":
        raise GpuLeaseError(f"device = {device!r}: expected 'cpu' or 'cuda'")
    if n_gpus < 1:
        raise GpuLeaseError(f"n_gpus = {n_gpus}: a cell needs at least one GPU")

    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if os.environ.get("SLURM_JOB_ID") and cvd:
        entries = [e for e in cvd.split(",") if e.strip()]
        if len(entries) < n_gpus:
            raise GpuLeaseError(
                f"CUDA_VISIBLE_DEVICES = {cvd!r} under SLURM job {os.environ['SLURM_JOB_ID']}: "
                f"the cell needs {n_gpus} GPU(s); request --gpus={n_gpus}"
            )
        if len(entries) > n_gpus:
            # A larger allocation (a site's fixed GRES, a job sized for the grid's largest TP): the cell takes
            # its first n_gpus and leaves the rest out of sight, so that neither the engine nor the meter
            # counts a GPU the cell does not use (ADR 0155).
            cvd = ",".join(e.strip() for e in entries[:n_gpus])
            os.environ["CUDA_VISIBLE_DEVICES"] = cvd
            log.info(
                "GPU: SLURM job %s allocated %d GPU(s); the cell uses the first %d",
                os.environ["SLURM_JOB_ID"],
                len(entries),
                n_gpus,
            )
        log.info("GPU: SLURM job %s allocation used as given: CUDA_VISIBLE_DEVICES=%s", os.environ["SLURM_JOB_ID"], cvd)
        return GpuLease(source="slurm", cuda_visible_devices=cvd)

    from filelock import FileLock, Timeout

    lock_root = Path(lock_dir or os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)
    lock_root.mkdir(parents=True, exist_ok=True)
    candidates = _visible_candidates()
    if len(candidates) < n_gpus:
        raise GpuLeaseError(
            f"the cell needs {n_gpus} GPU(s) but {len(candidates)} are visible (CUDA_VISIBLE_DEVICES={cvd!r})"
        )
    deadline = time.monotonic() + timeout_s
    waited_logged = False
    while True:
        held: list[tuple[int, str, FileLock]] = []
        for index, uuid in candidates:
            lock = FileLock(str(lock_root / f"{uuid}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            held.append((index, uuid, lock))
            if len(held) == n_gpus:
                break
        if len(held) == n_gpus:
            indices = ",".join(str(i) for i, _, _ in held)
            # Before any CUDA import: CUDA reads these once, at initialisation.
            os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            os.environ["CUDA_VISIBLE_DEVICES"] = indices
            log.info("GPU: leased %s (NVML index %s) under %s", [u for _, u, _ in held], indices, lock_root)
            return GpuLease(
                source="lease",
                cuda_visible_devices=indices,
                uuids=[u for _, u, _ in held],
                _locks=[lk for _, _, lk in held],
            )
        for _, _, lock in held:  # partial set: give it back so two cells cannot deadlock
            lock.release(force=True)
        if time.monotonic() >= deadline:
            raise GpuLeaseError(
                f"no {n_gpus} free GPU(s) among {[u for _, u in candidates]} after {timeout_s:.0f} s "
                f"(locks in {lock_root})"
            )
        if not waited_logged:
            log.info("GPU: all %d candidate GPU(s) leased by other cells; waiting", len(candidates))
            waited_logged = True
        time.sleep(poll_s)
