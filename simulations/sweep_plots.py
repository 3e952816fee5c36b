"""What a report's plot shows: its axes, its curves (the simulated points with their
intervals) and the models drawn beside them; :mod:`simulations.sweep_report` builds a
:class:`Plot` from a sweep's tables and :mod:`simulations.sweep_figures` draws it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedhh.config import Scalar

from .sweep_intervals import METHODS, Interval

K_AXIS, FREQUENCY_AXIS = "k", "frequency"
BINS_PER_DECADE = 4
EPSILON_AXES = ("privacy.epsilon", "epsilon")  # the target ε and the ε spent
# What a trial's ε means, from its privacy report's model (the trials table's privacy_model): central ε
# protects the published output with user-level adjacency, local ε each report against the server.
CENTRAL, LOCAL, NO_PRIVACY = "central (user-level)", "local", "no privacy"
SHUFFLED = "central (shuffled reports)"  # privacy.model = "shuffle": the LDP reports' central (ε, δ)
PRIVACY_MARKERS = {CENTRAL: "s", SHUFFLED: "^", LOCAL: "o", NO_PRIVACY: "D"}
PRIVACY_SYMBOLS = {"s": "■", "^": "▲", "o": "●"}  # the markers as the axis label writes them


def privacy_kind(model: str | None) -> str:
    """The kind of ε of a privacy model (:data:`CENTRAL`, :data:`SHUFFLED`, :data:`LOCAL`, :data:`NO_PRIVACY`;
    empty: unknown)."""
    text = (model or "").lower()
    if text.startswith("central"):
        return CENTRAL
    if text.startswith("shuffle"):
        return SHUFFLED
    if text.startswith("local"):
        return LOCAL
    if text.startswith("no guarantee"):
        return NO_PRIVACY
    return ""


@dataclass
class ModelLine:
    """What one model predicts for a curve: drawn at ``x``, and at the curve's own points (the CSV)."""

    column: str  # the model's column (decides its line style)
    label: str
    x: np.ndarray
    y: np.ndarray
    at_points: np.ndarray


@dataclass
class Curve:
    """One line: the points of one hue value in one panel, with the models beside them."""

    row: Scalar | None
    col: Scalar | None
    hue: Scalar | None
    x: np.ndarray
    interval: Interval
    samples: list[np.ndarray] = field(default_factory=list)  # per point, its trials' values (per-trial metrics)
    models: list[ModelLine] = field(default_factory=list)
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # CSV-only columns (item-trials found, bin edges)
    privacy: str = ""  # the kind of ε of its trials (privacy_kind); never two of central and local


@dataclass
class Plot:
    """What one figure shows."""

    x: str
    y: str
    hue: str | None
    row: str | None
    col: str | None
    curves: list[Curve]
    pooled: list[str] = field(default_factory=list)
    filters: list[str] = field(default_factory=list)
    bins: int | None = BINS_PER_DECADE  # --x frequency: bins per decade; None: item by item
    crossings: list[dict[str, Any]] = field(default_factory=list)  # --x frequency: where 50% and 90% are reached

    @property
    def stem(self) -> str:
        y = re.sub(r"recall@(\d+)", r"recall-at-\1", self.y)
        name = (
            f"{y}-vs-{self.x}"
            + (f"-by-{self.hue}" if self.hue else "")
            + (f"-per-{self.col}" if self.col else "")
            + (f"-per-{self.row}" if self.row else "")
            + ("-unbinned" if self.x == FREQUENCY_AXIS and self.bins is None else "")
        )
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)

    @property
    def methods(self) -> list[str]:
        """The interval methods of its points, in the order of :data:`METHODS`."""
        present = {m for curve in self.curves for m in curve.interval.method.tolist() if m}
        return [method for method in METHODS if method in present]

    @property
    def privacy_kinds(self) -> list[str]:
        """The kinds of ε among its curves, central first."""
        present = {curve.privacy for curve in self.curves if curve.privacy}
        return [kind for kind in PRIVACY_MARKERS if kind in present]

    @property
    def model_labels(self) -> dict[str, str]:
        """Legend label -> model column, for every model drawn."""
        return {line.label: line.column for curve in self.curves for line in curve.models}
