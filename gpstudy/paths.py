"""The one path grammar of a study's files, shared by the Snakemake rules and the ``gpstudy`` CLI.

Patterns are relative to the working directory; ``{name}`` fields are Snakemake wildcards.
"""

RAW_MANIFEST = "data/raw/{dataset}/files_{protocol}.json"  # checksums of the fetched files
TABLE = "data/tables/{dataset}_{protocol}.npz"  # the whole data set as read from its raw files
SPLIT = "data/splits/{dataset}/{protocol}/split{split}.npz"  # one standardized train/test split
PRETRAINED = "results/pretrain/{dataset}/{protocol}/split{split}.json"  # exact-GP hyperparameters
BATCH = "results/{experiment}/{dataset}/{method}/M{M}/splits{splits}"  # one training job: splits trained together
SPLIT_FOLDER = "split{split}"  # one split's run folder, inside its job's folder
RUN = BATCH + "/" + SPLIT_FOLDER + "/metrics.json"  # one split's run
CHECKPOINT = BATCH + ".checkpoint.pt"  # a running job's state (beside its folder); removed when it finishes
RUNS = "results/runs.csv"  # every run, one row each
CURVES = "results/learning_curves.csv"  # every run's learning curve, one row per evaluation
CURVES_FIGURE = "results/figures/learning_curves_{experiment}.png"  # every experiment's learning curves
TABLES = "results/tables/{experiment}_{metric}"  # an experiment's `tables` output (Tables 3-4), + .csv .md .tex
VIOLINS = "results/figures/{experiment}_violins"  # its `violins` output (Figure 3), + .png .pdf
POSTERIORS = "results/figures/{experiment}"  # its `posteriors` output (Figure 4), + .png .pdf
