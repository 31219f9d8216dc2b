"""The conda environments and pyproject.toml name the same dependencies at the same floors, from the
channels that publish them; the rules' job environment names no path; the version is written once.
No conda reaches this machine: these are the checks that can be made without solving
(docs/installation.md says what has never run)."""

import re
import runpy
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CONDA_NAMES = {"pytorch": "torch", "pytorch-gpu": "torch"}  # conda-forge name -> PyPI name
CHANNEL_OF = {"snakemake": "bioconda", "snakemake-executor-plugin-slurm": "bioconda"}  # else conda-forge
PLANNER_ONLY = {"snakemake", "pygments"}  # the process that plans needs them, a job does not
JOB_ENVIRONMENT = "envs/gpstudy.yml"


def requirement(text: str) -> tuple[str, str]:
    name, spec = re.match(r"^([A-Za-z0-9_.-]+)\s*(.*)$", text.strip()).groups()
    return CONDA_NAMES.get(name.lower(), name.lower()), spec.replace(" ", "")


def pyproject_side(*extras: str) -> dict[str, str]:
    project = PYPROJECT["project"]
    return dict(
        map(requirement, project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]])
    )


def conda_file(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


def conda_side(name: str) -> dict[str, str]:
    """The file's conda packages (python and pip aside) as PyPI name -> floor."""
    packages = dict(requirement(d) for d in conda_file(name)["dependencies"] if isinstance(d, str))
    return {key: spec for key, spec in packages.items() if key not in ("python", "pip")}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("environment.yml", lambda: pyproject_side("slurm")),
        ("envs/test.yml", lambda: {k: v for k, v in pyproject_side("test").items() if k not in pyproject_side()}),
        (JOB_ENVIRONMENT, lambda: {k: v for k, v in pyproject_side().items() if k not in PLANNER_ONLY}),
    ],
)
def test_each_environment_has_pyprojects_packages_and_floors(name, expected):
    assert conda_side(name) == expected()


@pytest.mark.parametrize("name", ["environment.yml", "envs/test.yml", JOB_ENVIRONMENT])
def test_each_environment_asks_the_channels_that_publish_its_packages(name):
    """conda-forge first (strict priority), bioconda for Snakemake and its SLURM plugin (Snakemake's
    installation docs), and no channel of another world (defaults, pytorch, nvidia)."""
    channels = conda_file(name)["channels"]
    needed = {CHANNEL_OF.get(package, "conda-forge") for package in conda_side(name)}
    assert channels[0] == "conda-forge" and set(channels) == needed


def test_the_python_floor_is_pyprojects():
    floor = PYPROJECT["project"]["requires-python"]
    for name in ("environment.yml", JOB_ENVIRONMENT):
        assert f"python{floor}" in conda_file(name)["dependencies"], name


def test_every_rule_runs_in_the_job_environment_which_names_no_path():
    """Snakemake copies a rule's environment file into .snakemake/conda/: a relative path in it
    (``pip: [-e .]``) would point nowhere. The job environment has no pip section at all."""
    directives = re.findall(
        r"^\s+conda:\s*\n\s+(.+)$", "".join(p.read_text() for p in (REPO / "rules").glob("*.smk")), flags=re.MULTILINE
    )
    assert len(directives) >= 10 and set(directives) == {f'"../{JOB_ENVIRONMENT}"'}
    dependencies = conda_file(JOB_ENVIRONMENT)["dependencies"]
    assert all(isinstance(d, str) and requirement(d)[0] != "pip" for d in dependencies)


def test_every_requirement_has_a_floor_that_floors_py_pins():
    """.ci/floors.sh installs exactly pyproject.toml's floors, extras included."""
    project = PYPROJECT["project"]
    extras = list(project["optional-dependencies"])
    requirements = project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]
    pins = runpy.run_path(str(REPO / ".ci" / "floors.py"))["floor_pins"](extras)
    assert [pin.replace("==", ">=") for pin in pins] == [r.replace(" ", "") for r in requirements]


def test_the_version_is_written_once():
    """gpstudy/__init__.py's ``__version__`` is the version and pyproject.toml reads it. CITATION.cff, a static file
    citations read, names its release (issue 48), checked against CHANGELOG.md and the version by tests/test_wheel.py
    (a .dev0 version after a release: docs/releasing.md)."""
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gpstudy.__version__"}


def test_the_citation_names_the_gpnet_paper_and_the_license_is_mit():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    paper = citation["references"][0]
    assert paper["title"] == "Scalable Training of Inference Networks for Gaussian-Process Models"
    assert [a["family-names"] for a in paper["authors"]] == ["Shi", "Khan", "Zhu"] and paper["year"] == 2019
    assert citation["license"] == PYPROJECT["project"]["license"] == "MIT"
    assert (REPO / "LICENSE").read_text().startswith("MIT License")


def test_the_packaged_defaults_are_the_checkouts_config_yaml():
    """The defaults a wheel carries are config.yaml itself (a link, not a copy that could drift)."""
    from gpstudy.study import DEFAULT_CONFIG

    assert DEFAULT_CONFIG == REPO / "gpstudy" / "config.yaml"
    assert DEFAULT_CONFIG.is_symlink() and DEFAULT_CONFIG.readlink() == Path("../config.yaml")
    assert "*.yaml" in PYPROJECT["tool"]["setuptools"]["package-data"]["gpstudy"]
