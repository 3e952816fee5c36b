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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from fedhh.config import FedhhConfig
from fedhh.data.population import PopulationCounts, check_shard_count
from fedhh.driving import InProcessShards, RoundCallback, ShardHolders, run_over_shards
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.protocols import ProtocolResult, Request, Response, ServerProtocol

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
                holder.options(
                    num_cpus=place.cpus,
                    **retries,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(place.node_id, soft=False),
                ).remote({**flat, "population.path": place.folder}, i, num_shards)
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
    """Run the experiment's protocol over ``num_shards`` shards (:func:`fedhh.driving.run_over_shards`);
    time setup and rounds apart, and within the rounds the server's own work and the shards' answers
    (``server_s``, ``shards_s``: :class:`~fedhh.run_clock.RunClock`).

    ``when_placed`` runs once every shard is held, before the first round: what must not happen
    for a run its shards cannot be placed for (the privacy charge)."""
    chosen = choose_backend(backend)
    check_shard_count(experiment.n_users, num_shards)
    with contextlib.ExitStack() as stack:

        def on_ray(experiment: Experiment, num_shards: int) -> ShardHolders:
            stack.enter_context(ray_runtime(**RayShards.INIT_ARGS))  # Ray's start counts as setup
            return RayShards(experiment.config, num_shards)

        @contextlib.contextmanager
        def progress(server: ServerProtocol) -> Iterator[RoundCallback]:
            with RoundProgress(server, label=experiment.spec.name, enabled=show_progress) as bar:
                yield bar.update

        run = run_over_shards(
            experiment,
            num_shards,
            InProcessShards if chosen == "inprocess" else on_ray,
            when_placed=when_placed,
            watch=progress,
        )
    return FastRun(run.result, run.timing, chosen, run.counts, run.nodes)
