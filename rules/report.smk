# Figures and the one-file report; `snakemake --report` picks up the same outputs (captions in report/).
report: "../report/workflow.rst"


# Tables the figures and the report read when a rule of this workflow writes them: derive's summary
# (means and intervals, ADR 0027, 0090) and the analysis' variance budget (ADR 0094). A table no rule
# writes is left out, and the report says so, rather than asking for a file nothing makes.
_WRITTEN = {str(f) for r in workflow.rules for f in r.output}
_SUMMARY = [p for p in ("results/curves_summary.parquet", "results/summary.parquet") if p in _WRITTEN][:1]
_VARIANCE = [p for p in ("results/variance.parquet",) if p in _WRITTEN]
_CROSSOVER = [p for p in ("results/crossover.parquet",) if p in _WRITTEN]  # rule roofline (ADR 0177)


rule figures:
    """Altair figures as interactive HTML plus static SVG (PNG for the blog's figure)."""
    input:
        records="results/records.parquet",
        curves="results/curves.parquet",
        checks="results/checks.parquet",
        # Every timeline, or with sharing the done files of the group jobs that write them (ADR 0140).
        timelines=get_measured_timelines,
        summary=_SUMMARY,
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
    localrule: True
    conda:
        "../envs/analysis.yaml"
    # The SVGs are drawn in a child process beside the specs (ADR 0237): two cores; with one, in-process.
    threads: 2
    params:
        config=CONFIG,
        timelines=get_timeline_list,
        # vl-convert PNG export costs ~0.2-1 s a figure on 2 cores; SVG is written for every figure.
        png=["energy_vs_acceptance"],
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
        variance=_VARIANCE,
        crossover=_CROSSOVER,
    output:
        report("results/report.html", caption="../report/report.rst", category="Report", labels={"file": "report.html"}),
    log:
        "results/logs/report.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        config=CONFIG,
        config_hash=CONFIG_HASH,
        # caveats, one per campaign (ADR 0216)
        not_measured=get_not_measured,
    script:
        "../scripts/report.py"
