"""Empirical privacy audit of TrieHH: a lower bound on the ε actually spent.

A guarantee is an upper bound; an audit measures a lower bound, so a user
sees how loose the theorem is (and a lower bound above the guarantee is a
bug in the mechanism or in the accountant).  (ε, δ)-DP promises, for every
pair of neighbouring populations D, D' and every event E of the output,
``P_D'(E) <= e^ε P_D(E) + δ`` (and the same with D, D' swapped).  So if a
run is repeated T times on each population and E is seen ``k'`` and ``k``
times, every ε the mechanism can satisfy obeys

    ε >= ln((lower(k'/T) - δ) / upper(k/T))

where ``lower``/``upper`` are one-sided Clopper-Pearson bounds; with a
Bonferroni split of the error over every (holder count, event) measured,
the maximum over them holds with the stated confidence.

The neighbouring populations are TrieHH's worst case (add/remove of one
user, the paper's adjacency): D has ``n`` users of whom ``c`` hold the
target's item, D' adds the target user (``n + 1`` users, ``c + 1``
holders).  ``c`` is swept, because the privacy loss of the threshold is
largest for few holders (Lemma 2 of the paper pays δ there) and smallest for
many (Lemma 1).  The other users hold nothing: what they hold does not
change the votes on the target's path, and empty users keep runs cheap.

* :func:`audit_round`: one round.  The target prefix's vote count is a
  hypergeometric draw (m sampled of n users, c holders), vectorised; the
  output is whether it reaches θ.
* :func:`audit_run`: a whole run of the real :class:`TrieHHServer` and
  :func:`respond`, observing either the trie (what Theorem 1 covers: here,
  the depth the target's path reaches) or the server's view (the total votes
  received, sub-threshold ones included, which the server sees unless secure
  aggregation hides them, and which fedhh therefore never publishes).  The event for each ``c``
  is chosen on a first half of the runs and measured on the second half, so
  the choice does not bias the bound.

Both report, for each ``c``, the exact ε of that pair of populations at the
stated δ where it can be computed (the round's vote count, and the run's
trie depth, are products of hypergeometric tails), next to the guarantee.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.stats import beta, hypergeom

from ..errors import InputError
from ..items import ItemCodec, get_alphabet
from ..population import Shard, Vocabulary
from ..protocols.triehh import TrieHHServer, respond
from ..randomness import KeyedRandomness
from .triehh import TrieHHParameters

DEFAULT_CONFIDENCE = 0.95
Observable = Literal["trie", "server"]
OBSERVABLES: tuple[str, ...] = ("trie", "server")
TARGET_SYMBOL = "z"


# statistics -------------------------------------------------------------------
def clopper_pearson(hits: np.ndarray, trials: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper-Pearson bounds, each holding with probability ``1 - alpha``."""
    hits = np.asarray(hits, dtype=np.float64)
    trials = np.asarray(trials, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lower = np.where(hits > 0, beta.ppf(alpha, hits, trials - hits + 1), 0.0)
        upper = np.where(hits < trials, beta.ppf(1 - alpha, hits + 1, trials - hits), 1.0)
    return lower, upper


def epsilon_lower_bound(
    hits_more: np.ndarray, trials_more: np.ndarray, hits_less: np.ndarray, trials_less: np.ndarray,
    delta: float, alpha: float,
) -> np.ndarray:
    """``ln((lower(P_more(E)) - δ) / upper(P_less(E)))``, valid with probability ``1 - alpha``.

    ``-inf`` where the lower bound does not clear δ (the event proves nothing).
    """
    lower, _ = clopper_pearson(hits_more, trials_more, alpha / 2)
    _, upper = clopper_pearson(hits_less, trials_less, alpha / 2)
    with np.errstate(divide="ignore"):
        return np.where(lower > delta, np.log(np.maximum(lower - delta, 1e-300) / upper), -np.inf)


def hockey_stick_epsilon(p: np.ndarray, q: np.ndarray, delta: float) -> np.ndarray:
    """Exact ε at ``delta`` between two discrete distributions, per row, both directions.

    The smallest ε >= 0 with ``Σ max(0, p - e^ε q) <= δ`` and
    ``Σ max(0, q - e^ε p) <= δ``; ``inf`` when one distribution puts more
    than δ where the other puts nothing.  Found by bisection (the
    divergence falls as ε grows).
    """
    p, q = np.atleast_2d(p), np.atleast_2d(q)
    return np.maximum(_one_way_epsilon(p, q, delta), _one_way_epsilon(q, p, delta))


def _one_way_epsilon(p: np.ndarray, q: np.ndarray, delta: float) -> np.ndarray:
    def divergence(epsilon: np.ndarray) -> np.ndarray:
        return np.maximum(p - np.exp(epsilon)[:, None] * q, 0.0).sum(axis=1)

    unreachable = np.where(q <= 0, p, 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        losses = np.where((p > 0) & (q > 0), np.log(p / q), 0.0)
    low = np.zeros(p.shape[0])
    high = np.maximum(losses.max(axis=1), 0.0)
    for _ in range(80):
        middle = (low + high) / 2
        too_small = divergence(middle) > delta
        low = np.where(too_small, middle, low)
        high = np.where(too_small, high, middle)
    return np.where(unreachable > delta, np.inf, np.where(divergence(low) <= delta, low, high))


# results ----------------------------------------------------------------------
@dataclass(frozen=True)
class EventAudit:
    """One swept holder count: the event used and what it proves."""

    holders: int  # c: users of D holding the target's item (D' has c + 1)
    event: str
    trials: int  # per population (measurement runs only)
    hits_without: int  # in D
    hits_with: int  # in D'
    epsilon_lower: float  # Monte Carlo lower bound (-inf: proves nothing)
    epsilon_exact: float | None  # exact ε of this pair at δ, when computable


@dataclass(frozen=True)
class TrieHHAudit:
    """The audit of one scope (a round or a whole run) against the guarantee."""

    scope: str
    observe: str
    parameters: dict[str, Any]
    delta: float
    claimed_epsilon: float  # the guarantee at this scope (inf: none)
    confidence: float
    epsilon_lower: float  # max over the swept c, >= 0
    epsilon_exact: float | None  # max exact ε over the swept c
    events: list[EventAudit] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def violated(self) -> bool:
        """The lower bound exceeds the guarantee: a bug in the mechanism or the accountant."""
        return self.epsilon_lower > self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "violated": self.violated}


def _parameters(params: TrieHHParameters) -> dict[str, Any]:
    return {
        "n_users": params.n_users,
        "batch_size": params.batch_size,
        "theta": params.theta,
        "max_rounds": params.max_rounds,
        "sampling_rate": params.sampling_rate,
    }


def round_guarantee(params: TrieHHParameters) -> float:
    """ε of one round: Theorem 1 with L = 1 (``inf`` outside the theorem)."""
    return params.epsilon / params.max_rounds


def default_holders(params: TrieHHParameters, points: int, include_empty: bool = False) -> np.ndarray:
    """``c = θ - 1`` (D' can reach θ, D cannot: the δ region) and ``points - 1``
    geometric steps from θ to ``2θ/γ`` holders (where a round passes almost surely).

    ``include_empty`` adds ``c = 0``, where D has no vote at all to hide the
    target's: the trie cannot tell (θ > 1), but a vote count can.
    """
    theta, rate = params.theta, params.sampling_rate
    top = min(params.n_users - 1, math.ceil(2 * theta / rate))
    sweep = np.geomspace(max(theta, 1), max(top, theta), max(points - 1, 1))
    start = [0] if include_empty else []
    return np.unique(np.concatenate((start, [max(theta - 1, 0)], np.round(sweep)))).astype(np.int64)


def _check_holders(holders: Sequence[int] | np.ndarray, params: TrieHHParameters) -> np.ndarray:
    values = np.unique(np.asarray(holders, dtype=np.int64))
    if values.size == 0 or values[0] < 0 or values[-1] >= params.n_users:
        raise InputError(f"holders: each must be in 0..{params.n_users - 1} (users of D), got {list(holders)}")
    return values


def _check_run(trials: int, delta: float, confidence: float) -> None:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise InputError(f"trials: must be an integer >= 2, got {trials!r}")
    if not 0 <= delta < 1:
        raise InputError(f"delta: must be in [0, 1), got {delta!r}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence: must be in (0, 1), got {confidence!r}")


def _round_pass_probabilities(params: TrieHHParameters, holders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(the target prefix reaches θ votes in one round) in D and in D'."""
    n, m, theta = params.n_users, params.batch_size, params.theta
    return hypergeom.sf(theta - 1, n, holders, m), hypergeom.sf(theta - 1, n + 1, holders + 1, m)


# one round --------------------------------------------------------------------
def audit_round(
    params: TrieHHParameters,
    delta: float,
    trials: int,
    seed: int,
    holders: Sequence[int] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> TrieHHAudit:
    """Audit one round: ``trials`` hypergeometric vote counts per population and ``c``.

    Both events are tried for every ``c`` ("the prefix is added", which D'
    favours, and "it is not", which D favours), under one Bonferroni split.
    """
    _check_run(trials, delta, confidence)
    started = time.perf_counter()
    swept = default_holders(params, 12) if holders is None else _check_holders(holders, params)
    n, m, theta = params.n_users, params.batch_size, params.theta
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7201]))
    passes_without = np.array([np.count_nonzero(rng.hypergeometric(c, n - c, m, trials) >= theta) for c in swept])
    passes_with = np.array([np.count_nonzero(rng.hypergeometric(c + 1, n - c, m, trials) >= theta) for c in swept])
    alpha = (1 - confidence) / (2 * swept.size)
    added = epsilon_lower_bound(passes_with, trials, passes_without, trials, delta, alpha)
    kept_out = epsilon_lower_bound(trials - passes_without, trials, trials - passes_with, trials, delta, alpha)
    p_without, p_with = _round_pass_probabilities(params, swept)
    exact = hockey_stick_epsilon(np.stack([p_with, 1 - p_with], 1), np.stack([p_without, 1 - p_without], 1), delta)
    events = [
        EventAudit(
            holders=int(c),
            event="prefix added (>= θ votes)" if add >= out else "prefix not added",
            trials=trials,
            hits_without=int(k0 if add >= out else trials - k0),
            hits_with=int(k1 if add >= out else trials - k1),
            epsilon_lower=float(max(add, out)),
            epsilon_exact=float(e),
        )
        for c, k0, k1, add, out, e in zip(swept, passes_without, passes_with, added, kept_out, exact, strict=True)
    ]
    return _audit("round", "trie", params, delta, round_guarantee(params), confidence, events, started)


