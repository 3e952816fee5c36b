"""The protocol contract: a server state machine and an additive client response.

Every protocol is two transport-free pieces:

* a :class:`ServerProtocol` whose ``next_request()`` says what the next
  round asks of users (or ``None`` when the run is over), whose
  ``absorb(response)`` folds in the round's aggregated response, and whose
  ``result()`` gives the discovery;
* a client function ``respond(request, shard, randomness) -> Response``,
  vectorised over the users of a shard (a device is a shard of one user).

Responses are additive: ``Response.combine`` of the shards' responses equals
the response of their union.  That is what lets Flower nodes, Ray actors and
an in-process loop carry the same protocol and get the same result.

Requests and responses are frozen dataclasses whose fields are numpy arrays
or plain scalars (int, float, str, bool), with their wire shape declared on
the fields (:mod:`fedhh.protocols.messages`), so any transport can serialise
and check them generically (see ``strategies/codec.py``).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..data.population import Shard, Vocabulary
from ..kernels.randomness import RandomnessSource
from ..privacy.report import PrivacyReport
from ..privacy.shuffle import ShuffleSetting
from .messages import ARRAY, message, scalar_field, summed

RequestT = TypeVar("RequestT", bound="Request")
ResponseT = TypeVar("ResponseT", bound="Response")
RequestT_contra = TypeVar("RequestT_contra", bound="Request", contravariant=True)
ResponseT_co = TypeVar("ResponseT_co", bound="Response", covariant=True)


@message
class Request:
    """What one round asks of the users; every shard receives the same request."""

    round: int = scalar_field(minimum=1)


@message
class Response:
    """The additive answer of a batch of users to one request."""

    round: int = scalar_field(minimum=1)
    sampled_users: int  # users of the batch that the request selected
    responding_users: int  # of those, users that contributed to the answer

    @classmethod
    @abstractmethod
    def combine(cls: type[ResponseT], responses: Sequence[ResponseT]) -> ResponseT:
        """The response of the union of the batches (order-independent)."""


class SummedResponse(Response):
    """A response whose fields beyond the users are arrays of counts of a shape the request fixes, which
    the batches' responses add up element-wise."""

    @classmethod
    def combine(cls: type[ResponseT], responses: Sequence[ResponseT]) -> ResponseT:
        if not responses:
            raise ValueError("combine needs at least one response")
        arrays = [spec.name for spec in dataclasses.fields(cls) if ARRAY in spec.metadata]
        if len({(r.round, *(getattr(r, name).shape for name in arrays)) for r in responses}) != 1:
            raise ValueError(f"cannot combine {cls.__name__}s of different rounds or shapes")
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            **{name: summed([getattr(r, name) for r in responses]) for name in arrays},
        )


@dataclass
class RoundRecord:
    """One line of a run's trace.

    ``values`` are published with the result and must be covered by the
    protocol's privacy guarantee (for TrieHH: functions of the accepted
    prefixes only).  ``server_view`` is what the server saw in the round
    (e.g. raw vote totals, including prefixes below the threshold): kept for
    logs and audits, never written to the result, because the guarantee does
    not cover it.
    """

    round: int
    values: dict[str, Any]
    server_view: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, **self.values}


@dataclass
class Discovery:
    """A discovered item, with the protocol's count estimate when it has one."""

    item: str
    symbols: tuple[int, ...]
    estimated_count: float | None = None
    support: int | None = None  # votes or reports that admitted it


@dataclass
class ProtocolResult:
    """What a finished protocol run found, and what it cost."""

    protocol: str
    discoveries: list[Discovery]
    frequent_prefixes: list[str]
    trace: list[RoundRecord]
    privacy: PrivacyReport
    params: dict[str, Any]
    stopped_because: str
    extras: dict[str, Any] = field(default_factory=dict)


class ServerProtocol(ABC):
    """The server side of a protocol, as a state machine over rounds (its name and message classes
    are its spec's: :class:`~fedhh.protocols.spec.ProtocolSpec`)."""

    @abstractmethod
    def next_request(self) -> Request | None:
        """The next round's request, or ``None`` when the run is over."""

    @abstractmethod
    def absorb(self, response: Response) -> None:
        """Fold in the aggregated response to the last request."""

    @abstractmethod
    def result(self) -> ProtocolResult:
        """The discovery so far (complete once ``next_request`` is ``None``)."""

    @property
    @abstractmethod
    def trace(self) -> list[RoundRecord]:
        """Rounds absorbed so far."""

    @property
    @abstractmethod
    def max_rounds(self) -> int:
        """The most rounds this run can take (it may stop earlier)."""

    @abstractmethod
    def privacy_report(self) -> PrivacyReport:
        """The guarantee this run carries, known before its first round."""

    # How the run's privacy section asks its reports to be read after shuffling; set by
    # ProtocolSpec.build_server (None: a server built by hand, reported as it states itself).
    shuffle: ShuffleSetting | None = None

    def guarantee(self) -> PrivacyReport:
        """The guarantee the run publishes and a ledger charges: :meth:`privacy_report`, with the shuffled
        central (ε, δ) beside the local ε (privacy.model = "local") or in its place ("shuffle")."""
        report = self.privacy_report()
        return report if self.shuffle is None else self.shuffle.apply(report)

    def progress_note(self) -> str:
        """A short status for progress bars and round logs."""
        return ""

    def check_ready(self) -> None:
        """Raise :class:`~fedhh.errors.InputError` if this server could not issue its first request.

        Every driver calls it before charging the ledger, so a run that could
        never start costs no budget.  A server is ready once built unless it
        still needs something only a driver provides (RAPPOR's candidate
        dictionary, which a deployment's server must be given as a file).
        """

    by_law: bool = False  # a law simulation's server (simulate_by_law): its nodes hold item counts, not users

    def simulate_by_law(self) -> None:
        """Drivers call it before round 1 of a law simulation (``run.simulation = "law"``,
        :mod:`fedhh.protocols.law`).  A server whose requests name users one by one (TrieHH's
        sample) names from then on only how many it asks, which the shards' law samplers split;
        the others only record it (:attr:`by_law`), for their checks of a node's reply: a law
        sampler draws how its users split over a public per-user index (a bit position, a
        cohort) rather than computing each user's."""
        self.by_law = True

    def offer_vocabulary(self, vocabulary: Vocabulary) -> None:
        """The population's vocabulary, offered once the server is built by a process that
        holds the population (fast driver, Flower simulation server).  A protocol that
        decodes against a candidate dictionary may default to it (RAPPOR); the others
        ignore it.  A deployment's server is never offered one."""


class ClientFunction(Protocol[RequestT_contra, ResponseT_co]):
    """The client side: answer a request for every user of a shard."""

    def __call__(self, request: RequestT_contra, shard: Shard, randomness: RandomnessSource) -> ResponseT_co: ...
