# In measured scope (ADR 0216) no measurement rule exists: the analysis reads the records there are.
if SHARE_ENGINES and not MEASURED_SCOPE:

    # One job per engine group with cells to measure (ADR 0017, 0140), read from the planned table JOBS.
    # Named run_cell like the one-cell job, so that a profile's `--set-resources run_cell:…` and
    # `--set-threads run_cell=…` (GPU, memory, CPUs) reach it through Snakemake's own mechanism.
    # Its records are written by the runner, not declared: a rule's outputs cannot vary in number per job;
    # the done file stands for them (the analysis waits for it) and its removal by Snakemake after a failed
    # job re-plans every member (ADR 0052 holds).
    rule run_cell:
        """One engine start, its group's cells one after another: one window and one atomic record each."""
        input:
            # The family's previous planned job: the family runs in its pre-registered order (ADR 0051).
            get_group_inputs,
            # Its models' manifests: resolve_models runs first (ADR 0121).
            get_group_model_manifests,
        output:
            # engine_jobs.done_path / GroupJob.log_path (tests/test_engine_groups.py checks they agree).
            touch("results/.specjoule/groups/{family}/{group}.done"),
        log:
            "results/logs/engines/{family}/{group}.log",
        wildcard_constraints:
            # Only jobs planned now: a past job's done file is an input the analysis reads, not a target.
            group=JOBS.group_wildcard_regex(),
        group:
            "campaign"
        conda:
            get_group_env
        resources:
            gpu=get_group_gpus,
            runtime=get_group_runtime_min,
        params:
            # What the job measures, in run order (the runner writes these records and their timelines).
            records=get_group_records,
            cell_ids=get_group_cell_ids,
            version=CONFIG["version"],
            command=get_group_command,
        shell:
            "{params.command}"

elif not MEASURED_SCOPE:

    # One cell per job, one engine start per cell (the default).
    rule run_cell:
        """One GPU-pinned measurement: engine, workload, meter, one atomic record."""
        input:
            # Its campaign's chain, then its models' manifests: resolve_models runs first (ADR 0121).
            get_cell_inputs,
        output:
            record="results/cells/{campaign}/{cell}.parquet",
            timeline="results/timelines/{campaign}/{cell}.parquet",
        log:
            "results/logs/cells/{campaign}/{cell}.log",
        priority: get_cell_priority
        group:
            "campaign"
        conda:
            # Used only with --software-deployment-method conda (rules/common.smk).
            ENGINE_ENV
        resources:
            gpu=get_cell_gpus,
            runtime=get_cell_runtime_min,
        params:
            # The cell id hashes every measured parameter; `version` forces a deliberate re-run.
            cell_id=get_cell_id,
            version=CONFIG["version"],
        shell:
            # `exec`: the runner replaces the shell, so a scheduler's SIGTERM (scancel, time limit,
            # preemption) reaches the runner with no shell dying first; Snakemake then waits for the
            # runner to stop its engine instead of exiting and letting SLURM SIGKILL it (ADR 0056).
            # RUNNER (interpreter, resolved config) is spelled into the command, not a param: a param
            # would re-measure every cell whenever the config or the venv path changed (ADR 0140).
            # Every word quoted: config names reach it through the record path; they are limited to shell-safe
            # characters at parse time, and quoted here all the same (issue 21 item 3, ADR 0131).
            f"{RUNNER} {{output.record:q}} --cell-id {{params.cell_id:q}} --log {{log:q}} >> {{log:q}} 2>&1"


rule plan:
    """results/plan.tsv: one row per cell with its estimated GPU seconds."""
    output:
        "results/plan.tsv",
    log:
        "results/logs/plan.log",
    localrule: True
    params:
        config_hash=CONFIG_HASH,
    run:
        write_plan(output[0], log[0])
