"""The one path grammar of a study's files, shared by the Snakemake rules and the ``gpstudy`` CLI.

Patterns are relative to the working directory; ``{name}`` fields are Snakemake wildcards.
"""

RAW_MANIFEST = "data/raw/{dataset}/files_{protocol}.json"  # checksums of the fetched files
TABLE = "data/tables/{dataset}_{protocol}.npz"  # the whole data set as read from its raw files
SPLIT = "data/splits/{dataset}/{protocol}/split{split}.npz"  # one standardized train/test split
