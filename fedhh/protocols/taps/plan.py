"""``fedhh plan taps``: the parties, levels and prefix lengths of TAPS for (n, ε), each level's noise,
and the smallest counts the consensus threshold lets through, per party and summed over the parties.

Before any data, the server's choices are known up to the adaptive
extension: the first level's length exactly (the longest prefix whose every
value fits ``candidate_cap`` candidates), each later one under the bound the
extension works with, every party keeping ``kept_per_level`` prefixes (the
most it keeps: a party that keeps fewer grows faster).  A level's group of
party ``p`` holds ``n_p / levels`` users on average; party ``p``'s estimate
of a prefix's count among its ``n_p`` users, scaled from its ``r``
reporters, has standard deviation ``sd_p = n_p √(V / r) = √(n_p V levels)``
for the oracle's per-report variance ``V`` at ε (the noise of a count no
one holds, which the consensus threshold is set against).

A party keeps its ``kept_per_level`` prefixes of best consensus score
(:mod:`fedhh.protocols.taps.server`): its own estimate's z-score, raised by
the other parties' evidence once it reaches ``z`` (``protocol.consensus_z``).
So ``z sd_p`` is the smallest count among a party's users that its estimate
lets through to the pooling half the time; the z-score of the P parties'
estimates summed (their Stouffer combination, for parties of equal noise)
reaches ``z`` at a global count of ``z √(Σ_p sd_p²)``, which pools P parties'
evidence: a share ``√P`` times smaller than one party's.  The count that
passes 95 % of the time also counts the holders' own noise: each holder adds
``(V_1 - V + 1 - s) / s`` to the variance (``V_1``: the oracle's per-report
variance of a holder; ``1 - s``: whether it is among the level's ``s``
share of the users, which the server scales up by ``1 / s``;
:func:`holder_variance`).  Noise passes too: of ``C`` candidates no one
holds, about ``C Q(z)`` reach ``z`` (:func:`noise_passing`), and compete
for a party's places.  The guarantee does not depend on any of it: every
user sends one ε-LDP report.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import NormalDist
from typing import Any

import numpy as np

from ...data.items import ItemCodec, get_alphabet
from ...errors import InputError
from ...oracles import FrequencyOracle
from ...planning.commands import JSON_OPTION, Option, Options, PlanCommand, PlanTable
from ...privacy.ldp import ldp_report
from ...privacy.validation import check_users
from ...schema import ProtocolSection
from ..prefix_search.law import level_probabilities
from .client import level_bounds
from .server import BUDGET, NAME, TapsKeys, TapsServer, extension_step

SURE = 0.95  # the pass probability of the counts a plan gives beside the threshold's
CODEC_KEYS = ("max_length", "unit_size", "alphabet")


def plan_taps(
    n_users: int,
    epsilon: float,
    parties: int = 4,
    levels: int = 0,
    tree_oracle: str = "olh",
    tree_encoding: str = "bits",
    candidate_cap: int = 1024,
    kept_per_level: int = 32,
    consensus_z: float = 2.0,
    max_length: int = 10,
    unit_size: int = 1,
    alphabet: str = "lowercase",
) -> dict[str, Any]:
    """The server's design for ``n_users`` users at ε (module docstring), per level its noise and the
    counts and shares that pass the consensus threshold, and the guarantee."""
    with flags_named():
        server = planned_server(
            n_users,
            epsilon,
            parties=parties,
            levels=levels,
            tree_oracle=tree_oracle,
            tree_encoding=tree_encoding,
            candidate_cap=candidate_cap,
            kept_per_level=kept_per_level,
            consensus_z=consensus_z,
            max_length=max_length,
            unit_size=unit_size,
            alphabet=alphabet,
        )
        return _plan_server(server)


@contextmanager
def flags_named() -> Iterator[None]:
    """The server's refusals, which name config keys, naming the command's flags instead."""
    try:
        yield
    except InputError as error:
        message = str(error).replace("population.users", "--users")
        for name in (*TapsKeys.keys(), *CODEC_KEYS):
            message = message.replace(f"protocol.{name}", _flag(name))
        raise InputError(message) from None


def planned_server(n_users: int, epsilon: float, **design: Any) -> TapsServer:
    """The server a run of ``design`` (:func:`plan_taps`'s options; the others at their defaults)
    builds for ``n_users`` users at ε, every option checked first (naming its flag)."""
    check_users(n_users, "--users")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < math.inf:
        raise InputError(f"--epsilon: must be a number > 0, got {epsilon!r}")
    declared = {**TapsKeys.keys(), **{name: ProtocolSection.keys()[name] for name in CODEC_KEYS}}
    unknown = sorted(set(design) - set(declared))
    if unknown:
        raise TypeError(f"planned_server: unknown options {unknown}")
    values = {name: declared[name].default for name in declared} | design
    checked: dict[str, Any] = {name: declared[name].validate(_flag(name), values[name]) for name in declared}
    codec = ItemCodec(get_alphabet(checked["alphabet"]), checked["unit_size"], checked["max_length"])
    keys = TapsKeys.of({name: checked[name] for name in TapsKeys.keys()})
    return TapsServer(keys, BUDGET.split(NAME, float(epsilon)), n_users, codec, 0)


def _plan_server(server: TapsServer) -> dict[str, Any]:
    """:func:`plan_taps` of a built server."""
    n_users, epsilon = server.n_users, server.epsilon
    party_users = [int(users) for users in server.party_users]
    share = float(level_probabilities(level_bounds(server.levels))[0])
    keys = server.keys.values()
    z = float(server.keys.consensus_z)
    by_level = []
    for level, (length, candidates) in enumerate(planned_levels(server)):
        oracle = server.oracle(length)
        per_report = float(oracle.per_user_variance()[0])
        per_holder = holder_variance(oracle, share)
        party_sd = [math.sqrt(users * per_report / share) for users in party_users]
        pooled_sd = math.sqrt(sum(sd**2 for sd in party_sd))
        smallest = int(np.argmin(party_users))
        by_level.append(
            {
                "level": level + 1,
                "prefix_length": length,
                "candidates_per_party": candidates,
                "noise_passing": noise_passing(candidates, z),
                "per_report_variance": per_report,
                "party_sd": party_sd,
                "party_threshold_count": [z * sd for sd in party_sd],
                "party_threshold_share": [z * sd / users for sd, users in zip(party_sd, party_users, strict=True)],
                "party_share_95": passing_count(party_sd[smallest], per_holder, z) / party_users[smallest],
                "global_sd": pooled_sd,
                "global_threshold_count": z * pooled_sd,
                "global_threshold_share": z * pooled_sd / n_users,
                "global_share_95": passing_count(pooled_sd, per_holder, z) / n_users,
            }
        )
    parameters = {**keys, "levels": server.levels}
    return {
        "protocol": NAME,
        "n_users": n_users,
        "epsilon": float(epsilon),
        "delta": 0.0,
        **parameters,
        "value_length": server.encoding.length,
        "unit": server.encoding.unit_name,
        "party_users": party_users,
        "users_per_level_group": [users * share for users in party_users],
        "levels_planned": by_level,
        "model": "local, per-user ε-LDP (one report a user)",
        "privacy": ldp_report(server.split, server.keys.tree_oracle, server.describe()).to_dict(),
    }


def _flag(name: str) -> str:
    """The command-line flag of a key (``tree_oracle`` -> ``--oracle``)."""
    return "--" + {"tree_oracle": "oracle", "tree_encoding": "encoding"}.get(name, name).replace("_", "-")


def noise_passing(candidates: int, z: float) -> float:
    """How many of a level's candidates that no one holds reach the consensus threshold z, on average, when
    every party queries the same ``candidates`` (all but the item's and the empty value's): each
    one's estimate is noise, above ``z`` of its standard deviations with probability ``Q(z)``."""
    return max(candidates - 2, 0) * (1 - NormalDist().cdf(z))


def holder_variance(oracle: FrequencyOracle, share: float) -> float:
    """What one holder of a value adds to the variance of a party's scaled estimate of its count: the
    oracle's per-report variance of a holder less a non-holder's, and whether it is among the level's
    ``share`` of the party's users (the server scales the level's count by ``1 / share``)."""
    other, holder = oracle.per_user_variance()
    return (holder - other + 1 - share) / share


def passing_count(sd: float, per_holder: float, z: float, probability: float = SURE) -> float:
    """The count ``c`` whose estimate (normal, variance ``sd² + per_holder c``) is at least ``z sd`` with
    ``probability``: ``c - z sd = u √(sd² + per_holder c)`` for the normal quantile ``u``."""
    u = NormalDist().inv_cdf(probability)
    linear = u * u * per_holder
    above = (linear + math.sqrt(linear * linear + 4 * u * u * (sd * sd + per_holder * z * sd))) / 2
    return z * sd + max(above, 0.0)


def planned_levels(server: TapsServer) -> list[tuple[int, int]]:
    """Each level's prefix length and candidates per party: the first exactly, the later ones when
    every party keeps ``kept_per_level`` prefixes (the server's adaptive extension)."""
    space, kept = server.encoding.space, server.keys.kept_per_level
    planned = [(server.first_length, int(space.segment_count(server.first_length)))]
    length = server.first_length
    for level in range(1, server.levels):
        step = extension_step(server.encoding, server.keys.candidate_cap, length, kept, server.levels - level)
        planned.append((length + step, kept * int(space.segment_count(step))))
        length += step
    return planned


def _plan(args: Options) -> dict[str, Any]:
    return plan_taps(
        args.users,
        args.epsilon,
        args.parties,
        args.levels,
        args.oracle,
        args.encoding,
        args.candidate_cap,
        args.kept_per_level,
        args.consensus_z,
        args.max_length,
        args.unit_size,
        args.alphabet,
    )


def _noise(planned: list[dict[str, Any]]) -> str:
    """The levels' noise prefixes passing the threshold, as a range."""
    counts = sorted({f"{level['noise_passing']:.3g}" for level in planned}, key=float)
    return " to ".join(dict.fromkeys([counts[0], counts[-1]]))


def _share(share: float) -> str:
    """A share in a table: above 1, no item reaches it."""
    return f"{share:.3g}" if share <= 1 else "none"


def _table(args: Options, plan: dict[str, Any]) -> PlanTable:
    users = plan["party_users"]
    worst = int(np.argmin(users))
    planned = plan["levels_planned"]
    variances = sorted({f"{level['per_report_variance']:.4g}" for level in planned}, key=float)
    rows = [
        ("parties P", str(plan["parties"])),
        ("users per party", ", ".join(f"{u:,}" for u in sorted(set(users)))),
        ("levels (user groups in each party)", str(plan["levels"])),
        ("users per level group", ", ".join(f"{u:,.0f}" for u in sorted(set(plan["users_per_level_group"])))),
        ("per-report variance V", " to ".join(dict.fromkeys([variances[0], variances[-1]]))),
    ]
    for level in planned:
        rows.append(
            (
                f"level {level['level']}: {level['prefix_length']} of {plan['value_length']} {plan['unit']}, "
                f"{level['candidates_per_party']:,} candidates a party",
                f"sd {level['party_sd'][worst]:,.0f}; party {level['party_threshold_count'][worst]:,.0f} = "
                f"{_share(level['party_threshold_share'][worst])} ({_share(level['party_share_95'])}); "
                f"all {level['global_threshold_count']:,.0f} = {_share(level['global_threshold_share'])} "
                f"({_share(level['global_share_95'])})",
            )
        )
    smallest = "" if len(set(users)) == 1 else " (of the smallest party)"
    notes = [
        f"level rows: a party's estimate's standard deviation in counts{smallest}; the smallest count and share "
        f"of a party's users whose estimate reaches z = {plan['consensus_z']:g} sd (where the other parties' "
        "evidence starts to count), and of all users whose P estimates summed reach it: at z half the time, "
        f"in brackets {SURE:.0%} of the time (none: not even an item held by every user)",
        "levels after the first: when every party keeps --kept-per-level prefixes (a party keeping fewer grows "
        "faster, with fewer candidates)",
        f"prefixes no one holds whose z-score reaches z, per level: about {_noise(planned)} (a party keeps "
        f"{plan['kept_per_level']}: more than that, and they compete for the places of real prefixes)",
        f"oracle {plan['tree_oracle']}; privacy: {plan['model']}, ε = {plan['epsilon']:g}, δ = 0",
        "run it with --set protocol.name=taps (and the same protocol.* keys)",
    ]
    return PlanTable(
        f"TAPS plan: n = {plan['n_users']:,}, ε = {plan['epsilon']:g}, P = {plan['parties']}, {plan['levels']} levels",
        rows,
        notes,
    )


TAPS_PLAN = PlanCommand(
    "TAPS's levels and prefix lengths for (n, ε, P), each level's noise and what passes the consensus threshold",
    (
        Option("--users", "population size n (all parties)", int, required=True),
        Option("--epsilon", "per-user ε > 0 (ε-LDP, δ = 0)", float, required=True),
        Option("--parties", "parties P, of n/P users each (default 4)", int, 4),
        Option("--levels", "levels in every party (default 0: the fewest that reach whole values)", int, 0),
        Option(
            "--oracle", "frequency oracle of every report (default olh)", default="olh", choices=("olh", "blh", "grr")
        ),
        Option(
            "--encoding",
            "values as bits or as the codec's symbols (default bits)",
            default="bits",
            choices=("bits", "symbols"),
        ),
        Option("--candidate-cap", "most candidates a party's level queries (default 1024)", int, 1024),
        Option("--kept-per-level", "prefixes each party keeps per level (default 32)", int, 32),
        Option("--consensus-z", "z of the consensus threshold (default 2)", float, 2.0),
        Option("--max-length", "characters of the longest item (default 10)", int, 10),
        Option("--unit-size", "characters per symbol (default 1)", int, 1),
        Option("--alphabet", "public alphabet (default lowercase)", default="lowercase"),
        JSON_OPTION,
    ),
    _plan,
    _table,
    description="TAPS (Zhang, Ye and Hu 2024): every party's prefix tree, level by level, pruned by the "
    "consensus of the parties' estimates (docs/protocols.md).",
)
