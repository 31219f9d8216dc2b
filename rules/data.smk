"""Data stage: fetch (checksummed, mirror first) -> table -> standardized splits."""


localrules:
    fetch,


rule fetch:
    output:
        paths.RAW_MANIFEST,
    params:
        mirror=config.get("mirror"),
    log:
        "logs/fetch/{dataset}_{protocol}.log",
    benchmark:
        "results/benchmarks/fetch/{dataset}_{protocol}.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/fetch.py"


rule table:
    input:
        paths.RAW_MANIFEST,
    output:
        paths.TABLE,
    log:
        "logs/table/{dataset}_{protocol}.log",
    benchmark:
        "results/benchmarks/table/{dataset}_{protocol}.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/table.py"


rule split:
    input:
        table=paths.TABLE,
        manifest=paths.RAW_MANIFEST,
    output:
        paths.SPLIT,
    params:
        seed=config["seed"],
        options=split_options,
    log:
        "logs/split/{dataset}/{protocol}/split{split}.log",
    benchmark:
        "results/benchmarks/split/{dataset}/{protocol}/split{split}.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/split.py"
