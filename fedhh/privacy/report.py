"""The privacy report every run carries: what was guaranteed, to whom, and why."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

NO_GUARANTEE = "no guarantee"


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
    def from_dict(cls, data: Mapping[str, Any]) -> "CompositionSummary":
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
    ``epsilon`` and ``delta`` always describe this run alone.
    """

    model: str
    epsilon: float
    delta: float
    mechanism: str
    method: str
    adjacency: str
    parameters: dict[str, Any] = field(default_factory=dict)
    composition: CompositionSummary | None = None

    @property
    def has_guarantee(self) -> bool:
        """A finite ε with δ < 1: parameters outside a theorem report (inf, 1)."""
        return math.isfinite(self.epsilon) and self.delta < 1 and not self.model.startswith(NO_GUARANTEE)

    def with_composition(self, summary: CompositionSummary) -> "PrivacyReport":
        return replace(self, composition=summary)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data; ``composition`` appears only when set, so
        documents written before ledgers existed keep their shape."""
        data = asdict(self)
        data.pop("composition")
        if self.composition is not None:
            data["composition"] = self.composition.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PrivacyReport":
        """Read back :meth:`to_dict` output (also after a JSON round trip that
        wrote infinity as the string "inf")."""
        composition = data.get("composition")
        return cls(
            model=str(data["model"]),
            epsilon=float(data["epsilon"]),
            delta=float(data["delta"]),
            mechanism=str(data["mechanism"]),
            method=str(data["method"]),
            adjacency=str(data["adjacency"]),
            parameters=dict(data.get("parameters", {})),
            composition=None if composition is None else CompositionSummary.from_dict(composition),
        )

    def summary(self) -> str:
        text = f"(ε = {self.epsilon:.4g}, δ = {self.delta:.3g}) — {self.model}"
        if self.composition is not None:
            text += f"; cumulative over {self.composition.line()}"
        return text
