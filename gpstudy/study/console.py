"""The study's console: Snakemake's terminal output, one line as a job starts and one as it ends with the
study's jobs done of N, the time elapsed and an estimate of the time left, in place of Snakemake's block of
rule, files, reason and resources a job (about 17 lines). Errors, warnings and the job stats pass unchanged;
a dry run, ``--verbose`` and Snakemake's complete log under ``.snakemake/log/`` keep Snakemake's own blocks.
"""

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from snakemake.logging import LogEvent, logger

from gpstudy.runtime.job import duration, job_name

SNAKEMAKES_CONSOLE = "DefaultStreamHandler"  # the name Snakemake gives the handler that writes its console
CONDENSED = (LogEvent.JOB_INFO, LogEvent.JOB_STARTED, LogEvent.JOB_FINISHED, LogEvent.PROGRESS)  # a line a job
SELECTING_JOBS = "Select jobs to execute..."  # Snakemake's line before each scheduling round (no event)


@dataclass
class RunningJob:
    """A job the study started: its rule, its name as a job's log gives it (rule and wildcards), when it started."""

    rule: str
    name: str
    started: float


class StudyClock:
    """The study's jobs as they start and end, and the time left by the rules' mean times so far.

    The time left is the work left, each job left counted at the mean time of its rule's finished jobs
    (less what a running one has run), over the study's parallelism so far (seconds of jobs run per second
    of wall clock). A rule none of whose jobs has ended yet (the aggregation's, until the training's end)
    cannot be timed: its jobs are counted beside the time, "+ n untimed jobs".
    """

    def __init__(self) -> None:
        self.planned: dict[str, int] = {}  # rule -> jobs planned this run (Snakemake's job stats)
        self.running: dict[int, RunningJob] = {}
        self.seconds: defaultdict[str, list[float]] = defaultdict(list)  # rule -> its finished jobs' times
        self.first_start: float | None = None
        self.last_finished: tuple[RunningJob, float] | None = None
        self.failed = 0  # jobs that failed (under --keep-going the study goes on)

    def plan(self, job_counts: dict[str, int]) -> None:
        self.planned = {rule: count for rule, count in job_counts.items() if rule != "total"}

    def start(self, jobid: int, rule: str, wildcards: dict[str, Any], now: float) -> RunningJob:
        job = RunningJob(rule, job_name(rule, wildcards), now)
        self.running[jobid] = job
        if self.first_start is None:
            self.first_start = now
        return job

    def finish(self, jobid: int, now: float) -> None:
        if (job := self.running.pop(jobid, None)) is not None:
            self.seconds[job.rule].append(now - job.started)
            self.last_finished = job, now - job.started

    def fail(self, jobid: int | None) -> None:
        self.running.pop(jobid, None)
        self.failed += 1

    def time_left(self, now: float) -> tuple[float, int] | None:
        """Seconds left for the rules timed so far, and the jobs left of rules none of whose jobs has ended
        (not counted); None before any job has ended or without the plan."""
        if not self.planned or not self.seconds or self.first_start is None:
            return None
        mean = {rule: sum(times) / len(times) for rule, times in self.seconds.items()}
        left = {rule: planned - len(self.seconds.get(rule, ())) for rule, planned in self.planned.items()}
        running_for = [(job.rule, now - job.started) for job in self.running.values()]
        work = sum(left[rule] * mean[rule] for rule in left if rule in mean)
        work -= sum(min(ran, mean[rule]) for rule, ran in running_for if rule in mean)
        busy = sum(map(sum, self.seconds.values())) + sum(ran for _, ran in running_for)
        parallelism = max(busy / max(now - self.first_start, 1e-9), 1.0)
        return max(work, 0.0) / parallelism, sum(max(n, 0) for rule, n in left.items() if rule not in mean)

    def progress(self, done: int, total: int, now: float) -> str:
        """'k of N jobs done (p%)[, f failed], elapsed, about T left [+ n untimed jobs]; the job that ended took t'."""
        line = f"{done} of {total} jobs done ({100 * done / max(total, 1):.0f}%)"
        if self.failed:
            line += f", {self.failed} failed"
        if self.first_start is not None:
            line += f", {duration(now - self.first_start)} elapsed"
        if done < total and (estimate := self.time_left(now)) is not None:
            seconds, untimed = estimate
            line += f", about {duration(seconds)} left"
            if untimed:
                line += f" + {untimed} untimed job" + "s" * (untimed > 1)
        if self.last_finished is not None:
            job, seconds = self.last_finished
            line += f"; {job.name} took {duration(seconds)}"
        return line


class StudyConsole(logging.Handler):
    """Snakemake's console handler, wrapped: a job's start and end each become one line of :class:`StudyClock`;
    every other record goes to Snakemake's handler as before (filtered by it: ``--quiet`` holds)."""

    def __init__(self, snakemakes: logging.Handler, workflow: Any) -> None:
        super().__init__()
        self.snakemakes = snakemakes
        self.workflow = workflow
        self.clock = StudyClock()

    def condensed(self) -> bool:
        """Whether this run's console is the study's (not a dry run, nor ``--verbose``)."""
        return not self.workflow.dryrun and not self.workflow.output_settings.verbose

    def emit(self, record: logging.LogRecord) -> None:
        event, now = getattr(record, "event", None), time.monotonic()
        if event == LogEvent.RUN_INFO:
            self.clock.plan(record.stats)
        elif event == LogEvent.JOB_INFO:
            self.clock.start(record.jobid, record.rule_name, getattr(record, "wildcards", {}), now)
        elif event == LogEvent.JOB_FINISHED:
            self.clock.finish(record.job_id, now)
        elif event == LogEvent.JOB_ERROR:
            self.clock.fail(getattr(record, "jobid", None))
        if not self.condensed() or (event not in CONDENSED and record.msg != SELECTING_JOBS):
            self.snakemakes.handle(record)
        elif not self.snakemakes.filter(record):  # --quiet rules or progress
            return
        elif event == LogEvent.JOB_INFO:
            log = f", log {', '.join(record.log)}" if getattr(record, "log", None) else ""
            self.write(f"started {self.clock.running[record.jobid].name}{log}")
        elif event == LogEvent.PROGRESS:
            self.write(self.clock.progress(record.done, record.total, now))

    def write(self, line: str) -> None:
        self.snakemakes.handle(
            logging.makeLogRecord(
                {
                    "name": "snakemake.logging",
                    "levelno": logging.INFO,
                    "levelname": "INFO",
                    "msg": f"[{time.strftime('%H:%M:%S')}] {line}",
                }
            )
        )

    def close(self) -> None:
        self.snakemakes.close()
        super().close()


def show_study_console(workflow: Any) -> None:
    """Give the run's console to :class:`StudyConsole` (from the Snakefile, once it is read): in Snakemake's main
    process only, where its own console handler writes (not under a ``--logger`` plugin that writes to the
    terminal itself)."""
    if not workflow.is_main_process:
        return
    for handler in logger.handlers:
        if handler.name == SNAKEMAKES_CONSOLE:
            logger.removeHandler(handler)
            console = StudyConsole(handler, workflow)
            console.name = "StudyConsole"
            console.setLevel(handler.level)
            logger.addHandler(console)
            return
