"""TAPS's server: every party's prefix tree grown level by level, pruned by the parties' consensus.

Parties hold contiguous ranges of global user ids (party ``p``: the ids
``[⌊p n / P⌋, ⌊(p + 1) n / P⌋)``, the layout of ``population.languages``).
Within each party the users are split into ``levels`` equal groups by public
randomness, as PEM splits its users; the level-``j`` group of every party
reports, once, the prefix of its item of the level's length through an
ε-LDP frequency oracle, which the server queries on that party's own
candidates (its tree's kept prefixes, extended).

**Consensus pruning.**  Party ``p``'s estimate ``f̂_p(c)`` of a candidate's
count among its users is the oracle's estimate scaled from the level's
reporters to the party, with variance ``Var f̂_p`` (the oracle's, scaled).
Under ``protocol.consensus = "taps"`` two kinds of prior knowledge sharpen
it before the parties prune, both free under LDP (post-processing of
reports already sent, from other users):

* *the party's earlier level*: a candidate that extends, by zeros, a parent
  holding a whole "no character" code counts exactly the parent's users
  (every item under the parent continues with zeros), so its estimate
  becomes the inverse-variance mean of its own and the parent's (itself
  pooled so), and its variance shrinks to match.  Short words, most of a
  head, are then estimated from every level since they ended rather than
  from one;
* *the other parties*: with ``z_q(c) = f̂_q(c) / √Var f̂_q(c)`` for every
  party ``q`` whose tree queried ``c`` at this level, party ``p``'s score
  of ``c`` is its own ``z_p(c)``, raised, where ``z_p(c) ≥ z``
  (``protocol.consensus_z``), to the largest Stouffer combination
  ``(z_p + Σ z_q) / √(1 + m)`` over ``p`` and the ``m`` best z-scores of
  the other parties (``m`` from 0 to ``P - 1``).  A prefix several parties
  hold gains the evidence of those where it is frequent and ignores those
  where it is rare (they would only add noise); a prefix only ``p``
  queried, or one ``p`` has no evidence of its own for, keeps ``p``'s own
  z-score, so a party never spends its places on another party's head.

Each party keeps its ``kept_per_level`` candidates of best score.  With
``protocol.consensus = "none"`` each party keeps its own best estimates of
its level alone: independent per-party trees, the baseline.  ``"prior"``
and ``"parties"`` apply one half of the rule each (the earlier level only:
independent trees that remember; the other parties only), so that a study
can tell the halves' shares apart.

**Adaptive extension.**  Every party's level ``j`` has the same length (so
the parties' estimates of a prefix can be summed).  The first level covers
the longest prefix whose every value fits ``candidate_cap`` candidates; each
later level extends by the longest step for which the largest kept set times
the step's segments still fits the cap, but at least an equal share of the
units left over the levels left, and never so far that a later level would
have nothing to add: parties that keep fewer prefixes grow faster.

**Output.**  The union of the parties' kept whole values, ranked by the sum
of the estimates (pooled as above) of every party whose last level queried
the value (under ``"none"`` and ``"prior"``: of the parties that kept it,
each party's own output merged), the ``top_k`` best that can be items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...errors import InputError
from ...oracles import FrequencyOracle, Support
from ...privacy.ldp import BudgetRule, BudgetSplit, ldp_report
from ...privacy.report import PrivacyReport
from ...privacy.validation import check_users
from ...schema import ConfigSection, Key, PrivacySection
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..common.keys import TOP_K_KEY
from ..common.prefix_encoding import PrefixEncoding
from ..prefix_search.oracles import level_oracle
from ..prefix_search.search import public_seed
from ..spec import Section
from .messages import PartyLevelRequest, PartySupport

NAME = "taps"
ORACLES = ("olh", "blh", "grr")
CONSENSUS, INDEPENDENT = "taps", "none"
PRIOR_ONLY, PARTIES_ONLY = "prior", "parties"  # each half of the consensus alone, to measure its share
WITH_PRIOR = (CONSENSUS, PRIOR_ONLY)  # rules that pool a party's earlier level
WITH_PARTIES = (CONSENSUS, PARTIES_ONLY)  # rules that combine the parties' evidence
PARTITION_PURPOSE = "taps.partition"
ORACLE_PURPOSE = "taps.oracle"
PARTY_TOP = 10  # items listed per party in the result's parameters

BUDGET = BudgetRule(
    (("prefix of the user's level in its party", 1.0),),
    "Zhang, Ye and Hu, Federated Heavy Hitter Analytics with Local Differential Privacy (TAPS): "
    "each party's users are split into levels, one report per user",
)


@dataclass(frozen=True)
class TapsKeys(ConfigSection):
    """TAPS's own ``[protocol]`` keys."""

    parties: int = Key(
        int,
        4,
        "TAPS: parties P; party p holds users [⌊p n/P⌋, ⌊(p+1) n/P⌋) (population.languages lays its languages out so)",
        check=lambda v: 2 <= v <= 64,
        constraint="in 2..64",
    ).field()
    consensus: str = Key(
        str,
        CONSENSUS,
        "TAPS: pruning by each party's estimates pooled with its earlier level's and the other parties' (taps), "
        "by each party's own level alone (none: independent per-party trees, merged), or by one half of taps: "
        "the earlier level only (prior) or the other parties only (parties)",
        (CONSENSUS, INDEPENDENT, PRIOR_ONLY, PARTIES_ONLY),
    ).field()
    consensus_z: float = Key(
        float,
        1.0,
        "TAPS: the z-score a party's own estimate of a prefix needs before the other parties' estimates count for it",
        check=lambda v: 0 <= v < 100,
        constraint="in [0, 100)",
    ).field()
    tree_encoding: str = Key(
        str,
        "bits",
        "TAPS: values as bit strings (character codes) or as the codec's symbols",
        ("bits", "symbols"),
    ).field()
    tree_oracle: str = Key(str, "olh", "TAPS: the ε-LDP frequency oracle of every report", ORACLES).field()
    levels: int = Key(
        int,
        0,
        "TAPS: levels (user groups) within every party; 0: the fewest that reach whole values within candidate_cap",
        check=lambda v: v >= 0,
        constraint=">= 0 (0: automatic)",
    ).field()
    candidate_cap: int = Key(
        int,
        1024,
        "TAPS: most candidates a party's level queries",
        check=lambda v: 2 <= v <= 1 << 20,
        constraint="in 2..2^20",
    ).field()
    kept_per_level: int = Key(
        int, 32, "TAPS: prefixes each party keeps per level", check=lambda v: v >= 1, constraint=">= 1"
    ).field()
    top_k: int = TOP_K_KEY.field()


