"""launcher=slurm: the sweep is one job array (hydra-submitit-launcher), with what a real cluster
needs around it.

- Before anything is submitted, the request is checked against the partition's nodes (`sinfo`): a
  partition that does not exist, GPUs on a partition without any, more CPUs or memory than its
  largest node has. sbatch would refuse some of these with a traceback and accept others to wait
  forever (pending, reason PartitionConfig).
- A cluster without accounting storage (sacct fails): job states come from `squeue`, said once,
  instead of submitit's "Bypassing sacct error" every few seconds and waiting forever on a job that
  ended without a result (cancelled, killed).
- In each array task the cell's timeout is cut to the job's time left, less a margin to record it,
  so a cell that would outlive the time limit is recorded `timeout` (naming SLURM) instead of lost.
  See NOTE [ No time-limit signal ].
- A task that ends without a result (scancel, a node failure) does not stop the others; the sweep
  ends with one line saying how many and that running the same command again resumes.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from sweep.store.database import database_url
from sweep.vocabulary import JobOutcome

# NOTE [ No time-limit signal ]
# submitit asks SLURM for SIGUSR2 `signal_delay_s` (120) before the time limit, to checkpoint and
# requeue. A cell needs neither (its timeout is already cut to the job's time left), and SLURM may
# send the signal up to a minute early, so on a short limit it arrives while the task's Python is
# still starting, before any handler: USR2's default action kills the task, which records nothing.
# The warning is sent as SIGURG instead, whose default action is to ignore it.
TIME_LIMIT_SIGNAL = f"{int(signal.SIGURG)}@60"
RECORD_MARGIN_S = 20.0  # of a task's time left, kept to record its cell and exit
RESULT_GRACE_S = 15.0  # a result file may appear late on a network file system (submitit waits as long)
UNLIMITED = ("UNLIMITED", "NOT_SET", "INVALID")


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


# -- before submitting ----------------------------------------------------------------------------


@functools.cache
def partition_nodes(partition: str) -> list[dict] | None:
    """CPUs, memory (MiB) and GPUs of each node of `partition`; None where sinfo cannot tell."""
    try:
        listing = _run("sinfo", "-h", "-N", "-p", partition, "-o", "%N|%c|%m|%G")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listing.returncode != 0:
        return None
    nodes = []
    for line in listing.stdout.splitlines():
        name, cpus, memory, gres = line.split("|")
        gpus = sum(int(m[1]) for m in re.finditer(r"gpu(?::[^:(,]+)?:(\d+)", gres))
        nodes.append({"name": name, "cpus": int(cpus.rstrip("+")), "memory_mb": int(memory.rstrip("+")), "gpus": gpus})
    return nodes


def partitions() -> list[str]:
    listing = _run("sinfo", "-h", "-o", "%R")
    return sorted(set(listing.stdout.split())) if listing.returncode == 0 else []


def config_problems(job) -> list[str]:
    """Before anything is submitted: the database every node must share, and the request against
    the partition's nodes."""
    if database_url(str(job.db.url)).startswith("sqlite"):
        return [
            "launcher=slurm runs cells on many nodes, which cannot share a SQLite file safely: "
            "set db.url to a PostgreSQL URL (postgresql+psycopg://user:password@host/database)"
        ]
    return request_problems(job.slurm)


def request_problems(settings) -> list[str]:
    """What in the `slurm:` settings no node of the partition can give, in one line each."""
    partition = settings.partition
    nodes = partition_nodes(partition)
    if nodes is None:  # no sinfo here (a submit host without the SLURM client?): sbatch will say
        return []
    if not nodes:
        known = ", ".join(partitions()) or "none"
        return [f"slurm.partition={partition}: no such partition on this cluster (sinfo lists: {known})"]
    problems = []
    if settings.gpus_per_task and not any(node["gpus"] for node in nodes):
        problems.append(
            f"slurm.gpus_per_task={settings.gpus_per_task}, but partition {partition} has no GPUs (sinfo shows "
            f"no gpu gres on its nodes): choose a GPU partition, or set slurm.gpus_per_task=null for CPU cells "
            f"(a prediction sweep: predict=true)"
        )
    for option, asked, have, unit in (
        ("gpus_per_task", settings.gpus_per_task, max(n["gpus"] for n in nodes), " GPU(s)"),
        ("cpus_per_task", settings.cpus_per_task, max(n["cpus"] for n in nodes), " CPUs"),
        ("mem_gb", settings.mem_gb and settings.mem_gb * 1024, max(n["memory_mb"] for n in nodes), " MiB"),
    ):
        if asked and have and asked > have:
            problems.append(
                f"slurm.{option}={getattr(settings, option)}, but the largest node of partition {partition} has "
                f"{have}{unit}: SLURM would keep the array pending forever"
            )
    return problems


