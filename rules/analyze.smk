# From cell records to trustworthy numbers (ADR 0020-0029): aggregate → roofline → checks → derive.
import glob


rule aggregate:
    """Every cell record in one table, each cell paired with its campaign's opening and closing baselines, with
    its GPU's activity over the thirds of its window read from the timeline beside it (ADR 0227)."""
    input:
        # Every record, or with sharing the done files of the group jobs that write them (ADR 0140).
        # Not the timelines: aggregate reads the one beside each record where it exists (the activity columns
        # are null without it), so records copied without their timelines are analysed, not re-measured.
        get_measured_records,
    output:
        "results/records.parquet",
    log:
        "results/logs/aggregate.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        records=get_record_list,
        # Planned cells left out in measured scope, logged by name (ADR 0216).
        not_measured=get_not_measured,
        config_hash=CONFIG_HASH,
        # Rows of record files unchanged since the last aggregate (path + size + mtime + ctime + inode);
        # a config edit re-runs this rule, and re-parsing 13,860 files would cost ~10 s (ADR 0028).
        cache="results/.specjoule/records-cache.parquet",
    script:
        "../scripts/aggregate.py"


rule roofline:
    """The energy model (issue 18, ADR 0102): bytes and operations per pass from the model shapes, per-GPU
    coefficients fitted on baseline cells only (pulled toward results/hardware/ calibrations), every cell
    predicted, its residual, the verify / draft / idle split and the predicted crossover L."""
    input:
        records="results/records.parquet",
        calibrations=sorted(glob.glob("results/hardware/GPU-*.json")),
    output:
        cells="results/roofline.parquet",
        fit="results/roofline_fit.parquet",
        time="results/roofline_time.parquet",
        crossover="results/crossover.parquet",
        hardware="results/hardware.parquet",
    log:
        "results/logs/roofline.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        # The fallback for a GPU without a calibration; a measured balance point always wins (ADR 0102).
        balance_fallback=CONFIG["report"].get("balance_point_op_per_byte"),
        # The config's drafter per (pair, scheme), for records that name none (ADR 0176).
        drafter_config={"models": CONFIG["models"], "schemes": CONFIG["schemes"]},
        config_hash=CONFIG_HASH,
    script:
        "../scripts/roofline.py"


rule checks:
    """Pre-registered discard checks (thresholds from config `checks`; the config hash is kept with the results)."""
    input:
        "results/records.parquet",
        roofline="results/roofline.parquet",
    output:
        table="results/checks.parquet",
        markdown="results/checks.md",
    log:
        "results/logs/checks.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        checks=CONFIG["checks"],
        # interval level and reference evidence: read by the spread checks (ADR 0081, 0083)
        report=CONFIG["report"],
        # listed at the end of checks.md (ADR 0216)
        not_measured=get_not_measured,
        config_hash=CONFIG_HASH,
    script:
        "../scripts/checks.py"


rule derive:
    """Curves against the baseline and their seed summary; refuses a campaign with a failed check
    (naming campaign and check) unless checks.allow_failed_checks. Energy columns stay null, with the
    reason, where energy was not measured."""
    input:
        records="results/records.parquet",
        checks="results/checks.parquet",
        roofline="results/roofline.parquet",
    output:
        curves="results/curves.parquet",
        summary="results/curves_summary.parquet",
    log:
        "results/logs/derive.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        allow_failed_checks=CONFIG["checks"]["allow_failed_checks"],
        interval_level=CONFIG["report"]["interval_level"],
        config_hash=CONFIG_HASH,
    script:
        "../scripts/derive.py"


rule variance:
    """The variance budget per campaign family (ADR 0084): this run's records and, when the config names one,
    the reference evidence as a second run."""
    input:
        "results/records.parquet",
    output:
        "results/variance.parquet",
    log:
        "results/logs/variance.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        evidence=[CONFIG["report"]["reference_evidence"]] if CONFIG["report"]["reference_evidence"] else [],
        config_hash=CONFIG_HASH,
    script:
        "../scripts/variance.py"


rule reproducibility:
    """Each speculative configuration against report.reference_evidence (ADR 0083): ratios, intervals, the
    shift and its interval; an empty table when the config names no reference."""
    input:
        "results/records.parquet",
    output:
        "results/reproducibility.parquet",
    log:
        "results/logs/reproducibility.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        reference=CONFIG["report"]["reference_evidence"],
        level=CONFIG["report"]["interval_level"],
        tolerance=CONFIG["checks"]["reference_shift_max"],
        config_hash=CONFIG_HASH,
    script:
        "../scripts/reproducibility.py"


rule matched_latency:
    """Energy of every arm at each TBT target (config report.tbt_targets_ms), interpolated across its load levels
    (batch size, concurrency or request rate) and compared with the baseline at the same TBT (ADR 0114)."""
    input:
        curves="results/curves.parquet",
        records="results/records.parquet",
    output:
        "results/matched_latency.parquet",
    log:
        "results/logs/matched_latency.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        tbt_targets_ms=CONFIG["report"]["tbt_targets_ms"],
        config_hash=CONFIG_HASH,
    script:
        "../scripts/matched.py"
