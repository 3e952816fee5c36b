"""Checks of privacy targets and population sizes shared by every protocol's planner.

Each check raises :class:`fedhh.errors.InputError` naming the field and the
allowed values, so a bad target (from a config, ``--set`` or a ``fedhh
plan`` option) stops the command with exit status 2 instead of surfacing
later as an overflow or a division by zero inside the numerics.
"""

from __future__ import annotations

import math

from ..errors import InputError

# Counts above 2^53 are not exact in floating point, where the solvers and
# scipy's distributions work; no population is that large (8e9 people).
MAX_USERS = 2**53


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_epsilon(
    epsilon: float, field_name: str = "privacy.epsilon", minimum: float = 0.0, maximum: float = math.inf
) -> float:
    """A finite ε > 0 (and within ``[minimum, maximum]`` when a mechanism needs it)."""
    allowed = "a finite number > 0"
    if minimum > 0 or math.isfinite(maximum):
        allowed = f"a number in [{minimum:g}, {maximum:g}]"
    if not _is_number(epsilon) or not math.isfinite(epsilon) or epsilon <= 0 or not minimum <= epsilon <= maximum:
        raise InputError(f"{field_name}: must be {allowed}, got {epsilon!r}")
    return float(epsilon)


def check_delta(delta: float, field_name: str = "privacy.delta") -> float:
    if not _is_number(delta) or not 0 < delta < 1:
        raise InputError(f"{field_name}: must be in the open interval (0, 1), got {delta!r}")
    return float(delta)


def check_positive_int(value: int, field_name: str, minimum: int = 1, maximum: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        allowed = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum:,}"
        raise InputError(f"{field_name}: must be an integer {allowed}, got {value!r}")
    return value


def check_users(n_users: int, field_name: str = "population.users") -> int:
    """A population size ``1..2^53``."""
    return check_positive_int(n_users, field_name, maximum=MAX_USERS)
