"""Privacy of the LDP protocols: ε per user from the protocol's budget split, δ = 0.

In the local model every report a user sends is randomised on the device by
an ε_i-LDP frequency oracle, so the server (and anyone who sees the reports)
learns about the user's value only through those reports.  A user's
guarantee is the basic composition of the reports *that user* sends,
``ε = Σ ε_i`` (pure ε-DP composes exactly additively in the worst case);
users in different groups send disjoint reports, so partitioning users
costs nothing (parallel composition).  The splits below are those of the
seeds:

* **PEM** (Wang et al., [Wang19]): users are partitioned into groups, each
  user reports one prefix once with the whole ε ("divide the population,
  not the budget").
* **TreeHist** (Bassily et al., [Bassily17]; as run in [Cormode21]): each user
  reports a uniformly chosen prefix level with ε/2 and the full string with
  ε/2.
* **SFP** (Apple 2017; [Cormode21]): each user reports one fragment tagged with
  a hash of the word with ``fragment_share x ε`` and the whole word with the
  rest; [Cormode21] splits evenly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..oracles.base import MAX_EPSILON, MIN_EPSILON
from .report import EVALUATION_NOT_COVERED, PUBLIC_INPUTS, Coverage, PrivacyReport
from .validation import check_epsilon

MODEL = "local, per-user ε-LDP"
ADJACENCY = (
    "any two values of one user (replace-one): the reports, not the user's "
    "participation, are protected"
)
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


def _pem(epsilon: float) -> BudgetSplit:
    return BudgetSplit(
        "pem",
        (("prefix of the user's group", epsilon),),
        "Wang et al., Locally Differentially Private Heavy Hitter Identification (PEM): "
        "users are partitioned into groups, one report per user",
    )


def _treehist(epsilon: float) -> BudgetSplit:
    return BudgetSplit(
        "treehist",
        (("prefix at a uniformly chosen level", epsilon / 2), ("full string", epsilon / 2)),
        "Bassily et al., Practical Locally Private Heavy Hitters (TreeHist); "
        "even split as in Cormode et al.'s survey",
    )


def _sfp(epsilon: float, fragment_share: float = 0.5) -> BudgetSplit:
    if isinstance(fragment_share, bool) or not isinstance(fragment_share, (int, float)) or not 0 < fragment_share < 1:
        raise InputError(f"fragment_share: must be a number in the open interval (0, 1), got {fragment_share!r}")
    return BudgetSplit(
        "sfp",
        (
            ("fragment with the word's hash", epsilon * fragment_share),
            ("full word", epsilon * (1 - fragment_share)),
        ),
        "Apple, Learning with Privacy at Scale (Sequence Fragment Puzzle); "
        "even split by default as in Cormode et al.'s survey",
    )


SPLITS: dict[str, Callable[..., BudgetSplit]] = {"pem": _pem, "treehist": _treehist, "sfp": _sfp}


def split_budget(protocol: str, epsilon: float, **options: Any) -> BudgetSplit:
    """The protocol's per-report budgets for a per-user total ``epsilon``."""
    builder = SPLITS.get(protocol)
    if builder is None:
        raise InputError(f"protocol.name: no LDP budget split for {protocol!r}; allowed: {sorted(SPLITS)}")
    split = builder(check_epsilon(epsilon), **options)
    _check_report_budgets(split, float(epsilon))
    return split


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
        f"so ε must be in [{lowest:.3g}, {highest:.3g}]" if lowest <= highest
        else "and no ε puts every report in that range with this split"
    )
    raise InputError(
        f"privacy.epsilon: {split.protocol} gives each user's reports {parts}, and the LDP frequency "
        f"oracles take ε in [{MIN_EPSILON:g}, {MAX_EPSILON:g}] per report, {allowed}; got {epsilon!r}"
    )


def ldp_report(
    split: BudgetSplit, oracle: str, parameters: Mapping[str, Any] | None = None
) -> PrivacyReport:
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
