# Measured hardware constants of the GPU (issue 18, ADR 0100).


rule calibrate_gpu:
    """HBM bandwidth, bf16 matmul rate, idle and kernel power, energy per byte and per operation and the
    balance point of the GPU this job leases (specjoule/gpu.py: SLURM's allocation or a UUID file lock),
    written to results/hardware/<uuid>-<driver>.json and reused for that GPU and driver (about 25 s of GPU
    time when measured). Run it in the same hold as the cells it serves, before them (its idle reading
    wants an idle GPU):  snakemake calibrate_gpu --cores 1 --resources gpu=1 --forcerun calibrate_gpu"""
    output:
        # Names the calibration used; the per-GPU JSON beside it is the cache, not a declared output,
        # so that calibrating one GPU never deletes another's.
        pointer="results/hardware/calibrate_gpu.json",
    log:
        "results/logs/calibrate_gpu.log",
    conda:
        "../envs/vllm.yaml"
    resources:
        gpu=1,
        runtime=10,
    shell:
        f"{CALIBRATE_GPU} --out results/hardware --pointer {{output.pointer}} > {{log}} 2>&1"
