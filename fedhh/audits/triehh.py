"""Empirical privacy audit of TrieHH: a lower bound on the ε actually spent.

A guarantee is an upper bound; an audit measures a lower bound, so a user
sees how loose the theorem is (a lower bound above the guarantee is a bug in
the mechanism or in the accountant).  For neighbouring populations D (``c``
holders of the target's item among ``n`` users) and D' (the target user
added), every event E of the output bounds ε from below by
``ln((lower(P_D'(E)) - δ) / upper(P_D(E)))``, with a Bonferroni split of the
error over every bound computed.  The loss lives where a round passes with
a tiny probability, so the vote counts are drawn from a proposal population
with more holders and weighed by their exact likelihood ratio (empirical
Bernstein bounds); without a tilt the bounds are Clopper-Pearson's.

* :func:`audit_round`: one round, vote counts drawn vectorised;
* :func:`audit_run`: whole runs of the real server and client, observing the
  trie's depth (importance-sampled) or the server's view of the votes.

Both report, for each ``c``, the exact ε of that pair of populations next to
the guarantee.  The reasoning, the events and the reference setting are in
``docs/derivations.md`` ("TrieHH's empirical privacy audit").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.stats import beta, hypergeom

from ..data.items import ItemCodec, get_alphabet
from ..data.population import Shard, SingleItemShard, Vocabulary
from ..errors import InputError
from ..kernels.randomness import KeyedRandomness
from ..privacy.triehh import TrieHHParameters
from ..protocols.triehh.client import respond
from ..protocols.triehh.server import TrieHHServer

DEFAULT_CONFIDENCE = 0.95
Observable = Literal["trie", "server"]
OBSERVABLES: tuple[str, ...] = ("trie", "server")
TARGET_SYMBOL = "z"
Progress = Callable[[int], None]  # called with the number of draws or runs just done


# statistics -------------------------------------------------------------------
def clopper_pearson(hits: np.ndarray | int, trials: np.ndarray | int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper-Pearson bounds, each holding with probability ``1 - alpha``."""
    hits = np.asarray(hits, dtype=np.float64)
    trials = np.asarray(trials, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lower = np.where(hits > 0, beta.ppf(alpha, hits, trials - hits + 1), 0.0)
        upper = np.where(hits < trials, beta.ppf(1 - alpha, hits + 1, trials - hits), 1.0)
    return lower, upper


@dataclass(frozen=True)
class Estimate:
    """An event's probability: the point estimate and one-sided confidence bounds."""

    mean: float
    lower: float
    upper: float

    def complement(self) -> Estimate:
        return Estimate(1.0 - self.mean, 1.0 - self.upper, 1.0 - self.lower)


def estimate_probability(terms: np.ndarray, bound: float, alpha: float, weighted: bool) -> Estimate:
    """The mean of i.i.d. terms in ``[0, bound]`` with one-sided bounds at level ``alpha`` each.

    Indicators (``weighted`` false) get Clopper-Pearson bounds; importance
    weighted indicators the empirical Bernstein bounds of Maurer and Pontil
    (2009, Theorem 4), ``mean ± (sqrt(2 V ln(2/α) / T) + 7 B ln(2/α) / (3 (T - 1)))``
    with ``V`` the sample variance.
    """
    trials = terms.size
    mean = float(terms.mean())
    if not weighted:
        lower, upper = clopper_pearson(np.array([terms.sum()]), np.array([trials]), alpha)
        return Estimate(mean, float(lower[0]), float(upper[0]))
    if bound <= 0:
        return Estimate(0.0, 0.0, 0.0)
    log_term = math.log(2 / alpha)
    width = math.sqrt(2 * float(terms.var(ddof=1)) * log_term / trials) + 7 * bound * log_term / (3 * (trials - 1))
    return Estimate(mean, max(mean - width, 0.0), min(mean + width, 1.0))


def epsilon_from_bounds(more: Estimate, less: Estimate, delta: float) -> float:
    """``ln((lower(P_more(E)) - δ) / upper(P_less(E)))``; ``-inf`` when the lower bound does not
    clear δ (the event proves nothing), ``inf`` when the event is impossible under ``less``."""
    if more.lower <= delta:
        return -math.inf
    if less.upper <= 0:
        return math.inf
    return math.log((more.lower - delta) / less.upper)


def epsilon_lower_bound(
    hits_more: np.ndarray | int,
    trials_more: np.ndarray | int,
    hits_less: np.ndarray | int,
    trials_less: np.ndarray | int,
    delta: float,
    alpha: float,
) -> np.ndarray:
    """:func:`epsilon_from_bounds` of plain counts (Clopper-Pearson, ``alpha / 2`` per side)."""
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
    proposal_holders: int  # holders of the populations the draws came from (c: no importance sampling)
    event: str
    trials: int  # per population (measurement runs only)
    probability_without: float  # estimated P_D(E)
    probability_with: float  # estimated P_D'(E)
    epsilon_lower: float  # Monte Carlo lower bound (-inf: proves nothing)
    epsilon_exact: float | None  # exact ε of this pair at δ, when computable
    trials_needed: int | None = None  # runs per population that would make an uninformative bound say something


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

    @property
    def informative(self) -> bool:
        """Some event separated D from D' beyond δ: the bound says something."""
        return self.epsilon_lower > 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "violated": self.violated, "informative": self.informative}


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


