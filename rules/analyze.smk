# From cell records to trustworthy numbers (ADR 0020-0029): aggregate → checks → derive.


rule aggregate:
    """Every cell record in one table, each cell paired with its campaign's opening and closing baselines."""
    input:
        get_record_paths(),
    output:
        "results/records.parquet",
    log:
        "results/logs/aggregate.log",
    params:
        config_hash=CONFIG_HASH,
        # Rows of record files unchanged since the last aggregate (path + size + mtime + ctime + inode);
        # a config edit re-runs this rule, and re-parsing 13,860 files would cost ~10 s (ADR 0028).
        cache="results/.specjoule/records-cache.parquet",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/aggregate.py"


rule checks:
    """Pre-registered discard checks (thresholds from config `checks`; the config hash is kept with the results)."""
    input:
        "results/records.parquet",
    output:
        table="results/checks.parquet",
        markdown="results/checks.md",
    log:
        "results/logs/checks.log",
    params:
        checks=CONFIG["checks"],
        config_hash=CONFIG_HASH,
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/checks.py"


rule derive:
    """Curves against the baseline and their seed summary; refuses a campaign with a failed check
    (naming campaign and check) unless checks.allow_failed_checks. Energy columns stay null, with the
    reason, where energy was not measured."""
    input:
        records="results/records.parquet",
        checks="results/checks.parquet",
    output:
        curves="results/curves.parquet",
        summary="results/curves_summary.parquet",
    log:
        "results/logs/derive.log",
    params:
        allow_failed_checks=CONFIG["checks"]["allow_failed_checks"],
        config_hash=CONFIG_HASH,
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/derive.py"


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
    params:
        tbt_targets_ms=CONFIG["report"]["tbt_targets_ms"],
        config_hash=CONFIG_HASH,
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/matched.py"
