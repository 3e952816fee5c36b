"""A protocol's spec: everything a driver or a transport needs to know about it, in one object.

A protocol is registered once, with one :class:`ProtocolSpec`
(:func:`fedhh.protocols.registry.register_protocol`).  The spec declares

* its name and its own ``[protocol]`` config keys with defaults and
  validation (the config schema is assembled from the specs,
  :func:`fedhh.config.schema`);
* how a validated config becomes its server state machine (``build``) and
  the vectorised client function that answers the server's requests
  (``respond``), and, optionally, its law sampler (``law``), which draws a
  shard's response from its exact law given the shard's item counts
  (``run.simulation = "law"``, :mod:`fedhh.protocols.law`); a protocol
  without one refuses a law simulation;
* its request and response classes, whose wire layout (dtypes, shapes,
  lower bounds) is declared on their fields (:mod:`fedhh.protocols.messages`);
* what a server that cannot trust its nodes needs: how a round's request
  narrows for one node (``narrow``: a node holding nobody the round asks is
  not asked), the most bytes an honest reply can carry (``reply_budget``),
  the check that refuses a reply no honest node could send
  (``check_reply``), and why the privacy report still holds when some
  nodes do not answer (``dropout_privacy``);
* optionally, a fixed-length layout of its responses over public
  candidates, which secure aggregation needs to sum them (``dense``), or
  why it has none (``no_dense_reason``);
* optionally, for an ε-LDP protocol, how each user's ε is divided among
  the reports the user sends (``budget``, read by the privacy report and
  :func:`fedhh.protocols.registry.split_budget`);
* optionally, the tools that serve it, each a part of its package: its
  planner (``planner``) and the command behind ``fedhh plan NAME``
  (``plan_command``), its sizing (``sizing``, behind ``fedhh size NAME``),
  the derivation of the bits one user sends over a run (``communication``,
  :mod:`fedhh.protocols.communication`), and what it adds to the message
  contract for device implementers (``contract``, :class:`ContractText`).

Nothing here knows a transport: ``strategies/`` carries any registered spec
over Flower, ``simulations/fast.py`` over Ray or in process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from ..errors import InputError
from ..oracles.base import MIN_EPSILON
from ..privacy.ldp import BudgetRule
from ..privacy.shuffle import (
    LOCAL,
    SHUFFLE,
    CrowdsOf,
    ShuffleSetting,
    largest_local_epsilon,
    shuffle_guarantee,
    solve_user_epsilon,
    split_of,
)
from ..schema import PrivacySection
from .base import ClientFunction, Request, RequestT, Response, ResponseT, RoundRecord, ServerProtocol
from .law import LawFunction

if TYPE_CHECKING:
    from ..data.items import ItemCodec
    from ..planning.commands import PlanCommand, Planner
    from ..planning.sizing import Sizing
    from ..schema import Key
    from .communication import Communication

Section = Mapping[str, Any]
ServerT = TypeVar("ServerT", bound=ServerProtocol)
SHUFFLE_SOLVE_ROUNDS = 4  # local ε solved again for the groups it gives, at most this often


class InvalidReply(ValueError):
    """A well-formed reply whose content its node (or, summed, its nodes) cannot have produced honestly."""


class HeldUsers(Protocol):
    """What the server knows of a node: the global ids ``first_user .. first_user + users - 1`` it holds."""

    @property
    def first_user(self) -> int: ...

    @property
    def users(self) -> int: ...


class DenseLayout(Protocol):
    """A protocol's responses as fixed-length integer vectors over public candidates.

    Secure aggregation sums vectors of one public length, so a sparse,
    additive response is laid out densely for it.
    """

    def length(self, request: Any) -> int:
        """Entries of the vector answering ``request`` (the same for every node)."""

    def max_entry(self, request: Any) -> int:
        """The largest entry an honest node asked ``request`` can send."""

    def encode(self, request: Any, response: Any) -> np.ndarray:
        """A node's response as an int64 vector."""

    def decode(self, request: Any, vector: np.ndarray, contributors: list[Any]) -> Any:
        """The sum of the responses to ``contributors`` (their requests), from the summed
        vector, checked (:class:`InvalidReply` if no honest nodes can have sent it)."""


