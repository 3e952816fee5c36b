"""The Hadamard oracles' fast paths give exactly what the plain ones give: the transform as two
matrix products against the stage-by-stage butterflies, and HM's statistics from integer
bincounts against the per-report sign sums."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.oracles import hadamard_mechanism, make_oracle, walsh_hadamard
from fedhh.oracles.walsh_hadamard import fwht


def butterflies(values: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as patch:
        patch.setattr(walsh_hadamard, "_KRONECKER_MAX", 0)
        return fwht(values)


@pytest.mark.parametrize("bits", range(0, 16))
def test_matrix_product_transform_equals_the_butterflies(bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every length up to 2^15 (the products stop at 2^12), with leading axes, and values up to
    the float64-exact limit and beyond it (where the butterflies take over)."""
    size = 1 << bits
    rng = np.random.default_rng(bits)
    for shape in ((size,), (3, size), (2, 2, size)):
        for limit in (3, 10**6, (1 << 53) // size, 1 << 60):
            values = rng.integers(-limit, limit, shape, endpoint=True)
            transformed = fwht(values)
            assert transformed.dtype == values.dtype and transformed.shape == values.shape
            np.testing.assert_array_equal(transformed, butterflies(values, monkeypatch))
    for dtype in (np.int32, np.uint32, np.float64):  # narrow, unsigned (wrapping) and float input keep their paths
        values = rng.integers(0, 100, size).astype(dtype)
        np.testing.assert_array_equal(fwht(values), butterflies(values, monkeypatch))


def test_the_int64_extremes_fall_back_to_the_butterflies(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.array([np.iinfo(np.int64).min, 0, 0, 0, 1, 2, 3, 4], dtype=np.int64)
    np.testing.assert_array_equal(fwht(values), butterflies(values, monkeypatch))


@pytest.mark.parametrize("coefficients", [1, 3])
@pytest.mark.parametrize("dense", [True, False])
def test_hm_statistics_are_the_sums_of_the_reported_signs(
    coefficients: int, dense: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle = make_oracle("hm", epsilon=2.0, domain=1000, coefficients=coefficients)
    rng = np.random.default_rng(coefficients)
    reports = oracle.randomize(rng.integers(0, 1000, 20_000), rng)
    expected = np.zeros(oracle.rows, dtype=np.int64)
    np.add.at(expected, reports.indices.ravel().astype(np.intp), oracle._signs(reports).ravel())
    if not dense:
        monkeypatch.setattr(hadamard_mechanism, "_DENSE_INDICES", 0)
    statistics = oracle.aggregate(reports)
    np.testing.assert_array_equal(statistics.coefficients.to_dense(oracle.rows), expected)
    assert statistics.n_users == 20_000


def test_hm_refuses_indices_outside_its_rows() -> None:
    oracle = make_oracle("hm", epsilon=2.0, domain=1000)
    reports = oracle.randomize(np.arange(10), np.random.default_rng(0))
    bad = hadamard_mechanism.HadamardMechanismReports(reports.indices + np.uint64(oracle.rows), reports.words)
    with pytest.raises(ValueError, match=r"reports.indices must be in \[0, 1024\)"):
        oracle.aggregate(bad)
