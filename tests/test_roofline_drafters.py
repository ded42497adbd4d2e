"""Bytes and operations of head drafters (EAGLE3, MTP) and block drafters (DFlash, DSpark) per speculation
round (issue 18, ADR 0176), against values written out by hand from the shipped shape-only configs
(config/models/*/config.json) and vLLM 0.26.0's V2 runner: what a pass reads whole, what it reads only by
row, what runs once per round, and how many tokens each pass carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specjoule.analysis import roofline as rf
from specjoule.models import describe, describe_drafter

MODELS = Path(__file__).resolve().parents[1] / "config" / "models"
H, NH, KVH, HD = 4096, 32, 8, 128  # Qwen3-8B and MiMo-7B: hidden, heads, KV heads, head_dim
V_QWEN3, V_MIMO = 151936, 151680
B, CTX = 4, 768  # a batch and a mean decode context (512 prompt + 512 output / 2)
KV_PER_LAYER = 2 * KVH * HD * CTX * 2  # K and V, bf16: one sequence, one drafter layer
ATTN_PER_TOKEN_LAYER = 4 * CTX * NH * HD


def _qwen3_layer(intermediate: int) -> int:
    """q, k, v, o + q/k norms + SwiGLU + two RMSNorms (Qwen3: no bias, qk-norm)."""
    return H * NH * HD + 2 * H * KVH * HD + NH * HD * H + 2 * HD + 3 * H * intermediate + 2 * H


def test_eagle3_round_reads_its_own_head_once_per_pass_and_fc_once_per_round():
    d = describe_drafter(MODELS / "qwen3-8b-eagle3")
    # One Llama layer whose q/k/v read [embedding ; hidden] (2H), fc over 3 auxiliary target layers, final norm,
    # and its own 32,000-token lm_head; the embedding is the target's and is read only at the pass's rows.
    layer0 = 2 * H * NH * HD + 2 * 2 * H * KVH * HD + NH * HD * H + 3 * H * 12288 + 3 * H
    fc = 3 * H * H
    own_head = 32000 * H
    per_pass = layer0 + H + own_head  # fc excluded: once per round
    k, width = 3, 4.0
    cost = rf.head_round(d, "eagle3", k, B, width, CTX)
    assert cost.bytes == 2 * (k * per_pass + fc) + k * B * KV_PER_LAYER
    tokens = B * (width + k - 1)  # first step over the verified tokens, then k − 1 single-token steps
    assert cost.ops == pytest.approx((2 * per_pass + ATTN_PER_TOKEN_LAYER) * tokens + 2 * fc * B * width)
    # The earlier count read half of params_shareable per pass as "the lm_head": for a head with its own
    # reduced-vocabulary head that half is the target's embedding, of which a pass reads only its rows.
    old = k * 2 * (d.params + 0.5 * d.params_shareable)
    assert cost.bytes < 0.55 * old


def test_mtp_round_reads_the_targets_lm_head_every_pass():
    d = describe_drafter(MODELS / "mimo-7b")
    t = describe(MODELS / "mimo-7b")
    # MiMo's MTP layer: a Qwen2 decoder layer (q/k/v bias, no qk-norm) + eh_proj (2H → H) + 3 norms.
    attn = H * NH * HD + 2 * H * KVH * HD + NH * HD * H + NH * HD + 2 * KVH * HD
    mtp = attn + 2 * H + 3 * H * 11008 + 2 * H * H + 3 * H
    assert d.params == mtp == t.params_mtp
    k, width = 3, 4.0
    per_pass = mtp + V_MIMO * H  # the target's full-vocabulary lm_head scores every MTP step
    cost = rf.head_round(d, "mtp", k, B, width, CTX)
    assert cost.bytes == 2 * k * per_pass + k * B * KV_PER_LAYER
    assert cost.ops == pytest.approx((2 * per_pass + ATTN_PER_TOKEN_LAYER) * B * (width + k - 1))
    # Without the lm_head an MTP pass would be priced at a quarter of what it reads.
    assert 2 * k * mtp < 0.3 * cost.bytes


def test_dflash_round_is_one_pass_over_the_anchor_and_k_masks():
    d = describe_drafter(MODELS / "qwen3-8b-dflash")
    own = 5 * _qwen3_layer(12288) + 5 * H * H + 2 * H  # layers, fc over 5 target layers, hidden_norm, norm
    per_pass = own + V_QWEN3 * H  # the target's lm_head (embedding: rows only)
    k = 15
    cost = rf.head_round(d, "dflash", k, B, 16.0, CTX)
    assert cost.bytes == 2 * per_pass + B * 5 * KV_PER_LAYER
    assert cost.ops == pytest.approx((2 * per_pass + 5 * ATTN_PER_TOKEN_LAYER) * B * (k + 1))


def test_dspark_round_reads_its_markov_table_by_row_only():
    d = describe_drafter(MODELS / "qwen3-8b-dspark")
    rank = 256
    own = 5 * _qwen3_layer(12288) + 5 * H * H + 2 * H + V_QWEN3 * rank + V_QWEN3 * rank
    assert d.params == own
    per_pass = own - V_QWEN3 * rank + V_QWEN3 * H  # markov_w1 is a token table; markov_w2 and lm_head are read whole
    k = 7
    cost = rf.head_round(d, "dspark", k, B, 8.0, CTX)
    assert cost.bytes == 2 * per_pass + B * 5 * KV_PER_LAYER
    assert cost.ops == pytest.approx((2 * per_pass + 5 * ATTN_PER_TOKEN_LAYER) * B * (k + 1))


def test_cell_work_spreads_a_head_round_over_its_passes():
    target, d = describe(MODELS / "qwen3-8b"), describe_drafter(MODELS / "qwen3-8b-eagle3")
    row = {"method": "eagle3", "k": 3, "batch_size": B, "prompt_len": 512, "output_len": 512, "drafts": 100,
           "draft_tokens": 300, "realized_L": 3.0}
    w = rf.cell_work(row, target, d)
    assert w.n_draft_passes == 3 and w.verify_width == 4.0
    whole = rf.head_round(d, "eagle3", 3, B, 4.0, CTX)
    assert w.draft_pass.times(3).bytes == pytest.approx(whole.bytes)
    assert w.draft_pass.times(3).ops == pytest.approx(whole.ops)


def test_a_drafter_without_kv_width_is_not_modelled_naming_it(tmp_path):
    raw = json.loads((MODELS / "qwen3-8b-dflash" / "config.json").read_text())
    d = describe_drafter(MODELS / "qwen3-8b-dflash")
    from dataclasses import replace

    broken = replace(d, num_kv_heads=None, path=str(tmp_path))
    with pytest.raises(rf.NotModelled, match="no KV width"):
        rf.head_round(broken, "dflash", 15, 1, 16.0, 100)
    assert raw["num_key_value_heads"] == KVH  # the shipped config has it; only the stripped shape lacks it


def test_records_without_a_drafter_take_the_configs_or_say_none():
    config = {"models": {"q": {"target": {"model": "t"}, "drafters": {"eagle3": "config/models/qwen3-8b-eagle3"}}},
              "schemes": {"eagle3": {"method": "eagle3", "k": 3}, "dflash": {"method": "dflash", "k": 15,
                                                                            "drafter": "config/models/qwen3-8b-dflash"},
                          "ngram": {"method": "ngram", "k": 3}}}
    drafters = rf.configured_drafters(config)
    assert drafters == {("q", "eagle3"): "config/models/qwen3-8b-eagle3", ("q", "dflash"): "config/models/qwen3-8b-dflash"}
    assert rf.drafter_path({"model_pair": "q", "scheme": "dflash", "draft_model": None}, drafters) == \
        ("config/models/qwen3-8b-dflash", "config (the record names no drafter)")
    assert rf.drafter_path({"model_pair": "q", "scheme": "x", "draft_model": "d"}, drafters) == ("d", "record")
    assert rf.drafter_path({"method": "mtp", "target_model": "m", "draft_model": None}) == \
        ("m", "target (its MTP layers)")
    assert rf.drafter_path({"method": "eagle3", "scheme": "e", "draft_model": None}) == (None, "none")
    # A GPU-drafted record whose drafter cannot be found is not modelled, with the method named.
    row = {"cell_id": "x", "method": "eagle3", "scheme": "e", "k": 3, "target_model": "config/models/qwen3-8b",
           "draft_model": None, "batch_size": 1, "prompt_len": 512, "output_len": 512}
    with pytest.raises(rf.NotModelled, match="no drafter shape is known"):
        rf._work_for(row, rf.models_lookup, {}, None)


def test_cli_reproduces_the_committed_mimo_mtp_tables(tmp_path, capsys):
    """The README's exact command for the incomplete MiMo campaign writes the committed tables again."""
    repo = MODELS.parents[1]
    run = repo / "validation" / "h200-2026-12" / "session-2026-12-01d" / "mimo-mtp"
    committed = repo / "validation" / "h200-2026-12" / "roofline" / "session-2026-12-01d" / "mimo-mtp"
    rf.main([str(run / "results" / "records.parquet"), "--hardware", str(repo / "validation" / "h200-2026-12" / "hardware"),
             "--config", str(run / "h200-schemes-mimo-mtp.yaml"), "--out", str(tmp_path)])
    assert "3 of 3 cells modelled" in capsys.readouterr().out
    import polars as pl
    from polars.testing import assert_frame_equal

    for name in ("roofline", "roofline_fit", "roofline_time", "crossover"):
        assert_frame_equal(pl.read_parquet(tmp_path / f"{name}.parquet"), pl.read_parquet(committed / f"{name}.parquet"))
    cells = pl.read_parquet(committed / "roofline.parquet").filter(pl.col("method") == "mtp")
    assert cells["drafter_source"].to_list() == ["target (its MTP layers)"] * 2
    assert cells["draft_bytes_per_round"].to_list() == pytest.approx([5.0e9] * 2, rel=0.01)
