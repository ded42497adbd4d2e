"""Paper-grade defaults for GPU configs (issue 17 item 7, ADR 0097): a cuda config that leaves them out gets 512
generated tokens, three seeds and a 20 s window check; explicit lower settings are warned about, or refused under
``paper_grade: true``; the CPU demo keeps its short settings, and no shipped config changes id or hash
(tests/test_golden_cells.py pins both)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest

from specjoule import cells, config

REPO = Path(__file__).resolve().parents[1]

MINIMAL = {
    "models": {"m": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"}}},
    "schemes": {"baseline": {"method": "baseline"}},
    "batch_sizes": [1],
    "workloads": {"closed": {"kind": "closed_batch"}},
}


def _validate(**top) -> dict:
    return config.validate({**copy.deepcopy(MINIMAL), **top})


def test_a_cuda_config_that_leaves_them_out_gets_paper_grade():
    cfg = _validate(device="cuda")
    assert cfg["workloads"]["closed"]["output_len"] == 512
    assert cfg["seeds"] == [0, 1, 2]
    assert cfg["checks"]["min_window_s"] == 20
    assert cfg["workloads"]["closed"]["min_window_s"] >= 20
    assert config.paper_grade_shortfalls(cfg) == []
    assert len({c.seed for c in cells.build(cfg)}) == 3


def test_device_left_out_is_cuda_and_gets_them_too():
    assert _validate()["workloads"]["closed"]["output_len"] == 512


def test_a_cpu_config_keeps_the_short_defaults():
    cfg = _validate(device="cpu", cuda_graphs=[False])
    assert (cfg["workloads"]["closed"]["output_len"], cfg["seeds"], cfg["checks"]["min_window_s"]) == (128, [0], 1.0)
    assert config.paper_grade_shortfalls(cfg) == []


def test_explicit_settings_win_over_the_cuda_defaults():
    cfg = _validate(device="cuda", seeds=[7], workloads={"closed": {"kind": "closed_batch", "output_len": 64}})
    assert cfg["seeds"] == [7] and cfg["workloads"]["closed"]["output_len"] == 64


def test_the_window_threshold_is_where_one_nvml_update_is_half_a_percent():
    assert config.NVML_UPDATE_S / config.PAPER_MIN_WINDOW_S == pytest.approx(0.005)
    assert config.PAPER_MIN_WINDOW_S == pytest.approx(20.0)


def test_shipped_h200_config_is_warned_about_by_key_and_value(caplog):
    with caplog.at_level(logging.WARNING, logger="specjoule.config"):
        config.load(REPO / "validation/h200-2026-12/config/h200-engines-one-gpu.yaml")
    text = caplog.text
    assert "workloads.closed.output_len = 256" in text and "seeds = [0]" in text
    assert "min_window_s" not in text  # its windows and window check are already 20 s


def test_the_cpu_demo_is_not_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="specjoule.config"):
        config.load(REPO / "config/config.yaml")
    assert "paper grade" not in caplog.text


def test_paper_grade_true_refuses_a_shortfall_naming_key_and_value():
    raw = config.read_yaml(REPO / "validation/h200-2026-12/config/h200-engines-one-gpu.yaml")
    with pytest.raises(config.ConfigError) as info:
        config.validate({**raw, "paper_grade": True})
    assert info.value.key == "workloads.closed.output_len" and info.value.value == 256
    assert "512" in str(info.value)


def test_paper_grade_false_is_silent_and_true_passes_a_paper_grade_config(caplog):
    raw = config.read_yaml(REPO / "validation/h200-2026-12/config/h200-engines-one-gpu.yaml")
    with caplog.at_level(logging.WARNING, logger="specjoule.config"):
        config.validate({**raw, "paper_grade": False})
    assert "paper grade" not in caplog.text
    good = copy.deepcopy(raw)
    good["workloads"]["closed"]["output_len"] = 512
    good["seeds"] = [0, 1, 2]
    cfg = config.validate({**good, "paper_grade": True})
    assert cfg["paper_grade"] is True


def test_open_loop_and_window_check_shortfalls_are_named():
    cfg = _validate(device="cuda", workloads={"ol": {"kind": "open_loop", "rate": 1.0, "window_s": 10}},
                    checks={"min_window_s": 5})
    keys = {k for k, _, _ in config.paper_grade_shortfalls(cfg)}
    assert keys == {"workloads.ol.window_s", "checks.min_window_s"}


def test_paper_grade_is_hash_neutral_at_its_default_and_hashed_when_set():
    raw = config.read_yaml(REPO / "validation/h200-2026-12/config/h200-engines-one-gpu.yaml")
    plain = config.config_hash(config.validate(raw))
    assert config.config_hash(config.validate({**raw, "paper_grade": None})) == plain
    assert config.config_hash(config.validate({**raw, "paper_grade": False})) != plain


def test_a_bad_paper_grade_value_names_the_key():
    with pytest.raises(config.ConfigError) as info:
        _validate(paper_grade="yes")
    assert info.value.key == "paper_grade"
