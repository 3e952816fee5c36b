"""Bitstogram's device side: a (channel, bit) report at a public bit position and a full-value report."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import RandomnessSource
from ...oracles.hashing import hash_keys
from ..common.item_choice import choose_items
from ..common.value_reports import (
    bit_positions,
    value_table,
)
from .messages import BitstogramRequest, BitstogramResponse
from .parameters import BIT_PURPOSE, FINAL_PURPOSE, ITEM_PURPOSE


def respond(request: BitstogramRequest, shard: Shard, randomness: RandomnessSource) -> BitstogramResponse:
    """A shard's two reports per user, summed into the oracles' statistics (vectorised over users).

    What each user does (a device is a shard of one user, ``u`` its global id):
    its value is its item's ``value_bits`` bits in the ``bits`` encoding (the
    empty value, all bits 0, when it holds no item) and its key the value's
    oracle key (see "Values as bits or symbols").  Its channel is
    ``hash64(channel_seed, key, buckets)`` (the seed taken as ``σ`` itself)
    and its bit position ``l = public_index(partition_seed, u, value_bits)``.
    It sends two reports:

    * the pair ``2 channel + (bit l of its value, 0 = the first bit)``
      through ``hashtogram`` at ε = ``bit_epsilon`` over ``d = 2 buckets``
      values with ``rows = 1``, ``width = 2 buckets`` (so not hashed) and
      ``seed = oracle_seed``;
    * its key through ``hashtogram`` at ε = ``final_epsilon`` over
      ``d = 2^64`` with ``rows = rows``, ``width = buckets``,
      ``seed = oracle_seed``.

    The reply: ``bit_sums[l]`` is the first oracle's flat cells summed over
    the users of position ``l`` (zeros for a position without any) and
    ``bit_users[l]`` their number; ``final_sums`` and ``final_users`` are the
    second oracle's flat statistics summed over all users;
    ``sampled_users = responding_users`` = the number of users.
    """
    bits, keys = value_table(shard.vocabulary, request.value_bits)
    local = np.arange(shard.n_users)
    items = np.full(shard.n_users, -1, dtype=np.int64)  # -1: the empty value, last in the table
    holders, chosen = choose_items(shard, local, randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    channels = hash_keys(np.uint64(request.channel_seed), keys, request.buckets).astype(np.int64)
    positions = bit_positions(request.partition_seed, request.value_bits, local + shard.first_user)
    order = np.argsort(positions, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(positions, minlength=request.value_bits))))
    bit_oracle = request.bit_oracle()
    bit_sums = np.zeros((request.value_bits, 2 * request.buckets), dtype=np.int64)
    for position in range(request.value_bits):  # a loop over bit positions, vectorised over their users
        members = order[bounds[position] : bounds[position + 1]]
        member_items = items[members]
        pairs = 2 * channels[member_items] + bits[member_items, position]
        rng = randomness.for_users(BIT_PURPOSE, position, members + shard.first_user)
        bit_sums[position] = bit_oracle.aggregate(bit_oracle.randomize(pairs.astype(np.uint64), rng)).sums[0]
    final_oracle = request.final_oracle()
    rng = randomness.for_users(FINAL_PURPOSE, 0, local + shard.first_user)
    final = final_oracle.aggregate(final_oracle.randomize(keys[items], rng))
    return BitstogramResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        bit_sums=bit_sums,
        bit_users=np.bincount(positions, minlength=request.value_bits).astype(np.int64),
        final_sums=final.sums.ravel(),
        final_users=final.users,
    )
