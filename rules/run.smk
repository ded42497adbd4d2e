if SHARE_ENGINES:
    # One job per engine group with cells still to measure (ADR 0017): records already measured
    # are no rule's output, so a group job never re-measures them.
    for _name, _group, _previous, _marker in get_group_jobs():
        inherit_run_cell_settings(_name)
        _log = f"results/logs/engines/{_group.family_id}/g{_group.index:02d}-{_group.phase}.log"

        rule:
            name:
                _name
            input:
                # The previous group of the family's chain (one of its records is enough: a group job
                # writes them all; requesting all of them costs planning time), and this group's marker.
                ([_previous.cells[-1].record_path] if _previous else []) + [_marker],
                # Its models' manifests: resolve_models runs first (ADR 0121).
                get_model_manifests(_group.cells),
            output:
                records=[c.record_path for c in _group.cells],
                timelines=[c.timeline_path for c in _group.cells],
                # Empty files Snakemake writes after success: "measured under this id and version".
                stamps=[touch(c.stamp_path(CONFIG["version"])) for c in _group.cells],
            log:
                _log,
            params:
                cell_ids=[c.cell_id for c in _group.cells],
                version=CONFIG["version"],
                # Built now: a `shell:` expression is evaluated when the job runs, after the loop ended.
                command=group_shell(_group, _log),
            group:
                "campaign"
            resources:
                # `--set-resources run_cell:…` from a profile applies here too (inherit_run_cell_settings).
                gpu=_group.cells[0].n_gpus,
                runtime=group_runtime_min(_group),
            conda:
                f"../envs/{_group.cells[0].engine}.yaml" if USE_CONDA else None
            shell:
                "{params.command}"

else:
    # One cell per job, one engine start per cell (the default).
    rule run_cell:
        """One GPU-pinned measurement: engine, workload, meter, one atomic record."""
        input:
            get_cell_inputs,
            # Its models' manifests: resolve_models runs first (ADR 0121).
            get_cell_model_manifests,
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
            gpu=get_cell_gpus,
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
        # Predicted energy ratios of cells not yet measured, where results/ holds a GPU calibration and
        # baseline records to fit on (issue 18, ADR 0102); printed as PREDICTIONS, never written as records.
        from specjoule.analysis import roofline as _roofline

        _predicted = _roofline.plan_predictions(CELLS, "results/records.parquet", "results/hardware")
        if _predicted:
            print(_predicted)
            with open(log[0], "a") as _fh:
                _fh.write(_predicted + "\n")
