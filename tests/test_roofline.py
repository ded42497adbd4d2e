"""The roofline energy model (issue 18, ADR 0102): byte and operation counts against hand-computed values
for a dense and an MoE shape, the fit recovering known coefficients from synthetic baseline records,
predictions, splits, crossovers, the check, and bad input named — never a silent zero.

Shapes are a local stand-in for ``specjoule.models.ModelShape`` (branch wave2/models) with the same
field names and methods, until that module is merged.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from specjoule.analysis import checks as checks_mod
from specjoule.analysis import roofline as rf
from specjoule.models import ModelShape

# The real shape class (specjoule.models): the test shapes below are written out field by field from the published
# configs, so the byte and operation counts they are checked against stay hand-computed.
StandInShape = ModelShape  # noqa: N816 - the name the tests were written with


# Qwen2.5-3B's published shape (config/models/qwen2.5-3b): tied embeddings, 36 layers, GQA 16/2 × 128.
DENSE = StandInShape(
    path="stand-in/qwen2.5-3b", architecture="Qwen2ForCausalLM", model_type="qwen2", family="gqa", moe=False,
    num_layers=36, hidden_size=2048, intermediate_size=11008, vocab_size=151936, num_attention_heads=16,
    num_kv_heads=2, head_dim=128, num_experts=None, experts_per_token=None, moe_intermediate_size=None,
    shared_expert_intermediate_size=None, sliding_window=None, sliding_layers=0, kv_lora_rank=None,
    q_lora_rank=None, qk_rope_head_dim=None, qk_nope_head_dim=None, v_head_dim=None, linear_attention_layers=0,
    mtp_layers=0, tie_word_embeddings=True, params_total=3_085_938_688, params_active=3_085_938_688)
# An MoE with 48 routed layers of 128 experts, top-8, expert FFN 768 (Qwen3-30B-A3B's layout); params chosen so
# that total − active = 48 · (128 − 8) · 3 · 2048 · 768 exactly.
PER_EXPERT = 3 * 2048 * 768
MOE_SHARED = 1_000_000_000
MOE = replace(DENSE, path="stand-in/moe", architecture="Qwen3MoeForCausalLM", model_type="qwen3_moe", moe=True,
              num_layers=48, num_attention_heads=32, num_kv_heads=4, num_experts=128, experts_per_token=8,
              moe_intermediate_size=768, tie_word_embeddings=False,
              params_total=MOE_SHARED + 48 * 128 * PER_EXPERT, params_active=MOE_SHARED + 48 * 8 * PER_EXPERT)
DRAFT = replace(DENSE, path="stand-in/qwen2.5-0.5b", num_layers=24, hidden_size=896, num_attention_heads=14,
                num_kv_heads=2, head_dim=64, params_total=494_032_768, params_active=494_032_768)


# ------------------------------------------------------------------------------------------------
# counts by hand

def test_dense_pass_counts_by_hand():
    b, w, ctx = 4, 6, 640
    cost = rf.target_pass(DENSE, b, w, ctx)
    kv_per_token = 36 * 2 * 2 * 128 * 2  # layers · (K and V) · kv heads · head_dim · bf16 bytes = 36,864
    assert cost.bytes == 3_085_938_688 * 2 + b * kv_per_token * ctx
    attention = 4 * ctx * 16 * 128 * 36  # QK and AV, 2 operations per multiply-add
    assert cost.ops == 2 * 3_085_938_688 * b * w + attention * b * w
    # ~1 operation per byte at B = 1, ~B × w at batch: the roofline's x axis.
    assert rf.target_pass(DENSE, 1, 1, ctx).op_per_byte == pytest.approx(1.03, abs=0.01)


def test_moe_pass_counts_by_hand():
    # One token reads its 8 experts per layer; many tokens read (almost) all 128.
    shared, per_expert, layers = rf.moe_layout(MOE)
    assert (shared, per_expert, layers) == (pytest.approx(MOE_SHARED), PER_EXPERT, pytest.approx(48))
    one = rf.target_pass(MOE, 1, 1, 100)
    untied_embedding_unread = (151936 - 1) * 2048  # a pass reads its own embedding rows only
    kv = 48 * 2 * 4 * 128 * 2 * 100
    assert one.bytes == pytest.approx((MOE_SHARED - untied_embedding_unread + 48 * 8 * PER_EXPERT) * 2 + kv)
    n = 32 * 6
    distinct = 128 * (1 - (1 - 8 / 128) ** n)  # 127.99…: a verify pass at B = 32, w = 6 touches every expert
    assert rf.expected_distinct_experts(128, 8, n) == pytest.approx(distinct)
    batch = rf.target_pass(MOE, 32, 6, 100)
    assert batch.bytes == pytest.approx((MOE_SHARED - (151936 - n) * 2048 + 48 * distinct * PER_EXPERT) * 2 + 32 * kv)
    assert batch.ops == pytest.approx(2 * MOE.params_active * n + 4 * 100 * 32 * 128 * 48 * n)
    # Expected distinct experts: 1 token → k, monotone in n, bounded by E.
    assert rf.expected_distinct_experts(128, 8, 1) == pytest.approx(8)
    assert rf.expected_distinct_experts(128, 8, 2) == pytest.approx(8 + 8 * 120 / 128)


def test_draft_passes_and_widths_per_scheme():
    assert [rf.draft_passes_per_round(m, 5) for m in ("draft_model", "eagle3", "mtp", "dflash", "dspark", "ngram")] \
        == [5, 5, 5, 1, 1, 0]
    # vLLM 0.26.0 V2 runner: a block pass runs the anchor + k masks; a head round the verified tokens, then k − 1 steps
    assert rf.drafter_tokens_per_round("dflash", 15, 16.0) == 16 and rf.drafter_tokens_per_round("eagle3", 3, 4.0) == 6


# ------------------------------------------------------------------------------------------------
# synthetic records with known coefficients

TRUE = dict(static_w=130.0, j_per_byte=115e-12, j_per_op=0.75e-12, t0=1.1e-3, slowdown=1.35)
BW, OPS = 4.3e12, 6.7e14
PROMPT, OUT = 512, 256
GPU = "GPU-synthetic-0000"


def _calibration(off: float = 1.0) -> dict:
    return {"schema": "specjoule-hardware/1", "gpu_uuid": GPU, "gpu_name": "NVIDIA H200", "driver_version": "580",
            "measured_at": "2026-12-01T00:00:00Z",
            "constants": {"hbm_bytes_per_s": BW, "bf16_ops_per_s": OPS, "balance_point_op_per_byte": OPS / BW,
                          "static_power_w": TRUE["static_w"] * off, "energy_per_byte_j": TRUE["j_per_byte"] * off,
                          "energy_per_op_j": TRUE["j_per_op"] / off}}


def _by_hand(b: int, width: float, n_draft: int, draft_tokens: float) -> tuple[dict, dict, dict]:
    """(verify, one draft pass, prompt) bytes/ops for the dense target + dense draft, written out."""
    ctx = PROMPT + OUT // 2
    kv_t, kv_d = 36 * 2 * 2 * 128 * 2, 24 * 2 * 2 * 64 * 2
    att_t, att_d = 4 * 16 * 128 * 36, 4 * 14 * 64 * 24
    verify = {"bytes": 2 * DENSE.params_total + b * kv_t * ctx,
              "ops": (2 * DENSE.params_active + att_t * ctx) * b * width}
    draft = {"bytes": 2 * DRAFT.params_total + b * kv_d * ctx,
             "ops": (2 * DRAFT.params_active + att_d * ctx) * b * draft_tokens}
    pctx = PROMPT // 2
    prompt = {"bytes": 2 * DENSE.params_total + b * kv_t * pctx, "ops": (2 * DENSE.params_active + att_t * pctx) * b * PROMPT}
    if n_draft:
        prompt = {"bytes": prompt["bytes"] + 2 * DRAFT.params_total + b * kv_d * pctx,
                  "ops": prompt["ops"] + (2 * DRAFT.params_active + att_d * pctx) * b * PROMPT}
    return verify, draft, prompt


def _roof(c: dict) -> float:
    return max(c["bytes"] / BW, c["ops"] / OPS)


def _record(b: int, method: str = "baseline", k: int | None = None, L: float = 1.0, campaign: str = "c",
            name: str | None = None, acceptance: str | None = None, host_wait_s: float = 0.0) -> dict:
    """A record generated from the true coefficients by the hand formulas above (not by the module)."""
    spec = method != "baseline"
    width = 1 + k if spec else 1
    n_draft = (k if method == "draft_model" else 0) if spec else 0
    verify, draft, prompt = _by_hand(b, width, n_draft, 1)
    committed = b * OUT * 4  # four generations of the batch in the window
    rounds = committed / (b * L)
    batches = committed / (b * OUT)
    # A drafter pass pays the target's fixed per-pass time in proportion to its layers (ADR 0182): 24 of 36 here.
    share = DRAFT.num_layers / DENSE.num_layers
    passes = rounds * (1 + n_draft * share) + batches * (1 + (share if n_draft else 0))
    roof = rounds * (_roof(verify) + n_draft * _roof(draft)) + batches * _roof(prompt)
    seconds = passes * TRUE["t0"] + TRUE["slowdown"] * roof + rounds * host_wait_s
    bytes_ = rounds * (verify["bytes"] + n_draft * draft["bytes"]) + batches * prompt["bytes"]
    ops = rounds * (verify["ops"] + n_draft * draft["ops"]) + batches * prompt["ops"]
    energy = TRUE["static_w"] * seconds + TRUE["j_per_byte"] * bytes_ + TRUE["j_per_op"] * ops
    accepted = committed - rounds * b if spec else 0
    name = name or (f"{method}--b{b}" if spec else f"baseline--b{b}")
    return {"cell_id": f"{campaign}-{name}", "campaign_id": campaign, "cell_name": name,
            "role": "point" if spec else "opening_baseline", "engine": "vllm", "model_pair": "pair",
            "target_model": "target", "draft_model": "draft" if spec else None, "scheme": method, "method": method,
            "k": k, "batch_size": b, "gpu_uuid": GPU, "gpu_names": ["NVIDIA H200"], "driver_version": "580",
            "cuda_graphs": True, "workload_kind": "closed_batch", "prompt_len": PROMPT, "output_len": OUT,
            "window_s": seconds, "energy_j": energy, "committed_tokens": committed,
            "drafts": int(round(rounds * b)) if spec else 0, "draft_tokens": int(round(rounds * b)) * k if spec else 0,
            "accepted_tokens": int(round(accepted)), "realized_L": L, "acceptance_name": acceptance,
            "mj_per_committed_token": energy * 1000 / committed, "requests_failed": 0, "status": None}


def _lookup(path: str, role: str):
    return {"target": DENSE, "draft": DRAFT}[path]


SWEEP = [1, 2, 4, 8, 16, 32, 64]


def _records(extra: list[dict] = ()) -> pl.DataFrame:
    rows = [_record(b) for b in SWEEP] + list(extra)
    base = {r["batch_size"]: r["mj_per_committed_token"] for r in rows if r["method"] == "baseline"}
    for r in rows:
        r["baseline_mj_per_committed_token"] = base[r["batch_size"]]
    return pl.DataFrame(rows, infer_schema_length=None)


def _obs(batches: list[int]) -> list:
    hw = rf.hardware_from_calibration(_calibration())
    return [rf.observe_baseline(r, rf.cell_work(r, DENSE, None), hw.ceilings) for r in (_record(b) for b in batches)]


def test_fit_recovers_known_coefficients_without_a_prior_where_the_sweep_turns_compute_bound():
    obs = _obs(SWEEP + [256, 512, 1024])  # past the balance point the time stops following the bytes
    co = rf.fit_coefficients(obs, None)
    tm = rf.fit_time_model(obs, rf.Ceilings(BW, OPS))
    assert tm.t0_s == pytest.approx(TRUE["t0"], rel=1e-6) and tm.slowdown == pytest.approx(TRUE["slowdown"], rel=1e-6)
    assert co.static_w == pytest.approx(TRUE["static_w"], rel=1e-6)
    assert co.j_per_byte == pytest.approx(TRUE["j_per_byte"], rel=1e-6)
    assert co.j_per_op == pytest.approx(TRUE["j_per_op"], rel=1e-6)


def test_a_memory_bound_sweep_alone_cannot_separate_the_coefficients():
    with pytest.raises(rf.NotModelled, match="collinear"):
        rf.fit_coefficients(_obs(SWEEP), None)


@pytest.mark.parametrize("prior_off", [1.0, 1.3])
def test_fit_with_a_calibration_prior(prior_off):
    f = rf.fit(_records(), _lookup, [_calibration(prior_off)], resamples=0)
    co, tm = f.fits[0][GPU], next(iter(f.fits[1].values()))
    assert tm.t0_s == pytest.approx(TRUE["t0"], rel=1e-6) and tm.slowdown == pytest.approx(TRUE["slowdown"], rel=1e-6)
    if prior_off == 1.0:
        assert co.as_array() == pytest.approx(rf.Coefficients(TRUE["static_w"], TRUE["j_per_byte"],
                                                              TRUE["j_per_op"]).as_array(), rel=1e-6)
    # A prior 30 % off: the direction the sweep cannot see follows the prior, the baselines are still explained.
    for r in _records().to_dicts():
        pred = rf.predict(rf.cell_work(r, DENSE, None), co, tm).mj_per_committed_token
        assert pred == pytest.approx(r["mj_per_committed_token"], rel=0.01 if prior_off != 1.0 else 1e-6)
    for fitted, true in zip(co.as_array(), (TRUE["static_w"], TRUE["j_per_byte"], TRUE["j_per_op"])):
        assert abs(fitted / true - 1) <= 0.31


def test_speculative_cells_predicted_and_split():
    spec = [_record(b, "draft_model", 5, L, name=f"draft--b{b}-L{L}", acceptance=f"L{L}") for b in (1, 32) for L in (2.0, 5.0)]
    slow = _record(32, "draft_model", 5, 5.0, name="draft--host-bound", acceptance="slow", host_wait_s=0.02)
    res = rf.model_cells(_records(spec + [slow]), _lookup, [_calibration()], resamples=50)
    cells = res.cells.filter(pl.col("method") == "draft_model")
    exact = cells.filter(pl.col("cell_name") != "draft--host-bound")
    assert exact["model_status"].to_list() == ["modelled"] * 4
    assert exact["residual"].abs().max() < 0.02  # generated by the same physics, predicted from baselines only
    assert (exact["energy_idle_share"] < 0.01).all()
    shares = exact.select(pl.sum_horizontal("energy_verify_share", "energy_draft_share", "energy_idle_share"))
    assert shares.to_series().to_list() == pytest.approx([1.0] * 4)
    # A host-bound draft loop: 20 ms per round the GPU waits: a large positive residual, seen as idle share.
    hb = cells.filter(pl.col("cell_name") == "draft--host-bound").row(0, named=True)
    assert hb["residual"] > 0.25 and hb["energy_idle_share"] > 0.3
    assert (exact["predicted_mj_low"] <= exact["predicted_mj_per_committed_token"] * 1.0001).all()
    # The crossover row of each B: predicted from the calibration, measured where the grid brackets it.
    assert res.crossover.height == 2 and res.crossover["predicted_crossover_L"].is_not_null().all()


def test_predicted_crossover_is_where_the_predictions_meet():
    co = rf.Coefficients(TRUE["static_w"], TRUE["j_per_byte"], TRUE["j_per_op"])
    tm = rf.TimeModel(TRUE["t0"], TRUE["slowdown"], rf.Ceilings(BW, OPS))
    for b in (1, 32):
        row = _record(b, "draft_model", 5, 3.0)
        L_star = rf.crossover_length(rf.cell_work(row, DENSE, DRAFT), rf.cell_work(_record(b), DENSE, None), co, tm)
        at = rf.predict(rf.cell_work(row, DENSE, DRAFT, accepted_length=L_star), co, tm).mj_per_committed_token
        base = rf.predict(rf.cell_work(_record(b), DENSE, None), co, tm).mj_per_committed_token
        assert at == pytest.approx(base, rel=1e-9)
        assert 1.0 < L_star < 6.0


def test_measured_crossover_interpolates_or_says_why_not():
    # Between L = 3 and 5 the round's energy over a plain step (ratio x L) goes 3.6 -> 4.0, i.e. 3.6 + 0.2 (L - 3);
    # it equals L (ratio 1) where 3.0 + 0.2 L = L: L = 3.75 (a straight line through the ratios said 4.0).
    L, how = rf.measured_crossover([(1.0, 2.0), (3.0, 1.2), (5.0, 0.8)])
    assert L == pytest.approx(3.75) and "between L = 3" in how


@pytest.mark.parametrize("round_cost", [1.3, 2.2436, 3.9])
def test_measured_crossover_of_a_round_that_costs_the_same_at_every_l_is_that_cost(round_cost):
    """ADR 0233: a round that costs round_cost plain steps at every L commits L tokens, so its ratio is round_cost / L
    and breaks even at L = round_cost exactly, wherever the two measured L lie around it (2026-12-04d's EAGLE3 on
    Qwen3.6: 2.24 and 2.25 steps a round at L = 1 and 4; the straight line through the ratios said 3.22)."""
    points = [(L, round_cost / L) for L in (1.0, 4.0, 7.0)]
    L, how = rf.measured_crossover(points)
    assert L == pytest.approx(round_cost, rel=1e-12)
    assert how.startswith("between L = 1 " if round_cost < 4 else "between L = 4 ")


def test_measured_crossover_at_a_measured_point_is_that_point():
    assert rf.measured_crossover([(1.0, 2.0), (3.0, 1.0), (5.0, 0.5)])[0] == pytest.approx(3.0)
    # two cells at one L on either side of 1 (e.g. two acceptance vectors of equal mean): the crossover is that L
    L, how = rf.measured_crossover([(5.0, 1.2), (3.0, 1.1), (3.0, 0.9)])
    assert L == 3.0 and how == "between L = 3 (ratio 0.9) and L = 3 (ratio 1.1)"
    assert rf.measured_crossover([(1.0, 2.0), (6.0, 1.1)]) == (None, "not bracketed: every ratio above 1 over L = 1 … 6")


def test_matched_arm_split_removes_the_draft():
    dm = _record(32, "draft_model", 5, 5.0, name="draft--mv5", acceptance="mv5")
    ng = _record(32, "ngram", 5, 5.0, name="ngram--mv5", acceptance="mv5")
    res = rf.model_cells(_records([dm, ng]), _lookup, [_calibration()], resamples=0)
    row = res.cells.filter(pl.col("cell_name") == "draft--mv5").row(0, named=True)
    e_round = lambda r: r["energy_j"] * r["batch_size"] / (r["committed_tokens"] - r["accepted_tokens"])  # noqa: E731
    assert row["energy_draft_share_matched"] == pytest.approx(1 - e_round(ng) / e_round(dm))
    assert row["matched_cell_name"] == "ngram--mv5"
    assert 0 < row["energy_draft_share_matched"] < 1


# ------------------------------------------------------------------------------------------------
# bad input

def test_a_shape_lacking_a_field_is_not_modelled_naming_it():
    broken = replace(MOE, num_experts=None)
    with pytest.raises(rf.NotModelled, match="lacks field 'num_experts'"):
        rf.target_pass(broken, 1, 1, 100)
    no_heads = replace(DENSE, num_attention_heads=None)
    res = rf.model_cells(_records([_record(4, "draft_model", 5, 3.0)]),
                         lambda p, r: {"target": no_heads, "draft": DRAFT}[p], [_calibration()], resamples=0)
    assert set(res.cells["model_status"]) == {"not_modelled"}
    assert res.cells["not_modelled_reason"].str.contains("lacks field 'num_attention_heads'").all()
    assert res.cells["predicted_mj_per_committed_token"].is_null().all()  # never a zero


def test_no_calibration_and_unknown_shapes_say_so():
    res = rf.model_cells(_records(), _lookup, [], resamples=0)
    assert res.cells["not_modelled_reason"].str.contains("no hardware calibration for GPU GPU-synthetic").all()

    def reader_error(path, role):
        raise ValueError(f"{path}/config.json: field 'hidden_size' missing")

    res = rf.model_cells(_records(), reader_error, [_calibration()], resamples=0)
    assert res.cells["not_modelled_reason"].str.contains("field 'hidden_size' missing").all()


def test_drafter_method_without_a_drafter_shape_is_named():
    with pytest.raises(rf.NotModelled, match="no drafter shape is known"):
        rf.cell_work(_record(4, "draft_model", 5, 3.0), DENSE, None)


# ------------------------------------------------------------------------------------------------
# the check and the curves

def test_model_residual_check_flags_big_misses_and_skips_the_unpriced():
    df = pl.DataFrame({
        "campaign_id": ["c"] * 4, "cell_name": ["ok", "far", "unpriced", "unmetered"], "run_order_index": [0, 1, 2, 3],
        "mj_per_committed_token": [10.0, 20.0, 5.0, None],
        "roofline_status": ["modelled", "modelled", "not_modelled", "modelled"],
        "roofline_reason": [None, None, "target shape x lacks field 'head_dim'", None],
        "roofline_residual": [0.05, 0.9, None, None], "roofline_predicted_mj": [9.5, 10.5, None, 3.0]})
    th = checks_mod.Thresholds.from_config({})
    assert th.model_residual_max == 0.25
    out = checks_mod.run_checks(df.with_columns(pl.lit("point").alias("role")), th, None, only=["model_residual"])
    row = out.row(0, named=True)
    assert row["status"] == "flag" and row["cell_names"] == ["far"] and row["value"] == pytest.approx(0.9)
    assert "predicted 10.5" in row["detail"]
    # Without any prediction the check is not applicable, and says why.
    bare = checks_mod.run_checks(df.drop("roofline_status", "roofline_reason", "roofline_residual",
                                         "roofline_predicted_mj").with_columns(pl.lit("point").alias("role")),
                                 th, None, only=["model_residual"])
    assert bare["status"].to_list() == ["not_applicable"] and "no roofline prediction" in bare["detail"][0]


def test_curves_gain_the_model_columns():
    res = rf.model_cells(_records([_record(8, "draft_model", 5, 4.0)]), _lookup, [_calibration()], resamples=0)
    curves = pl.DataFrame({"cell_id": ["c-draft_model--b8"], "energy_refused_reason": [None]},
                          schema={"cell_id": pl.String, "energy_refused_reason": pl.String})
    out = rf.attach_to_curves(curves, res.cells)
    for col in ("predicted_mj_per_committed_token", "residual", "energy_verify_share", "energy_draft_share",
                "energy_idle_share"):
        assert out[col][0] is not None, col
    refused = rf.attach_to_curves(curves.with_columns(pl.lit("energy_measured fail").alias("energy_refused_reason")),
                                  res.cells)
    assert refused["residual"][0] is None and refused["predicted_mj_per_committed_token"][0] is not None
    # With a campaign id, the campaign's column follows the cell's (the order derive's curves are checked against).
    named = rf.attach_to_curves(curves.with_columns(pl.lit("c").alias("campaign_id")), res.cells)
    assert tuple(named.columns) == ("cell_id", "energy_refused_reason", "campaign_id", *rf.CURVE_ROOFLINE_COLUMNS,
                                    *rf.CURVE_CAMPAIGN_ROOFLINE_COLUMNS)
    assert named["baseline_below_expert_floor"][0] is None  # a dense target: no floor, no verdict


def test_plan_prints_labelled_predictions(tmp_path):
    records_path = tmp_path / "records.parquet"
    _records().write_parquet(records_path)
    hw_dir = tmp_path / "hardware"
    hw_dir.mkdir()
    (hw_dir / f"{GPU}-580.json").write_text(json.dumps(_calibration()))

    class PlannedCell:
        engine, cuda_graphs = "vllm", True

        def __init__(self, row):
            self.row = row

        def identity(self):
            return self.row

    planned = _record(16, "draft_model", 5, 3.0, name="draft--new")
    planned.update(cell_id="never-measured", configured_L=3.0)
    text = rf.plan_predictions([PlannedCell(planned)], str(records_path), str(hw_dir), lookup=_lookup)
    assert "PREDICTION (not measured) c/draft--new: predicted energy ratio" in text
    assert "coefficients fitted on 7 baseline cell(s)" in text
    assert rf.plan_predictions([PlannedCell(planned)], str(records_path), str(tmp_path / "none"), lookup=_lookup) == ""


def test_real_h200_calibration_drives_the_model():
    """The committed H200 calibration as the prior: constants come through unchanged into the fit table."""
    cal = json.loads((Path(__file__).parent / "data" / "hardware" / "h200-firecracker-2026-12-01.json").read_text())
    hw = rf.hardware_from_calibration(cal, "GPU-other", "same GPU model")
    assert hw.balance_point == pytest.approx(cal["constants"]["balance_point_op_per_byte"])
    # GPM during the calibration kernels scales a cell's counters to op/B: at the copy's own DRAM share and the
    # matmul's tensor share the measured intensity is the matmul rate over the copy rate.
    copy_k, mm_k = cal["raw"]["kernels"]["copy"], cal["raw"]["kernels"]["matmul"]
    expected = (mm_k["ops_per_iter"] * mm_k["iters"] / mm_k["kernel_s"]) / (
        copy_k["hbm_bytes_per_iter"] * copy_k["iters"] / copy_k["kernel_s"])
    assert hw.measured_op_per_byte(copy_k["gpm"]["dram_bw_util_pct"], mm_k["gpm"]["tensor_active_pct"]) \
        == pytest.approx(expected)
    assert math.isfinite(hw.prior.j_per_op) and hw.prior.j_per_op > 0


def test_residual_bound_is_preregistered_in_the_config_and_defaults_without_changing_hashes():
    from specjoule import config

    assert checks_mod.Thresholds.from_config({"model_residual_max": 0.1}).model_residual_max == 0.1
    with pytest.raises(config.ConfigError, match="checks.model_residual_max"):
        checks_mod.Thresholds.from_config({"model_residual_maximum": 0.1})
    # No schema default: a config that leaves it unset validates to the same dict (and hash) as before.
    props = config._schema()["properties"]["checks"]["properties"]
    assert "default" not in props["model_residual_max"]


def test_a_drafter_pass_pays_the_fixed_pass_time_in_proportion_to_its_layers():
    """ADR 0182: t0 is fitted on target steps; a one-layer EAGLE3 head of a 48-layer MoE target pays 1/48 of it
    per pass (the H200 round profile of 2026-12-02: 0.26 ms per head pass against a 2.9 ms fitted t0)."""
    from specjoule import models

    target = models.describe("config/models/qwen3-30b-a3b")
    head = models.describe_drafter("config/models/qwen3-30b-a3b-eagle3")
    assert (target.num_layers, head.num_layers) == (48, 1)
    assert rf.draft_overhead_share(target, head) == pytest.approx(1 / 48)
    mtp = models.describe_drafter("config/models/mimo-7b")  # the target's own MTP layer
    assert rf.draft_overhead_share(models.describe("config/models/mimo-7b"), mtp) == pytest.approx(1 / 36)
    assert rf.draft_overhead_share(DENSE, DRAFT) == pytest.approx(24 / 36)
    assert rf.draft_overhead_share(DENSE, object()) == 1.0  # a count unknown: the whole t0, as before
    # In a prediction: three head passes add 3/48 of t0, not 3 t0.
    tm = rf.TimeModel(0.0029, 1.0, rf.Ceilings(BW, OPS))
    tiny = rf.PassCost(0.0, 0.0)
    work = rf.CellWork(1.0, 4.0, 4.0, 512.0, tiny, tiny, 3, tiny, 0, None, rf.draft_overhead_share(target, head))
    p = rf.predict(work, rf.Coefficients(100.0, 0.0, 0.0), tm)
    assert p.round_s == pytest.approx(0.0029 * (1 + 3 / 48))


# ------------------------------------------------------------------------------------------------
# the routed-expert floor (ADR 0242)

def test_routed_expert_bytes_are_the_experts_uniform_routing_expects_and_none_for_a_dense_shape():
    assert rf.routed_expert_bytes(DENSE, 128) is None
    for n in (1, 32, 128):
        distinct = 128 * (1 - (1 - 8 / 128) ** n)  # written out, not the module's helper
        assert rf.routed_expert_bytes(MOE, n) == pytest.approx(48 * distinct * PER_EXPERT * 2)
    # They are the part of a pass's weight bytes that routing decides: a pass over 32 tokens reads, beyond what a
    # pass over none would, those experts and its 32 rows of the untied input embedding.
    extra = (rf.weight_params_read(MOE, 32) - rf.weight_params_read(MOE, 0.0)) * 2
    assert extra == pytest.approx(rf.routed_expert_bytes(MOE, 32) + 32 * 2048 * 2)


def _moe_lookup(path: str, role: str):
    return {"target": MOE, "draft": DRAFT}[path]


def test_a_moe_round_shorter_than_reading_its_routed_experts_is_below_the_floor_and_its_campaign_says_so():
    """The floor is the routed experts a B x w verify pass touches under uniform routing over the board's
    calibrated HBM bytes/s; a measured round (drafts and host time included) below it read fewer experts."""
    floor_ms = {b: 1e3 * 48 * 128 * (1 - (1 - 8 / 128) ** b) * PER_EXPERT * 2 / BW for b in SWEEP}
    rows = _records().to_dicts()
    for r in rows:  # every baseline step twice its floor, but B = 32's at 0.6 of it; B = 64 has no round time
        b = r["batch_size"]
        r["round_time_ms"] = None if b == 64 else floor_ms[b] * (0.6 if b == 32 else 2.0)
    point = _record(32, "draft_model", 5, 4.0)
    # Just below the floor of its 32 x 6 verify tokens, yet 13 % above that of 32 tokens: the width counts.
    point["round_time_ms"] = 1e3 * 48 * 128 * (1 - (1 - 8 / 128) ** (32 * 6)) * PER_EXPERT * 2 / BW * 0.99
    records = pl.DataFrame(rows + [point], infer_schema_length=None)
    cells = rf.model_cells(records, _moe_lookup, [_calibration()], resamples=0).cells
    got = dict(cells.select("cell_name", "below_expert_floor").iter_rows())
    assert got["baseline--b32"] is True and got["draft_model--b32"] is True
    assert got["baseline--b64"] is None  # no round time: no verdict, not False
    assert all(got[f"baseline--b{b}"] is False for b in SWEEP if b not in (32, 64))
    floors = dict(cells.select("cell_name", "expert_floor_ms").iter_rows())
    assert floors["baseline--b8"] == pytest.approx(floor_ms[8])
    # Dense targets have no routed experts: both columns null.
    dense = rf.model_cells(records, _lookup, [_calibration()], resamples=0).cells
    assert dense["expert_floor_ms"].is_null().all() and dense["below_expert_floor"].is_null().all()
    # The curves: the point's own verdict and its campaign's baselines' (any below).
    curves = pl.DataFrame({"cell_id": [point["cell_id"]], "campaign_id": ["c"]})
    out = rf.attach_to_curves(curves, cells).row(0, named=True)
    assert out["below_expert_floor"] is True and out["baseline_below_expert_floor"] is True