def _audit(
    scope: str, observe: str, params: TrieHHParameters, delta: float, claimed: float,
    confidence: float, events: list[EventAudit], started: float,
) -> TrieHHAudit:
    exact = [e.epsilon_exact for e in events if e.epsilon_exact is not None]
    return TrieHHAudit(
        scope=scope,
        observe=observe,
        parameters=_parameters(params),
        delta=delta,
        claimed_epsilon=claimed,
        confidence=confidence,
        epsilon_lower=max([0.0, *(e.epsilon_lower for e in events)]),
        epsilon_exact=max(exact) if exact else None,
        events=events,
        seconds=time.perf_counter() - started,
    )


def exact_round_epsilon(params: TrieHHParameters, delta: float) -> tuple[float, int]:
    """The largest exact one-round ε at ``delta`` over *every* holder count, and where.

    Below ``θ - 1`` holders neither population can pass; beyond ``4θ/γ + 50``
    both pass with probability 1 to within 1e-20, so the sweep stops there.
    """
    theta, rate = params.theta, params.sampling_rate
    top = min(params.n_users - 1, math.ceil(4 * theta / rate) + 50)
    holders = np.arange(max(theta - 1, 0), top + 1)
    p_without, p_with = _round_pass_probabilities(params, holders)
    exact = hockey_stick_epsilon(np.stack([p_with, 1 - p_with], 1), np.stack([p_without, 1 - p_without], 1), delta)
    worst = int(np.argmax(exact))
    return float(exact[worst]), int(holders[worst])


