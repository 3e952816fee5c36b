"""The privacy report every run carries: what was guaranteed, to whom, and why."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

NO_GUARANTEE = "no guarantee"
# The adjacency of the central models (TrieHH, the curator baseline): their runs compose in one ledger.
USER_LEVEL = "user-level: populations differ in one user's whole data"

# What every result document holds outside any guarantee (see docs/privacy.md).
EVALUATION_NOT_COVERED = (
    "evaluation: the exact ground truth (true counts, ranks and frequencies, the true top items, "
    "utility metrics, users without items, and for a file population its vocabulary) computed from "
    "the whole population for evaluation only; leave it out with run.evaluation = false when the "
    "population is real data"
)
PUBLIC_INPUTS = (
    "n_users, config, params, population (the configured source): public inputs; the parameters "
    "are solved from n, which the guarantee takes as known"
)


@dataclass(frozen=True)
class Coverage:
    """Which fields of a result document a guarantee covers, and which it does not.

    Each entry reads ``"field: why"``: a reviewer sees at a glance what may
    be published under the guarantee and what must not be.
    """

    covered: tuple[str, ...]
    not_covered: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {"covered": list(self.covered), "not_covered": list(self.not_covered)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Coverage:
        return cls(tuple(map(str, data.get("covered", ()))), tuple(map(str, data.get("not_covered", ()))))


@dataclass(frozen=True)
class CompositionSummary:
    """The cumulative guarantee of ``runs`` composed runs at total ``delta``.

    ``epsilon`` is the tightest valid bound (named by ``tightest``); the
    three bounds it was chosen from are kept so the choice can be checked.
    ``basic_delta`` is the δ that basic composition carries (``Σ δ_i``), which
    may exceed ``delta``: basic composition then gives no guarantee at
    ``delta`` and is left out of the choice.
    """

    runs: int
    delta: float
    epsilon: float
    tightest: str
    pld_epsilon: float
    basic_epsilon: float
    basic_delta: float
    advanced_epsilon: float
    advanced_delta_prime: float
    discretization: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompositionSummary:
        """Read back :meth:`to_dict` output (JSON writes infinity as the string "inf")."""
        values = {key: float(value) for key, value in data.items() if key not in ("runs", "tightest")}
        return cls(runs=int(data["runs"]), tightest=str(data["tightest"]), **values)

    def line(self) -> str:
        return (
            f"{self.runs} run(s): ε = {self.epsilon:.4g} at δ = {self.delta:.3g} ({self.tightest}; "
            f"basic {self.basic_epsilon:.4g} at δ = {self.basic_delta:.3g}, "
            f"advanced {self.advanced_epsilon:.4g}, PLD {self.pld_epsilon:.4g})"
        )


@dataclass(frozen=True)
class PrivacyReport:
    """An (ε, δ) guarantee with the model, mechanism and source it holds under.

    ``model`` names who is protected from whom (for TrieHH: the published
    output, central user-level DP; for LDP protocols: each report against the
    server).  ``parameters`` are the mechanism parameters the guarantee was
    derived from, so a reviewer can recompute it.  ``composition``, when
    present, is the cumulative guarantee of this run together with the runs
    recorded before it in a privacy ledger (see :mod:`fedhh.privacy.ledger`);
    ``epsilon`` and ``delta`` always describe this run alone.  ``coverage``
    says which fields of the run's result document the guarantee covers.
    ``shuffle``, for an ε-LDP protocol, is the central (ε, δ) its reports
    get after an anonymising shuffle (:mod:`fedhh.privacy.shuffle`), or
    ``{"epsilon": None, "reason": ...}`` where that bound does not apply.
    """

    model: str
    epsilon: float
    delta: float
    mechanism: str
    method: str
    adjacency: str
    parameters: dict[str, Any] = field(default_factory=dict)
    composition: CompositionSummary | None = None
    coverage: Coverage | None = None
    shuffle: dict[str, Any] | None = None

    @property
    def has_guarantee(self) -> bool:
        """A finite ε with δ < 1: parameters outside a theorem report (inf, 1)."""
        return math.isfinite(self.epsilon) and self.delta < 1 and not self.model.startswith(NO_GUARANTEE)

    def with_composition(self, summary: CompositionSummary) -> PrivacyReport:
        return replace(self, composition=summary)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data; ``composition``, ``coverage`` and ``shuffle`` appear
        only when set, so documents written before them keep their shape."""
        data = asdict(self)
        for optional in ("composition", "coverage"):
            data.pop(optional)
            if getattr(self, optional) is not None:
                data[optional] = getattr(self, optional).to_dict()
        if self.shuffle is None:
            data.pop("shuffle")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyReport:
        """Read back :meth:`to_dict` output (also after a JSON round trip that
        wrote infinity as the string "inf")."""
        composition = data.get("composition")
        coverage = data.get("coverage")
        return cls(
            model=str(data["model"]),
            epsilon=float(data["epsilon"]),
            delta=float(data["delta"]),
            mechanism=str(data["mechanism"]),
            method=str(data["method"]),
            adjacency=str(data["adjacency"]),
            parameters=dict(data.get("parameters", {})),
            composition=None if composition is None else CompositionSummary.from_dict(composition),
            coverage=None if coverage is None else Coverage.from_dict(coverage),
            shuffle=data.get("shuffle"),
        )

    def summary(self) -> str:
        text = f"(ε = {self.epsilon:.4g}, δ = {self.delta:.3g}) — {self.model}"
        shuffled = (self.shuffle or {}).get("epsilon")
        if shuffled is not None and not self.model.startswith("shuffle"):
            text += f"; shuffled, the reports' central ε = {shuffled:.4g} at δ = {self.shuffle['delta']:.3g}"  # type: ignore[index]
        if self.composition is not None:
            text += f"; cumulative over {self.composition.line()}"
        return text