def ask_every_node(request: RequestT, node: HeldUsers) -> RequestT | None:
    """The default narrowing: every node gets the round's request as it is."""
    return request


def accept_any_reply(request: Request, response: Response, node: HeldUsers, server: ServerProtocol) -> None:
    """The default reply check: the codec's checks of dtypes, shapes and signs only."""


def no_reply_budget(request: Request, node: HeldUsers, server: ServerProtocol) -> int | None:
    """The default reply budget: unbounded (``None``)."""
    return None


NPY_HEADER_BYTES = 256  # what a reply budget allows for the header of each array a reply sends, generously


# Why the privacy report of an ε-LDP protocol holds when nodes do not answer.
LDP_DROPOUT_PRIVACY = (
    "unchanged: every report is ε-LDP on the device that sends it, whatever else happens; "
    "a node that does not answer only removes its users' reports, which lowers the counts of "
    "their values but reveals nothing about anyone"
)

# The reason of a protocol whose replies could be laid out densely but are not yet.
DENSE_NOT_DECLARED = (
    "not declared: its replies are sums of a length fixed by the request, which a dense layout could carry"
)


def list_round_values(record: RoundRecord) -> str:
    """The default round log line: the round's published values."""
    return ", ".join(f"{key} {value}" for key, value in record.values.items())


@dataclass(frozen=True)
class ContractText:
    """What a protocol adds to the message contract (``docs/messages.md``, :mod:`strategies.contract`)
    beyond its messages' declarations and its ``respond`` docstring, in Markdown.

    Protocols of one family share one text, which the contract writes once;
    a sentence or a section that several texts hold is written once too.
    """

    definitions: tuple[str, ...] = ()  # sentences added to the contract's Definitions
    sections: Callable[[], list[tuple[str, str]]] | None = None  # (title, body) sections after the protocols'
    oracle_notes: tuple[str, ...] = ()  # clauses added to the introduction of the oracles' device sides