# a whole run ------------------------------------------------------------------
def _target_population(params: TrieHHParameters, holders: int, with_target: bool) -> tuple[Shard, ItemCodec]:
    """``holders`` users (plus the target) holding an item of L - 1 symbols; the rest hold nothing."""
    codec = ItemCodec(get_alphabet("lowercase"), 1, params.max_rounds - 1)
    vocabulary, ids = Vocabulary.encode([TARGET_SYMBOL * (params.max_rounds - 1)], codec)
    holding = holders + int(with_target)
    n_users = params.n_users + int(with_target)
    items = np.full(n_users, -1, dtype=np.int64)
    items[:holding] = ids[0]
    return Shard.single_item(vocabulary, 0, items), codec


def _observe(server: TrieHHServer, observe: Observable) -> int:
    trace = server.trace
    if observe == "trie":  # the only prefixes are the target's: the trie is one path
        return len(trace[-1].values["trie_size_per_depth"]) if trace else 0
    return sum(record.server_view["votes_received"] for record in trace)


def simulate_runs(
    params: TrieHHParameters, holders: int, with_target: bool, seeds: np.ndarray, observe: Observable = "trie"
) -> np.ndarray:
    """One outcome per seed, each from a complete run of the real server and client code.

    The population is D (``params.n_users`` users, ``holders`` of them holding
    the target's item) or, ``with_target``, D' (the target user added; the
    server then samples from ``n + 1`` users with the same m and θ).
    """
    shard, codec = _target_population(params, holders, with_target)
    run_params = TrieHHParameters(shard.n_users, params.max_rounds, params.theta, params.batch_size)
    outcomes = np.empty(len(seeds), dtype=np.int64)
    for index, seed in enumerate(np.asarray(seeds).tolist()):
        server = TrieHHServer(run_params, codec, seed)
        randomness = KeyedRandomness(seed)
        while (request := server.next_request()) is not None:
            server.absorb(respond(request, shard, randomness))
        outcomes[index] = _observe(server, observe)
    return outcomes


