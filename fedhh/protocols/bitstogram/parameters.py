"""Bitstogram's ``[protocol]`` keys, budget split and the parameters a run derives from them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InputError
from ...oracles.base import FLAT_CELLS_LIMIT
from ...oracles.hashtogram import Hashtogram
from ...privacy.ldp import BudgetRule, BudgetSplit
from ...privacy.validation import check_users
from ...schema import ConfigSection, Key
from ..common.keys import TOP_K_KEY

NAME = "bitstogram"
ORACLE = Hashtogram.name
ABSENT_REPORTED = 0.1  # expected candidates held by nobody that pass the final threshold, per run
ITEM_PURPOSE = "bitstogram.item"
BIT_PURPOSE = "bitstogram.bit-report"
FINAL_PURPOSE = "bitstogram.final-report"


def _power_of_two_or_auto(value: int) -> bool:
    return value == 0 or (value >= 2 and value & (value - 1) == 0)


@dataclass(frozen=True)
class BitstogramKeys(ConfigSection):
    """Bitstogram's own ``[protocol]`` keys."""

    buckets: int = Key(
        int,
        0,
        "Bitstogram: T, channels values are hashed into and width of its Hashtogram oracles; "
        "0: the power of two at or above sqrt(n)",
        check=_power_of_two_or_auto,
        constraint="0 or a power of two >= 2",
    ).field()
    hashtogram_rows: int = Key(
        int,
        0,
        "Bitstogram: R, hash rows of the Hashtogram oracle that estimates whole values; 0: about ln n",
        check=lambda v: v >= 0,
        constraint=">= 0",
    ).field()
    top_k: int = TOP_K_KEY.field()  # shared with PEM/TreeHist: values reported at most


KEYS: dict[str, Key] = BitstogramKeys.keys()


BUDGET = BudgetRule(
    (("(channel, bit) pair at a uniformly chosen bit position", 0.5), ("full value", 0.5)),
    "Bassily et al., Practical Locally Private Heavy Hitters (Bitstogram, §4); even split as for TreeHist",
)  # [Bassily17] §4: each user sends a (channel, bit) pair and its whole value, ε/2 each


def auto_buckets(n_users: int) -> int:
    """The power of two at or above ``sqrt(n)`` (Remark 4.1: ``T ~ sqrt(n)`` separates the heavy hitters)."""
    return 1 << max(1, math.ceil(math.log2(max(math.sqrt(n_users), 2))))


def auto_rows(n_users: int) -> int:
    """An odd number of rows near ``ln n`` (between 3 and 31)."""
    return min(max(2 * int(math.log(max(n_users, 3)) / 2) + 1, 3), 31)


@dataclass(frozen=True)
class BitstogramParameters:
    """Everything that fixes a Bitstogram run, checked with errors naming the config key."""

    n_users: int
    epsilon: float
    value_bits: int
    buckets: int
    rows: int
    top_k: int

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if not (_power_of_two_or_auto(self.buckets) and self.buckets >= 2):
            raise InputError(f"protocol.buckets: must be a power of two >= 2, got {self.buckets}")
        if self.rows < 1:
            raise InputError(f"protocol.hashtogram_rows: must be >= 1, got {self.rows}")
        if self.rows * self.buckets > FLAT_CELLS_LIMIT:
            raise InputError(
                f"protocol.hashtogram_rows x protocol.buckets: {self.rows} x {self.buckets} cells exceed the "
                f"{FLAT_CELLS_LIMIT:,} a shard's statistics may hold; use fewer rows or buckets"
            )
        if self.value_bits * 2 * self.buckets > 16 * FLAT_CELLS_LIMIT:
            raise InputError(
                f"protocol.buckets: {self.value_bits} bit positions x {2 * self.buckets} (channel, bit) pairs "
                f"exceed the {16 * FLAT_CELLS_LIMIT:,} counts a shard may send; use fewer buckets"
            )
        if self.top_k < 1:
            raise InputError(f"protocol.top_k: must be >= 1, got {self.top_k}")

    @property
    def split(self) -> BudgetSplit:
        return BUDGET.split(NAME, self.epsilon)


def bitstogram_parameters(
    protocol: Mapping[str, Any], epsilon: float, n_users: int, value_bits: int
) -> BitstogramParameters:
    """A config's ``[protocol]`` section as Bitstogram's parameters (0: automatic)."""
    BUDGET.split(NAME, epsilon)  # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    keys = BitstogramKeys.of(protocol)
    return BitstogramParameters(
        n_users=n_users,
        epsilon=epsilon,
        value_bits=value_bits,
        buckets=keys.buckets or auto_buckets(n_users),
        rows=keys.hashtogram_rows or auto_rows(n_users),
        top_k=keys.top_k,
    )
