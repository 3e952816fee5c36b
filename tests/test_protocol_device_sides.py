"""Bitstogram, SPM, MCM, RAPPOR and SFP answered by devices written from ``docs/messages.md`` alone.

For each protocol a numpy-only device answers fedhh's real server, request by
request, following the protocol's "How users answer" text and the document's
definitions: the items' symbol and bit encodings, the public per-user draws,
the public hashes, and the oracles' device sides (the device oracles of
``tests/test_oracle_device_spec.py``, themselves written from the
document).  Only the population (which user holds which string) comes from
fedhh.  On a population of three planted words far above the noise, the
server must then find, from these devices' replies, the planted words it
finds from fedhh's own devices, ranked in the order of their shares; that
fails when a part of the text the server decodes with (a bit order, a
cohort's hash seeds, a word hash, a pair order, a round's reply layout)
differs from the code.  (A channel hash the device gets wrong goes unseen
here, since any consistent channel recovers a value; the hash family itself
is checked exactly in ``tests/test_oracle_device_spec.py``.)
"""

from __future__ import annotations

import math
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, Vocabulary
from fedhh.driving import drive
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols import PROTOCOLS
from fedhh.protocols.base import ServerProtocol
from fedhh.protocols.bitstogram.messages import BitstogramRequest, BitstogramResponse
from fedhh.protocols.common.prefix_encoding import PrefixEncoding
from fedhh.protocols.common.value_reports import bit_positions
from fedhh.protocols.mcm.messages import MCMRequest, MCMResponse
from fedhh.protocols.prefix_search.reports import user_levels
from fedhh.protocols.rappor.encoding import BloomEncoder, user_cohorts, vocabulary_keys
from fedhh.protocols.rappor.messages import RapporRequest, RapporResponse
from fedhh.protocols.sfp.encoding import FragmentCodec, user_positions, vocabulary_values
from fedhh.protocols.sfp.messages import SFPRequest, SFPResponse
from fedhh.protocols.spm.client import segment_keys, segment_pairs, user_pairs
from fedhh.protocols.spm.messages import SPMRequest, SPMResponse
from tests.test_oracle_device_spec import (
    FULL,
    U64,
    Device,
    Hashtogram,
    LocalHash,
    doc_key_rows,
    hash32,
    hash64,
    sketch,
    splitmix64,
)

LETTERS = "abcdefghijklmnopqrstuvwxyz"  # the lowercase alphabet, in index order (index 1 = "a")
MAX_LENGTH = 5
PLANTED = {"apple": 0.15, "mango": 0.12, "peach": 0.09}
N_USERS = 80_000
RUNS: dict[str, list[str]] = {
    "bitstogram": ['protocol.name="bitstogram"', "privacy.epsilon=12.0"],
    "spm": ['protocol.name="spm"', "privacy.epsilon=12.0", "protocol.top_k=4", "protocol.segment_bits=7"],
    "mcm": ['protocol.name="mcm"', "privacy.epsilon=8.0", "protocol.top_k=4"],
    "rappor": ['protocol.name="rappor"', "privacy.epsilon=6.0", "protocol.bloom_bits=128", "protocol.cohorts=64"],
    "sfp": ['protocol.name="sfp"', "privacy.epsilon=8.0", "protocol.fragment_length=1",
            "protocol.fragment_sketch_rows=8", "protocol.fragment_sketch_width=256"],
}


@pytest.fixture(scope="module")
def planted() -> Shard:
    """80,000 users: three planted words, the rest spread over 8,000 random words (about 6 users each)."""
    generator = np.random.default_rng(3)
    letters = np.array(list(LETTERS))
    pool = sorted({"".join(generator.choice(letters, MAX_LENGTH)) for _ in range(12_000)} - set(PLANTED))[:8_000]
    items = [item for item, share in PLANTED.items() for _ in range(int(share * N_USERS))]
    items += generator.choice(pool, N_USERS - len(items)).tolist()
    vocabulary, _ = Vocabulary.encode(sorted(set(items)), codec())
    index = {item: i for i, item in enumerate(vocabulary.items)}
    return Shard.single_item(vocabulary, 0, np.array([index[item] for item in items]))


def codec() -> ItemCodec:
    return ItemCodec(get_alphabet("lowercase"), 1, MAX_LENGTH)


