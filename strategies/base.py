"""A Flower Strategy that drives any protocol's server state machine.

Heavy-hitter discovery trains no model, and its number of rounds is not
known in advance: the protocol stops when a round adds nothing (at most
after its ``max_rounds``).  So :class:`ProtocolStrategy` overrides
``Strategy.start`` with a loop that runs until ``next_request()`` is
``None``, and maps one protocol round onto Flower's train phase:

* ``configure_train``: the round's request, encoded once, to every node;
* ``aggregate_train``: decode every node's reply, ``Response.combine`` them
  (responses are additive), ``absorb`` the sum;
* there is no federated evaluation phase (``configure_evaluate`` sends
  nothing): utility is measured on the server against the true counts.

Before round 1 every node reports its shard (``strategies.shards``); a
round then needs a valid reply from every one of those nodes, because a
missing shard would silently change the population instead of failing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedhh.protocols import Response, RoundRecord, ServerProtocol
from simulations.progress import RoundProgress

from .codec import MessageCodec, MessageDecodeError
from .shards import ROUND_MESSAGE, SHARD_INFO_CODEC, SHARD_INFO_MESSAGE, ShardInfo, order_by_shard

# A child of Flower's logger, so round lines reach the same handlers (and
# `flwr log`) as Flower's own; it keeps INFO when Flower's logger is quieted.
LOGGER = logging.getLogger("flwr.fedhh")


class FederationError(RuntimeError):
    """A round could not be completed by every shard's node."""


