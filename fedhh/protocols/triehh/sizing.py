"""``fedhh size triehh``: the smallest population in which TrieHH finds an item of a given share.

From the worst-case discovery rate ``P(Hypergeom(n, fn, m) >= θ)^L`` behind
``fedhh plan triehh`` (Proposition 1: an item sharing no prefix with any
other value), with θ and m solved from (ε, δ, n, L).  The rate is not
monotone in ``n`` step by step: θ is fixed but m and the item's holders
``round(f n)`` move in integer steps.  So the answer is the smallest ``n``
such that the bound meets the target at ``n`` *and at every larger
population* (the rate only drops between the population sizes where m or
the holders grow, so the scan checks those points, over a window of several
such steps above and below the first crossing; beyond it the rate's lower
envelope grows with ``n``).  The analysis at ``n`` and at ``n - 1%`` is part
of the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import InputError
from ...planning.commands import Option, Options
from ...planning.sizing import (
    MAX_USERS,
    PRECISION,
    OnStep,
    SizeAnswer,
    Sizing,
    bracket,
    check_share,
    forbidden,
    required,
)
from ...privacy.triehh import hypergeometric_survival, round_spend, triehh_batch_size, triehh_threshold
from ...privacy.validation import check_delta, check_epsilon, check_positive_int
from .plan import plan_triehh

SCAN_STEPS = 8  # TrieHH: holder and batch steps scanned each side of the first crossing
_SCAN_CHUNK = 1 << 20

TRIEHH_DEFINITION = (
    "smallest n at which the worst-case bound (Proposition 1) meets the target, and keeps meeting it at every larger n"
)


@dataclass(frozen=True)
class _TrieHHFamily:
    """θ (fixed by δ) and the batch fraction, so that m and the holders of many n are vectorised."""

    frequency: float
    epsilon: float
    delta: float
    max_rounds: int
    theta: int

    @property
    def spend(self) -> float:
        return round_spend(self.epsilon, self.max_rounds)

    def batch_sizes(self, users: np.ndarray) -> np.ndarray:
        """m as :func:`~fedhh.privacy.triehh.solve_triehh` chooses it (the smaller of the ε bound
        and ``n / (θ + 1)``)."""
        return triehh_batch_size(users, self.theta, self.spend)

    def holders(self, users: np.ndarray) -> np.ndarray:
        return np.rint(self.frequency * users).astype(np.int64)

    def rates(self, users: np.ndarray) -> np.ndarray:
        """The worst-case discovery rate at each population size (0 where the target cannot be met)."""
        users = np.asarray(users, dtype=np.int64)
        batch = self.batch_sizes(users)
        feasible = batch >= self.theta
        rate = np.zeros(users.shape)
        if feasible.any():
            hit = hypergeometric_survival(
                self.theta - 1, users[feasible], self.holders(users[feasible]), batch[feasible]
            )
            rate[feasible] = hit**self.max_rounds
        return rate

    def step(self) -> int:
        """Users between consecutive changes of m or of the holders (the larger of the two)."""
        per_batch = min(self.theta / self.spend, self.theta + 1)
        return int(math.ceil(max(1 / self.frequency, per_batch)))

    def smallest_feasible(self) -> int:
        """The smallest population in which the privacy target can be met at all (θ <= m).

        m grows with n, so this is a bisection; a target that needs more than
        ``MAX_USERS`` users, or a population where δ is not below ``1/n``, is refused.
        """
        if self.batch_sizes(np.array([MAX_USERS]))[0] < self.theta:
            raise InputError(
                f"--epsilon / --delta / --max-rounds: ε = {self.epsilon:g}, δ = {self.delta:g} over "
                f"L = {self.max_rounds} rounds cannot be met with up to {MAX_USERS:.0e} users (θ = {self.theta} "
                "votes need a batch of at least θ users); ask for a larger ε or δ, or fewer rounds"
            )
        low, high = 0, MAX_USERS  # low cannot meet it, high can
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if self.batch_sizes(np.array([middle]))[0] >= self.theta else (middle, high)
        self.check_delta(high, "the privacy target")
        return high

    def check_delta(self, users: int, what: str) -> None:
        """δ must be below ``1/n`` where the answer lies (as :func:`~fedhh.privacy.triehh.solve_triehh` requires)."""
        if self.delta * users >= 1:
            raise InputError(
                f"--delta: {what} needs n = {users:,} users, where δ = {self.delta:g} is not below "
                f"1/n = {1 / users:.3g} and (ε, δ)-DP means nothing; choose δ well below 1/n, "
                f"e.g. 1/n² = {1 / users**2:.3g}"
            )


def size_triehh(frequency: float, discovery: float, epsilon: float, delta: float, max_rounds: int) -> SizeAnswer:
    """The smallest n for which the worst-case bound finds an item of share ``frequency`` with
    probability ``discovery`` (see the module docstring for the exact definition)."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    check_delta(delta, "--delta")
    check_positive_int(max_rounds, "--max-rounds")
    family = _TrieHHFamily(frequency, epsilon, delta, max_rounds, triehh_threshold(delta))
    smallest = family.smallest_feasible()

    def meets(users: int) -> bool:
        return bool(family.rates(np.array([users]))[0] >= discovery)

    low, high = bracket(meets, smallest, smallest, "--frequency / --discovery")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if meets(middle) else (middle, high)
    users = _last_failure_near(family, discovery, high) + 1
    family.check_delta(users, f"finding an item of share {frequency:g} with probability {discovery:g}")
    below = int(users * (1 - PRECISION))
    parameters = plan_triehh(users, epsilon, delta, max_rounds, (frequency,))
    return SizeAnswer(
        "triehh",
        users,
        frequency,
        discovery,
        float(family.rates(np.array([users]))[0]),
        below,
        float(family.rates(np.array([below]))[0]),
        TRIEHH_DEFINITION,
        {key: parameters[key] for key in ("theta", "batch_size", "sampling_rate", "epsilon", "delta", "max_rounds")},
    )


