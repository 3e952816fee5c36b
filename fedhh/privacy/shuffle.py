"""Privacy amplification by shuffling: the central (ε, δ) of n users' ε0-LDP reports after an anonymising shuffle.

Source: Feldman, McMillan and Talwar, "Hiding Among the Clones: A Simple and
Nearly Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021
([FMT21]).

**Setting and conditions.**  ``n`` users each send **one** report through an
ε0-DP local randomizer (the same randomizer for every user, or adaptive
ones each ε0-DP whatever their auxiliary input); a shuffler applies a
uniformly random permutation, and the adversary sees only the shuffled
multiset of the ``n`` reports (it may know every other user's data).
Adjacency: replace-one, the two datasets differ in one user's value and
``n`` is fixed and public.  The guarantee is ``(ε, δ)``-DP of the shuffled
output, i.e. central DP against whoever sees only the multiset (or any
function of it, such as a securely aggregated sum).

**The numerical bound** ([FMT21] Theorem 3.2 and the numerical procedure
the paper derives from it; the "clones" reduction).  Every other user's report is, with
probability ``p = e^{-ε0}``, distributed as the report of one of the two
values of the target user (each with probability p/2), a "clone".  The
shuffled output of the two neighbouring datasets is then a post-processing
of the pair of distributions

    P = (A + Δ, C - A + 1 - Δ),   Q = (A + 1 - Δ, C - A + Δ),
    C ~ Bin(n - 1, e^{-ε0}),  A ~ Bin(C, 1/2),  Δ ~ Bern(e^{ε0} / (e^{ε0} + 1)),

so the output is (ε, δ)-DP whenever the hockey-stick divergence
``D_{e^ε}(P || Q) = Σ [P - e^ε Q]_+`` is at most δ (by the symmetry of P and
Q under swapping the coordinates, ``D(Q || P)`` is the same).  Given
``C = c`` the first coordinate ``k`` determines the output, and with
``q = e^{ε0}/(e^{ε0}+1)``, ``b_c`` the Bin(c, 1/2) probabilities:

    P(k | c) = q b_c(k-1) + (1-q) b_c(k),   Q(k | c) = (1-q) b_c(k-1) + q b_c(k).

Their ratio ``((1-q)(c+1) + (2q-1) k) / (q(c+1) - (2q-1) k)`` increases in
``k``, so ``P - e^ε Q > 0`` exactly for ``k > (c+1) r``,
``r = (e^ε q - 1 + q) / ((2q - 1)(1 + e^ε))``, and with
``S_c(j) = P(Bin(c, 1/2) >= j)`` and the first such ``k = t``:

    δ_c = (q - e^ε (1-q)) S_c(t - 1) - (e^ε q - (1-q)) S_c(t),   δ = E_C[δ_c].

This is computed in closed form for every ``c`` at once (numpy, scipy's
binomial tails), with no per-user loop.  Two steps make it an upper bound
whatever n: the values of ``C`` outside a window holding all but
``δ / 1000`` of its mass are charged in full (``δ_c <= 1``), and for large
windows ``δ_c`` is evaluated on a grid of ``c`` and each cell charged its
left end's value: ``δ_c`` never increases with ``c``, since one more clone
adds a fair coin to both ``P`` and ``Q`` (a post-processing).  ε at a
given δ is found by bisection, whose upper end is returned: a δ no larger
than the target is computed there, so the ε holds.  Everything is in double precision: the δ it returns is
within a relative 1e-4 of a 40-digit sum down to δ = 1e-15 (the tests), so a
message's δ below ``1e-15`` and a guarantee's total δ below ``1e-13`` are
refused (:data:`MIN_MESSAGE_DELTA`, :data:`MIN_DELTA`).  The same sum is what the authors' published
implementation brackets (github.com/apple/ml-shuffling-amplification, ``numericalanalysis``: its lower
end drops the far tail of ``C``, its upper end charges it in full); the ε here lies between the two,
within 0.1% of the lower end (``tests/test_shuffle_published.py``, docs/privacy.md).

**The closed-form bound** ([FMT21] Theorem 3.1, in the form of the
authors' code): for ``ε0 <= ln(n / (16 ln(4/δ)))``,

    ε <= ln(1 + (1 - e^{-ε0}) / (1 + e^{-ε0-e}) (a + c)),
    a = 8 sqrt(e^{ε0} ln(4/δ) / n),  c = 8 e^{ε0} / n,  e = ln(1 + a + c).

It is looser than the numerical bound and kept as a cross-check
(:func:`analytic_epsilon`).

**What it does not cover.**  Reports a user sends in several messages are
each amplified among the users sending that kind of message and then
composed (:func:`shuffle_guarantee`); a report kind whose senders are a
public subset of the users (a group, a level, a cohort) hides only among
that subset (:class:`Crowd`).  Participation is not hidden; nor is a user's
report from anyone who sees it before the shuffle.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..data import cache
from ..errors import InputError
from ..oracles.base import MAX_EPSILON, MIN_EPSILON
from .ldp import ADJACENCY, BudgetRule, BudgetSplit  # the LDP protocols' adjacency: their runs compose in one ledger
from .report import EVALUATION_NOT_COVERED, PUBLIC_INPUTS, Coverage, PrivacyReport
from .validation import check_delta, check_epsilon, check_users

LOCAL, SHUFFLE = "local", "shuffle"  # privacy.model
MODEL = "shuffle, central (ε, δ) of the shuffled ε0-LDP reports"
SOURCE = (
    "Feldman, McMillan and Talwar, Hiding Among the Clones (FOCS 2021), Theorem 3.2, numerical bound: "
    "C ~ Bin(n-1, e^-ε0), A ~ Bin(C, 1/2), Δ ~ Bern(e^ε0/(e^ε0+1))"
)
MIN_DELTA = 1e-13  # the smallest total δ of a guarantee: each message's share stays above MIN_MESSAGE_DELTA
MIN_MESSAGE_DELTA = 1e-15  # below it double precision cannot vouch for the numerical δ of one message
OMITTED_SHARE = 1e-3  # share of δ charged for the values of C left out of the window
SMALLEST_OMITTED = 1e-18  # the mass left out when no δ is given (shuffled_delta)
PARTITION_SHARE = 0.1  # share of δ spent on the chance that a public group is smaller than its bound
MAX_CELLS = 4096  # values of c evaluated per δ; more are covered cell by cell (δ_c decreases in c)
BISECTION_STEPS = 60
CACHE_KIND = "shuffle"  # fedhh's cache folder keeps the guarantees computed (fedhh.data.cache)
CACHE_LIBRARIES = ("numpy", "scipy", "dp-accounting")  # whose numbers a guarantee is made of
CACHE_MODULES = ("shuffle.py", "composition.py", "ldp.py")  # the code that computes one, beside this module
EPSILON_TOLERANCE = 1e-6  # relative width at which the bisection on ε stops (it returns the upper end)


def _check(epsilon0: float, n_users: int, delta: float) -> tuple[float, int, float]:
    epsilon0 = check_epsilon(epsilon0, "ε0 (the local ε of one report)")
    n_users = check_users(n_users, "n_users (the users whose reports are shuffled together)")
    delta = check_delta(delta)
    if delta < MIN_MESSAGE_DELTA:
        raise InputError(
            f"privacy.delta: the shuffle bound is computed in double precision and vouches for δ >= "
            f"{MIN_MESSAGE_DELTA:g} per report, "
            f"got {delta!r}"
        )
    return epsilon0, n_users, delta


@functools.lru_cache(maxsize=256)
def _clone_counts(epsilon0: float, n_users: int, omitted: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The values of ``C ~ Bin(n-1, e^-ε0)`` the bound evaluates, the mass each stands for, and the
    mass left out (charged in full).  Each cell ``[c_i, c_{i+1})`` is charged ``δ_{c_i}``."""
    from scipy import stats  # here, not at import: registering a protocol must not load scipy.stats

    trials, p = n_users - 1, math.exp(-epsilon0)
    if trials == 0:
        return np.zeros(1, dtype=np.int64), np.ones(1), 0.0
    law = stats.binom(trials, p)
    low = int(law.ppf(omitted / 2))
    high = trials - int(stats.binom(trials, -math.expm1(-epsilon0)).ppf(omitted / 2))  # isf fails below 1e-16
    low, high = max(low, 0), min(max(high, low), trials)
    count = high - low + 1
    if count <= MAX_CELLS:
        cells = np.arange(low, high + 2, dtype=np.int64)
    else:
        cells = np.unique(np.linspace(low, high + 1, MAX_CELLS + 1).round().astype(np.int64))
    cdf = law.cdf(cells - 1)  # P(C < c) at every cell edge
    mass = np.diff(cdf)
    left_out = float(cdf[0] + law.sf(cells[-1] - 1))  # the upper tail from sf, which keeps its small values
    return cells[:-1], mass, left_out


