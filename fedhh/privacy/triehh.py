"""TrieHH's privacy: central (ε, δ)-DP from sampling and thresholding alone.

Source: Zhu et al., "Federated Heavy Hitters Discovery with Differential
Privacy" (AISTATS 2020), Theorem 1 and Corollaries 1-2, with the parameter
choice of the authors' simulation code (see ``shared/REFERENCE.md``):

* ``delta = (θ - 2) / ((θ - 3) θ!)``
* ``epsilon = L ln(1 / (1 - θ γ))`` with ``γ = m / n``

and, from a target, θ is the smallest integer with
``((θ - 3) / (θ - 2)) θ! >= 1 / delta`` and ``θ >= e^(ε/L) - 1``, then
``m = floor(n (e^(ε/L) - 1) / (θ e^(ε/L)))``.  :func:`solve_triehh` follows
this rule wherever ``e^(ε/L) - 1 <= θ``; above that (large per-round
budgets) it keeps θ and caps m instead (see its docstring).  Algorithm 3
(several items per user, one sampled by local frequency) keeps the same
guarantee (Theorem 2).

The guarantee is user-level under add/remove adjacency (the paper's
Definition 1: D' is D plus all the items of one user), for the *output
trie*: the set of prefixes that reached θ votes, round by round.  It does
not cover the raw vote histogram the server aggregates (including counts
below θ), nor the vote counts or per-round totals a run document may show.

Conditions of the theorem (all are checked; parameters breaking any of them
carry no guarantee, and the solver never returns them):

* ``θ >= 4``: δ's formula divides by ``θ - 3``;
* ``θ γ < 1``: otherwise ``ln(1 / (1 - θ γ))`` is undefined;
* ``γ (θ + 1) <= 1``, i.e. ``θ >= e^(ε/L) - 1`` once ε is written out: the
  paper's parameter choice (Corollary 2) and the authors' code (the second
  loop of their ``_set_theta``) impose it.  The seed lost the theorem's
  exact wording, so it is kept as a condition: the guarantee is only claimed
  where its authors stated it.  It binds only at large per-round budgets
  (``ε/L > ln(θ + 1)``);
* ``θ <= m <= n``: fewer sampled users than θ can never grow the trie.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from .report import EVALUATION_NOT_COVERED, NO_GUARANTEE, PUBLIC_INPUTS, USER_LEVEL, Coverage, PrivacyReport
from .validation import check_delta, check_epsilon, check_positive_int, check_users

MODEL = "central, user-level, sampling+threshold"
MIN_THETA = 4
COVERAGE = Coverage(
    covered=(
        "heavy_hitters[].item, frequent_prefixes: the output trie, which Theorem 1 protects",
        "rounds[] (sampled_users, prefixes_added, items_completed, trie_size_per_depth): functions of "
        "the trie round by round and of the public batch size",
        PUBLIC_INPUTS,
    ),
    not_covered=(
        "heavy_hitters[].support: the vote counts of accepted prefixes are outside Theorem 1's statement "
        "(the exact one-prefix computation in docs/privacy.md finds no extra loss, but no theorem covers "
        "them); drop them before publishing under the guarantee",
        "the server's raw vote totals (sub-threshold votes included): never published, kept in the "
        "server's log; the server itself sees them unless an aggregator thresholds first",
        EVALUATION_NOT_COVERED,
    ),
)


class PrivacyTargetError(InputError):
    """A privacy target or parameter set outside what the theorem covers."""


def triehh_log_delta(theta: int) -> float:
    """``ln δ`` of Theorem 1 for threshold θ (> 3), exact where δ itself underflows."""
    if theta < MIN_THETA:
        raise PrivacyTargetError(f"theta: the theorem needs θ >= {MIN_THETA}, got {theta}")
    return math.log(theta - 2) - math.log(theta - 3) - math.lgamma(theta + 1)


def triehh_delta(theta: int) -> float:
    """δ of Theorem 1 for threshold θ (> 3), never rounded down to 0.

    From θ = 171 on (targets below about 1e-308) δ is smaller than the
    smallest normal double: ``exp`` rounds it to a subnormal with few
    significant bits, possibly below the true value, and from θ = 178 on
    (targets below about 3e-323) to 0, which would read as pure DP.  There
    the next double up is reported: a valid upper bound (a guarantee at δ
    holds at any larger δ), and at least 5e-324.  The exact ``ln δ`` is in
    the report's parameters (``log_delta``).
    """
    log_delta = triehh_log_delta(theta)
    delta = math.exp(log_delta)
    return delta if delta >= sys.float_info.min else math.nextafter(delta, math.inf)


def triehh_epsilon(n_users: int, batch_size: int, theta: int, max_rounds: int) -> float:
    """ε of Theorem 1 over ``max_rounds`` rounds (requires θ m / n < 1)."""
    rate = theta * batch_size / n_users
    if rate >= 1:
        raise PrivacyTargetError(
            f"θ·γ = {theta} × {batch_size}/{n_users} = {rate:.4g} >= 1: no finite ε; "
            "lower the batch size or the threshold"
        )
    return -max_rounds * math.log1p(-rate)


@dataclass(frozen=True)
class TrieHHParameters:
    """A TrieHH configuration with the guarantee it carries."""

    n_users: int
    max_rounds: int
    theta: int
    batch_size: int

    def __post_init__(self) -> None:
        check_users(self.n_users)
        check_positive_int(self.max_rounds, "max_rounds")
        check_positive_int(self.theta, "theta")
        if not 1 <= self.batch_size <= self.n_users:
            raise PrivacyTargetError(f"batch_size: must be in 1..n_users = {self.n_users}, got {self.batch_size}")

    @property
    def sampling_rate(self) -> float:
        return self.batch_size / self.n_users

    def theorem_violations(self) -> list[str]:
        """The conditions of Theorem 1 these parameters break (empty when it holds).

        See the module docstring for where each condition comes from.
        """
        problems = []
        if self.theta < MIN_THETA:
            problems.append(f"θ = {self.theta} < {MIN_THETA}")
        if self.theta * self.sampling_rate >= 1:
            problems.append(f"θ·γ = {self.theta * self.sampling_rate:.4g} >= 1")
        elif self.sampling_rate * (self.theta + 1) > 1:
            problems.append(
                f"γ·(θ + 1) = {self.sampling_rate * (self.theta + 1):.4g} > 1 (equivalently θ < e^(ε/L) - 1)"
            )
        if self.batch_size < self.theta:
            problems.append(f"m = {self.batch_size} < θ = {self.theta}")
        return problems

    @property
    def epsilon(self) -> float:
        """ε of Theorem 1, ``inf`` when the theorem does not apply."""
        if self.theorem_violations():
            return math.inf
        return triehh_epsilon(self.n_users, self.batch_size, self.theta, self.max_rounds)

    @property
    def delta(self) -> float:
        """δ of Theorem 1, ``1`` when the theorem does not apply."""
        return 1.0 if self.theorem_violations() else triehh_delta(self.theta)

    def report(self) -> PrivacyReport:
        """The guarantee, or ``(inf, 1)`` with the broken conditions named in ``model``."""
        violations = self.theorem_violations()
        return PrivacyReport(
            model=MODEL if not violations else f"{NO_GUARANTEE}: outside Theorem 1 ({'; '.join(violations)})",
            epsilon=self.epsilon,
            delta=self.delta,
            mechanism="TrieHH: uniform sampling of m users without replacement per round, "
            "prefixes kept only with >= θ votes, no added noise",
            method="Zhu et al. 2020, Theorem 1 (Theorem 2 for several items per user): "
            "ε = L ln(1/(1 - θ m/n)), δ = (θ-2)/((θ-3) θ!)",
            adjacency=USER_LEVEL,
            parameters={
                "n_users": self.n_users,
                "batch_size": self.batch_size,
                "theta": self.theta,
                "max_rounds": self.max_rounds,
                "sampling_rate": self.sampling_rate,
                **({} if violations else {"log_delta": triehh_log_delta(self.theta)}),
            },
            coverage=COVERAGE,
        )


GUARANTEE_PARAMETERS = ("n_users", "max_rounds", "theta", "batch_size")


def triehh_guarantee(parameters: Mapping[str, Any]) -> tuple[float, float]:
    """(ε, δ) of Theorem 1 derived again from a report's ``parameters`` (n, L, θ, m), by the code
    that stated them: a privacy ledger checks every stored run against it."""
    values = []
    for key in GUARANTEE_PARAMETERS:
        value = parameters.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{key}: must be an integer, got {value!r}")
        values.append(value)
    n_users, max_rounds, theta, batch_size = values
    params = TrieHHParameters(n_users, max_rounds, theta, batch_size)
    return params.epsilon, params.delta


def triehh_threshold(delta: float) -> int:
    """θ for a target δ: the smallest integer θ >= 4 with ((θ-3)/(θ-2)) θ! >= 1/δ (it does not depend on n)."""
    theta = MIN_THETA
    log_target = -math.log(delta)
    while math.log(theta - 3) - math.log(theta - 2) + math.lgamma(theta + 1) < log_target:
        theta += 1
    return theta


def solve_triehh(n_users: int, epsilon: float, delta: float, max_rounds: int) -> TrieHHParameters:
    """θ and m meeting an (ε, δ) target, or :class:`PrivacyTargetError` with the numbers.

    θ is the smallest threshold that meets δ, and m the largest batch with
    ``θ γ <= (e^(ε/L) - 1) / e^(ε/L)`` (spending at most ε) and
    ``γ (θ + 1) <= 1`` (the theorem's sampling limit).  While
    ``e^(ε/L) - 1 <= θ`` the first bound is the tighter and this is the
    authors' choice exactly.  Beyond it the authors raise θ to
    ``e^(ε/L) - 1``, so a *looser* target needs more users (about
    ``e^(2ε/L)``) and eventually cannot be met at all; here θ stays at the δ
    minimum and m stops at ``n / (θ + 1)``, which spends
    ``L ln(θ + 1) < ε``, meets every condition, and asks less of an item's
    frequency (about ``θ²/n`` instead of ``e^(2ε/L)/n``).  A target that
    would need ``m < θ`` is refused.
    """
    check_users(n_users)
    check_epsilon(epsilon)
    check_delta(delta)
    check_positive_int(max_rounds, "max_rounds")
    if delta * n_users >= 1:
        raise PrivacyTargetError(
            f"privacy.delta: δ = {delta:g} is not below 1/n = 1/{n_users:,} = {1 / n_users:.3g}, where "
            "(ε, δ)-DP means nothing (publishing one random user's data meets it); "
            f"choose δ well below 1/n, e.g. 1/n² = {1 / n_users**2:.3g}"
        )
    theta = triehh_threshold(delta)
    spend = round_spend(epsilon, max_rounds)
    batch_size = int(triehh_batch_size(n_users, theta, spend))
    if batch_size < theta:
        needed = theta * max(theta / spend, theta + 1) if spend > 0 else math.inf
        raise PrivacyTargetError(
            f"cannot meet ε = {epsilon:g}, δ = {delta:g} with n = {n_users:,} users and "
            f"L = {max_rounds} rounds: the threshold is θ = {theta} but the batch size "
            f"would be m = floor(n min((e^(ε/L) - 1) / (θ e^(ε/L)), 1/(θ + 1))) = {batch_size} < θ. "
            f"Need {_count_text(needed)} users, "
            "or a larger ε / δ, or fewer rounds (shorter max_length or larger unit_size)"
        )
    return TrieHHParameters(n_users, max_rounds, theta, batch_size)


def round_spend(epsilon: float, max_rounds: int) -> float:
    """The largest θ·γ a round may spend within ε over ``max_rounds`` rounds:
    ``(e^(ε/L) - 1) / e^(ε/L) = 1 - e^(-ε/L)``, in the form that neither overflows
    for a huge ε nor rounds to 0 for a tiny one."""
    return -math.expm1(-epsilon / max_rounds)


def triehh_batch_size(n_users: int | np.ndarray, theta: int, spend: float) -> np.ndarray:
    """The solver's batch size m for ``n_users`` (a number or an array of them): the largest m with
    ``θ m / n <= spend`` (:func:`round_spend`) and ``m (θ + 1) <= n`` (the theorem's sampling
    limit).  One formula for :func:`solve_triehh` and for the planners that evaluate it at many n."""
    users = np.asarray(n_users, dtype=np.int64)
    return np.minimum(np.floor(users * spend / theta).astype(np.int64), users // (theta + 1))


def _count_text(count: float) -> str:
    """A needed population size, exact while it is a sensible number."""
    if not math.isfinite(count):
        return "more than 1e308"
    return f"at least {math.ceil(count):,}" if count < 1e15 else f"at least about {count:.3g}"


def worst_case_discovery_rate(
    holders: np.ndarray | Sequence[int] | int, n_users: int, batch_size: int, theta: int, length: int
) -> np.ndarray:
    """Probability that an item held by ``holders`` users, sharing no prefix with
    any other item, is discovered in ``length`` rounds (Proposition 1).

    Each round is a hypergeometric draw of m of n with ``holders`` successes;
    the item needs >= θ of them in every one of its ``length`` rounds.
    """
    return hypergeometric_survival(theta - 1, n_users, np.asarray(holders), batch_size) ** length


def hypergeometric_survival(
    k: np.ndarray | int, total: np.ndarray | int, successes: np.ndarray | int, draws: np.ndarray | int
) -> np.ndarray:
    """``P[X > k]`` for ``X`` the successes among ``draws`` drawn without replacement from
    ``total`` of which ``successes`` succeed (broadcasting): ``scipy.stats.hypergeom.sf(k,
    total, successes, draws)`` bit for bit, from the Boost function scipy.stats evaluates it
    with (a ufunc of scipy.special), and 1 below the support, 0 from its top, as scipy.stats
    sets them.  Without scipy.stats's import, which would be most of a small sweep's time in
    each of its workers (and every device imports this module)."""
    try:
        from scipy.special._ufuncs import _hypergeom_sf
    except ImportError:  # a scipy without it (the ufunc is not public)
        from scipy.stats import hypergeom

        return np.asarray(hypergeom.sf(k, total, successes, draws), dtype=np.float64)
    k, total, successes, draws = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.int64) for a in (k, total, successes, draws))
    )
    survival = np.where(k < np.maximum(draws - (total - successes), 0), 1.0, 0.0)
    inside = (k >= draws - (total - successes)) & (k >= 0) & (k < np.minimum(successes, draws))
    survival[inside] = _hypergeom_sf(k[inside], successes[inside], draws[inside], total[inside])
    return survival
