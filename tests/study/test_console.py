"""The study's console: the time left from the rules' mean times and the study's parallelism, and Snakemake's
records through the console as Snakemake's own handler writes them (the quick study's real console:
tests/test_workflow.py)."""

import io
import logging
from types import SimpleNamespace

import pytest
from snakemake.logging import ColorizingTextHandler, DefaultFilter, DefaultFormatter, LogEvent

from gpstudy.study.console import StudyClock, StudyConsole


def test_time_left_counts_the_rules_mean_times_over_the_parallelism_so_far():
    study = StudyClock()
    study.plan({"train": 4, "tables": 1, "total": 5})
    assert study.time_left(0.0) is None  # nothing has ended
    for jobid in (1, 2):  # two at once, 10 s each: parallelism 2
        study.start(jobid, "train", {"M": 100}, now=0.0)
    study.finish(1, now=10.0)
    study.finish(2, now=10.0)
    seconds, untimed = study.time_left(10.0)
    assert seconds == pytest.approx(2 * 10 / 2) and untimed == 1  # tables' one job
    study.start(3, "train", {"M": 500}, now=10.0)
    seconds, _ = study.time_left(14.0)  # 2 left at 10 s, one 4 s in; busy 24 s in 14 s
    assert seconds == pytest.approx((20 - 4) / (24 / 14))
    study.finish(3, now=20.0)
    study.start(4, "train", {}, now=20.0)
    study.finish(4, now=30.0)
    study.start(5, "tables", {}, now=30.0)
    study.finish(5, now=31.0)
    assert study.time_left(31.0) == (0.0, 0)


def test_a_job_in_parallel_is_not_counted_twice():
    """One job at a time: parallelism 1, the left work as it is (a parallelism read as 2 would halve it)."""
    study = StudyClock()
    study.plan({"train": 3})
    study.start(1, "train", {}, now=0.0)
    study.finish(1, now=60.0)
    assert study.time_left(60.0) == (pytest.approx(120.0), 0)


def test_progress_line_names_the_job_that_ended_and_the_time_left():
    study = StudyClock()
    study.plan({"split": 2, "train": 2, "total": 4})
    assert study.progress(0, 4, now=0.0) == "0 of 4 jobs done (0%)"
    study.start(7, "split", {"dataset": "boston", "split": 0}, now=0.0)
    study.finish(7, now=3.0)
    assert study.progress(1, 4, now=3.0) == (
        "1 of 4 jobs done (25%), 0:00:03 elapsed, about 0:00:03 left + 2 untimed jobs; "
        "split (dataset=boston, split=0) took 0:00:03"
    )
    study.start(8, "split", {}, now=3.0)
    study.finish(8, now=6.0)
    line = study.progress(2, 4, now=6.0)  # every split done, train untimed
    assert line == "2 of 4 jobs done (50%), 0:00:06 elapsed, about 0:00:00 left + 2 untimed jobs; split took 0:00:03"
    study.start(9, "train", {}, now=6.0)
    study.finish(9, now=66.0)
    line = study.progress(3, 4, now=66.0)
    assert line == "3 of 4 jobs done (75%), 0:01:06 elapsed, about 0:01:00 left; train took 0:01:00"
    study.start(10, "train", {}, now=66.0)
    study.finish(10, now=120.0)
    assert study.progress(4, 4, now=120.0) == "4 of 4 jobs done (100%), 0:02:00 elapsed; train took 0:00:54"


def test_a_failed_job_leaves_the_running_jobs():
    study = StudyClock()
    study.plan({"train": 2})
    study.start(1, "train", {}, now=0.0)
    study.start(2, "train", {}, now=0.0)
    study.fail(2)
    study.finish(1, now=10.0)
    assert study.time_left(10.0) == (pytest.approx(10.0), 0)  # the failed job's 10 s not counted as busy
    assert study.progress(1, 2, now=10.0).startswith("1 of 2 jobs done (50%), 1 failed, 0:00:10 elapsed")


def console(dryrun: bool = False, verbose: bool = False, quiet=None) -> tuple[logging.Logger, io.StringIO]:
    """A logger whose console is StudyConsole around Snakemake's own handler, filter and formatter."""
    stream = io.StringIO()
    snakemakes = ColorizingTextHandler(nocolor=True, stream=stream)
    snakemakes.addFilter(DefaultFilter(quiet, debug_dag=False, verbose=verbose, dryrun=dryrun, printshellcmds=False))
    snakemakes.setFormatter(DefaultFormatter(quiet))
    workflow = SimpleNamespace(dryrun=dryrun, output_settings=SimpleNamespace(verbose=verbose))
    log = logging.getLogger(f"test_console.{dryrun}.{verbose}.{quiet}")
    log.handlers[:] = [StudyConsole(snakemakes, workflow)]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log, stream


def job_info(jobid: int, rule: str, **wildcards) -> dict:
    return dict(
        event=LogEvent.JOB_INFO,
        jobid=jobid,
        rule_msg=None,
        rule_name=rule,
        local=True,
        input=["a"],
        output=[f"{rule}.out"],
        log=[f"logs/{rule}.log"],
        benchmark=None,
        wildcards=wildcards,
        reason="Missing",
        resources={},
        priority=1,
        threads=1,
        indent=False,
        is_checkpoint=False,
        is_handover=False,
    )


def run_one_job(log: logging.Logger) -> None:
    log.info("Job stats: ...", extra=dict(event=LogEvent.RUN_INFO, stats={"train": 1, "total": 1}))
    log.info("Select jobs to execute...")
    log.info("Execute 1 jobs...", extra=dict(event=LogEvent.JOB_STARTED, jobs=[3]))
    log.info(" Rule: train, Jobid: 3", extra=job_info(3, "train", dataset="boston", M=100))
    log.warning("a warning of the job's")
    log.info("Finished jobid: 3 (Rule: train)", extra=dict(event=LogEvent.JOB_FINISHED, job_id=3))
    log.info(None, extra=dict(event=LogEvent.PROGRESS, done=1, total=1))


def test_a_job_is_two_lines_and_everything_else_passes():
    log, stream = console()
    run_one_job(log)
    lines = stream.getvalue().splitlines()
    assert [line.split("] ", 1)[-1] for line in lines] == [
        "Job stats: ...",
        "started train (dataset=boston, M=100), log logs/train.log",
        "a warning of the job's",
        "1 of 1 jobs done (100%), 0:00:00 elapsed; train (dataset=boston, M=100) took 0:00:00",
    ]
    assert lines[1].startswith("[") and lines[3].startswith("[")  # a clock time each


@pytest.mark.parametrize("setting", ["dryrun", "verbose"])
def test_a_dry_run_or_verbose_keeps_snakemakes_blocks(setting):
    log, stream = console(**{setting: True})
    run_one_job(log)
    text = stream.getvalue()
    assert "rule train:" in text and "wildcards: dataset=boston, M=100" in text and "Select jobs" in text
    assert "1 of 1 steps (100%) done" in text and "jobs done" not in text


def test_quiet_progress_and_rules_hold():
    from snakemake.settings.enums import Quietness

    log, stream = console(quiet={Quietness.PROGRESS, Quietness.RULES})
    run_one_job(log)
    assert stream.getvalue().splitlines() == ["a warning of the job's"]
