"""Dry runs through Snakemake's Python API: planning, campaigns, incrementality, parse-time errors."""

import copy

import pytest
import yaml
from snakemake_api import REPO, materialize, plan, write_config

from specjoule import cells, config


def demo_raw() -> dict:
    return yaml.safe_load((REPO / "config/config.yaml").read_text())


def run_cell_outputs(counts) -> set[str]:
    """The records the planned GPU jobs will write (one cell per job, or an engine group's members)."""
    return set(counts["_measures"])


# The user's examples (config/) and the configs of past H200 runs, kept next to their evidence (ADR 0141).
SHIPPED = sorted(str(p.relative_to(REPO)) for p in [*(REPO / "config").glob("*.yaml"),
                                                    *(REPO / "validation").glob("*/config/*.yaml")]
                 if p.name != "schema.yaml")


@pytest.mark.parametrize("configfile", SHIPPED)
def test_every_shipped_config_plans(configfile, tmp_path):
    counts = plan(tmp_path, REPO / configfile)
    table = cells.build(config.load(REPO / configfile))
    if table.share_engines:  # one job per engine group (ADR 0017, 0140)
        groups = counts["run_cell"]
        assert groups == len(table.engine_groups()) <= len(table)
        # a group planned unsupported is a job that writes its records without an engine start (ADR 0063)
        unsupported = sum(all(c.unsupported_reason for c in g.cells) for g in table.engine_groups().values())
        assert table.engine_starts() == groups - unsupported
    else:
        assert counts["run_cell"] == len(table)
    assert run_cell_outputs(counts) == {c.record_path for c in table}
    assert counts["report"] == 1


def test_campaign_order_is_in_the_dag(tmp_path):
    cfg = config.load(REPO / "config/config.yaml")
    table = cells.build(cfg)
    (campaign, members), = table.campaigns.items()
    assert [c.role for c in members] == ["opening_baseline", "point", "point", "closing_baseline"]
    # The shuffle is recorded and reproducible: same seed, same order.
    assert [c.name for c in cells.build(cfg).campaigns[campaign]] == [c.name for c in members]
    reseeded = cells.build(config.validate({**demo_raw(), "protocol": {"run_order_seed": 1}}))
    orders = {tuple(c.name for c in t.campaigns[campaign]) for t in [table, reseeded]}
    assert all(o[0].endswith("--open") and o[-1].endswith("--close") for o in orders)


def test_incremental_additions_plan_only_new_cells(workflow, tmp_path):
    snakefile, work = workflow
    raw = demo_raw()
    cfg_path = write_config(tmp_path / "grid.yaml", raw)
    materialize(work, cfg_path, snakefile)
    assert plan(work, cfg_path, snakefile=snakefile)["run_cell"] == 0

    before = {c.record_path for c in cells.build(config.validate(raw))}
    additions = {
        "model pair": lambda r: r["models"].update(tiny2={**copy.deepcopy(r["models"]["tiny"])}),
        "batch size": lambda r: r["batch_sizes"].append(8),
        "corpus": lambda r: r["corpora"].update(rand={"source": "random"}),
        "seed": lambda r: r["seeds"].append(7),
    }
    for what, change in additions.items():
        grown = copy.deepcopy(raw)
        change(grown)
        grown_path = write_config(tmp_path / "grown.yaml", grown)
        new = {c.record_path for c in cells.build(config.validate(grown))} - before
        assert new, what
        planned = run_cell_outputs(plan(work, grown_path, snakefile=snakefile))
        assert planned == new, f"adding a {what} re-plans existing cells: {sorted(planned - new)}"


def test_editing_a_script_plans_nothing_but_version_bump_replans_all(workflow, tmp_path):
    snakefile, work = workflow
    raw = demo_raw()
    cfg_path = write_config(tmp_path / "grid.yaml", raw)
    materialize(work, cfg_path, snakefile)
    for script in (snakefile.parent / "scripts/aggregate.py", snakefile.parent / "specjoule/runner.py"):
        script.write_text(script.read_text() + "\n# an edit that must not re-run GPU cells\n")
    replanned = plan(work, cfg_path, snakefile=snakefile)
    assert replanned["run_cell"] == 0 and replanned["aggregate"] == 0, dict(replanned)
    bumped = write_config(tmp_path / "bumped.yaml", {**raw, "version": raw.get("version", 1) + 1})
    assert plan(work, bumped, snakefile=snakefile)["run_cell"] == 4


