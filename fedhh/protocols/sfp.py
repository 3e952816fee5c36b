"""Apple's Sequence Fragment Puzzle (Apple 2017; [Cormode21] §5): fragments tagged with the
word's hash, reassembled by the server, then estimated by a full-word sketch.

Every value is its ``U`` symbols, padded with zeros (``protocol.max_length``
characters in ``unit_size``-character symbols), cut into ``P = U / f``
fragments of ``f = protocol.fragment_length`` symbols.  Each user

* is assigned one fragment position by public randomness (sent in the clear:
  it depends on nothing the user holds) and reports that fragment of its
  value concatenated with an 8-bit public hash of the whole value, through
  a sketch oracle (Apple's CMS, count-mean over OUE, or HCMS, over HM(1)),
  with ``fragment_share x ε``;
* reports its whole value through a second sketch with the rest of ε
  (``protocol.word_pass = false``: no full-word report, the whole ε on
  the fragment).

A shard sends the flat statistics of both sketches, per position for the
fragments: additive, decoded once.  The server

1. estimates every (fragment, hash) pair at every position (the ``B^f x
   256`` pairs are enumerated: a sketch decodes each row once) and keeps,
   per position, the best ``protocol.fragment_candidates`` of those above
   the noise level (``Φ⁻¹(1 - 1/pairs)`` times a robust spread of the
   estimates, most pairs being held by nobody);
2. solves the puzzle: for every hash value, every way of choosing one kept
   fragment per position with that hash is a candidate word, kept only if
   it is the encoding of some item and its own hash is that hash (the hash
   is what keeps "apples" and "orange" from becoming "orales");
3. estimates the candidates with the full-word sketch (without one, with
   the mean of their fragments' estimates) and reports the best
   ``protocol.words_reported`` of those with a positive estimate.

With ``protocol.report = "top_k"`` (:mod:`fedhh.protocols.common.report_mode`) the
server keeps the best ``protocol.fragment_candidates`` pairs per position
whatever the noise level and reports the best ``protocol.words_reported``
candidates whatever their estimate, as pure-ldp does (every candidate the
puzzle assembles, if fewer).

Both reports are ε-LDP by their oracles at their share of ε; a user's
guarantee is their sum (basic composition), as the privacy report states.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from ..data.items import ItemCodec
from ..data.population import Shard, Vocabulary
from ..errors import InputError
from ..kernels.randomness import RandomnessSource, UserRandom, derive_key, splitmix64
from ..oracles import make_oracle
from ..oracles.sketches import SketchOracle
from ..privacy.ldp import BudgetRule, BudgetSplit, ldp_report
from ..privacy.report import PrivacyReport
from ..privacy.validation import check_users
from ..schema import Key
from .base import Discovery, ProtocolResult, Request, Response, RoundRecord, ServerProtocol
from .common.item_choice import choose_items
from .common.prefix_encoding import PrefixEncoding
from .common.report_mode import REPORT_KEY, SIGNIFICANT, check_report_mode
from .common.value_reports import check_all_users_report
from .messages import array_field, scalar_field
from .registry import register_protocol
from .spec import HeldUsers, InvalidReply, ProtocolSpec

NAME = "sfp"
POSITION_PURPOSE = "sfp.position"
ORACLE_PURPOSE = "sfp.oracle"
HASH_PURPOSE = "sfp.word-hash"
ITEM_PURPOSE = "sfp.item"
FRAGMENT_PURPOSE = "sfp.fragment-report"
WORD_PURPOSE = "sfp.word-report"
HASH_VALUES = 256  # Apple's 8-bit hash of the whole word
MAX_PAIRS = 1 << 22  # (fragment, hash) pairs a position may have: each is estimated
MAX_PUZZLE = 4096  # candidate words one hash value may assemble (the weakest fragments go first)
USERS_PER_BLOCK = 1 << 17  # a multiple of fedhh.kernels.randomness.GRID_USERS
SKETCH_ORACLES: tuple[str, ...] = ("cms", "hcms")
_POSITIVE_63 = (1 << 63) - 1

SFP_KEYS: dict[str, Key] = {
    "fragment_length": Key(int, 2, "SFP: symbols f of a fragment; must divide the item's symbols (max_length / unit_size)", check=lambda v: v >= 1, constraint=">= 1"),
    "fragment_share": Key(float, 0.5, "SFP: share of ε on the fragment report, the rest on the full word", check=lambda v: 0 < v < 1, constraint="in the open interval (0, 1)"),
    "word_pass": Key(bool, True, "SFP: also report the whole word through a second sketch (the optional full-string pass); false: the fragment report takes the whole ε"),
    "fragment_candidates": Key(int, 64, "SFP: (fragment, hash) pairs kept per position, the best above the noise level (protocol.report = top_k: the best whatever their noise)", check=lambda v: v >= 1, constraint=">= 1"),
    "words_reported": Key(int, 32, "SFP: most words reported, the best by the full-word estimate with a positive one (protocol.report = top_k: whatever their estimate)", check=lambda v: v >= 1, constraint=">= 1"),
    "fragment_oracle": Key(str, "cms", "SFP: sketch oracle of both reports (cms: count-mean over OUE; hcms: over HM(1))", SKETCH_ORACLES),
    "fragment_sketch_rows": Key(int, 16, "SFP: rows of both sketches", check=lambda v: 1 <= v <= 1 << 16, constraint="in 1..65536"),
    "fragment_sketch_width": Key(int, 1024, "SFP: width of both sketches", check=lambda v: 2 <= v <= 1 << 20, constraint="in 2..1048576"),
    "report": REPORT_KEY,  # shared with RAPPOR
}


# -- budget and plan ----------------------------------------------------------------------------


def sfp_budget(fragment_share: float = 0.5, word_pass: bool = True) -> BudgetRule:
    """The fragment report takes ``fragment_share x ε`` and the full word the rest; without
    the word pass the fragment report takes the whole ε."""
    if isinstance(fragment_share, bool) or not isinstance(fragment_share, (int, float)) or not 0 < fragment_share < 1:
        raise InputError(f"protocol.fragment_share: must be a number in the open interval (0, 1), got {fragment_share!r}")
    fragment = "fragment with the word's 8-bit hash"
    parts = ((fragment, 1.0),) if not word_pass else ((fragment, fragment_share), ("full word", 1 - fragment_share))
    return BudgetRule(
        parts,
        "Apple, Learning with Privacy at Scale (Sequence Fragment Puzzle); Cormode et al.'s survey §5, "
        "which splits evenly (the default)",
    )


def sfp_split(epsilon: float, fragment_share: float = 0.5, word_pass: bool = True) -> BudgetSplit:
    """:func:`sfp_budget` for a per-user ``epsilon`` (refused, naming privacy.epsilon, outside the oracles' range)."""
    return sfp_budget(fragment_share, word_pass).split(NAME, epsilon)


def fragment_positions(codec: ItemCodec, fragment_length: int) -> int:
    """``U / f``, refusing a fragment length that does not divide the item's ``U`` symbols."""
    symbols = codec.max_symbols
    if fragment_length < 1 or symbols % fragment_length:
        divisors = [d for d in range(1, symbols + 1) if symbols % d == 0]
        raise InputError(
            f"protocol.fragment_length: {fragment_length} does not divide the {symbols} symbols of an item "
            f"(protocol.max_length / protocol.unit_size); allowed: {divisors}"
        )
    return symbols // fragment_length


def fragment_pairs(codec: ItemCodec, fragment_length: int) -> int:
    """(fragment, hash) pairs a position can hold, refused when too many to enumerate."""
    pairs = (codec.radix**codec.unit_size) ** fragment_length * HASH_VALUES
    if pairs > MAX_PAIRS:
        raise InputError(
            f"protocol.fragment_length: fragments of {fragment_length} symbols give {pairs:,} (fragment, hash) "
            f"pairs per position, more than the {MAX_PAIRS:,} the server enumerates; use a shorter fragment"
        )
    return pairs


def sketch_noise(oracle: str, epsilon: float, rows: int, width: int, users: float) -> float:
    """Variance of a count-mean sketch estimate of a value nobody holds, from ``users`` reports:
    ``users x (inner per-user variance) x (m / (m - 1))^2``."""
    inner = make_oracle({"cms": "oue", "hcms": "hm"}[oracle], epsilon=epsilon, domain=width)
    other, _ = inner.per_user_variance()
    return users * other * (width / (width - 1)) ** 2


def best_first(scores: np.ndarray, count: int) -> np.ndarray:
    """``np.argsort(-scores, kind="stable")[:count]`` (ties by index) without sorting every score:
    only those at least the ``count``-th largest are sorted."""
    if count >= scores.size:
        return np.argsort(-scores, kind="stable")
    kth = np.partition(scores, scores.size - count)[scores.size - count]
    top = np.flatnonzero(scores >= kth)
    return top[np.argsort(-scores[top], kind="stable")][:count]


def median(values: np.ndarray, scratch: np.ndarray) -> np.float64:
    """``np.median(values)`` of finite values, the same float, by one selection in ``scratch``
    (``values`` itself may be it) instead of numpy's copy and three-point partition: the upper
    middle value, and for an even count the largest below it, averaged by ``np.mean`` as numpy does."""
    if scratch is not values:
        np.copyto(scratch, values)
    half = values.size // 2
    scratch.partition(half)
    middle = scratch[half : half + 1] if values.size % 2 else np.array([scratch[:half].max(), scratch[half]])
    return np.mean(middle)  # as numpy: a mean of one -0.0 is 0.0


# -- the public encoding --------------------------------------------------------------------------


@dataclass(frozen=True)
class FragmentCodec:
    """How values become fragments, hashes and word keys (public, the same on every device)."""

    codec: ItemCodec
    fragment_length: int
    hash_seed: int

    @property
    def encoding(self) -> PrefixEncoding:
        return PrefixEncoding("symbols", self.codec)

    @property
    def positions(self) -> int:
        return self.codec.max_symbols // self.fragment_length

    @property
    def fragment_values(self) -> int:
        return self.encoding.base**self.fragment_length

    def fragments(self, rows: np.ndarray) -> np.ndarray:
        """``[K, P]`` base-``B`` value of each fragment of value rows ``[K, U]``."""
        digits = rows.reshape(rows.shape[0], self.positions, self.fragment_length).astype(np.int64)
        weights = self.encoding.base ** np.arange(self.fragment_length - 1, -1, -1, dtype=np.int64)
        return digits @ weights

    def unfragment(self, fragments: np.ndarray) -> np.ndarray:
        """Value rows ``[K, U]`` from fragment values ``[K, P]``."""
        powers = self.encoding.base ** np.arange(self.fragment_length - 1, -1, -1, dtype=np.int64)
        digits = (fragments[:, :, None] // powers) % self.encoding.base
        return digits.reshape(fragments.shape[0], -1)

    def word_keys(self, rows: np.ndarray) -> np.ndarray:
        return self.encoding.keys(rows)

    def word_hashes(self, keys: np.ndarray) -> np.ndarray:
        """Apple's 8-bit hash of the whole word, keyed by a public seed."""
        return (splitmix64(keys ^ np.uint64(self.hash_seed)) >> np.uint64(56)).astype(np.int64)


_VALUE_CACHE: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}


def vocabulary_values(fragments: FragmentCodec, vocabulary: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Per vocabulary item, then the empty value (users without an item): the fragment-report
    keys ``[V + 1, P]`` (fragment x 256 + hash) and the word keys ``[V + 1]``; once per vocabulary."""
    cache_key = (id(vocabulary), fragments.fragment_length, fragments.hash_seed)
    cached = _VALUE_CACHE.get(cache_key)
    if cached is None:
        units = fragments.encoding.units(vocabulary)
        rows = np.concatenate([units, np.zeros((1, units.shape[1]), dtype=units.dtype)])
        words = fragments.word_keys(rows)
        reports = fragments.fragments(rows) * HASH_VALUES + fragments.word_hashes(words)[:, None]
        cached = _VALUE_CACHE[cache_key] = (reports.astype(np.uint64), words)
        weakref.finalize(vocabulary, _VALUE_CACHE.pop, cache_key, None)
    return cached


def user_positions(position_seed: int, positions: int, user_ids: np.ndarray) -> np.ndarray:
    """Each global user's fragment position (public randomness, sent in the clear)."""
    return UserRandom(np.uint64(position_seed), np.asarray(user_ids)).integers(0, positions)


@functools.lru_cache(maxsize=4)
def sketch(name: str, epsilon: float, domain: int, rows: int, width: int, seed: int) -> SketchOracle:
    """A sketch oracle built from public parameters (its hash functions expanded once per process)."""
    oracle = make_oracle(name, epsilon=epsilon, domain=domain, rows=rows, width=width, seed=seed)
    assert isinstance(oracle, SketchOracle)  # cms and hcms
    return oracle


# -- messages and the client ----------------------------------------------------------------------


@dataclass(frozen=True)
class SFPRequest(Request):
    """Send your fragment report and your word report (every public parameter a device needs)."""

    fragment_length: int = scalar_field(minimum=1)  # f: symbols per fragment
    oracle: str  # cms | hcms: the sketch of both reports
    fragment_epsilon: float = scalar_field(minimum=0.0)  # ε of the fragment report
    word_epsilon: float = scalar_field(minimum=0.0)  # 0: no full-word report
    sketch_rows: int = scalar_field(minimum=1)  # the sketches' rows
    sketch_width: int = scalar_field(minimum=2)  # the sketches' width
    position_seed: int  # public seed of the users' fragment positions
    oracle_seed: int  # the sketches' seed
    hash_seed: int  # key of the 8-bit word hash

    def fragment_codec(self, codec: ItemCodec) -> FragmentCodec:
        return FragmentCodec(codec, self.fragment_length, self.hash_seed)

    def fragment_oracle(self, codec: ItemCodec) -> SketchOracle:
        domain = self.fragment_codec(codec).fragment_values * HASH_VALUES
        return sketch(self.oracle, self.fragment_epsilon, domain, self.sketch_rows, self.sketch_width, self.oracle_seed)

    def word_oracle(self) -> SketchOracle:
        return sketch(self.oracle, self.word_epsilon, 1 << 64, self.sketch_rows, self.sketch_width, self.oracle_seed)


@dataclass(frozen=True)
class SFPResponse(Response):
    """The two sketches' flat statistics, the fragments' per position; additive."""

    # [position, flat cells] of the fragment sketch (signed for hcms)
    fragment_counts: np.ndarray = array_field("int64", ("P", "F"), minimum=None)
    fragment_reporters: np.ndarray = array_field("int64", ("P", "R"))  # [position, sketch row] reports
    # flat cells of the word sketch (empty: no word report)
    word_counts: np.ndarray = array_field("int64", ("W",), minimum=None)
    word_reporters: np.ndarray = array_field("int64", ("V",))  # reports per sketch row of the word sketch

    @classmethod
    def combine(cls, responses: Sequence[SFPResponse]) -> SFPResponse:
        if not responses:
            raise ValueError("combine needs at least one response")
        shapes = {(r.round, r.fragment_counts.shape, r.word_counts.shape) for r in responses}
        if len(shapes) != 1:
            raise ValueError("cannot combine SFP responses of different rounds or shapes")
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            **{name: np.sum([getattr(r, name) for r in responses], axis=0, dtype=np.int64)
               for name in ("fragment_counts", "fragment_reporters", "word_counts", "word_reporters")},
        )


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
    fragment_counts = np.zeros((fragments.positions, fragment_oracle.flat_size()), dtype=np.int64)
    fragment_reporters = np.zeros((fragments.positions, request.sketch_rows), dtype=np.int64)
    word_counts = np.zeros(0 if word_oracle is None else word_oracle.flat_size(), dtype=np.int64)
    word_reporters = np.zeros(0 if word_oracle is None else request.sketch_rows, dtype=np.int64)
    for first, stop in user_blocks(shard.first_user, shard.n_users):  # users' private draws: one pass per block and report
        held, placed = items[first:stop], positions[first:stop]
        block_users = (shard.first_user + first, held.size)
        per_position = fragment_oracle.randomize_aggregate_groups(
            reports[held, placed], placed, fragments.positions,
            randomness.for_range(FRAGMENT_PURPOSE, request.round, *block_users))
        for position, stats in enumerate(per_position):
            cells, reporters = fragment_oracle.to_flat(stats)
            fragment_counts[position] += cells
            fragment_reporters[position] += reporters
        if word_oracle is not None:
            stats = word_oracle.randomize_aggregate(words[held], randomness.for_range(WORD_PURPOSE, request.round, *block_users))
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
    return [(start - first_user, stop - first_user) for start, stop in zip(cuts[:-1], cuts[1:], strict=True)
            if stop > start]


# -- the server -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SFPParameters:
    """A config's SFP settings, checked with errors naming the key."""

    n_users: int
    epsilon: float
    fragment_length: int
    fragment_share: float
    word_pass: bool
    fragment_candidates: int
    words_reported: int
    oracle: str
    sketch_rows: int
    sketch_width: int
    report: str = SIGNIFICANT  # significant | top_k (fedhh.protocols.common.report_mode)

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if self.oracle not in SKETCH_ORACLES:
            raise InputError(f"protocol.fragment_oracle: got {self.oracle!r}; allowed: {list(SKETCH_ORACLES)}")
        sfp_split(self.epsilon, fragment_share=self.fragment_share, word_pass=self.word_pass)
        check_report_mode(self.report)


@dataclass
class Puzzle:
    """What the server found: the kept fragments per position and the reassembled words."""

    kept: list[np.ndarray]  # per position, the kept report keys (fragment x 256 + hash)
    rows: np.ndarray  # candidate words [K, U]
    estimates: np.ndarray  # their count estimates
    thresholds: list[float]  # per position, the estimate a pair needed


class SFPServer(ServerProtocol):
    """One round of fragment and word reports, the puzzle solved once."""

    name = NAME
    request_type = SFPRequest
    response_type = SFPResponse

    def __init__(self, params: SFPParameters, codec: ItemCodec, seed: int) -> None:
        self.params = params
        self.codec = codec
        positions = fragment_positions(codec, params.fragment_length)
        self.pairs = fragment_pairs(codec, params.fragment_length)
        self.split = sfp_split(params.epsilon, fragment_share=params.fragment_share, word_pass=params.word_pass)
        self.positions = positions
        self.seeds = {purpose: int(derive_key(seed, purpose)) & _POSITIVE_63
                      for purpose in (POSITION_PURPOSE, ORACLE_PURPOSE, HASH_PURPOSE)}
        self._request = SFPRequest(
            round=1,
            fragment_length=params.fragment_length,
            oracle=params.oracle,
            fragment_epsilon=self.split.parts[0][1],
            word_epsilon=self.split.parts[1][1] if len(self.split.parts) > 1 else 0.0,
            sketch_rows=params.sketch_rows,
            sketch_width=params.sketch_width,
            position_seed=self.seeds[POSITION_PURPOSE],
            oracle_seed=self.seeds[ORACLE_PURPOSE],
            hash_seed=self.seeds[HASH_PURPOSE],
        )
        if self._request.fragment_oracle(codec).flat_size() is None:  # also refuses a sketch that cannot be built
            raise InputError(
                f"protocol.fragment_sketch_width: {params.sketch_rows} rows x {params.sketch_width} columns are too "
                "many cells for a shard to send; use fewer rows or a narrower sketch"
            )
        self.fragments = self._request.fragment_codec(codec)
        self._puzzle: Puzzle | None = None
        self._trace: list[RoundRecord] = []

    @property
    def max_rounds(self) -> int:
        return 1

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    def next_request(self) -> SFPRequest | None:
        return None if self._trace else self._request

    def absorb(self, response: Response) -> None:
        if not isinstance(response, SFPResponse):
            raise TypeError(f"sfp expects an SFPResponse, got {type(response).__name__}")
        if self._trace or response.round != 1:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        self._puzzle = self.solve(response)
        self._trace.append(RoundRecord(1, {
            "users": int(response.responding_users),
            "fragments_kept": [int(kept.size) for kept in self._puzzle.kept],
            "candidates": int(self._puzzle.rows.shape[0]),
            "reported": int(self._reported().size),
        }))

    def _reported(self) -> np.ndarray:
        """Indices of the reported candidate words, best estimate first: at most
        ``words_reported``, only positive estimates unless ``report = top_k``."""
        puzzle = self._puzzle
        assert puzzle is not None
        order = np.argsort(-puzzle.estimates, kind="stable")
        if self.params.report == SIGNIFICANT:
            order = order[puzzle.estimates[order] > 0]
        return order[: self.params.words_reported]

    def solve(self, response: SFPResponse) -> Puzzle:
        """Fragments above the noise level, the puzzle, and the words' estimates (module docstring)."""
        oracle = self._request.fragment_oracle(self.codec)
        z = NormalDist().inv_cdf(1 - 1 / self.pairs)
        kept: list[np.ndarray] = []
        kept_estimates: list[np.ndarray] = []
        thresholds: list[float] = []
        statistics = [oracle.from_flat(counts, reporters)
                      for counts, reporters in zip(response.fragment_counts, response.fragment_reporters, strict=True)]
        every_position = oracle.domain_estimates(statistics)  # every pair of every position, hashed once
        every_position *= self.positions  # the position's share is 1/P
        deviations = np.empty(self.pairs)
        for estimates in every_position:
            np.subtract(estimates, median(estimates, deviations), out=deviations)
            np.abs(deviations, out=deviations)
            threshold = z * 1.4826 * float(median(deviations, deviations))
            order = best_first(estimates, self.params.fragment_candidates)
            if self.params.report == SIGNIFICANT:
                order = order[estimates[order] > threshold]
            kept.append(order.astype(np.int64))
            kept_estimates.append(estimates[order])
            thresholds.append(threshold)
        rows, fragment_means = self._assemble(kept, kept_estimates)
        if rows.shape[0] and self._request.word_epsilon > 0:
            word_oracle = self._request.word_oracle()
            statistics = word_oracle.from_flat(response.word_counts, response.word_reporters)
            estimates = word_oracle.estimate(statistics, self.fragments.word_keys(rows))
        else:
            estimates = fragment_means
        return Puzzle(kept, rows, estimates, thresholds)

    def _assemble(self, kept: list[np.ndarray], estimates: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Every word one kept fragment per position spells with one hash, whose own hash is that
        hash and which encodes some item; and the mean of its fragments' estimates."""
        words: list[np.ndarray] = []
        means: list[np.ndarray] = []
        common = set.intersection(*(set((keys % HASH_VALUES).tolist()) for keys in kept)) if kept else set()
        for hash_value in sorted(common):
            pieces = [(keys[keys % HASH_VALUES == hash_value], scores[keys % HASH_VALUES == hash_value])
                      for keys, scores in zip(kept, estimates, strict=True)]
            while math.prod(keys.size for keys, _ in pieces) > MAX_PUZZLE:  # drop the weakest of the longest list
                longest = max(range(len(pieces)), key=lambda i: pieces[i][0].size)
                keys, scores = pieces[longest]
                strongest = np.argsort(-scores, kind="stable")[:-1]
                pieces[longest] = (keys[strongest], scores[strongest])
            grids = np.meshgrid(*[np.arange(keys.size) for keys, _ in pieces], indexing="ij")
            choice = [grid.ravel() for grid in grids]
            fragments = np.stack([keys[pick] // HASH_VALUES for (keys, _), pick in zip(pieces, choice, strict=True)], axis=1)
            scores = np.mean([s[pick] for (_, s), pick in zip(pieces, choice, strict=True)], axis=0)
            rows = self.fragments.unfragment(fragments.astype(np.int64))
            valid = self.fragments.encoding.reportable(rows)
            valid &= self.fragments.word_hashes(self.fragments.word_keys(rows)) == hash_value
            words.append(rows[valid])
            means.append(np.atleast_1d(scores)[valid])
        if not words:
            return np.zeros((0, self.codec.max_symbols), dtype=np.int64), np.zeros(0)
        return np.concatenate(words), np.concatenate(means)

    def privacy_report(self) -> PrivacyReport:
        p = self.params
        return ldp_report(self.split, p.oracle, {
            "positions": self.positions, "fragment_length": p.fragment_length, "hash_bits": 8,
            "sketch_rows": p.sketch_rows, "sketch_width": p.sketch_width,
            "position": "sent in the clear: drawn by public randomness, independent of the user's value",
        })

    def result(self) -> ProtocolResult:
        discoveries: list[Discovery] = []
        if self._puzzle is not None:
            puzzle = self._puzzle
            for index in self._reported().tolist():
                row = puzzle.rows[index]
                discoveries.append(Discovery(self.fragments.encoding.decode(row), tuple(int(s) for s in row),
                                             estimated_count=float(puzzle.estimates[index])))
        p = self.params
        return ProtocolResult(
            protocol=NAME,
            discoveries=discoveries,
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.privacy_report(),
            params={
                "fragment_length": p.fragment_length, "positions": self.positions, "fragment_share": p.fragment_share,
                "word_pass": p.word_pass,
                "fragment_candidates": p.fragment_candidates, "words_reported": p.words_reported, "report": p.report,
                "oracle": p.oracle, "sketch_rows": p.sketch_rows, "sketch_width": p.sketch_width,
                "fragment_thresholds": [round(t, 1) for t in self._puzzle.thresholds] if self._puzzle else None,
            },
            stopped_because="one round of fragment and word reports decoded" if self._trace else "not finished",
        )


# -- what an untrusting server checks ---------------------------------------------------------------


def check_reply(request: SFPRequest, response: SFPResponse, node: HeldUsers, server: ServerProtocol) -> None:
    """A node reports exactly its users: per position as public randomness placed them, and once each in full."""
    tag = type(response).__name__
    check_all_users_report(response, node)
    assert isinstance(server, SFPServer)
    oracle = request.fragment_oracle(server.codec)
    if response.fragment_counts.shape != (server.positions, oracle.flat_size()):
        raise InvalidReply(f"{tag}.fragment_counts: shape {response.fragment_counts.shape}, expected "
                           f"({server.positions}, {oracle.flat_size()})")
    ids = np.arange(node.first_user, node.first_user + node.users)
    placed = np.bincount(user_positions(request.position_seed, server.positions, ids), minlength=server.positions)
    if not np.array_equal(response.fragment_reporters.sum(axis=1), placed):
        raise InvalidReply(f"{tag}.fragment_reporters: reports per position differ from the node's users per position")
    words = int(response.word_reporters.sum())
    if words != (node.users if request.word_epsilon > 0 else 0):
        raise InvalidReply(f"{tag}.word_reporters: {words} word reports from {node.users} users")


def reply_budget(request: SFPRequest, node: HeldUsers, server: ServerProtocol) -> int:
    assert isinstance(server, SFPServer)
    cells = server.positions * (request.fragment_oracle(server.codec).flat_size() + request.sketch_rows)
    if request.word_epsilon > 0:
        cells += request.word_oracle().flat_size() + request.sketch_rows
    return 8 * cells + 2048


def describe_round(record: RoundRecord) -> str:
    values = record.values
    return (f"fragments of {values['users']:,} users: {values['fragments_kept']} kept per position, "
            f"{values['candidates']} words reassembled, {values['reported']} reported")


def build_sfp(
    privacy: Mapping[str, Any], protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> SFPServer:
    params = SFPParameters(
        n_users=n_users,
        epsilon=float(privacy["epsilon"]),
        fragment_length=int(protocol["fragment_length"]),
        fragment_share=float(protocol["fragment_share"]),
        word_pass=bool(protocol["word_pass"]),
        fragment_candidates=int(protocol["fragment_candidates"]),
        words_reported=int(protocol["words_reported"]),
        oracle=str(protocol["fragment_oracle"]),
        sketch_rows=int(protocol["fragment_sketch_rows"]),
        sketch_width=int(protocol["fragment_sketch_width"]),
        report=str(protocol["report"]),
    )
    return SFPServer(params, codec, seed)


SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="Apple's Sequence Fragment Puzzle: hashed fragments through a sketch, reassembled, then a full-word sketch",
        build=build_sfp,
        respond=respond,  # type: ignore[arg-type]
        request_type=SFPRequest,
        response_type=SFPResponse,
        dropout_privacy=(
            "unchanged: both reports are ε-LDP on the device that sends them; a node that does not answer "
            "only removes its users' reports"
        ),
        keys=SFP_KEYS,
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        budget=sfp_budget(),
        planner="fedhh.planning.sfp:plan_sfp",
        plan_command="fedhh.planning.sfp:SFP_PLAN",
        communication="fedhh.protocols.communication:sfp_bits",
    )
)
