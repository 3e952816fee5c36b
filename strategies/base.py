"""A Flower Strategy that drives any protocol's server state machine.

Heavy-hitter discovery trains no model, and its number of rounds is not
known in advance: the protocol stops when a round adds nothing (at most
after its ``max_rounds``).  So :class:`ProtocolStrategy` overrides
``Strategy.start`` with a loop that runs until ``next_request()`` is
``None``, and maps one protocol round onto Flower's train phase:

* ``configure_train``: the round's request to every admitted node that has
  something to answer (the protocol's spec may narrow the request per node,
  e.g. TrieHH sends a device only its own sampling decision);
* ``aggregate_train``: classify the replies (see
  ``strategies.participation``), check each one against what its node was
  asked, ``Response.combine`` the valid ones (responses are additive) and
  ``absorb`` the sum (or, with ``run.secure_aggregation``, another
  aggregation step: :class:`RoundAggregation`);
* there is no federated evaluation phase (``configure_evaluate`` sends
  nothing): utility is measured on the server against the true counts.

Before round 1 the nodes report their shards (``strategies.shards``).
After that, a node that crashes, is offline, answers after
``run.round_timeout`` or sends a malformed reply costs only its own users'
answers: the round goes on without it and the trace says so.  Only a
round in which no node at all contributes stops the run, since absorbing
nothing would end the discovery for a reason that has nothing to do with
the data.  With ``run.secure_aggregation`` the sum is computed by Flower's
SecAgg+ (``strategies.secure``) and single replies are never seen.

Everything protocol-specific (messages, per-node requests, reply checks,
the round's log line, why dropouts keep the privacy report) comes from the
protocol's :class:`~fedhh.protocols.ProtocolSpec`; this class is the same
for every protocol.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedhh.errors import InputError
from fedhh.protocols import InvalidReply, ProtocolSpec, Request, Response, RoundRecord, ServerProtocol
from fedhh.run_clock import RunClock

from .admission import Admission, StatusCallback
from .codec import MessageDecodeError, attach_notice, codec_for
from .errors import FederationError, RunStopped, last_line
from .exchange import exchange
from .participation import RoundParticipation
from .shards import DEVICES, ROUND_MESSAGE, SHARDS, Federation, ShardInfo

# Error replies the SuperLink makes when a request or its reply outlived its TTL.
EXPIRED = (ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE)

# A child of Flower's logger, so round lines reach the same handlers (and
# `flwr log`) as Flower's own; it keeps INFO when Flower's logger is quieted.
LOGGER = logging.getLogger("flwr.fedhh")


@dataclass
class _PendingRound:
    """What ``configure_train`` sent, for ``aggregate_train`` to check the replies against."""

    request: Request
    asked: dict[int, Request]  # node id -> the request it was sent
    messages: list[Message]
    participation: RoundParticipation


class RoundDisplay(Protocol):
    """What shows a run's rounds as they are absorbed (e.g. ``simulations.progress.RoundProgress``)."""

    def __enter__(self) -> RoundDisplay: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> bool | None: ...

    def update(self, server: ServerProtocol) -> None:
        """Called after each absorbed round."""


class ProgressFactory(Protocol):
    """Builds the display of one run's rounds; the caller injects it, so this layer draws nothing itself."""

    def __call__(self, server: ServerProtocol, *, label: str) -> RoundDisplay: ...


class _NoDisplay(contextlib.AbstractContextManager["_NoDisplay"]):
    """The display when none was asked for."""

    def __exit__(self, *exc_info: object) -> None:
        return None

    def update(self, server: ServerProtocol) -> None:
        return None


class RoundAggregation(Protocol):
    """How one round's responses reach the server: one reply per node, or only their sum."""

    label: str  # for the strategy's summary line

    def run_round(self, strategy: ProtocolStrategy, server_round: int, grid: Grid) -> MetricRecord | None:
        """Ask the round's nodes, absorb the sum of what came back, return the round's metrics."""


class PlainAggregation:
    """Every node's reply is decoded and checked on its own, then the server sums them."""

    label = "replies checked one by one"

    def run_round(self, strategy: ProtocolStrategy, server_round: int, grid: Grid) -> MetricRecord | None:
        messages = strategy.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid)
        replies, pushed = exchange(grid, list(messages), strategy.round_timeout, strategy.stop)
        strategy.count_undelivered(pushed)
        return strategy.aggregate_train(server_round, replies)[1]


