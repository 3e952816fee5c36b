"""Progress bars on stderr: over a protocol's rounds (every driver), and over a count of tasks."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedhh.protocols import ServerProtocol


class RoundProgress:
    """One bar advancing per absorbed round, with the protocol's own status line.

    Drawn on stderr so stdout stays clean for ``--json`` output; disabled
    (a no-op) when ``enabled`` is false.
    """

    def __init__(self, server: ServerProtocol, label: str, enabled: bool = True) -> None:
        self._server = server
        self._progress: Progress | None = None
        if enabled:
            self._progress = Progress(
                TextColumn(f"[bold]{label}[/] round"),
                MofNCompleteColumn(),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=Console(file=sys.stderr),
                transient=False,
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
    progress = Progress(TextColumn(f"[bold]{label}[/]"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
                        console=Console(file=sys.stderr), transient=False)
    task = progress.add_task("", total=total)
    with progress:
        yield lambda: progress.advance(task)
