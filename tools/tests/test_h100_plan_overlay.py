"""The H100 planning overlay (ADR 0241): merged over a pre-registered config the way Snakemake merges config files,
it makes the planner's memory bound refuse the family that cannot fit 80 GB and admit one that can."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from specjoule import config

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "tools" / "device" / "h100-plan-overlay.yaml"


def _with_overlay(name: str) -> dict:
    merged = config.read_yaml(REPO / "config" / name)
    update_config(merged, yaml.safe_load(OVERLAY.read_text()))
    return merged


def test_the_overlay_only_sets_the_gpu_memory():
    assert yaml.safe_load(OVERLAY.read_text()) == {"protocol": {"gpu_memory_gb": 80}}


def test_gated_deltanet_depth_does_not_fit_an_h100_and_says_where():
    config.validate_plan(config.read_yaml(REPO / "config" / "h200-schemes-depth-gdn.yaml"))  # an H200: fits
    with pytest.raises(config.ConfigError) as err:
        config.validate_plan(_with_overlay("h200-schemes-depth-gdn.yaml"))
    assert "batch_sizes[1] = 32" in str(err.value) and "80 GB (protocol.gpu_memory_gb)" in str(err.value)


def test_the_mla_depth_family_fits_an_h100():
    assert config.validate_plan(_with_overlay("h200-schemes-depth-mla.yaml"))["protocol"]["gpu_memory_gb"] == 80
