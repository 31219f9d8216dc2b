"""Exact-GP hyperparameter pretraining, per data set and split, where the config turns it on."""


rule pretrain:
    input:
        paths.SPLIT,
    output:
        paths.PRETRAINED,
    params:
        settings=pretrain_settings_params,
        checkpoint=paths.PRETRAIN_CHECKPOINT,
    threads: PRETRAIN_THREADS
    resources:
        gpu=pretrain_gpus,
    log:
        "logs/pretrain/{dataset}/{protocol}/split{split}.log",
    benchmark:
        "results/benchmarks/pretrain/{dataset}/{protocol}/split{split}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/pretrain.py"
