"""Bytes of eight Bernoulli bits from 16-bit draws: the byte law is exactly eight independent bits
of probability T / 2^32, and the sampler is exactly the inverse of its distribution function at
a uniform U, for every 16-bit draw and at every cut point, so the sampled law is the byte law."""

from __future__ import annotations

import bisect

import numpy as np
import pytest

from fedhh.kernels.bernoulli_bytes import (
    REFINED_FROM,
    REFINEMENT_WORDS,
    BernoulliBytes,
    _inversion,
    byte_probabilities,
)
from fedhh.protocols.rappor.encoding import BloomEncoder

RAPPOR_T_Q = int(BloomEncoder(4.0, 64, 2, 32, 0).thresholds[1])  # the benchmark's q' = T_q / 2^32
THRESHOLDS = [RAPPOR_T_Q, 3_000_000_000, 1 << 31, 12_345, 1, (1 << 32) - 1, 0, 1 << 32]
FRACTION_SCALE = 1 << (64 * REFINEMENT_WORDS)  # U = (cell + refinement / 2^256 + ...) / 2^16


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_the_byte_law_is_eight_independent_bits_of_probability_t(threshold: int) -> None:
    """Exact integers: every bit is set with probability T / 2^32, and P(v) is the product of its
    bits' marginals (independence), so the law sums to one."""
    probabilities = byte_probabilities(threshold)
    assert sum(probabilities) == 1 << 256
    for bit in range(8):
        assert sum(p for v, p in enumerate(probabilities) if v >> bit & 1) == threshold << 224
    marginal = [(1 << 32) - threshold, threshold]
    for value in (0, 1, 0x5A, 0xFF):
        expected = 1
        for bit in range(8):
            expected *= marginal[value >> bit & 1]
        assert probabilities[value] == expected


def words_of(number: int) -> list[int]:
    return [(number >> (64 * (REFINEMENT_WORDS - 1 - w))) & ((1 << 64) - 1) for w in range(REFINEMENT_WORDS)]


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_every_draw_gives_the_inverse_distribution_function_of_its_uniform(threshold: int) -> None:
    """The cells the 16-bit draws name are a permutation of all cells (the cell is uniform); for
    each of the 65,536 draws, with random refinements and, for the refined draws, refinements at
    each cut point of their cell and one unit below it, the byte is the v with F_v <= U < F_(v+1),
    worked out with Python integers.  So the sample of a uniform U has exactly the byte law."""
    sampler, inversion = BernoulliBytes(threshold), _inversion(threshold)
    assert np.array_equal(np.sort(inversion.cell_of_draw), np.arange(1 << 16))
    cumulative = [0]
    for probability in byte_probabilities(threshold):
        cumulative.append(cumulative[-1] + probability)
    cuts = [f << 16 for f in cumulative]  # in units of 2^-272, U's resolution here

    def exact(cell: int, refinement: int) -> int:
        return bisect.bisect_right(cuts, cell * FRACTION_SCALE + refinement) - 1

    rng = np.random.default_rng(threshold % 1000)
    draws = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    refinements = rng.integers(0, 1 << 64, size=(draws.size, REFINEMENT_WORDS), dtype=np.uint64)
    asked: list[np.ndarray] = []

    def refine(positions: np.ndarray) -> np.ndarray:
        asked.append(positions)
        return refinements[positions]

    got = sampler.sample(draws, refine)
    assert len(asked) == 1 and np.array_equal(asked[0], np.flatnonzero(draws.ravel() >= REFINED_FROM))
    numbers = [sum(int(w) << (64 * (REFINEMENT_WORDS - 1 - j)) for j, w in enumerate(row)) for row in refinements]
    cells = inversion.cell_of_draw.tolist()
    assert got.ravel().tolist() == [exact(cells[d], numbers[d]) for d in range(1 << 16)]
    # at each cut point inside a cell, and one unit of 2^-272 below it
    cell_list, boundary = [], []
    for cut in cumulative[1:-1]:
        cell, fraction = divmod(cut << 16, FRACTION_SCALE)
        if cell == 1 << 16:  # F_v = 1: no U reaches it
            continue
        for refinement in (fraction, fraction - 1) if fraction else (fraction,):
            cell_list.append(cell)
            boundary.append(refinement)
    refinement_words = np.array([words_of(r) for r in boundary], dtype=np.uint64).reshape(-1, REFINEMENT_WORDS)
    resolved = sampler.resolve(np.array(cell_list, dtype=np.int64), refinement_words)
    assert resolved.tolist() == [exact(c, r) for c, r in zip(cell_list, boundary, strict=True)]


def test_no_refinement_is_asked_when_no_draw_needs_one() -> None:
    def refuse(positions: np.ndarray) -> np.ndarray:
        raise AssertionError(f"refinement asked for {positions}")

    draws = np.arange(REFINED_FROM, dtype=np.uint16)
    sampled = BernoulliBytes(RAPPOR_T_Q).sample(draws, refuse)
    assert sampled.dtype == np.uint8 and sampled.shape == draws.shape


def test_sampled_bits_have_the_probability_and_independence_of_the_law() -> None:
    """400,000 bytes from uniform draws: each bit's frequency, and each pair of bits' joint
    frequency, within 5 standard deviations of q' and q'^2."""
    threshold, n = RAPPOR_T_Q, 400_000
    rng = np.random.default_rng(7)
    draws = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    sampled = BernoulliBytes(threshold).sample(
        draws, lambda positions: rng.integers(0, 1 << 64, size=(positions.size, REFINEMENT_WORDS), dtype=np.uint64))
    bits = np.unpackbits(sampled[:, None], axis=1, bitorder="little").astype(bool)
    q = threshold / 2**32
    assert np.all(np.abs(bits.mean(axis=0) - q) < 5 * np.sqrt(q * (1 - q) / n))
    pairs = (bits[:, :, None] & bits[:, None, :]).mean(axis=0)[np.triu_indices(8, 1)]
    assert np.all(np.abs(pairs - q * q) < 5 * np.sqrt(q * q * (1 - q * q) / n))


def test_a_threshold_outside_32_bits_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold"):
        byte_probabilities((1 << 32) + 1)
