# Model resolution before any GPU job (ADR 0121): local checkpoints checked, hub ids fetched once
# into the hub cache (HF_HUB_CACHE) on the machine that plans (a login node: compute nodes are often
# offline). Corpora are checked here too (ADR 0122).
# Parse time (every plan, `make plan` too): a local checkpoint without weights (load_format not
# dummy), a prompt tokenizer whose ids the model cannot embed, a corpus file in the wrong layout or a
# hub dataset not yet fetched into the hub cache stops the plan here, naming the key and the path.
try:
    _resolve.check_config(CONFIG)
    _resolve.check_corpora(CONFIG, " ".join(str(f) for f in workflow.overwrite_configfiles) or "CONFIG")
except _config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None


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
        f"{RESOLVE_MODELS} --log {{log:q}}"
