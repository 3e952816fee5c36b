"""The compiled Hadamard row split (:mod:`fedhh.kernels.compiled_laws`) draws and counts exactly what
the numpy path does: the same sums and the generator left in the same state, on cells of every
word count, and the same whole TreeHist, Hashtogram and Hadamard-mechanism law runs."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.experiment import Experiment
from fedhh.oracles.numba_setting import NUMBA_VARIABLE, compiled_module
from fedhh.kernels.laws import FAIR_WORDS_MAX, random_words
from fedhh.oracles.laws import hadamard_row_sums
from simulations.fast import run_fast

from .helpers import run_view


def both_paths(monkeypatch: pytest.MonkeyPatch, draw):  # noqa: ANN001, ANN201
    """``draw()`` with the law's loops compiled, then with numpy only."""
    monkeypatch.setenv(NUMBA_VARIABLE, "1")
    compiled = draw()
    monkeypatch.setenv(NUMBA_VARIABLE, "0")
    return compiled, draw()


def test_the_compared_paths_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba is a dependency: with ``FEDHH_NUMBA=1`` the compiled module loads, so the comparisons
    below compare two paths, not numpy with itself; ``auto`` keeps numpy below its threshold."""
    monkeypatch.setenv(NUMBA_VARIABLE, "1")
    assert compiled_module("fedhh.kernels.compiled_laws", 1, 1 << 15) is not None
    monkeypatch.setenv(NUMBA_VARIABLE, "auto")
    assert compiled_module("fedhh.kernels.compiled_laws", 1, 1 << 15) is None
    monkeypatch.setenv(NUMBA_VARIABLE, "0")
    assert compiled_module("fedhh.kernels.compiled_laws", 1 << 20, 1 << 15) is None


def reporters(generator: np.random.Generator, blocks: int, width: int, cells: int) -> tuple[np.ndarray, ...]:
    """``cells`` (block, column, negative, reporters) entries whose reporters fill one word, every
    word count up to :data:`FAIR_WORDS_MAX` and beyond it (numpy's binomial), and none."""
    sizes = np.concatenate((
        generator.integers(0, 65, cells),
        generator.integers(65, 64 * FAIR_WORDS_MAX + 1, cells // 4 + 1),
        generator.integers(64 * FAIR_WORDS_MAX + 1, 10**9, cells // 16 + 1),
        [0, 1, 64, 65, 128, 129, 64 * FAIR_WORDS_MAX, 64 * FAIR_WORDS_MAX + 1],
    ))
    return (generator.integers(0, blocks, sizes.size), generator.integers(0, width, sizes.size),
            generator.integers(0, 2, sizes.size), sizes)


@pytest.mark.parametrize(("blocks", "width", "cells"), [(1, 1, 3), (1, 2, 5), (3, 4, 9), (5, 64, 200), (2, 1024, 3000),
                                                        (21, 4096, 40_000)])
def test_compiled_row_sums_equal_the_numpy_path(monkeypatch: pytest.MonkeyPatch, blocks: int, width: int,
                                                cells: int) -> None:
    """Every bit's split from the same words, and the generator where the numpy path leaves it."""
    entries = reporters(np.random.default_rng(width + cells), blocks, width, cells)

    def draw() -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(7)
        return hadamard_row_sums(rng, blocks, width, *entries), rng.integers(0, 1 << 62, 4)

    (compiled, after), (numpy_sums, numpy_after) = both_paths(monkeypatch, draw)
    assert compiled.dtype == numpy_sums.dtype == np.int64
    np.testing.assert_array_equal(compiled, numpy_sums)
    np.testing.assert_array_equal(after, numpy_after)
    # each reporter adds +-1 to one row of its block: a block's rows add up to at most its reporters,
    # with their parity
    held = np.bincount(entries[0], weights=entries[3], minlength=blocks)
    assert np.all(np.abs(compiled).sum(axis=1) <= held)
    np.testing.assert_array_equal(compiled.sum(axis=1) % 2, held % 2)


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64,
                                           np.random.MT19937])
def test_random_words_are_the_generators_full_range_integers(bit_generator: type) -> None:
    """Read raw or through ``integers``, the same words, and the generator left in the same state."""
    raw, reference = np.random.Generator(bit_generator(3)), np.random.Generator(bit_generator(3))
    words = random_words(raw, (5, 7))
    assert words.dtype == np.uint64 and words.shape == (5, 7)
    np.testing.assert_array_equal(words, reference.integers(0, 2**64 - 1, (5, 7), dtype=np.uint64, endpoint=True))
    assert raw.integers(0, 1 << 62) == reference.integers(0, 1 << 62)


TREEHIST_RUN = [
    'protocol.name="treehist"', 'run.simulation="law"', 'population.source="zipf"', "population.users=200000",
    "population.vocabulary=3000", "population.item_length=4", "population.zipf_exponent=1.3",
    "protocol.max_length=4", "privacy.epsilon=6.0", "run.seed=3", "protocol.top_k=8",
]
RUNS = {
    "count-sketch-hadamard": TREEHIST_RUN,
    "hashtogram": [*TREEHIST_RUN, 'protocol.oracle="hashtogram"'],
    "hm": [*TREEHIST_RUN, 'protocol.oracle="hm"'],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_law_run_with_compiled_splits_is_the_numpy_run(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The same discoveries, estimates and round trace for one seed (3 shards)."""
    experiment = Experiment(load_config(None, RUNS[name]))

    def run() -> tuple[list, list]:  # noqa: ANN202
        result = run_fast(experiment, 3, "inprocess").result
        return run_view(result), [record.to_dict() for record in result.trace]

    compiled, numpy_run = both_paths(monkeypatch, run)
    assert compiled[0], "the run found something"
    assert compiled == numpy_run
