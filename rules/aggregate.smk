"""Aggregation: the tidy run table, then each experiment's tables and figures (its `outputs`)."""


localrules:
    collect,
    claims,


rule collect:
    input:
        batch_dirs(),
    output:
        runs=paths.RUNS,
        curves=paths.CURVES,
    params:
        metrics=run_files(),
    log:
        "logs/aggregate/collect.log",
    benchmark:
        "results/benchmarks/aggregate/collect.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/collect.py"


rule tables:
    input:
        paths.RUNS,
    output:
        multiext(paths.TABLES, ".csv", ".md", ".tex"),
        report(f"{paths.TABLES}.html", caption="../report/tables.rst", category="{experiment}", subcategory="Tables",
               labels=table_labels),
        paper=paths.PAPER_TABLE,
    params:
        quoted=quoted_table,
        own_data=experiment_own_data,
        labels=variant_names,
    log:
        "logs/aggregate/tables_{experiment}_{metric}.log",
    benchmark:
        "results/benchmarks/aggregate/tables_{experiment}_{metric}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/tables.py"


rule violins:
    input:
        paths.RUNS,
    output:
        png=report(f"{paths.VIOLINS}.png", caption="../report/violins.rst", category="{experiment}",
                   subcategory="Figures", labels={"figure": "violins over splits"}),
        pdf=f"{paths.VIOLINS}.pdf",
    params:
        labels=variant_names,
        bases=variant_bases,
    log:
        "logs/aggregate/violins_{experiment}.log",
    benchmark:
        "results/benchmarks/aggregate/violins_{experiment}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/violins.py"


rule posteriors:
    input:
        unpack(posterior_inputs),
    output:
        png=report(f"{paths.POSTERIORS}.png", caption="../report/posteriors.rst", category="{experiment}",
                   subcategory="Figures", labels={"figure": "posteriors"}),
        pdf=f"{paths.POSTERIORS}.pdf",
    params:
        runs=experiment_runs,
        labels=variant_names,
        bases=variant_bases,
    log:
        "logs/aggregate/posteriors_{experiment}.log",
    benchmark:
        "results/benchmarks/aggregate/posteriors_{experiment}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/posteriors.py"


rule learning_curves:
    input:
        paths.CURVES,
    output:
        report(paths.CURVES_FIGURE, caption="../report/learning_curves.rst", category="{experiment}",
               subcategory="Figures", labels={"figure": "learning curves"}),
    params:
        axis=curve_axis,
        labels=variant_names,
        bases=variant_bases,
    log:
        "logs/aggregate/learning_curves_{experiment}.log",
    benchmark:
        "results/benchmarks/aggregate/learning_curves_{experiment}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/learning_curves.py"


rule exact_reference:
    input:
        unpack(reference_inputs),
    output:
        paths.REFERENCE,
    params:
        settings=posterior_reference_params,
    resources:
        gpu=posterior_gpus,
    log:
        "logs/aggregate/exact_reference_{experiment}.log",
    benchmark:
        "results/benchmarks/aggregate/exact_reference_{experiment}.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/exact_reference.py"


rule claims:
    input:
        unpack(claims_inputs),
    output:
        md=f"{paths.CLAIMS}.md",
        csv=f"{paths.CLAIMS}.csv",
        html=report(f"{paths.CLAIMS}.html", caption="../report/claims.rst", category="claims",
                    labels={"table": "the paper's claims, checked"}),
    params:
        posteriors=claim_posteriors,
        gaps=claims_gaps,
    log:
        "logs/aggregate/claims.log",
    benchmark:
        "results/benchmarks/aggregate/claims.tsv"
    conda:
        "../envs/gpstudy.yml"
    script:
        "../scripts/claims.py"
