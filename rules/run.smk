rule run_cell:
    """One GPU-pinned measurement: engine, workload, meter, one atomic record."""
    input:
        get_cell_inputs,
    output:
        record="results/cells/{campaign}/{cell}.parquet",
        timeline="results/timelines/{campaign}/{cell}.parquet",
    log:
        "results/logs/cells/{campaign}/{cell}.log",
    params:
        # The cell id hashes every measured parameter; `version` forces a deliberate re-run.
        cell_id=get_cell_id,
        version=CONFIG["version"],
    priority: get_cell_priority
    group:
        "campaign"
    resources:
        gpu=1,
        runtime=get_cell_runtime_min,
    conda:
        # Only with --software-deployment-method conda: resolving an env per job costs planning time.
        get_engine_env if USE_CONDA else None
    shell:
        # `exec`: the runner replaces the shell, so a scheduler's SIGTERM (scancel, time limit,
        # preemption) reaches the runner with no shell dying first; Snakemake then waits for the
        # runner to stop its engine instead of exiting and letting SLURM SIGKILL it (ADR 0056).
        "exec {PYTHON} -m specjoule.runner {CONFIG_JSON} {output.record} --cell-id {params.cell_id} --log {log} >> {log} 2>&1"


rule plan:
    """results/plan.tsv: one row per cell with its estimated GPU seconds."""
    output:
        "results/plan.tsv",
    log:
        "results/logs/plan.log",
    params:
        config_hash=CONFIG_HASH,
    localrule: True
    run:
        CELLS.write_plan(output[0])
        Path(log[0]).write_text(CELLS.summary() + "\n")
        print(CELLS.summary())
