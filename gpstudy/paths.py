"""The one path grammar of a study's files, shared by the Snakemake rules and the ``gpstudy`` CLI.

Patterns are relative to the working directory; ``{name}`` fields are Snakemake wildcards. The names
a config gives its data sets, methods, experiments and files become path parts: ``NameRule``s say which names those
are, for both the config's validation and the rules' ``wildcard_constraints``.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class NameRule:
    """The names a path field takes: a regular expression (the field's wildcard constraint), in words."""

    pattern: str  # matched against the whole name
    words: str  # the rule as a user reads it

    def allows(self, name: object) -> bool:
        """Whether ``name`` is a string the rule allows, whole."""
        return isinstance(name, str) and re.fullmatch(self.pattern, name) is not None


DATASET_NAME = NameRule("[a-z0-9_]+", "lowercase letters, digits, underscore")  # {dataset}
METHOD_NAME = NameRule("[a-z][a-z0-9_]*", "a lowercase letter, then lowercase letters, digits, underscore")  # {method}
EXPERIMENT_NAME = DATASET_NAME  # {experiment}
FILE_NAME = NameRule(r"(?!\.\.?$)[A-Za-z0-9._-]+", "letters, digits, '.', '_', '-'; not . or ..")  # a user's raw file

RAW_MANIFEST = "data/raw/{dataset}/files_{protocol}.json"  # checksums of the fetched files
TABLE = "data/tables/{dataset}_{protocol}.npz"  # the whole data set as read from its raw files
SPLIT = "data/splits/{dataset}/{protocol}/split{split}.npz"  # one standardized train/test split
PRETRAINED = "results/pretrain/{dataset}/{protocol}/split{split}.json"  # exact-GP hyperparameters
PRETRAIN_CHECKPOINT = PRETRAINED.removesuffix(".json") + ".checkpoint.pt"  # a signalled pretraining's state
BATCH = "results/{experiment}/{dataset}/{method}/M{M}/splits{splits}"  # one training job: splits trained together
SPLIT_FOLDER = "split{split}"  # one split's run folder, inside its job's folder
RUN = BATCH + "/" + SPLIT_FOLDER + "/metrics.json"  # one split's run
CHECKPOINT = BATCH + ".checkpoint.pt"  # a running job's state (beside its folder); removed when it finishes
RUNS = "results/runs.csv"  # every run, one row each
CURVES = "results/learning_curves.csv"  # every run's learning curve, one row per evaluation
CURVES_FIGURE = "results/figures/learning_curves_{experiment}.png"  # every experiment's learning curves
TABLES = "results/tables/{experiment}_{metric}"  # an experiment's `tables` output (Tables 3-4), + .csv .md .tex .html
PAPER_TABLE = TABLES + ".paper.tex"  # beside them, the paper-ready LaTeX table (our numbers only, the best in bold)
VIOLINS = "results/figures/{experiment}_violins"  # its `violins` output (Figure 3), + .png .pdf
POSTERIORS = "results/figures/{experiment}"  # its `posteriors` output (Figure 4), + .png .pdf
REFERENCE = "results/reference/{experiment}_exact_gp.csv"  # the exact GP on a `posteriors` experiment's plotted grid
CLAIMS = "results/claims"  # the paper's claims checked on the study's runs, + .md .csv .html
