"""Open loop beside matched concurrency in the report (issue 19 item 5, ADR 0178): both sides from crafted
records with known running requests and energies, the sign of each arm's ratio on each side, "not measured"
for a side with no cells (naming what pre-registers it), and the committed open-loop H200 evidence."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from specjoule.report import loops
from specjoule.report import render as R

REPO = Path(__file__).resolve().parents[1]
OPENLOOP = REPO / "validation" / "h200-2026-12" / "session-2026-12-01" / "openloop"

# (workload, kind, load, arm, L, mean running requests, mJ/token): the blog's confound, made up but shaped like
# the H200's open loop — at 3 req/s L = 1 runs 28 requests at once and looks cheaper; at 3 clients it costs.
BASE_MJ = {"poisson3": 360.0, "conc3": 365.0}
ARMS = [("poisson3", "open_loop", 3.0, "baseline", None, 3.3, 360.0),
        ("poisson3", "open_loop", 3.0, "draft", 1.0, 28.3, 275.0),
        ("poisson3", "open_loop", 3.0, "draft", 6.0, 5.5, 200.0),
        ("conc3", "closed_loop", 3, "baseline", None, 3.0, 365.0),
        ("conc3", "closed_loop", 3, "draft", 1.0, 3.0, 480.0),
        ("conc3", "closed_loop", 3, "draft", 6.0, 3.0, 300.0)]


def _records(arms=ARMS) -> pl.DataFrame:
    rows = []
    for wl, kind, load, scheme, L, running, mj in arms:
        campaign = f"vllm-qwen3b-{wl}"
        for role in (("opening_baseline", "closing_baseline") if scheme == "baseline" else ("point",)):
            name = f"baseline--{role[:4]}" if scheme == "baseline" else f"draft--mv{L:g}"
            rows.append({"campaign_id": campaign, "cell_name": name, "role": role, "engine": "vllm",
                         "model_pair": "qwen3b", "corpus": "random", "cuda_graphs": True, "prompt_len": 512,
                         "output_len": 256, "workload": wl, "workload_kind": kind, "scheme": scheme,
                         "acceptance_name": None if L is None else f"mv{L:g}",
                         "request_rate": float(load) if kind == "open_loop" else None,
                         "concurrency": int(load) if kind == "closed_loop" else None,
                         "mean_running_requests": running, "mj_per_committed_token": mj,
                         "baseline_mj_per_committed_token": BASE_MJ[wl], "status": None})
    return pl.DataFrame(rows)


def _checks() -> pl.DataFrame:
    return pl.DataFrame([
        {"check": "batch_shape", "campaign_id": "vllm-qwen3b-poisson3", "cell_names": ["draft--mv1", "draft--mv6"],
         "status": "fail", "value": 7.6, "threshold": 0.05, "detail": "draft--mv1: mean running requests 28.3"},
        {"check": "batch_shape", "campaign_id": "vllm-qwen3b-conc3", "cell_names": ["draft--mv1", "draft--mv6"],
         "status": "pass", "value": 0.0, "threshold": 0.05, "detail": ""},
        {"check": "steady_state", "campaign_id": "vllm-qwen3b-conc3", "cell_names": ["draft--mv1"],
         "status": "pass", "value": 0.02, "threshold": 0.1, "detail": ""},
        {"check": "baseline_drift", "campaign_id": "vllm-qwen3b-conc3", "cell_names": [],
         "status": "pass", "value": 0.01, "threshold": 0.02, "detail": ""}])


def test_both_sides_with_running_requests_ratios_and_checks():
    (comp,) = loops.loop_comparison(_records(), _checks())
    open_side, matched = comp.sides["open_loop"], comp.sides["closed_loop"]
    assert open_side.not_measured is None and matched.not_measured is None
    by_arm = {(r["arm"]): r for r in open_side.rows}
    assert by_arm["baseline"]["cells"] == 2 and by_arm["baseline"]["mean_running_requests"] == pytest.approx(3.3)
    assert by_arm["draft · mv1"]["mean_running_requests"] == pytest.approx(28.3)
    assert by_arm["draft · mv1"]["ratio"] == pytest.approx(275.0 / 360.0)
    assert by_arm["draft · mv1"]["checks"] == "batch_shape fail" and by_arm["baseline"]["checks"] == "reference"
    m = {r["arm"]: r for r in matched.rows}
    assert m["draft · mv1"]["ratio"] == pytest.approx(480.0 / 365.0) and m["draft · mv1"]["sign"] == "cost"
    assert m["draft · mv1"]["checks"] == "batch_shape pass, steady_state pass"  # baseline_drift is not a loop check
    assert m["draft · mv1"]["load"] == "3 clients" and by_arm["draft · mv1"]["load"] == "3 req/s"
    signs = {s["arm"]: s for s in comp.signs}
    assert signs["draft · mv1"]["verdict"] == "sign changes: saving in the open loop, cost at matched concurrency"
    assert signs["draft · mv6"]["verdict"] == "same sign (saving both ways)"
    assert signs["draft · mv6"]["matched_ratio"] == pytest.approx(300.0 / 365.0)


def test_a_side_without_cells_says_not_measured_and_what_registers_it():
    open_only = _records([a for a in ARMS if a[1] == "open_loop"])
    (comp,) = loops.loop_comparison(open_only, _checks(), preregistered="config/h200-openloop-matched.yaml")
    assert comp.sides["closed_loop"].not_measured == "not measured (pre-registered: config/h200-openloop-matched.yaml)"
    assert comp.signs[0]["verdict"] == "cannot tell: matched concurrency not measured"
    # The config that ran them registers a closed-loop workload itself: that is named first.
    config = {"workloads": {"poisson3": {"kind": "open_loop"}, "conc3": {"kind": "closed_loop", "concurrency": 3}}}
    (comp,) = loops.loop_comparison(open_only, None, config)
    assert comp.sides["closed_loop"].not_measured == "not measured (pre-registered in this config: workload conc3)"
    assert all(r["checks"] == "no checks" for r in comp.sides["open_loop"].rows)
    closed_only = _records([a for a in ARMS if a[1] == "closed_loop"])
    (comp,) = loops.loop_comparison(closed_only)
    assert comp.sides["open_loop"].not_measured == "not measured (no cell and no workload of this kind in the config)"
    # No loop at all: no section, and unsupported records never count.
    closed_batch = _records().with_columns(pl.lit("closed_batch").alias("workload_kind"))
    assert loops.loop_comparison(closed_batch) == []
    unsupported = _records().with_columns(pl.lit("unsupported").alias("status"))
    assert loops.loop_comparison(unsupported) == []


def test_families_are_kept_apart():
    other = _records().with_columns(pl.lit("sglang").alias("engine"),
                                    (pl.col("campaign_id").str.replace("vllm", "sglang")))
    comps = {c.family["engine"]: c for c in loops.loop_comparison(pl.concat([_records(), other]), _checks())}
    assert set(comps) == {"vllm", "sglang"}
    # sglang's campaigns have no checks of their own: nothing borrowed from vLLM's.
    assert {r["checks"] for r in comps["sglang"].sides["open_loop"].rows} == {"not checked", "reference"}
    assert "batch_shape fail" in {r["checks"] for r in comps["vllm"].sides["open_loop"].rows}


def test_committed_open_loop_evidence_renders_with_the_matched_side_not_measured():
    records = pl.read_parquet(OPENLOOP / "results" / "records.parquet")
    checks = pl.read_parquet(OPENLOOP / "results" / "checks.parquet")
    (comp,) = loops.loop_comparison(records, checks, preregistered="config/h200-openloop-matched.yaml")
    rows = {r["arm"]: r for r in comp.sides["open_loop"].rows}
    assert rows["draft · mv1"]["mean_running_requests"] == pytest.approx(28.3, abs=0.05)
    assert rows["baseline"]["mean_running_requests"] == pytest.approx(3.3, abs=0.05)
    assert rows["draft · mv1"]["checks"] == "batch_shape fail"
    assert rows["draft · mv1"]["ratio"] == pytest.approx(0.762, abs=0.001)
    md = loops.to_markdown([comp])
    assert "not measured (pre-registered: config/h200-openloop-matched.yaml)" in md
    assert "| draft · mv1 | poisson3 | 3 req/s | 1 | 28.3 |" in md


def _matched_copy(records: pl.DataFrame) -> pl.DataFrame:
    """The committed open-loop records re-labelled as a fixed-concurrency campaign of the same arms, at the
    baseline's concurrency, with the energies the confound predicts (crafted: no such run exists yet)."""
    mj = {"baseline--open": 365.0, "baseline--close": 365.0, "draft--mv1": 480.0, "draft--mv6": 300.0}
    return records.with_columns(
        pl.col("campaign_id").str.replace("poisson3", "conc3"), pl.lit("conc3").alias("workload"),
        pl.lit("closed_loop").alias("workload_kind"), pl.lit(None, pl.Float64).alias("request_rate"),
        pl.lit(3, pl.Int64).alias("concurrency"), pl.lit(3.0).alias("mean_running_requests"),
        pl.col("cell_name").replace_strict(mj, return_dtype=pl.Float64).alias("mj_per_committed_token"),
        pl.lit(365.0).alias("baseline_mj_per_committed_token"))


