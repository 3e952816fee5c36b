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

The log is plain text: Ray colours its workers' lines (``\x1b[36m(pid=…)``)
whatever they are written to, so once the run ends the colour codes (every
ANSI escape sequence) are taken out of the file, in place; the terminal
keeps its colours.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

LOG_NAME = "run.log"  # in the results folder
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDIRECTED = (1, 2)  # standard output and standard error
# An ANSI escape sequence: a control sequence (colours, cursor moves), an operating system command (a
# terminal's title, a link) or another escape (a character set, a keypad mode).
ANSI_ESCAPE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")
ANSI_ESCAPE_TEXT = re.compile(ANSI_ESCAPE.pattern.decode("ascii"))


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
    # The file itself, whatever its path becomes meanwhile (a results folder committed by the body).
    plain = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
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
        try:
            strip_escapes(plain)
        finally:
            os.close(plain)
        if terminal is not None:
            with contextlib.suppress(OSError):
                terminal.close()


def strip_escapes(fd: int, chunk: int = 1 << 20) -> None:
    """Take every ANSI escape sequence out of the file open (for reading and writing, not appending)
    on ``fd``, in place, a line at a time: what is kept is never longer than what was read, so it is
    written behind the reading and the file is cut to its new length."""
    read_at = write_at = 0
    pending = b""
    while True:
        data = os.pread(fd, chunk, read_at)
        read_at += len(data)
        pending += data
        cut = len(pending) if not data else pending.rfind(b"\n") + 1  # escapes never span lines
        if cut:
            kept = ANSI_ESCAPE.sub(b"", pending[:cut])
            if kept != pending[:cut] or write_at != read_at - len(pending):
                os.pwrite(fd, kept, write_at)
            write_at += len(kept)
            pending = pending[cut:]
        if not data:
            break
    if write_at != read_at:
        os.ftruncate(fd, write_at)


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
    handler.setFormatter(PlainFormatter(LOG_FORMAT))
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()


class PlainFormatter(logging.Formatter):
    """A record's text without ANSI escape sequences (a library's coloured message), for a file."""

    def format(self, record: logging.LogRecord) -> str:
        return ANSI_ESCAPE_TEXT.sub("", super().format(record))
