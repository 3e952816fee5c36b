"""``fedhh size``: the smallest population that finds an item of a given share with a given probability.

The deployment question: an item held by a share ``f`` of the users must be
found with probability at least ``p`` at a privacy target.  How many users
does that take?  Each protocol answers from its analysis of an item sharing
no prefix with any other value (TrieHH's Proposition 1 setting; for the LDP
protocols, no other value competes for its places either):

* **TrieHH**: the worst-case discovery rate ``P(Hypergeom(n, fn, m) >= θ)^L``
  behind ``fedhh plan triehh``, with θ and m solved from (ε, δ, n, L);
* **PEM**: the design ``fedhh plan pem`` chooses for ``n``, and the item's
  chance to survive every level by the order-statistics model
  (:mod:`fedhh.protocols.item_discovery`);
* **TreeHist**: the levels ``fedhh plan treehist`` describes, the same model
  with threshold pruning and the final full-value pass.

The discovery rate is not monotone in ``n`` step by step: θ is fixed but m
and the item's holders ``round(f n)`` move in integer steps, and PEM's
optimizer changes its design with ``n``.  So the answer is defined as:

* TrieHH: the smallest ``n`` such that the bound meets the target at ``n``
  *and at every larger population* (the rate only drops between the
  population sizes where m or the holders grow, so the scan checks those
  points, over a window of several such steps above and below the first
  crossing; beyond it the rate's lower envelope grows with ``n``);
* PEM and TreeHist: a population ``n`` where the analysis meets the target
  while ``n`` less 1% does not (bisection over ``log n`` to 1%).

Either way, the analysis at ``n`` and at ``n - 1%`` is part of the answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..protocols.item_discovery import item_discovery
from ..protocols.prefix_encoding import ValueSpace
from .pem import pem_search_parameters, plan_pem
from .plan import plan_triehh
from .treehist import treehist_parameters
from ..privacy.triehh import hypergeometric_survival, round_spend, triehh_batch_size, triehh_threshold
from ..privacy.validation import check_delta, check_epsilon, check_positive_int

MAX_USERS = 10**12  # beyond this, the answer is "not reachable"
PRECISION = 0.01  # the LDP answers: n meets the target, n less this share does not
SCAN_STEPS = 8  # TrieHH: holder and batch steps scanned each side of the first crossing
_SCAN_CHUNK = 1 << 20

TRIEHH_DEFINITION = (
    "smallest n at which the worst-case bound (Proposition 1) meets the target, and keeps meeting it "
    "at every larger n"
)
COLLISION_ORACLES = ("flh", "cms", "hcms", "count-mean", "count-median", "count-min", "count-sketch")
PEM_SHOWN = ("start_length", "segment_lengths", "group_shares", "candidates_per_step", "top_k", "oracle",
             "value_bits", "epsilon", "utility_model", "predicted_f1")
LDP_DEFINITION = "the analysis meets the target at n and not at n less 1% (bisection over log n)"


@dataclass(frozen=True)
class SizeAnswer:
    """The population an item needs, the analysis there and 1% below, and the parameters at ``users``."""

    protocol: str
    users: int
    frequency: float
    target: float
    discovery: float
    below_users: int
    below_discovery: float
    definition: str
    parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_share(value: float, flag: str, upper_open: bool = True) -> float:
    """A share or probability in (0, 1) (``(0, 1]`` when ``upper_open`` is false)."""
    allowed = "(0, 1)" if upper_open else "(0, 1]"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        0 < value < 1 or (not upper_open and value == 1)
    ):
        raise InputError(f"{flag}: must be a number in {allowed}, got {value!r}")
    return float(value)


# -- TrieHH ---------------------------------------------------------------------------------------


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
            hit = hypergeometric_survival(self.theta - 1, users[feasible], self.holders(users[feasible]), batch[feasible])
            rate[feasible] = hit ** self.max_rounds
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

    low, high = _bracket(meets, smallest, smallest, "--frequency / --discovery")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if meets(middle) else (middle, high)
    users = _last_failure_near(family, discovery, high) + 1
    family.check_delta(users, f"finding an item of share {frequency:g} with probability {discovery:g}")
    below = int(users * (1 - PRECISION))
    parameters = plan_triehh(users, epsilon, delta, max_rounds, (frequency,))
    return SizeAnswer(
        "triehh", users, frequency, discovery, float(family.rates(np.array([users]))[0]), below,
        float(family.rates(np.array([below]))[0]), TRIEHH_DEFINITION,
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


def _bracket(
    meets: Callable[[int], bool], start: int, smallest: int, flags: str, describe: Callable[[int], str] | None = None
) -> tuple[int, int]:
    """(a population that fails, a larger one that meets the target): halving from ``start`` while
    it meets, doubling while it does not.  Below ``smallest`` nothing meets (the protocol cannot run);
    ``describe(n)`` says what the analysis gives at the largest ``n`` when the target is out of reach."""
    if meets(start):
        high, low = start, max(start // 2, smallest - 1)
        while low >= smallest and meets(low):
            high, low = low, max(low // 2, smallest - 1)
        return low, high
    low, high = start, start * 2
    while not meets(high):
        low, high = high, high * 2
        if high > MAX_USERS:
            found = "" if describe is None else f" ({describe(low)})"
            raise InputError(
                f"{flags}: not reached with up to {MAX_USERS:.0e} users{found}; ask for a larger share, "
                "a lower discovery probability or a looser privacy target"
            )
    return low, high


# -- PEM and TreeHist -------------------------------------------------------------------------------


def size_by_analysis(
    protocol: str,
    frequency: float,
    discovery: float,
    rate: Callable[[int], tuple[float, dict[str, Any]]],
    smallest: int,
    start: int,
    on_step: Callable[[int, float], None] | None = None,
    hint: str = "",
) -> SizeAnswer:
    """The population (to ``PRECISION``) at which ``rate(n)`` -- the analysis' discovery probability
    and the parameters it used -- reaches ``discovery``; the search starts at ``start`` users and
    never goes below ``smallest``.  ``hint`` explains an unreachable target."""
    evaluated: dict[int, tuple[float, dict[str, Any]]] = {}

    def evaluate(users: int) -> tuple[float, dict[str, Any]]:
        if users not in evaluated:
            evaluated[users] = rate(users)
            if on_step is not None:
                on_step(users, evaluated[users][0])
        return evaluated[users]

    def meets(users: int) -> bool:
        return users >= smallest and evaluate(users)[0] >= discovery

    def describe(users: int) -> str:
        return f"discovery {evaluate(users)[0]:.3g} at {users:,} users{hint}"

    flags = "--frequency / --discovery"
    low, high = _bracket(meets, max(start, smallest), smallest, flags, describe)
    while True:
        while high - low > max(1, PRECISION * low):
            middle = min(max(int(round(math.sqrt(max(low, 1) * high))), low + 1), high - 1)
            low, high = (low, middle) if meets(middle) else (middle, high)
        below = int(high * (1 - PRECISION))
        if not meets(below):
            break
        low, high = _bracket(meets, below, smallest, flags, describe)  # the design changed between
    discovered, parameters = evaluate(high)
    below = int(high * (1 - PRECISION))
    return SizeAnswer(protocol, high, frequency, discovery, discovered, below,
                      evaluate(below)[0] if below >= smallest else 0.0, LDP_DEFINITION, parameters)


def size_pem(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: Callable[[int, float], None] | None = None,
    **design: Any,
) -> SizeAnswer:
    """The population at which the design ``fedhh plan pem`` chooses (``design``: the options of
    :func:`plan_pem`) reports an item of share ``frequency`` with probability ``discovery``."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    value_bits = check_positive_int(design.get("value_bits", 64), "--bits")
    space = ValueSpace(value_bits, 2)

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        plan = plan_pem(users, epsilon, **design)
        found = item_discovery(pem_search_parameters(plan), space, frequency)
        return found.probability, {key: plan[key] for key in PEM_SHOWN}

    smallest = max(math.ceil(1 / frequency), value_bits)
    return size_by_analysis("pem", frequency, discovery, rate, smallest, int(frequency**-2), on_step,
                            _collision_hint(design.get("oracle", "olh")))