def one_line(error: BaseException) -> str:
    """sbatch's own complaint out of a submission error (submitit wraps it in a long message)."""
    text = str(getattr(error, "output", "") or "") + str(getattr(error, "stderr", "") or "") + str(error)
    found = re.findall(r"sbatch: error: ([^\n\\]+)", text)
    return "; ".join(dict.fromkeys(found)) if found else text.strip().splitlines()[-1]


# -- while waiting: job states without accounting -------------------------------------------------


def squeue_states(job_ids: set[str]) -> dict[str, str] | None:
    """Each array task's state by `squeue` (the jobs slurmctld still holds, finished ones included);
    None when squeue cannot answer (the controller restarting)."""
    try:
        listing = _run("squeue", "-h", "-r", "--states=all", "-o", "%i|%T", "-j", ",".join(sorted(job_ids)))
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listing.returncode != 0:
        return None
    states = {}
    for line in listing.stdout.splitlines():
        job, _, state = line.partition("|")
        states[job] = state
    return states


def watcher_class():
    from submitit.slurm.slurm import SlurmInfoWatcher

    class AccountingFreeWatcher(SlurmInfoWatcher):
        """sacct where accounting storage is on; squeue where it is off (said once). A task squeue no
        longer lists has ended (slurmctld keeps finished jobs for MinJobAge)."""

        accounting = True

        def update(self) -> None:
            if self.accounting:
                command = self._make_command()
                if command is None:
                    return
                try:
                    done = _run(*command)
                except (OSError, subprocess.TimeoutExpired) as error:
                    done = subprocess.CompletedProcess(command, 1, "", str(error))
                if done.returncode == 0:
                    self._info_dict.update(self.read_info(done.stdout))
                    return self._after_update()
                type(self).accounting = False
                reason = (done.stderr.strip().splitlines() or ["sacct failed"])[-1]
                say(f"SLURM accounting is not available ({reason}): job states come from squeue")
            pending = self._registered - self._finished
            if not pending:
                return
            states = squeue_states({job.split("_")[0] for job in pending})
            if states is None:
                return
            for job in pending:
                self._info_dict[job] = {"JobID": job, "State": states.get(job, "ENDED")}
            self._after_update()

        def _after_update(self) -> None:
            self._num_calls += 1
            self._last_status_check = time.time()
            for job in self._registered - self._finished:
                if self.is_done(job, mode="cache"):
                    self._finished.add(job)

    return AccountingFreeWatcher


# -- inside an array task -------------------------------------------------------------------------


def parse_time_left(text: str) -> float | None:
    """squeue's %L ("1-02:03:04", "02:03:04", "03:04", "UNLIMITED") in seconds."""
    text = text.strip()
    if not text or text in UNLIMITED:
        return None
    days, _, clock = text.rpartition("-")
    seconds = 0.0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400


