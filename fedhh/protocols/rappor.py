"""RAPPOR (Erlingsson, Pihur and Korolova 2014; [Cormode21] §4 and §7.5.1): Bloom filters
randomised bit by bit, decoded by regression against a candidate dictionary.

Users are split into ``C`` cohorts by public randomness; cohort ``c`` has its own
``h`` public hash functions into ``[0, m)``.  A user sets the ``h`` bits of its
item in an ``m``-bit Bloom filter (none when it holds no item) and randomises
every bit with symmetric unary encoding's randomised response: a set bit stays
set with ``p = e^(ε/2h) / (e^(ε/2h) + 1)``, a clear bit turns on with
``q = 1 - p``.  Two items' filters differ in at most ``2h`` bits, each costing
``ln(p / q) = ε / 2h``, so a report is ε-LDP (one-time RAPPOR: the permanent
randomised response alone, sent once).

A shard sends, per cohort, how many of its reports have each bit set, and how
many reports it has: additive, ``C (m + 1)`` integers whatever the shard's
size.  The server decodes once:

1. ``t_cb = (ones_cb - q N_c) / (p - q)`` estimates, without bias, how many
   of cohort ``c``'s users have bit ``b`` set in their true filter;
2. screening (where RAPPOR runs the LASSO): every candidate is scored by the
   sum of the centred ``t`` of its ``hC`` bits, and those whose score is
   above ``Φ⁻¹(1 - 1/M)`` times its noise (a robust spread of the bit
   estimates) are kept, the best ``min(mC / 4, 1024)`` at most.  Keeping
   many more (the best 1024 whatever their score) biases the heavy items'
   counts down: light candidates kept because their bits happen to carry
   others' mass take a share of the heavy bits they overlap;
3. regression: ``t = X β + background + noise``, where column ``v`` of ``X``
   holds ``N_c / N`` at the bits of ``v`` in cohort ``c`` (so ``β_v`` is
   ``v``'s count) and one more column, ``N_c / N`` everywhere, takes the mass
   of the candidates left out (their bits fall uniformly over a cohort's
   filter in expectation over the hash functions);
4. a candidate is reported when its estimate is significant at level 0.05
   after Bonferroni's correction for the ``M`` candidates
   (``β_v / se_v > Φ⁻¹(1 - 0.05 / M)``), the residuals giving the noise
   variance, as in RAPPOR's own decoder.

With ``protocol.report = "top_k"`` (:mod:`fedhh.protocols.common.report_mode`) the
server reports instead the ``K = protocol.top_k`` best estimates whatever
their significance, as pure-ldp does: the screening then also keeps the ``K``
best-scored candidates below its level, so that ``min(K, M)`` are regressed
and reported, best first.

The regression identifies ``M`` candidates only when the ``mC`` bits outnumber
them, so a smaller Bloom filter is refused (``protocol.bloom_bits``).
The candidate dictionary (``protocol.candidates``) is by default the
population's own vocabulary, which a real deployment would not have: the
privacy report says so.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from ..data.items import ItemCodec
from ..data.population import Shard, Vocabulary
from ..errors import InputError
from ..kernels.bernoulli_bytes import REFINEMENT_WORDS, BernoulliBytes, Refine
from ..kernels.blas import single_blas_thread
from ..kernels.packed_counts import group_bit_counts
from ..kernels.randomness import RandomnessSource, UserRandom, derive_key, splitmix64
from ..oracles.hashing import expand_seeds, hash_expanded, mix_keys
from ..oracles.keys import key_rows
from ..oracles.unary import word_thresholds
from ..privacy.ldp import BudgetRule, BudgetSplit, ldp_report
from ..privacy.report import Coverage, PrivacyReport
from ..privacy.validation import check_users
from ..schema import Key
from .base import Discovery, ProtocolResult, Request, Response, RoundRecord, ServerProtocol
from .common.item_choice import choose_items
from .common.keys import TOP_K_KEY
from .common.report_mode import REPORT_KEY, SIGNIFICANT, TOP_K, check_report_mode
from .common.value_reports import check_all_users_report
from .messages import array_field, scalar_field
from .registry import register_protocol
from .spec import HeldUsers, InvalidReply, ProtocolSpec

NAME = "rappor"
COHORT_PURPOSE = "rappor.cohort"
HASH_PURPOSE = "rappor.hashes"
ITEM_PURPOSE = "rappor.item"
REPORT_PURPOSE = "rappor.report"
REFINE_PURPOSE = "rappor.report.refine"
SIGNIFICANCE = 0.05  # family-wise level of the Bonferroni-corrected test, as in RAPPOR's decoder
MAX_REGRESSED = 1024  # candidates regressed at most (the screening keeps the best)
BITS_PER_BLOCK = 1 << 22  # report bits randomised together: 512 KiB packed, so a block's arrays stay in cache
PACKED_WORD = np.dtype("<u8")  # a packed report's words: bit b is bit b % 64 of word b // 64
CANDIDATES_PER_BLOCK = 4096  # candidates screened together
_POSITIVE_63 = (1 << 63) - 1

RAPPOR_KEYS: dict[str, Key] = {
    "bloom_bits": Key(int, 256, "RAPPOR: bits m of each Bloom filter", check=lambda v: 2 <= v <= 1 << 16, constraint="in 2..65536"),
    "bloom_hashes": Key(int, 2, "RAPPOR: hash functions h per cohort (bits an item sets)", check=lambda v: 1 <= v <= 16, constraint="in 1..16"),
    "cohorts": Key(int, 512, "RAPPOR: cohorts C, user groups with their own hash functions", check=lambda v: 1 <= v <= 1 << 16, constraint="in 1..65536"),
    "candidates": Key(str, "", "RAPPOR: candidate dictionary the server decodes against, a text file of one candidate per line; empty: the population's vocabulary, which a real deployment would not have"),
    "report": REPORT_KEY,  # shared with SFP
    "top_k": TOP_K_KEY,  # shared with PEM/TreeHist: K under protocol.report = "top_k"
}

POPULATION_DICTIONARY_NOTE = (
    "candidate dictionary: the population's own vocabulary (protocol.candidates empty), which a real "
    "deployment would not have; it makes the decoding easier than in practice, and for a file or dataset "
    "population it is the set of items users hold, which no guarantee covers"
)


# -- budget and plan ---------------------------------------------------------------------------


SPLIT_SOURCE = (
    "Erlingsson, Pihur and Korolova, RAPPOR (one-time: permanent randomised response); "
    "Cormode et al.'s survey §4 and §7.5.1"
)


def rappor_budget(bloom_hashes: int = 2) -> BudgetRule:
    """One report per user, the whole ε: ``2h`` bits at ``ε / 2h`` each in the worst case."""
    return BudgetRule(
        ((f"Bloom filter of the item ({bloom_hashes} bits set), each bit randomised at ε/{2 * bloom_hashes}", 1.0),),
        SPLIT_SOURCE,
    )


def rappor_split(epsilon: float, bloom_hashes: int = 2) -> BudgetSplit:
    """:func:`rappor_budget` for a per-user ``epsilon`` (refused, naming privacy.epsilon, outside the oracles' range)."""
    return rappor_budget(bloom_hashes).split(NAME, epsilon)


def bit_probabilities(epsilon: float, bloom_hashes: int) -> tuple[float, float]:
    """``(p, q)``: probability that a set bit, and a clear bit, is reported set."""
    half = math.exp(epsilon / (2 * bloom_hashes))
    return half / (half + 1), 1 / (half + 1)


def count_noise(n_users: int, epsilon: float, bloom_hashes: int) -> float:
    """Standard deviation of a count estimate from randomisation alone, for a candidate
    whose ``h`` bits are apart from the other candidates' (no collisions): the ``hC``
    bit estimates of variance ``N_c q (1 - q) / (p - q)^2`` regressed with weights ``N_c / N``."""
    p, q = bit_probabilities(epsilon, bloom_hashes)
    return math.sqrt(n_users * q * (1 - q) / bloom_hashes) / (p - q)


def significance_level(candidates: int) -> float:
    """``Φ⁻¹(1 - 0.05 / M)``: the z-score a candidate's estimate must reach."""
    return NormalDist().inv_cdf(1 - SIGNIFICANCE / max(candidates, 1))


def check_bloom_size(bloom_bits: int, cohorts: int, candidates: int) -> None:
    """The regression identifies the candidates only if the ``mC`` bits outnumber them."""
    if bloom_bits * cohorts < candidates:
        raise InputError(
            f"protocol.bloom_bits: a Bloom filter of {bloom_bits} bits in {cohorts} cohorts gives "
            f"{bloom_bits * cohorts:,} bit counts, fewer than the {candidates:,} candidates the regression "
            f"must tell apart; use protocol.bloom_bits x protocol.cohorts >= {candidates:,} "
            f"(e.g. protocol.bloom_bits = {-(-candidates // cohorts)}) or a smaller protocol.candidates dictionary"
        )


# -- the public hashing and the randomiser -----------------------------------------------------


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
        return hash_expanded(multipliers[index], offsets[index], mix_keys(keys)[..., None], self.bloom_bits).astype(np.int64)

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

    def randomize(self, bit_words: np.ndarray, bit_masks: np.ndarray, byte_draws: np.ndarray, hash_draws: np.ndarray,
                  refine: Refine) -> np.ndarray:
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
            # every (item, cohort) pair, then one per cohort for users holding no item: item -1 indexes them from the end
            positions = np.zeros((pairs + encoder.cohorts, encoder.bloom_hashes), dtype=np.uint16)
            positions[:pairs] = pair_positions(encoder, keys).reshape(pairs, -1)
            self.table = encoder.filter_masks(positions, np.arange(positions.shape[0]) < pairs)

    def of(self, items: np.ndarray, cohorts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(words, masks)`` of item ``items[u]`` (an index into the keys; negative: none) in cohort ``cohorts[u]``."""
        if self.table is None:
            return self.encoder.filter_masks(self.encoder.positions(self.keys[np.maximum(items, 0)], cohorts), items >= 0)
        words, masks = self.table
        pair = (items * self.encoder.cohorts + cohorts).astype(np.intp, copy=False)  # in [-C, 0) for item -1: no item's columns
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


# -- messages and the client ---------------------------------------------------------------------


@dataclass(frozen=True)
class RapporRequest(Request):
    """Send your randomised Bloom filter (every public parameter a device needs)."""

    epsilon: float = scalar_field(minimum=0.0)  # ε of the whole report (each bit: ε / 2h)
    bloom_bits: int = scalar_field(minimum=2)  # m: bits of a Bloom filter
    bloom_hashes: int = scalar_field(minimum=1)  # h: bits set per item
    cohorts: int = scalar_field(minimum=1)  # C: cohorts, each with its own h hash functions
    cohort_seed: int  # public seed of the users' cohorts
    hash_seed: int  # σ_i = splitmix64(hash_seed + i) names hash i = c h + j

    def encoder(self) -> BloomEncoder:
        return _encoder(self.epsilon, self.bloom_bits, self.bloom_hashes, self.cohorts, self.hash_seed)


@functools.lru_cache(maxsize=2)
def _encoder(epsilon: float, bloom_bits: int, bloom_hashes: int, cohorts: int, hash_seed: int) -> BloomEncoder:
    """One encoder per round and process: its hash functions are expanded once for every shard."""
    return BloomEncoder(epsilon, bloom_bits, bloom_hashes, cohorts, hash_seed)


@dataclass(frozen=True)
class RapporResponse(Response):
    """Per cohort, how many reports have each bit set (cohort-major), and how many reports there are."""

    ones: np.ndarray = array_field("int64", ("B",))  # [cohort, bit]: reports with the bit set, cohort-major
    reporters: np.ndarray = array_field("int64", ("C",))  # reports per cohort

    @classmethod
    def combine(cls, responses: Sequence[RapporResponse]) -> RapporResponse:
        if not responses:
            raise ValueError("combine needs at least one response")
        if len({(r.round, r.ones.shape, r.reporters.shape) for r in responses}) != 1:
            raise ValueError("cannot combine RAPPOR responses of different rounds or shapes")
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            ones=np.sum([r.ones for r in responses], axis=0, dtype=np.int64),
            reporters=np.sum([r.reporters for r in responses], axis=0, dtype=np.int64),
        )


def respond(request: RapporRequest, shard: Shard, randomness: RandomnessSource) -> RapporResponse:
    """Every user of the shard sends its randomised Bloom filter; the shard adds them up per cohort.

    What each user does (a device is a shard of one user, ``u`` its global
    id): its cohort is ``c = public_index(cohort_seed, u, cohorts)`` and its
    item's key is ``key_rows`` of the item's symbol row of ``fedhh.data.items``
    (``max_symbols + 1`` entries: the symbols, the end symbol 0, then
    padding -1).  Its Bloom filter has ``m = bloom_bits`` bits, of which the
    ``h = bloom_hashes`` bits ``hash64(σ_(c h + j), key, m)``, ``j = 0 ..
    h - 1``, are set, with ``σ_i = splitmix64(hash_seed + i)``; none is set
    when the user holds no item.  Bit ``b`` is reported set, independently
    for every bit, with probability ``p' = T_p / 2^32`` if the filter sets it
    and ``q' = T_q / 2^32`` if not, where ``T_p = floor(p 2^32)`` and ``T_q =
    ceil(q 2^32)``, ``p = e^(ε/2h) / (e^(ε/2h) + 1)``, ``q = 1 - p`` (ε =
    ``epsilon``): rounding ``p`` down and ``q`` up keeps the report ε-LDP
    exactly.  (A fresh uniform 32-bit integer below the threshold is such a
    bit; fedhh's simulated users draw the same law from fewer random bits,
    ``BloomEncoder.randomize``.)

    The reply: ``ones[c m + b]`` is the number of the node's cohort-``c``
    reports with bit ``b`` set, ``reporters[c]`` the number of its
    cohort-``c`` users; ``sampled_users = responding_users`` = the number of
    users.
    """
    encoder = request.encoder()
    items = user_items(shard, randomness)
    filters = FilterMasks(encoder, vocabulary_keys(shard.vocabulary), shard.n_users)
    ones = np.zeros((request.cohorts, 64 * encoder.report_words), dtype=np.int64)
    reporters = np.zeros(request.cohorts, dtype=np.int64)
    for first in range(0, shard.n_users, encoder.users_per_block):
        block = slice(first, first + encoder.users_per_block)
        users, first_global = items[block].size, shard.first_user + first
        cohorts = user_cohorts(request.cohort_seed, request.cohorts, np.arange(first_global, first_global + users))
        draws = randomness.for_range(REPORT_PURPOSE, request.round, first_global, users)
        byte_draws, hash_draws = draws.words(encoder.byte_draw_words), draws.words(encoder.hash_draw_words)

        def refine(refined: np.ndarray, first_draw: int = first_global * encoder.report_bytes) -> np.ndarray:
            """Keyed by the draw's global number, ``user * report_bytes + byte``: the same in any range."""
            return randomness.for_users(REFINE_PURPOSE, request.round, refined + first_draw).words(REFINEMENT_WORDS)

        reports = encoder.randomize(*filters.of(items[block], cohorts), byte_draws, hash_draws, refine)
        ones += group_bit_counts(reports, cohorts, request.cohorts)
        reporters += np.bincount(cohorts, minlength=request.cohorts)
    return RapporResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        ones=ones[:, : request.bloom_bits].ravel(),
        reporters=reporters,
    )


# -- the server ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RapporParameters:
    """A config's RAPPOR settings, checked with errors naming the key."""

    n_users: int
    epsilon: float
    bloom_bits: int
    bloom_hashes: int
    cohorts: int
    candidates: str  # dictionary file; empty: the population's vocabulary
    report: str = SIGNIFICANT  # significant | top_k (fedhh.protocols.common.report_mode)
    top_k: int = 32  # K: candidates reported under report = top_k

    def __post_init__(self) -> None:
        check_users(self.n_users)
        rappor_split(self.epsilon, bloom_hashes=self.bloom_hashes)
        check_report_mode(self.report)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise InputError(f"protocol.top_k: must be an integer >= 1, got {self.top_k!r}")

    @property
    def at_least(self) -> int:
        """Candidates the decoder regresses whatever their screening score (0: only those above it)."""
        return self.top_k if self.report == TOP_K else 0


@dataclass
class Regression:
    """The decoder's outcome: the regressed candidates, their estimates and standard errors."""

    candidates: np.ndarray  # indices into the dictionary
    estimates: np.ndarray
    errors: np.ndarray
    threshold: float  # z-score a candidate needs


class RapporServer(ServerProtocol):
    """One round of Bloom filters, decoded by regression against the candidate dictionary."""

    name = NAME
    request_type = RapporRequest
    response_type = RapporResponse

    def __init__(self, params: RapporParameters, codec: ItemCodec, seed: int) -> None:
        self.params = params
        self.codec = codec
        self.split = rappor_split(params.epsilon, bloom_hashes=params.bloom_hashes)
        self.cohort_seed = int(derive_key(seed, COHORT_PURPOSE)) & _POSITIVE_63
        self.hash_seed = int(derive_key(seed, HASH_PURPOSE)) & _POSITIVE_63
        self.dictionary: Vocabulary | None = None
        self.dictionary_source = "population vocabulary" if not params.candidates else params.candidates
        if params.candidates:
            self._set_dictionary(read_dictionary(params.candidates, codec))
        self._regression: Regression | None = None
        self._trace: list[RoundRecord] = []

    def offer_vocabulary(self, vocabulary: Vocabulary) -> None:
        if not self.params.candidates:
            self._set_dictionary(vocabulary)

    def _set_dictionary(self, dictionary: Vocabulary) -> None:
        if dictionary.size == 0:
            raise InputError(f"protocol.candidates: the dictionary ({self.dictionary_source}) holds no encodable candidate")
        check_bloom_size(self.params.bloom_bits, self.params.cohorts, dictionary.size)
        self.dictionary = dictionary

    @property
    def encoder(self) -> BloomEncoder:
        p = self.params
        return BloomEncoder(p.epsilon, p.bloom_bits, p.bloom_hashes, p.cohorts, self.hash_seed)

    # -- ServerProtocol ----------------------------------------------------------------------

    @property
    def max_rounds(self) -> int:
        return 1

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    def check_ready(self) -> None:
        if self.dictionary is None:
            raise InputError(
                "protocol.candidates: no population vocabulary here (a deployment's server holds none); "
                "name a candidate dictionary file"
            )

    def next_request(self) -> RapporRequest | None:
        if self._trace:
            return None
        self.check_ready()
        p = self.params
        return RapporRequest(
            round=1, epsilon=p.epsilon, bloom_bits=p.bloom_bits, bloom_hashes=p.bloom_hashes, cohorts=p.cohorts,
            cohort_seed=self.cohort_seed, hash_seed=self.hash_seed,
        )

    def absorb(self, response: Response) -> None:
        if not isinstance(response, RapporResponse):
            raise TypeError(f"rappor expects a RapporResponse, got {type(response).__name__}")
        if self._trace or response.round != 1:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        assert self.dictionary is not None
        self._regression = decode(self.encoder, response, vocabulary_keys(self.dictionary), self.params.at_least)
        found = int(np.count_nonzero(self._significant()))
        values = {
            "users": int(response.responding_users),
            "candidates": self.dictionary.size,
            "regressed": int(self._regression.candidates.size),
            "significant": found,
        }
        if self.params.report == TOP_K:
            values["reported"] = int(self._reported().size)
        self._trace.append(RoundRecord(1, values))

    def _significant(self) -> np.ndarray:
        regression = self._regression
        assert regression is not None
        return regression.estimates > regression.threshold * regression.errors

    def _reported(self) -> np.ndarray:
        """Indices into the regression of the reported candidates, best estimate first:
        the significant ones, or under ``report = top_k`` the ``K`` best whatever their significance."""
        regression = self._regression
        assert regression is not None
        if self.params.report == TOP_K:
            return np.argsort(-regression.estimates, kind="stable")[: self.params.top_k]
        significant = np.flatnonzero(self._significant())
        return significant[np.argsort(-regression.estimates[significant], kind="stable")]

    def privacy_report(self) -> PrivacyReport:
        p = self.params
        bit_p, bit_q = self.encoder.probabilities
        report = ldp_report(self.split, "SUE on Bloom filter bits", {
            "bloom_bits": p.bloom_bits, "bloom_hashes": p.bloom_hashes, "cohorts": p.cohorts,
            "bit_keep_probability": bit_p, "bit_flip_on_probability": bit_q,
            "candidate_dictionary": self.dictionary_source,
        })
        if p.candidates:
            return report
        coverage = Coverage(report.coverage.covered, (*report.coverage.not_covered, POPULATION_DICTIONARY_NOTE))
        return dataclasses.replace(report, coverage=coverage)

    def progress_note(self) -> str:
        return f"{self.dictionary.size if self.dictionary else 0:,} candidates"

    def result(self) -> ProtocolResult:
        discoveries: list[Discovery] = []
        if self._regression is not None:
            assert self.dictionary is not None
            regression = self._regression
            order = self._reported()
            for index, estimate in zip(regression.candidates[order].tolist(),
                                       regression.estimates[order].tolist(), strict=True):
                row = self.dictionary.rows[index]
                discoveries.append(Discovery(self.dictionary.items[index], tuple(int(s) for s in row),
                                             estimated_count=float(estimate)))
        p = self.params
        return ProtocolResult(
            protocol=NAME,
            discoveries=discoveries,
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.privacy_report(),
            params={
                "bloom_bits": p.bloom_bits, "bloom_hashes": p.bloom_hashes, "cohorts": p.cohorts,
                "candidate_dictionary": self.dictionary_source,
                "candidates": self.dictionary.size if self.dictionary else 0,
                "significance": SIGNIFICANCE,
                "significance_z": self._regression.threshold if self._regression else None,
                "report": p.report,
                **({"top_k": p.top_k} if p.report == TOP_K else {}),
            },
            stopped_because="one round of Bloom filters decoded" if self._trace else "not finished",
        )


def read_dictionary(path: str, codec: ItemCodec) -> Vocabulary:
    """A candidate dictionary file (UTF-8 text, one candidate per line) encoded with the run's codec."""
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"protocol.candidates: cannot read {path!r} as UTF-8 text ({error})") from None
    candidates = list(dict.fromkeys(line.strip() for line in lines if line.strip()))
    vocabulary, _ = Vocabulary.encode(candidates, dataclasses.replace(codec, overlong="drop", unknown_chars="drop"))
    return vocabulary


