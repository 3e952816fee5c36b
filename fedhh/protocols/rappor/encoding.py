"""RAPPOR's public hashing and its randomiser: Bloom filters per cohort, and the users' items and cohorts."""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np

from ...data.population import Shard, Vocabulary
from ...kernels.bernoulli_bytes import BernoulliBytes, Refine
from ...kernels.randomness import RandomnessSource, UserRandom, splitmix64
from ...oracles.hashing import expand_seeds, hash_expanded, mix_keys
from ...oracles.keys import key_rows
from ...oracles.unary import word_thresholds
from ..common.item_choice import choose_items
from .analysis import bit_probabilities
from .parameters import BITS_PER_BLOCK, ITEM_PURPOSE, PACKED_WORD


@dataclass(frozen=True)
class BloomEncoder:
    """The public part of RAPPOR: cohorts' hash functions and the bit randomiser.

    Built from the request alone, so a device and the server agree on it.
    """

    epsilon: float
    bloom_bits: int
    bloom_hashes: int
    cohorts: int
    hash_seed: int

    @functools.cached_property
    def _hashes(self) -> tuple[np.ndarray, np.ndarray]:
        """(multiplier, offset) of hash function ``j`` of cohort ``c`` at index ``c h + j``."""
        base = np.uint64(self.hash_seed)
        with np.errstate(over="ignore"):
            seeds = splitmix64(base + np.arange(self.cohorts * self.bloom_hashes, dtype=np.uint64))
        return expand_seeds(seeds)

    @functools.cached_property
    def thresholds(self) -> tuple[np.uint32, np.uint32]:
        """``(T_p, T_q)`` of the bit probabilities (:func:`fedhh.oracles.unary.word_thresholds`):
        rounded towards less privacy loss, so the randomiser stays ε-LDP exactly."""
        t_p, t_q = word_thresholds(*bit_probabilities(self.epsilon, self.bloom_hashes))
        return np.uint32(t_p), np.uint32(t_q)

    @property
    def probabilities(self) -> tuple[float, float]:
        """The realised ``(p', q')`` of :attr:`thresholds`: what the decoder and the audit use."""
        t_p, t_q = self.thresholds
        return int(t_p) / 2.0**32, int(t_q) / 2.0**32

    @property
    def report_bytes(self) -> int:
        """Bytes of a report, each drawn from one 16-bit draw."""
        return -(-self.bloom_bits // 8)

    @property
    def report_words(self) -> int:
        """64-bit words of a packed report (bit ``b`` is bit ``b % 64`` of word ``b // 64``)."""
        return -(-self.bloom_bits // 64)

    @property
    def byte_draw_words(self) -> int:
        """Uniform 64-bit words a report draws for its clear bits: a 16-bit draw per byte."""
        return -(-self.report_bytes // 4)

    @property
    def hash_draw_words(self) -> int:
        """Uniform 64-bit words a report draws for its set bits: a 32-bit draw per hash."""
        return -(-self.bloom_hashes // 2)

    @property
    def users_per_block(self) -> int:
        """Users randomised together: about :data:`BITS_PER_BLOCK` report bits."""
        return max(1, BITS_PER_BLOCK // self.bloom_bits)

    def positions(self, keys: np.ndarray, cohorts: np.ndarray) -> np.ndarray:
        """``(n, h)`` bits of each item key in its cohort's filter (broadcasting ``keys`` and ``cohorts``)."""
        multipliers, offsets = self._hashes
        index = np.asarray(cohorts, dtype=np.int64)[..., None] * self.bloom_hashes + np.arange(self.bloom_hashes)
        return hash_expanded(multipliers[index], offsets[index], mix_keys(keys)[..., None], self.bloom_bits).astype(
            np.int64
        )

    def set_bits(self, keys: np.ndarray, cohorts: np.ndarray, holds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(users, bits)``: where the true Bloom filters are set; a user without an item
        (``holds`` false) sets no bit, and one whose hashes collide sets fewer than ``h``."""
        rows = np.flatnonzero(holds)
        return np.repeat(rows, self.bloom_hashes), self.positions(keys[rows], cohorts[rows]).ravel()

    def filters(self, keys: np.ndarray, cohorts: np.ndarray, holds: np.ndarray) -> np.ndarray:
        """True Bloom filters ``(n, m)``."""
        bits = np.zeros((keys.size, self.bloom_bits), dtype=bool)
        bits[self.set_bits(keys, cohorts, holds)] = True
        return bits

    def filter_masks(self, positions: np.ndarray, holds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(words, masks)``, each ``(h, n)``: the packed report word and the one-bit mask of each
        filter bit ``positions[u, j]``; the mask is zero where the user holds no item (``holds``
        false) and where an earlier hash already named the bit, so every set bit has one mask."""
        positions = np.ascontiguousarray(np.asarray(positions).T)  # rows by hash: contiguous
        masks = np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64))
        for j in range(1, self.bloom_hashes):
            masks[j, np.any(positions[j] == positions[:j], axis=0)] = 0
        masks[:, ~np.asarray(holds, dtype=bool)] = 0
        return positions >> 6, masks

    def randomize(
        self,
        bit_words: np.ndarray,
        bit_masks: np.ndarray,
        byte_draws: np.ndarray,
        hash_draws: np.ndarray,
        refine: Refine,
    ) -> np.ndarray:
        """Packed reports ``(n, report_words)`` of the filters that :meth:`filter_masks` describes
        (``bit_words``, ``bit_masks``; ``bit_words`` unread for a one-word report), from uniform
        uint64 words, ``(n, byte_draw_words)`` and ``(n, hash_draw_words)``, and ``refine``
        (:class:`~fedhh.kernels.bernoulli_bytes.BernoulliBytes`: the refined draws' flat
        positions are ``user * report_bytes + byte``).

        Every bit is first drawn as if clear: byte ``k`` (bits ``8k .. 8k + 7``,
        least significant first) is :class:`BernoulliBytes` of ``T_q`` on the
        ``k``-th 16-bit quarter of the user's byte draws (the bits past ``m``
        cleared); then the bit of mask ``j`` is replaced by ``u_j < T_p``,
        ``u_j`` the ``j``-th 32-bit half of its hash draws (low half first).
        Each bit of a report is then set independently with probability ``p'``
        if the filter sets it and ``q'`` if not: the clear bits' law, and one
        fresh independent draw for each set bit.
        """
        t_p, t_q = self.thresholds
        sampled = BernoulliBytes(int(t_q)).sample(byte_draws.view(np.uint16)[:, : self.report_bytes], refine)
        if self.bloom_bits % 8:
            sampled[:, -1] &= np.uint8((1 << self.bloom_bits % 8) - 1)
        if sampled.shape[1] == 8 * self.report_words:
            reports = sampled.view(PACKED_WORD)
        else:
            reports = np.zeros((sampled.shape[0], self.report_words), dtype=PACKED_WORD)
            reports.view(np.uint8)[:, : sampled.shape[1]] = sampled
        flat, halves = reports.reshape(-1), hash_draws.view(np.uint32)
        if self.report_words == 1:  # whole-array operations (a mask times a bool): numpy's fastest route
            union = bit_masks[0].copy()
            for mask in bit_masks[1:]:
                union |= mask
            flat &= ~union
            for j, mask in enumerate(bit_masks):
                flat |= mask * (halves[:, j] < t_p)
            return reports
        for j, (word, mask) in enumerate(zip(bit_words, bit_masks, strict=True)):
            index = np.arange(reports.shape[0]) * self.report_words + word
            flat[index] = (flat[index] & ~mask) | mask * (halves[:, j] < t_p)
        return reports

    def unpack(self, reports: np.ndarray) -> np.ndarray:
        """Packed reports as ``(n, m)`` bits."""
        bits = np.unpackbits(np.ascontiguousarray(reports, dtype=PACKED_WORD).view(np.uint8), axis=1, bitorder="little")
        return bits[:, : self.bloom_bits].astype(bool)

    def report_probabilities(self, filters: np.ndarray, reports: np.ndarray) -> np.ndarray:
        """Exact probability of each report (rows of ``reports``) given the true filters."""
        p, q = self.probabilities
        per_bit = np.where(filters, np.where(reports, p, 1 - p), np.where(reports, q, 1 - q))
        return np.exp(np.log(per_bit).sum(axis=1))


class FilterMasks:
    """:meth:`BloomEncoder.filter_masks` of users' items in their cohorts: from a table of every
    (item, cohort) pair, each hashed once, when the users outnumber the pairs, else per user."""

    def __init__(self, encoder: BloomEncoder, keys: np.ndarray, users: int) -> None:
        self.encoder, self.keys = encoder, keys
        self.table: tuple[np.ndarray, np.ndarray] | None = None
        if keys.size * encoder.cohorts <= users:
            pairs = keys.size * encoder.cohorts
            # every (item, cohort) pair, then one per cohort for users holding no item: item -1 indexes them
            # from the end
            positions = np.zeros((pairs + encoder.cohorts, encoder.bloom_hashes), dtype=np.uint16)
            positions[:pairs] = pair_positions(encoder, keys).reshape(pairs, -1)
            self.table = encoder.filter_masks(positions, np.arange(positions.shape[0]) < pairs)

    def of(self, items: np.ndarray, cohorts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(words, masks)`` of item ``items[u]`` (an index into the keys; negative: none) in cohort ``cohorts[u]``."""
        if self.table is None:
            return self.encoder.filter_masks(
                self.encoder.positions(self.keys[np.maximum(items, 0)], cohorts), items >= 0
            )
        words, masks = self.table
        pair = (items * self.encoder.cohorts + cohorts).astype(
            np.intp, copy=False
        )  # in [-C, 0) for item -1: no item's columns
        if self.encoder.report_words > 1:
            return np.take(words, pair, axis=1), np.take(masks, pair, axis=1)
        return words[:, :0], np.take(masks, pair, axis=1)


def user_items(shard: Shard, randomness: RandomnessSource) -> np.ndarray:
    """Each local user's item (:func:`fedhh.protocols.common.item_choice.choose_items`), ``-1`` for none."""
    if shard.one_item_per_user:
        return shard.item_of_user
    items = np.full(shard.n_users, -1, dtype=np.int64)
    holders, chosen = choose_items(shard, np.arange(shard.n_users), randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    return items


def user_cohorts(cohort_seed: int, cohorts: int, user_ids: np.ndarray) -> np.ndarray:
    """Each global user's cohort (public randomness, the same on every device and shard)."""
    return UserRandom(np.uint64(cohort_seed), np.asarray(user_ids, dtype=np.int64)).integers(0, cohorts)


_KEY_CACHE: dict[int, np.ndarray] = {}


def vocabulary_keys(vocabulary: Vocabulary) -> np.ndarray:
    """64-bit keys of the vocabulary's items (their symbol rows), computed once per vocabulary
    object for its life: every shard of a process shares them."""
    keys = _KEY_CACHE.get(id(vocabulary))
    if keys is None:
        keys = _KEY_CACHE[id(vocabulary)] = key_rows(vocabulary.rows)
        weakref.finalize(vocabulary, _KEY_CACHE.pop, id(vocabulary), None)
    return keys


_PAIR_CACHE: dict[BloomEncoder, tuple[np.ndarray, np.ndarray]] = {}


def pair_positions(encoder: BloomEncoder, keys: np.ndarray) -> np.ndarray:
    """``(K, C, h)`` uint16: every key's bits in every cohort's filter, kept for the latest key
    array and encoder, so that in one process the shards' (item, cohort) tables and the server's
    screening of the same vocabulary hash each pair once a round."""
    cached = cached_pair_positions(encoder, keys)
    if cached is None:
        cached = encoder.positions(keys[:, None], np.arange(encoder.cohorts)[None, :]).astype(np.uint16)
        _PAIR_CACHE.clear()
        _PAIR_CACHE[encoder] = keys, cached
    return cached


def cached_pair_positions(encoder: BloomEncoder, keys: np.ndarray) -> np.ndarray | None:
    """:func:`pair_positions` if this process has them, else ``None`` (nothing computed)."""
    cached = _PAIR_CACHE.get(encoder)
    return cached[1] if cached is not None and cached[0] is keys else None
