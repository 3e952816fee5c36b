"""One BLAS thread for fedhh's dense products.

fedhh's dense linear algebra is small: RAPPOR's normal equations (at most
1,025 columns), Walsh-Hadamard transforms as two products of at most 64 x 64
matrices, SPM's segment-pair counts.  On such sizes OpenBLAS's threads save
little on an idle machine and cost much on a busy one, where a product with
numpy's default of one thread per core waits for the cores the other
processes hold (benchmarks/bench_small_products.py measures it); and a run's
parallelism comes from its shards (processes, Ray actors), which threads
inside each would oversubscribe.

The limit is scoped (:func:`single_blas_thread` restores the previous
setting on exit), so a program that embeds fedhh keeps its own BLAS
settings elsewhere.
"""

from __future__ import annotations

import functools
import sys
from contextlib import AbstractContextManager
from typing import Any

from threadpoolctl import ThreadpoolController


def single_blas_thread() -> AbstractContextManager[Any]:
    """Every BLAS loaded when the ``with`` block is entered (numpy's, and scipy's once
    scipy.linalg is imported: import it first) limited to one thread inside the block."""
    return _controller("scipy.linalg" in sys.modules).limit(limits=1, user_api="blas")


@functools.lru_cache(maxsize=2)
def _controller(scipy_linalg_loaded: bool) -> ThreadpoolController:
    """The libraries loaded now (cached: finding them costs far more than limiting them);
    keyed by whether scipy.linalg, which brings its own OpenBLAS, has been imported."""
    return ThreadpoolController()
