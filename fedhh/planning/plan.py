"""What the protocols' planners share (``fedhh plan NAME``).

A planner takes a population size and a privacy target and returns a plain
dict (JSON-ready): the derived parameters, the guarantee they carry, and
what a run can be expected to find.  A protocol names its planner on its
spec (``ProtocolSpec.planner``), so a protocol that lands later brings its
own and :func:`fedhh.protocols.plan` finds it there; nothing here needs to
change.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError

PLAN_FREQUENCIES = (0.0005, 0.001, 0.002, 0.005, 0.01)  # the item shares a plan reports a discovery rate for


def check_frequencies(frequencies: Sequence[float]) -> None:
    """A plan's item shares must be in (0, 1]."""
    for frequency in frequencies:
        if not 0 < frequency <= 1:
            raise InputError(f"frequencies: each must be in (0, 1], got {frequency!r}")
