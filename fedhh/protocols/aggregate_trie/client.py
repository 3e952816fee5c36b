"""The aggregate-DP prefix tree's device side: a sampled user adds 1 to the counts of the candidates its
chosen data extends; nothing is randomised on the device (the server adds the noise to the sum)."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard, Vocabulary
from ...data.prefixes import row_keys
from ...kernels.randomness import RandomnessSource
from .extensions import ExtensionDomain
from .messages import LevelCounts, LevelRequest
from .parameters import EXTENDING, MOST_FREQUENT, RANDOM, SEVERAL, WEIGHTED

SELECTION_PURPOSE = "aggregate-trie.selection"


def sampled_in_shard(sampled: np.ndarray, shard: Shard) -> np.ndarray:
    """Local indices of the sampled users that this shard holds."""
    lo, hi = np.searchsorted(sampled, [shard.first_user, shard.stop_user])
    return sampled[lo:hi] - shard.first_user


def extension_length(request: LevelRequest, vocabulary: Vocabulary) -> int:
    """The level's extension, cut at the items' last symbol column."""
    return min(request.extension, vocabulary.rows.shape[1] - request.depth)


def candidate_of_items(request: LevelRequest, vocabulary: Vocabulary, domain: ExtensionDomain) -> np.ndarray:
    """Per vocabulary item, the candidate number its next symbols make (``parent * D + extension``),
    or -1 when its first ``depth`` symbols are not a kept prefix."""
    rows = vocabulary.rows
    if request.depth == 0:
        parent = np.zeros(rows.shape[0], dtype=np.int64)
    else:
        keys = row_keys(request.parents)
        order = np.argsort(keys)
        item_keys = row_keys(np.ascontiguousarray(rows[:, : request.depth]))
        position = np.minimum(np.searchsorted(keys[order], item_keys), max(order.size - 1, 0))
        found = keys[order][position] == item_keys if order.size else np.zeros(rows.shape[0], dtype=bool)
        parent = np.where(found, order[position] if order.size else 0, -1)
    codes = domain.codes(rows[:, request.depth : request.depth + domain.length])
    return np.where(parent >= 0, parent * domain.size + codes, -1)


_LAST: list[tuple[Vocabulary, int, bytes, int, np.ndarray]] = []  # every shard of a process asks the same


def cached_candidates(request: LevelRequest, vocabulary: Vocabulary, domain: ExtensionDomain) -> np.ndarray:
    """:func:`candidate_of_items`, worked out once per level for all the shards a process holds."""
    parents = request.parents.tobytes()
    for held, round_, asked, length, answer in _LAST:
        if held is vocabulary and round_ == request.round and asked == parents and length == domain.length:
            return answer
    answer = candidate_of_items(request, vocabulary, domain)
    _LAST[:] = [(vocabulary, request.round, parents, domain.length, answer)]
    return answer


def user_entries(
    shard: Shard, local: np.ndarray, candidate: np.ndarray, extending_only: bool
) -> tuple[np.ndarray, ...]:
    """The sampled users' items (``extending_only``: those that extend the tree): (position of the user
    in ``local``, item id, the user's count of it, its candidate or -1), one entry per (user, item)."""
    if shard.one_item_per_user:
        items = shard.item_of_user[local]
        owner = np.flatnonzero(items >= 0)
        items = items[owner]
        weight = np.ones(owner.size, dtype=np.int64)
    else:
        starts, ends = shard.item_offsets[local], shard.item_offsets[local + 1]
        lengths = ends - starts
        owner = np.repeat(np.arange(local.size), lengths)
        first = np.repeat(np.cumsum(lengths) - lengths, lengths)
        entry = np.repeat(starts, lengths) + np.arange(owner.size) - first
        items, weight = shard.item_ids[entry], shard.item_counts[entry].astype(np.int64)
    cand = candidate[items]
    keep = cand >= 0 if extending_only else np.ones(cand.size, dtype=bool)
    return owner[keep], items[keep], weight[keep], cand[keep]


