"""The one path grammar of a study's files, shared by the Snakemake rules and the ``gpstudy`` CLI.

Patterns are relative to the working directory; ``{name}`` fields are Snakemake wildcards.
"""

RAW_MANIFEST = "data/raw/{dataset}/files_{protocol}.json"  # checksums of the fetched files
TABLE = "data/tables/{dataset}_{protocol}.npz"  # the whole data set as read from its raw files
SPLIT = "data/splits/{dataset}/{protocol}/split{split}.npz"  # one standardized train/test split
PRETRAINED = "results/pretrain/{dataset}/{protocol}/split{split}.json"  # exact-GP hyperparameters
RUN = "results/{experiment}/{dataset}/{method}/M{M}/split{split}/metrics.json"  # one training run
RUNS = "results/runs.csv"  # every run, one row each
CURVES = "results/learning_curves.csv"  # every run's learning curve, one row per evaluation
