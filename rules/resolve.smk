# Model resolution before any GPU job (ADR 0121): local checkpoints checked, hub ids fetched once
# into the hub cache (HF_HUB_CACHE) on the machine that plans (a login node: compute nodes are often
# offline). Corpora are checked here too (ADR 0122).
from specjoule import resolve_models as _resolve  # noqa: E402

# Parse time (every plan, `make plan` too): a local checkpoint without weights (load_format not
# dummy), a prompt tokenizer whose ids the model cannot embed, a corpus file in the wrong layout or a
# hub dataset not yet fetched into the hub cache stops the plan, naming the key and the path; these
# checks run in config.plan (rules/common.smk), with every other parse-time check.

MODEL_MANIFESTS = sorted({_resolve.manifest_path(r) for r in _resolve.model_refs(CONFIG)})


def get_model_manifests(cells):
    """The manifests the GPU job of ``cells`` waits for, as ancient inputs: the job runs after
    resolve_models, and a manifest rewritten when another model is added re-runs no measured cell."""
    return [ancient(p) for p in sorted({p for c in cells for p in _resolve.cell_manifest_paths(c.spec)})]


def get_cell_model_manifests(wildcards):
    cell = get_cell(wildcards)
    manifests = get_model_manifests([cell])
    if _measured_without_manifests(cell.record_path, manifests):
        return []
    return manifests


def _measured_without_manifests(record_path, manifests):
    """Whether a record was measured before model resolution existed: Snakemake recorded its inputs
    without the manifests, and the `input` rerun trigger would re-measure it if they appeared now.
    Such a record keeps its recorded inputs; every cell measured since waits for resolve_models."""
    if not Path(record_path).exists():
        return False
    try:
        from snakemake.io import IOFile

        recorded = workflow.persistence.input(IOFile(record_path))
    except Exception:  # Snakemake internals moved: wait for the manifests (ordering is the safe side)
        return False
    return recorded is not None and not any(str(m) in recorded for m in manifests)


_freeze_signature(get_cell_model_manifests)


localrules:
    resolve_models,


rule resolve_models:
    """Check every local model and fetch every hub model of the config; one manifest per model."""
    output:
        MODEL_MANIFESTS,
    log:
        "results/logs/resolve_models.log",
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON:q} -m specjoule.resolve_models {CONFIG_JSON:q} --log {log:q}"
