"""Stopping a run on SIGINT (Ctrl-C) or SIGTERM: one signal, a clean exit.

Inside :func:`interruptible`, the first SIGINT or SIGTERM raises
:class:`Interrupted` in the main thread.  It is a ``KeyboardInterrupt``, so
it unwinds through every ``finally`` and context manager on the way out:
a run releases its results folder (nothing partial is written), shuts down
the Ray and Flower processes it started and removes its temporary folders.
Further signals while that clean-up runs are noted and ignored, so a
second Ctrl-C cannot cut it short.  The command line then exits with the
shell's convention, ``128 + signal number`` (130 for SIGINT, 143 for
SIGTERM).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """The conventional exit status of an interrupted command (130 for a plain Ctrl-C)."""
    return interrupt.exit_status if isinstance(interrupt, Interrupted) else 128 + signal.SIGINT


_STOPPING = threading.Event()


def stop_requested() -> bool:
    """Whether a stop signal arrived inside :func:`interruptible` (for quieting what follows from it)."""
    return _STOPPING.is_set()


class _Handler:
    """The first stop signal raises :class:`Interrupted`; later ones only say that the stop is under way."""

    def __init__(self) -> None:
        self.received: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            _STOPPING.set()
            raise Interrupted(signum)
        print(f"fedhh: {signal.Signals(signum).name} received; still stopping, please wait", file=sys.stderr)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Handler()
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)
        _STOPPING.clear()


def stop_handlers() -> dict[int, Any]:
    """The current SIGINT and SIGTERM handlers, for :func:`restore_stop_handlers`."""
    return {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}


def restore_stop_handlers(saved: dict[int, Any]) -> None:
    """Install ``saved`` again, also at the C level.

    Needed around Ray: ``ray.init`` replaces the SIGTERM handler with its own
    ``sys.exit``, and ``ray.shutdown`` leaves SIGTERM at its default action
    (killing the process on the spot) while Python still reports the old
    handler, so setting it again is the only way to be sure.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, action in saved.items():
        if action is not None:
            signal.signal(signum, action)
