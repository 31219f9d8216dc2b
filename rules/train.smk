"""Training: one job per experiment x data set x method x M x split (GPU when configured)."""


rule train:
    input:
        split=run_split,
        hyperparameters=run_hyperparameters,
    output:
        paths.RUN,
    params:
        settings=run_settings_params,
        labels=run_labels,
    threads: 1
    resources:
        gpu=run_gpus,
        runtime=config["train_resources"]["runtime"],
        mem_mb=config["train_resources"]["mem_mb"],
    group:
        "train"
    log:
        "logs/train/{experiment}/{dataset}/{method}/M{M}/split{split}.log",
    benchmark:
        "results/benchmarks/train/{experiment}/{dataset}/{method}/M{M}/split{split}.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/train.py"
