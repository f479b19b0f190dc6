"""Third-party chatter kept off the terminal and in a log file of the run.

torchao, torch's pytree registry, diffusers, transformers, peft and SDNQ log and warn on every
import and many calls ("Failed to load ... .so", deprecations, "Detected no triton"); printed over a
progress bar they hide what matters. Their loggers, and warnings raised from installed packages,
go to the run's log file instead; this project's own warnings still print. The parent installs
this first thing, the fork server before its preload (sweep/run/forkserver.py), and children inherit it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import warnings

NOISY_LOGGERS = (
    "torchao",
    "torch.utils._pytree",
    "torch._dynamo",
    "diffusers",
    "transformers",
    "peft",
    "sdnq",
    "accelerate",
    "ray",
    "submitit",
)
FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
LOG_ENV = "CKPT_SWEEP_LOG"  # the log file a sweep's fork server and children append to
_handler: logging.handlers.MemoryHandler | None = None


def _third_party(filename: str) -> bool:
    return "site-packages" in filename or "dist-packages" in filename


def install(path: str | None = None) -> None:
    """Route the noisy loggers and third-party warnings to `path` (or to a buffer until `log_to`)."""
    global _handler
    if _handler is not None:
        return
    path = path or os.environ.get(LOG_ENV)
    target = logging.FileHandler(path, delay=True) if path else None
    if target is not None:
        target.setFormatter(logging.Formatter(FORMAT))
    # Held in memory until there is a file to write to (the parent learns its sweep folder late),
    # then written record by record.
    _handler = logging.handlers.MemoryHandler(capacity=100_000, flushLevel=logging.NOTSET, target=target)
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(_handler)
        logger.propagate = False
        _refuse_terminal_handlers(logger)
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if _third_party(filename):
            _handler.handle(
                logging.makeLogRecord(
                    {
                        "name": "warnings",
                        "levelno": logging.WARNING,
                        "levelname": "WARNING",
                        "msg": f"{category.__name__}: {message} ({filename}:{lineno})",
                    }
                )
            )
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning


def _refuse_terminal_handlers(logger: logging.Logger) -> None:
    """diffusers and transformers attach a stderr handler of their own to their root logger on first
    use, after `install` ran ("Unable to import `torchao` Tensor objects" reached the terminal): such
    a handler, attached now or later, is not kept."""
    for handler in list(logger.handlers):
        if type(handler) is logging.StreamHandler:
            logger.removeHandler(handler)
    attach = logger.addHandler

    def add_handler(handler: logging.Handler) -> None:
        if type(handler) is not logging.StreamHandler:  # a file handler (a subclass) is kept
            attach(handler)

    logger.addHandler = add_handler


def log_to(path: str) -> None:
    """From now on (and for processes started after this) the messages go to `path`."""
    os.environ[LOG_ENV] = path
    if _handler is not None:
        target = logging.FileHandler(path, delay=True)
        target.setFormatter(logging.Formatter(FORMAT))
        _handler.setTarget(target)
        _handler.flush()


def flush() -> None:
    if _handler is not None:
        _handler.flush()
