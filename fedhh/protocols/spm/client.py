"""SPM's device side: three OLH reports at ε/3 (the user's pair of segments and its whole value), read in
three stages."""

from __future__ import annotations

import typing
from typing import Any

import numpy as np

from ...data.population import Shard
from ...kernels.blas import single_blas_thread
from ...kernels.randomness import RandomnessSource, UserRandom
from ...oracles import make_oracle
from ...oracles.hashing import local_hash
from ...oracles.local_hashing import LocalHashing
from ..common.item_choice import choose_items
from ..common.prefix_encoding import PrefixEncoding
from .messages import SPMRequest, SPMResponse
from .parameters import FINAL, FULL_PURPOSE, ITEM_PURPOSE, MODES, ORACLE, PAIRS, SEGMENT_PURPOSE, SEGMENTS


def segment_pairs(segments: int) -> np.ndarray:
    """The ``C(g, 2)`` pairs ``(α, β)``, ``α < β``, as rows."""
    first, second = np.triu_indices(segments, 1)
    return np.stack([first, second], axis=1)


def user_pairs(partition_seed: int, segments: int, user_ids: np.ndarray) -> np.ndarray:
    """The pair index of each global user id (public randomness: the same on every device and shard)."""
    pairs = segments * (segments - 1) // 2
    return UserRandom(np.uint64(partition_seed), np.asarray(user_ids, dtype=np.int64)).integers(0, pairs)


