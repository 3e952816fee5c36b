"""The privacy report every run carries: what was guaranteed, to whom, and why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PrivacyReport:
    """An (ε, δ) guarantee with the model, mechanism and source it holds under.

    ``model`` names who is protected from whom (for TrieHH: the published
    output, central user-level DP; for LDP protocols: each report against the
    server).  ``parameters`` are the mechanism parameters the guarantee was
    derived from, so a reviewer can recompute it.
    """

    model: str
    epsilon: float
    delta: float
    mechanism: str
    method: str
    adjacency: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return f"(ε = {self.epsilon:.4g}, δ = {self.delta:.3g}) — {self.model}"
