"""When fedhh runs compiled loops (numba) instead of numpy passes: ``FEDHH_NUMBA``.

The setting chooses for every compiled loop (docs/scale.md): unset or
``auto``, compiled from a work size the caller names (a smaller one costs
less in numpy than loading the compiled code, once per process); ``1``,
compiled always; ``0``, numpy only.  Every compiled loop computes the same
integers as its numpy path, which stays as the fallback and as the tests'
reference (the local-hashing decodes, :mod:`fedhh.oracles.compiled_hashing`;
a law's Hadamard rows, :mod:`fedhh.kernels.compiled_laws`).
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

from ..errors import InputError

NUMBA_VARIABLE = "FEDHH_NUMBA"
NUMBA_SETTINGS = ("auto", "1", "0")


def wants_compiled(work: int, threshold: int) -> bool:
    """Whether ``FEDHH_NUMBA`` asks for the compiled loop for ``work`` units (``auto``: from ``threshold`` on)."""
    value = os.environ.get(NUMBA_VARIABLE, "")
    setting = value.strip().lower() or "auto"
    if setting not in NUMBA_SETTINGS:
        raise InputError(f"{NUMBA_VARIABLE} must be one of {', '.join(NUMBA_SETTINGS)} (or unset), got {value!r}")
    return setting == "1" or (setting == "auto" and work >= threshold)


def compiled_module(name: str, work: int, threshold: int) -> ModuleType | None:
    """The compiled loops of module ``name`` (absolute, importing numba) for ``work`` units, or ``None``
    for the numpy path: as ``FEDHH_NUMBA`` chooses, or where the module cannot be imported."""
    return _import_compiled(name) if wants_compiled(work, threshold) else None


@functools.cache
def _import_compiled(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:  # numba missing, or refusing this numpy: the numpy path computes the same integers
        return None