def default_holders(params: TrieHHParameters, points: int, delta: float, include_empty: bool = False) -> np.ndarray:
    """``c = θ - 1`` (D' can reach θ, D cannot: the δ region), ``points - 1``
    geometric steps from θ to ``2θ/γ`` holders (where a round passes almost surely),
    and the ``c`` where the exact one-round ε at ``delta`` is largest.

    ``include_empty`` adds ``c = 0``, where D has no vote at all to hide the
    target's: the trie cannot tell (θ > 1), but a vote count can.
    """
    theta, rate = params.theta, params.sampling_rate
    top = min(params.n_users - 1, math.ceil(2 * theta / rate))
    sweep = np.geomspace(max(theta, 1), max(top, theta), max(points - 1, 1))
    start = [0] if include_empty else []
    worst = exact_round_epsilon(params, delta)[1]
    return np.unique(np.concatenate((start, [max(theta - 1, 0), worst], np.round(sweep)))).astype(np.int64)


def run_holders(params: TrieHHParameters, delta: float, observe: Observable) -> np.ndarray:
    """The whole-run sweep, kept short because every point costs thousands of real runs:
    ``θ - 1`` (the δ region), the ``c`` of the largest exact one-round ε, and for the
    server's view ``c = 0`` (no other vote to hide the target's)."""
    start = [0] if observe == "server" else []
    return np.unique([*start, max(params.theta - 1, 0), exact_round_epsilon(params, delta)[1]]).astype(np.int64)


def proposal_holders(params: TrieHHParameters, holders: int) -> int:
    """Holders of the proposal population: ``θ n / m`` (θ votes typical), or ``c`` itself when
    that is already at least as many (no tilt needed)."""
    return int(min(params.n_users - 1, max(holders, round(params.theta / params.sampling_rate))))


def _check_holders(holders: Sequence[int] | np.ndarray, params: TrieHHParameters) -> np.ndarray:
    values = np.unique(np.asarray(holders, dtype=np.int64))
    if values.size == 0 or values[0] < 0 or values[-1] >= params.n_users:
        raise InputError(f"holders: each must be in 0..{params.n_users - 1} (users of D), got {list(holders)}")
    return values


def _check_run(trials: int, delta: float, confidence: float) -> None:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 4:
        raise InputError(f"trials: must be an integer >= 4, got {trials!r}")
    if not 0 <= delta < 1:
        raise InputError(f"delta: must be in [0, 1), got {delta!r}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence: must be in (0, 1), got {confidence!r}")


