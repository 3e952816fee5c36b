"""The chance that a prefix search (PEM, TreeHist) finds one item held by a share ``f`` of the users.

The question ``fedhh size`` and ``fedhh plan treehist`` answer, in the
setting of TrieHH's Proposition 1: the item shares no prefix with any other
value and no other value competes with it; every other user holds nothing
(in the protocol: reports the empty value, the all-zero string, which is one
heavy branch of the prefix tree).  Other heavy values would take some of the
places a level keeps; populations with those are sized by simulation
(``fedhh size ... --population``).

Level by level, the item's prefix has a Gaussian estimate (the oracle's own
variance on this population, plus the random split of holders into levels)
and competes with the other candidates of the level -- the empty value's
prefix and the zero-frequency extensions -- under the level's selection rule
(top-k, or a threshold with at most ``candidates_per_step`` survivors), by
the order-statistics model of :mod:`fedhh.protocols.prefix_search.selection_model`.  The
threshold at the noise level is the server's own rule, computed on the
expected number of candidates.  TreeHist's final pass ranks the survivors
by the full-value estimates of all ``n`` users (with the other half of the
budget) and reports the ``top_k`` best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...data.items import ItemCodec, get_alphabet
from ...errors import InputError
from ...oracles import Histogram
from ..common.prefix_encoding import ValueSpace
from .family import prefix_variant
from .oracles import build_level_oracle
from .search import THRESHOLD, SearchParameters
from .selection_model import LevelCandidates, noise_threshold, survival

_ITEM, _REST, _ABSENT = 1, 2, 3  # oracle keys standing for the item, the empty value and a value nobody holds


BIT_ALPHABETS: tuple[tuple[str, int], ...] = (("bytes", 8), ("lowercase", 5), ("ascii", 7))  # and bits a character


def bits_codec(bits: int) -> ItemCodec:
    """A codec whose bit strings are exactly ``bits`` long: bytes, lowercase letters or ASCII characters."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
        raise InputError(f"--bits: must be an integer >= 1, got {bits!r}")
    for alphabet, width in BIT_ALPHABETS:
        if bits % width == 0:
            return ItemCodec(get_alphabet(alphabet), 1, bits // width)
    raise InputError(
        f"--bits: {bits} bits is not a whole number of characters; use a multiple of 8 (bytes), "
        "5 (lowercase letters) or 7 (ASCII characters)"
    )


@dataclass(frozen=True)
class ItemDiscovery:
    """Per level (and TreeHist's final pass): what the item faced and its chance to get through."""

    frequency: float
    probability: float  # of being reported at the end
    steps: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"frequency": self.frequency, "probability": self.probability, "steps": self.steps}


def _estimates(
    params: SearchParameters, epsilon: float, domain: int, holders: float, rest: float, share: float, seed: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """(means, sds) of the item's and the empty value's estimates at a level whose reporters
    are the ``share`` of the users, and the sd of an absent value's, in the level's counts."""
    oracle = build_level_oracle(params.oracle, epsilon, max(domain, 4), seed, params.sketch_rows, params.sketch_width)
    means = np.array([holders, rest]) * share
    truth = Histogram(np.array([_ITEM, _REST], dtype=np.uint64), np.rint(means).astype(np.int64))
    variance = oracle.variance(np.array([_ITEM, _REST, _ABSENT], dtype=np.uint64), truth)
    split = np.array([holders, rest]) * share * (1 - share)  # holders fall into the level at random
    return means, np.sqrt(variance[:2] + split), math.sqrt(variance[2])


def item_discovery(
    params: SearchParameters, space: ValueSpace, frequency: float, oracle_seed: int = 0
) -> ItemDiscovery:
    """The probability that a run of ``params`` over values of ``space`` reports an item of
    population share ``frequency`` (see the module docstring for the setting)."""
    if not 0 < frequency <= 1:
        raise ValueError(f"frequency: must be in (0, 1], got {frequency!r}")
    n = params.n_users
    holders, rest = frequency * n, (1 - frequency) * n
    split = prefix_variant(params.protocol).budget.split(params.protocol, params.epsilon)
    final_pass = prefix_variant(params.protocol).final_pass
    lengths = params.lengths(space.length)
    candidates = float(space.segment_count(int(lengths[0])))
    presence = 1.0
    steps = []
    for level, length in enumerate(lengths.tolist()):
        share = float(params.shares[level])
        means, sds, zero_sd = _estimates(
            params, split.parts[0][1], space.domain(length), holders, rest, share, oracle_seed
        )
        last = level == params.levels - 1
        kept = params.top_k if last and not final_pass else params.candidates_per_step
        threshold = None
        if params.selection == THRESHOLD:
            threshold = params.threshold * n * share if params.threshold > 0 else noise_threshold(zero_sd, candidates)
        zeros = max(candidates - presence - 1.0, 0.0)
        level_candidates = LevelCandidates(means, sds, np.ones(2), np.array([presence, 1.0]), zeros, zero_sd)
        survived, zero_survival = survival(level_candidates, kept, threshold)
        expected_survivors = presence * survived[0] + survived[1] + zeros * zero_survival
        steps.append(
            {
                "level": level + 1,
                "prefix_length": length,
                "reporters": share * n,
                "candidates": candidates,
                "threshold": None if threshold is None else threshold / share,  # in population counts, as the server
                "survival": float(survived[0]),
            }
        )
        presence *= float(survived[0])
        if not last:
            survivors = min(kept, candidates) if threshold is None else min(kept, expected_survivors)
            candidates = survivors * space.segment_count(int(lengths[level + 1] - length))
        elif final_pass:
            means, sds, zero_sd = _estimates(
                params, split.parts[1][1], space.domain(space.length), holders, rest, 1.0, oracle_seed
            )
            zeros = max(min(kept, expected_survivors) - presence - 1.0, 0.0)
            final = LevelCandidates(means, sds, np.ones(2), np.array([presence, 1.0]), zeros, zero_sd)
            reported, _ = survival(final, params.top_k)
            steps.append(
                {
                    "level": "final",
                    "prefix_length": space.length,
                    "reporters": float(n),
                    "candidates": min(kept, expected_survivors),
                    "threshold": None,
                    "survival": float(reported[0]),
                }
            )
            presence *= float(reported[0])
    return ItemDiscovery(frequency, presence, steps)
