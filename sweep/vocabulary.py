"""The words every stage shares: what became of a cell (its status, the status's word in the docs'
tables, which statuses are retried) and where a run's figures come from (its provenance)."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    OK = "ok"
    OOM = "oom"  # the device's memory ran out
    HOST_OOM = "host-oom"  # host memory ran out (pinned pool, CPU tensors): not a statement about the card
    FAILED = "failed"
    UNSUPPORTED = "unsupported"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    INVALID = "invalid"
    PREDICTED_OOM = "predicted-oom"  # skipped: predicted not to fit the card


# The docs' words for statuses in a table cell; reading a table maps them back.
TEXT = {
    Status.OK: "ok",
    Status.OOM: "OOM",
    Status.HOST_OOM: "OOM (host)",
    Status.FAILED: "failed",
    Status.UNSUPPORTED: "unsupported",
    Status.TIMEOUT: "timeout",
    Status.CRASHED: "crashed",
    Status.INVALID: "invalid",
    Status.PREDICTED_OOM: "OOM (predicted)",
}
FROM_TEXT = {
    TEXT[s]: s for s in (Status.OOM, Status.FAILED, Status.UNSUPPORTED, Status.TIMEOUT, Status.CRASHED, Status.INVALID)
}
RETRYABLE = (Status.FAILED, Status.TIMEOUT, Status.CRASHED)  # what run.rerun=failed runs again
# Statuses that say something about memory (diff reports their transitions as fit changes).
OUT_OF_MEMORY = (Status.OOM, Status.PREDICTED_OOM)


class Provenance(StrEnum):
    """Where a run's figures come from; reports never mix them up."""

    MEASURED = "measured"  # by this project's code, on the hardware the run names
    PREDICTED = "predicted"  # by ckptlib.predict, on a device model (nothing ran)
    PUBLISHED = "published"  # copied from the docs' tables by `ckpt-sweep import`
    PLANNED = "planned"  # a stored plan's frontier (`ckpt-sweep plan`): predictions


class JobOutcome(StrEnum):
    """What the progress display counts for a job that has no cell status of its own."""

    SKIPPED = "skipped"  # the cell was recorded already (run.rerun runs it again)
    LOST = "lost"  # a cluster task ended without a result (scancel, preemption): nothing recorded
    ERROR = "error"  # the harness itself raised in the job