@dataclass(frozen=True)
class ProtocolSpec(Generic[RequestT, ResponseT, ServerT]):
    """One protocol, as every driver and transport sees it (see the module docstring): generic over its
    request and response classes and its server's class, which its functions take."""

    name: str
    summary: str  # one line, for help texts and error messages
    # (privacy section, protocol section, n_users, item codec, seed) -> the run's server
    build: Callable[[PrivacySection, Section, int, ItemCodec, int], ServerT]
    respond: ClientFunction[RequestT, ResponseT]
    request_type: type[RequestT]
    response_type: type[ResponseT]
    dropout_privacy: str  # why the privacy report holds when some asked users do not answer
    keys: Mapping[str, Key] = field(default_factory=dict)  # its own [protocol] keys
    narrow: Callable[[RequestT, HeldUsers], RequestT | None] = ask_every_node
    reply_budget: Callable[[RequestT, HeldUsers, ServerT], int | None] = no_reply_budget
    check_reply: Callable[[RequestT, ResponseT, HeldUsers, ServerT], None] = accept_any_reply
    describe_round: Callable[[RoundRecord], str] = list_round_values
    dense: Callable[[ItemCodec], DenseLayout] | None = None  # None: no secure aggregation
    no_dense_reason: str = ""  # without dense: why (told to a run that asks for secure aggregation)
    budget: BudgetRule | None = None  # ε-LDP protocols: each user's ε among its reports
    planner: Planner | None = None  # plan(**target) -> dict (fedhh.protocols.plan)
    plan_command: PlanCommand | None = None  # `fedhh plan NAME`
    sizing: Sizing | None = None  # `fedhh size NAME`
    communication: Callable[[ServerT], Communication] | None = None  # from its fresh server
    contract: ContractText | None = None  # its prose in the message contract beyond its messages
    law: LawFunction[RequestT, ResponseT] | None = None  # run.simulation = "law": a shard's response from its counts
    # ε-LDP protocols: the kinds of message a user sends and whom each hides among once shuffled
    crowds: CrowdsOf | None = None

    def build_server(
        self,
        privacy: PrivacySection | Section,
        n_users: int,
        codec: ItemCodec,
        seed: int,
        protocol: Section | None = None,
    ) -> ServerT:
        """The server of one run; ``privacy`` and ``protocol`` are the config's ``[privacy]`` and
        ``[protocol]`` sections (``protocol``: the defaults of this protocol's own keys when not given)."""
        if not isinstance(privacy, PrivacySection):
            privacy = PrivacySection.of({"model": LOCAL, **privacy})
        if protocol is None:
            protocol = {name: key.default for name, key in self.keys.items()}
        if privacy.model == SHUFFLE:
            server = self._build_shuffled(privacy, protocol, n_users, codec, seed)
        else:
            server = self.build(privacy, protocol, n_users, codec, seed)
        server.shuffle = self.shuffle_setting(privacy, n_users)
        return server

    def shuffle_setting(self, privacy: PrivacySection, n_users: int) -> ShuffleSetting:
        """How this protocol's reports read after shuffling, for ``privacy``'s model and δ."""
        if self.budget is None:
            reason = (
                f"{self.name} sends no ε-LDP reports (its guarantee is of another model), so the "
                "amplification of ε-LDP reports by shuffling does not apply"
            )
        else:
            reason = f"{self.name} declares no crowds for its reports (ProtocolSpec.crowds)"
        return ShuffleSetting(privacy.model, privacy.delta, n_users, self.crowds, reason)

    def _build_shuffled(
        self, privacy: PrivacySection, protocol: Section, n_users: int, codec: ItemCodec, seed: int
    ) -> ServerT:
        """The server whose users' local ε is the largest that meets ``privacy``'s shuffled central
        (ε, δ): solved for the crowds of a server built at the target, then again for the crowds of the
        server so built, until they settle; refused, naming the field, when the target cannot be met.

        A protocol whose groups depend on ε (PEM's optimizer) may not settle: then the local ε is found
        by bisection over servers built at each trial ε, between the target (which always meets itself:
        shuffling never raises ε) and the largest ε solved, keeping the lower end's server.
        """
        if self.budget is None or self.crowds is None:
            reason = self.shuffle_setting(privacy, n_users).reason
            raise InputError(f"privacy.model: 'shuffle' amplifies ε-LDP reports; {reason}; use privacy.model = 'local'")
        if not privacy.delta * n_users < 1:
            raise InputError(
                f"privacy.delta: the shuffled guarantee needs δ below 1/n = 1/{n_users:,}, where it means "
                f"something, got {privacy.delta:g}"
            )
        crowds_of = self.crowds
        built: dict[float, tuple[ServerT, float]] = {}

        def central(local: float) -> float:
            """The shuffled central ε of the server built at ``local`` (kept for the answer)."""
            if local not in built:
                server = self.build(replace(privacy, epsilon=local), protocol, n_users, codec, seed)
                parameters = server.privacy_report().parameters
                split = split_of(parameters)
                built[local] = (
                    server,
                    shuffle_guarantee(split, crowds_of(split, parameters), n_users, privacy.delta).epsilon,
                )
            return built[local][1]

        shares = [share for _, share in self.budget.parts]
        local = max(privacy.epsilon, MIN_EPSILON / min(shares))  # the first server's reports must be ones oracles take
        tried = []
        for _ in range(SHUFFLE_SOLVE_ROUNDS):
            central(local)
            parameters = built[local][0].privacy_report().parameters
            crowds = crowds_of(split_of(parameters), parameters)
            solved = solve_user_epsilon(self.budget, self.name, crowds, n_users, privacy.epsilon, privacy.delta)
            if solved == local:
                return built[local][0]
            tried.append(solved)
            local = solved
        low = max(privacy.epsilon, MIN_EPSILON / min(shares))
        chosen = largest_local_epsilon(central, privacy.epsilon, low, max(tried))
        central(chosen)  # built already, unless the bisection never left its lower end
        return built[chosen][0]
