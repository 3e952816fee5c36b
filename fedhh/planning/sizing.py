"""``fedhh size``: the smallest population that finds an item of a given share with a given probability.

The deployment question: an item held by a share ``f`` of the users must be
found with probability at least ``p`` at a privacy target.  How many users
does that take?  Each protocol answers from its own analysis (its
:class:`Sizing`, named by its spec: ``ProtocolSpec.sizing``) of an item
sharing no prefix with any other value (TrieHH's Proposition 1 setting; for
the LDP protocols, no other value competes for its places either).  The
discovery rate is not monotone in ``n`` step by step (integer steps of the
item's holders, designs that change with ``n``), so each protocol defines
the answer it gives; the LDP protocols' answer is a population ``n`` where
the analysis meets the target while ``n`` less 1% does not
(:func:`size_by_analysis`: bisection over ``log n`` to 1%).  Either way, the
analysis at ``n`` and at ``n - 1%`` is part of the answer (:class:`SizeAnswer`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InputError
from .commands import Option, Options

MAX_USERS = 10**12  # beyond this, the answer is "not reachable"
PRECISION = 0.01  # the LDP answers: n meets the target, n less this share does not
LDP_DEFINITION = "the analysis meets the target at n and not at n less 1% (bisection over log n)"
FAR_BELOW = 0.05  # a discovery rate this far below the target at n less 1% is a jump, and warned of


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

    @property
    def warnings(self) -> list[str]:
        """What a reader of the answer must know: the analysis jumps at the answer."""
        if self.target - self.below_discovery <= FAR_BELOW:
            return []
        return [
            f"the analysis gives {self.below_discovery:.3f} at {self.below_users:,} users (1% fewer), far below "
            f"the target {self.target:g}: the discovery rate jumps at this n, so a population slightly smaller "
            "than the answer may fall well short of the target"
        ]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "warnings": self.warnings}


def check_share(value: float, flag: str, upper_open: bool = True) -> float:
    """A share or probability in (0, 1) (``(0, 1]`` when ``upper_open`` is false)."""
    allowed = "(0, 1)" if upper_open else "(0, 1]"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0 < value < 1 or (not upper_open and value == 1))
    ):
        raise InputError(f"{flag}: must be a number in {allowed}, got {value!r}")
    return float(value)


OnStep = Callable[[int, float], None]  # (population size tried, the analysis' discovery rate there)


def no_check(args: Options, mode: str) -> None:
    """A protocol whose options need no check beyond their parsers'."""


@dataclass(frozen=True)
class Sizing:
    """What ``fedhh size NAME`` needs of one protocol (its spec names it: ``ProtocolSpec.sizing``).

    Its functions read the command's parsed options (``args``: an attribute per option)."""

    title: str  # the protocol's name in help texts and tables
    verify_trials: int  # default runs of --verify
    options: tuple[Option, ...]  # its own options
    answer: Callable[[Options, OnStep], SizeAnswer]  # the analytic answer
    verify_setup: Callable[[Options, SizeAnswer], dict[str, Any]]  # simulations.sizing.verify_item's
    check_analytic: Callable[[Options, str], None] = no_check  # options --frequency needs or refuses
    check_recall: Callable[[Options, str], None] = no_check  # options --recall refuses


def required(args: Options, names: tuple[str, ...], mode: str) -> None:
    """Refuse options among ``names`` that were not given (``mode``: with which others they are needed)."""
    for name in names:
        if getattr(args, name, None) is None:
            raise InputError(f"--{name.replace('_', '-')}: required {mode}")


def forbidden(args: Options, names: tuple[str, ...], mode: str) -> None:
    """Refuse options among ``names`` that were given (``mode``: with which others they are not used)."""
    for name in names:
        if getattr(args, name, None) not in (None, False, []):
            raise InputError(f"--{name.replace('_', '-')}: not used {mode}")


def bracket(
    meets: Callable[[int], bool], start: int, smallest: int, flags: str, describe: Callable[[int], str] | None = None
) -> tuple[int, int]:
    """(a population that fails, a larger one that meets the target): halving from ``start`` while
    it meets, doubling while it does not.  Below ``smallest`` nothing meets (the protocol cannot run);
    ``describe(n)`` says what the analysis gives at the largest ``n`` when the target is out of reach;
    no population above :data:`MAX_USERS` is tried."""
    start = min(start, MAX_USERS)
    if meets(start):
        high, low = start, max(start // 2, smallest - 1)
        while low >= smallest and meets(low):
            high, low = low, max(low // 2, smallest - 1)
        return low, high
    low, high = start, min(start * 2, MAX_USERS)
    while low == MAX_USERS or not meets(high):
        if high == MAX_USERS:
            found = "" if describe is None else f" ({describe(high)})"
            raise InputError(
                f"{flags}: not reached with up to {MAX_USERS:,} users{found}; ask for a larger share, "
                "a lower discovery probability or a looser privacy target"
            )
        low, high = high, min(high * 2, MAX_USERS)
    return low, high


def size_by_analysis(
    protocol: str,
    frequency: float,
    discovery: float,
    rate: Callable[[int], tuple[float, dict[str, Any]]],
    smallest: int,
    start: int,
    on_step: Callable[[int, float], None] | None = None,
    hint: str = "",
    definition: str = LDP_DEFINITION,
) -> SizeAnswer:
    """The population (to ``PRECISION``) at which ``rate(n)`` -- the analysis' discovery probability
    and the parameters it used -- reaches ``discovery``; the search starts at ``start`` users and
    never goes below ``smallest``.  ``hint`` explains an unreachable target; ``definition`` states
    the answer's meaning."""
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
    low, high = bracket(meets, max(start, smallest), smallest, flags, describe)
    while True:
        while high - low > max(1, PRECISION * low):
            middle = min(max(int(round(math.sqrt(max(low, 1) * high))), low + 1), high - 1)
            low, high = (low, middle) if meets(middle) else (middle, high)
        below = int(high * (1 - PRECISION))
        if not meets(below):
            break
        low, high = bracket(meets, below, smallest, flags, describe)  # the design changed between
    discovered, parameters = evaluate(high)
    below = int(high * (1 - PRECISION))
    return SizeAnswer(
        protocol,
        high,
        frequency,
        discovery,
        discovered,
        below,
        evaluate(below)[0] if below >= smallest else 0.0,
        definition,
        dict(parameters),
    )
