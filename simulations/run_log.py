"""A Flower run's log: what Flower, Ray and the rounds print goes to a file, not the terminal.

Flower's engine logs every step at INFO, Ray warns as it starts, and the
ClientApps' Ray actors print what they print; drawn among them, the status
line and the per-round progress bar would be garbled.  For the length of a
run, :func:`captured_output` therefore sends the process's standard output
and error (file descriptors 1 and 2: Python's streams, Ray's C++ core,
anything a library or a child process writes there) into the log file,
``run.log`` in the results folder, and hands back a stream on the terminal
for what fedhh itself draws.  With ``verbose`` nothing is redirected: the
logs reach the terminal as they come, and the log file still receives what
the Python loggers of Flower and Ray say (:func:`log_handler`).

Only descriptors 1 and 2 are redirected, and both are put back however
the run ends (an error, Ctrl-C, SIGTERM), before anything is reported; a
standard stream that is not backed by them (a test's captured output) is
drawn on as it is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

LOG_NAME = "run.log"  # in the results folder
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDIRECTED = (1, 2)  # standard output and standard error


@contextlib.contextmanager
def captured_output(path: Path, verbose: bool = False) -> Iterator[TextIO]:
    """Standard output and error appended to ``path`` for the body, unless ``verbose``; yields the
    stream on the terminal (a copy of standard error's descriptor) for the status line and progress."""
    if verbose:
        yield sys.stderr
        return
    sys.stdout.flush()
    sys.stderr.flush()
    terminal = _terminal_copy(sys.stderr)
    saved = {fd: os.dup(fd) for fd in REDIRECTED}
    try:
        with open(path, "ab", buffering=0) as log:
            for fd in REDIRECTED:
                os.dup2(log.fileno(), fd)
        yield terminal if terminal is not None else sys.stderr
    finally:
        with contextlib.suppress(ValueError, OSError):  # a stream closed by the body
            sys.stdout.flush()
            sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        if terminal is not None:
            with contextlib.suppress(OSError):
                terminal.close()


def _terminal_copy(stream: TextIO) -> TextIO | None:
    """A stream on a copy of ``stream``'s descriptor when it is one of those redirected, so it keeps
    writing where ``stream`` wrote; ``None`` for a stream that has no such descriptor."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    if fd not in REDIRECTED:
        return None
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return os.fdopen(os.dup(fd), "w", buffering=1, encoding=encoding, errors="replace")


@contextlib.contextmanager
def log_handler(path: Path, names: tuple[str, ...], level: int = logging.INFO) -> Iterator[logging.Handler]:
    """Records of the loggers ``names`` (and their children) at ``level`` and above appended to
    ``path``, with their time, level and logger, for the length of the body."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()
