"""Engine sharing in the workflow (ADR 0017): engine groups, their chained order, incremental planning,
and one real CPU run of a shared-engine grid through Snakemake."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from snakemake_api import REPO, materialize, plan, write_config

from specjoule import cells, config, engine_jobs, records, resolve_models

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def shared_raw(batch_sizes=(2, 4), share: bool = True) -> dict:
    """The demo pair with baseline + ngram k=3 (+ draft k=3), two batch sizes, short windows."""
    raw = yaml.safe_load((REPO / "config/config.yaml").read_text())
    raw["batch_sizes"] = list(batch_sizes)
    raw["workloads"]["closed"]["min_window_s"] = 1
    raw["protocol"]["share_engines"] = share
    return raw


def group_jobs(counts) -> int:
    """Jobs whose output is an engine-group job's done file (ADR 0140)."""
    return sum(1 for p in counts["_outputs"] if p.startswith(engine_jobs.GROUPS_DIR + "/"))


def record_outputs(counts) -> set[str]:
    """The records the planned GPU jobs will write."""
    return set(counts["_measures"])


def dag_of(workdir: Path, configfile: Path, snakefile: Path | None = None):
    """The engine-group jobs of a dry run with each job's inputs, outputs, shell command, group, runtime and
    the records it measures (real Snakemake API)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wapi = api.workflow(resource_settings=ResourceSettings(cores=1, resources={"gpu": 1}),
                            config_settings=ConfigSettings(configfiles=[configfile.resolve()]),
                            storage_settings=StorageSettings(), snakefile=snakefile or REPO / "Snakefile",
                            workdir=workdir)
        wapi.dag(dag_settings=DAGSettings()).execute_workflow(executor="local", pseudo_executor="dryrun")
        jobs = [j for j in wapi._workflow.dag.needrun_jobs(exclude_finished=False) if j.rule.name == "run_cell"]
        return [(j.wildcards.group, [str(f) for f in j.input], [str(f) for f in j.output], str(j.shellcmd),
                 j.group, j.resources.get("runtime"), list(j.params.records)) for j in jobs]


# ------------------------------------------------------------------------------------------------
# the cell table


def test_sharing_changes_no_id_path_or_campaign_only_the_point_order():
    off = cells.build(config.validate(shared_raw(share=False)))
    on = cells.build(config.validate(shared_raw(share=True)))
    assert {c.record_path: c.cell_id for c in off} == {c.record_path: c.cell_id for c in on}
    assert {k: sorted(c.name for c in v) for k, v in off.campaigns.items()} == \
           {k: sorted(c.name for c in v) for k, v in on.campaigns.items()}
    for members in on.campaigns.values():
        assert members[0].role == cells.ROLE_OPENING and members[-1].role == cells.ROLE_CLOSING
        assert [c.run_order_index for c in members] == list(range(len(members)))
    # One point order per family: every campaign of the family runs its points in the same order.
    orders = {tuple(c.name for c in members) for members in on.campaigns.values()}
    assert len(orders) == 1


def test_groups_chain_a_family_opening_points_closing_and_order_members_by_batch():
    raw = shared_raw(batch_sizes=(4, 2))  # listed out of order on purpose
    raw["corpora"]["rand"] = {"source": "random"}
    table = cells.build(config.validate(raw))
    groups = list(table.engine_groups().values())
    # 3 schemes → opening, 2 point groups, closing; 2 B × 2 corpora = 4 members each.
    assert [g.phase for g in groups] == ["opening_baseline", "point", "point", "closing_baseline"]
    assert [g.index for g in groups] == [0, 1, 2, 3]
    for g in groups:
        assert len({c.engine_key for c in g.cells}) == 1
        assert [(c.batch_size, c.corpus) for c in g.cells] == [(2, "code"), (2, "rand"), (4, "code"), (4, "rand")]
    assert sum(len(g.cells) for g in groups) == len(table)
    # The run order of each campaign is the order its cells appear in the chain of groups.
    for members in table.campaigns.values():
        executed = [c for g in groups for c in g.cells if c.campaign_id == members[0].campaign_id]
        assert executed == members
    # The point groups follow the family's shuffle, seeded and salted by the family id.
    point_keys = [g.engine_key for g in groups if g.phase == "point"]
    reseeded = cells.build(config.validate({**raw, "protocol": {**raw["protocol"], "run_order_seed": 7}}))
    assert sorted(point_keys) == sorted(g.engine_key for g in reseeded.engine_groups().values() if g.phase == "point")
    flipped = {**raw, "schemes": dict(reversed(list(raw["schemes"].items())))}
    assert point_keys == [g.engine_key for g in cells.build(config.validate(flipped)).engine_groups().values()
                          if g.phase == "point"]


def test_summary_and_plan_report_engine_starts_in_both_modes(tmp_path):
    off = cells.build(config.validate(shared_raw(share=False)))
    on = cells.build(config.validate(shared_raw(share=True)))
    assert off.engine_starts() == len(off) == 8 and "8 engine starts: one per cell" in off.summary()
    assert on.engine_starts() == 4 and "4 engine starts: one per engine group" in on.summary()
    start = on.engine_start_s + on.idle_s
    assert on.estimated_gpu_s() == pytest.approx(off.estimated_gpu_s() - (8 - 4) * start)
    on.write_plan(tmp_path / "plan.tsv")
    plan_rows = pl.read_csv(tmp_path / "plan.tsv", separator="\t")
    assert plan_rows["engine_start"].sum() == 4
    assert plan_rows["estimated_gpu_s"].sum() == pytest.approx(on.estimated_gpu_s(), abs=len(plan_rows))
    assert plan_rows["engine_group"].n_unique() == 4


def test_share_engines_must_be_a_boolean():
    with pytest.raises(config.ConfigError) as info:
        config.validate(shared_raw() | {"protocol": {"share_engines": "yes"}})
    assert "share_engines" in str(info.value)


# ------------------------------------------------------------------------------------------------
# planning through Snakemake


def test_sharing_with_prefix_caching_is_refused_at_parse_time(tmp_path):
    with pytest.raises(Exception) as info:
        plan(tmp_path, write_config(tmp_path / "bad.yaml", shared_raw() | {"prefix_caching": True}))
    assert "share_engines = true with prefix_caching = true" in str(info.value)


def test_dry_run_has_one_job_per_group_chained_in_order(tmp_path):
    cfg = write_config(tmp_path / "share.yaml", shared_raw())
    table = cells.build(config.load(cfg))
    groups = list(table.engine_groups().values())
    jobs = {name: rest for name, *rest in dag_of(tmp_path, cfg)}
    assert len(jobs) == len(groups) == 4
    previous: list[str] = []
    for g in groups:
        name = next(n for n in jobs if n.startswith(f"g{g.index:02d}-"))
        inp, out, cmd, grp, runtime, measured = jobs[name]
        records_out = [c.record_path for c in g.cells]
        # One static rule; the job's output is its done file, its members are the group's, in run order.
        assert out == [f"{engine_jobs.GROUPS_DIR}/{g.family_id}/{name}.done"] and measured == records_out
        # Chained to the group before it through that job's done file.
        assert [i for i in inp if i.startswith(engine_jobs.GROUPS_DIR)] == previous, f"{name} is not chained"
        # Its models' manifests: the job waits for resolve_models (ADR 0121).
        manifests = [i for i in inp if i.startswith("results/.specjoule/models/")]
        assert manifests == resolve_models.cell_manifest_paths(g.cells[0].spec)
        assert len(inp) == len(previous) + len(manifests)
        # The runner gets the members in run order, each with the id the plan gave it; the job first claims them.
        assert cmd.index(records_out[0]) < cmd.index(records_out[-1])
        assert all(f"--cell-id {c.cell_id}" in cmd for c in g.cells) and "exec " in cmd and "--log" in cmd
        version = config.load(cfg)["version"]
        claims = cmd.split("; exec ")[0]
        assert all(f"{cells.STAMPS_DIR}/{c.campaign_id}/{engine_jobs.claim_name(c, version, name)}" in claims
                   for c in g.cells)
        assert grp == "campaign"
        assert runtime == max(5, int(table.group_estimated_s(g) / 60 * 1.5 + 5))
        previous = out
    off = plan(tmp_path / "off", write_config(tmp_path / "off.yaml", shared_raw(share=False)))
    assert off["run_cell"] == 8 and group_jobs(off) == 0


def test_profile_settings_for_run_cell_apply_to_group_jobs(tmp_path):
    # The SLURM profile sets GPU model, memory and CPUs under `set-resources: run_cell:`.
    cfg = write_config(tmp_path / "share.yaml", shared_raw())
    out = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n", "--cores", "2",
                          "--configfile", str(cfg), "--set-resources", "run_cell:mem_mb=1234", "run_cell:gpu_model=h200",
                          "--set-threads", "run_cell=2"], capture_output=True, text=True, check=True)
    import re

    blocks = re.findall(r"rule run_cell:(.*?)(?=\n\s*\[|\nJob stats)", out.stdout, re.S)
    assert len(blocks) == 4
    for b in blocks:
        assert "threads: 2" in b and "gpu=1" in b and "gpu_model=h200" in b and "mem_mb=1234" in b, b


def test_incremental_a_new_batch_size_plans_only_its_cells(workflow, tmp_path):
    snakefile, work = workflow
    cfg = write_config(tmp_path / "share.yaml", shared_raw())
    materialize(work, cfg, snakefile)  # stamps are outputs too: the touch run leaves them all
    assert group_jobs(plan(work, cfg, snakefile=snakefile)) == 0

    grown_raw = shared_raw(batch_sizes=(2, 4, 8))
    grown = write_config(tmp_path / "grown.yaml", grown_raw)
    new = {c.record_path for c in cells.build(config.validate(grown_raw))} - \
          {c.record_path for c in cells.build(config.load(cfg))}
    counts = plan(work, grown, snakefile=snakefile)
    assert record_outputs(counts) == new and len(new) == 4
    assert group_jobs(counts) == 4  # the same four groups, each with only the B=8 member

    # A new scheme re-plans, per campaign, everything from its place in the order onward (as the chain does).
    more = copy.deepcopy(grown_raw)
    more["batch_sizes"] = [2, 4]
    more["schemes"]["ngram5"] = {"method": "ngram", "k": 5}
    table = cells.build(config.validate(more))
    planned = record_outputs(plan(work, write_config(tmp_path / "more.yaml", more), snakefile=snakefile))
    for members in table.campaigns.values():
        first = next(i for i, c in enumerate(members) if c.scheme == "ngram5")
        assert {c.record_path for c in members[first:]} <= planned
        assert not {c.record_path for c in members[:first]} & planned


def test_version_bump_and_a_stale_stamp_replan(workflow, tmp_path):
    snakefile, work = workflow
    raw = shared_raw()
    cfg = write_config(tmp_path / "share.yaml", raw)
    materialize(work, cfg, snakefile)
    bumped = write_config(tmp_path / "bumped.yaml", {**raw, "version": raw.get("version", 1) + 1})
    assert len(record_outputs(plan(work, bumped, snakefile=snakefile))) == 8
    # A changed measured parameter keeps the path but not the id: the old stamp no longer matches.
    changed = copy.deepcopy(raw)
    changed["workloads"]["closed"]["output_len"] = 16
    assert len(record_outputs(plan(work, write_config(tmp_path / "changed.yaml", changed), snakefile=snakefile))) == 8


def _fake_record(work: Path, cell: cells.Cell, version: int) -> None:
    # Only what planning reads from a record measured without sharing (no stamp): its id and version.
    path = work / cell.record_path
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"cell_id": [cell.cell_id], "version_param": [version]}).write_parquet(path)


def test_switching_sharing_on_keeps_records_measured_without_it(workflow, tmp_path):
    snakefile, work = workflow
    raw = shared_raw()
    table = cells.build(config.validate(raw))
    version = config.validate(raw)["version"]
    stale = table.cells[3]
    for c in table:
        _fake_record(work, c, version)
        (work / c.timeline_path).parent.mkdir(parents=True, exist_ok=True)
        (work / c.timeline_path).touch()
    # One record holds another id (a parameter changed since it was measured): its campaign re-plans from it.
    pl.DataFrame({"cell_id": ["000000000000"], "version_param": [version]}).write_parquet(work / stale.record_path)
    before = {p: p.stat().st_mtime_ns for p in (work / "results").rglob("*")}
    planned = record_outputs(plan(work, write_config(tmp_path / "share.yaml", raw), snakefile=snakefile))
    campaign = table.campaigns[stale.campaign_id]
    assert planned == {c.record_path for c in campaign[stale.run_order_index:]}
    # Planning verified the records by reading them and wrote nothing (ADR 0140).
    assert {p: p.stat().st_mtime_ns for p in (work / "results").rglob("*")} == before


# ------------------------------------------------------------------------------------------------
# one real run on vLLM CPU


@pytest.mark.engine
def test_shared_engine_run_end_to_end(tmp_path):
    """baseline + ngram k=3 at B ∈ {2, 4}: 4 cells on 2 engine starts, through Snakemake for real. No closing
    baseline (ADR 0199): a third start would repeat the opening group's engine; the chain of groups, their order and
    the closing phase's place in it are planned and checked without an engine (test_groups_chain_…, the dry run),
    and the demo run measures a closing baseline."""
    raw = shared_raw()
    del raw["schemes"]["draft"]
    raw["protocol"]["closing_baseline"] = False
    cfg = write_config(tmp_path / "share.yaml", raw)
    work = tmp_path / "work"
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", "--resources", "gpu=1",
           "--configfile", str(cfg)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        pytest.fail(f"shared-engine pipeline failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    table = cells.build(config.load(cfg))
    groups = list(table.engine_groups().values())
    assert len(table) == 4 and len(groups) == 2

    logs = sorted((work / "results/logs/engines").rglob("*.log"))
    ready = sum(p.read_text().count("engine: ready") for p in logs)
    assert len(logs) == ready == 2 < len(table)

    rows = records.read_records([work / c.record_path for c in table]).to_pylist()
    by_path = {f"results/cells/{r['campaign_id']}/{r['cell_name']}.parquet": r for r in rows}
    assert set(by_path) == {c.record_path for c in table}
    for g in groups:
        members = [by_path[c.record_path] for c in g.cells]
        assert len({r["engine_instance"] for r in members}) == 1
        assert all(r["engine_shared_cells"] == len(g.cells) == 2 for r in members)
    assert len({r["engine_instance"] for r in rows}) == 2
    for r in rows:
        # Each cell's counters are its own batch's, though the engine was built for B = 4.
        assert r["committed_tokens"] == r["repeats"] * r["batch_size"] * r["output_len"] > 0
        assert r["requests_failed"] == 0

    # run_order_index is the order the cells ran in: inside a campaign, and along the family's chain.
    executed = [c.record_path for g in groups for c in g.cells]
    starts = [by_path[p]["window_start"] for p in executed]
    assert starts == sorted(starts)
    for cid, members in table.campaigns.items():
        recorded = sorted((r for r in rows if r["campaign_id"] == cid), key=lambda r: r["run_order_index"])
        assert [r["cell_name"] for r in recorded] == [c.name for c in members]
        assert [r["window_start"] for r in recorded] == sorted(r["window_start"] for r in recorded)

    checks = pl.read_parquet(work / "results/checks.parquet")
    assert set(checks.filter(pl.col("check") == "preregistration")["status"]) == {"pass"}
    assert set(checks.filter(pl.col("check") == "baseline_present")["status"]) == {"pass"}
    failed = checks.filter(pl.col("status") == "fail")
    # Without a GPU meter energy is not measured (energy_measured fails by design); CPU timing drift
    # may fail baseline_drift. Nothing else may fail.
    assert set(failed["check"]) <= {"energy_measured", "baseline_drift"}, failed.select("check", "detail").to_dicts()
    assert (work / "results/report.html").exists()
    # A complete shared run plans nothing (stamps and records in place).
    assert group_jobs(plan(work, cfg)) == 0