def draw_one(owner: np.ndarray, weight: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Per distinct owner (entries grouped by owner, in order), the entry drawn with probability
    proportional to ``weight``, from one uniform per owner."""
    starts = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
    cumulative = np.concatenate(([0], np.cumsum(weight)))
    ends = np.append(starts[1:], owner.size)
    total = cumulative[ends] - cumulative[starts]
    target = cumulative[starts] + np.minimum(np.floor(uniforms * total).astype(np.int64), total - 1)
    return np.searchsorted(cumulative, target, side="right") - 1


def select(
    request: LevelRequest, shard: Shard, local: np.ndarray, candidate: np.ndarray, randomness: RandomnessSource
) -> tuple[np.ndarray, np.ndarray]:
    """(position of the user in ``local``, candidate) of every count a sampled user adds 1 to."""
    owner, items, weight, cand = user_entries(shard, local, candidate, request.choose_from == EXTENDING)
    if owner.size == 0:
        return owner, cand
    owners, cands = choose(request, shard, local, owner, items, weight, cand, randomness)
    counted = cands >= 0  # choosing among all its items, a user whose choice leaves the tree adds nothing
    return owners[counted], cands[counted]


def choose(
    request: LevelRequest,
    shard: Shard,
    local: np.ndarray,
    owner: np.ndarray,
    items: np.ndarray,
    weight: np.ndarray,
    cand: np.ndarray,
    randomness: RandomnessSource,
) -> tuple[np.ndarray, np.ndarray]:
    """The data-selection scheme over the users' entries (grouped by owner): (owner, candidate) pairs."""
    scheme = request.data_selection
    if scheme in (RANDOM, WEIGHTED):
        users = np.unique(owner)
        uniforms = randomness.for_users(SELECTION_PURPOSE, request.round, local[users] + shard.first_user).random(
            users.size
        )
        chosen = draw_one(owner, np.ones_like(weight) if scheme == RANDOM else weight, uniforms)
        return owner[chosen], cand[chosen]
    return heaviest(scheme, request.contributions, owner, items, weight, cand)


def heaviest(
    scheme: str, contributions: int, owner: np.ndarray, items: np.ndarray, weight: np.ndarray, cand: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The schemes without a draw, over entries grouped by owner: ``most_frequent``, each owner's
    heaviest item (ties: the lowest item id); ``several``, its ``contributions`` candidates its items
    add up to most on (ties: the lowest candidate number)."""
    if scheme == MOST_FREQUENT:
        order = np.lexsort((items, -weight, owner))
        first = order[np.concatenate(([True], owner[order][1:] != owner[order][:-1]))]
        return owner[first], cand[first]
    if scheme != SEVERAL:
        raise ValueError(f"data_selection: got {scheme!r}; allowed: {[RANDOM, WEIGHTED, MOST_FREQUENT, SEVERAL]}")
    pairs, inverse = np.unique(np.stack([owner, cand]), axis=1, return_inverse=True)
    totals = np.bincount(inverse.ravel(), weights=weight, minlength=pairs.shape[1])
    owners, cands = pairs
    order = np.lexsort((cands, -totals, owners))
    owners, cands = owners[order], cands[order]
    starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
    rank = np.arange(owners.size) - np.repeat(starts, np.diff(np.append(starts, owners.size)))
    keep = rank < contributions
    return owners[keep], cands[keep]


def respond(request: LevelRequest, shard: Shard, randomness: RandomnessSource) -> LevelCounts:
    """The counts a shard's sampled users add to the level's candidates.

    What each user does (a device is a shard of one user): if its global id
    is in ``sampled``, it looks at its items whose first ``depth`` symbols
    are a row of ``parents`` (at the first level, all of them) and which
    have a symbol at position ``depth`` (``choose_from = "extending"``), or
    at all its items (``"all"``, and then a chosen item that is not of that
    kind counts nothing); each such item's next
    ``extension`` symbols (the symbol row of ``fedhh.data.items``, end
    symbol and padding included, cut at the row's last column) make a
    candidate, the item's first ``depth + extension`` symbols.  By
    ``data_selection``, it adds 1 to the count of: ``random``: the
    candidate of one of those items drawn uniformly; ``weighted``: of one
    drawn with probability its share of the user's count of those items;
    ``most_frequent``: of the one it holds most (ties: the item first in
    the run's vocabulary; a device holding its own data breaks them in its
    own order);
    ``several``: each of the at most ``contributions`` candidates its items
    add up to most on (ties: the lowest candidate number,
    ``parent * D + extension`` as in :mod:`fedhh.protocols.aggregate_trie.extensions`).
    A user with no such item adds nothing.  The reply lists each counted
    candidate once with its count; ``sampled_users`` counts the sampled
    users, ``responding_users`` those who added to a count.  The one draw
    (``random``, ``weighted``) takes a uniform ``u`` in [0, 1) per user and
    the item, in the order the user holds them, whose interval of the
    cumulative weights (1 per item for ``random``) holds ``u`` times their
    total.  Nothing else is randomised: the server adds noise to the sum.
    """
    local = sampled_in_shard(request.sampled, shard)
    vocabulary = shard.vocabulary
    domain = ExtensionDomain(vocabulary.codec.symbol_ids, extension_length(request, vocabulary))
    candidate = cached_candidates(request, vocabulary, domain)
    owner, cand = select(request, shard, local, candidate, randomness)
    counted, counts = np.unique(cand, return_counts=True)
    parent, code = np.divmod(counted, domain.size)
    parents = request.parents if request.depth else np.zeros((1, 0), dtype=np.int64)
    prefixes = np.concatenate([parents[parent], domain.rows(code)], axis=1)
    return LevelCounts(
        round=request.round,
        sampled_users=int(local.size),
        responding_users=int(np.unique(owner).size),
        width=request.depth + domain.length,
        prefixes=prefixes.astype(np.int64),
        counts=counts.astype(np.int64),
    )