def _tail(at_least: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``P(Bin(c, 1/2) >= at_least)``, element-wise."""
    from scipy import special

    tail = special.bdtrc(np.maximum(at_least - 1, 0), c, 0.5)
    return np.where(at_least <= 0, 1.0, np.where(at_least > c, 0.0, tail))


def shuffled_delta(epsilon: float, epsilon0: float, n_users: int) -> float:
    """The smallest δ the numerical bound gives at central ``epsilon`` for ``n_users`` shuffled
    ``epsilon0``-LDP reports (an upper bound on the true δ; see the module docstring)."""
    epsilon0, n_users, _ = _check(epsilon0, n_users, 0.5)
    epsilon = check_epsilon(epsilon, "ε (the central ε)") if epsilon != 0 else 0.0
    if epsilon >= epsilon0:
        return 0.0
    return _delta(float(epsilon), float(epsilon0), int(n_users), SMALLEST_OMITTED)


def _delta(epsilon: float, epsilon0: float, n_users: int, omitted: float) -> float:
    q = 1.0 / (1.0 + math.exp(-epsilon0))  # e^ε0 / (e^ε0 + 1), without overflow
    growth = math.exp(epsilon)
    above, below = q - growth * (1.0 - q), growth * q - (1.0 - q)
    ratio = below / ((2.0 * q - 1.0) * (1.0 + growth))
    clones, mass, left_out = _clone_counts(epsilon0, n_users, omitted)
    first = np.floor((clones + 1) * ratio).astype(np.int64) + 1  # the first k with P(k|c) > e^ε Q(k|c)
    per_clones = above * _tail(first - 1, clones) - below * _tail(first, clones)
    return float(np.dot(mass, np.maximum(per_clones, 0.0)) + left_out)


def shuffled_epsilon(epsilon0: float, n_users: int, delta: float) -> float:
    """The central ε at ``delta`` of ``n_users`` shuffled ``epsilon0``-LDP reports, by the numerical
    bound: the upper end of a bisection on ε (never below the bound's exact value), at most ``epsilon0``."""
    epsilon0, n_users, delta = _check(epsilon0, n_users, delta)
    return _epsilon(epsilon0, n_users, delta)


@functools.lru_cache(maxsize=4096)
def _epsilon(epsilon0: float, n_users: int, delta: float) -> float:
    omitted = OMITTED_SHARE * delta
    low, high = 0.0, epsilon0  # δ(ε0) is at most the mass left out, below delta
    for _ in range(BISECTION_STEPS):
        if high - low <= EPSILON_TOLERANCE * high:
            break
        middle = 0.5 * (low + high)
        if _delta(middle, epsilon0, n_users, omitted) <= delta:
            high = middle
        else:
            low = middle
    return high


def analytic_epsilon(epsilon0: float, n_users: int, delta: float) -> float | None:
    """[FMT21] Theorem 3.1's closed form (module docstring), or ``None`` outside its condition
    ``ε0 <= ln(n / (16 ln(4/δ)))``."""
    epsilon0, n_users, delta = _check(epsilon0, n_users, delta)
    if epsilon0 > math.log(n_users / (16.0 * math.log(4.0 / delta))):
        return None
    a = 8.0 * math.sqrt(math.exp(epsilon0) * math.log(4.0 / delta) / n_users)
    c = 8.0 * math.exp(epsilon0) / n_users
    e = math.log1p(a + c)
    return math.log1p((-math.expm1(-epsilon0)) / (1.0 + math.exp(-epsilon0 - e)) * (a + c))


def solve_epsilon0(epsilon: float, n_users: int, delta: float) -> float:
    """The largest ε0 (to a relative 1e-6, from below) whose ``n_users`` shuffled reports are
    (``epsilon``, ``delta``)-DP by the numerical bound; at least ``epsilon`` (no amplification)."""
    epsilon = check_epsilon(epsilon)
    _, n_users, delta = _check(epsilon, n_users, delta)
    return largest_local_epsilon(lambda local: _epsilon(local, n_users, delta), epsilon, epsilon, MAX_EPSILON)


def largest_local_epsilon(central: Callable[[float], float], target: float, low: float, high: float) -> float:
    """The largest local ε in ``[low, high]`` whose ``central(local) <= target``, to a relative 1e-6 from
    below, by bisection (``low`` must meet it; where ``central`` is not monotone, an ε that meets it)."""
    if central(high) <= target:
        return high
    for _ in range(BISECTION_STEPS):
        if high - low <= EPSILON_TOLERANCE * low:
            break
        middle = 0.5 * (low + high)
        if central(middle) <= target:
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class Crowd:
    """One kind of message every user sends, and the users whose messages of that kind it hides among.

    ``parts`` names the parts of the protocol's budget split (:class:`~fedhh.privacy.ldp.BudgetRule`)
    the message carries (their ε add up to the message's ε0); ``among`` says who sends it.  When the
    senders are split into public groups (levels, cohorts, bit positions: public randomness keyed by
    the user id, independent of the data), a message hides only among its own group, so the bound is
    taken at the smallest: ``groups`` gives each group's share of the users (``(1.0,)``: everyone).
    """

    parts: tuple[str, ...]
    among: str
    groups: tuple[float, ...] = (1.0,)

    def to_dict(self) -> dict[str, Any]:
        return {"parts": list(self.parts), "among": self.among, "groups": list(self.groups)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Crowd:
        parts, groups = data.get("parts"), data.get("groups")
        if not isinstance(parts, list) or not isinstance(groups, list) or not groups:
            raise InputError(f"shuffle.messages: each needs a list of parts and of group shares, got {data!r}")
        if any(
            isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1 for share in groups
        ):
            raise InputError(f"shuffle.messages: group shares must be numbers in (0, 1], got {groups!r}")
        return cls(tuple(map(str, parts)), str(data.get("among", "")), tuple(float(share) for share in groups))

    @property
    def partitioned(self) -> bool:
        return any(share < 1 for share in self.groups)

    def smallest(self, n_users: int, miss: float) -> int:
        """A number of users that a user's own group has, but with probability at most ``miss``:
        the smallest group's binomial lower quantile; ``n_users`` when everyone sends it.

        Only the user's own group hides the user's message, so the bound is per group, not a union
        over the groups: with the user in group g the group has ``1 + Bin(n - 1, share_g)`` users,
        at least ``Bin(n, share_g)`` in distribution."""
        if not self.partitioned:
            return n_users
        from scipy import stats

        lowest = stats.binom.ppf(miss, n_users, np.asarray(self.groups)).min()
        return int(max(lowest - 1, 0))


@dataclass(frozen=True)
class ShuffledMessage:
    """One kind of message amplified among its crowd."""

    crowd: Crowd
    epsilon0: float
    users: int
    epsilon: float
    delta: float
    analytic_epsilon: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "carries": list(self.crowd.parts),
            "among": self.crowd.among,
            "epsilon0": self.epsilon0,
            "users": self.users,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "analytic_epsilon": self.analytic_epsilon,
        }


@dataclass(frozen=True)
class ShuffleGuarantee:
    """The central (ε, δ) of one user's messages after shuffling, and how it was put together."""

    epsilon: float
    delta: float
    local_epsilon: float
    messages: tuple[ShuffledMessage, ...]
    composition: str  # how the messages' guarantees were composed
    partition_delta: float  # the share of δ covering groups smaller than their bound

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "local_epsilon": self.local_epsilon,
            "bound": SOURCE,
            "composition": self.composition,
            "partition_delta": self.partition_delta,
            "messages": [message.to_dict() for message in self.messages],
            "holds_against": HOLDS_AGAINST,
        }


HOLDS_AGAINST = (
    "whoever sees only each kind of message as a shuffled multiset (an anonymising shuffler, or the secure "
    "aggregation of the reports), each kind shuffled on its own, with every user of each crowd reporting "
    "(users lost with their nodes shrink the crowds, and the guarantee with them); the server seeing per-node "
    "sums or raw reports has the local ε only"
)


def _message_epsilons(split: BudgetSplit, crowds: Sequence[Crowd]) -> list[float]:
    """Each message's ε0: the sum of the split's parts it carries; every part in exactly one message."""
    epsilons = dict(split.parts)
    carried = [part for crowd in crowds for part in crowd.parts]
    if sorted(carried) != sorted(epsilons):
        raise ValueError(f"{split.protocol}: the shuffled messages carry {carried}, its budget split {list(epsilons)}")
    return [math.fsum(epsilons[part] for part in crowd.parts) for crowd in crowds]


def shuffle_guarantee(
    split: BudgetSplit, crowds: Sequence[Crowd], n_users: int, delta: float, *, kept: bool = False
) -> ShuffleGuarantee:
    """The central (ε, ``delta``) of ``split``'s messages, each shuffled among its crowd of ``n_users``.

    δ is spent in three places: :data:`PARTITION_SHARE` of it on the chance that a public group is
    smaller than its lower bound (only when some message's senders are grouped); the rest on the
    messages.  One message takes it all.  Several messages (a user's reports of different kinds,
    each in its own shuffle, each a function of the user's value) compose: either basic composition
    with δ split evenly, ``(Σ ε_i, Σ δ_i)``, or dp-accounting's composition of the messages' (ε_i, δ_i)
    at half of δ each (:func:`fedhh.privacy.composition.compose`, the tightest of basic, advanced and
    PLD at the whole δ); the smaller ε is kept and named.

    With ``kept`` (a guarantee a run reports), it is read back from fedhh's cache folder when a
    process computed it before, and kept there otherwise: the computation itself is quick, but it
    first imports scipy.stats and dp-accounting, which nothing else in an LDP run needs.  A solver's
    trials are not kept.
    """
    n_users = check_users(n_users, "n_users")
    delta = check_delta(delta)
    if delta < MIN_DELTA:
        raise InputError(
            f"privacy.delta: the shuffled guarantee is computed in double precision and vouches for δ >= "
            f"{MIN_DELTA:g}, got {delta!r}"
        )
    return (_kept_guarantee if kept else _guarantee)(split, tuple(crowds), n_users, delta)


@functools.lru_cache(maxsize=256)
def _kept_guarantee(split: BudgetSplit, crowds: tuple[Crowd, ...], n_users: int, delta: float) -> ShuffleGuarantee:
    """:func:`_guarantee` through fedhh's cache folder (:mod:`fedhh.data.cache`).  An entry is named
    by every input, the versions of the libraries the numbers come from and the text of the modules
    that compute them, so it holds exactly what computing would give."""
    key = _cache_key(split, crowds, n_users, delta)
    stored = cache.load(CACHE_KIND, key) if key is not None else None
    if stored is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return _from_stored(json.loads(stored["guarantee"].tobytes().decode("utf-8")), split, crowds, delta)
    guarantee = _guarantee(split, crowds, n_users, delta)
    if key is not None:
        text = json.dumps(_to_stored(guarantee))
        cache.store(CACHE_KIND, key, {"guarantee": np.frombuffer(text.encode("utf-8"), dtype=np.uint8)})
    return guarantee


def _cache_key(split: BudgetSplit, crowds: tuple[Crowd, ...], n_users: int, delta: float) -> dict[str, Any] | None:
    """What a guarantee depends on (``None``: not cached)."""
    computed_by = _computed_by()
    return None if computed_by is None else {"inputs": repr((split, crowds, n_users, delta)), **computed_by}


@functools.cache
def _computed_by() -> dict[str, Any] | None:
    """The versions of the libraries and a digest of the modules a guarantee's numbers come from
    (``None``: one of them unknown)."""
    from importlib import metadata

    try:
        versions = {name: metadata.version(name) for name in CACHE_LIBRARIES}
        here = Path(__file__).resolve().parent
        code = hashlib.sha256(b"".join((here / name).read_bytes() for name in CACHE_MODULES)).hexdigest()
    except (metadata.PackageNotFoundError, OSError):
        return None
    return {"libraries": versions, "code": code}


def _to_stored(guarantee: ShuffleGuarantee) -> dict[str, Any]:
    """The numbers and words of a guarantee, its messages in the order of its crowds (JSON keeps every
    float exactly)."""
    return {
        "epsilon": guarantee.epsilon,
        "delta": guarantee.delta,
        "local_epsilon": guarantee.local_epsilon,
        "composition": guarantee.composition,
        "partition_delta": guarantee.partition_delta,
        "messages": [[m.epsilon0, m.users, m.epsilon, m.delta, m.analytic_epsilon] for m in guarantee.messages],
    }


def _from_stored(
    stored: Mapping[str, Any], split: BudgetSplit, crowds: tuple[Crowd, ...], delta: float
) -> ShuffleGuarantee:
    messages = stored["messages"]
    if len(messages) != len(crowds) or stored["delta"] != delta or stored["local_epsilon"] != split.epsilon:
        raise ValueError("a cached shuffle guarantee of other inputs")
    return ShuffleGuarantee(
        float(stored["epsilon"]),
        float(stored["delta"]),
        float(stored["local_epsilon"]),
        tuple(
            ShuffledMessage(crowd, float(e0), int(users), float(e), float(d), None if a is None else float(a))
            for crowd, (e0, users, e, d, a) in zip(crowds, messages, strict=True)
        ),
        str(stored["composition"]),
        float(stored["partition_delta"]),
    )


@functools.lru_cache(maxsize=1024)
def _guarantee(split: BudgetSplit, crowds: tuple[Crowd, ...], n_users: int, delta: float) -> ShuffleGuarantee:
    from .composition import compose  # dp-accounting is a slow import

    epsilons = _message_epsilons(split, crowds)
    partitioned = sum(crowd.partitioned for crowd in crowds)
    miss = PARTITION_SHARE * delta if partitioned else 0.0
    sizes = [crowd.smallest(n_users, miss / max(partitioned, 1)) for crowd in crowds]  # a union over them
    budget = delta - miss

    def amplified(share: float) -> list[ShuffledMessage]:
        return [
            ShuffledMessage(crowd, epsilon0, users, *_amplified(epsilon0, users, budget * share))
            for crowd, epsilon0, users in zip(crowds, epsilons, sizes)
        ]

    evenly = amplified(1.0 / len(crowds))
    basic = math.fsum(message.epsilon for message in evenly)
    if len(crowds) == 1:
        return ShuffleGuarantee(basic, delta, split.epsilon, tuple(evenly), "one message", miss)
    halves = amplified(0.5 / len(crowds))
    composed = compose([(message.epsilon, message.delta) for message in halves], budget)
    left = "δ less the groups' share" if miss else "δ"
    if composed.epsilon < basic:
        how = f"dp-accounting's composition ({composed.tightest}), each message at 1/{2 * len(crowds)} of {left}"
        return ShuffleGuarantee(composed.epsilon, delta, split.epsilon, tuple(halves), how, miss)
    how = f"basic composition, Σ ε_i, each message at 1/{len(crowds)} of {left}"
    return ShuffleGuarantee(basic, delta, split.epsilon, tuple(evenly), how, miss)


def _amplified(epsilon0: float, users: int, delta: float) -> tuple[float, float, float | None]:
    """(ε, δ, closed-form ε) of ``users`` shuffled ``epsilon0``-LDP messages; one user hides among nobody."""
    if users <= 1:
        return epsilon0, delta, None
    return shuffled_epsilon(epsilon0, users, delta), delta, analytic_epsilon(epsilon0, users, delta)


CrowdsOf = Callable[[BudgetSplit, Mapping[str, Any]], tuple[Crowd, ...]]
COVERAGE = Coverage(
    covered=(
        "heavy_hitters[] (item, estimated_count), rounds[], frequent_prefixes: computed from the shuffled "
        "reports alone (their sums), so post-processing keeps them under the shuffled guarantee",
        PUBLIC_INPUTS,
    ),
    not_covered=(
        "participation: who reported is not hidden; the guarantee protects each user's value",
        "the server's view when it sees per-node sums or raw reports: only each report's local ε0 holds there",
        EVALUATION_NOT_COVERED,
    ),
)


def split_of(parameters: Mapping[str, Any]) -> BudgetSplit:
    """The budget split an LDP report's ``parameters`` state (``split``: the ε of each report part)."""
    split = parameters.get("split")
    if not isinstance(split, dict) or not split:
        raise InputError(f"split: must be an object giving the ε of each report a user sends, got {split!r}")
    for name, epsilon in split.items():
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon):
            raise InputError(f"split.{name}: must be a finite number, got {epsilon!r}")
    return BudgetSplit(str(parameters.get("protocol")), tuple((str(k), float(v)) for k, v in split.items()), "")


