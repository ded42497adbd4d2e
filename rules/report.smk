# Figures and the one-file report; `snakemake --report` picks up the same outputs (captions in report/).
report: "../report/workflow.rst"

# derive writes the seed summary beside the curves when it does; the report shows it if so.
_CURVES_SUMMARY = "results/curves_summary.parquet"
_SUMMARY = [_CURVES_SUMMARY] if _CURVES_SUMMARY in [str(f) for f in rules.derive.output] else []


rule figures:
    """Altair figures as interactive HTML plus static SVG (PNG for the blog's figure)."""
    input:
        records="results/records.parquet",
        curves="results/curves.parquet",
        checks="results/checks.parquet",
        timelines=[c.timeline_path for c in CELLS],
    output:
        report(
            directory("results/figures"),
            patterns=["{name}.svg"],
            caption="../report/figures.rst",
            category="Figures",
            labels={"figure": "{name}"},
        ),
    log:
        "results/logs/figures.log",
    params:
        config=CONFIG,
        # vl-convert PNG export costs ~0.2-1 s a figure on 2 cores; SVG is written for every figure.
        png=["energy_vs_acceptance"],
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
        summary=_SUMMARY,
    output:
        report("results/report.html", caption="../report/report.rst", category="Report", labels={"file": "report.html"}),
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
