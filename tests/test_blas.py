"""fedhh's dense products run with one BLAS thread, and the caller's setting comes back after."""

from __future__ import annotations

import scipy.linalg  # noqa: F401 -- loaded first, so its own OpenBLAS is among those limited
from threadpoolctl import threadpool_info, threadpool_limits

from fedhh.kernels.blas import single_blas_thread


def blas_threads() -> dict[str, int]:
    return {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}


def test_every_loaded_blas_has_one_thread_inside_and_its_own_setting_after() -> None:
    with threadpool_limits(limits=2, user_api="blas"):  # the caller's setting, whatever the machine
        before = blas_threads()
        assert len(before) >= 2 and set(before.values()) == {2}  # numpy's and scipy's OpenBLAS
        with single_blas_thread():
            assert blas_threads() == dict.fromkeys(before, 1)
        assert blas_threads() == before
