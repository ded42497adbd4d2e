# specjoule: joules per committed token for speculative decoding.
# Plan:    snakemake -n                       (or `make plan` for results/plan.tsv)
# Measure: snakemake --profile profiles/slurm (cluster) or `make demo` (CPU demo)
from snakemake.utils import min_version

min_version("9.0")


include: "rules/common.smk"
include: "rules/resolve.smk"
include: "rules/run.smk"
include: "rules/analyze.smk"
include: "rules/report.smk"
include: "rules/hardware.smk"


onstart:
    # The validated config the runner and resolve_models read: written when a run starts, never while the
    # workflow is parsed or dry-run (ADR 0140).
    _config.write_resolved(CONFIG, CONFIG_JSON)
    # The collector's thresholds as they were before planning (rules/common.smk) for the run itself.
    gc.set_threshold(*GC_THRESHOLDS)


rule all:
    default_target: True
    input:
        get_final_outputs(),