def server_of(name: str, shard: Shard) -> ServerProtocol:
    config = load_config(None, [f"protocol.max_length={MAX_LENGTH}", "run.seed=5", *RUNS[name]])
    server = PROTOCOLS[name].build_server(config["privacy"], N_USERS, codec(), 5, protocol=config["protocol"])
    server.offer_vocabulary(shard.vocabulary)
    return server


# -- items, from "Items as symbols" and "Values as bits or symbols" ------------------------------------


def symbol_rows(items: list[str | None]) -> np.ndarray:
    """Unit size 1: a symbol is the letter's 1-based index; then the end symbol 0 and padding -1."""
    rows = np.full((len(items), MAX_LENGTH + 1), -1, dtype=np.int64)
    for row, item in zip(rows, items, strict=True):
        text = item or ""
        row[: len(text)] = [LETTERS.index(char) + 1 for char in text]
        row[len(text)] = 0
    return rows


def value_bits(items: list[str | None]) -> np.ndarray:
    """``bits``: each character's 5-bit index (lowercase), most significant bit first, zero codes after."""
    symbols = np.maximum(symbol_rows(items)[:, :MAX_LENGTH], 0)
    return ((symbols[:, :, None] >> np.arange(4, -1, -1)) & 1).reshape(len(items), -1)


def integer_keys(units: np.ndarray, base: int) -> np.ndarray:
    assert base ** units.shape[1] <= FULL
    keys = np.zeros(units.shape[0], dtype=U64)
    with np.errstate(over="ignore"):
        for column in units.T:
            keys = keys * U64(base) + column.astype(U64)
    return keys


def public_uniform(seed: int, users: np.ndarray) -> np.ndarray:
    return (splitmix64(splitmix64(users.astype(U64) ^ U64(seed))) >> U64(11)).astype(np.float64) / 2.0**53


def public_index(seed: int, users: np.ndarray, k: int) -> np.ndarray:
    return np.floor(k * public_uniform(seed, users)).astype(np.int64)


def segment_pair_list(g: int) -> list[tuple[int, int]]:
    """SPM's pairs ``(α, β)``, ``α < β``, in lexicographic order."""
    return [(a, b) for a in range(g) for b in range(a + 1, g)]