def test_the_report_shows_both_tables_side_by_side():
    from specjoule import config as config_mod

    config = config_mod.load(REPO / "config" / "h200-openloop-matched.yaml")
    records = pl.read_parquet(OPENLOOP / "results" / "records.parquet")
    checks = pl.read_parquet(OPENLOOP / "results" / "checks.parquet")

    def html_for(recs: pl.DataFrame) -> str:
        return R.render(R.ReportInputs(config=config, config_hash="x", records=recs, checks=checks,
                                       curves=pl.DataFrame(), manifest={"figures": []}, specs={}))

    # The committed open loop under the config that pre-registers its matched side: that side not measured.
    html = html_for(records)
    assert 'id="loops-open_loop"' in html and "28.3" in html
    assert 'data-loop-side="closed_loop">not measured (pre-registered in this config: workload conc3)' in html
    # With a matched campaign of the same arms, both tables and the sign line.
    both = pl.concat([records, _matched_copy(records)], how="diagonal_relaxed")
    html = html_for(both)
    assert 'id="loops-open_loop"' in html and 'id="loops-closed_loop"' in html
    assert "sign changes: saving in the open loop, cost at matched concurrency" in html


MATCHED_H100 = REPO / "validation" / "h100-2026-12" / "session-2026-12-06c" / "openloop-matched-conc3"