@functools.lru_cache(maxsize=1)
def _deadline() -> tuple[float, str] | None:
    """When this task's time runs out (monotonic clock), and the task's name; None where unknown."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    if "SLURM_ARRAY_TASK_ID" in os.environ:  # the last task's job id is the array's: it would list them all
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    try:
        listing = _run("squeue", "-h", "-j", job, "-o", "%L").stdout.split()
        left = parse_time_left(listing[0]) if listing else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return None if left is None else (time.monotonic() + left, job)


def cell_time_limit(timeout_s: float) -> tuple[float, str | None]:
    """The cell's timeout inside a SLURM job: its own, or the job's time left less RECORD_MARGIN_S when
    that is shorter (with why, for the cell's reason)."""
    deadline = _deadline()
    if deadline is None:
        return timeout_s, None
    left = deadline[0] - time.monotonic()
    if left - RECORD_MARGIN_S >= timeout_s:
        return timeout_s, None
    budget = max(1.0, left - RECORD_MARGIN_S)
    return budget, (
        f"SLURM time limit: job {deadline[1]} had {left:.0f} s left, so the cell was given {budget:.0f} s "
        f"(raise slurm.time_min)"
    )


# -- the launcher ---------------------------------------------------------------------------------


def run_task(call, *args, **kwargs):
    """The job of one array task. SIGTERM (scancel, preemption, the time limit) stops its cell and
    records nothing, as Ctrl-C does locally (submitit would ignore it, and the task would record the
    cell its child was killed in as crashed): the task ends without a result, the sweep says so, and
    running the same command again runs the cell."""
    from sweep.run.heap import collector_paused

    with collector_paused():  # a task's process imports torch here: NOTE [ Imports without the collector ]
        from sweep.run import app
        from sweep.run.interruption import handled

    app.time_limit = cell_time_limit  # each cell gets no more than the job has left
    with handled("stopped by SLURM (SIGTERM): nothing of this cell is recorded"):
        return call(*args, **kwargs)


def launch_array(launcher, job_overrides, initial_job_idx: int) -> list:
    """Submit one job array for the jobs, wait for every task, and return what each left."""
    from hydra.core.singleton import Singleton
    from submitit import AutoExecutor
    from submitit.slurm.slurm import SlurmJob

    SlurmJob.watcher = watcher_class()(delay_s=10)  # polls squeue at most every 10 s
    params = dict(launcher.params)
    params["additional_parameters"] = {"signal": TIME_LIMIT_SIGNAL, **(params.get("additional_parameters") or {})}
    executor = AutoExecutor(
        folder=params.pop("submitit_folder"),
        cluster="slurm",
        slurm_max_num_timeout=params.pop("max_num_timeout"),
    )
    executor.update_parameters(**{queue_parameter(k): v for k, v in params.items()})
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    numbers = range(initial_job_idx, initial_job_idx + len(job_overrides))
    arguments = [
        (list(overrides), "hydra.sweep.dir", number, f"job_id_for_{number}", Singleton.get_state())
        for number, overrides in zip(numbers, job_overrides)
    ]
    try:
        jobs = executor.map_array(launcher, *zip(*arguments))
    except Exception as error:  # noqa: BLE001 - sbatch refused the array: its message, in one line
        raise SystemExit(f"ckpt-sweep: sbatch refused the job array: {one_line(error)}") from None
    ended = collect(jobs)
    lost = [f"{job.job_id} {state}" for job, state in zip(jobs, ended) if state is not None]
    if lost:
        say(
            f"{len(lost)} array task(s) ended without recording a cell ({', '.join(lost)}): "
            "run the same command again to resume"
        )
    return [job.results()[0] if state is None else lost_return(job, state) for job, state in zip(jobs, ended)]


def lost_return(job, state: str):
    """What Hydra gets for a task that left no result (its cell is simply not recorded)."""
    from hydra.core.utils import JobReturn, JobStatus

    ret = JobReturn(status=JobStatus.COMPLETED)
    ret.return_value = {"status": JobOutcome.LOST, "skipped": False, "reason": f"array task {job.job_id}: {state}"}
    return ret


def say(line: str) -> None:
    print(f"ckpt-sweep: {line}", file=sys.stderr, flush=True)


def queue_parameter(name: str) -> str:
    """submitit's name for a launcher setting (the shared ones as they are, the rest slurm_-prefixed)."""
    return name if name in shared_queue_parameters() else f"slurm_{name}"


@functools.cache
def shared_queue_parameters() -> frozenset[str]:
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    return frozenset(OmegaConf.structured(BaseQueueConf).keys())


def collect(jobs) -> list[str | None]:
    """Wait until every task has ended; None for each that left a result, else its SLURM state. A
    task SLURM says completed may write its result a little later (a network file system). Each
    result moves the driver's progress bar as it lands."""
    shown: set[int] = set()
    while not all(job.done() for job in jobs):
        show_results(jobs, shown)
        time.sleep(1)
    deadline = time.monotonic() + RESULT_GRACE_S
    while any(late(job) for job in jobs) and time.monotonic() < deadline:
        time.sleep(1)
    show_results(jobs, shown)
    return [None if job.paths.result_pickle.exists() else job.state for job in jobs]


def show_results(jobs, shown: set[int]) -> None:
    """Pass each newly landed result to the driver's progress display (once)."""
    from sweep.run import progress

    for number, job in enumerate(jobs):
        if number in shown or not job.paths.result_pickle.exists():
            continue
        shown.add(number)
        try:
            result = job.results()[0]
        except Exception:  # noqa: BLE001 - a task that raised: Hydra gets its error when the sweep ends
            continue
        progress.job_ended(result)


def late(job) -> bool:
    return not job.paths.result_pickle.exists() and job.state in ("COMPLETED", "ENDED")
