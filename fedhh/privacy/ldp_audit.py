"""Exact privacy audit of an LDP randomizer on a small domain, through the oracle layer.

An ε-LDP randomizer promises ``P(r | v) <= e^ε P(r | v')`` for every report
``r`` and values ``v, v'``.  The oracle layer computes ``P(r | v)`` exactly
(``FrequencyOracle.report_probabilities``), so nothing here is estimated:

* every value of the domain is randomised ``samples`` times and the distinct
  reports kept;
* for those reports the exact ε is ``max_r (ln max_v P(r|v) - ln min_v P(r|v))``:
  a lower bound on the randomizer's true ε (a maximum over a subset of its
  reports), and exactly its ε when the reports seen carry all the
  probability mass (``exhaustive``: the enumeration was complete);
* the δ at the claimed ε is bounded above by the hockey-stick divergence
  over the reports seen plus the mass not seen, so even a randomizer with
  a huge report space (local hashing's 64-bit seeds) gets a certified
  ``delta_upper``.

The audit never implements a randomizer itself: without ``fedhh.oracles``
it is unavailable and says so.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError

MAX_AUDIT_DOMAIN = 64  # value pairs are enumerated: d^2 x reports
TOLERANCE = 1e-9


class AuditUnavailable(ValueError):
    """The oracle layer this audit runs through is not importable."""


def oracle_layer_available() -> bool:
    return importlib.util.find_spec("fedhh.oracles") is not None


@dataclass(frozen=True)
class OracleAudit:
    """What the exact audit of one randomizer found."""

    oracle: str
    domain: int
    claimed_epsilon: float
    samples_per_value: int
    distinct_reports: int
    coverage: float  # min over values of the probability mass of the reports seen
    exhaustive: bool  # every report the randomizer can send was seen
    epsilon_lower: float  # exact ε over the reports seen (the exact ε when exhaustive)
    worst_values: tuple[int, int]  # (v, v') attaining it
    delta_upper: float  # certified δ at the claimed ε

    @property
    def violated(self) -> bool:
        """The randomizer is not ε-LDP at its claimed ε."""
        return self.epsilon_lower > self.claimed_epsilon + TOLERANCE or (self.exhaustive and self.delta_upper > TOLERANCE)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "violated": self.violated}


def _report_columns(reports: Any, n_reports: int) -> Iterator[np.ndarray]:
    """The per-report arrays of a report object (nested report objects included)."""
    for item in dataclasses.fields(reports):
        value = getattr(reports, item.name)
        if dataclasses.is_dataclass(value):
            yield from _report_columns(value, n_reports)
        elif isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == n_reports:
            yield value


def distinct_reports(reports: Any) -> np.ndarray:
    """Index of the first occurrence of each distinct report (rows compared byte for byte)."""
    n_reports = len(reports)
    parts = [np.ascontiguousarray(column.reshape(n_reports, -1)).view(np.uint8).reshape(n_reports, -1)
             for column in _report_columns(reports, n_reports)]
    if not parts:
        raise ValueError(f"{type(reports).__name__}: no per-report arrays to compare")
    rows = np.ascontiguousarray(np.concatenate(parts, axis=1))
    keys = rows.view(np.dtype((np.void, rows.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    return np.sort(first)


def audit_oracle(
    name: str,
    epsilon: float,
    domain: int,
    samples: int = 2000,
    seed: int = 0,
    claimed_epsilon: float | None = None,
    **options: Any,
) -> OracleAudit:
    """Audit ``make_oracle(name, epsilon=epsilon, domain=domain, **options)`` exactly.

    The claim defaults to the oracle's ε; ``claimed_epsilon`` holds it to
    another (a protocol's share of a user's budget, say).
    """
    if not oracle_layer_available():
        raise AuditUnavailable(
            "the LDP audit runs through the oracle layer (fedhh.oracles), which is not in this "
            "installation; the TrieHH audit does not need it"
        )
    from fedhh.oracles import make_oracle

    if isinstance(domain, bool) or not isinstance(domain, int) or not 2 <= domain <= MAX_AUDIT_DOMAIN:
        raise InputError(f"domain: the exact audit enumerates value pairs; must be an integer in 2..{MAX_AUDIT_DOMAIN}, got {domain!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise InputError(f"samples: must be an integer >= 1 (reports drawn per value), got {samples!r}")
    oracle = make_oracle(name, epsilon=epsilon, domain=domain, **options)
    values = np.repeat(np.arange(domain, dtype=np.uint64), samples)
    reports = oracle.randomize(values, np.random.default_rng(seed))
    first = distinct_reports(reports)
    probabilities = np.stack([oracle.report_probabilities(v, reports)[first] for v in range(domain)])
    coverage = float(probabilities.sum(axis=1).min())
    with np.errstate(divide="ignore"):
        logs = np.log(probabilities)
    spread = logs.max(axis=0) - logs.min(axis=0)  # inf where some value cannot send the report
    worst = int(np.argmax(spread))
    claimed = oracle.epsilon if claimed_epsilon is None else float(claimed_epsilon)
    growth = math.exp(claimed)
    excess = np.maximum(probabilities[:, None, :] - growth * probabilities[None, :, :], 0.0).sum(axis=2)
    delta_upper = float(excess.max() + (1.0 - coverage))
    return OracleAudit(
        oracle=name,
        domain=domain,
        claimed_epsilon=claimed,
        samples_per_value=samples,
        distinct_reports=int(first.size),
        coverage=coverage,
        exhaustive=coverage >= 1 - TOLERANCE,
        epsilon_lower=float(spread[worst]),
        worst_values=(int(np.argmax(probabilities[:, worst])), int(np.argmin(probabilities[:, worst]))),
        delta_upper=max(delta_upper, 0.0),
    )
