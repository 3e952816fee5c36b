"""The ClientApp: a SuperNode answers for one shard of virtual users.

A node's shard comes from its node config (``partition-id`` and
``num-partitions``, which Flower's simulation sets for every virtual
SuperNode); its population comes from the run config, the same dotted keys
as a fedhh config file.  Building the experiment and the shard is the
expensive part, so both are cached per process: a Ray actor that serves
several nodes, or one node for many rounds, builds each only once.

Two message types arrive (see ``strategies.shards``): the shard query
before round 1, and one request per round, answered by the protocol's own
``respond`` over every user of the shard with randomness keyed by
(seed, round, global user id), so the answer is the one the fast driver
computes for the same users.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedhh.config import Scalar, config_from_flat
from fedhh.experiment import Experiment
from fedhh.population import Shard

from .registry import flower_protocol
from .shards import SHARD_INFO_CODEC, ShardInfo

PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
SHARD_CACHE_SIZE = 64  # a Ray actor may serve every node of a federation


def shard_of(node_config: Mapping[str, Any]) -> tuple[int, int]:
    """(shard index, number of shards) from a node config, with a clear error if absent."""
    missing = [key for key in (PARTITION_ID, NUM_PARTITIONS) if key not in node_config]
    if missing:
        raise ValueError(
            f"node config lacks {missing}: a fedhh SuperNode needs to know its shard; start it "
            f"with --node-config \"{PARTITION_ID}=0 {NUM_PARTITIONS}=8\" (simulation sets both)"
        )
    index, count = node_config[PARTITION_ID], node_config[NUM_PARTITIONS]
    if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count):
        raise ValueError(f"node config: need 0 <= {PARTITION_ID} < {NUM_PARTITIONS}, got {index} and {count}")
    return index, count


def _config_key(run_config: Mapping[str, Any]) -> tuple[tuple[str, Scalar], ...]:
    """A hashable key of the run config, for the per-process caches."""
    return tuple(sorted(run_config.items()))


@functools.lru_cache(maxsize=2)
def _experiment(config_key: tuple[tuple[str, Scalar], ...]) -> Experiment:
    return Experiment(config_from_flat(dict(config_key)))


@functools.lru_cache(maxsize=SHARD_CACHE_SIZE)
def _shard(config_key: tuple[tuple[str, Scalar], ...], index: int, count: int) -> Shard:
    return _experiment(config_key).build_shard(index, count)


def make_client_app(run_config: Mapping[str, Scalar] | None = None) -> ClientApp:
    """The ClientApp; ``run_config``, if given, stands in for the context's run config.

    Under ``flwr run`` the nodes get the run config from Flower (``app``
    below).  Flower's in-process ``run_simulation`` gives nodes an empty run
    config, so ``simulations.flower`` binds the experiment's config here.
    """
    bound = dict(run_config) if run_config is not None else None
    client_app = ClientApp()

    @client_app.query("shard")
    def describe_shard(message: Message, context: Context) -> Message:
        """Build this node's shard (cached) and say which users it holds."""
        key = _config_key(context.run_config if bound is None else bound)
        index, count = shard_of(context.node_config)
        shard = _shard(key, index, count)
        info = ShardInfo(index, count, shard.first_user, shard.n_users, _experiment(key).n_users)
        return Message(SHARD_INFO_CODEC.encode(info), reply_to=message)

    @client_app.query("round")
    def answer_round(message: Message, context: Context) -> Message:
        """The protocol's response of this node's users to the round's request."""
        key = _config_key(context.run_config if bound is None else bound)
        experiment = _experiment(key)
        codecs = flower_protocol(experiment.config["protocol"]["name"])
        request = codecs.request.decode(message.content)
        shard = _shard(key, *shard_of(context.node_config))
        response = experiment.respond(request, shard, experiment.randomness)
        return Message(codecs.response.encode(response), reply_to=message)

    return client_app


app = make_client_app()
