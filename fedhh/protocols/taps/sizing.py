"""``fedhh size taps``: the smallest population, in parties of equal size, in which an item passes the
consensus threshold at every level.

The setting of the other protocols' sizing: an item of the longest length
held by a share ``f`` of the ``n`` users, sharing no prefix with any other
value, every other user holding nothing; the ``P`` parties hold ``n / P``
users each.

At level ``j`` every party's level group (``n_p / levels`` users on
average) reports the item's prefix of the level's length; party ``p``'s
estimate of the item's count ``c_p`` among its users has variance
``Var_p = n_p V / s + h c_p`` for the level's share ``s`` of a party's
users, the oracle's per-report variance ``V`` of a user holding another
value, and a holder's own share ``h = (V_1 - V + 1 - s) / s``
(:func:`~fedhh.protocols.taps.plan.holder_variance`: its report's noise,
``V_1``, and whether it is in the level, which the server scales by
``1 / s``).  Once the item's prefix passes the consensus threshold every
party's tree holds its extensions (the global target comes first in every
party), so its score is the sum of every party's estimate: mean ``f n``,
variance ``Σ_p Var_p = n V / s + h f n``,
taken as normal (the Gaussian approximation of the oracle's noise), against
the server's threshold ``z √(n V / s)`` (the noise of a count no one holds,
``protocol.consensus_z``).  Both are sums over the parties, linear in the
``c_p``: **where the holders are** -- spread evenly over the parties or all
in one -- **does not change the analysis**; the consensus pools the parties
(independent trees, ``consensus = "none"``, would not).  The item is found
when it passes at every level, the levels' users being disjoint: the product
of the levels' chances.  It has no competitor in this setting but the noise,
so the threshold is what it must pass; but prefixes no one holds pass it
too (about ``C Q(z)`` of ``C`` candidates), and a party keeps
``kept_per_level`` of those that pass, by its own estimates: where they
outnumber its places, the item loses places the analysis gives it, and the
answer says so (:func:`crowding`; at the defaults, about 23 against 32
places, runs agree with the analysis; with ``kept_per_level = 8`` they find
the item far less often).  On real data other prefixes compete too.  ``--verify``
plants the holders evenly, each party's first users.

The chance grows with ``n`` at every level (the item's count grows as ``n``,
the noise as ``√n``) and the levels do not depend on ``n``, so the answer
is the smallest ``n`` (to 1%) meeting the target; more ε lowers ``V``, so
it never needs more users.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist
from typing import Any

import numpy as np

from ...data.counted import CountedShard, UserTypes
from ...data.items import ItemCodec
from ...data.population import SingleItemShard, Vocabulary
from ...planning.commands import Option, Options
from ...planning.sizing import MAX_USERS, OnStep, SizeAnswer, Sizing, check_share, forbidden, size_by_analysis
from ...privacy.validation import check_epsilon
from ..prefix_search.law import level_probabilities
from .client import level_bounds
from .plan import flags_named, holder_variance, noise_passing, planned_levels, planned_server
from .server import TapsServer

DEFINITION = "the analysis meets the target at n and not at n less 1% (bisection over log n)"


def item_counts(party_users: np.ndarray, holders: int) -> np.ndarray:
    """``holders`` spread over the parties in proportion to their users (whole users: the remainder one
    to each of the first parties)."""
    users = np.asarray(party_users, dtype=np.int64)
    counts = holders * users // int(users.sum())
    counts[: holders - int(counts.sum())] += 1
    return counts


def pass_probabilities(server: TapsServer, frequency: float) -> list[float]:
    """Each level's chance that the item's summed estimate passes the consensus threshold (module
    docstring), for the server's parties and levels."""
    share = float(level_probabilities(level_bounds(server.levels))[0])
    users = float(server.n_users)
    holders = frequency * users
    z = server.keys.consensus_z
    chances = []
    for length, _ in planned_levels(server):
        oracle = server.oracle(length)
        noise = users * oracle.per_user_variance()[0] / share
        threshold = z * math.sqrt(noise)
        sd = math.sqrt(max(noise + holder_variance(oracle, share) * holders, 1e-300))
        chances.append(NormalDist().cdf((holders - threshold) / sd))
    return chances