def decode(encoder: BloomEncoder, response: RapporResponse, candidate_keys: np.ndarray, at_least: int = 0) -> Regression:
    """Bit estimates, screening, regression and the significance threshold (module docstring).

    ``at_least``: the best-scored candidates regressed whatever their score
    (``report = top_k``: the ``K`` the server must report); 0 keeps only those
    above the screening level.
    """
    from scipy import sparse  # server side only: devices never import scipy

    p, q = encoder.probabilities
    cohorts, bits = encoder.cohorts, encoder.bloom_bits
    reporters = response.reporters.astype(np.float64)
    estimates = (response.ones.reshape(cohorts, bits) - q * reporters[:, None]) / (p - q)
    centred = estimates - estimates.mean(axis=1, keepdims=True)
    all_cohorts = np.arange(cohorts)
    cohort_rows = (all_cohorts * bits)[None, :, None]  # where cohort c's bits start in the flat estimates
    scores = np.empty(candidate_keys.size)
    known = cached_pair_positions(encoder, candidate_keys)  # hashed by this process's shards
    for first in range(0, candidate_keys.size, CANDIDATES_PER_BLOCK):
        keys = candidate_keys[first : first + CANDIDATES_PER_BLOCK]
        if known is not None:
            positions = known[first : first + CANDIDATES_PER_BLOCK]
        else:
            positions = encoder.positions(keys[:, None], all_cohorts[None, :])  # (K, C, h)
        scores[first : first + keys.size] = centred.ravel().take(positions + cohort_rows).reshape(keys.size, -1).sum(axis=1)
    spread = 1.4826 * float(np.median(np.abs(centred)))  # robust sd of a bit estimate: heavy bits stand out
    screen = NormalDist().inv_cdf(1 - 1 / max(candidate_keys.size, 2)) * spread * math.sqrt(encoder.bloom_hashes * cohorts)
    limit = min(max(1, bits * cohorts // 4), MAX_REGRESSED)
    ranked = np.argsort(-scores, kind="stable")
    chosen = np.sort(ranked[:limit])
    chosen = chosen[scores[chosen] > screen]
    if at_least:
        chosen = np.union1d(chosen, ranked[:at_least])
    regressed = chosen.size
    positions = encoder.positions(candidate_keys[chosen][:, None], all_cohorts[None, :])  # (R, C, h)
    first_time = np.ones(positions.shape, dtype=bool)  # an item sets a bit once, however many hashes hit it
    for j in range(1, encoder.bloom_hashes):
        first_time[..., j] = np.all(positions[..., j : j + 1] != positions[..., :j], axis=-1)
    weights = reporters / max(float(reporters.sum()), 1.0)  # N_c / N
    column, cohort, _ = np.nonzero(first_time)
    rows = cohort * bits + positions[first_time]
    design = sparse.csr_matrix(
        (np.concatenate([weights[cohort], np.repeat(weights, bits)]),
         (np.concatenate([rows, np.arange(cohorts * bits)]),
          np.concatenate([column, np.full(cohorts * bits, regressed)]))),
        shape=(cohorts * bits, regressed + 1),
    )
    target = estimates.ravel()
    beta, inverse_diagonal = solve_normal((design.T @ design).toarray(), design.T @ target)
    residuals = target - design @ beta
    variance = float(residuals @ residuals) / max(cohorts * bits - regressed - 1, 1)
    errors = np.sqrt(np.maximum(inverse_diagonal[:regressed], 0.0) * variance)
    return Regression(chosen, beta[:regressed], errors, significance_level(candidate_keys.size))


def solve_normal(normal: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``β = (XᵀX)⁻¹ Xᵀt`` and the diagonal of ``(XᵀX)⁻¹``, by Cholesky (the columns are
    independent unless two candidates share every bit in every cohort), else by the
    pseudo-inverse, which gives such twins their mean.

    The diagonal is the columns' squared norms of ``L⁻¹`` (``XᵀX = L Lᵀ``) and ``β = L⁻ᵀ L⁻¹
    Xᵀt``: one triangular inversion, not a solve against the identity, which costs three
    times the arithmetic.  One BLAS thread (:mod:`fedhh.kernels.blas`): at these sizes more only spin.
    """
    from scipy import linalg  # before the limit, so that it covers scipy's own BLAS too

    with single_blas_thread():
        try:
            factor = linalg.cholesky(normal, lower=True)
        except linalg.LinAlgError:
            inverse = np.linalg.pinv(normal, hermitian=True)
            return inverse @ rhs, np.diag(inverse).copy()
        inverse_factor, _ = linalg.lapack.dtrtri(factor, lower=1)  # L has a positive diagonal: invertible
        return inverse_factor.T @ (inverse_factor @ rhs), np.einsum("ij,ij->j", inverse_factor, inverse_factor)


# -- what an untrusting server checks -------------------------------------------------------------


def check_reply(request: RapporRequest, response: RapporResponse, node: HeldUsers, server: ServerProtocol) -> None:
    """A node reports exactly its users, cohort by cohort, and no bit more often than it has reports."""
    tag = type(response).__name__
    check_all_users_report(response, node)
    if response.ones.size != request.cohorts * request.bloom_bits or response.reporters.size != request.cohorts:
        raise InvalidReply(f"{tag}.ones: {response.ones.size} counts for {response.reporters.size} cohorts, expected "
                           f"{request.cohorts} x {request.bloom_bits}")
    ids = np.arange(node.first_user, node.first_user + node.users)
    expected = np.bincount(user_cohorts(request.cohort_seed, request.cohorts, ids), minlength=request.cohorts)
    if not np.array_equal(response.reporters, expected):
        raise InvalidReply(f"{tag}.reporters: reports per cohort differ from the node's users per cohort")
    if np.any(response.ones.reshape(request.cohorts, -1) > expected[:, None]):
        raise InvalidReply(f"{tag}.ones: a bit is set in more reports than its cohort has")


def reply_budget(request: RapporRequest, node: HeldUsers, server: ServerProtocol) -> int:
    return 8 * request.cohorts * (request.bloom_bits + 1) + 1024


def describe_round(record: RoundRecord) -> str:
    values = record.values
    reported = f", {values['reported']} reported (the best estimates)" if "reported" in values else ""
    return (f"Bloom filters of {values['users']:,} users decoded against {values['candidates']:,} candidates: "
            f"{values['regressed']} regressed, {values['significant']} significant{reported}")


def build_rappor(
    privacy: Mapping[str, Any], protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> RapporServer:
    params = RapporParameters(
        n_users=n_users,
        epsilon=float(privacy["epsilon"]),
        bloom_bits=int(protocol["bloom_bits"]),
        bloom_hashes=int(protocol["bloom_hashes"]),
        cohorts=int(protocol["cohorts"]),
        candidates=str(protocol["candidates"]),
        report=str(protocol["report"]),
        top_k=int(protocol["top_k"]),
    )
    return RapporServer(params, codec, seed)


SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="RAPPOR: Bloom filters randomised bit by bit (SUE), decoded by regression against a candidate dictionary",
        build=build_rappor,
        respond=respond,  # type: ignore[arg-type]
        request_type=RapporRequest,
        response_type=RapporResponse,
        dropout_privacy=(
            "unchanged: every Bloom filter is ε-LDP on the device that sends it; a node that does not "
            "answer only removes its users' reports"
        ),
        keys=RAPPOR_KEYS,
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        budget=rappor_budget(),
        planner="fedhh.planning.rappor:plan_rappor",
        plan_command="fedhh.planning.rappor:RAPPOR_PLAN",
        communication="fedhh.protocols.communication:rappor_bits",
    )
)
