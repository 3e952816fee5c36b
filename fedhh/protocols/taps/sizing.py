"""``fedhh size taps``: the smallest population, in parties of equal size, in which some party keeps an
item's prefix at every level.

The setting of the other protocols' sizing: an item of the longest length
held by a share ``f`` of the ``n`` users, sharing no prefix with any other
value, every other user holding nothing; the ``P`` parties hold ``n / P``
users each, and the item's holders are spread evenly over them
(``--spread even``, the default) or all in party 0 (``--spread one``).

**A party's level.**  Party ``p``'s estimate of the item's count ``c_p``
among its users has the noise of a count no one holds, ``sd_p² = n_p V /
s`` (the oracle's per-report variance ``V``, the level's share ``s`` of the
party's users), plus a holder's own ``h c_p``
(:func:`~fedhh.protocols.taps.plan.holder_variance`); its z-score
``f̂_p / sd_p`` is taken as normal, of mean ``c_p / sd_p`` and variance
``1 + h c_p / sd_p²``.  The party keeps its ``kept_per_level`` prefixes
of best consensus score (:mod:`fedhh.protocols.taps.server`): a prefix
whose own z-score reaches ``z`` (``protocol.consensus_z``) is raised by
the other parties' evidence, far above any prefix no one holds when the
others hold it too; below ``z`` its score is its own z-score, which keeps
it only above the ``kept_per_level - 1``-th best of the ``C - 2`` prefixes
no one holds (about ``Φ⁻¹(1 - (kept - 1) / (C - 2))`` for ``C`` candidates;
the empty value takes a place).  So the item stays in party ``p``'s tree
when its own z-score reaches ``g = min(z, that order statistic)``.

**The run.**  A party that drops the item's prefix never queries its
extensions again, and the parties' users are disjoint: party ``p`` keeps
the item to the end with ``S_p = Π_levels P(z-score ≥ g)``, and the item is
reported when some party does, ``1 - Π_p (1 - S_p)`` (the output is the
union of the parties' kept whole values; here nothing else competes for
``top_k``).  The consensus raises the item's rank, not its own evidence: a
party must see it on its own, so where the holders are matters (``one``
needs fewer users than ``even`` for the same share: one party holds them
all).

The chance grows with ``n`` (each z-score's mean grows as ``√n``) and with
ε (``V`` falls); the levels do not depend on either, so the answer is the
smallest ``n`` (to 1%) meeting the target, and more ε never needs more users.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from ...data.counted import CountedShard, UserTypes
from ...data.items import ItemCodec
from ...data.population import SingleItemShard, Vocabulary
from ...errors import InputError
from ...planning.commands import Option, Options
from ...planning.sizing import MAX_USERS, OnStep, SizeAnswer, Sizing, check_share, forbidden, size_by_analysis
from ...privacy.validation import check_epsilon
from ..prefix_search.law import level_probabilities
from .client import level_bounds
from .plan import flags_named, holder_variance, planned_levels, planned_server
from .server import TapsServer

DEFINITION = "the analysis meets the target at n and not at n less 1% (bisection over log n)"
EVEN, ONE = "even", "one"
SPREADS = (EVEN, ONE)


def item_counts(party_users: np.ndarray, holders: int, spread: str = EVEN) -> np.ndarray:
    """``holders`` spread over the parties in proportion to their users (whole users: the remainder one
    to each of the first parties), or all in party 0."""
    users = np.asarray(party_users, dtype=np.int64)
    if spread == ONE:
        return np.concatenate(([holders], np.zeros(users.size - 1, dtype=np.int64)))
    counts = holders * users // int(users.sum())
    counts[: holders - int(counts.sum())] += 1
    return counts


def keep_probabilities(server: TapsServer, frequency: float, spread: str) -> np.ndarray:
    """``[parties, levels]``: each party's chance to keep the item's prefix at each level, given it
    queried it (module docstring)."""
    share = float(level_probabilities(level_bounds(server.levels))[0])
    users = server.party_users.astype(np.float64)
    counts = frequency * users.sum() * (users / users.sum() if spread == EVEN else np.eye(users.size)[0])
    kept = server.keys.kept_per_level
    chances = np.zeros((users.size, server.levels))
    for level, (length, candidates) in enumerate(planned_levels(server)):
        oracle = server.oracle(length)
        noise = np.sqrt(users * oracle.per_user_variance()[0] / share)
        gate = min(server.keys.consensus_z, _rank_score(candidates, kept))
        spread_sd = np.sqrt(1 + holder_variance(oracle, share) * counts / noise**2)
        chances[:, level] = [NormalDist().cdf(x) for x in (counts / noise - gate) / spread_sd]
    return chances


def _rank_score(candidates: int, kept: int) -> float:
    """The z-score above which a prefix outranks all but ``kept - 2`` of ``candidates - 2`` prefixes no one
    holds (one place is the empty value's): their ``kept - 1``-th best, about."""
    noise = candidates - 2
    if noise < kept:
        return -math.inf  # places for every candidate
    return NormalDist().inv_cdf(1 - (kept - 1) / noise)


def discovery_probability(server: TapsServer, frequency: float, spread: str) -> float:
    """The chance that some party keeps the item's prefix at every level (module docstring)."""
    kept_to_end = np.prod(keep_probabilities(server, frequency, spread), axis=1)
    return float(1 - np.prod(1 - kept_to_end))


def size_taps(
    frequency: float,
    discovery: float,
    epsilon: float,
    spread: str = EVEN,
    on_step: OnStep | None = None,
    **design: Any,
) -> SizeAnswer:
    """The smallest population (parties of equal size) in which some party keeps the prefix of an item of
    share ``frequency`` at every level with probability ``discovery`` (``design``: the options of
    :func:`~fedhh.protocols.taps.plan.plan_taps`)."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    if spread not in SPREADS:
        raise InputError(f"--spread: got {spread!r}; allowed values: {list(SPREADS)}")
    with flags_named():
        reference = planned_server(1 << 20, epsilon, **design)
    parties, levels = reference.keys.parties, reference.levels
    if spread == ONE and frequency > 1 / parties:
        raise InputError(
            f"--frequency: {frequency:g} of the users cannot all be in one of {parties} equal parties "
            f"(at most 1/{parties}); use --spread even"
        )

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        with flags_named():
            server = planned_server(users, epsilon, **design)
        chances = keep_probabilities(server, frequency, spread)
        return discovery_probability(server, frequency, spread), {
            "parties": parties,
            "party_users": [int(u) for u in server.party_users],
            "spread": spread,
            "levels": levels,
            "prefix_lengths": [length for length, _ in planned_levels(server)],
            "oracle": server.keys.tree_oracle,
            "encoding": server.keys.tree_encoding,
            "consensus_z": server.keys.consensus_z,
            "kept_per_level": server.keys.kept_per_level,
            "party_keeps_to_the_end": np.prod(chances, axis=1).tolist(),
            "epsilon": epsilon,
        }

    smallest = max(parties * levels, math.ceil(1 / frequency))
    hint = "" if reference.keys.tree_oracle != "grr" else "; GRR's variance grows with the prefixes' domain: try OLH"
    start = min(int(frequency**-2), MAX_USERS)
    return size_by_analysis("taps", frequency, discovery, rate, smallest, start, on_step, hint, DEFINITION)


def planted(
    server: TapsServer, holders: int, spread: str, codec: ItemCodec, item: str, by_law: bool
) -> list[SingleItemShard] | list[CountedShard]:
    """The verification population: ``holders`` users holding ``item`` laid out by ``spread`` (each
    party's first users), the others nothing; as one shard of users, or a shard of counts a party."""
    bounds = server.party_bounds
    counts = item_counts(np.diff(bounds), holders, spread)
    vocabulary, ids = Vocabulary.encode([item], codec)
    n_users = int(bounds[-1])
    if by_law:
        return [
            CountedShard(vocabulary, int(start), int(stop - start), np.array([count]), UserTypes.none(), n_users)
            for start, stop, count in zip(bounds[:-1], bounds[1:], counts, strict=True)
        ]
    held = np.full(n_users, -1, dtype=np.int32)
    for start, count in zip(bounds[:-1], counts, strict=True):
        held[start : start + count] = ids[0]
    return [SingleItemShard(vocabulary, 0, held)]


def _design(args: Options) -> dict[str, Any]:
    """:func:`plan_taps`'s options from the command's."""
    return {
        "parties": args.parties,
        "levels": args.levels,
        "tree_oracle": args.oracle,
        "tree_encoding": args.encoding,
        "candidate_cap": args.candidate_cap,
        "kept_per_level": args.kept_per_level,
        "consensus_z": args.consensus_z,
        "max_length": args.max_length,
    }


def _answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_taps(args.frequency, args.discovery, args.epsilon, args.spread, show, **_design(args))


def verification_setup(args: Options, answer: SizeAnswer) -> dict[str, Any]:
    """What ``--verify`` runs: the server at the answer's population (its seed the run's) on the planted
    item laid out by ``--spread``."""
    design = _design(args)
    codec = planned_server(answer.users, args.epsilon, **design).codec

    def server(seed: int) -> TapsServer:
        built = planned_server(answer.users, args.epsilon, **design)
        return TapsServer(built.keys, built.split, answer.users, codec, seed)

    def plant(holders: int, item: str, by_law: bool) -> list[SingleItemShard] | list[CountedShard]:
        return planted(server(0), holders, args.spread, codec, item, by_law)

    return {"codec": codec, "make_server": server, "plant": plant}


def _check_analytic(args: Options, mode: str) -> None:
    forbidden(args, ("top_k",), mode + " (the item is found when a party keeps it at every level)")


TAPS_SIZING = Sizing(
    "TAPS",
    20,
    (
        Option("--top-k", "with --recall: K of recall@K", int),
        Option(
            "--spread",
            "where the item's holders are: even (every party, default) or one (party 0)",
            default=EVEN,
        ),
        Option("--parties", "parties P, of n/P users each (default 4)", int, 4),
        Option("--levels", "levels in every party (default 0: the fewest that reach whole values)", int, 0),
        Option("--oracle", "frequency oracle of every report (default olh)", default="olh"),
        Option("--encoding", "values as bits or as the codec's symbols (default bits)", default="bits"),
        Option("--candidate-cap", "most candidates a party's level queries (default 1024)", int, 1024),
        Option("--kept-per-level", "prefixes each party keeps per level (default 32)", int, 32),
        Option("--consensus-z", "z of the consensus threshold (default 2)", float, 2.0),
        Option("--max-length", "characters of the item (default 10)", int, 10),
    ),
    _answer,
    verification_setup,
    check_analytic=_check_analytic,
)
