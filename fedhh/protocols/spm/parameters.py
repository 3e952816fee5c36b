"""SPM's ``[protocol]`` keys, budget split, segments and the parameters a run derives from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InputError
from ...privacy.ldp import BudgetRule
from ...privacy.validation import check_users
from ...schema import ConfigSection, Key
from ..common.keys import TOP_K_KEY

NAME = "spm"
ORACLE = "olh"
SEGMENTS, PAIRS, FINAL = "segments", "pairs", "final"
MODES: tuple[str, ...] = (SEGMENTS, PAIRS, FINAL)
AUTO_PATTERN_LIMIT = 1 << 16  # g 2^s patterns at most when the segment length is automatic
MAX_SEGMENT_BITS = 20
MAX_CANDIDATES = 1 << 16
ITEM_PURPOSE = "spm.item"
SEGMENT_PURPOSE = "spm.segment-report"
FULL_PURPOSE = "spm.full-report"


@dataclass(frozen=True)
class SPMKeys(ConfigSection):
    """SPM's own ``[protocol]`` keys."""

    segment_bits: int = Key(
        int,
        0,
        "SPM: s, bits per segment (the last one shorter if s does not divide m); "
        f"0: the longest with g 2^s <= {AUTO_PATTERN_LIMIT:,}",
        check=lambda v: 0 <= v <= MAX_SEGMENT_BITS,
        constraint=f"in 0..{MAX_SEGMENT_BITS}",
    ).field()
    top_k: int = TOP_K_KEY.field()


KEYS: dict[str, Key] = SPMKeys.keys()


BUDGET = BudgetRule(
    (("segment α of the user's pair", 1 / 3), ("segment β of the user's pair", 1 / 3), ("full value", 1 / 3)),
    "Wang et al., Locally Differentially Private Heavy Hitter Identification, §III-C (SPM after Fanti et al.)",
)  # [Wang19] §III-C: "the user runs three reporting protocols in parallel, each using one third of privacy budget"


def segment_bounds(value_bits: int, segment_bits: int) -> np.ndarray:
    """Start of every segment and the end of the last: ``[0, s, 2s, ..., m]``."""
    return np.unique(np.r_[np.arange(0, value_bits, segment_bits), value_bits]).astype(np.int64)


def auto_segment_bits(value_bits: int) -> int:
    """The longest segment with at least two segments and ``g 2^s <= AUTO_PATTERN_LIMIT``."""
    for bits in range(min(MAX_SEGMENT_BITS, value_bits - 1), 0, -1):
        if (segment_bounds(value_bits, bits).size - 1) << bits <= AUTO_PATTERN_LIMIT:
            return bits
    return 1


@dataclass(frozen=True)
class SPMParameters:
    """Everything that fixes an SPM run, checked with errors naming the config key."""

    n_users: int
    epsilon: float
    value_bits: int
    segment_bits: int
    top_k: int

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if not 1 <= self.segment_bits <= MAX_SEGMENT_BITS:
            raise InputError(f"protocol.segment_bits: must be in 1..{MAX_SEGMENT_BITS}, got {self.segment_bits}")
        if self.segment_bits >= self.value_bits:
            raise InputError(
                f"protocol.segment_bits: {self.segment_bits} bits leave one segment of the {self.value_bits}-bit "
                f"values; SPM needs pairs of segments, so at most {self.value_bits - 1}"
            )
        if self.top_k < 1:
            raise InputError(f"protocol.top_k: must be >= 1, got {self.top_k}")

    @property
    def bounds(self) -> np.ndarray:
        return segment_bounds(self.value_bits, self.segment_bits)

    @property
    def segments(self) -> int:
        return int(self.bounds.size - 1)


def spm_parameters(protocol: Mapping[str, Any], epsilon: float, n_users: int, value_bits: int) -> SPMParameters:
    BUDGET.split(NAME, epsilon)  # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    keys = SPMKeys.of(protocol)
    return SPMParameters(n_users, epsilon, value_bits, keys.segment_bits or auto_segment_bits(value_bits), keys.top_k)
