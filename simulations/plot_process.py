"""Plots drawn by a side process forked when a run starts.

Importing matplotlib and drawing the discovery plot take a large share of
the default ``fedhh run``, all of it after the rounds.  A
child forked before the population is built imports matplotlib on the other
core while the run computes; at the end the run sends it the result and waits
for the file.  The same drawing function runs either way, so the file is the
same; without ``fork`` (or outside :func:`plots_aside`, or once the child is
gone) it runs in this process.

The child ignores SIGINT (a terminal's Ctrl-C reaches the whole process
group; the run handles it) and ends when the run closes its end of the pipe,
or dies: it never outlives the run.
"""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import signal
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

JOIN_TIMEOUT = 5.0  # seconds the child gets to finish after the pipe closes

_CURRENT: contextvars.ContextVar[PlotProcess | None] = contextvars.ContextVar("plot_process", default=None)


class PlotProcess:
    """A forked child that has imported matplotlib and calls drawing functions sent to it."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child_end, self._connection), name="fedhh-plots", daemon=True
        )
        self._process.start()
        child_end.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return not self._connection.closed and self._process.is_alive()

    def draw(self, function: Callable[..., None], *args: Any) -> None:
        """``function(*args)`` in the child (``function`` importable by name); its error is raised here.
        A child that is gone (killed, out of memory) leaves the drawing to this process."""
        try:
            self._connection.send((function, args))
            status, detail = self._connection.recv()
        except (EOFError, OSError):
            self._connection.close()
            function(*args)
            return
        if status == "error":
            raise RuntimeError(f"the plot process failed drawing with {function.__qualname__}:\n{detail}")

    def close(self) -> None:
        self._connection.close()
        self._process.join(JOIN_TIMEOUT)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def _serve(connection: Connection, parent_end: Connection) -> None:
    parent_end.close()  # so that the run closing its end is seen here as the end of the pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import matplotlib.figure  # noqa: F401  (the point of this process: imported while the run computes)
    from matplotlib.mathtext import MathTextParser

    # Log axes label their ticks in mathtext, whose parser (built once per process)
    # would otherwise be built when the result is drawn, after the run.
    MathTextParser("agg").parse(r"$10^{0}$")

    while True:
        try:
            function, args = connection.recv()
        except EOFError:
            return
        try:
            function(*args)
        except Exception:  # reported to the run, which fails the way an in-process drawing would
            connection.send(("error", traceback.format_exc()))
        else:
            connection.send(("done", None))


@contextlib.contextmanager
def plots_aside() -> Iterator[PlotProcess | None]:
    """Within this block, :func:`draw` runs in a :class:`PlotProcess` forked on entry (where fork
    exists; the block gets it, or ``None``); inside another such block, in that block's process."""
    enclosing = _CURRENT.get()
    if enclosing is not None and enclosing.alive:
        yield enclosing
        return
    if "fork" not in multiprocessing.get_all_start_methods():
        yield None
        return
    process = PlotProcess()
    token = _CURRENT.set(process)
    try:
        yield process
    finally:
        _CURRENT.reset(token)
        process.close()


def draw(function: Callable[..., None], *args: Any) -> None:
    """``function(*args)``: in the plot process of the enclosing :func:`plots_aside`, else here."""
    process = _CURRENT.get()
    if process is not None and process.alive:
        process.draw(function, *args)
    else:
        function(*args)
