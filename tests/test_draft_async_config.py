"""ADR 0096 addendum 3: the pre-registered async test (``config/h200-draft-async.yaml``) changes one thing.

vLLM 0.26.0 leaves ``async_scheduling`` at None unless asked, and then turns it off for ``draft_model``
(``vllm/config/vllm.py`` 1059–1082); set explicitly to true it accepts ``draft_model`` and refuses only
``disable_padded_drafter_batch`` (1028–1054). The addendum's prediction compares the async config's rounds with the
2026-12-02e spread windows, so the two configs must hand vLLM the same arguments for the same cell but that one. No
engine runs here: the adapter's ``LLM(**kwargs)`` are compared as built.
"""

from __future__ import annotations

import json
from pathlib import Path

from specjoule import config
from specjoule.engines import vllm as V

REPO = Path(__file__).resolve().parent.parent
ASYNC = "config/h200-draft-async.yaml"
SPREAD = "config/h200-spread.yaml"  # the configuration the 2026-12-02e windows ran
VLLM026 = json.loads((REPO / "tests" / "data" / "vllm" / "speculative-0.26.0.json").read_text())


def _vllm_cells(path: str) -> list:
    _, table = config.plan(config.read_yaml(REPO / path), path)
    return [c for c in table.cells if c.engine == "vllm" and not c.unsupported_reason]


def _key(cell) -> tuple[str, str]:
    return cell.campaign_id, cell.name


def test_every_arm_asks_vllm_for_async_scheduling_in_a_form_0260_accepts():
    cells = _vllm_cells(ASYNC)
    drafts = [c for c in cells if c.method == "draft_model"]
    assert len(cells) == 16 and len(drafts) == 8  # 2 B × (2 opening + 4 draft + 2 closing windows)
    for cell in cells:
        kw = V.engine_kwargs(cell.spec)
        assert kw["async_scheduling"] is True, cell.name
        # No compilation settings of ours: vLLM's default FULL_AND_PIECEWISE, as the 2026-12-02e records say.
        assert "compilation_config" not in kw and "enforce_eager" not in kw, cell.name
    for cell in drafts:
        spec_cfg = V.engine_kwargs(cell.spec)["speculative_config"]
        assert spec_cfg["method"] == "draft_model" and spec_cfg["num_speculative_tokens"] == 5
        # 0.26.0 refuses async scheduling together with this one speculative setting.
        assert not spec_cfg.get("disable_padded_drafter_batch")
        assert set(spec_cfg) <= set(VLLM026["speculative_config_fields"])


def test_each_arm_differs_from_its_measured_spread_window_only_in_async_scheduling():
    spread = {_key(c): c for c in _vllm_cells(SPREAD)}
    cells = _vllm_cells(ASYNC)
    for cell in cells:
        twin = spread[_key(cell)]
        ours, theirs = V.engine_kwargs(cell.spec), V.engine_kwargs(twin.spec)
        differ = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
        assert differ == {"async_scheduling"}, (cell.name, differ)
        # The spread config left it to vLLM (None): off for draft_model, on for the baseline.
        assert "async_scheduling" not in theirs