@dataclass(frozen=True)
class ShuffleSetting:
    """What a run's privacy section asks of shuffling: the model, its δ, and the protocol's crowds.

    ``crowds`` (the protocol's :attr:`~fedhh.protocols.spec.ProtocolSpec.crowds`) is ``None`` for a
    protocol the bound does not apply to, with ``reason`` saying why.  In the local model the report
    keeps its local guarantee and gains a ``shuffle`` block; in the shuffle model the report states
    the shuffled central (ε, δ), which is what a ledger charges.
    """

    model: str
    delta: float
    n_users: int
    crowds: CrowdsOf | None
    reason: str = ""

    def apply(self, report: PrivacyReport) -> PrivacyReport:
        if self.crowds is None:
            return replace(report, shuffle={"epsilon": None, "delta": None, "reason": self.reason})
        split = split_of(report.parameters)
        crowds = self.crowds(split, report.parameters)
        if self.model == SHUFFLE:
            return shuffle_report(report, crowds, self.n_users, self.delta)
        try:
            guarantee = shuffle_guarantee(split, crowds, self.n_users, self.delta, kept=True)
        except InputError as error:
            return replace(report, shuffle={"epsilon": None, "delta": None, "reason": str(error)})
        return replace(report, shuffle=guarantee.to_dict())