def _round_pass_probabilities(params: TrieHHParameters, holders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(the target prefix reaches θ votes in one round) in D and in D'."""
    n, m, theta = params.n_users, params.batch_size, params.theta
    return hypergeom.sf(theta - 1, n, holders, m), hypergeom.sf(theta - 1, n + 1, holders + 1, m)


@dataclass(frozen=True)
class _Sampler:
    """One population's round vote count, drawn from a proposal and weighted back.

    ``weights[x]`` is ``P_holders(x) / P_proposal(x)`` for a vote count ``x``
    (1 everywhere without a tilt); ``bound`` its largest value where the
    prefix passes (``x >= θ``), which caps every weighted indicator.
    """

    n_users: int
    holders: int
    proposal: int
    batch_size: int
    theta: int
    weights: np.ndarray

    @classmethod
    def build(cls, params: TrieHHParameters, holders: int, with_target: bool) -> _Sampler:
        n_users = params.n_users + int(with_target)
        proposal = proposal_holders(params, holders) + int(with_target)
        holders += int(with_target)
        counts = np.arange(min(proposal, params.batch_size) + 1)
        if proposal == holders:
            weights = np.ones(counts.size)
        else:
            with np.errstate(divide="ignore"):
                weights = np.exp(
                    hypergeom.logpmf(counts, n_users, holders, params.batch_size)
                    - hypergeom.logpmf(counts, n_users, proposal, params.batch_size)
                )
        return cls(n_users, holders, proposal, params.batch_size, params.theta, np.nan_to_num(weights))

    @property
    def weighted(self) -> bool:
        return self.proposal != self.holders

    @property
    def bound(self) -> float:
        passing = self.weights[self.theta :]
        return float(passing.max()) if passing.size else 0.0

    def draw(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        return rng.hypergeometric(self.proposal, self.n_users - self.proposal, self.batch_size, trials)


# one round --------------------------------------------------------------------
def audit_round(
    params: TrieHHParameters,
    delta: float,
    trials: int,
    seed: int,
    holders: Sequence[int] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    progress: Progress | None = None,
) -> TrieHHAudit:
    """Audit one round: ``trials`` vote counts per population and ``c``, importance sampled.

    Both events are tried for every ``c`` ("the prefix is added", which D'
    favours, and "it is not", which D favours); each population's pass
    probability gets a lower and an upper bound, under one Bonferroni split.
    """
    _check_run(trials, delta, confidence)
    started = time.perf_counter()
    swept = default_holders(params, 12, delta) if holders is None else _check_holders(holders, params)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7201]))
    alpha = (1 - confidence) / (4 * swept.size)
    p_without, p_with = _round_pass_probabilities(params, swept)
    exact = hockey_stick_epsilon(np.stack([p_with, 1 - p_with], 1), np.stack([p_without, 1 - p_without], 1), delta)
    events = []
    for c, exact_c in zip(swept.tolist(), exact.tolist(), strict=True):
        estimates = []
        for with_target in (False, True):
            sampler = _Sampler.build(params, c, with_target)
            votes = sampler.draw(rng, trials)
            terms = np.where(votes >= params.theta, sampler.weights[votes], 0.0)
            estimates.append(estimate_probability(terms, sampler.bound, alpha, sampler.weighted))
            if progress is not None:
                progress(trials)
        without, with_ = estimates
        added = epsilon_from_bounds(with_, without, delta)
        kept_out = epsilon_from_bounds(without.complement(), with_.complement(), delta)
        event, p0, p1 = (
            ("prefix added (>= θ votes)", without.mean, with_.mean)
            if added >= kept_out
            else ("prefix not added", 1 - without.mean, 1 - with_.mean)
        )
        events.append(EventAudit(c, proposal_holders(params, c), event, trials, p0, p1, max(added, kept_out), exact_c))
    return _audit("round", "trie", params, delta, round_guarantee(params), confidence, events, started)