def segment_keys(bits: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Every row's segment values ``[rows, g]`` (segment bits read as a binary number)."""
    keys = np.zeros((bits.shape[0], bounds.size - 1), dtype=np.uint64)
    for segment in range(bounds.size - 1):
        weights = np.uint64(1) << np.arange(bounds[segment + 1] - bounds[segment] - 1, -1, -1, dtype=np.uint64)
        keys[:, segment] = (bits[:, bounds[segment] : bounds[segment + 1]].astype(np.uint64) * weights).sum(axis=1)
    return keys


def users_values(request: SPMRequest, shard: Shard, randomness: RandomnessSource) -> tuple[np.ndarray, np.ndarray]:
    """The value bits ``[V + 1, m]`` of the vocabulary (the empty value last) and each user's row in it."""
    encoding = PrefixEncoding("bits", shard.vocabulary.codec)
    if encoding.length != request.value_bits:
        raise ValueError(
            f"request.value_bits: {request.value_bits}, but the item codec gives {encoding.length}-bit values"
        )
    bits = np.concatenate([encoding.units(shard.vocabulary), np.zeros((1, request.value_bits), dtype=np.uint8)])
    items = np.full(shard.n_users, -1, dtype=np.int64)
    holders, chosen = choose_items(shard, np.arange(shard.n_users), randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    return bits, items


def segment_reports(
    request: SPMRequest,
    shard: Shard,
    randomness: RandomnessSource,
    segment: int,
    reporters: np.ndarray,
    values: np.ndarray,
) -> tuple[LocalHashing, Any]:
    """The OLH reports of ``segment`` by its reporters (local ids), keyed by (segment, global id)."""
    width = int(request.bounds[segment + 1] - request.bounds[segment])
    oracle = typing.cast(LocalHashing, make_oracle(ORACLE, epsilon=request.epsilon, domain=1 << width))  # OLH
    rng = randomness.for_users(SEGMENT_PURPOSE, segment, reporters + shard.first_user)
    return oracle, oracle.randomize(values, rng)


def respond(request: SPMRequest, shard: Shard, randomness: RandomnessSource) -> SPMResponse:
    """A shard's support counts for the round (vectorised over users; loops over segments and pairs only).

    What each user does (a device is a shard of one user, ``u`` its global
    id): its value and key are as for ``bitstogram`` (``bits`` encoding, the
    empty value without an item).  Segment ``i`` of the value is its bits
    ``[bounds[i], bounds[i+1])`` read as a binary number, the first bit most
    significant.  The user's segment pair is the ``k``-th of the ``g (g -
    1) / 2`` pairs ``(α, β)``, ``α < β``, in lexicographic order ``(0, 1),
    (0, 2), ..., (1, 2), ...``, with ``k = public_index(partition_seed, u,
    g (g - 1) / 2)``.  It draws once, and sends in every round that asks for
    them, one ``olh`` report of segment ``α`` and one of segment ``β``, each
    at ε = ``epsilon`` over ``d = 2^(segment width)``; and once one ``olh``
    report of its key at ε = ``epsilon`` over ``d = min(2^value_bits, 2^64)``.

    * Mode ``segments``: for each segment ``i`` in order, the support counts
      of every pattern ``0 .. 2^(width of i) - 1`` from the segment-``i``
      reports (of the users whose pair contains ``i``), concatenated in
      ``counts``; ``reporters[i]`` the number of those users.
    * Mode ``pairs``: ``C_i = patterns[pattern_offsets[i] :
      pattern_offsets[i+1]]``.  For each pair ``(i, j)`` in order, over the
      users of that pair, ``A[u, x] = 1`` when ``u``'s segment-``i`` report
      supports ``C_i[x]`` and ``B[u, y]`` likewise for segment ``j``:
      ``counts`` gets ``A^T B`` (``|C_i| x |C_j|``, row-major), then the
      column sums of ``A``, then those of ``B``; ``reporters[pair]`` is the
      pair's number of users.
    * Mode ``final``: ``counts[i]`` is the support count of
      ``candidates[i]`` by the full-value reports, ``reporters = [n]``.

    ``sampled_users = responding_users`` = the number of users.
    """
    if request.mode not in MODES:
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {list(MODES)}")
    bits, items = users_values(request, shard, randomness)
    local = np.arange(shard.n_users)
    if request.mode == FINAL:
        encoding = PrefixEncoding("bits", shard.vocabulary.codec)
        oracle = make_oracle(ORACLE, epsilon=request.epsilon, domain=encoding.domain(request.value_bits))
        reports = oracle.randomize(
            encoding.keys(bits)[items], randomness.for_users(FULL_PURPOSE, 0, local + shard.first_user)
        )
        support = oracle.support(reports, request.candidates)
        return _response(request, shard, support.counts, np.array([shard.n_users]))
    values = segment_keys(bits, request.bounds)[items]  # [users, g]
    pairs = segment_pairs(request.segments)[
        user_pairs(request.partition_seed, request.segments, local + shard.first_user)
    ]
    counts, reporters = [], []
    supports: list[np.ndarray] = []  # pairs: per segment, [its reporters, |C_i|] support indicators
    for segment in range(request.segments):
        members = np.flatnonzero((pairs == segment).any(axis=1))
        oracle, reports = segment_reports(request, shard, randomness, segment, members, values[members, segment])
        if request.mode == SEGMENTS:
            width = int(request.bounds[segment + 1] - request.bounds[segment])
            counts.append(oracle.support(reports, np.arange(1 << width, dtype=np.uint64)).counts)
            reporters.append(members.size)
        else:
            patterns = request.patterns[request.pattern_offsets[segment] : request.pattern_offsets[segment + 1]]
            supported = local_hash(reports.seeds[:, None], patterns[None, :], oracle.g) == reports.buckets[:, None]
            supports.append(supported)
    if request.mode == PAIRS:
        for first, second in segment_pairs(request.segments):
            group = np.flatnonzero(np.all(pairs == (first, second), axis=1))
            a = supports[first][np.searchsorted(np.flatnonzero((pairs == first).any(axis=1)), group)].astype(np.float64)
            b = supports[second][np.searchsorted(np.flatnonzero((pairs == second).any(axis=1)), group)].astype(
                np.float64
            )
            with single_blas_thread():
                pair_counts = a.T @ b
            counts += [
                np.rint(pair_counts).astype(np.int64).ravel(),
                a.sum(axis=0).astype(np.int64),
                b.sum(axis=0).astype(np.int64),
            ]
            reporters.append(group.size)
    return _response(request, shard, np.concatenate(counts), np.asarray(reporters))


def _response(request: SPMRequest, shard: Shard, counts: np.ndarray, reporters: np.ndarray) -> SPMResponse:
    return SPMResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        counts=np.asarray(counts, dtype=np.int64),
        reporters=np.asarray(reporters, dtype=np.int64),
    )
