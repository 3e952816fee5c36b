"""Users' bits sent: what one user of a protocol puts on the wire over a whole run, in a deployment.

Every protocol's spec names its derivation (``ProtocolSpec.communication``,
a function of its package's ``wire`` module); the function reads the
protocol's own parameters from a freshly built server
and asks each report's frequency oracle for its size
(:meth:`fedhh.oracles.FrequencyOracle.report_bits`), so a new oracle or a
new protocol declares its own cost and nothing here is keyed by a name.

Conventions, the same for every protocol, so that the numbers compare:

* a field that names one of ``c`` public choices costs ``ceil(log2 c)``
  bits (:func:`~fedhh.oracles.base.index_bits`);
* a user's assignment by public randomness (PEM's group, TreeHist's level,
  SFP's fragment position, Bitstogram's and MCM's bit position, SPM's
  segment pair, RAPPOR's cohort) is counted as sent with the report: a
  server that receives reports without their sender's identity (Apple's
  and RAPPOR's deployments strip it) cannot decode one without it.  A
  deployment that keys the assignment on an identity the server sees would
  save those few bits;
* only the users' reports count: not the server's requests (broadcast, the
  same for everyone), not transport framing, not the per-shard sums of a
  simulation (a shard of users is a transport device, not a user).

Every derivation returns a :class:`Communication`: the reports a user may
send, each with the expected number a user sends, and the most any one user
sends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SentReport:
    """One kind of report a user may send: its size and how many of them a user sends on average."""

    what: str
    bits: int
    per_user: float  # expected number of such reports one user sends over the run

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "bits": self.bits, "per_user": self.per_user}


@dataclass(frozen=True)
class Communication:
    """What one user sends over a run: every kind of report, the expected and the largest total."""

    reports: tuple[SentReport, ...]
    max_bits: int  # the most any one user sends over the run
    note: str = ""

    @property
    def expected_bits(self) -> float:
        """Bits one user sends on average over the run (over its random assignment or sampling)."""
        return math.fsum(report.bits * report.per_user for report in self.reports)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "user_bits_expected": self.expected_bits,
            "user_bits_max": self.max_bits,
            "reports": [report.to_dict() for report in self.reports],
        }
        if self.note:
            document["note"] = self.note
        return document