def _audit(
    scope: str,
    observe: str,
    params: TrieHHParameters,
    delta: float,
    claimed: float,
    confidence: float,
    events: list[EventAudit],
    started: float,
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
    items = np.full(n_users, -1, dtype=np.int32)
    items[:holding] = ids[0]
    return SingleItemShard(vocabulary, 0, items), codec


def run_trajectories(
    params: TrieHHParameters, holders: int, with_target: bool, seeds: np.ndarray, progress: Progress | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Complete runs of the real server and client code, one per seed.

    The population is D (``params.n_users`` users, ``holders`` of them holding
    the target's item) or, ``with_target``, D' (the target user added; the
    server then samples from ``n + 1`` users with the same m and θ).
    Returns each run's trie depth along the target's path (the only prefixes
    are the target's, so the trie is one path) and its raw vote counts per
    round ``[runs, L]`` (-1 after the run stopped), which are the sampled
    holders while the path is alive.
    """
    shard, codec = _target_population(params, holders, with_target)
    run_params = TrieHHParameters(shard.n_users, params.max_rounds, params.theta, params.batch_size)
    seeds = np.asarray(seeds)
    depths = np.zeros(seeds.size, dtype=np.int64)
    votes = np.full((seeds.size, params.max_rounds), -1, dtype=np.int64)
    for index, seed in enumerate(seeds.tolist()):
        server = TrieHHServer(run_params, codec, seed)
        randomness = KeyedRandomness(seed)
        while (request := server.next_request()) is not None:
            server.absorb(respond(request, shard, randomness))
        trace = server.trace
        depths[index] = len(trace[-1].values["trie_size_per_depth"]) if trace else 0
        votes[index, : len(trace)] = [record.server_view["votes_received"] for record in trace]
        if progress is not None:
            progress(1)
    return depths, votes


def simulate_runs(
    params: TrieHHParameters, holders: int, with_target: bool, seeds: np.ndarray, observe: Observable = "trie"
) -> np.ndarray:
    """One outcome per seed: the trie depth, or (``observe="server"``) the total votes received."""
    depths, votes = run_trajectories(params, holders, with_target, seeds)
    return depths if observe == "trie" else np.where(votes > 0, votes, 0).sum(axis=1)


def audit_run(
    params: TrieHHParameters,
    delta: float,
    trials: int,
    seed: int,
    holders: Sequence[int] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    observe: Observable = "trie",
    progress: Progress | None = None,
) -> TrieHHAudit:
    """Audit a whole run with the real protocol code, ``trials`` runs per population and ``c``.

    ``observe="trie"`` looks at what Theorem 1 protects (the trie: here the
    depth reached along the target's path), importance sampled, and is held
    against the run's guarantee; ``observe="server"`` looks at the total
    votes received, which the server sees and the theorem does not cover.
    """
    _check_run(trials, delta, confidence)
    if observe not in OBSERVABLES:
        raise InputError(f"observe: got {observe!r}; allowed: {list(OBSERVABLES)}")
    if params.max_rounds < 2:
        raise InputError(
            f"max_rounds: the run audit needs an item of >= 1 symbol, i.e. L >= 2, got {params.max_rounds}"
        )
    started = time.perf_counter()
    swept = run_holders(params, delta, observe) if holders is None else _check_holders(holders, params)
    events = []
    for index, c in enumerate(swept.tolist()):
        if observe == "trie":
            samplers = [_Sampler.build(params, c, with_target) for with_target in (False, True)]
        drawn = proposal_holders(params, c) if observe == "trie" else c  # D's holders in the runs
        runs = [
            run_trajectories(params, drawn, with_target, _seeds(seed, index, with_target, trials), progress)
            for with_target in (False, True)
        ]
        if observe == "trie":
            events.append(_best_depth_event(c, samplers, runs, delta, confidence, swept.size, params))
        else:
            outcomes = [np.where(votes > 0, votes, 0).sum(axis=1) for _, votes in runs]
            events.append(_best_vote_event(c, outcomes, trials // 2, delta, (1 - confidence) / swept.size))
    return _audit("run", observe, params, delta, params.epsilon, confidence, events, started)


def _seeds(seed: int, index: int, with_target: bool, trials: int) -> np.ndarray:
    """Independent run seeds per (audit seed, swept c, population)."""
    return np.random.SeedSequence([seed, 0x52554E, index, int(with_target)]).generate_state(trials, np.uint64)


def _depth_terms(sampler: _Sampler, depths: np.ndarray, votes: np.ndarray, depth: int) -> tuple[np.ndarray, float]:
    """Weighted indicators of "the path reached ``depth``": its first ``depth`` rounds each
    passed, weighted by the likelihood ratio of their vote counts; and their bound ``B^depth``."""
    reached = depths >= depth
    passing = np.clip(votes[:, :depth], 0, sampler.weights.size - 1)
    weights = np.prod(sampler.weights[passing], axis=1)
    return np.where(reached, weights, 0.0), sampler.bound**depth


def _best_depth_event(
    holders: int,
    samplers: list[_Sampler],
    runs: list[tuple[np.ndarray, np.ndarray]],
    delta: float,
    confidence: float,
    swept: int,
    params: TrieHHParameters,
) -> EventAudit:
    """Measure, on every run, the depth event that the exact depth distributions say
    separates D from D' most at δ ("depth >= j" or "depth < j").

    Choosing the event from the model, before looking at the runs, keeps
    every run for the measurement; the error is split over the swept c and
    the four bounds of each measured event.
    """
    alpha = (1 - confidence) / (4 * swept)
    depth, reached_favoured = _exact_best_depth_event(params, holders, delta)
    without, with_ = (
        estimate_probability(*_depth_terms(sampler, depths, votes, depth), alpha, sampler.weighted)
        for sampler, (depths, votes) in zip(samplers, runs, strict=True)
    )
    if reached_favoured:
        event, more, less = f"trie depth along the target's path >= {depth}", with_, without
    else:
        event, more, less = f"trie depth along the target's path < {depth}", without.complement(), with_.complement()
    bound = epsilon_from_bounds(more, less, delta)
    needed = None
    if bound <= 0 and samplers[0].weighted:
        needed = _trials_needed(samplers, runs, depth, alpha, delta, reached_favoured)
    return EventAudit(
        holders=holders,
        proposal_holders=samplers[0].proposal,
        event=event,
        trials=runs[0][0].size,
        probability_without=without.mean if reached_favoured else 1 - without.mean,
        probability_with=with_.mean if reached_favoured else 1 - with_.mean,
        epsilon_lower=bound,
        epsilon_exact=_exact_run_epsilon(params, holders, delta),
        trials_needed=needed,
    )


def _exact_best_depth_event(params: TrieHHParameters, holders: int, delta: float) -> tuple[int, bool]:
    """The single event on the depth with the largest exact ε bound at δ: (j, "depth >= j" or not)."""
    p_without, p_with = (float(p[0]) for p in _round_pass_probabilities(params, np.array([holders])))
    best = (-math.inf, 1, True)
    for depth in range(1, params.max_rounds + 1):
        reach, reach_with = p_without**depth, p_with**depth
        for favoured, more, less in ((True, reach_with, reach), (False, 1 - reach, 1 - reach_with)):
            score = (
                math.log((more - delta) / less)
                if more > delta and less > 0
                else (math.inf if more > delta else -math.inf)
            )
            if score > best[0]:
                best = (score, depth, favoured)
    return best[1], best[2]


def _trials_needed(
    samplers: list[_Sampler],
    runs: list[tuple[np.ndarray, np.ndarray]],
    depth: int,
    alpha: float,
    delta: float,
    reached_favoured: bool,
) -> int | None:
    """About how many runs per population would make this event's bound reach half its
    point estimate, from the spread of the weighted terms seen (None: nothing to go on)."""
    moments = []
    for sampler, (depths, votes) in zip(samplers, runs, strict=True):
        terms, bound = _depth_terms(sampler, depths, votes, depth)
        mean = float(terms.mean())
        if mean <= 0 or not reached_favoured:
            return None
        moments.append((mean, float(terms.var(ddof=1)), bound))
    (p_less, _, _), (p_more, _, _) = moments
    target = 0.5 * math.log(max(p_more - delta, 1e-300) / p_less)
    if target <= 0:
        return None
    log_term = math.log(2 / alpha)
    for doubling in range(30):
        trials = 1000 * 2**doubling
        widths = [
            math.sqrt(2 * var * log_term / trials) + 7 * bound * log_term / (3 * trials) for _, var, bound in moments
        ]
        if p_more - widths[1] > delta and math.log((p_more - widths[1] - delta) / (p_less + widths[0])) >= target:
            return trials
    return None


def _threshold_events(without: np.ndarray, with_: np.ndarray) -> list[tuple[str, Callable[..., np.ndarray], bool]]:
    """Candidate events "outcome >= t" (D' favoured) and "outcome < t" (D favoured)."""
    values = np.unique(np.concatenate([without, with_]))
    events = []
    for t in values[1:].tolist() if values.size > 1 else values.tolist():
        events.append((f">= {t}", lambda x, t=t: x >= t, True))
        events.append((f"< {t}", lambda x, t=t: x < t, False))
    return events


def _best_vote_event(holders: int, outcomes: list[np.ndarray], select: int, delta: float, alpha: float) -> EventAudit:
    """The server's view: a threshold on the total votes, chosen on the first ``select`` runs."""
    without, with_ = outcomes
    best = None
    for name, indicator, favours_with in _threshold_events(without[:select], with_[:select]):
        hits0, hits1 = int(indicator(without[:select]).sum()), int(indicator(with_[:select]).sum())
        more, less = (hits1, hits0) if favours_with else (hits0, hits1)
        score = float(epsilon_lower_bound(more, select, less, select, delta, alpha))
        if best is None or score > best[0]:
            best = (score, name, indicator, favours_with)
    assert best is not None  # the runs' outcomes hold a value: there is an event
    _, name, indicator, favours_with = best
    measured = without.size - select
    hits0, hits1 = int(indicator(without[select:]).sum()), int(indicator(with_[select:]).sum())
    more, less = (hits1, hits0) if favours_with else (hits0, hits1)
    return EventAudit(
        holders=holders,
        proposal_holders=holders,
        event=f"total votes received {name}",
        trials=measured,
        probability_without=hits0 / measured,
        probability_with=hits1 / measured,
        epsilon_lower=float(epsilon_lower_bound(more, measured, less, measured, delta, alpha)),
        epsilon_exact=None,
    )


def _exact_run_epsilon(params: TrieHHParameters, holders: int, delta: float) -> float:
    """Exact ε of the trie depth for one ``c``: rounds sample independently, so
    ``P(depth >= j) = p^j`` with p the one-round pass probability."""
    p_without, p_with = _round_pass_probabilities(params, np.array([holders]))
    depths = np.arange(params.max_rounds + 1)

    def depth_pmf(p: float) -> np.ndarray:
        reach = p**depths
        return reach - np.append(reach[1:], 0.0)

    return float(hockey_stick_epsilon(depth_pmf(float(p_with[0])), depth_pmf(float(p_without[0])), delta)[0])
