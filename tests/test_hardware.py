"""Hardware constants (issue 18, ADR 0100): the arithmetic on CPU, from a recorded H200 calibration and
from synthetic kernels with known coefficients; the clear failures without torch or a GPU.

The measurement itself runs on the GPU (``python -m specjoule.hardware calibrate``); its output of
2026-12-01 is tests/data/hardware/h200-firecracker-2026-12-01.json.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specjoule import hardware as hw

RECORDED = Path(__file__).parent / "data" / "hardware" / "h200-firecracker-2026-12-01.json"


def _kernel(name: str, bytes_per_s: float, ops_per_s: float, power_w: float, gpm_dram: float | None = None) -> dict:
    kernel_s, energy_s = 5.0, 4.0
    iters = 1000
    return {"name": name, "hbm_bytes_per_iter": bytes_per_s * kernel_s / iters, "ops_per_iter": ops_per_s * kernel_s / iters,
            "iters": iters, "kernel_s": kernel_s, "energy_j": power_w * energy_s, "energy_s": energy_s,
            "gpm": {"dram_bw_util_pct": gpm_dram} if gpm_dram is not None else {}}


def _synthetic_raw(static_w=100.0, e_byte=90e-12, e_op=0.5e-12, mm_true_bytes=None, gpm=False) -> dict:
    """Kernels whose power is exactly static + e_byte·bytes/s + e_op·ops/s."""
    copy_b, reduce_b = 4.0e12, 4.2e12
    mm_o, mm_counted_b = 7.0e14, 0.3e12
    mm_b = mm_true_bytes if mm_true_bytes is not None else mm_counted_b
    peak = 4.8e12
    return {
        "idle": {"energy_j": static_w * 3.0, "energy_s": 3.0},
        "kernels": {
            "copy": _kernel("copy", copy_b, 0.0, static_w + e_byte * copy_b, 100 * copy_b / peak if gpm else None),
            "reduce": _kernel("reduce", reduce_b, 0.0, static_w + e_byte * reduce_b, 100 * reduce_b / peak if gpm else None),
            "matmul": _kernel("matmul", mm_counted_b, mm_o, static_w + e_byte * mm_b + e_op * mm_o,
                              100 * mm_b / peak if gpm else None),
        },
    }


def test_known_coefficients_are_recovered():
    c = hw.summarise(_synthetic_raw())
    assert c["static_power_w"] == pytest.approx(100.0)
    assert c["energy_per_byte_j"] == pytest.approx(90e-12, rel=1e-9)
    assert c["energy_per_op_j"] == pytest.approx(0.5e-12, rel=1e-9)
    assert c["hbm_bytes_per_s"] == pytest.approx(4.2e12) and c["hbm_source"] == "reduce"
    assert c["balance_point_op_per_byte"] == pytest.approx(7.0e14 / 4.2e12)
    # The held-out reduction is predicted exactly when the model is exact.
    assert c["reduce_check"]["relative_error"] == pytest.approx(0.0, abs=1e-12)


def test_gpm_measured_matmul_bytes_are_used_where_they_exceed_the_lower_bound():
    # The matmul really moves 0.9 TB/s (tiles re-read): with GPM the fit sees it, without it the
    # lower bound (0.3 TB/s) leaves the extra byte energy in e_op.
    exact = hw.summarise(_synthetic_raw(mm_true_bytes=0.9e12, gpm=True))
    assert exact["energy_per_op_j"] == pytest.approx(0.5e-12, rel=1e-9)
    assert exact["matmul_hbm_bytes_per_s_used"] == pytest.approx(0.9e12)
    assert "GPM" in exact["method"]
    biased = hw.summarise(_synthetic_raw(mm_true_bytes=0.9e12, gpm=False))
    assert biased["energy_per_op_j"] == pytest.approx(0.5e-12 + 90e-12 * 0.6e12 / 7.0e14, rel=1e-9)
    assert "lower bound" in biased["method"]


def test_recorded_h200_calibration_rederived_by_hand():
    data = json.loads(RECORDED.read_text())
    raw = data["raw"]
    k = raw["kernels"]
    rate = {n: (v["hbm_bytes_per_iter"] * v["iters"] / v["kernel_s"], v["ops_per_iter"] * v["iters"] / v["kernel_s"],
                v["energy_j"] / v["energy_s"]) for n, v in k.items()}
    static = raw["idle"]["energy_j"] / raw["idle"]["energy_s"]
    mm_bytes = rate["copy"][0] * k["matmul"]["gpm"]["dram_bw_util_pct"] / k["copy"]["gpm"]["dram_bw_util_pct"]
    a = np.array([[rate["copy"][0], rate["copy"][1]], [mm_bytes, rate["matmul"][1]]])
    e_byte, e_op = np.linalg.solve(a, np.array([rate["copy"][2] - static, rate["matmul"][2] - static]))
    c = hw.summarise(raw)
    assert c["energy_per_byte_j"] == pytest.approx(e_byte, rel=1e-9)
    assert c["energy_per_op_j"] == pytest.approx(e_op, rel=1e-9)
    assert c["balance_point_op_per_byte"] == pytest.approx(rate["matmul"][1] / max(rate["copy"][0], rate["reduce"][0]))
    assert c["energy_per_op_pj"] == pytest.approx(data["constants"]["energy_per_op_pj"])  # as written there
    # What the H200 gave (2026-12-01): the paper's 4.44 TB/s, 722 TFLOP/s and 163 op/B are within ~10 %.
    assert 4.0e12 < c["hbm_bytes_per_s"] < 4.8e12 and 6.0e14 < c["bf16_ops_per_s"] < 9.9e14
    assert 120 < c["balance_point_op_per_byte"] < 230
    assert hw.load(RECORDED)["gpu_uuid"].startswith("GPU-")


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["kernels"]["copy"].update(energy_j=50.0), "did not draw more than idle"),
    (lambda r: r["kernels"]["reduce"].update(busy_at_end=False), "ran out of work"),
    (lambda r: r["kernels"].pop("matmul"), "lacks kernel 'matmul'"),
    (lambda r: r["kernels"]["matmul"].update(ops_per_iter=0.0), "cannot be separated"),
])
def test_untrustworthy_calibrations_are_refused_with_the_reason(edit, message):
    raw = _synthetic_raw()
    edit(raw)
    with pytest.raises(hw.HardwareError, match=message):
        hw.summarise(raw)


def test_load_refuses_a_bad_file(tmp_path):
    data = json.loads(RECORDED.read_text())
    bad = copy.deepcopy(data)
    bad["constants"]["energy_per_byte_j"] = 0
    p = tmp_path / "x.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(hw.HardwareError, match="constants.energy_per_byte_j = 0"):
        hw.load(p)
    bad = dict(data, schema="other/9")
    p.write_text(json.dumps(bad))
    with pytest.raises(hw.HardwareError, match="schema 'other/9'"):
        hw.load(p)


def test_calibration_lookup_per_gpu_and_driver(tmp_path):
    data = json.loads(RECORDED.read_text())
    for driver, when in (("570.1", "2026-01-01T00:00:00Z"), ("580.159.04", "2025-01-01T00:00:00Z")):
        d = dict(data, driver_version=driver, measured_at=when)
        (tmp_path / hw.cache_name(d["gpu_uuid"], driver)).write_text(json.dumps(d))
    found = hw.find_calibrations(tmp_path)
    assert len(found) == 2
    assert hw.for_gpu(found, data["gpu_uuid"], "580.159.04")["driver_version"] == "580.159.04"
    assert hw.for_gpu(found, data["gpu_uuid"], "999")["driver_version"] == "570.1"  # latest of that GPU
    assert hw.for_gpu(found, "GPU-other", "580.159.04") is None


def test_cached_calibration_is_reused_without_measuring(tmp_path, monkeypatch):
    data = json.loads(RECORDED.read_text())
    path = tmp_path / hw.cache_name(data["gpu_uuid"], data["driver_version"])
    path.write_text(json.dumps(data))
    fake = hw._Nvml(nv=None, handle=None, uuid=data["gpu_uuid"], name="H200", driver=data["driver_version"],
                    power_limit_w=700.0)
    monkeypatch.setattr(hw, "_open_nvml", lambda: fake)
    monkeypatch.setattr(hw, "measure", lambda **kw: pytest.fail("measured although cached"))
    assert hw.calibrate(tmp_path, lease=False) == path


def test_module_imports_without_torch_and_fails_clearly_without_a_gpu(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import specjoule.hardware as h\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            f"sys.exit(h.main(['calibrate', '--out', {str(tmp_path)!r}]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert out.returncode == 2, out.stderr
    assert "calibrate needs an NVIDIA GPU and its driver: NVML cannot initialise" in out.stderr
    assert not list(tmp_path.iterdir())  # nothing written, no zero constants
