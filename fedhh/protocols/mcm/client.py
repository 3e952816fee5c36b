"""MCM's device side: a (channel, bit) report at a public bit position and a full-value report, both through OLH."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import RandomnessSource
from ...oracles import make_oracle
from ...oracles.hashing import hash_keys
from ..common.item_choice import choose_items
from ..common.prefix_encoding import PrefixEncoding
from ..common.value_reports import (
    bit_positions,
    value_table,
)
from .messages import MCMRequest, MCMResponse
from .parameters import BIT_PURPOSE, BITS, FINAL, FULL_PURPOSE, ITEM_PURPOSE, ORACLE


def respond(request: MCMRequest, shard: Shard, randomness: RandomnessSource) -> MCMResponse:
    """A shard's OLH support counts for the round (vectorised over users; a loop over bit positions).

    What each user does (a device is a shard of one user, ``u`` its global
    id): its value and key are as for ``bitstogram`` (``bits`` encoding, the
    empty value without an item).

    * Mode ``bits``: its channel is ``hash64(channel_seed, key, channels)``
      and its bit position ``l = public_index(partition_seed, u,
      value_bits)``; it reports ``2 channel + (bit l of its value)`` through
      ``olh`` at ε = ``bit_epsilon`` over ``d = 2 channels``.  ``counts``
      holds, position by position, the support counts of the ``2 channels``
      pairs ``0, 1, ...`` from the reports of that position's users
      (``counts[l * 2 channels + x]``), ``reporters[l]`` the number of
      users of position ``l``.
    * Mode ``final``: it reports its key through ``olh`` at ε =
      ``final_epsilon`` over ``d = min(2^value_bits, 2^64)``; ``counts[i]``
      is the support count of ``candidates[i]``, ``reporters = [n]``.

    ``sampled_users = responding_users`` = the number of users.
    """
    if request.mode not in (BITS, FINAL):
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {[BITS, FINAL]}")
    bits, keys = value_table(shard.vocabulary, request.value_bits)
    local = np.arange(shard.n_users)
    items = np.full(shard.n_users, -1, dtype=np.int64)  # -1: the empty value, last in the table
    holders, chosen = choose_items(shard, local, randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    if request.mode == FINAL:
        encoding = PrefixEncoding("bits", shard.vocabulary.codec)
        oracle = make_oracle(ORACLE, epsilon=request.final_epsilon, domain=encoding.domain(request.value_bits))
        reports = oracle.randomize(keys[items], randomness.for_users(FULL_PURPOSE, 0, local + shard.first_user))
        counts, reporters = oracle.support(reports, request.candidates).counts, np.array([shard.n_users])
    else:
        channels = hash_keys(np.uint64(request.channel_seed), keys, request.channels).astype(np.int64)
        positions = bit_positions(request.partition_seed, request.value_bits, local + shard.first_user)
        oracle = make_oracle(ORACLE, epsilon=request.bit_epsilon, domain=2 * request.channels)
        pairs = np.arange(2 * request.channels, dtype=np.uint64)
        rows = []
        for position in range(request.value_bits):  # a loop over bit positions, vectorised over their users
            members = np.flatnonzero(positions == position)
            values = (2 * channels[items[members]] + bits[items[members], position]).astype(np.uint64)
            reports = oracle.randomize(values, randomness.for_users(BIT_PURPOSE, position, members + shard.first_user))
            rows.append(oracle.support(reports, pairs).counts)
        counts, reporters = np.concatenate(rows), np.bincount(positions, minlength=request.value_bits)
    return MCMResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        counts=np.asarray(counts, dtype=np.int64),
        reporters=np.asarray(reporters, dtype=np.int64),
    )