def size_treehist(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: Callable[[int, float], None] | None = None,
    **design: Any,
) -> SizeAnswer:
    """The population at which TreeHist (``design``: the options of :func:`treehist_parameters`)
    reports an item of share ``frequency`` with probability ``discovery``."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    smallest = treehist_parameters(1 << 20, epsilon, **design).levels
    space = ValueSpace(design.get("value_bits", 64), 2)

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        params = treehist_parameters(users, epsilon, **design)
        return item_discovery(params, space, frequency).probability, {
            "levels": params.levels, "segment_lengths": list(params.segment_lengths), "oracle": params.oracle,
            "sketch": {"rows": params.sketch_rows, "width": params.sketch_width}, "top_k": params.top_k,
            "candidates_per_step": params.candidates_per_step, "threshold": params.threshold,
            "value_bits": space.length, "epsilon": epsilon,
        }

    return size_by_analysis("treehist", frequency, discovery, rate, max(smallest, math.ceil(1 / frequency)),
                            int(frequency**-2), on_step, _collision_hint(design.get("oracle", "")))


def _collision_hint(oracle: str) -> str:
    """Why an oracle with collision variance can fall short in the assumed population at any size."""
    if oracle not in COLLISION_ORACLES:
        return ""
    return (f"; with {oracle}, the users without the item (one heavy empty value) add collision variance that "
            "grows like the item's count, so no population is enough: try --oracle olh")