def segment_values(bits: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """SPM's segments: bits ``[bounds[i], bounds[i+1])`` as binary numbers, first bit most significant."""
    return np.stack([integer_keys(bits[:, low:high], 2) for low, high in zip(bounds[:-1], bounds[1:])], axis=1)


def bloom_positions(hash_seed: int, hashes: int, bloom_bits: int, keys: np.ndarray, cohorts: np.ndarray) -> np.ndarray:
    """RAPPOR: ``(n, h)`` bits ``hash64(splitmix64(hash_seed + c h + j), key, m)`` of each user's filter."""
    with np.errstate(over="ignore"):
        sigmas = splitmix64(U64(hash_seed) + (cohorts[:, None] * hashes + np.arange(hashes)).astype(U64))
    return hash64(sigmas, keys[:, None], bloom_bits).astype(np.intp)


def sfp_values(items: list[str | None], fragment_length: int, hash_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """SFP: every user's ``fragment x 256 + word hash`` per position ``[n, P]``, and its word key."""
    units = np.maximum(symbol_rows(items)[:, :MAX_LENGTH], 0)
    base = len(LETTERS) + 1
    keys = integer_keys(units, base)
    word_hash = (splitmix64(keys ^ U64(hash_seed)) >> U64(56)).astype(np.int64)
    fragments = units.reshape(len(items), -1, fragment_length) @ (base ** np.arange(fragment_length - 1, -1, -1))
    return fragments * 256 + word_hash[:, None], keys


# -- the devices ----------------------------------------------------------------------------------------


def _round(request: Any, users: int) -> dict[str, Any]:
    return {"round": request.round, "sampled_users": users, "responding_users": users}


def bitstogram(request: BitstogramRequest, items: list[str | None], rng: np.random.Generator) -> BitstogramResponse:
    users = np.arange(len(items))
    bits = value_bits(items)
    keys = integer_keys(bits, 2)
    channels = hash64(U64(request.channel_seed), keys, request.buckets).astype(np.int64)
    positions = public_index(request.partition_seed, users, request.value_bits)
    pair_oracle = Hashtogram(request.bit_epsilon, 2 * request.buckets,
                             {"rows": 1, "width": 2 * request.buckets, "seed": request.oracle_seed})
    bit_sums = np.zeros((request.value_bits, 2 * request.buckets), dtype=np.int64)
    for position in range(request.value_bits):
        members = positions == position
        pairs = (2 * channels[members] + bits[members, position]).astype(U64)
        bit_sums[position] = pair_oracle.flat(pair_oracle.report(pairs, rng))[0]
    final = Hashtogram(request.final_epsilon, FULL,
                       {"rows": request.rows, "width": request.buckets, "seed": request.oracle_seed})
    final_sums, final_users = final.flat(final.report(keys, rng))
    return BitstogramResponse(**_round(request, users.size), bit_sums=bit_sums,
                              bit_users=np.bincount(positions, minlength=request.value_bits),
                              final_sums=final_sums, final_users=final_users)


def mcm(request: MCMRequest, items: list[str | None], rng: np.random.Generator) -> MCMResponse:
    users = np.arange(len(items))
    bits = value_bits(items)
    keys = integer_keys(bits, 2)
    if request.mode == "final":
        oracle = LocalHash(request.final_epsilon, min(2**request.value_bits, FULL))
        counts, reporters = oracle.support(oracle.report(keys, rng), request.candidates)
    else:
        channels = hash64(U64(request.channel_seed), keys, request.channels).astype(np.int64)
        positions = public_index(request.partition_seed, users, request.value_bits)
        oracle = LocalHash(request.bit_epsilon, 2 * request.channels)
        pairs = np.arange(2 * request.channels, dtype=U64)
        rows = []
        for position in range(request.value_bits):
            members = positions == position
            values = (2 * channels[members] + bits[members, position]).astype(U64)
            rows.append(oracle.support(oracle.report(values, rng), pairs)[0])
        counts, reporters = np.concatenate(rows), np.bincount(positions, minlength=request.value_bits)
    return MCMResponse(**_round(request, users.size), counts=counts, reporters=reporters)


class SPMDevice:
    """SPM's reports are drawn once and sent again in every round that asks for them."""

    def __init__(self, items: list[str | None], seed: int) -> None:
        self.items = items
        self.rng = np.random.default_rng(seed)
        self.reports: dict[Any, dict[str, np.ndarray]] = {}

    def _report(self, name: Any, oracle: Device, values: np.ndarray) -> dict[str, np.ndarray]:
        if name not in self.reports:
            self.reports[name] = oracle.report(values, self.rng)
        return self.reports[name]

    def __call__(self, request: SPMRequest) -> SPMResponse:
        users = np.arange(len(self.items))
        bits = value_bits(self.items)
        if request.mode == "final":
            oracle = LocalHash(request.epsilon, min(2**request.value_bits, FULL))
            report = self._report("final", oracle, integer_keys(bits, 2))
            counts, reporters = oracle.support(report, request.candidates)
            return SPMResponse(**_round(request, users.size), counts=counts, reporters=reporters)
        g = request.segments
        pair_list = segment_pair_list(g)
        pairs = np.array(pair_list)[public_index(request.partition_seed, users, len(pair_list))]
        counts, reporters, supports = [], [], {}
        for segment in range(g):
            low, high = request.bounds[segment], request.bounds[segment + 1]
            members = np.flatnonzero((pairs == segment).any(axis=1))
            oracle = LocalHash(request.epsilon, 2 ** (high - low))
            values = segment_values(bits[members], request.bounds)[:, segment]
            report = self._report(("segment", segment), oracle, values)
            if request.mode == "segments":
                counts.append(oracle.support(report, np.arange(2 ** (high - low), dtype=U64))[0])
                reporters.append(members.size)
            else:
                patterns = request.patterns[request.pattern_offsets[segment]: request.pattern_offsets[segment + 1]]
                # a report supports a pattern when its hash of the pattern is its bucket (OLH's support)
                supported = hash32(report["seeds"][:, None], patterns[None, :], oracle.g()) == report["buckets"][:, None]
                supports[segment] = dict(zip(members, supported.astype(np.int64), strict=True))
        if request.mode == "pairs":
            for first, second in pair_list:
                group = np.flatnonzero(np.all(pairs == (first, second), axis=1))
                a = np.array([supports[first][u] for u in group]).reshape(group.size, -1)
                b = np.array([supports[second][u] for u in group]).reshape(group.size, -1)
                counts += [(a.T @ b).ravel(), a.sum(axis=0), b.sum(axis=0)]
                reporters.append(group.size)
        return SPMResponse(**_round(request, users.size), counts=np.concatenate(counts), reporters=np.array(reporters))


def rappor(request: RapporRequest, items: list[str | None], rng: np.random.Generator) -> RapporResponse:
    users = np.arange(len(items))
    cohorts = public_index(request.cohort_seed, users, request.cohorts)
    keys = doc_key_rows(symbol_rows(items))
    h, m = request.bloom_hashes, request.bloom_bits
    filters = np.zeros((users.size, m), dtype=bool)
    holders = np.flatnonzero([item is not None for item in items])
    filters[holders[:, None], bloom_positions(request.hash_seed, h, m, keys, cohorts)[holders]] = True
    half = math.exp(request.epsilon / (2 * h))
    p = half / (half + 1)
    reports = rng.random(filters.shape) < np.where(filters, p, 1 - p)
    ones = np.zeros((request.cohorts, m), dtype=np.int64)
    np.add.at(ones, cohorts, reports.astype(np.int64))
    return RapporResponse(**_round(request, users.size), ones=ones.ravel(),
                          reporters=np.bincount(cohorts, minlength=request.cohorts))


def sfp(request: SFPRequest, items: list[str | None], rng: np.random.Generator) -> SFPResponse:
    users = np.arange(len(items))
    base, f = len(LETTERS) + 1, request.fragment_length
    positions_count = MAX_LENGTH // f
    values, keys = sfp_values(items, f, request.hash_seed)
    positions = public_index(request.position_seed, users, positions_count)
    shape = {"rows": request.sketch_rows, "width": request.sketch_width, "seed": request.oracle_seed}
    inner = {"cms": "oue", "hcms": "hm"}[request.oracle]
    fragment_oracle = sketch(inner)(request.fragment_epsilon, base**f * 256, shape)
    flats = []
    for k in range(positions_count):
        members = positions == k
        flats.append(fragment_oracle.flat(fragment_oracle.report(values[members, k].astype(U64), rng)))
    word_counts, word_reporters = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if request.word_epsilon > 0:
        word_oracle = sketch(inner)(request.word_epsilon, FULL, shape)
        word_counts, word_reporters = word_oracle.flat(word_oracle.report(keys, rng))
    return SFPResponse(**_round(request, users.size), fragment_counts=np.stack([c for c, _ in flats]),
                       fragment_reporters=np.stack([r for _, r in flats]), word_counts=word_counts,
                       word_reporters=word_reporters)


DEVICES = {"bitstogram": bitstogram, "mcm": mcm, "rappor": rappor, "sfp": sfp}


def as_int64(response: Any) -> Any:
    """The arrays as the wire carries them (int64), as a third party's codec would send them."""
    arrays = {name: np.asarray(value, dtype=np.int64) for name, value in vars(response).items()
              if isinstance(value, np.ndarray)}
    return type(response)(**{**vars(response), **arrays})


# what a reply must hold exactly, whatever the users' randomness: how many users answer what
PUBLIC_COUNTS: dict[str, Any] = {
    "bitstogram": lambda reply: reply.bit_users,
    "mcm": lambda reply: reply.reporters,
    "spm": lambda reply: reply.reporters,
    "rappor": lambda reply: reply.reporters,
    "sfp": lambda reply: reply.fragment_reporters.sum(axis=1),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_devices_written_from_the_document_give_fedhh_s_discoveries(name: str, planted: Shard) -> None:
    spec, randomness = PROTOCOLS[name], KeyedRandomness(5)
    fedhh_result = drive(server_of(name, planted), lambda request: [spec.respond(request, planted, randomness)])
    items: list[str | None] = [planted.vocabulary.items[i] if i >= 0 else None for i in planted.item_of_user]
    rng = np.random.default_rng(17)
    device = SPMDevice(items, 17) if name == "spm" else (lambda request: DEVICES[name](request, items, rng))
    server = server_of(name, planted)
    node = SimpleNamespace(first_user=0, users=N_USERS)

    def answer(request: Any) -> list[Any]:
        reply, own = as_int64(device(request)), spec.respond(request, planted, randomness)
        spec.check_reply(request, reply, node, server)  # what the server checks of a node's reply
        for field in fields(reply):
            assert np.shape(getattr(reply, field.name)) == np.shape(getattr(own, field.name)), field.name
        assert np.array_equal(PUBLIC_COUNTS[name](reply), PUBLIC_COUNTS[name](own))
        assert (reply.sampled_users, reply.responding_users) == (own.sampled_users, own.responding_users)
        return [reply]

    device_result = drive(server, answer)
    # the planted words fedhh's own devices let the server find (a channel protocol may lose one
    # to a channel it shares with another planted word), in order of their shares
    expected = [item for item in PLANTED if item in {d.item for d in fedhh_result.discoveries}]
    assert len(expected) >= 2, f"{name}: fedhh's own run must find planted words for the comparison to mean anything"
    estimates = {d.item: d.estimated_count for d in device_result.discoveries}
    assert set(expected) <= set(estimates), f"{name}: {estimates}"
    assert sorted(expected, key=estimates.__getitem__, reverse=True) == expected, f"{name}: {estimates}"


def test_the_public_parts_are_fedhh_s(planted: Shard) -> None:
    """The document's encodings, public draws and public hashes against the functions fedhh's
    devices and server use (exactly)."""
    vocabulary = planted.vocabulary
    items: list[str | None] = [*vocabulary.items, None]
    users = np.arange(5000) + 123_456
    bits_encoding, symbols_encoding = PrefixEncoding("bits", codec()), PrefixEncoding("symbols", codec())
    assert np.array_equal(symbol_rows(items[:-1]), vocabulary.rows)
    assert np.array_equal(value_bits(items[:-1]), bits_encoding.units(vocabulary))
    assert np.array_equal(integer_keys(value_bits(items), 2), bits_encoding.keys(value_bits(items)))
    assert np.array_equal(doc_key_rows(symbol_rows(items[:-1])), vocabulary_keys(vocabulary))
    seed = 0x5DEECE66D
    bounds = np.array([0.0, 0.3, 0.55, 1.0])
    assert np.array_equal(np.searchsorted(bounds, public_uniform(seed, users), side="right") - 1,
                          user_levels(seed, bounds, users))
    assert np.array_equal(public_index(seed, users, 25), bit_positions(seed, 25, users))
    assert np.array_equal(public_index(seed, users, 6), user_pairs(seed, 4, users))
    assert np.array_equal(public_index(seed, users, 64), user_cohorts(seed, 64, users))
    assert np.array_equal(public_index(seed, users, 5), user_positions(seed, 5, users))
    assert [tuple(pair) for pair in segment_pairs(4)] == segment_pair_list(4)
    bounds = np.array([0, 7, 14, 21, 25])
    assert np.array_equal(segment_values(value_bits(items), bounds), segment_keys(value_bits(items), bounds))
    # RAPPOR's Bloom bits: cohort c's hash j is hash64(splitmix64(hash_seed + c h + j), key, m)
    encoder = BloomEncoder(epsilon=4.0, bloom_bits=128, bloom_hashes=3, cohorts=8, hash_seed=seed)
    keys, cohorts = vocabulary_keys(vocabulary), np.arange(vocabulary.size) % 8
    assert np.array_equal(bloom_positions(seed, 3, 128, keys, cohorts), encoder.positions(keys, cohorts))
    # SFP: fragment x 256 + the word's 8-bit hash, and the word keys (base 27 over 5 symbols)
    fragments = FragmentCodec(codec(), 1, seed)
    reports, words = vocabulary_values(fragments, vocabulary)
    values, word_keys = sfp_values(items, 1, seed)
    units = np.maximum(symbol_rows(items)[:, :MAX_LENGTH], 0)
    assert np.array_equal(word_keys, words) and np.array_equal(word_keys, symbols_encoding.keys(units))
    assert np.array_equal(values, reports.astype(np.int64))