def _last_failure_near(family: _TrieHHFamily, discovery: float, crossing: int) -> int:
    """The largest population below the target within ``SCAN_STEPS`` steps of m or of the holders
    around ``crossing`` (widened until the window's top part meets the target throughout).

    Between two population sizes where m or the holders grow, the rate only falls (more users,
    the same batch and holders), so a failure shows at the last size before each growth: only
    those are evaluated.
    """
    width = SCAN_STEPS * family.step()
    while True:
        low, high = max(crossing - width, 1), crossing + width
        failures = [crossing - 1]  # the bisection saw it fail
        for start in range(low, high + 1, _SCAN_CHUNK):
            users = np.arange(start, min(start + _SCAN_CHUNK, high + 1) + 1, dtype=np.int64)
            batch, holders = family.batch_sizes(users), family.holders(users)
            ends = users[:-1][(np.diff(batch) != 0) | (np.diff(holders) != 0)]
            ends = np.append(ends, users[-2]) if ends.size == 0 or ends[-1] != users[-2] else ends
            failing = ends[family.rates(ends) < discovery]
            if failing.size:
                failures.append(int(failing.max()))
        last = max(failures)
        if last < crossing + width // 2:
            return last
        width *= 2


def _check_triehh_analytic(args: Options, mode: str) -> None:
    required(args, ("delta", "max_rounds"), mode)
    forbidden(args, ("top_k",), mode + " (TrieHH has no k)")


def _check_triehh_recall(args: Options, mode: str) -> None:
    forbidden(args, ("max_rounds",), mode + " (L comes from the config's protocol.max_length)")


def _triehh_answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_triehh(args.frequency, args.discovery, args.epsilon, args.delta, args.max_rounds)


TRIEHH_SIZING = Sizing(
    "TrieHH",
    200,  # --verify: TrieHH's runs cost a few ms each
    (
        Option("--delta", "target δ in (0, 1)", float),
        Option("--max-rounds", "L: rounds, i.e. symbols of the longest item plus the end symbol", int),
        Option("--top-k", "K of recall@K (with --recall and --population)", int),
    ),
    _triehh_answer,
    lambda args, answer: {"privacy": (args.epsilon, args.delta, args.max_rounds)},
    check_analytic=_check_triehh_analytic,
    check_recall=_check_triehh_recall,
)
