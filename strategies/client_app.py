"""The ClientApp: a SuperNode answers for one shard of users.

What a node holds depends on ``run.federation``:

* ``shards`` (virtual users): the node's shard comes from its node config
  (``partition-id`` and ``num-partitions``, which Flower's simulation sets
  for every virtual SuperNode) and its users from the population in the
  run config, the same dotted keys as a fedhh config file.  Randomness is
  keyed by (seed, round, global user id), so the answer is the one the
  fast driver computes for the same users.  In a law simulation
  (``run.simulation = "law"``) the node holds its users' item counts
  instead (drawn for a generated population, read for a file or dataset)
  and answers with the protocol's law sampler, whose response has the
  same type, so a node can stand for any number of users;
* ``devices`` (real users): the node is one user's device, its node config
  names the user's global id and data file (``strategies.devices``), and
  its reports draw from the operating system's secure randomness.

A node builds only what answering needs: the population source (for a
sampled population: its vocabulary and distribution, no users) and its own
shard, O(its own users); never the whole population, the truth or the
server's privacy solve, which are the server's.  Both are cached per
process (a Ray actor serving several virtual nodes builds the source once
and each node's shard once; a real SuperNode of Flower 1.41 or 1.42 starts a fresh
ClientApp process for every message, so there each message rebuilds them).
A driver that already holds the source can hand it to the nodes
(``population`` of :func:`make_client_app`, e.g. through Ray's object
store) so they do not rebuild it.

Three message types arrive (see ``strategies.shards``): the shard query
before round 1, one request per round, and, with
``run.secure_aggregation``, the four SecAgg+ stages of a round (Flower
``train`` messages, handled by ``secaggplus_mod`` around the answer).  Every
message is decoded against the contract version this code speaks
(``strategies.codec``): one it cannot decode makes the handler raise, so
the server receives an error reply carrying the reason; a request that
tells the node its previous reply was refused is logged with the server's
reason (``docs/messages.md``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import Mod
from flwr.compat.common import recorddict_compat as compat

from fedhh.config import MAX_SHARDS, FedhhConfig, Scalar, config_from_flat
from fedhh.data.counted import CountedShard, counted_users
from fedhh.data.deny_list import denied_mask, read_deny_list, without_denied
from fedhh.data.population import PopulationSource, Shard, check_shard_count, shard_bounds
from fedhh.data.sources import make_source
from fedhh.errors import InputError
from fedhh.experiment import item_codec
from fedhh.kernels.randomness import KeyedRandomness, RandomnessSource, SecureRandomness
from fedhh.protocols import ClientFunction, ProtocolSpec, Request, Response, get_protocol
from fedhh.protocols.law import LAW, no_law_sampler

from .codec import codec_for, notice_of
from .devices import device_of, device_shard
from .plugins import load_protocol_module
from .secure import masked_reply, request_from_fitins
from .shards import DEVICES, SHARD_INFO_CODEC, SHARD_QUERY_CODEC, ShardInfo

PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
# A Ray actor may serve every node of a simulation: it keeps each one's shard (together at most
# the users of the nodes it serves) rather than rebuilding them every round.
SHARD_CACHE_SIZE = MAX_SHARDS
LOGGER = logging.getLogger("fedhh.client")

ConfigKey = tuple[tuple[str, Scalar], ...]
# Hands a node the population source its driver already built (called once per process).
PopulationProvider = Callable[[], PopulationSource]


def shard_of(node_config: Mapping[str, Any]) -> tuple[int, int]:
    """(shard index, number of shards) from a node config, with a clear error if absent."""
    missing = [key for key in (PARTITION_ID, NUM_PARTITIONS) if key not in node_config]
    if missing:
        raise InputError(
            f"node config lacks {missing}: a fedhh SuperNode needs to know its shard; start it "
            f'with --node-config "{PARTITION_ID}=0 {NUM_PARTITIONS}=8" (simulation sets both)'
        )
    index, count = node_config[PARTITION_ID], node_config[NUM_PARTITIONS]
    if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count):
        raise InputError(f"node config: need 0 <= {PARTITION_ID} < {NUM_PARTITIONS}, got {index} and {count}")
    return index, count


@dataclass(frozen=True)
class NodeData:
    """Everything a node answers with: its users (in a law simulation, their item counts), how
    it answers, and with which randomness."""

    info: ShardInfo
    shard: Shard | CountedShard
    respond: ClientFunction
    randomness: RandomnessSource
    spec: ProtocolSpec
    config: FedhhConfig

    def answer(self, request: Request) -> Response:
        if isinstance(self.shard, CountedShard):  # run.simulation = "law": the spec's law sampler
            assert self.spec.law is not None and isinstance(self.randomness, KeyedRandomness)
            return self.spec.law(request, self.shard, self.randomness)
        return self.respond(request, self.shard, self.randomness)


def node_data(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], population: PopulationProvider | None = None
) -> NodeData:
    """The node's data for this run: a shard of the population, or a device's own user.

    ``population``, if given, provides the run's population source instead
    of building it from the run config.
    """
    key = _config_key(run_config)
    config = _config(key)
    spec = get_protocol(str(config["protocol"]["name"]))
    if config["run"]["federation"] == DEVICES:
        n_users = int(config["population"]["users"])
        user_id, data_file = device_of(node_config, n_users)
        codec = item_codec(config)
        shard = device_shard(user_id, data_file, codec)
        deny_list = read_deny_list(config.run.deny_list, codec)
        if deny_list is not None:  # the device leaves out the known items as a shard's users do
            shard = without_denied(shard, denied_mask(shard.vocabulary, deny_list))
        info = ShardInfo(user_id, n_users, user_id, 1, n_users)
        return NodeData(info, shard, spec.respond, SecureRandomness(), spec, config)
    source = _source(key, population)
    index, count = shard_of(node_config)
    held = _shard(key, population, index, count)
    info = ShardInfo(index, count, held.first_user, held.n_users, source.n_users)
    return NodeData(info, held, spec.respond, KeyedRandomness(int(config["run"]["seed"])), spec, config)


def _config_key(run_config: Mapping[str, Any]) -> ConfigKey:
    """A hashable key of the run config, for the per-process caches."""
    return tuple(sorted(run_config.items()))


@functools.lru_cache(maxsize=2)
def _config(config_key: ConfigKey) -> FedhhConfig:
    run_config = dict(config_key)
    load_protocol_module(run_config)
    return config_from_flat(run_config)


@functools.lru_cache(maxsize=2)
def _source(config_key: ConfigKey, population: PopulationProvider | None) -> PopulationSource:
    if population is not None:
        return population()
    config = _config(config_key)
    codec = item_codec(config)
    deny_list = read_deny_list(config.run.deny_list, codec)
    return make_source(config["population"], codec, config.run.seed, deny_list=deny_list)


@functools.lru_cache(maxsize=SHARD_CACHE_SIZE)
def _shard(
    config_key: ConfigKey, population: PopulationProvider | None, index: int, count: int
) -> Shard | CountedShard:
    """The node's users, or in a law simulation their item counts, drawn as the server's
    :meth:`fedhh.experiment.Experiment.counted_shard` draws them."""
    source = _source(config_key, population)
    check_shard_count(source.n_users, count)
    config = _config(config_key)
    if config.run.simulation == LAW:
        if get_protocol(config.protocol.name).law is None:
            raise no_law_sampler(config.protocol.name)
        return counted_users(source, *shard_bounds(source.n_users, index, count), config.run.seed)
    return source.build_shard(index, count)


def make_client_app(
    run_config: Mapping[str, Scalar] | None = None,
    population: PopulationProvider | None = None,
    mods: Sequence[Mod] = (),
) -> ClientApp:
    """The ClientApp; ``run_config``, if given, stands in for the context's run config.

    Under ``flwr run`` the nodes get the run config from Flower (``app``
    below).  Flower's in-process ``run_simulation`` gives nodes an empty run
    config, so ``simulations.flower`` binds the experiment's config here, and
    may bind ``population``, which provides the source it already built
    (it must be the one the run config describes; it is pickled with the
    app for every message, so it should be a small handle).
    ``mods``: Flower mods wrapped around every handler (outermost first).
    """
    bound = dict(run_config) if run_config is not None else None
    client_app = ClientApp(mods=list(mods))

    def data(context: Context) -> NodeData:
        return node_data(context.run_config if bound is None else bound, context.node_config, population)

    @client_app.query("shard")
    def describe_shard(message: Message, context: Context) -> Message:
        """Build this node's shard (cached) and say which users it holds."""
        SHARD_QUERY_CODEC.decode(message.content)  # refuses a query in a contract version this node cannot read
        return Message(SHARD_INFO_CODEC.encode(data(context).info), reply_to=message)

    @client_app.query("round")
    def answer_round(message: Message, context: Context) -> Message:
        """The protocol's response of this node's users to the round's request."""
        node = data(context)
        request = codec_for(node.spec.request_type).decode(message.content)
        notice = notice_of(message.content)
        if notice is not None:
            LOGGER.warning("the server refused a reply of this node: %s", notice)
        return Message(codec_for(node.spec.response_type).encode(node.answer(request)), reply_to=message)

    @client_app.train(mods=[secaggplus_mod])
    def answer_secure_round(message: Message, context: Context) -> Message:
        """The response as a dense vector, which ``secaggplus_mod`` masks before it leaves."""
        node = data(context)
        if node.spec.dense is None:
            raise InputError(f"protocol {node.spec.name!r} has no secure-aggregation layout")
        fitins = compat.recorddict_to_fitins(message.content, keep_input=True)
        request = request_from_fitins(codec_for(node.spec.request_type), fitins)
        dense = node.spec.dense(item_codec(node.config))
        return masked_reply(message, dense.encode(request, node.answer(request)))

    return client_app


app = make_client_app()