def _on_board(records: pl.DataFrame, uuid: str, name: str) -> pl.DataFrame:
    return records.with_columns(pl.lit(uuid).alias("gpu_uuid"), pl.lit([name]).alias("gpu_names"))


def test_each_side_names_its_boards_and_a_sign_read_across_boards_says_so():
    recs = _records()
    one = _on_board(recs, "GPU-aaaaaaaa-1111", "NVIDIA H100 80GB HBM3")
    (same,) = loops.loop_comparison(one, _checks())
    assert same.sides["open_loop"].boards == same.sides["closed_loop"].boards == ("NVIDIA H100 80GB HBM3 (GPU-aaaaaaaa)",)
    assert not any("different boards" in s["verdict"] for s in same.signs)
    apart = pl.concat([_on_board(recs.filter(pl.col("workload") == "poisson3"), "GPU-bbbbbbbb-2222", "NVIDIA H200"),
                       one.filter(pl.col("workload") == "conc3")])
    (comp,) = loops.loop_comparison(apart, _checks())
    assert comp.sides["open_loop"].board_words == "on NVIDIA H200 (GPU-bbbbbbbb)"
    assert all(s["verdict"].endswith("(the sides ran on different boards: each ratio is to its own campaign's baseline)")
               for s in comp.signs)
    md = loops.to_markdown([comp])
    assert "on NVIDIA H200 (GPU-bbbbbbbb)\n" in md and "on NVIDIA H100 80GB HBM3 (GPU-aaaaaaaa)\n" in md
    assert loops.loop_comparison(recs, _checks())[0].sides["open_loop"].board_words == "board not recorded"


