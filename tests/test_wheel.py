"""The installed wheel stands outside the checkout (issue 36, "Done when"): from a directory of its own, a venv's
``gpstudy`` reports its version and resolves and trains a run with the defaults packaged in the wheel; its
package is one copy of the code with the checkout it was built of (issue 36, item 4), not with an edit of it."""

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
