"""A module imported by a thread of its own while the caller waits on something else."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType


class ImportAside(threading.Thread):
    """A module imported by a thread of its own while this one waits on something else.

    ``fedhh run`` imports Flower's modules (CPU-bound) while ``ray.init``
    starts Ray's processes and mostly waits for them, rather than one after
    the other.  ``ray.init`` itself stays in
    the main thread: a driver connected from another thread loses its
    connection to the object store when that thread ends.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name=f"fedhh-import-{name}", daemon=True)  # daemon: never holds up an exit
        self._name = name
        self._module: ModuleType | None = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._module = importlib.import_module(self._name)
        except BaseException as error:  # raised by module(), in the thread that needs it
            self._error = error

    def module(self) -> ModuleType:
        """The module, once imported; the import's error is raised here."""
        self.join()
        if self._error is not None:
            raise self._error
        assert self._module is not None
        return self._module
