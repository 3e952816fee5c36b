"""What Bitstogram, SPM and MCM share: whole values reported with unbiased estimates.

The three protocols encode an item as the ``m``-bit value of its bit
encoding, run one to three ε-LDP rounds that end in candidate values with
unbiased count estimates, and report the best ``top_k``.  They differ only in
how candidates are found (channels decoded bit by bit, segment pairs
assembled, ...).  :class:`ValueReportingServer` holds the rest once: the
trace, the choice of the reported values, the result and the privacy report
(each user's ε split over its reports by the protocol's
:class:`~fedhh.privacy.ldp.BudgetRule`).  :func:`check_all_users_report` is
the first check an untrusting server makes of any of these protocols'
replies (and of RAPPOR's and SFP's): every user of a node reports, once.
On the device side, Bitstogram and MCM both report one bit of the value at
a public bit position (:func:`bit_positions`, :func:`value_table`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import numpy as np

from ...data.items import ItemCodec
from ...data.population import Vocabulary
from ...kernels.randomness import UserRandom, derive_key
from ...privacy.ldp import BudgetSplit, ldp_report
from ...privacy.report import PrivacyReport
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..spec import HeldUsers, InvalidReply
from .prefix_encoding import PrefixEncoding

_POSITIVE_63 = (1 << 63) - 1


def public_seed(seed: int, purpose: str) -> int:
    """A non-negative 63-bit seed for public randomness, derived from the run seed."""
    return int(derive_key(seed, purpose)) & _POSITIVE_63


def bit_positions(partition_seed: int, value_bits: int, user_ids: np.ndarray) -> np.ndarray:
    """The bit position each global user id reports (public: the same on every device and shard)."""
    return UserRandom(np.uint64(partition_seed), np.asarray(user_ids, dtype=np.int64)).integers(0, value_bits)


def value_table(vocabulary: Vocabulary, value_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Every vocabulary item's bits ``[V + 1, m]`` and oracle key, the empty value (no item) last."""
    encoding = PrefixEncoding("bits", vocabulary.codec)
    if encoding.length != value_bits:
        raise ValueError(f"request.value_bits: {value_bits}, but the item codec gives {encoding.length}-bit values")
    bits = np.concatenate([encoding.units(vocabulary), np.zeros((1, value_bits), dtype=np.uint8)])
    return bits, encoding.keys(bits)


def users_per_index(
    server: ServerProtocol,
    node: HeldUsers,
    reported: np.ndarray,
    span: int,
    index_of: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """How many of a node's users have each value of a public per-user index (``index_of(ids)``:
    a bit position, a cohort, a segment pair), which an honest reply's ``reported`` equal.

    A law simulation's node holds item counts, not users, and draws how its users split over the
    index (:mod:`fedhh.protocols.law`) instead of computing each user's (:attr:`ServerProtocol.by_law`):
    then any split of its users is honest, and ``reported`` is returned when it is one (``span``
    entries >= 0 adding up to the node's users), :class:`InvalidReply` raised when not.
    """
    if not server.by_law:
        return np.bincount(index_of(np.arange(node.first_user, node.first_user + node.users)), minlength=span)
    if reported.shape != (span,) or int(reported.min(initial=0)) < 0 or int(reported.sum()) != node.users:
        raise InvalidReply(
            f"reporters {reported.tolist()}: not a split of the node's {node.users} users over {span} groups"
        )
    return reported


class ValueParameters(Protocol):
    """What the base reads of a protocol's parameters."""

    @property
    def value_bits(self) -> int: ...

    @property
    def top_k(self) -> int: ...


def reported_discoveries(encoding: PrefixEncoding, reported: tuple[np.ndarray, np.ndarray] | None) -> list[Discovery]:
    """The values a run reports (value rows and their estimates) as discoveries; none before its last round."""
    if reported is None:
        return []
    rows, estimates = reported
    return [
        Discovery(encoding.decode(row), tuple(int(u) for u in row), estimated_count=float(estimate))
        for row, estimate in zip(rows, estimates, strict=True)
    ]


def check_all_users_report(response: Response, node: HeldUsers) -> None:
    """Raise :class:`InvalidReply` unless every user the node holds was asked and answered.

    In these one-report-per-user protocols nobody is sampled out, so a node
    that claims fewer (or more) users than it holds is lying about its reports.
    """
    if response.sampled_users != node.users or response.responding_users != node.users:
        raise InvalidReply(
            f"{type(response).__name__}.sampled_users/responding_users: the node holds {node.users} users, "
            f"every one reports; it says {response.sampled_users}/{response.responding_users}"
        )


class ValueReportingServer(ServerProtocol):
    """The server of a protocol whose last round estimates candidate values and reports the best.

    A subclass sets :attr:`name`, :attr:`oracle_label` (the primitive the privacy report
    names), :attr:`rounds`, :attr:`finished` (why a finished run stopped) and
    :attr:`trace_fields` (the fields every trace line carries, ``None`` in the
    rounds that have no value for them, so the trace is a table), finds its
    candidates, and calls :meth:`_report` in its last round.
    """

    name: ClassVar[str]  # the protocol's, as its results name it
    oracle_label: ClassVar[str]
    rounds: ClassVar[int]
    finished: ClassVar[str]
    trace_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: ValueParameters, codec: ItemCodec, split: BudgetSplit) -> None:
        self.params = params
        self.codec = codec
        self.encoding = PrefixEncoding("bits", codec)
        if self.encoding.length != params.value_bits:
            raise ValueError(f"value_bits: {params.value_bits}, but the codec gives {self.encoding.length}-bit values")
        self.split = split
        self._reported: tuple[np.ndarray, np.ndarray] | None = None
        self._trace: list[RoundRecord] = []

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The run's parameters, as the result and the privacy report state them."""

    def _record(self, **values: Any) -> None:
        """Append the next round's trace line."""
        self._trace.append(RoundRecord(len(self._trace) + 1, {**dict.fromkeys(self.trace_fields), **values}))

    def _report(self, candidates: np.ndarray, estimates: np.ndarray, eligible: np.ndarray | None = None) -> int:
        """Report the ``top_k`` candidate rows ``[K, m]`` by estimate, among ``eligible`` indexes (default all).

        Ties keep the candidates' order (a stable sort), so the report does
        not depend on anything but the estimates.  Returns how many were reported.
        """
        indexes = np.arange(estimates.size) if eligible is None else eligible
        best = indexes[np.argsort(-estimates[indexes], kind="stable")][: self.params.top_k]
        self._reported = (candidates[best], estimates[best])
        return int(best.size)

    def stopped_because(self) -> str:
        return self.finished if self._reported is not None else "not finished"

    # -- ServerProtocol ---------------------------------------------------------------------------

    def result(self) -> ProtocolResult:
        found = reported_discoveries(self.encoding, self._reported)
        return ProtocolResult(
            self.name, found, [], self.trace, self.guarantee(), self.describe(), self.stopped_because()
        )

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    @property
    def max_rounds(self) -> int:
        return self.rounds

    def privacy_report(self) -> PrivacyReport:
        return ldp_report(self.split, self.oracle_label, self.describe())