def shuffle_report(local: PrivacyReport, crowds: Sequence[Crowd], n_users: int, delta: float) -> PrivacyReport:
    """The shuffle model's report of a run whose local report is ``local``: the central (ε, δ) of
    its users' reports shuffled as ``crowds`` says, with what it was derived from in ``parameters``."""
    split = split_of(local.parameters)
    guarantee = shuffle_guarantee(split, crowds, n_users, delta, kept=True)
    return PrivacyReport(
        model=MODEL,
        epsilon=guarantee.epsilon,
        delta=guarantee.delta,
        mechanism=f"{local.mechanism}; each kind of report shuffled among its senders",
        method=f"{SOURCE}; {guarantee.composition}",
        adjacency=ADJACENCY,
        parameters={
            **local.parameters,
            "n_users": n_users,
            "local_epsilon": local.epsilon,
            "shuffle": {"delta": delta, "messages": [crowd.to_dict() for crowd in crowds]},
        },
        coverage=COVERAGE,
        shuffle=guarantee.to_dict(),
    )


def shuffle_accountant(parameters: Mapping[str, Any]) -> tuple[float, float]:
    """(ε, δ) of a shuffle-model run derived again from its report's ``parameters`` (a ledger checks
    every stored run against it)."""
    shuffle, users = parameters.get("shuffle"), parameters.get("n_users")
    if not isinstance(shuffle, dict) or not isinstance(shuffle.get("messages"), list):
        raise InputError(f"shuffle: must give the shuffled messages and δ, got {shuffle!r}")
    if isinstance(users, bool) or not isinstance(users, int):
        raise InputError(f"n_users: must be an integer, got {users!r}")
    crowds = [Crowd.from_dict(message) for message in shuffle["messages"]]
    guarantee = shuffle_guarantee(split_of(parameters), crowds, users, shuffle.get("delta"))  # type: ignore[arg-type]
    return guarantee.epsilon, guarantee.delta


def solve_user_epsilon(
    rule: BudgetRule, protocol: str, crowds: Sequence[Crowd], n_users: int, epsilon: float, delta: float
) -> float:
    """The largest per-user local ε (to a relative 1e-6, from below) whose reports, split by ``rule`` and
    shuffled as ``crowds`` says, are (``epsilon``, ``delta``)-DP; refused, naming ``privacy.epsilon``,
    when even the smallest local ε the oracles take cannot meet it."""
    epsilon = check_epsilon(epsilon)
    shares = [share for _, share in rule.parts]
    low, high = MIN_EPSILON / min(shares), MAX_EPSILON / max(shares)

    def central(local: float) -> float:
        return shuffle_guarantee(rule.split(protocol, local), crowds, n_users, delta).epsilon

    if central(low) > epsilon:
        raise InputError(
            f"privacy.epsilon: a shuffled central ε of {epsilon:g} at δ = {delta:g} needs each user's local ε "
            f"below {low:.3g}, the smallest {protocol}'s reports can take (the LDP frequency oracles take ε >= "
            f"{MIN_EPSILON:g} per report); choose a larger ε"
        )
    return largest_local_epsilon(central, epsilon, low, high)
