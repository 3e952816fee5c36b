"""SFP's device side: each user's fragment report (with its position and word hash) and whole-word report."""

from __future__ import annotations

import itertools

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import RandomnessSource
from ..common.item_choice import choose_items
from .encoding import user_positions, vocabulary_values
from .messages import SFPRequest, SFPResponse, flat_cells
from .parameters import FRAGMENT_PURPOSE, ITEM_PURPOSE, USERS_PER_BLOCK, WORD_PURPOSE


def respond(request: SFPRequest, shard: Shard, randomness: RandomnessSource) -> SFPResponse:
    """Every user of the shard sends its fragment report and its word report; the shard sums them.

    What each user does (a device is a shard of one user, ``u`` its global
    id): its value is its item's ``U = max_symbols`` symbols in the
    ``symbols`` encoding (end symbol and padding as 0; the empty value, all
    0, without an item), ``B = radix^unit_size`` values per symbol, and its
    key the value's oracle key (see "Values as bits or symbols").  Its
    fragment ``k`` (``k < P = U / fragment_length``) is the base-``B`` value
    of symbols ``[k f, (k + 1) f)``, ``f = fragment_length``, the first most
    significant; its word hash is ``splitmix64(key XOR hash_seed) >> 56``
    (8 bits).  Its position is ``k = public_index(position_seed, u, P)``.
    It sends

    * ``fragment_k x 256 + word hash`` through the sketch ``oracle``
      (``cms`` or ``hcms``) at ε = ``fragment_epsilon`` over ``d = B^f x
      256`` values, with ``rows = sketch_rows``, ``width = sketch_width``,
      ``seed = oracle_seed``;
    * when ``word_epsilon > 0``, its key through the same sketch at ε =
      ``word_epsilon`` over ``d = 2^64`` (same rows, width and seed).

    The reply: ``fragment_counts[k]`` and ``fragment_reporters[k]`` are the
    fragment sketch's flat statistics summed over the users of position
    ``k`` (zeros for a position without any); ``word_counts`` and
    ``word_reporters`` the word sketch's summed over all users (empty when
    ``word_epsilon = 0``); ``sampled_users = responding_users`` = the number
    of users.
    """
    codec = shard.vocabulary.codec
    fragments = request.fragment_codec(codec)
    fragment_oracle = request.fragment_oracle(codec)
    word_oracle = request.word_oracle() if request.word_epsilon > 0 else None
    reports, words = vocabulary_values(fragments, shard.vocabulary)
    if shard.one_item_per_user:  # what choose_items gives such a shard, without its gathers
        items = shard.item_of_user
    else:
        items = np.full(shard.n_users, -1, dtype=np.int64)
        holders, chosen = choose_items(shard, np.arange(shard.n_users), randomness, ITEM_PURPOSE, 0)
        items[holders] = chosen
    user_ids = np.arange(shard.first_user, shard.first_user + shard.n_users, dtype=np.uint64)
    positions = user_positions(request.position_seed, fragments.positions, user_ids)
    fragment_counts = np.zeros((fragments.positions, flat_cells(fragment_oracle)), dtype=np.int64)
    fragment_reporters = np.zeros((fragments.positions, request.sketch_rows), dtype=np.int64)
    word_counts = np.zeros(0 if word_oracle is None else flat_cells(word_oracle), dtype=np.int64)
    word_reporters = np.zeros(0 if word_oracle is None else request.sketch_rows, dtype=np.int64)
    for first, stop in user_blocks(
        shard.first_user, shard.n_users
    ):  # users' private draws: one pass per block and report
        held, placed = items[first:stop], positions[first:stop]
        block_users = (shard.first_user + first, held.size)
        per_position = fragment_oracle.randomize_aggregate_groups(
            reports[held, placed],
            placed,
            fragments.positions,
            randomness.for_range(FRAGMENT_PURPOSE, request.round, *block_users),
        )
        for position, stats in enumerate(per_position):
            cells, reporters = fragment_oracle.to_flat(stats)
            fragment_counts[position] += cells
            fragment_reporters[position] += reporters
        if word_oracle is not None:
            stats = word_oracle.randomize_aggregate(
                words[held], randomness.for_range(WORD_PURPOSE, request.round, *block_users)
            )
            cells, reporters = word_oracle.to_flat(stats)
            word_counts += cells
            word_reporters += reporters
    return SFPResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        fragment_counts=fragment_counts,
        fragment_reporters=fragment_reporters,
        word_counts=word_counts,
        word_reporters=word_reporters,
    )


def user_blocks(first_user: int, n_users: int) -> list[tuple[int, int]]:
    """``(start, stop)`` local bounds of a shard's users cut at global multiples of
    :data:`USERS_PER_BLOCK` (bounded memory per block; cuts on the keyed grids' block bounds, so
    no block's walk is replayed by two of the shard's blocks)."""
    bounds = range((first_user // USERS_PER_BLOCK + 1) * USERS_PER_BLOCK, first_user + n_users, USERS_PER_BLOCK)
    cuts = [first_user, *bounds, first_user + n_users]
    return [(start - first_user, stop - first_user) for start, stop in itertools.pairwise(cuts) if stop > start]
