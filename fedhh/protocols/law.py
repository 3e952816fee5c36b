"""Law simulation: a round's aggregate drawn from its exact law given a shard's item counts.

``run.simulation = "users"`` (the default) draws every user's report, as a
device would (``respond``); ``"law"`` draws the sum of a shard's reports
directly from its distribution given how many of its users hold each item
(:class:`~fedhh.data.counted.CountedShard`), so a round costs the same at
10^9 users as at 10^6.  A protocol declares its law sampler next to its
``respond`` (``ProtocolSpec.law``), with the same request and response
types: the server, the strategies, the codec and the additivity of
responses are untouched, and the privacy accounting does not change (the
mechanism is the same; only how the simulation draws its outcome differs).

A law sampler is ``law(request, counts, randomness) -> response``.  Its draws
come from generators keyed by (seed, purpose, round, the shard's range)
through :meth:`~fedhh.kernels.randomness.KeyedRandomness.generator`
(:func:`shard_generator`), so a law run is reproducible from (config, seed,
shards); draws every shard must agree on (TrieHH's sample size per shard)
are keyed without the shard.  Unlike a users run, its result for a seed
depends on the number of shards; its distribution does not.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..data.counted import CountedShard
from ..errors import InputError
from ..kernels.randomness import KeyedRandomness
from .base import RequestT_contra, ResponseT_co

USERS, LAW = "users", "law"
SIMULATIONS: tuple[str, ...] = (USERS, LAW)
CHOICE_PURPOSE = "law.item-choice"


class LawFunction(Protocol[RequestT_contra, ResponseT_co]):
    """A protocol's law sampler: a shard's response drawn from its law given the shard's counts."""

    def __call__(self, request: RequestT_contra, counts: CountedShard, randomness: KeyedRandomness) -> ResponseT_co: ...


def no_law_sampler(protocol: str) -> InputError:
    """The refusal of ``run.simulation = "law"`` for a protocol whose spec declares no law sampler."""
    return InputError(
        f'run.simulation: protocol {protocol!r} has no law sampler; use run.simulation = "users" '
        f"(docs/simulation.md lists the protocols that have one)"
    )


def shard_generator(
    randomness: KeyedRandomness, purpose: str, round_: int, counts: CountedShard
) -> np.random.Generator:
    """The generator of one purpose, round and shard (keyed by the shard's range of users)."""
    return randomness.generator(purpose, round_, counts.first_user, counts.stop_user)


def reported_holders(counts: CountedShard, randomness: KeyedRandomness) -> np.ndarray:
    """How many users report each item, ``V + 1`` entries (the last: users holding none), for a
    protocol whose users choose their reported item once per run (every ε-LDP protocol here).

    A user holding several items picks one with probability its local frequency
    (:func:`~fedhh.protocols.common.item_choice.choose_items`), independently of the others: the
    users of one type split as ``Multinomial(users, shares)``, drawn once per run and shard."""
    key = (CHOICE_PURPOSE, randomness.seed)
    if key in counts.memo:
        return counts.memo[key]
    holders = np.append(counts.holders, counts.users_without_items).astype(np.int64)
    types = counts.types
    if types.size:
        rng = shard_generator(randomness, CHOICE_PURPOSE, 0, counts)
        chosen = split_types(rng, types.users, types.offsets, types.shares())
        np.add.at(holders, types.item_ids, chosen)
    holders.flags.writeable = False
    counts.memo[key] = holders
    return holders


def split_types(rng: np.random.Generator, users: np.ndarray, offsets: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """For each type (CSR ``offsets`` over its entries' ``shares``), its ``users`` split among its
    entries as ``Multinomial(users, shares)``: conditional binomials, one entry position at a time
    over every type at once."""
    lengths = np.diff(offsets)
    chosen = np.zeros(shares.size, dtype=np.int64)
    left = np.asarray(users, dtype=np.int64).copy()
    mass = np.ones(lengths.size)
    for position in range(int(lengths.max(initial=0))):
        live = np.flatnonzero(lengths > position)
        entry = offsets[live] + position
        last = lengths[live] == position + 1
        share = np.where(last, 1.0, np.clip(shares[entry] / np.maximum(mass[live], 1e-300), 0.0, 1.0))
        taken = rng.binomial(left[live], share)
        chosen[entry] = taken
        left[live] -= taken
        mass[live] -= shares[entry]
    return chosen


def public_index_probabilities(span: int) -> np.ndarray:
    """The probability of each index a user's public ``UserRandom.integers(0, span)`` takes
    (a bit position, a cohort): ``floor(u span)`` for its 53-bit uniform ``u = k 2^-53``, so
    index ``i`` has the ``k`` in ``[ceil(i 2^53 / span), ceil((i + 1) 2^53 / span))``: ``1 / span``
    to 2^-53, counted exactly."""
    steps = 1 << 53
    edges = [-(-index * steps // span) for index in range(span + 1)]
    return np.diff(np.array(edges, dtype=np.float64)) / float(steps)


def split_by_public_index(
    rng: np.random.Generator, reporters: np.ndarray, span: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each value's ``reporters`` split over a public index drawn independently for every user
    (:func:`public_index_probabilities`): ``Multinomial(reporters, those probabilities)`` per
    value, as sparse ``(value, index, reporters)`` triples with reporters > 0.  A value of at
    least ``span`` reporters draws its multinomial; the others draw each reporter's index by
    inverting the probabilities' running sum (the same law), so the cost is O(sum over values of
    min(reporters, span)): a long tail of rare items costs its reporters, not ``span`` each."""
    reporters = np.asarray(reporters, dtype=np.int64)
    probabilities = public_index_probabilities(span)
    heavy = np.flatnonzero(reporters >= span)
    split = rng.multinomial(reporters[heavy], probabilities)
    rows, indexes = np.nonzero(split)
    light = np.flatnonzero((reporters > 0) & (reporters < span))
    owner = np.repeat(light, reporters[light])
    drawn = np.minimum(np.searchsorted(np.cumsum(probabilities), rng.random(owner.size), side="right"), span - 1)
    cells, tallies = np.unique(owner * span + drawn, return_counts=True)
    return (
        np.concatenate((heavy[rows], cells // span)).astype(np.int64),
        np.concatenate((indexes, cells % span)).astype(np.int64),
        np.concatenate((split[rows, indexes], tallies)).astype(np.int64),
    )


def public_index_table(rng: np.random.Generator, reporters: np.ndarray, span: int) -> np.ndarray:
    """:func:`split_by_public_index` as a dense ``[len(reporters), span]`` table."""
    values, indexes, split = split_by_public_index(rng, reporters, span)
    table = np.zeros((np.asarray(reporters).size, span), dtype=np.int64)
    table[values, indexes] = split
    return table