def test_bad_config_fails_at_parse_time_naming_key_and_value(tmp_path):
    bad = demo_raw()
    bad["batch_sizes"] = [0]
    with pytest.raises(Exception) as info:
        plan(tmp_path, write_config(tmp_path / "bad.yaml", bad))
    assert "batch_sizes[0] = 0" in str(info.value)


def test_plan_target_writes_one_row_per_cell_with_estimates(tmp_path):
    cfg = REPO / "config/h200-validation.yaml"
    plan(tmp_path, cfg, pseudo_executor=None, targets=["plan"])
    rows = (tmp_path / "results/plan.tsv").read_text().splitlines()
    header, body = rows[0].split("\t"), [r.split("\t") for r in rows[1:]]
    table = cells.build(config.load(cfg))
    assert len(body) == len(table)
    est = [float(r[header.index("estimated_gpu_s")]) for r in body]
    assert sum(est) == pytest.approx(table.estimated_gpu_s(), abs=len(body))
    assert {r[header.index("record_path")] for r in body} == {c.record_path for c in table}
    assert "GPU-hours" in (tmp_path / "results/logs/plan.log").read_text()


def test_run_order_does_not_depend_on_key_order():
    # The runner rebuilds the table from a JSON copy with sorted keys; Snakemake from the YAML.
    raw = demo_raw()
    flipped = {**raw, "schemes": dict(reversed(list(raw["schemes"].items())))}
    order = [c.name for c in cells.build(config.validate(raw))]
    assert order == [c.name for c in cells.build(config.validate(flipped))]
    resolved = config.validate(raw)
    import json

    assert order == [c.name for c in cells.build(config.validate(json.loads(json.dumps(resolved, sort_keys=True))))]


def test_runner_refuses_a_cell_whose_id_differs_from_the_plan(tmp_path, capsys, monkeypatch):
    from specjoule import runner

    monkeypatch.chdir(tmp_path)
    table = cells.build(config.load(REPO / "config/config.yaml"))
    cell = table.cells[1]
    with pytest.raises(SystemExit) as info:
        runner.main([str(REPO / "config/config.yaml"), cell.record_path, "--cell-id", "000000000000"])
    assert info.value.code == 2
    assert f"cell id mismatch for {cell.record_path}" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # nothing measured, nothing written


def _tree(root):
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


@pytest.mark.parametrize("share", [False, True], ids=["one-cell-jobs", "shared-engines"])
def test_a_dry_run_writes_nothing_under_results(share, tmp_path):
    """`snakemake -n` only plans (ADR 0140): no config copy, no stamp, no marker — on an empty results tree
    and on one where cells are measured (one record without a stamp) and a new batch size adds cells. The dry runs
    go through Snakemake's API in this process (plan: the same Snakefile, config file and dry-run executor as `-n`)
    rather than two `snakemake -n` processes a parameter: the same parse and plan without a Snakemake start each."""
    raw = demo_raw()
    raw["batch_sizes"] = [2, 4]
    raw["protocol"]["share_engines"] = share
    cfg = write_config(tmp_path / "grid.yaml", raw)
    work = tmp_path / "work"
    work.mkdir()
    plan(work, cfg)
    assert not (work / "results").exists()

    materialize(work, cfg, REPO / "Snakefile")
    table = cells.build(config.validate(raw))
    grown = write_config(tmp_path / "grown.yaml", {**raw, "batch_sizes": [2, 4, 8]})
    if share:  # a record measured one cell per job (no stamp): planning verifies it by reading it
        import polars as pl

        c = table.cells[0]
        for stamp in (work / cells.STAMPS_DIR / c.campaign_id).glob(f"{c.name}.*"):
            stamp.unlink()
        pl.DataFrame({"cell_id": [c.cell_id], "version_param": [config.validate(raw)["version"]]}).write_parquet(
            work / c.record_path)
    before = _tree(work / "results")
    assert plan(work, grown)["run_cell"]  # the dry run did plan the new cells
    assert _tree(work / "results") == before