class ProtocolStrategy(Strategy):
    """Run one protocol, described by its spec, to completion over the nodes of a Flower federation."""

    def __init__(
        self,
        spec: ProtocolSpec,
        server: ServerProtocol,
        n_users: int,
        num_shards: int | None,
        *,
        federation_kind: str = SHARDS,
        round_timeout: float = 120.0,
        connect_timeout: float = 120.0,
        aggregation: RoundAggregation | None = None,
        progress: ProgressFactory | None = None,
        stop: threading.Event | None = None,
        federation: Federation | None = None,
        status: StatusCallback | None = None,
    ) -> None:
        """``num_shards``: the split of the users (``run.shards``; ``None`` for ``"auto"``: the
        nodes' own split; a device federation: n).

        ``aggregation`` sums each round (default :class:`PlainAggregation`;
        ``strategies.secure.SecureAggregation`` for SecAgg+).  ``progress``
        builds the display of the rounds (none if ``None``).  ``stop``, once
        set, ends the run within a poll interval with
        :class:`~strategies.errors.RunStopped` (the driver was interrupted).
        ``federation``: the nodes, if the caller has admitted them already
        (:class:`~strategies.admission.Admission`); else :meth:`start` does.
        ``status`` is told what the server is doing while it waits for its nodes.
        """
        if num_shards is not None and num_shards < 1:
            raise InputError(f"run.shards must be >= 1, got {num_shards}")
        if federation is not None and federation_kind == SHARDS:
            num_shards = len(federation.members)
        if federation_kind not in (SHARDS, DEVICES):
            raise InputError(f"run.federation: got {federation_kind!r}; allowed: {[SHARDS, DEVICES]}")
        if federation_kind == DEVICES and num_shards != n_users:
            raise InputError(f"a device federation has one shard per user: num_shards must be n = {n_users}")
        for name, value in (("run.round_timeout", round_timeout), ("run.connect_timeout", connect_timeout)):
            if not value > 0:
                raise InputError(f"{name}: must be > 0 seconds, got {value}")
        self.spec = spec
        self.server = server
        self.request_codec = codec_for(spec.request_type)
        self.response_codec = codec_for(spec.response_type)
        self.n_users = n_users
        self.num_shards = num_shards
        self.federation_kind = federation_kind  # run.federation: what each node holds
        self.round_timeout = round_timeout
        self.connect_timeout = connect_timeout
        self.aggregation: RoundAggregation = aggregation if aggregation is not None else PlainAggregation()
        self.progress = progress
        self.stop = stop
        self.status = status
        self.admitted = federation is not None
        self.federation = federation if federation is not None else Federation(n_users, {})  # once admitted
        self.participation: list[RoundParticipation] = []
        self._pending: _PendingRound | None = None
        self._notices: dict[int, str] = {}  # node -> why its last reply was refused, told with its next request
        self.setup_seconds = 0.0
        self.round_seconds: list[float] = []
        self.clock = RunClock()  # the server's own work: planning, absorbing, its result (server_s)

    # -- Strategy interface -----------------------------------------------------

    def summary(self) -> None:
        """Log what this strategy will run."""
        holds = "one device user each" if self.federation_kind == DEVICES else "one shard of users each"
        shards = f"{self.num_shards} shard(s)" if self.num_shards is not None else "one shard per SuperNode"
        LOGGER.info(
            "%s: %s over %s (%s), %d users, at most %d rounds, round timeout %.0f s, %s",
            type(self).__name__,
            self.spec.name,
            shards,
            holds,
            self.n_users,
            self.server.max_rounds,
            self.round_timeout,
            self.aggregation.label,
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The protocol's next request, to every admitted, online node it concerns."""
        request = self.next_request()
        if request is None:
            return []
        asked, participation = self.targets(server_round, request, grid)
        encoded: dict[int, RecordDict] = {}  # one encoding per distinct request object
        messages = []
        for node, node_request in asked.items():
            content = encoded.get(id(node_request))
            if content is None:
                content = encoded[id(node_request)] = self.request_codec.encode(node_request)
            if node in self._notices:
                content = attach_notice(content, self._notices.pop(node))
            messages.append(
                Message(
                    content=content,
                    dst_node_id=node,
                    message_type=ROUND_MESSAGE,
                    group_id=str(server_round),
                    ttl=self.round_timeout,  # a stale request is never answered later
                )
            )
        self._pending = _PendingRound(request, asked, messages, participation)
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check and combine the replies that arrived, absorb their sum, record who took part."""
        if self._pending is None:
            raise FederationError(f"round {server_round}: replies arrived but no request was sent")
        pending, self._pending = self._pending, None
        participation = pending.participation
        node_of = {message.metadata.message_id: message.metadata.dst_node_id for message in pending.messages}
        seen: set[int] = set()  # nodes that replied in time (late ones are the rest)
        responses: list[Response] = []
        for reply in replies:
            node = node_of.get(reply.metadata.reply_to_message_id)
            if node is None or node in seen:
                LOGGER.warning("round %d: ignored a reply to no outstanding request", server_round)
                continue
            if reply.has_error() and reply.error.code in EXPIRED:
                continue  # the SuperLink dropped the request at its TTL (the round timeout): late
            seen.add(node)
            shard = self.federation.members[node]
            if reply.has_error():
                participation.failed.append(shard.shard_index)
                participation.reasons[shard.shard_index] = last_line(reply.error.reason)
                LOGGER.warning(
                    "round %d: shard %d (node %d) failed: %s",
                    server_round,
                    shard.shard_index,
                    node,
                    last_line(reply.error.reason),
                )
                continue
            try:
                responses.append(self._accept(reply, node, pending.asked[node], shard))
            except (MessageDecodeError, InvalidReply) as error:
                participation.rejected.append(shard.shard_index)
                participation.reasons[shard.shard_index] = str(error)
                self._notices[node] = f"round {server_round}: the server refused your reply: {error}"
                LOGGER.warning(
                    "round %d: rejected the reply of shard %d (node %d): %s",
                    server_round,
                    shard.shard_index,
                    node,
                    error,
                )
        for node in pending.asked:
            if node not in seen:
                late = self.federation.members[node].shard_index
                participation.late.append(late)
                LOGGER.warning(
                    "round %d: no reply from shard %d (node %d) within %g s",
                    server_round,
                    late,
                    node,
                    self.round_timeout,
                )
        participation.answered = len(responses)
        return None, self.absorb_round(server_round, responses, participation)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """No federated evaluation: utility is measured on the server."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """No federated evaluation: nothing to aggregate."""
        return None

    def start(  # pylint: disable=too-many-arguments
        self,
        grid: Grid,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Run rounds until the protocol stops (or ``num_rounds``, at most ``max_rounds``).

        ``timeout``, if given, replaces ``run.round_timeout`` as the wait for
        each round's replies.  The model-training arguments of
        ``Strategy.start`` have no meaning here and are refused.
        """
        if any(arg is not None for arg in (initial_arrays, train_config, evaluate_config, evaluate_fn)):
            raise ValueError(
                f"{type(self).__name__} trains no model: initial_arrays, train_config, "
                "evaluate_config and evaluate_fn must not be given"
            )
        limit = self.server.max_rounds if num_rounds is None else num_rounds
        if not 1 <= limit <= self.server.max_rounds:
            raise ValueError(f"num_rounds must be in 1..{self.server.max_rounds}, got {num_rounds}")
        if timeout is not None:
            self.round_timeout = timeout
        self.summary()
        started = time.perf_counter()
        if not self.admitted:
            self.admit(grid)
        self.setup_seconds = time.perf_counter() - started

        result = Result()
        label = f"{self.spec.name} on Flower"
        display = _NoDisplay() if self.progress is None else self.progress(self.server, label=label)
        with display as progress:
            server_round = 0
            while server_round < limit and self.next_request() is not None:
                if self.stop is not None and self.stop.is_set():
                    raise RunStopped(f"the run was stopped before round {server_round + 1}")
                server_round += 1
                round_started = time.perf_counter()
                metrics = self.aggregation.run_round(self, server_round, grid)
                self.round_seconds.append(time.perf_counter() - round_started)
                if metrics is not None:
                    result.train_metrics_clientapp[server_round] = metrics
                progress.update(self.server)
                LOGGER.info(
                    "[round %d/%d] %s; %s (%.2f s)",
                    server_round,
                    self.server.max_rounds,
                    self.spec.describe_round(self.server.trace[-1]),
                    self.participation[-1].describe(),
                    self.round_seconds[-1],
                )
        LOGGER.info(
            "%s finished after %d round(s): %s",
            self.spec.name,
            server_round,
            self.server.result().stopped_because,
        )
        return result

    # -- internals ----------------------------------------------------------------

    def admit(self, grid: Grid) -> Federation:
        """Wait for the nodes and admit them (:class:`~strategies.admission.Admission`); with
        ``run.shards = "auto"``, the number of shards becomes the nodes' own."""
        self.federation = Admission(
            self.federation_kind,
            self.num_shards,
            self.n_users,
            self.connect_timeout,
            self.round_timeout,
            self.stop,
            self.status,
        ).run(grid)
        self.admitted = True
        if self.federation_kind == SHARDS:
            self.num_shards = len(self.federation.members)
        return self.federation

    def targets(self, server_round: int, request: Request, grid: Grid) -> tuple[dict[int, Request], RoundParticipation]:
        """The online nodes to ask and their requests; offline ones are recorded, not asked."""
        participation = RoundParticipation(server_round)
        online = set(grid.get_node_ids())
        asked: dict[int, Request] = {}
        for node, shard in self.federation.members.items():
            node_request = self.spec.narrow(request, shard)
            if node_request is None:
                continue
            if node in online:
                asked[node] = node_request
            else:
                participation.offline.append(shard.shard_index)
        participation.asked = len(asked)
        return asked, participation

    def count_undelivered(self, pushed: set[str]) -> None:
        """A request the grid could not store is a failure of its node, not a late reply."""
        assert self._pending is not None
        pending = self._pending
        for message in [m for m in pending.messages if m.metadata.message_id not in pushed]:
            node = message.metadata.dst_node_id
            shard = self.federation.members[node].shard_index
            LOGGER.warning(
                "round %s: the request to shard %d (node %d) could not be delivered",
                message.metadata.group_id,
                shard,
                node,
            )
            pending.participation.failed.append(shard)
            pending.messages.remove(message)
            del pending.asked[node]

    def _accept(self, reply: Message, node: int, request: Request, shard: ShardInfo) -> Response:
        """Decode one reply and check it against its node's request, or raise why not."""
        if reply.metadata.src_node_id != node:
            raise InvalidReply(f"the reply claims to come from node {reply.metadata.src_node_id}")
        budget = self.spec.reply_budget(request, shard, self.server)
        if budget is not None:
            size = sum(len(array.data) for record in reply.content.array_records.values() for array in record.values())
            if size > budget:
                raise InvalidReply(f"oversized: {size} bytes of arrays, an honest reply has at most {budget}")
        response = self.response_codec.decode(reply.content)
        if response.round != request.round:
            raise InvalidReply(f"it answers protocol round {response.round}, the request was for {request.round}")
        self.spec.check_reply(request, response, shard, self.server)
        return response

    def next_request(self) -> Request | None:
        """The server's next request (planned once, then the same until absorbed), timed as its own work."""
        with self.clock.server():
            return self.server.next_request()

    def absorb_round(
        self, server_round: int, responses: list[Response], participation: RoundParticipation
    ) -> MetricRecord:
        """Absorb the sum of the valid responses; refuse a round that nobody answered."""
        members = {shard.shard_index: shard for shard in self.federation.members.values()}
        participation.lost_users = sum(members[index].users for index in participation.lost_shards)
        self.participation.append(participation)
        if not responses:
            raise FederationError(
                f"round {server_round}: no node contributed ({participation.describe()}); "
                f"see the warnings above, and run.round_timeout = {self.round_timeout:g} s"
            )
        with self.clock.server():
            self.server.absorb(self.spec.response_type.combine(responses))
        return round_metrics(self.server.trace[-1], participation)


def round_metrics(record: RoundRecord, participation: RoundParticipation) -> MetricRecord:
    """A round's numeric values and participation as a Flower MetricRecord (for ``Result``)."""
    metrics: dict[str, Any] = {}
    for key, value in {**record.values, **participation.to_dict()}.items():
        if isinstance(value, bool):
            metrics[key] = int(value)
        elif isinstance(value, (int, float)):
            metrics[key] = value
        elif isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            # protobuf needs one element type per list
            metrics[key] = [float(v) for v in value] if any(isinstance(v, float) for v in value) else list(value)
    return MetricRecord(metrics)