def _threshold_events(without: np.ndarray, with_: np.ndarray) -> list[tuple[str, Callable[[np.ndarray], np.ndarray], bool]]:
    """Candidate events "outcome >= t" (D' favoured) and "outcome < t" (D favoured)."""
    values = np.unique(np.concatenate([without, with_]))
    events = []
    for t in values[1:].tolist() if values.size > 1 else values.tolist():
        events.append((f">= {t}", lambda x, t=t: x >= t, True))
        events.append((f"< {t}", lambda x, t=t: x < t, False))
    return events


def audit_run(
    params: TrieHHParameters,
    delta: float,
    trials: int,
    seed: int,
    holders: Sequence[int] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    observe: Observable = "trie",
) -> TrieHHAudit:
    """Audit a whole run with the real protocol code, ``trials`` runs per population and ``c``.

    ``observe="trie"`` looks at what Theorem 1 protects (the trie: here the
    depth reached along the target's path) and is held against the run's
    guarantee; ``observe="server"`` looks at the total votes received, which
    the server sees and the theorem does not cover.
    """
    _check_run(trials, delta, confidence)
    if observe not in OBSERVABLES:
        raise InputError(f"observe: got {observe!r}; allowed: {list(OBSERVABLES)}")
    if params.max_rounds < 2:
        raise InputError(f"max_rounds: the run audit needs an item of >= 1 symbol, i.e. L >= 2, got {params.max_rounds}")
    started = time.perf_counter()
    swept = (
        default_holders(params, 5, include_empty=observe == "server")
        if holders is None else _check_holders(holders, params)
    )
    alpha = (1 - confidence) / swept.size
    select = trials // 2
    events = []
    for index, c in enumerate(swept.tolist()):
        outcomes = [
            simulate_runs(params, c, with_target, _seeds(seed, index, with_target, trials), observe)
            for with_target in (False, True)
        ]
        events.append(_best_event(c, outcomes[0], outcomes[1], select, delta, alpha, params, observe))
    return _audit("run", observe, params, delta, params.epsilon, confidence, events, started)


def _seeds(seed: int, index: int, with_target: bool, trials: int) -> np.ndarray:
    """Independent run seeds per (audit seed, swept c, population)."""
    return np.random.SeedSequence([seed, 0x52554E, index, int(with_target)]).generate_state(trials, np.uint64)


def _best_event(
    holders: int, without: np.ndarray, with_: np.ndarray, select: int, delta: float, alpha: float,
    params: TrieHHParameters, observe: Observable,
) -> EventAudit:
    """Choose the event on the first ``select`` runs, measure it on the rest."""
    best = None
    for name, indicator, favours_with in _threshold_events(without[:select], with_[:select]):
        hits0, hits1 = int(indicator(without[:select]).sum()), int(indicator(with_[:select]).sum())
        more, less = (hits1, hits0) if favours_with else (hits0, hits1)
        score = float(epsilon_lower_bound(more, select, less, select, delta, alpha))
        if best is None or score > best[0]:
            best = (score, name, indicator, favours_with)
    _, name, indicator, favours_with = best
    measured = without.size - select
    hits0, hits1 = int(indicator(without[select:]).sum()), int(indicator(with_[select:]).sum())
    more, less = (hits1, hits0) if favours_with else (hits0, hits1)
    label = "trie depth along the target's path" if observe == "trie" else "total votes received"
    return EventAudit(
        holders=holders,
        event=f"{label} {name}",
        trials=measured,
        hits_without=hits0,
        hits_with=hits1,
        epsilon_lower=float(epsilon_lower_bound(more, measured, less, measured, delta, alpha)),
        epsilon_exact=_exact_run_epsilon(params, holders, delta) if observe == "trie" else None,
    )


def _exact_run_epsilon(params: TrieHHParameters, holders: int, delta: float) -> float:
    """Exact ε of the trie depth for one ``c``: rounds sample independently, so
    ``P(depth >= j) = p^j`` with p the one-round pass probability."""
    p_without, p_with = _round_pass_probabilities(params, np.array([holders]))
    depths = np.arange(params.max_rounds + 1)

    def depth_pmf(p: float) -> np.ndarray:
        reach = p ** depths
        return reach - np.append(reach[1:], 0.0)

    return float(hockey_stick_epsilon(depth_pmf(float(p_with[0])), depth_pmf(float(p_without[0])), delta)[0])