def _ratios_to_mean_baseline(records: pl.DataFrame) -> dict[str, float]:
    """Each cell's energy per committed token over its campaign's mean of the opening and closing baselines."""
    by = {r["cell_name"]: r["energy_j"] / r["committed_tokens"] for r in records.iter_rows(named=True)}
    base = (by["baseline--open"] + by["baseline--close"]) / 2
    return {name: mj / base for name, mj in by.items()}


def _committed_family(folder: Path) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, dict], dict[str, float]]:
    """A committed loop family's records and checks, its records by cell, and each cell's ratio to the mean baseline."""
    rec = pl.read_parquet(folder / "results" / "records.parquet")
    chk = pl.read_parquet(folder / "results" / "checks.parquet")
    return rec, chk, {r["cell_name"]: r for r in rec.iter_rows(named=True)}, _ratios_to_mean_baseline(rec)


def _committed_side_by_side(capsys, open_dir: Path, matched_dir: Path, committed: Path) -> str:
    """The loops CLI over two evidence folders (``--also``), which must print the committed comparison byte for byte."""
    loops.main([str(open_dir / "results" / "records.parquet"), str(open_dir / "results" / "checks.parquet"), "--also",
                str(matched_dir / "results" / "records.parquet"), str(matched_dir / "results" / "checks.parquet")])
    md = capsys.readouterr().out
    assert md == committed.read_text()
    return md


def test_committed_matched_concurrency_on_an_h100_changes_l1s_sign(capsys):
    """Issue 19 item 5 (validation/h100-2026-12/session-2026-12-06c): the blog's arms at 3 clients. L = 1 costs
    3.96 × the baseline's energy per token at equal concurrency where the open loop (H200, 2026-12-01) showed a
    0.762 × "saving" at 28.3 running requests; mv6's steady_state failed (a quarter at 2.63 running) and stays so."""
    rec, chk, by, ratio = _committed_family(MATCHED_H100)
    assert ratio["draft--mv1"] == pytest.approx(3.958, abs=0.001)
    assert ratio["draft--mv6"] == pytest.approx(0.655, abs=0.001)
    assert {r["concurrency"] for r in by.values()} == {3}
    assert all(abs(r["mean_running_requests"] - 3) < 0.25 for r in by.values())
    steady = chk.filter(pl.col("check") == "steady_state").row(0, named=True)
    assert (steady["status"], steady["cell_names"], steady["threshold"]) == ("fail", ["draft--mv6"], 0.1)
    assert min(by["draft--mv6"]["running_requests_segments"]) == pytest.approx(2.63, abs=0.005)
    assert chk.filter(pl.col("status") == "fail")["check"].to_list() == ["steady_state"]
    md = _committed_side_by_side(capsys, OPENLOOP, MATCHED_H100, MATCHED_H100 / "open-vs-matched.md")
    assert ("draft · mv1: open loop 0.762×, matched concurrency 3.958× — sign changes: saving in the open loop, "
            "cost at matched concurrency") in md
    assert "| draft · mv6 | conc3 | 3 clients | 1 | 2.78 | 302.7 | 461.9 | 0.655× | saving | batch_shape pass, steady_state fail |" in md


OPEN_H100 = REPO / "validation" / "h100-2026-12" / "session-2026-12-06d" / "openloop-matched-poisson3"


