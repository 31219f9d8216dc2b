"""Training: one job per experiment x data set x method x M x batch of splits (GPU when configured)."""


rule train:
    input:
        splits=job_split_files,
        hyperparameters=job_hyperparameters,
    output:
        directory(paths.BATCH),
    params:
        splits=job_splits,
        settings=job_settings_params,
        labels=job_labels,
        checkpoint=paths.CHECKPOINT,
        jobs_per_gpu=config["jobs_per_gpu"],
        gpu_lock_dir=config["gpu_lock_dir"],
    threads: DEFAULT_THREADS
    resources:
        gpu=job_gpus,
        runtime=job_runtime,
        mem_mb=config["train_resources"]["mem_mb"],
    log:
        "logs/train/{experiment}/{dataset}/{method}/M{M}/splits{splits}.log",
    benchmark:
        "results/benchmarks/train/{experiment}/{dataset}/{method}/M{M}/splits{splits}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/train.py"
