"""The one-cell jobs' resources as Snakemake plans them: the same whether rules/common.smk gives a number or a
function (ADR 0203)."""

import pytest

from snakemake_api import REPO, write_config
from specjoule import cells, config


def run_cell_gpus(configfile, workdir) -> dict[str, int]:
    """record path -> the `gpu` resource of its planned one-cell job."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings, ResourceSettings,
                                          StorageSettings)

    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wapi = api.workflow(resource_settings=ResourceSettings(cores=1), storage_settings=StorageSettings(),
                            config_settings=ConfigSettings(configfiles=[configfile]),
                            snakefile=REPO / "Snakefile", workdir=workdir)
        wapi.dag(dag_settings=DAGSettings()).execute_workflow(executor="local", pseudo_executor="dryrun")
        return {str(j.output.record): j.resources["gpu"]
                for j in wapi._workflow.dag.needrun_jobs(exclude_finished=False) if j.rule.name == "run_cell"}


# h200x2-tp: two pairs, tensor-parallel 1 and 2 (the function); h200-validation: every cell on one GPU (a number).
@pytest.mark.parametrize("name, sizes", [("h200x2-tp.yaml", {1, 2}), ("h200-validation.yaml", {1})])
def test_each_one_cell_job_asks_for_the_gpus_its_cell_holds(name, sizes, tmp_path):
    raw = config.read_yaml(REPO / "config" / name)
    raw["protocol"]["share_engines"] = False  # one cell per job
    configfile = write_config(tmp_path / name, raw)
    table = cells.build(config.validate(raw))
    assert {c.n_gpus for c in table} == sizes
    work = tmp_path / "work"
    work.mkdir()
    assert run_cell_gpus(configfile, work) == {c.record_path: c.n_gpus for c in table}
