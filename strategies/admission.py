"""Before round 1: wait for the SuperNodes, ask each which users it holds, admit them.

Nodes are asked as they connect (:data:`~strategies.shards.SHARD_INFO_MESSAGE`),
so a node whose answer can never fit is refused at once rather than after
``run.connect_timeout``, and each node builds its shard while the others
are still connecting.  What the server waits for:

* a ``shards`` federation with a fixed ``run.shards``: that many nodes,
  each holding the shard its node config names (``partition-id`` of
  ``num-partitions``); a node that splits the users into another number
  of shards stops the run with the fix;
* ``run.shards = "auto"``: the nodes' own split.  The first answer says
  how many shards the nodes split the users into (Flower's simulation
  sets ``num-partitions`` to its number of SuperNodes, and a deployment's
  node configs say it); the server waits for that many nodes, which must
  all agree;
* a server that holds no data (``run.evaluation = false`` and a population
  the server cannot read) learns ``n`` from the nodes, which must agree:
  in a ``shards`` federation the nodes are trusted with their users' data
  (``docs/deployment.md``, "Trust");
* a ``devices`` federation: the ``n`` enrolled devices, or those that came
  within ``run.connect_timeout``; a device whose claim is invalid is left
  out (``strategies.shards.admit``).

Everything that stops a ``shards`` federation here is a
:class:`~strategies.errors.FederationError` of one line that says what to
change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flwr.app import Message
from flwr.serverapp import Grid

from .codec import MessageDecodeError
from .errors import FederationError, last_line
from .exchange import exchange, pause
from .shards import (
    SHARD_INFO_CODEC,
    SHARD_INFO_MESSAGE,
    SHARD_QUERY_CODEC,
    SHARDS,
    Federation,
    ShardInfo,
    ShardQuery,
    admit,
)

LOGGER = logging.getLogger("flwr.fedhh")  # strategies.base's: the run's own lines
WAIT_POLL = 0.05  # seconds between looks for newly connected nodes

StatusCallback = Callable[[str], None]  # what the server is doing now, for a driver's status line


@dataclass
class Admission:
    """How the server admits its nodes before round 1 (the settings of one run)."""

    kind: str  # run.federation: SHARDS or DEVICES
    shards: int | None  # run.shards; None: "auto" (the nodes' split); a device federation: n
    n_users: int | None  # None: the nodes say (a shards federation whose server holds no data)
    connect_timeout: float
    round_timeout: float
    stop: threading.Event | None = None
    status: StatusCallback | None = None

    def run(self, grid: Grid) -> Federation:
        """Wait for the nodes, learn each one's shard, and admit them into the federation."""
        deadline = time.monotonic() + self.connect_timeout
        expected = self.shards
        infos: dict[int, ShardInfo] = {}
        problems: dict[int, str] = {}
        shown = ""
        while True:
            nodes = sorted(grid.get_node_ids())
            new = [node for node in nodes if node not in infos and node not in problems]
            if new:
                of = f" of {expected}" if expected is not None else ""
                shown = self._tell(f"SuperNodes building their shards: {len(nodes)}{of} connected", shown)
                messages = [
                    Message(
                        content=SHARD_QUERY_CODEC.encode(ShardQuery()),
                        dst_node_id=node,
                        message_type=SHARD_INFO_MESSAGE,
                        group_id="shards",
                    )
                    for node in new
                ]
                # Each node builds its shard now: on a loaded machine that takes long, but as long as
                # replies keep coming the wait goes on (run.round_timeout without any is a failure).
                replies, _ = exchange(grid, messages, self.round_timeout, self.stop, while_progressing=True)
                found, failed = self._read(messages, replies)
                infos.update(found)
                problems.update(failed)
                if self.kind == SHARDS:
                    if problems:
                        raise FederationError("shard query: " + "; ".join(problems[node] for node in sorted(problems)))
                    expected = self._split(infos, expected)
            answered = len(infos) + len(problems)
            if (expected is not None and answered >= expected) or time.monotonic() >= deadline:
                break
            of = f" of {expected}" if expected is not None else ""
            shown = self._tell(f"waiting for SuperNodes: {len(nodes)}{of} connected", shown)
            pause(WAIT_POLL, self.stop)
        if self.kind == SHARDS:
            self._check_count(infos, expected)
        elif not infos and not problems:
            raise FederationError(
                f"no device connected within run.connect_timeout = {self.connect_timeout:g} s: start the devices' "
                "SuperNodes (docs/deployment.md), or raise run.connect_timeout"
            )
        n_users = self.n_users if self.n_users is not None else _population(infos)
        federation = admit(infos, n_users, len(infos) if expected is None else expected, self.kind)
        for _, problem in sorted({**problems, **federation.refused}.items()):
            LOGGER.warning("left out of the federation: %s", problem)
        held = n_users - federation.missing_users
        self._tell(f"{len(federation.members)} node(s) admitted, holding {held:,} of {n_users:,} users", shown)
        return federation

    def _tell(self, text: str, shown: str) -> str:
        """Say what the server is doing now, once per change; the text shown."""
        if text != shown:
            LOGGER.info("%s", text)
            if self.status is not None:
                self.status(text)
        return text

    def _read(self, messages: list[Message], replies: list[Message]) -> tuple[dict[int, ShardInfo], dict[int, str]]:
        """The nodes' answers to the shard query, and why the others gave none."""
        node_of = {message.metadata.message_id: message.metadata.dst_node_id for message in messages}
        infos: dict[int, ShardInfo] = {}
        problems: dict[int, str] = {}
        for reply in replies:
            node = node_of[reply.metadata.reply_to_message_id]
            if reply.has_error():
                problems[node] = f"node {node} failed the shard query: {last_line(reply.error.reason)}"
                continue
            try:
                infos[node] = SHARD_INFO_CODEC.decode(reply.content)
            except MessageDecodeError as error:
                problems[node] = f"node {node} sent {error}"
        for node in node_of.values():
            if node not in infos and node not in problems:
                problems[node] = (
                    f"node {node} did not answer the shard query: no node answered for "
                    f"run.round_timeout = {self.round_timeout:g} s; raise run.round_timeout if the nodes are slow "
                    "to build their shards"
                )
        return infos, problems

    def _split(self, infos: dict[int, ShardInfo], expected: int | None) -> int | None:
        """The number of shards of a ``shards`` federation, once a node has said it; a node whose
        split cannot be the run's stops it here, with the fix."""
        claims = {info.num_shards: node for node, info in infos.items()}
        if expected is None and len(claims) > 1:
            described = ", ".join(f"node {node}: {count}" for count, node in sorted(claims.items()))
            raise FederationError(
                f"the SuperNodes split the users into different numbers of shards ({described}; num-partitions in "
                "their node configs): give every node the same num-partitions"
            )
        if expected is None:
            return next(iter(claims), None)
        for count, node in sorted(claims.items()):
            if count != expected:
                raise FederationError(
                    f"run.shards = {expected} but SuperNode {node} holds a shard of {count} (num-partitions in its "
                    f'node config): set run.shards="auto" to run on the SuperNodes that connect, or run {expected} '
                    f'SuperNodes (a simulation: --federation-config "num-supernodes={expected}")'
                )
        return expected

    def _check_count(self, infos: dict[int, ShardInfo], expected: int | None) -> None:
        """Every shard of a ``shards`` federation needs its node before round 1."""
        if not infos:
            raise FederationError(
                f"no SuperNode connected within run.connect_timeout = {self.connect_timeout:g} s: start the "
                "federation's SuperNodes (docs/deployment.md), or run on a simulation federation (`flwr run .` "
                "starts one)"
            )
        assert expected is not None
        if len(infos) < expected:
            held = sorted(info.shard_index for info in infos.values())
            missing = sorted(set(range(expected)) - set(held))
            raise FederationError(
                f"{len(infos)} of {expected} SuperNodes connected within run.connect_timeout = "
                f"{self.connect_timeout:g} s (no node holds shard(s) {missing}): start the missing SuperNodes, "
                "or raise run.connect_timeout"
            )


def _population(infos: dict[int, ShardInfo]) -> int:
    """``n`` as the nodes of a ``shards`` federation state it (the server holds no data to count)."""
    sizes = {info.population: node for node, info in infos.items()}
    if len(sizes) != 1:
        described = ", ".join(f"node {node}: {size}" for size, node in sorted(sizes.items()))
        raise FederationError(
            f"the SuperNodes built populations of different sizes ({described}): every node must read the same "
            "population (population.* in the run config, and the same file where population.path names one)"
        )
    return next(iter(sizes))
