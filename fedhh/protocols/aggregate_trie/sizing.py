"""``fedhh size aggregate-trie``: the smallest population in which the tree finds an item of a given share.

The setting of TrieHH's Proposition 1: an item of the longest length held
by a share ``f`` of the ``n`` users, sharing no prefix with any other value,
every other user holding nothing.  The item passes a level when its sampled
count (Binomial(f n, q), taken as normal) plus the level's noise exceeds
the level's threshold, independently in each of the ``levels`` levels, and
is found when it passes all of them.  A level's threshold is that of its
candidates: the first level extends one (empty) prefix; a later one the
item's prefix and, on average, one candidate nobody holds that passed the
level before (the threshold lets about one through per level), so two.
On real data more prefixes survive, the thresholds are higher (by the
noise's upper quantile at ``1/(K D)`` instead of ``1/(2 D)``: ``fedhh plan
aggregate-trie`` uses ``K = max_prefixes``), and other items can outrank
the item for the ``max_prefixes`` places.  At a fixed sampling rate ``q`` the noise does not depend on
``n`` and the rate grows with ``n``, so the answer is the smallest ``n`` (to
1%) that meets the target; δ must be below ``1/n`` there.
"""

from __future__ import annotations

import math
from typing import Any

from ...data.items import ItemCodec, get_alphabet
from ...errors import InputError
from ...planning.commands import Option, Options
from ...planning.sizing import OnStep, SizeAnswer, Sizing, check_share, forbidden, required, size_by_analysis
from ...privacy.aggregate_trie import solve_aggregate_trie
from ...privacy.central import GAUSSIAN, NOISES
from ...privacy.validation import check_positive_int
from .extensions import ExtensionDomain
from .parameters import MAX_EXTENSION, AggregateTrieKeys, levels_for
from .plan import pass_probability
from .server import AggregateTrieServer, threshold_for

DEFINITION = "the analysis meets the target at n and not at n less 1% (bisection over log n)"


def setting_thresholds(noise: str, scale: float, max_rounds: int, extension: int, symbols: int) -> list[float]:
    """Each level's threshold in the assumed population (see the module docstring): one parent at the
    first level, two at the others, the last level's extension cut at ``max_rounds``."""
    thresholds, depth = [], 0
    while depth < max_rounds:
        length = min(extension, max_rounds - depth)
        parents = 1 if depth == 0 else 2
        thresholds.append(threshold_for(noise, scale, 0.0, parents * ExtensionDomain(symbols, length).size))
        depth += length
    return thresholds


def size_aggregate_trie(
    frequency: float,
    discovery: float,
    epsilon: float,
    delta: float,
    max_length: int = 10,
    noise: str = GAUSSIAN,
    sampling_rate: float = 1.0,
    extension: int = 2,
    contributions: int = 1,
    on_step: OnStep | None = None,
) -> SizeAnswer:
    """The smallest n for which the analysis finds an item of share ``frequency`` with probability
    ``discovery`` (see the module docstring)."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_share(sampling_rate, "--sampling-rate", upper_open=False)
    check_positive_int(extension, "--extension", maximum=MAX_EXTENSION)
    check_positive_int(contributions, "--contributions")
    codec = ItemCodec(get_alphabet("lowercase"), 1, max_length)
    levels = levels_for(codec.max_rounds, extension)
    params = solve_aggregate_trie(1, epsilon, delta, noise, contributions, sampling_rate, levels)
    thresholds = setting_thresholds(noise, params.scale, codec.max_rounds, extension, codec.radix)

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        passed = math.prod(pass_probability(params, frequency * users, threshold) for threshold in thresholds)
        return passed, {
            "scale": params.scale,
            "thresholds": thresholds,
            "levels": levels,
            "sampling_rate": sampling_rate,
            "epsilon": params.epsilon,
            "delta": delta,
        }

    answer = size_by_analysis("aggregate-trie", frequency, discovery, rate, 1, int(10 / frequency), on_step)
    if delta * answer.users >= 1:
        raise InputError(
            f"--delta: the answer needs n = {answer.users:,} users, where δ = {delta:g} is not below 1/n = "
            f"{1 / answer.users:.3g}; choose δ well below 1/n, e.g. 1/n² = {1 / answer.users**2:.3g}"
        )
    solve_aggregate_trie(answer.users, epsilon, delta, noise, contributions, sampling_rate, levels)
    return answer


def verification_server(args: Options, answer: SizeAnswer) -> dict[str, Any]:
    """What ``--verify`` runs: the tree at the answer's population, on the item of ``--max-length`` letters
    (the default ``protocol.max_prefixes``)."""
    codec = ItemCodec(get_alphabet("lowercase"), 1, args.max_length)
    levels = levels_for(codec.max_rounds, args.extension)
    params = solve_aggregate_trie(
        answer.users, args.epsilon, args.delta, args.noise, args.contributions, _rate(args), levels
    )
    keys = AggregateTrieKeys(
        level_noise=args.noise,
        extension=args.extension,
        contributions=args.contributions,
        data_selection="several" if args.contributions > 1 else "weighted",
    )

    def server(seed: int) -> AggregateTrieServer:
        return AggregateTrieServer(params, keys, codec, seed)

    return {"codec": codec, "make_server": server}


def _rate(args: Options) -> float:
    return 1.0 if args.sampling_rate is None else float(args.sampling_rate)


def _answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_aggregate_trie(
        args.frequency,
        args.discovery,
        args.epsilon,
        args.delta,
        args.max_length,
        args.noise,
        _rate(args),
        args.extension,
        args.contributions,
        show,
    )


def _check_analytic(args: Options, mode: str) -> None:
    required(args, ("delta",), mode)
    forbidden(args, ("top_k",), mode + " (the answer is for one item of share --frequency)")


def _check_recall(args: Options, mode: str) -> None:
    forbidden(args, ("sampling_rate",), mode + " (the config's protocol.users_per_level samples)")


AGGREGATE_TRIE_SIZING = Sizing(
    "aggregate-trie",
    50,
    (
        Option("--delta", "target δ in (0, 1)", float),
        Option("--max-length", "letters of the item (default 10)", int, 10),
        Option("--noise", "noise added to each count (default gaussian)", default=GAUSSIAN, choices=NOISES),
        Option("--sampling-rate", "q, each user's chance to be sampled per level (default 1)", float),
        Option("--extension", "symbols a level adds (default 2)", int, 2),
        Option("--contributions", "candidates a user adds 1 to per level (default 1)", int, 1),
        Option("--top-k", "K of recall@K (with --recall and --population)", int),
    ),
    _answer,
    verification_server,
    check_analytic=_check_analytic,
    check_recall=_check_recall,
)
