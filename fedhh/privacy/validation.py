"""Checks of privacy targets shared by every protocol's planner."""

from __future__ import annotations

import math

from ..errors import InputError


def check_epsilon(epsilon: float, field_name: str = "privacy.epsilon") -> float:
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not math.isfinite(epsilon) or epsilon <= 0:
        raise InputError(f"{field_name}: must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


def check_delta(delta: float, field_name: str = "privacy.delta") -> float:
    if not isinstance(delta, (int, float)) or isinstance(delta, bool) or not 0 < delta < 1:
        raise InputError(f"{field_name}: must be in the open interval (0, 1), got {delta!r}")
    return float(delta)


def check_positive_int(value: int, field_name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{field_name}: must be an integer >= {minimum}, got {value!r}")
    return value
