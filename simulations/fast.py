"""The fast driver: the protocol's state machine with shards held in process or by Ray actors.

No message encoding, no per-message scheduling: each round the request goes
to every shard holder, the additive responses are combined, and the server
absorbs the sum.  This is the same state machine and the same client
function as under Flower, so for one seed both give the same discovery.
Ray actors carry Monte Carlo runs and sweeps over populations too large for
one process, and connect to a Ray cluster when ``RAY_ADDRESS`` is set.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from fedhh.config import FedhhConfig
from fedhh.data.counted import CountedShard
from fedhh.data.population import PopulationCounts, Shard, check_shard_count
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.protocols import ProtocolResult, Request, Response, ServerProtocol
from strategies.run_clock import RunClock

from .placement import dataset_placement
from .progress import RoundProgress
from .ray_runtime import ADDRESS_VARIABLE, named_cluster, ray_runtime

Backend = Literal["inprocess", "ray"]


@dataclass
class FastRun:
    """A finished run, with the true counts of the shards it built (their sum: the truth of the
    evaluation, :meth:`fedhh.experiment.Experiment.finish`, at no second pass over the population)."""

    result: ProtocolResult
    timing: dict[str, float]
    backend: str
    counts: PopulationCounts
    nodes: list[str]  # the Ray node of each shard's actor (none in process)


def choose_backend(requested: str) -> Backend:
    """``auto`` uses Ray only when a Ray cluster is named (``RAY_ADDRESS``, never ``auto``).

    A round costs O(sampled users), milliseconds for a million users, so on
    one machine Ray's start-up (seconds) and per-call overhead (per actor)
    only pay where the shards live on other machines.
    """
    if requested == "auto":
        return "ray" if named_cluster(os.environ.get(ADDRESS_VARIABLE)) else "inprocess"
    if requested not in ("inprocess", "ray"):
        raise InputError(f"run.backend: got {requested!r}; allowed: ['auto', 'inprocess', 'ray']")
    return requested  # type: ignore[return-value]


def drive(
    server: ServerProtocol,
    answer: Callable[[Any], Sequence[Response]],  # a request of the server's protocol -> the shards' responses
    on_round: Callable[[ServerProtocol], None] | None = None,
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


class InProcessShards:
    """All shards in this process (small populations, tests, one core)."""

    def __init__(self, experiment: Experiment, num_shards: int) -> None:
        self._experiment = experiment
        self.shards: list[Shard | CountedShard] = [experiment.hold_shard(i, num_shards) for i in range(num_shards)]
        self.counts = PopulationCounts.combine(shard.counts() for shard in self.shards)
        experiment.source.vocabulary.prefixes.build_all()  # one-time, shared by the shards

    def answer(self, request: Request) -> list[Response]:
        return [self._experiment.answer(request, shard) for shard in self.shards]

    def close(self) -> None:
        self.shards.clear()

    @property
    def nodes(self) -> list[str]:
        return []


class ShardHolder:
    """A Ray actor's state: one shard (its users, or in a law simulation their counts), built
    inside the actor from the config."""

    def __init__(self, flat_config: dict[str, Any], shard_index: int, num_shards: int) -> None:
        from fedhh.config import config_from_flat

        self._experiment = Experiment(config_from_flat(flat_config))
        self._shard = self._experiment.hold_shard(shard_index, num_shards)
        self._shard.vocabulary.prefixes.build_all()  # a one-time cost of placing the shard

    def respond(self, request: Request) -> Response:
        return self._experiment.answer(request, self._shard)

    def counts(self) -> PopulationCounts:
        """The shard's true counts; also tells the driver that the shard is placed."""
        return self._shard.counts()

    def node_id(self) -> str:
        """The Ray node this actor runs on (where its shard was read)."""
        import ray

        return ray.get_runtime_context().get_node_id()


class RayShards:
    """Shards held by Ray actors, one per shard, answering in parallel.

    A shard actor that dies (its process killed, its machine lost) does not
    end the run: Ray restarts it (``max_restarts``), which rebuilds the same
    shard from the config, and re-sends the round's call to the new actor
    (``max_task_retries``).  Responses depend only on the request, the
    shard and keyed randomness, so the retried answer, and the run's result,
    are unchanged.
    """

    MAX_RESTARTS = 3  # per actor and run; a shard that keeps dying fails the run
    INIT_ARGS: ClassVar[dict[str, Any]] = {"log_to_driver": False, "configure_logging": False, "logging_level": "ERROR"}

    def __init__(self, config: FedhhConfig, num_shards: int) -> None:
        """Start one actor per shard; Ray must be running (:func:`~simulations.ray_runtime.ray_runtime`)."""
        import ray

        self._ray = ray
        cpus = max(ray.available_resources().get("CPU", 1.0), 1.0)
        holder = ray.remote(ShardHolder)
        retries = {"max_restarts": self.MAX_RESTARTS, "max_task_retries": self.MAX_RESTARTS}
        flat = config.to_flat()
        placements = dataset_placement(config, num_shards)  # a population on disk: the nodes holding it
        if placements is None:
            actor_class = holder.options(num_cpus=min(1.0, cpus / num_shards), **retries)
            self.actors: list[Any] = [actor_class.remote(flat, i, num_shards) for i in range(num_shards)]
        else:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            self.actors = [
                holder.options(num_cpus=place.cpus, **retries, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    place.node_id, soft=False)).remote({**flat, "population.path": place.folder}, i, num_shards)
                for i, place in enumerate(placements)
            ]
        self.counts = PopulationCounts.combine(ray.get([actor.counts.remote() for actor in self.actors]))
        self.nodes = ray.get([actor.node_id.remote() for actor in self.actors])

    def answer(self, request: Request) -> list[Response]:
        return self._ray.get([actor.respond.remote(request) for actor in self.actors])

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor, no_restart=True)
        self.actors.clear()


def run_fast(
    experiment: Experiment,
    num_shards: int,
    backend: str = "auto",
    show_progress: bool = False,
    when_placed: Callable[[], None] | None = None,
) -> FastRun:
    """Run the experiment's protocol over ``num_shards`` shards; time setup and rounds apart,
    and within the rounds the server's own work and the shards' answers (``server_s``,
    ``shards_s``: :class:`RunClock`).

    ``when_placed`` runs once every shard is held, before the first round: what must not happen
    for a run its shards cannot be placed for (the privacy charge)."""
    chosen = choose_backend(backend)
    check_shard_count(experiment.n_users, num_shards)
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        if chosen == "inprocess":
            holders: InProcessShards | RayShards = InProcessShards(experiment, num_shards)
        else:
            stack.enter_context(ray_runtime(**RayShards.INIT_ARGS))
            holders = RayShards(experiment.config, num_shards)
        stack.callback(holders.close)
        setup = time.perf_counter() - started
        if when_placed is not None:
            when_placed()
        server = experiment.make_server()
        clock = RunClock()
        rounds_started = time.perf_counter()
        with RoundProgress(server, label=experiment.spec.name, enabled=show_progress) as progress:
            result = drive(server, holders.answer, progress.update, clock)
        rounds = time.perf_counter() - rounds_started
    timing = {"setup_s": setup, "rounds_s": rounds, "server_s": clock.server_s, "shards_s": clock.shards_s}
    return FastRun(result, timing, chosen, holders.counts, holders.nodes)
