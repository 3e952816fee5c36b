"""When fedhh runs compiled loops (numba) instead of numpy passes, and how it compiles them.

``FEDHH_NUMBA`` chooses for every compiled kernel (docs/scale.md): unset or
``auto``, compiled from a work size the caller names (a smaller one costs
less in numpy than loading the compiled code, once per process); ``1``,
compiled always; ``0``, numpy only.  Every compiled kernel computes the same
integers as its numpy path, which stays as the fallback and as the tests'
reference.  This module does not import numba: the compiled modules do, and
only when a caller wants them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

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


def compile_cached(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` compiled without the GIL and with its machine code cached on disk, or
    compiled per process where numba finds no folder it can write (it refuses ``cache=True``)."""
    import numba

    try:
        return numba.njit(nogil=True, cache=True)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(function)