class ProtocolStrategy(Strategy):
    """Run one protocol to completion over the nodes of a Flower federation."""

    def __init__(
        self,
        server: ServerProtocol,
        request_codec: MessageCodec[Any],
        response_codec: MessageCodec[Any],
        n_users: int,
        num_nodes: int,
        *,
        connect_timeout: float = 120.0,
        show_progress: bool = False,
    ) -> None:
        """``num_nodes``: the nodes (shards) to wait for before round 1."""
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        if request_codec.message_type is not server.request_type:
            raise TypeError(f"{server.name} sends {server.request_type.__name__}, codec is for {request_codec.tag}")
        if response_codec.message_type is not server.response_type:
            raise TypeError(f"{server.name} expects {server.response_type.__name__}, codec is for {response_codec.tag}")
        self.server = server
        self.request_codec = request_codec
        self.response_codec = response_codec
        self.n_users = n_users
        self.num_nodes = num_nodes
        self.connect_timeout = connect_timeout
        self.show_progress = show_progress
        self._nodes: list[int] = []  # node ids, position = shard index
        self._pending_request: Any = None
        self.setup_seconds = 0.0
        self.round_seconds: list[float] = []

    # -- Strategy interface -----------------------------------------------------

    def summary(self) -> None:
        """Log what this strategy will run."""
        LOGGER.info(
            "%s: %s over %d node(s) (one shard of users each), %d users, at most %d rounds",
            type(self).__name__,
            self.server.name,
            self.num_nodes,
            self.n_users,
            self.server.max_rounds,
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The protocol's next request, to the node of every shard."""
        request = self.server.next_request()
        if request is None:
            return []
        self._pending_request = request
        content = self.request_codec.encode(request)
        return [
            Message(content=content, dst_node_id=node, message_type=ROUND_MESSAGE, group_id=str(server_round))
            for node in self._nodes
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Combine every shard's response and let the protocol absorb the sum."""
        if self._pending_request is None:
            raise FederationError(f"round {server_round}: replies arrived but no request was sent")
        request, self._pending_request = self._pending_request, None
        contents = self._contents_by_node(replies, f"round {server_round}")
        responses: list[Response] = []
        for shard, node in enumerate(self._nodes):
            try:
                response = self.response_codec.decode(contents[node])
            except MessageDecodeError as error:
                raise FederationError(f"round {server_round}: shard {shard} (node {node}) sent {error}") from None
            if response.round != request.round:
                raise FederationError(
                    f"round {server_round}: shard {shard} (node {node}) answered protocol round "
                    f"{response.round}, expected {request.round}"
                )
            responses.append(response)
        self.server.absorb(self.server.response_type.combine(responses))
        return None, round_metrics(self.server.trace[-1])

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
        timeout: float = 600.0,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Run rounds until the protocol stops (or ``num_rounds``, at most ``max_rounds``).

        ``timeout`` bounds each round's wait for replies.  The model-training
        arguments of ``Strategy.start`` have no meaning here and are refused.
        """
        if any(arg is not None for arg in (initial_arrays, train_config, evaluate_config, evaluate_fn)):
            raise ValueError(
                f"{type(self).__name__} trains no model: initial_arrays, train_config, "
                "evaluate_config and evaluate_fn must not be given"
            )
        limit = self.server.max_rounds if num_rounds is None else num_rounds
        if not 1 <= limit <= self.server.max_rounds:
            raise ValueError(f"num_rounds must be in 1..{self.server.max_rounds}, got {num_rounds}")
        self.summary()
        started = time.perf_counter()
        self._connect(grid)
        self.setup_seconds = time.perf_counter() - started

        result = Result()
        label = f"{self.server.name} on Flower"
        with RoundProgress(self.server, enabled=self.show_progress, label=label) as progress:
            server_round = 0
            while server_round < limit and not self._finished():
                server_round += 1
                round_started = time.perf_counter()
                messages = self.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid)
                replies = grid.send_and_receive(messages, timeout=timeout)
                _, metrics = self.aggregate_train(server_round, replies)
                self.round_seconds.append(time.perf_counter() - round_started)
                if metrics is not None:
                    result.train_metrics_clientapp[server_round] = metrics
                progress.update(self.server)
                LOGGER.info(
                    "[round %d/%d] %s (%.2f s)",
                    server_round,
                    self.server.max_rounds,
                    self.describe_round(self.server.trace[-1]),
                    self.round_seconds[-1],
                )
        LOGGER.info(
            "%s finished after %d round(s): %s",
            self.server.name,
            server_round,
            self.server.result().stopped_because,
        )
        return result

    # -- protocol-specific hooks ------------------------------------------------

    def describe_round(self, record: RoundRecord) -> str:
        """The round's log line; subclasses show what matters for their protocol."""
        return ", ".join(f"{key} {value}" for key, value in record.values.items())

    # -- internals ----------------------------------------------------------------

    def _finished(self) -> bool:
        return self.server.next_request() is None

    def _connect(self, grid: Grid) -> None:
        """Wait for ``num_nodes`` nodes, learn each one's shard, check the users are covered."""
        deadline = time.perf_counter() + self.connect_timeout
        while len(nodes := sorted(grid.get_node_ids())) < self.num_nodes:
            if time.perf_counter() > deadline:
                raise FederationError(
                    f"only {len(nodes)} of {self.num_nodes} node(s) connected within "
                    f"{self.connect_timeout:.0f} s (run.shards must equal the number of SuperNodes)"
                )
            time.sleep(0.05)
        if len(nodes) > self.num_nodes:
            raise FederationError(
                f"{len(nodes)} nodes connected but run.shards = {self.num_nodes}: "
                "run.shards must equal the number of SuperNodes"
            )
        self._nodes = nodes
        messages = [
            Message(content=RecordDict(), dst_node_id=node, message_type=SHARD_INFO_MESSAGE, group_id="shards")
            for node in nodes
        ]
        replies = grid.send_and_receive(messages, timeout=self.connect_timeout)
        contents = self._contents_by_node(replies, "shard query")
        infos: dict[int, ShardInfo] = {}
        for node, content in contents.items():
            try:
                infos[node] = SHARD_INFO_CODEC.decode(content)
            except MessageDecodeError as error:
                raise FederationError(f"shard query: node {node} sent {error}") from None
        self._nodes = order_by_shard(infos, self.n_users)
        LOGGER.info("%d node(s) hold %d users, one shard each", len(self._nodes), self.n_users)

    def _contents_by_node(self, replies: Iterable[Message], what: str) -> dict[int, RecordDict]:
        """One valid reply per expected node, or a FederationError naming who failed."""
        contents: dict[int, RecordDict] = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            if node not in self._nodes:
                raise FederationError(f"{what}: reply from unexpected node {node}")
            if reply.has_error():
                raise FederationError(f"{what}: node {node} failed: {reply.error.reason}")
            if node in contents:
                raise FederationError(f"{what}: node {node} replied twice")
            contents[node] = reply.content
        missing = [node for node in self._nodes if node not in contents]
        if missing:
            raise FederationError(f"{what}: no reply from node(s) {missing} before the timeout")
        return contents


def round_metrics(record: RoundRecord) -> MetricRecord:
    """A round record's numeric values as a Flower MetricRecord (for ``Result``)."""
    metrics: dict[str, Any] = {}
    for key, value in record.values.items():
        if isinstance(value, bool):
            metrics[key] = int(value)
        elif isinstance(value, (int, float)):
            metrics[key] = value
        elif isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            # protobuf needs one element type per list
            metrics[key] = [float(v) for v in value] if any(isinstance(v, float) for v in value) else list(value)
    return MetricRecord(metrics)
