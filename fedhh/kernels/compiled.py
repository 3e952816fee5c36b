"""How fedhh compiles its loops with numba: without the GIL, the machine code cached on disk.

This module does not import numba until a compiled module decorates a function with
:func:`compile_cached`; which callers take compiled loops is ``FEDHH_NUMBA``'s choice
(:mod:`fedhh.oracles.numba_setting`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def compile_cached(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` compiled without the GIL and with its machine code cached on disk, or
    compiled per process where numba finds no folder it can write (it refuses ``cache=True``)."""
    import numba

    try:
        return numba.njit(nogil=True, cache=True)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(function)
