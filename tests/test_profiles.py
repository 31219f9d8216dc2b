"""The workflow profiles: a failed job's error reaches the console, not only its log file (issue 25's
newcomer cases: a device or a fetch that fails said only "check log file(s)")."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@pytest.mark.parametrize("profile", ["default", "slurm"])
def test_every_profile_shows_failed_logs(profile):
    settings = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
    assert settings["show-failed-logs"] is True


def test_a_failed_job_prints_its_error_on_the_console(tmp_path):
    """A user's CSV whose pinned sha256 is wrong: the fetch fails, and with the default profile (which
    Snakemake takes from beside the Snakefile) the console shows the log's checksum error."""
    (tmp_path / "mirror" / "mydata").mkdir(parents=True)
    csv = tmp_path / "mirror" / "mydata" / "mydata.csv"
    csv.write_text("a,b,y\n" + "".join(f"{i},{i % 7},{i % 5}\n" for i in range(40)))
    observed = hashlib.sha256(csv.read_bytes()).hexdigest()
    overlay = {
        "datasets": ["mydata"],
        "run_experiments": ["mine"],
        "mirror": str(tmp_path / "mirror"),
        "dataset_options": {
            "mydata": {
                "source": {"file": "mydata.csv", "sha256": "1" * 64},
                "format": "csv",
                "target": -1,
                "task": "regression",
            }
        },
        "experiments": {"mine": {"datasets": ["mydata"], "methods": {"svgp": [5]}}},
    }
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    run = subprocess.run(
        [
            SNAKEMAKE,
            "--cores",
            "1",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(REPO / "config.yaml"),
            str(tmp_path / "overlay.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert f"observed {observed}" in run.stdout + run.stderr  # the log's own words, on the console


def test_the_slurm_profiles_header_quotes_snakemakes_error_without_the_plugin(tmp_path):
    """Issue 49: without snakemake-executor-plugin-slurm the profile ends in a 100-line argparse dump; its
    header quotes the dump's last line as Snakemake prints it, with the install line and docs/clusters.md."""
    pytest.importorskip("snakemake")
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the SLURM plugin is installed: the error cannot occur here")
    run = subprocess.run(
        [SNAKEMAKE, "--workflow-profile", str(REPO / "profiles/slurm"), "-n"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = (run.stdout + run.stderr).strip().splitlines()[-1]
    assert run.returncode == 2 and "invalid choice: 'slurm'" in last, last
    header = [line.removeprefix("#").strip() for line in (REPO / "profiles/slurm/config.yaml").read_text().splitlines()]
    index = header.index(last)
    assert "pip install -e '.[slurm]'; see docs/clusters.md" in header[index + 1], header[index + 1]
