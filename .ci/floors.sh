#!/usr/bin/env bash
# Prove pyproject.toml's floors: install every dependency (and the test extra) at exactly its
# lowest allowed version (.ci/floors.py) into a fresh venv, then run the quick study's smallest slice
# (Concrete, 1 split: fetch from a mirror, split, pretrain, 5 trainings, tables, figures, claims) and the
# fast tests that touch each dependency. Its exit status is the proof; docs/installation.md records a run.
#   .ci/floors.sh [MIRROR]    (default ../shared/data; FLOORS_VENV=.venv-floors, relative to the repository, PYTHON=python3)
# On x86_64 Linux, PyPI's torch is a CUDA build: several GB with its nvidia-* wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
mirror=$(realpath "${1:-../shared/data}")
venv=${FLOORS_VENV:-.venv-floors}  # after the cd above: beside .venv in the repository
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# the slurm extra apart: its floor (2.1) requires numpy and pandas above theirs (docs/installation.md)
"$venv/bin/python" .ci/floors.py test > "$venv/floors.txt"
# compiled packages from wheels only (no silent source builds); pure-Python sdists allowed
"$venv/bin/pip" install -q --only-binary=torch,numpy,pandas,matplotlib,scipy,scikit-learn,python-calamine \
    -r "$venv/floors.txt"
"$venv/bin/pip" install -q --no-deps -e .
"$venv/bin/pip" check
"$venv/bin/python" --version
"$venv/bin/pip" freeze --exclude-editable | grep -iE "^($(cut -d= -f1 "$venv/floors.txt" | paste -sd'|'))=="

study=$(mktemp -d)
trap 'rm -rf "$study"' EXIT
"$venv/bin/snakemake" --cores 2 --configfile configs/quick.yaml --directory "$study" \
    --config mirror="$mirror" 'datasets=[concrete]' splits=1
test -s "$study/results/runs.csv"
# the Excel readers (pandas' calamine engine): the slice reads Concrete's index files, and
# tests/data/test_uci.py skips unless the data copies lie beside the checkout (../shared/data)
"$venv/bin/python" -c "import sys; from pathlib import Path; from gpstudy.data import uci
for name in ('concrete', 'energy'): print(name, getattr(uci, 'read_' + name)(Path(sys.argv[1]) / name).x.shape)" "$mirror"

# test_fit.py's compile tests of GPNet and FBNN skip here: compiling them needs torch 2.13 (docs/installation.md)
"$venv/bin/pytest" -p no:cacheprovider -n 2 \
    tests/test_environment.py tests/training/test_fit.py tests/methods/test_inducing.py tests/likelihoods \
    tests/data/test_uci.py tests/data/test_fetch.py tests/report/test_plots.py tests/study/test_validate.py \
    tests/test_profiles.py tests/test_report.py
