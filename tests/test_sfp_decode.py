"""SFP's server decode through whole-domain sketch tables: the very floats (bit for bit) of the
per-candidate decode it replaces -- a sketch's estimate of every value of its domain, numpy's
median, and the kept fragments, their noise levels and the reassembled words of a run."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, Vocabulary
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.oracles import make_oracle
from fedhh.oracles.sketches import SketchOracle
from fedhh.protocols.common.report_mode import SIGNIFICANT, TOP_K
from fedhh.protocols.sfp.analysis import best_first, median
from fedhh.protocols.sfp.client import respond
from fedhh.protocols.sfp.server import SFPParameters, SFPServer


def assert_same_floats(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit for bit (also the sign of zero), and of one shape."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual.view(np.uint64), expected.view(np.uint64))


@pytest.mark.parametrize(
    ("name", "options", "domain"),
    [
        ("cms", {"rows": 16, "width": 64}, 3_000),
        ("hcms", {"rows": 16, "width": 64}, 3_000),
        ("count-mean", {"rows": 5, "width": 48, "inner": "oue"}, 2_000),  # k not a power of two: the mean divides
        ("count-sketch", {"rows": 7, "width": 32, "inner": "oue", "estimator": "mean"}, 1_500),  # signed: mirrors
        ("count-sketch", {"rows": 3, "width": 32, "inner": "oue", "estimator": "mean"}, 40_000),  # blocks of values
        ("hcms", {"rows": 3, "width": 32}, 40_000),
        ("count-median", {"rows": 5, "width": 32, "inner": "oue"}, 1_500),  # not a mean: the per-candidate path
        ("cms", {"rows": 4, "width": 64}, 40),  # inner domain above 4 x domain: the per-candidate path
    ],
)
def test_domain_estimates_are_bit_for_bit_the_estimates_of_every_value(name: str, options: dict, domain: int) -> None:
    sketch = make_oracle(name, epsilon=3.0, domain=domain, seed=5, **options)
    assert isinstance(sketch, SketchOracle)
    values = np.random.default_rng(6).zipf(1.3, 9_000) % domain
    statistics = [sketch.aggregate(sketch.randomize(values[part].astype(np.uint64), np.random.default_rng(7)))
                  for part in (slice(0, 2_000), slice(2_000, 2_500), slice(2_500, 9_000))]
    expected = sketch.estimates(statistics, np.arange(domain, dtype=np.uint64))
    assert_same_floats(sketch.domain_estimates(statistics), np.array(expected))


def test_domain_estimates_refuse_a_domain_too_large_to_enumerate() -> None:
    sketch = make_oracle("cms", epsilon=1.0, domain=1 << 64, rows=2, width=8)
    with pytest.raises(ValueError, match="domain_estimates enumerates at most"):
        sketch.domain_estimates([])


@pytest.mark.parametrize("size", [1, 2, 7, 10, 1_001, 186_624])
def test_median_is_numpys_median(size: int) -> None:
    """Odd and even counts, ties, negative values and zeros of either sign; in a scratch array or in place."""
    generator = np.random.default_rng(size)
    values = np.round(generator.normal(0, 3, size)) * generator.choice([1.0, -1.0], size)  # many ties, -0.0
    scratch = np.empty(size)
    assert_same_floats(median(values, scratch), np.median(values))
    assert_same_floats(scratch, scratch)  # (a scratch is just overwritten)
    own = values.copy()
    assert_same_floats(median(own, own), np.median(values))


# Six-letter words: three fragments of two letters, 27^2 x 256 (fragment, hash) pairs per position.
CODEC = ItemCodec(get_alphabet("lowercase"), 1, 6)


def population() -> Shard:
    """12,000 users: two heavy words, the rest spread over 3,000 random words."""
    generator = np.random.default_rng(1)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    pool = sorted({"".join(generator.choice(letters, 6)) for _ in range(3_000)} - {"apples", "orange"})
    items = ["apples"] * 2_400 + ["orange"] * 1_800 + generator.choice(pool, 7_800).tolist()
    vocabulary, _ = Vocabulary.encode(sorted(set(items)), CODEC)
    index = {item: i for i, item in enumerate(vocabulary.items)}
    return Shard.single_item(vocabulary, 0, np.array([index[item] for item in items]))


def per_candidate_fragments(server: SFPServer, response) -> tuple[list[np.ndarray], list[np.ndarray], list[float]]:  # noqa: ANN001
    """The kept pairs, their estimates and the noise levels as the decode did before whole-domain
    tables: every pair of every position through ``estimates``, numpy's medians."""
    oracle = server._request.fragment_oracle(server.codec)
    statistics = [oracle.from_flat(counts, reporters)
                  for counts, reporters in zip(response.fragment_counts, response.fragment_reporters, strict=True)]
    z = NormalDist().inv_cdf(1 - 1 / server.pairs)
    kept, kept_estimates, thresholds = [], [], []
    for estimates in oracle.estimates(statistics, np.arange(server.pairs, dtype=np.uint64)):
        estimates = estimates * server.positions
        threshold = z * 1.4826 * float(np.median(np.abs(estimates - np.median(estimates))))
        order = best_first(estimates, server.params.fragment_candidates)
        if server.params.report == SIGNIFICANT:
            order = order[estimates[order] > threshold]
        kept.append(order.astype(np.int64))
        kept_estimates.append(estimates[order])
        thresholds.append(threshold)
    return kept, kept_estimates, thresholds


@pytest.mark.parametrize("oracle", ["cms", "hcms"])
@pytest.mark.parametrize("report", [SIGNIFICANT, TOP_K])
def test_the_decode_keeps_exactly_the_fragments_and_words_of_the_per_candidate_decode(oracle: str, report: str) -> None:
    """Without the word pass a word's estimate is the mean of its fragments' estimates: so the
    reassembled words and their estimates check the kept estimates too."""
    shard = population()
    server = SFPServer(SFPParameters(shard.n_users, 6.0, 2, 0.5, False, 24, 8, oracle, 6, 256, report), CODEC, 4)
    response = respond(server.next_request(), shard, KeyedRandomness(4))
    puzzle = server.solve(response)
    kept, kept_estimates, thresholds = per_candidate_fragments(server, response)
    assert len(puzzle.kept) == len(kept) == 3
    for mine, theirs in zip(puzzle.kept, kept, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert_same_floats(np.array(puzzle.thresholds), np.array(thresholds))
    rows, means = server._assemble(kept, kept_estimates)
    np.testing.assert_array_equal(puzzle.rows, rows)
    assert_same_floats(puzzle.estimates, means)
    assert {"apples", "orange"} <= {server.fragments.encoding.decode(row) for row in puzzle.rows}
