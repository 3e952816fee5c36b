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
  over the reports seen plus the mass not seen.

Local hashing (BLH, OLH, FLH) reports a public part, which hash function
(a 64-bit seed, or one of FLH's k'), drawn independently of the value, and
a private bucket in ``[0, g)``.  Sampling reports would see a vanishing
share of the 2^64 seeds, so these are audited *conditionally on the hash
function*, which is exact for them: for every hash function the reports
drew, all ``g`` buckets are enumerated, so the conditional ε and δ of each
are exact; that the public part's probability is the same for every value
is checked, not assumed (if it were not, it would leak by itself), and the
randomizer's ε is the largest conditional one.

The audit never implements a randomizer itself: it audits the oracle
layer's own (:func:`fedhh.oracles.make_oracle`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..oracles import make_oracle
from ..oracles.fast_local_hashing import FastLocalHashReports
from ..oracles.local_hashing import LocalHashReports

MAX_AUDIT_DOMAIN = 64  # value pairs are enumerated: d^2 x reports
TOLERANCE = 1e-9
CONDITIONAL_BUDGET = 50_000_000  # (value pairs) x (hash functions) x (buckets) compared at most


# Report types with a value-independent public part: (public field, private field, what it is)
CONDITIONAL_PARTS: dict[type, tuple[str, str, str]] = {
    LocalHashReports: ("seeds", "buckets", "hash seed"),
    FastLocalHashReports: ("functions", "buckets", "hash function"),
}


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
    conditional_on: str | None = None  # the public part audited conditionally (local hashing)
    public_draws: int = 0  # distinct public parts (hash functions) enumerated

    @property
    def violated(self) -> bool:
        """The randomizer is not ε-LDP at its claimed ε."""
        return self.epsilon_lower > self.claimed_epsilon + TOLERANCE or (
            self.exhaustive and self.delta_upper > TOLERANCE
        )

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
    parts = [
        np.ascontiguousarray(column.reshape(n_reports, -1)).view(np.uint8).reshape(n_reports, -1)
        for column in _report_columns(reports, n_reports)
    ]
    if not parts:
        raise InputError(f"{type(reports).__name__}: no per-report arrays to compare")
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
    if isinstance(domain, bool) or not isinstance(domain, int) or not 2 <= domain <= MAX_AUDIT_DOMAIN:
        raise InputError(
            f"domain: the exact audit enumerates value pairs; must be an integer in 2..{MAX_AUDIT_DOMAIN}, "
            f"got {domain!r}"
        )
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise InputError(f"samples: must be an integer >= 1 (reports drawn per value), got {samples!r}")
    oracle = make_oracle(name, epsilon=epsilon, domain=domain, **options)
    values = np.repeat(np.arange(domain, dtype=np.uint64), samples)
    reports = oracle.randomize(values, np.random.default_rng(seed))
    claimed = oracle.epsilon if claimed_epsilon is None else float(claimed_epsilon)
    conditional = CONDITIONAL_PARTS.get(type(reports))
    if conditional is not None:
        return _conditional_audit(name, oracle, reports, claimed, samples, *conditional)
    return audit_reports(name, domain, claimed, samples, reports, oracle.report_probabilities)


def audit_reports(
    name: str,
    domain: int,
    claimed: float,
    samples: int,
    reports: Any,
    report_probabilities: Callable[[int, Any], np.ndarray],
) -> OracleAudit:
    """The exact audit of any randomizer from reports it drew for every value of ``[0, domain)``.

    ``reports`` is a dataclass of per-report arrays (several reports may
    nest); ``report_probabilities(v, reports)`` gives each report's exact
    probability under value ``v``.  Protocols whose randomizer is more than
    one oracle's (RAPPOR's Bloom filter, SFP's fragment and word reports)
    are audited through this, the same way as the oracles.
    """
    first = distinct_reports(reports)
    probabilities = np.stack([report_probabilities(v, reports)[first] for v in range(domain)])
    coverage = float(probabilities.sum(axis=1).min())
    epsilon_lower, worst_values = _spread(probabilities)
    delta_upper = float(_excess(probabilities, math.exp(claimed)).max() + (1.0 - coverage))
    return OracleAudit(
        oracle=name,
        domain=domain,
        claimed_epsilon=claimed,
        samples_per_value=samples,
        distinct_reports=int(first.size),
        coverage=coverage,
        exhaustive=coverage >= 1 - TOLERANCE,
        epsilon_lower=epsilon_lower,
        worst_values=worst_values,
        delta_upper=max(delta_upper, 0.0),
    )


def _spread(probabilities: np.ndarray) -> tuple[float, tuple[int, int]]:
    """``max_r (ln max_v P(r|v) - ln min_v P(r|v))`` over the columns, and the (v, v') attaining it."""
    with np.errstate(divide="ignore"):
        logs = np.log(probabilities)
    spread = logs.max(axis=0) - logs.min(axis=0)  # inf where some value cannot send the report
    worst = int(np.argmax(spread))
    return float(spread[worst]), (int(np.argmax(probabilities[:, worst])), int(np.argmin(probabilities[:, worst])))


def _excess(probabilities: np.ndarray, growth: float) -> np.ndarray:
    """``Σ_r max(P(r|v) - e^ε P(r|v'), 0)`` for every pair (v, v'), one pair axis per value axis."""
    return np.maximum(probabilities[:, None, ...] - growth * probabilities[None, :, ...], 0.0).sum(axis=-1)


def _conditional_audit(
    name: str, oracle: Any, reports: Any, claimed: float, samples: int, public: str, private: str, label: str
) -> OracleAudit:
    """Audit local hashing given the hash function: every bucket of every hash function drawn."""
    domain, buckets = oracle.domain, oracle.g
    drawn = np.unique(getattr(reports, public))
    drawn = drawn[: max(16, CONDITIONAL_BUDGET // (buckets * domain * domain))]
    enumerated = type(reports)(**{public: np.repeat(drawn, buckets), private: np.tile(np.arange(buckets), drawn.size)})
    joint = np.stack([oracle.report_probabilities(v, enumerated) for v in range(domain)]).reshape(
        domain, drawn.size, buckets
    )
    mass = joint.sum(axis=2)  # P(this hash function | v)
    independent = bool(np.all(np.abs(mass - mass[:1]) <= TOLERANCE * mass[:1]))
    # Joint probabilities: the hash function's probability cancels in every ratio when it is
    # value-independent, and shows up (as the leak it is) when it is not.
    epsilon_lower, worst_values = _spread(joint.reshape(domain, -1))
    given = joint / mass[:, :, None]  # P(bucket | hash function, v)
    growth = math.exp(claimed)
    # Exact conditional δ of every hash function drawn, at the claimed ε; the largest is reported.
    delta_upper = max(float(np.maximum(given[v][None] - growth * given, 0.0).sum(axis=2).max()) for v in range(domain))
    return OracleAudit(
        oracle=name,
        domain=domain,
        claimed_epsilon=claimed,
        samples_per_value=samples,
        distinct_reports=int(drawn.size * buckets),
        coverage=1.0 if independent else float(mass.min() / mass.max()),
        exhaustive=independent,
        epsilon_lower=epsilon_lower,
        worst_values=worst_values,
        delta_upper=max(delta_upper, 0.0),
        conditional_on=label,
        public_draws=int(drawn.size),
    )
