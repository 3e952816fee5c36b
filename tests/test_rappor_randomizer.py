"""RAPPOR's randomiser draws each report from 16-bit draws per byte and 32-bit draws per set bit:
every bit has exactly the law p' (set in the filter) or q' (clear), whichever range of users a
shard holds, and the packed per-cohort counts are exact."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, Vocabulary
from fedhh.kernels.bernoulli_bytes import REFINED_FROM
from fedhh.kernels.packed_counts import group_bit_counts
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols.rappor import encoding as rappor_encoding
from fedhh.protocols.rappor.client import respond
from fedhh.protocols.rappor.encoding import BloomEncoder, cached_pair_positions, vocabulary_keys
from fedhh.protocols.rappor.messages import RapporRequest
from fedhh.protocols.rappor.parameters import REFINE_PURPOSE, REPORT_PURPOSE
from fedhh.protocols.rappor.server import RapporParameters, RapporServer, decode

CODEC = ItemCodec(get_alphabet("lowercase"), 1, 4)


def request_for(vocabulary: Vocabulary, bloom_bits: int, hashes: int, cohorts: int, seed: int) -> RapporRequest:
    server = RapporServer(RapporParameters(10_000, 4.0, bloom_bits, hashes, cohorts, ""), CODEC, seed)
    server.offer_vocabulary(vocabulary)
    request = server.next_request()
    assert isinstance(request, RapporRequest)
    return request


@pytest.mark.parametrize(("bloom_bits", "hashes"), [(64, 2), (100, 3)])
def test_a_shard_s_counts_do_not_depend_on_how_its_users_are_split(bloom_bits: int, hashes: int) -> None:
    """70,000 users answered as one range (several blocks of users), and as 300 one-user ranges then
    ranges cut across the 4,096-user grid of the draws and across blocks, give exactly the same
    counts: a user's report depends on its global id only (also where one of its draws is refined,
    which some of the first 300 users' draws are) and the (item, cohort) table and the per-user
    hashing set the same bits."""
    rng = np.random.default_rng(3)
    words = sorted({"".join(rng.choice(list("abcdefghij"), 4)) for _ in range(60)})[:50]
    vocabulary, _ = Vocabulary.encode(words, CODEC)
    n = 70_000
    items = rng.integers(-1, vocabulary.size, n)  # -1: a user holding no item
    request = request_for(vocabulary, bloom_bits, hashes, 32, seed=11)
    randomness = KeyedRandomness(5)
    encoder = request.encoder()
    byte_draws = randomness.for_range(REPORT_PURPOSE, request.round, 0, 300).words(encoder.byte_draw_words)
    assert np.any(byte_draws.view(np.uint16)[:, : encoder.report_bytes] >= REFINED_FROM)

    def answer(first: int, stop: int):  # noqa: ANN202
        return respond(request, Shard.single_item(vocabulary, first, items[first:stop]), randomness)

    whole = answer(0, n)
    bounds = [*range(301), 4_095, 4_097, 4_100, 8_191, 41_000, 65_537, n]
    assert encoder.users_per_block < n
    parts = [answer(first, stop) for first, stop in zip(bounds[:-1], bounds[1:], strict=True)]
    assert np.array_equal(sum(part.ones for part in parts), whole.ones)
    assert np.array_equal(sum(part.reporters for part in parts), whole.reporters)
    assert whole.ones.size == 32 * bloom_bits and int(whole.reporters.sum()) == n


@pytest.mark.parametrize(("bloom_bits", "positions"), [(64, [3, 60]), (64, [17, 17]), (100, [70, 99, 3])])
def test_every_report_bit_is_set_with_probability_p_or_q(bloom_bits: int, positions: list[int]) -> None:
    """200,000 users with the same filter (two hashes on one bit in the second case): each bit's
    frequency within 5 standard deviations of p' where the filter sets it (once, however many
    hashes name it) and of q' elsewhere; bits past m never set."""
    n, hashes = 200_000, len(positions)
    encoder = BloomEncoder(4.0, bloom_bits, hashes, 1, hash_seed=1)
    randomness = KeyedRandomness(8)
    draws = randomness.for_range(REPORT_PURPOSE, 1, 0, n)
    byte_draws, hash_draws = draws.words(encoder.byte_draw_words), draws.words(encoder.hash_draw_words)

    def refine(refined: np.ndarray) -> np.ndarray:
        return randomness.for_users(REFINE_PURPOSE, 1, refined).words(4)

    bit_words, bit_masks = encoder.filter_masks(np.tile(positions, (n, 1)), np.ones(n, dtype=bool))
    packed = encoder.randomize(bit_words, bit_masks, byte_draws, hash_draws, refine)
    assert packed.shape == (n, encoder.report_words)
    frequency = group_bit_counts(packed, np.zeros(n, dtype=np.int64), 1)[0] / n
    p, q = encoder.probabilities
    expected = np.full(64 * encoder.report_words, q)
    expected[bloom_bits:] = 0.0
    expected[positions] = p
    spread = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(frequency - expected) <= 5 * spread)
    assert np.all(frequency[bloom_bits:] == 0)


@pytest.mark.parametrize(("n", "groups", "words"), [(0, 4, 1), (1, 32, 1), (5, 3, 2), (4_000, 32, 1), (50_000, 7, 2),
                                                    (3_000, 70_000, 1)])
def test_packed_counts_are_the_column_sums_of_each_group(n: int, groups: int, words: int) -> None:
    """Against unpacked bits added group by group: long runs (copied run by run), short ones
    (scattered), more groups than 16-bit keys hold, rows of two words, no rows."""
    rng = np.random.default_rng(n + groups)
    rows = rng.integers(0, 1 << 64, size=(n, words), dtype=np.uint64) & rng.integers(0, 1 << 64, size=(n, words), dtype=np.uint64)
    members = rng.integers(0, groups, n)
    expected = np.zeros((groups, 64 * words), dtype=np.int64)
    np.add.at(expected, members, np.unpackbits(rows.view(np.uint8), axis=1, bitorder="little").astype(np.int64))
    assert np.array_equal(group_bit_counts(rows, members, groups), expected)


def test_the_server_decodes_the_same_with_or_without_the_shards_hashed_pairs() -> None:
    """A shard with more users than (item, cohort) pairs hashes every pair once and the server's
    screening of the same vocabulary reuses them: the regression is exactly the one computed from
    scratch."""
    rng = np.random.default_rng(9)
    words = sorted({"".join(rng.choice(list("abcdefgh"), 4)) for _ in range(400)})[:300]
    vocabulary, _ = Vocabulary.encode(words, CODEC)
    shard = Shard.single_item(vocabulary, 0, rng.integers(0, vocabulary.size, 20_000))
    request = request_for(vocabulary, 64, 2, 32, seed=4)
    response = respond(request, shard, KeyedRandomness(1))
    keys = vocabulary_keys(vocabulary)
    assert cached_pair_positions(request.encoder(), keys) is not None
    reused = decode(request.encoder(), response, keys, at_least=10)
    rappor_encoding._PAIR_CACHE.clear()
    fresh = decode(request.encoder(), response, keys, at_least=10)
    for field in ("candidates", "estimates", "errors"):
        assert np.array_equal(getattr(reused, field), getattr(fresh, field))