def size_taps(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: OnStep | None = None,
    **design: Any,
) -> SizeAnswer:
    """The smallest population (parties of equal size) in which an item of share ``frequency`` passes
    the consensus threshold at every level with probability ``discovery`` (``design``: the options of
    :func:`~fedhh.protocols.taps.plan.plan_taps`)."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    with flags_named():
        reference = planned_server(1 << 20, epsilon, **design)
    parties, levels = reference.keys.parties, reference.levels

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        with flags_named():
            server = planned_server(users, epsilon, **design)
        chances = pass_probabilities(server, frequency)
        return math.prod(chances), {
            "parties": parties,
            "party_users": [int(u) for u in server.party_users],
            "levels": levels,
            "prefix_lengths": [length for length, _ in planned_levels(server)],
            "oracle": server.keys.tree_oracle,
            "encoding": server.keys.tree_encoding,
            "consensus_z": server.keys.consensus_z,
            "level_pass_probability": chances,
            "epsilon": epsilon,
        }

    smallest = max(parties * levels, math.ceil(1 / frequency))
    hint = "" if reference.keys.tree_oracle != "grr" else "; GRR's variance grows with the prefixes' domain: try OLH"
    start = min(int(frequency**-2), MAX_USERS)
    answer = size_by_analysis("taps", frequency, discovery, rate, smallest, start, on_step, hint, DEFINITION)
    with flags_named():
        crowded = crowding(planned_server(answer.users, epsilon, **design))
    return dataclasses.replace(answer, caveats=(crowded,) if crowded else ())


def crowding(server: TapsServer) -> str:
    """The caveat of a design whose noise prefixes passing the threshold outnumber a party's places
    (the analysis leaves them out: the item then loses its places to them, and is found less often)."""
    kept, z = server.keys.kept_per_level, server.keys.consensus_z
    noise = max(noise_passing(candidates, z) for _, candidates in planned_levels(server))
    if noise < kept - 2:
        return ""
    return (
        f"about {noise:.3g} prefixes no one holds pass the consensus threshold at a level, more than the "
        f"{kept - 2} places a party's kept_per_level = {kept} leaves besides the item and the empty value: they "
        "take the item's places, which the analysis leaves out, so runs find it less often (check with --verify; "
        "a larger --kept-per-level or --consensus-z leaves room)"
    )


def planted(
    server: TapsServer, holders: int, codec: ItemCodec, item: str, by_law: bool
) -> list[SingleItemShard] | list[CountedShard]:
    """The verification population: ``holders`` users holding ``item``, spread evenly over the parties
    (each party's first users), the others nothing; as one shard of users, or a shard of counts a party."""
    bounds = server.party_bounds
    counts = item_counts(np.diff(bounds), holders)
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
    return size_taps(args.frequency, args.discovery, args.epsilon, show, **_design(args))


def verification_setup(args: Options, answer: SizeAnswer) -> dict[str, Any]:
    """What ``--verify`` runs: the server at the answer's population (its seed the run's) on the planted
    item, spread evenly over the parties."""
    design = _design(args)
    codec = planned_server(answer.users, args.epsilon, **design).codec

    def server(seed: int) -> TapsServer:
        built = planned_server(answer.users, args.epsilon, **design)
        return TapsServer(built.keys, built.split, answer.users, codec, seed)

    def plant(holders: int, item: str, by_law: bool) -> list[SingleItemShard] | list[CountedShard]:
        return planted(server(0), holders, codec, item, by_law)

    return {"codec": codec, "make_server": server, "plant": plant}


def _check_analytic(args: Options, mode: str) -> None:
    forbidden(args, ("top_k",), mode + " (the item is found when it passes every level)")


TAPS_SIZING = Sizing(
    "TAPS",
    20,
    (
        Option("--top-k", "with --recall: K of recall@K", int),
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