def test_committed_open_loop_on_an_h100_beside_the_matched_h100_family_changes_l1s_sign(capsys):
    """Issue 19 item 5 on one board class (2026-12-06d open loop, 2026-12-06c fixed concurrency, two H100s): at
    3 requests/s every arm commits the offered load, L = 1 batches 25 requests against the baseline's 3 and "saves"
    30 %; held at 3 clients it costs 3.96 ×. The sides ran on two boards, and the sign line says so."""
    rec, chk, by, ratio = _committed_family(OPEN_H100)
    assert ratio["draft--mv1"] == pytest.approx(0.696, abs=0.001)
    assert ratio["draft--mv6"] == pytest.approx(0.548, abs=0.001)
    assert {r["workload_kind"] for r in by.values()} == {"open_loop"} and {r["request_rate"] for r in by.values()} == {3.0}
    # the confound the matched side removes: L = 1 ran eight times the baseline's batch, at the same tokens per second
    assert by["draft--mv1"]["mean_running_requests"] > 8 * by["baseline--open"]["mean_running_requests"]
    rates = [r["committed_tokens"] / r["window_s"] for r in by.values()]
    assert max(rates) / min(rates) < 1.01
    shape = chk.filter(pl.col("check") == "batch_shape").row(0, named=True)
    assert shape["status"] == "fail" and set(shape["cell_names"]) == {"draft--mv1", "draft--mv6"}
    assert chk.filter(pl.col("status") == "fail")["check"].to_list() == ["batch_shape"]
    assert set(rec["gpu_uuid"]) != set(pl.read_parquet(MATCHED_H100 / "results" / "records.parquet")["gpu_uuid"])
    md = _committed_side_by_side(capsys, OPEN_H100, MATCHED_H100, OPEN_H100 / "open-vs-matched.md")
    assert ("draft · mv1: open loop 0.696×, matched concurrency 3.958× — sign changes: saving in the open loop, cost at "
            "matched concurrency (the sides ran on different boards") in md
    assert "draft · mv6: open loop 0.548×, matched concurrency 0.655× — same sign (saving both ways)" in md


def test_adr_0111_addendum_turnover_is_the_committed_records_read_again():
    """ADR 0111's 2026-12-06c table: each cell's turnover, (in flight − running) / requests per second, in ms and in
    the cell's own round (or step), from the committed H100 records."""
    adr = (REPO / "docs" / "adr" / "0111-closed-loop-fixed-concurrency.md").read_text()
    rec = {r["cell_name"]: r for r in
           pl.read_parquet(MATCHED_H100 / "results" / "records.parquet").iter_rows(named=True)}
    for r in rec.values():
        assert r["mean_inflight"] == pytest.approx(3, abs=0.001) and r["waiting_requests_mean"] == 0

    def turnover(name: str) -> tuple[float, float]:
        r = rec[name]
        ms = (r["mean_inflight"] - r["mean_running_requests"]) / r["realized_request_rate"] * 1000
        return ms, ms / r["round_time_ms"]

    (bo, bo_n), (bc, bc_n) = turnover("baseline--open"), turnover("baseline--close")
    assert f"| {bo:.1f} / {bc:.1f} ms | {bo_n:.1f} / {bc_n:.1f} |" in adr
    for name, label in (("draft--mv6", "draft L = 6"), ("draft--mv1", "draft L = 1")):
        ms, n = turnover(name)
        r = rec[name]
        assert (f"| {label} | {r['mean_running_requests']:.3f} | {r['realized_request_rate']:.3f} | "
                f"{r['round_time_ms']:.2f} ms | {ms:.1f} ms | {n:.1f} |") in adr
    # longer rounds, longer turnovers: the ordering the addendum reads
    assert turnover("draft--mv1")[0] > turnover("draft--mv6")[0] > 2 * max(bo, bc)


def test_a_side_without_board_columns_is_not_called_apart():
    recs = _records()
    one = _on_board(recs.filter(pl.col("workload") == "poisson3"), "GPU-bbbbbbbb-2222", "NVIDIA H200")
    (comp,) = loops.loop_comparison(pl.concat([one, recs.filter(pl.col("workload") == "conc3")], how="diagonal"),
                                    _checks())
    assert comp.sides["closed_loop"].board_words == "board not recorded"
    assert comp.signs and not any("different boards" in s["verdict"] for s in comp.signs)


def test_the_cli_names_a_missing_file_and_exits_2(tmp_path, capsys):
    o = OPENLOOP / "results"
    with pytest.raises(SystemExit) as exc:
        loops.main([str(o / "records.parquet"), str(o / "checks.parquet"), "--also", str(tmp_path / "r.parquet"),
                    str(o / "checks.parquet")])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"loops: no such file: --also 1 = {tmp_path / 'r.parquet'}\n"
