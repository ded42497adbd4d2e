"""Meters: ``nvml`` (GPU energy counter + timeline) and ``none`` (explicitly not measured)."""

from __future__ import annotations

import logging
import os

from specjoule.meter.base import Meter, MeterError, MeterResult
from specjoule.meter.none import NoneMeter

log = logging.getLogger("specjoule.meter")

MODES = ("auto", "nvml", "none")

__all__ = ["Meter", "MeterError", "MeterResult", "NoneMeter", "make_meter", "MODES"]


def make_meter(mode: str, device: str, cuda_visible_devices: str | None = None) -> Meter:
    """The meter a cell asked for. Not yet opened.

    ``auto``: nvml when the cell runs on cuda, NVML initialises and a GPU is visible; else none.
    ``nvml``: NVML or a MeterError — never a silent fallback. ``none``: not measured.
    """
    if mode not in MODES:
        raise MeterError(f"meter = {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "none":
        return NoneMeter("meter: none in config")
    from specjoule.meter.nvml import NvmlMeter, list_devices, resolve_visible

    cvd = cuda_visible_devices if cuda_visible_devices is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
    if mode == "nvml":
        return NvmlMeter(cvd)
    # auto
    if device != "cuda":
        return NoneMeter(f"meter: auto on device {device!r} (GPU energy does not measure a {device} run)")
    try:
        visible = resolve_visible(cvd, list_devices())
    except MeterError as exc:
        log.info("meter auto → none: %s", exc)
        return NoneMeter(f"meter: auto, NVML unavailable: {exc}")
    if not visible:
        return NoneMeter(f"meter: auto, no GPU visible (CUDA_VISIBLE_DEVICES={cvd!r})")
    return NvmlMeter(cvd)
