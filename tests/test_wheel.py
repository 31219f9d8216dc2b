"""The installed wheel stands outside the checkout (issue 36, "Done when"): from a directory of its own, a venv's
``gpstudy`` reports its version and resolves and trains a run with the defaults packaged in the wheel; its
package is one copy of the code with the checkout it was built of (issue 36, item 4), not with an edit of it.
The sdist is the whole repository with the metadata to cite and pin it, and its tests run from it unpacked
(issue 48, item 8); the version, CHANGELOG.md and CITATION.cff name one release (docs/releasing.md)."""

import email.parser
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

import gpstudy

REPO = Path(__file__).resolve().parents[1]
# a quick part of the suite run from the unpacked sdist: the package's files and config, and the workflow (the
# README's quick study dry-run by Snakemake: Snakefile, rules/, scripts/, configs/)
SDIST_QUICK = ["tests/test_io.py", "tests/study/test_validate.py", "tests/test_docs.py", "-k", "not dry_run or quick"]
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+) - (\d{4}-\d{2}-\d{2})$", re.M)  # CHANGELOG.md's heading of a release


# The installed console script run under an audit hook that reports every config.yaml opened (on stderr).
WATCHED = """import runpy, sys
sys.addaudithook(lambda event, args: event == "open" and str(args[0]).endswith("config.yaml")
                 and print("opened", args[0], file=sys.stderr))
script, sys.argv = sys.argv[1], ["gpstudy", *sys.argv[2:]]
runpy.run_path(script, run_name="__main__")
"""


