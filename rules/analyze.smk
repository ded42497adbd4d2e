rule aggregate:
    """Every cell record in one table, each point paired with its campaign's baselines."""
    input:
        get_record_paths(),
    output:
        "results/records.parquet",
    log:
        "results/logs/aggregate.log",
    params:
        config_hash=CONFIG_HASH,
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/aggregate.py"


rule checks:
    """Pre-registered discard checks (thresholds from config `checks`)."""
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
    """Curves against the baseline; refuses campaigns with a failed check."""
    input:
        records="results/records.parquet",
        checks="results/checks.parquet",
    output:
        "results/curves.parquet",
    log:
        "results/logs/derive.log",
    params:
        allow_failed_checks=CONFIG["checks"]["allow_failed_checks"],
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/derive.py"
