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

Some code must not be cut short at an arbitrary line: a framework's engine
whose clean-up assumes its own threads have ended, or a clean-up itself
(a Ray shutdown stopped half-way leaves Ray's driver torn down underneath
its Python objects, and Ray ends the process at the next one released).
Inside :func:`stop_deferred` the first signal does not raise: it asks the
block to end early (the block's own ``on_stop``) and is raised as
:class:`Interrupted` when the block ends.

Python runs a signal's handler in the main thread between two bytecodes,
wherever they are: also inside a ``__del__`` method or a weak reference's
callback (the import system runs some while modules load), where an
exception cannot propagate and is dropped.  An :class:`Interrupted` dropped
there would lose the stop, and later signals would only be noted; so it is
sent again a moment later, to be raised where it can be.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RESEND_DELAY = 0.05  # seconds before a stop signal whose exception Python dropped is sent again


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
    """The first stop signal raises :class:`Interrupted`, or, inside :func:`stop_deferred`, asks the
    deferring blocks to end and is kept for the outermost one to raise; later signals only say that
    the stop is under way."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.deferring: list[Callable[[], None]] = []  # each open stop_deferred block's on_stop, outermost first
        self.pending: int | None = None  # a signal received inside stop_deferred, not raised yet

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            print(f"fedhh: {signal.Signals(signum).name} received; still stopping, please wait", file=sys.stderr)
            return
        self.received = signum
        _STOPPING.set()
        if not self.deferring:
            raise Interrupted(signum)
        self.pending = signum
        for on_stop in reversed(self.deferring):
            on_stop()

    def dropped(self, unraisable: Any) -> bool:
        """Whether ``unraisable`` (what ``sys.unraisablehook`` gets) is the stop this handler raised, in a place
        that dropped it; if so, the signal is sent again in a moment, to be raised again."""
        stop = unraisable.exc_value
        if not isinstance(stop, Interrupted) or stop.signum != self.received or self.pending is not None:
            return False
        self.received = None
        resend = threading.Timer(RESEND_DELAY, self._resend, (stop.signum,))
        resend.daemon = True
        resend.start()
        return True

    def _resend(self, signum: int) -> None:
        if self in _ACTIVE and self.received is None:
            os.kill(os.getpid(), signum)


_ACTIVE: list[_Handler] = []  # the handler of the innermost interruptible() block, if any


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Handler()
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    previous_hook = sys.unraisablehook

    def unraisable(report: Any) -> None:
        if not handler.dropped(report):
            previous_hook(report)

    sys.unraisablehook = unraisable
    _ACTIVE.append(handler)
    try:
        yield
    finally:
        _ACTIVE.remove(handler)
        sys.unraisablehook = previous_hook
        for signum, action in previous.items():
            signal.signal(signum, action)
        _STOPPING.clear()


def _ignore() -> None:
    """Nothing to ask: the block ends soon by itself."""


@contextlib.contextmanager
def stop_deferred(on_stop: Callable[[], None] = _ignore) -> Iterator[None]:
    """A block that a stop signal does not cut short: the signal calls ``on_stop`` instead (it must
    return at once, e.g. set an event the block's threads watch), and :class:`Interrupted` is raised
    when the block ends, in place of any error the early end caused.

    Outside :func:`interruptible` the block is made interruptible for its duration (main thread
    only; elsewhere signals are the main thread's and the block runs as it is).  Nested blocks
    raise the signal when the outermost one ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _ACTIVE:
        with interruptible(), stop_deferred(on_stop):
            yield
        return
    handler = _ACTIVE[-1]
    handler.deferring.append(on_stop)
    try:
        yield
    except BaseException as error:
        handler.deferring.pop()
        if handler.pending is not None and not handler.deferring:
            signum, handler.pending = handler.pending, None
            raise Interrupted(signum) from error
        raise
    handler.deferring.pop()
    if handler.pending is not None and not handler.deferring:
        signum, handler.pending = handler.pending, None
        raise Interrupted(signum)


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
