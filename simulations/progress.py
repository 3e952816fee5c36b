"""Progress on stderr: a run's status line, its rounds (every driver), and a count of tasks."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.spinner import Spinner

from fedhh.protocols import ServerProtocol


class RoundProgress:
    """One bar advancing per absorbed round, with the protocol's own status line.

    Drawn on stderr (or ``console``) so stdout stays clean for ``--json``
    output; disabled (a no-op) when ``enabled`` is false.  While it is
    drawn, what is printed to ``sys.stdout`` and ``sys.stderr`` is printed
    above it, unless ``redirect_output`` is false (the standard streams
    then go where they go: a run's log, ``simulations.run_log``).
    """

    def __init__(
        self,
        server: ServerProtocol,
        label: str,
        enabled: bool = True,
        console: Console | None = None,
        redirect_output: bool = True,
    ) -> None:
        self._server = server
        self._progress: Progress | None = None
        if enabled:
            self._progress = Progress(
                TextColumn(f"[bold]{label}[/] round"),
                MofNCompleteColumn(),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=console or Console(file=sys.stderr),
                transient=False,
                redirect_stdout=redirect_output,
                redirect_stderr=redirect_output,
            )
            self._task = self._progress.add_task("", total=server.max_rounds)

    def __enter__(self) -> RoundProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def update(self, server: ServerProtocol) -> None:
        if self._progress is None:
            return
        done = len(server.trace)
        total = done if server.next_request() is None else server.max_rounds
        self._progress.update(self._task, completed=done, total=total, description=server.progress_note())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()


@contextlib.contextmanager
def task_progress(label: str, total: int, enabled: bool = True) -> Iterator[Callable[[], None]]:
    """A bar over ``total`` tasks; yields the function that marks one done (a no-op when disabled)."""
    if not enabled:
        yield lambda: None
        return
    progress = Progress(
        TextColumn(f"[bold]{label}[/]"),
        MofNCompleteColumn(),
        BarColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=False,
    )
    task = progress.add_task("", total=total)
    with progress:
        yield lambda: progress.advance(task)


def terminal_console(stream: TextIO) -> Console:
    """A console drawing on ``stream``, as wide as the terminal it is (the standard streams may be
    redirected meanwhile: ``simulations.run_log``), else as rich decides."""
    try:
        width: int | None = os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, OSError, ValueError):
        width = None
    return Console(file=stream, width=width)


class StatusLine:
    """What a run is doing while no bar moves: building the population, starting Ray, waiting for
    its SuperNodes, writing the results.

    On a terminal, one line with a spinner that each change replaces and
    that disappears when the run's rounds start (their bar takes its place:
    :meth:`rounds`) or when it is closed; elsewhere (a pipe, a file) one
    line per change.  Disabled, it shows nothing.  Call it with the text to
    show; it can be called from any thread (a ServerApp's).
    """

    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self._live: Live | None = None
        self._shown = ""

    def __call__(self, text: str) -> None:
        if not self.enabled or text == self._shown:
            return
        self._shown = text
        if not self.console.is_terminal:
            self.console.print(escape(text), highlight=False, soft_wrap=True)
            return
        spinner = Spinner("dots", escape(text), style="status.spinner")
        if self._live is None:
            self._live = Live(
                spinner,
                console=self.console,
                transient=True,
                refresh_per_second=12.5,
                redirect_stdout=False,
                redirect_stderr=False,
            )  # they go to the run's log
            self._live.start(refresh=True)  # drawn now, not at the next tick
        else:
            self._live.update(spinner, refresh=True)

    def rounds(self, server: ServerProtocol, *, label: str) -> RoundProgress:
        """The bar of the run's rounds, drawn in place of the status line (a ``ProgressFactory``)."""
        self.clear()
        return RoundProgress(server, enabled=self.enabled, label=label, console=self.console, redirect_output=False)

    def clear(self) -> None:
        """Take the line off the terminal (the next call shows it again)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._shown = ""

    def __enter__(self) -> StatusLine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.clear()
