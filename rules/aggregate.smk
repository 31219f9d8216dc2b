"""Aggregation: the tidy run table, then the paper's tables and figures."""


localrules:
    collect,


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
        "../environment.yml"
    script:
        "../scripts/collect.py"


rule uci_tables:
    input:
        paths.RUNS,
    output:
        rmse=report(multiext("results/tables/uci_rmse", ".csv", ".md", ".tex"),
                    caption="../report/uci_tables.rst", category="Tables"),
        test_ll=report(multiext("results/tables/uci_test_ll", ".csv", ".md", ".tex"),
                       caption="../report/uci_tables.rst", category="Tables"),
    log:
        "logs/aggregate/uci_tables.log",
    benchmark:
        "results/benchmarks/aggregate/uci_tables.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/uci_tables.py"


rule uci_violins:
    input:
        paths.RUNS,
    output:
        png=report("results/figures/uci_violins.png", caption="../report/uci_violins.rst", category="Figures"),
        pdf="results/figures/uci_violins.pdf",
    log:
        "logs/aggregate/uci_violins.log",
    benchmark:
        "results/benchmarks/aggregate/uci_violins.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/uci_violins.py"


rule snelson_figure:
    input:
        **snelson_inputs(),
    output:
        png=report("results/figures/snelson.png", caption="../report/snelson.rst", category="Figures"),
        pdf="results/figures/snelson.pdf",
    params:
        runs=run_files("snelson"),
    log:
        "logs/aggregate/snelson_figure.log",
    benchmark:
        "results/benchmarks/aggregate/snelson_figure.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/snelson_figure.py"


rule learning_curves:
    input:
        paths.CURVES,
    output:
        report("results/figures/learning_curves_{experiment}.png", caption="../report/learning_curves.rst",
               category="Figures"),
    log:
        "logs/aggregate/learning_curves_{experiment}.log",
    benchmark:
        "results/benchmarks/aggregate/learning_curves_{experiment}.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/learning_curves.py"