def run_watched(bin: Path, env: dict[str, str], cwd: Path, *words: str) -> tuple[str, set[Path]]:
    """The output of the venv's ``gpstudy *words`` run in ``cwd`` (rc 0 asserted), and the config.yaml files it
    opened."""
    run = subprocess.run(
        [bin / "python", "-c", WATCHED, bin / "gpstudy", *words],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout, {Path(line.split(" ", 1)[1]) for line in run.stderr.splitlines() if line.startswith("opened ")}


def test_the_wheel_runs_outside_the_checkout(installed_wheel, outside_env, tmp_path, shared_data):
    where = subprocess.run(
        [
            installed_wheel / "python",
            "-c",
            "import importlib.metadata, gpstudy, gpstudy.study; "
            "print(gpstudy.__file__, gpstudy.study.DEFAULT_CONFIG, importlib.metadata.version('gpstudy'))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env=outside_env,
    ).stdout.split()
    module, packaged, version = Path(where[0]), Path(where[1]), where[2]
    venv = installed_wheel.parent
    assert module.is_relative_to(venv) and not module.is_relative_to(REPO)  # the venv's gpstudy, not the checkout's
    assert packaged.is_relative_to(venv) and not packaged.is_symlink()  # a copy in the wheel, not the checkout's link
    assert packaged.read_text() == (REPO / "config.yaml").read_text()

    shown = subprocess.run(
        [installed_wheel / "gpstudy", "--version"], cwd=tmp_path, capture_output=True, text=True, env=outside_env
    )
    assert (shown.returncode, shown.stdout) == (0, f"gpstudy {version}\n"), shown.stderr

    printed, opened = run_watched(
        installed_wheel, outside_env, tmp_path, "settings", "--dataset", "boston", "--method", "svgp", "--M", "100"
    )
    assert opened == {packaged}
    assert "\nM = 100 " in printed and "config.yaml:" in printed and str(venv) not in printed  # short sources

    _, opened = run_watched(
        installed_wheel,
        outside_env,
        tmp_path,
        "train",
        "--dataset",
        "boston",
        "--method",
        "svgp",
        "--M",
        "5",
        "--iterations",
        "5",
        "--mirror",
        str(shared_data),
        "--config",
        "device=cpu",
    )
    assert opened == {packaged}
    metrics = json.loads((tmp_path / "results/cli/boston/svgp/M5/split0/metrics.json").read_text())
    assert (metrics["status"], metrics["iterations"], metrics["dataset"]) == ("ok", 5, "boston")


def test_a_wheel_of_the_checkout_is_its_code_and_an_edit_of_the_checkout_is_not(
    installed_wheel, outside_env, tmp_path, package_copy
):
    """The gpstudy of a wheel installed outside the checkout passes the jobs' check against the checkout it
    was built of, and is refused once that checkout's code changes (a `git pull` without a reinstall)."""
    edited = package_copy(tmp_path / "edited", changed=True) / "gpstudy"  # the checkout's package, one module edited
    for planned, refused in ((REPO / "gpstudy", False), (edited, True)):
        run = subprocess.run(
            [
                installed_wheel / "python",
                "-c",
                "import sys; from gpstudy.runtime.job import check_same_code; check_same_code(sys.argv[1])",
                str(planned),
            ],
            cwd=tmp_path,
            env=outside_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (run.returncode != 0) == refused, run.stderr
        assert ("CodeCopyError: this process imports gpstudy from " in run.stderr) == refused, run.stderr
        assert (str(installed_wheel.parent) in run.stderr) == refused, run.stderr


@pytest.fixture(scope="module")
def sdist(tmp_path_factory, checkout_copy, outside_env) -> tuple[Path, list[str]]:
    """The sdist built (by pyproject's backend, offline) of a copy of the checkout, and the copy's files."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("building the sdist offline needs setuptools in this environment (pip install 'setuptools>=77')")
    root = tmp_path_factory.mktemp("sdist")
    source = checkout_copy(root / "source")
    files = sorted(str(path.relative_to(source)) for path in source.rglob("*") if path.is_file())
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))",
        ]
        + [str(root)],
        cwd=source,
        env=outside_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return root / built.stdout.split()[-1], files


def test_the_sdist_carries_every_tracked_file_and_the_metadata(sdist):
    tarball, files = sdist
    top = f"gpstudy-{gpstudy.__version__}"
    with tarfile.open(tarball) as archive:
        members = {name.removeprefix(f"{top}/") for name in archive.getnames()}
        metadata = email.parser.Parser().parsestr(archive.extractfile(f"{top}/PKG-INFO").read().decode())
    assert set(files) - members == set()  # tests/conftest.py, tests/*/, Snakefile, rules/, docs/, locks/, ...
    assert {"tests/conftest.py", "tests/study/test_settings.py", "Snakefile", "rules/train.smk"} <= members
    assert (metadata["Version"], metadata["License-Expression"]) == (gpstudy.__version__, "MIT")
    assert metadata["Author"] == "the gpstudy authors"
    assert "Programming Language :: Python :: 3.11" in metadata.get_all("Classifier")
    assert "Paper, https://proceedings.mlr.press/v97/shi19a.html" in metadata.get_all("Project-URL")
    readme = (REPO / "README.md").read_text()
    linked = {link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in link}
    assert linked and linked - members == set()  # the README's relative links resolve in the unpacked sdist


def test_the_sdists_suite_runs_from_the_unpacked_sdist(sdist, tmp_path, outside_env):
    """The whole suite collects from the unpacked sdist, against its own gpstudy, and a quick part passes."""
    with tarfile.open(sdist[0]) as archive:
        archive.extractall(tmp_path, filter="data")
    (unpacked,) = tmp_path.iterdir()
    env = {**outside_env, "PYTHONPATH": str(unpacked)}
    run = {"cwd": unpacked, "env": env, "capture_output": True, "text": True, "timeout": 600}
    where = subprocess.run([sys.executable, "-c", "import gpstudy; print(gpstudy.__file__)"], **run)
    assert Path(where.stdout.strip()).is_relative_to(unpacked), where.stderr
    pytest_run = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts="]
    collected = subprocess.run([*pytest_run, "--import-mode=importlib", "--collect-only", "-q"], **run)
    assert collected.returncode == 0, collected.stdout[-3000:]
    files = {line.split("::")[0] for line in collected.stdout.splitlines() if "::" in line}
    assert files == {str(path.relative_to(unpacked)) for path in (unpacked / "tests").rglob("test_*.py")}
    quick = subprocess.run([*pytest_run, "--import-mode=importlib", "-q", *SDIST_QUICK], **run)
    assert quick.returncode == 0 and " passed" in quick.stdout, quick.stdout[-3000:]


def test_the_version_the_changelog_and_the_citation_name_one_release():
    """CITATION.cff's version and date are CHANGELOG.md's newest release; gpstudy.__version__ is that release, or
    the .dev0 of a later one under an "Unreleased" heading (docs/releasing.md)."""
    changelog = (REPO / "CHANGELOG.md").read_text()
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    version, date = RELEASE.findall(changelog)[0]
    assert (citation["version"], str(citation["date-released"])) == (version, date)
    release, _, dev = gpstudy.__version__.partition(".dev")
    if dev:
        assert changelog.index("## Unreleased") < changelog.index(f"## {version} ")
        assert tuple(map(int, release.split("."))) > tuple(map(int, version.split(".")))
    else:
        assert release == version and "## Unreleased" not in changelog
