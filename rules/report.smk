rule figures:
    """Altair figures as interactive HTML plus static SVG/PNG."""
    input:
        records="results/records.parquet",
        curves="results/curves.parquet",
        checks="results/checks.parquet",
    output:
        directory("results/figures"),
    log:
        "results/logs/figures.log",
    params:
        report=CONFIG["report"],
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/figures.py"


rule report:
    """One self-contained HTML report."""
    input:
        records="results/records.parquet",
        curves="results/curves.parquet",
        checks="results/checks.parquet",
        checks_md="results/checks.md",
        figures="results/figures",
    output:
        "results/report.html",
    log:
        "results/logs/report.log",
    params:
        config=CONFIG,
        config_hash=CONFIG_HASH,
    localrule: True
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/report.py"
