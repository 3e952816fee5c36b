"""The aggregate-DP prefix tree's own ``[protocol]`` keys, and the per-level quantities they fix."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ...errors import InputError
from ...privacy.central import GAUSSIAN, NOISES
from ...schema import ConfigSection, Key

RANDOM, WEIGHTED, MOST_FREQUENT, SEVERAL = "random", "weighted", "most_frequent", "several"
SELECTIONS = (RANDOM, WEIGHTED, MOST_FREQUENT, SEVERAL)
EXTENDING, ALL = "extending", "all"
CHOOSE_FROM = (EXTENDING, ALL)
MAX_EXTENSION = 4
MAX_LEVEL_CANDIDATES = 1 << 24  # entries of one level's count vector (and of its noise)


@dataclass(frozen=True)
class AggregateTrieKeys(ConfigSection):
    """``protocol.name = "aggregate-trie"``'s own keys."""

    level_noise: Literal["laplace", "gaussian"] = Key(
        str,
        GAUSSIAN,
        "aggregate-trie: noise the server adds once to every candidate's summed count",
        NOISES,
    ).field()
    users_per_level: int = Key(
        int,
        0,
        "aggregate-trie: users sampled per level on average (Poisson sampling at rate m/n); 0: every user",
        check=lambda v: v >= 0,
        constraint=">= 0",
    ).field()
    extension: int = Key(
        int,
        2,
        "aggregate-trie: symbols a level adds to the kept prefixes (adaptive: the fewest)",
        check=lambda v: 1 <= v <= MAX_EXTENSION,
        constraint=f"in 1..{MAX_EXTENSION}",
    ).field()
    max_prefixes: int = Key(
        int,
        64,
        "aggregate-trie: prefixes kept per level to extend, and complete items kept per level, at most "
        "each (the largest noisy counts above the threshold)",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    data_selection: Literal["random", "weighted", "most_frequent", "several"] = Key(
        str,
        WEIGHTED,
        "aggregate-trie: which of its data a sampled user counts (among its items that extend the tree): random: "
        "one distinct item uniformly; weighted: one item by its share of the user's data; most_frequent: its "
        "most frequent; several: its protocol.contributions candidates holding most of its data",
        SELECTIONS,
    ).field()
    choose_from: Literal["extending", "all"] = Key(
        str,
        ALL,
        "aggregate-trie: the items data_selection chooses among: all: all the user's items, a choice "
        "off the tree counting nothing (TrieHH's way: a count estimates the item's share of the users' data, "
        "whatever its level); extending: those that extend a kept prefix (no contribution wasted, but a deep "
        "item's count is inflated by its holders' other items having left the tree)",
        CHOOSE_FROM,
    ).field()
    contributions: int = Key(
        int,
        1,
        'aggregate-trie: candidates a user adds 1 to per level (data_selection = "several"; else 1)',
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    count_threshold: float = Key(
        float,
        0.0,
        "aggregate-trie: noisy count a prefix must exceed to be kept; 0: the noise's 1/D upper "
        "quantile for D candidates (about one candidate nobody holds passes per level)",
        check=lambda v: v >= 0 and math.isfinite(v),
        constraint="a finite number >= 0",
    ).field()
    adaptive: bool = Key(
        bool,
        False,
        "aggregate-trie: choose each level's extension from the prefixes kept by the last "
        "(the longest whose count vector fits protocol.max_vector)",
    ).field()
    max_vector: int = Key(
        int,
        65536,
        "aggregate-trie: entries of a level's count vector at most (what a user sends under "
        "secure aggregation); the kept prefixes are capped to fit",
        check=lambda v: 1 <= v <= MAX_LEVEL_CANDIDATES,
        constraint=f"in 1..{MAX_LEVEL_CANDIDATES}",
    ).field()

    def check(self) -> None:
        """Refuse key combinations no run can use."""
        if self.contributions > 1 and self.data_selection != SEVERAL:
            raise InputError(
                f'protocol.contributions: {self.contributions} contributions need data_selection = "several" '
                f"(got {self.data_selection!r}, which counts one item per user)"
            )


def levels_for(max_rounds: int, extension: int) -> int:
    """The most levels a tree of depth ``max_rounds`` takes with extensions of at least ``extension`` symbols."""
    return -(-max_rounds // extension)


def sampling_rate(users_per_level: int, n_users: int) -> float:
    """Each user's chance to be sampled in a level: ``m / n`` (1 for ``m = 0``: every user)."""
    if users_per_level > n_users:
        raise InputError(
            f"protocol.users_per_level: {users_per_level:,} users per level, but the population has "
            f"{n_users:,}; use at most n, or 0 for every user"
        )
    return 1.0 if users_per_level == 0 else users_per_level / n_users
