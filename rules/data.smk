"""Data stage: fetch (checksummed, mirror first) -> tabulate (one table) -> standardized splits.

Each rule's params are every setting its output depends on (gpstudy.study.data_stage_params): a changed
one reruns the rule and, its output remade, every job downstream. The tabulate rule's params add a user
classification data set's declared classes (gpstudy.study.validate.tabulate_params)."""


localrules:
    fetch,


rule fetch:
    output:
        paths.RAW_MANIFEST,
    params:
        spec=data_params("fetch"),
    log:
        "logs/fetch/{dataset}_{protocol}.log",
    benchmark:
        "results/benchmarks/fetch/{dataset}_{protocol}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/fetch.py"


rule tabulate:
    input:
        paths.RAW_MANIFEST,
    output:
        paths.TABLE,
    params:
        spec=tabulate_spec,
    log:
        "logs/tabulate/{dataset}_{protocol}.log",
    benchmark:
        "results/benchmarks/tabulate/{dataset}_{protocol}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/tabulate.py"


rule split:
    input:
        table=paths.TABLE,
        manifest=paths.RAW_MANIFEST,
    output:
        paths.SPLIT,
    params:
        spec=data_params("split"),
    log:
        "logs/split/{dataset}/{protocol}/split{split}.log",
    benchmark:
        "results/benchmarks/split/{dataset}/{protocol}/split{split}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/split.py"