@dataclass
class PartyLevel:
    """One party's candidates at a level and what the server made of them."""

    rows: np.ndarray  # candidate prefixes, one row of units each
    estimates: np.ndarray  # the party's estimated counts among its users (with its earlier level's, under taps)
    variances: np.ndarray  # their variance (the oracle's noise, scaled to the party; pooled likewise)
    kept: np.ndarray  # indices of the kept candidates, best first


class TapsServer(ServerProtocol):
    """The parties' trees, one level of all of them per round (see the module docstring)."""

    def __init__(self, keys: TapsKeys, split: BudgetSplit, n_users: int, codec: ItemCodec, seed: int) -> None:
        self.keys = keys
        self.split = split
        self.epsilon = split.parts[0][1]
        self.n_users = check_users(n_users)
        self.codec = codec
        self.seed = seed
        self.encoding = PrefixEncoding(keys.tree_encoding, codec)  # type: ignore[arg-type]
        parties = keys.parties
        self.party_bounds = (np.arange(parties + 1, dtype=np.int64) * n_users) // parties
        self.party_users = np.diff(self.party_bounds)
        space = self.encoding.space
        self.first_length = _longest_step(space, 1, keys.candidate_cap, self.encoding.length)
        widest = _longest_step(space, keys.kept_per_level, keys.candidate_cap, self.encoding.length)
        fewest = 1 + math.ceil((self.encoding.length - self.first_length) / widest)
        if keys.levels and keys.levels < fewest:
            raise InputError(
                f"protocol.levels: {keys.levels} levels cannot reach whole values ({self.encoding.length} "
                f"{self.encoding.unit_name}) with at most protocol.candidate_cap = {keys.candidate_cap} candidates "
                f"a level; need >= {fewest} (or 0: automatic)"
            )
        self.levels = keys.levels or fewest
        if self.levels > self.encoding.length:
            raise InputError(f"protocol.levels: at most {self.encoding.length} (one unit a level), got {self.levels}")
        if int(self.party_users.min()) < self.levels:
            raise InputError(
                f"population.users: {n_users} users make parties of {int(self.party_users.min())}, fewer than the "
                f"{self.levels} levels each party's users are split into"
            )
        self.partition_seed = public_seed(seed, PARTITION_PURPOSE)
        self.oracle_seed = public_seed(seed, ORACLE_PURPOSE)
        self.length = self.first_length
        root = self.encoding.extend(np.zeros((1, 0), dtype=np.int64), self.first_length)
        self._candidates: list[np.ndarray] = [root] * parties
        self._levels: list[list[PartyLevel]] = []
        self._lengths: list[int] = []
        self._trace: list[RoundRecord] = []
        self._pending: PartyLevelRequest | None = None
        self._stopped_because: str | None = None
        self.oracle(self.first_length)  # refuse an oracle that cannot serve the tree now

    def oracle(self, length: int) -> FrequencyOracle:
        """The oracle of ``length``-unit prefixes (public parameters only)."""
        try:
            domain = self.encoding.domain(length)
            return level_oracle(self.keys.tree_oracle, self.epsilon, domain, self.oracle_seed, 0, 0)
        except ValueError as error:
            raise InputError(
                f"protocol.tree_oracle: {self.keys.tree_oracle!r} cannot serve prefixes of {length} "
                f"{self.encoding.unit_name}: {error}"
            ) from None

    # -- ServerProtocol -------------------------------------------------------------------

    @property
    def max_rounds(self) -> int:
        return self.levels

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    def privacy_report(self) -> PrivacyReport:
        return ldp_report(self.split, self.keys.tree_oracle, self.describe())

    def progress_note(self) -> str:
        return f"level {len(self._levels)}/{self.levels}"

    def next_request(self) -> PartyLevelRequest | None:
        if self._stopped_because is not None:
            return None
        if self._pending is None:
            keys = [self.encoding.keys(rows).astype(np.uint64) for rows in self._candidates]
            self._pending = PartyLevelRequest(
                round=len(self._levels) + 1,
                level=len(self._levels),
                levels=self.levels,
                encoding=self.keys.tree_encoding,
                length=self.length,
                parties=self.keys.parties,
                party_bounds=self.party_bounds,
                partition_seed=self.partition_seed,
                oracle=self.keys.tree_oracle,
                epsilon=self.epsilon,
                oracle_seed=self.oracle_seed,
                candidates=np.concatenate(keys),
                candidate_bounds=np.concatenate(([0], np.cumsum([k.size for k in keys]))).astype(np.int64),
            )
        return self._pending

    def absorb(self, response: Response) -> None:
        if not isinstance(response, PartySupport):
            raise TypeError(f"taps expects a PartySupport, got {type(response).__name__}")
        pending = self._pending
        if pending is None or response.round != pending.round:
            raise ValueError(f"response for round {response.round}, but no request is pending for it")
        if response.counts.size != pending.candidates.size or response.reporters.size != self.keys.parties:
            raise ValueError("taps: the response's counts do not match the request's candidates and parties")
        self._pending = None
        level = len(self._levels)
        last = level == self.levels - 1
        parties = self._estimate(pending, response)
        limit = self.keys.top_k if last else self.keys.kept_per_level
        self._select(parties, pending.candidates, pending.candidate_bounds, limit, last)
        self._levels.append(parties)
        self._lengths.append(self.length)
        self._trace.append(
            RoundRecord(
                level + 1,
                {
                    "level": level + 1,
                    "prefix_length": self.length,
                    "candidates": [int(p.rows.shape[0]) for p in parties],
                    "kept": [int(p.kept.size) for p in parties],
                },
                server_view={"reporters": response.reporters.tolist()},
            )
        )
        if last:
            self._stopped_because = f"all {self.levels} levels done"
            return
        if all(p.kept.size == 0 for p in parties):
            self._stopped_because = f"no prefix survived level {level + 1} in any party"
            return
        step = self._next_step(max(int(p.kept.size) for p in parties), self.levels - level - 1)
        self._candidates = [self.encoding.extend(p.rows[p.kept], step) for p in parties]
        self.length += step

    def _estimate(self, request: PartyLevelRequest, response: PartySupport) -> list[PartyLevel]:
        """Each party's estimated counts of its candidates among its users, and their variance."""
        oracle = self.oracle(request.length)
        levels = []
        for party, rows in enumerate(self._candidates):
            start, stop = int(request.candidate_bounds[party]), int(request.candidate_bounds[party + 1])
            reporters = int(response.reporters[party])
            if reporters == 0:
                zeros = np.zeros(stop - start)
                levels.append(PartyLevel(rows, zeros, np.full(stop - start, np.inf), np.zeros(0, dtype=np.int64)))
                continue
            scale = float(self.party_users[party]) / reporters
            estimates = oracle.estimate_support(Support(response.counts[start:stop], reporters)) * scale
            variance = oracle.linear_variance(reporters).zero_count * scale**2
            variances = np.full(stop - start, variance)
            if self.keys.consensus in WITH_PRIOR and self._levels:
                estimates, variances = self._with_prior(self._levels[-1][party], rows, estimates, variances)
            levels.append(PartyLevel(rows, estimates, variances, np.zeros(0, dtype=np.int64)))
        return levels

    def _with_prior(
        self, parent: PartyLevel, rows: np.ndarray, estimates: np.ndarray, variances: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """A party's estimates with its previous level's as a prior where they count the same users: a
        candidate that extends an ended parent (one holding a "no character" code) by zeros has the
        parent's count, so its estimate becomes the inverse-variance mean of the two (its variance
        shrinks accordingly); the other candidates keep their own level's estimate."""
        before = self._lengths[-1]
        parents = parent.rows[parent.kept]
        parent_keys = self.encoding.keys(parents)
        order = np.argsort(parent_keys, kind="stable")
        of = order[np.searchsorted(parent_keys[order], self.encoding.keys(rows[:, :before]))]
        same = _ended(self.encoding, parents)[of] & ~np.any(rows[:, before:] != 0, axis=1)
        prior = parent.estimates[parent.kept][of]
        prior_precision = np.where(same, 1.0 / parent.variances[parent.kept][of], 0.0)  # 0: no prior (or no reporters)
        precision = 1.0 / variances + prior_precision
        return (estimates / variances + prior * prior_precision) / precision, 1.0 / precision

    def _select(self, parties: list[PartyLevel], keys: np.ndarray, bounds: np.ndarray, limit: int, last: bool) -> None:
        """Set each party's kept candidates: its ``limit`` best by its consensus score (see the module
        docstring), or independently by its own estimate."""
        reportable = self.encoding.reportable if last else None
        scores = (
            _consensus_scores(parties, keys, bounds, self.keys.consensus_z)
            if self.keys.consensus in WITH_PARTIES
            else [level.estimates for level in parties]
        )
        for level, score in zip(parties, scores, strict=True):
            allowed = reportable(level.rows) if reportable else np.ones(level.rows.shape[0], dtype=bool)
            level.kept = _best(score, allowed, limit)

    def _next_step(self, kept: int, levels_left: int) -> int:
        """Units the next level adds (see the module docstring's adaptive extension)."""
        return extension_step(self.encoding, self.keys.candidate_cap, self.length, kept, levels_left)

    # -- result ---------------------------------------------------------------------------

    def _merged(self) -> tuple[np.ndarray, np.ndarray]:
        """The union of the parties' kept whole values, best first by their summed estimates: where
        the parties' evidence is combined, of every party whose last level queried the value;
        otherwise, of the parties that kept it (each party's own output, merged)."""
        if self._stopped_because is None or len(self._levels) < self.levels:
            return np.zeros((0, self.encoding.length), dtype=np.int64), np.zeros(0)
        parties = self._levels[-1]
        if self.keys.consensus not in WITH_PARTIES:
            parties = [
                PartyLevel(p.rows[p.kept], p.estimates[p.kept], p.variances[p.kept], np.arange(p.kept.size))
                for p in parties
            ]
        keys = np.concatenate([self.encoding.keys(p.rows) for p in parties]).astype(np.uint64)
        summed, inverse = _summed(parties, keys)
        rows = np.concatenate([p.rows for p in parties])
        kept = np.concatenate([int(sum(q.rows.shape[0] for q in parties[:i])) + p.kept for i, p in enumerate(parties)])
        distinct, first = np.unique(inverse[kept], return_index=True)
        order = np.lexsort((distinct, -summed[distinct]))[: self.keys.top_k]
        return rows[kept[first[order]]], summed[distinct[order]]

    def discovered(self) -> list[Discovery]:
        rows, scores = self._merged()
        return [
            Discovery(self.encoding.decode(row), tuple(int(u) for u in row), estimated_count=float(score))
            for row, score in zip(rows, scores, strict=True)
        ]

    def describe(self) -> dict[str, Any]:
        return {
            **self.encoding.describe(),
            "parties": self.keys.parties,
            "party_users": self.party_users.tolist(),
            "levels": self.levels,
            "prefix_lengths": list(self._lengths),
            "consensus": self.keys.consensus,
            "consensus_z": self.keys.consensus_z,
            "oracle": self.keys.tree_oracle,
            "candidate_cap": self.keys.candidate_cap,
            "kept_per_level": self.keys.kept_per_level,
            "top_k": self.keys.top_k,
        }

    def party_details(self) -> list[dict[str, Any]]:
        """Per party: its users and its own best whole values at the last level, by its own estimates."""
        details = []
        for party in range(self.keys.parties):
            top: list[dict[str, Any]] = []
            if self._levels and len(self._levels) == self.levels:
                level = self._levels[-1][party]
                best = level.kept[np.lexsort((level.kept, -level.estimates[level.kept]))][:PARTY_TOP]
                top = [
                    {"item": self.encoding.decode(level.rows[i]), "estimate": float(level.estimates[i])} for i in best
                ]
            details.append({"party": party, "users": int(self.party_users[party]), "top": top})
        return details

    def result(self) -> ProtocolResult:
        return ProtocolResult(
            protocol=NAME,
            discoveries=self.discovered(),
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.guarantee(),
            params={**self.describe(), "party_details": self.party_details()},
            stopped_because=self._stopped_because or "not finished",
        )


def _summed(parties: list[PartyLevel], keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum over parties of the estimates of each distinct prefix among ``keys`` (every party's
    candidates, party by party), and each candidate's index among the distinct prefixes."""
    _, inverse = np.unique(keys, return_inverse=True)
    estimates = np.concatenate([p.estimates for p in parties])
    distinct = int(inverse.max()) + 1 if inverse.size else 0
    return np.bincount(inverse, weights=estimates, minlength=distinct), inverse


def _consensus_scores(parties: list[PartyLevel], keys: np.ndarray, bounds: np.ndarray, z: float) -> list[np.ndarray]:
    """Each party's consensus score of each of its candidates (see the module docstring): its own
    z-score ``f̂_p / √Var f̂_p``; where that is at least ``z``, the largest Stouffer combination
    ``(z_p + Σ z_q) / √(1 + m)`` over it and the ``m`` (0 to P - 1) best z-scores of the other parties
    that queried the prefix."""
    _, inverse = np.unique(keys, return_inverse=True)
    distinct = int(inverse.max()) + 1 if inverse.size else 0
    count = len(parties)
    zscores = np.full((distinct, count), -np.inf)
    for party, level in enumerate(parties):
        zscores[inverse[int(bounds[party]) : int(bounds[party + 1])], party] = level.estimates / np.sqrt(
            level.variances
        )
    groups = np.sqrt(np.arange(2, count + 1, dtype=np.float64))
    scores = []
    for party in range(count):
        mine = zscores[inverse[int(bounds[party]) : int(bounds[party + 1])]]
        own = mine[:, party]
        others = -np.sort(-np.delete(mine, party, axis=1), axis=1)  # best first; parties that did not query it last
        combined = np.max((own[:, None] + np.cumsum(others, axis=1)) / groups, axis=1, initial=-np.inf)
        scores.append(np.where(own >= z, np.maximum(own, combined), own))
    return scores


def _ended(encoding: PrefixEncoding, rows: np.ndarray) -> np.ndarray:
    """Which prefixes hold a whole "no character" code: every item they start continues with zeros only."""
    whole = rows[:, : (rows.shape[1] // encoding.char_bits) * encoding.char_bits] if encoding.kind == "bits" else rows
    if whole.shape[1] == 0:
        return np.zeros(rows.shape[0], dtype=bool)
    return np.any(encoding.character_codes(whole) == 0, axis=1)


def _best(scores: np.ndarray, allowed: np.ndarray, count: int) -> np.ndarray:
    """Indices of the ``count`` largest ``scores`` where ``allowed`` holds, best first (ties: lower index)."""
    candidates = np.flatnonzero(allowed)
    return candidates[np.lexsort((candidates, -scores[candidates]))][: max(count, 0)]


def extension_step(encoding: PrefixEncoding, cap: int, length: int, kept: int, levels_left: int) -> int:
    """Units the level after one of ``length`` units adds when the largest party keeps ``kept``
    prefixes and ``levels_left`` levels remain (the module docstring's adaptive extension): the
    longest step whose candidates fit ``cap``, but at least an equal share of the units left over
    the levels left, and never so far that a later level would have nothing to add."""
    left = encoding.length - length
    fits = _longest_step(encoding.space, kept, cap, left)
    return max(min(fits, left - (levels_left - 1)), math.ceil(left / levels_left))


def _longest_step(space: Any, parents: int, cap: int, most: int) -> int:
    """The most units (at least 1, at most ``most``) by which ``parents`` prefixes extend into at most
    ``cap`` candidates."""
    step = 1
    while step < most and parents * space.segment_count(step + 1) <= cap:
        step += 1
    return step


def build_taps(privacy: PrivacySection, protocol: Section, n_users: int, codec: ItemCodec, seed: int) -> TapsServer:
    """The parties' trees from a config: every user's one report takes the whole ε."""
    keys = TapsKeys.of(protocol)
    return TapsServer(keys, BUDGET.split(NAME, privacy.epsilon), n_users, codec, seed)
