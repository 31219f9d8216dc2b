"""Rule snelson_figure: Figure 4, each method's posterior beside the exact GP's on Snelson's data."""

import json
from pathlib import Path

from gpstudy.data import load_split
from gpstudy.io import log_to
from gpstudy.plots import snelson_figure
from gpstudy.results import collect_predictions
from gpstudy.training import RunSettings, exact_reference

log_to(snakemake.log[0])
split = load_split(snakemake.input.split)
pretrained = [Path(p) for p in snakemake.input.hyperparameters]
hyperparameters = json.loads(pretrained[0].read_text()) if pretrained else None
reference = exact_reference(split, hyperparameters, RunSettings(method="exact", M=1, device="cpu"))
snelson_figure(collect_predictions(snakemake.input.runs), reference,
               split.original_x(split.x_train)[:, 0], split.original_y(split.y_train),
               Path(snakemake.output.png), Path(snakemake.output.pdf))
