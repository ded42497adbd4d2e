# Model resolution before any GPU job (ADR 0121): local checkpoints checked, hub ids fetched once
# into the hub cache (HF_HUB_CACHE) on the machine that plans (a login node: compute nodes are often
# offline). At parse time (every plan, `make plan` too) a local checkpoint without weights (load_format
# not dummy), a prompt tokenizer whose ids the model cannot embed, a corpus file in the wrong layout or a
# hub dataset not yet fetched stops the plan, naming the key and the path (ADR 0122): those checks run in
# config.plan (rules/common.smk), with every other parse-time check (ADR 0130).


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
