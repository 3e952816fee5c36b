"""Privacy of the LDP protocols: ε per user from the protocol's budget split, δ = 0.

In the local model every report a user sends is randomised on the device by
an ε_i-LDP frequency oracle, so the server (and anyone who sees the reports)
learns about the user's value only through those reports.  A user's
guarantee is the basic composition of the reports *that user* sends,
``ε = Σ ε_i`` (pure ε-DP composes exactly additively in the worst case);
users in different groups send disjoint reports, so partitioning users
costs nothing (parallel composition).

Each LDP protocol declares its split as a :class:`BudgetRule` on its spec
(``ProtocolSpec.budget``): PEM ([Wang19]) gives each user's one report the
whole ε ("divide the population, not the budget"); TreeHist ([Bassily17],
as run in [Cormode21]) gives the prefix at the user's level ε/2 and the
full string ε/2.  Nothing here knows a protocol by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..oracles.base import MAX_EPSILON, MIN_EPSILON
from .report import EVALUATION_NOT_COVERED, PUBLIC_INPUTS, Coverage, PrivacyReport
from .validation import check_epsilon

MODEL = "local, per-user ε-LDP"
ADJACENCY = "any two values of one user (replace-one): the reports, not the user's participation, are protected"
COVERAGE = Coverage(
    covered=(
        "heavy_hitters[] (item, estimated_count), rounds[], frequent_prefixes: computed from the users' "
        "ε-LDP reports alone, so post-processing keeps them under the guarantee",
        PUBLIC_INPUTS,
    ),
    not_covered=(
        "participation: who reported (rounds[] reporting users, participation) is not hidden; the "
        "guarantee protects each user's value, not whether the user took part",
        EVALUATION_NOT_COVERED,
    ),
)


@dataclass(frozen=True)
class BudgetSplit:
    """How one user's ε is divided among the reports that user sends."""

    protocol: str
    parts: tuple[tuple[str, float], ...]  # (what the report carries, its ε)
    source: str

    @property
    def epsilon(self) -> float:
        """The user's total ε: basic composition of the user's own reports."""
        return math.fsum(epsilon for _, epsilon in self.parts)


@dataclass(frozen=True)
class BudgetRule:
    """How a protocol divides each user's ε among the reports the user sends, as shares of ε."""

    parts: tuple[tuple[str, float], ...]  # (what the report carries, its share of ε)
    source: str  # where the split comes from (paper, survey)

    def __post_init__(self) -> None:
        shares = [share for _, share in self.parts]
        if not shares or any(isinstance(share, bool) or not 0 < share <= 1 for share in shares):
            raise InputError(f"budget shares: each must be a number in (0, 1], got {shares}")
        if abs(math.fsum(shares) - 1) > 1e-12:
            raise InputError(f"budget shares: must add up to 1 (the user's whole ε), got {shares}")

    def split(self, protocol: str, epsilon: float) -> BudgetSplit:
        """The per-report budgets of ``protocol`` for a per-user total ``epsilon``, refused
        (naming ``privacy.epsilon``) when a report's ε is one no oracle takes."""
        epsilon = check_epsilon(epsilon)
        split = BudgetSplit(protocol, tuple((name, epsilon * share) for name, share in self.parts), self.source)
        _check_report_budgets(split, float(epsilon))
        return split


def ldp_guarantee(parameters: Mapping[str, Any]) -> tuple[float, float]:
    """(ε, δ) of an LDP run derived again from its report's ``parameters``: the basic composition
    of the ε of each report a user sends (``split``), and δ = 0, as :func:`ldp_report` states them.
    A privacy ledger checks every stored run against it."""
    split = parameters.get("split")
    if not isinstance(split, dict) or not split:
        raise InputError(f"split: must be an object giving the ε of each report a user sends, got {split!r}")
    for name, epsilon in split.items():
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon):
            raise InputError(f"split.{name}: must be a finite number, got {epsilon!r}")
    return BudgetSplit(str(parameters.get("protocol")), tuple(split.items()), "").epsilon, 0.0


def _check_report_budgets(split: BudgetSplit, epsilon: float) -> None:
    """Every report's ε must be one the oracles accept (``[MIN_EPSILON, MAX_EPSILON]``):
    refuse the user's ε here, naming the range it must lie in, rather than let
    an oracle overflow or divide by zero later."""
    shares = [part / epsilon for _, part in split.parts]
    if all(MIN_EPSILON <= part <= MAX_EPSILON for _, part in split.parts):
        return
    lowest, highest = MIN_EPSILON / min(shares), MAX_EPSILON / max(shares)
    parts = ", ".join(f"{name}: {share:.3g} ε" for (name, _), share in zip(split.parts, shares, strict=True))
    allowed = (
        f"so ε must be in [{lowest:.3g}, {highest:.3g}]"
        if lowest <= highest
        else "and no ε puts every report in that range with this split"
    )
    raise InputError(
        f"privacy.epsilon: {split.protocol} gives each user's reports {parts}, and the LDP frequency "
        f"oracles take ε in [{MIN_EPSILON:g}, {MAX_EPSILON:g}] per report, {allowed}; got {epsilon!r}"
    )


def ldp_report(split: BudgetSplit, oracle: str, parameters: Mapping[str, Any] | None = None) -> PrivacyReport:
    """The privacy report of one run of an LDP protocol.

    ``oracle`` names the frequency oracle every report goes through (as in
    ``fedhh.oracles.make_oracle``); ``parameters`` adds the protocol's own
    (groups, levels, candidates) so the report is self-contained.
    """
    parts = ", ".join(f"{name}: ε = {epsilon:.4g}" for name, epsilon in split.parts)
    return PrivacyReport(
        model=MODEL,
        epsilon=split.epsilon,
        delta=0.0,
        mechanism=f"{split.protocol} with the {oracle} frequency oracle; each user sends {parts}",
        method=f"basic composition of one user's ε-LDP reports, ε = Σ ε_i; source: {split.source}",
        adjacency=ADJACENCY,
        parameters={
            "protocol": split.protocol,
            "oracle": oracle,
            "split": {name: epsilon for name, epsilon in split.parts},
            **dict(parameters or {}),
        },
        coverage=COVERAGE,
    )
