"""A protocol driven to its result over shards of users: the one round loop of every in-process driver.

Each round the server's request goes to every shard, the shards' responses
are combined (they are additive: the population's response is the sum of
its shards') and the server absorbs the sum, until the server has no
request left (:func:`drive`).  The fast driver runs this loop over shards
held in this process (:class:`InProcessShards`) or by Ray actors, a sweep's
trial over one shard holding everyone, and :func:`fedhh.run` in this
process; Flower's strategy drives the same server over messages.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from .data.counted import CountedShard
from .data.population import PopulationCounts, Shard, check_shard_count
from .experiment import Experiment
from .protocols import ProtocolResult, Request, Response, ServerProtocol
from .run_clock import RunClock

RoundCallback = Callable[[ServerProtocol], None]
# Given the run's server, a context around its rounds that yields what to call after each round.
RoundWatch = Callable[[ServerProtocol], AbstractContextManager[RoundCallback | None]]


def drive(
    server: ServerProtocol,
    answer: Callable[[Any], Sequence[Response]],  # a request of the server's protocol -> the shards' responses
    on_round: RoundCallback | None = None,
    clock: RunClock | None = None,
) -> ProtocolResult:
    """Run a server to completion against a function returning the shards' responses (at least one,
    summed by their class's ``combine``); ``clock`` (if given) accumulates the server's and the shards'
    time (:class:`RunClock`)."""
    clock = clock if clock is not None else RunClock()
    while True:
        with clock.server():
            request = server.next_request()
        if request is None:
            break
        with clock.shards():
            responses = answer(request)
        with clock.server():
            server.absorb(type(responses[0]).combine(list(responses)))
        if on_round is not None:
            on_round(server)
    with clock.server():
        return server.result()


class ShardHolders(Protocol):
    """Whatever holds a run's shards and answers each request for all of them."""

    counts: PopulationCounts  # the shards' true counts, summed (the truth of the evaluation)
    nodes: list[str]  # where each shard is held, for holders on several machines (else empty)

    def answer(self, request: Request) -> list[Response]: ...

    def close(self) -> None: ...


class InProcessShards:
    """All shards in this process (small populations, tests, notebooks, one core)."""

    def __init__(self, experiment: Experiment, num_shards: int) -> None:
        self._experiment = experiment
        # each shard's users, or in a law simulation their item counts (Experiment.hold_shard)
        self.shards: list[Shard | CountedShard] = [experiment.hold_shard(i, num_shards) for i in range(num_shards)]
        self.counts = PopulationCounts.combine(shard.counts() for shard in self.shards)
        self.nodes: list[str] = []
        experiment.source.vocabulary.prefixes.build_all()  # one-time, shared by the shards

    def answer(self, request: Request) -> list[Response]:
        return [self._experiment.answer(request, shard) for shard in self.shards]

    def close(self) -> None:
        self.shards.clear()


@dataclass
class ShardRun:
    """A protocol run to its result over shards, with the shards' true counts and where time went."""

    result: ProtocolResult
    timing: dict[str, float]  # setup_s (placing the shards), rounds_s, and within it server_s, shards_s
    counts: PopulationCounts
    nodes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _unwatched(server: ServerProtocol) -> Iterator[None]:
    yield None


def run_over_shards(
    experiment: Experiment,
    num_shards: int,
    hold: Callable[[Experiment, int], ShardHolders] = InProcessShards,
    *,
    when_placed: Callable[[], None] | None = None,
    watch: RoundWatch | None = None,
) -> ShardRun:
    """Place the experiment's population on ``num_shards`` shards (``hold``, in this process by
    default), then drive a fresh server to its result over them; the holders are closed after.

    ``when_placed`` runs once every shard is held, before the first round: what must not happen
    for a run whose shards cannot be placed (the privacy charge).  ``watch`` wraps the rounds
    (a progress bar) and yields what to call after each one.
    """
    check_shard_count(experiment.n_users, num_shards)
    started = time.perf_counter()
    holders = hold(experiment, num_shards)
    try:
        setup = time.perf_counter() - started
        if when_placed is not None:
            when_placed()
        server = experiment.make_server()
        clock = RunClock()
        rounds_started = time.perf_counter()
        with (watch or _unwatched)(server) as on_round:
            result = drive(server, holders.answer, on_round, clock)
        rounds = time.perf_counter() - rounds_started
    finally:
        holders.close()
    timing = {"setup_s": setup, "rounds_s": rounds, "server_s": clock.server_s, "shards_s": clock.shards_s}
    return ShardRun(result, timing, holders.counts, list(holders.nodes))
