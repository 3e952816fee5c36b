"""One experiment: a validated config turned into population, protocol and result.

Drivers (the fast driver, Flower's ServerApp/ClientApp) all start here, so
the population a shard builds, the server's parameters and the result
document are the same whichever transport carries the rounds.  The privacy
target is solved into protocol parameters when the experiment is created:
a target that cannot be met fails here, before any round runs.
"""

from __future__ import annotations

import functools
import platform
from typing import Any

import numpy as np

from .config import ConfigError, FedhhConfig, fixed_shards
from .data.counted import CountedShard, counted_users
from .data.deny_list import DeniedItemsSource, DenyList, read_deny_list
from .data.items import ItemCodec, get_alphabet
from .data.population import PopulationCounts, PopulationSource, Shard, check_shard_count, shard_bounds
from .data.sources import held_items_per_user, make_source, sampled_candidates
from .kernels.randomness import KeyedRandomness
from .metrics import Truth, utility_metrics
from .privacy.report import PrivacyReport
from .protocols import ClientFunction, Discovery, ProtocolResult, Request, Response, ServerProtocol, get_protocol
from .protocols.communication import Communication
from .protocols.law import LAW, no_law_sampler
from .resources import require_population_memory
from .version import __version__


def item_codec(config: FedhhConfig) -> ItemCodec:
    """The public item codec of a run (``[protocol]``), as the server and every device build it."""
    protocol = config.protocol
    return ItemCodec(
        get_alphabet(protocol.alphabet),
        protocol.unit_size,
        protocol.max_length,
        overlong=protocol.overlong,
        unknown_chars=protocol.unknown_chars,
    )


def check_needs(config: FedhhConfig) -> None:
    """Refuse from the config alone, without building anything, what :class:`Experiment` refuses
    before it encodes a sampled population's vocabulary (wordfreq, zipf: the config gives the
    size): the memory encoding the candidates and holding the population take, the shard count
    and the privacy target.  A file's or a dataset's size is known only once it is read, so
    nothing is checked for them here.  A sweep calls it for every grid point before any runs."""
    codec = item_codec(config)
    seed = config.run.seed
    law = config.run.simulation == LAW
    spec = get_protocol(config.protocol.name)
    if law and spec.law is None:
        raise no_law_sampler(spec.name)
    candidates = sampled_candidates(config["population"], codec, seed)
    if candidates is None:
        return
    codec.require_memory_to_encode(candidates)
    n_users = config.population.users
    if not law:  # a law simulation holds counts, never the users
        require_population_memory(n_users, held_items_per_user(config["population"], codec))
    _check_shards(config, n_users)
    spec.build_server(config.privacy, n_users, codec, seed, protocol=config["protocol"])


def _check_shards(config: FedhhConfig, n_users: int) -> None:
    """A fixed ``run.shards`` must give every shard a user; ``"auto"`` is checked once the nodes say."""
    shards = fixed_shards(config)
    if shards is not None:
        check_shard_count(n_users, shards)


def run_record(
    result: ProtocolResult, timing: dict[str, float], cap: int | None = None, deny_list: DenyList | None = None
) -> dict[str, Any]:
    """The part of a result document every run has, with or without a known truth; ``cap``
    (:func:`report_cap`) keeps the protocol's ``cap`` best discoveries and records that it did;
    the items of ``deny_list`` are never published (:meth:`DenyList.published`)."""
    found = published_discoveries(result.discoveries)
    if deny_list is not None:
        found = deny_list.published(found)
    record: dict[str, Any] = {"heavy_hitters": found if cap is None else found[:cap]}
    if cap is not None:
        record["cap_to_top_k"] = {
            "top_k": cap,
            "found": len(found),
            "reported": len(record["heavy_hitters"]),
            "ranked_by": "the protocol's own estimated counts (its support where it has none)",
        }
    return {
        **record,
        "frequent_prefixes": result.frequent_prefixes,
        "privacy": result.privacy.to_dict(),
        "params": result.params,
        "rounds": [record.to_dict() for record in result.trace],
        "stopped_because": result.stopped_because,
        "timing_s": timing,
        "environment": {
            "fedhh": __version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "machine": platform.machine(),
        },
    }


def own_rank(discovery: Discovery) -> tuple[float, str]:
    """A discovery's place in the protocol's own order: its estimated count, else its support
    (TrieHH's votes), largest first, then the item; never a true rank, which would leak the truth."""
    value = discovery.estimated_count if discovery.estimated_count is not None else discovery.support
    return (-(value if value is not None else 0), discovery.item)


def published_discoveries(discoveries: list[Discovery]) -> list[dict[str, Any]]:
    """The protocol's output as plain data, in the protocol's own order (:func:`own_rank`)."""
    return [
        {
            key: value
            for key, value in (("item", d.item), ("support", d.support), ("estimated_count", d.estimated_count))
            if value is not None
        }
        for d in sorted(discoveries, key=own_rank)
    ]


def report_cap(config: FedhhConfig) -> int | None:
    """``run.top_k`` when ``run.cap_to_top_k`` asks to report at most that many discoveries, else ``None``.

    Capping makes protocols that report every item above a threshold (TrieHH, the curator baseline
    with a large ``protocol.top_k``) comparable at a fixed K.  It is post-processing of what the
    protocol publishes, by the protocol's own numbers; for TrieHH those are its vote counts, which
    Theorem 1 does not cover (``docs/privacy.md``), so a capped TrieHH list is for comparisons."""
    run = config["run"]
    return int(run["top_k"]) if run["cap_to_top_k"] else None


def reported_discoveries(discoveries: list[Discovery], cap: int | None) -> list[Discovery]:
    """The discoveries a run reports: all of them, or the ``cap`` best by :func:`own_rank`."""
    return discoveries if cap is None else sorted(discoveries, key=own_rank)[:cap]


TRUTH_SHOWN = 500  # true top items written to the result, for plots and audits
EVALUATION_NOTE = (
    "exact ground truth computed from the whole population, for evaluation only: no privacy guarantee "
    "covers it (privacy.coverage); run.evaluation = false leaves this section out"
)


class Experiment:
    """Everything a driver needs to run one configured experiment."""

    def __init__(self, config: FedhhConfig, source: PopulationSource | None = None) -> None:
        """``source``: an already-built population to reuse (sweeps run many trials on one
        population, drawn with its own seed); it must be encoded with this config's codec."""
        self.config = config
        self.codec = item_codec(config)
        self.spec = get_protocol(config.protocol.name)
        self.seed = config.run.seed
        self.randomness = KeyedRandomness(self.seed)
        self.simulation = config.run.simulation  # users | law (fedhh.protocols.law)
        if self.simulation == LAW and self.spec.law is None:
            raise no_law_sampler(self.spec.name)
        if self.simulation == LAW and config.run.evaluation and fixed_shards(config) is None:
            raise ConfigError(
                'run.shards: "auto" leaves the number of shards to the SuperNodes, but a law simulation\'s truth is '
                "drawn shard by shard: set run.shards to the number of SuperNodes, or run.evaluation = false"
            )
        # read and checked before the population is built: a bad list costs nothing
        self.deny_list: DenyList | None = read_deny_list(config.run.deny_list, self.codec)
        # What the run will need is checked before anything is charged or started, and where the
        # config gives the population size (sampled sources), before the vocabulary is encoded.
        self._fresh_server: ServerProtocol | None = None
        if source is None:
            source = make_source(
                config["population"], self.codec, self.seed, before_encoding=self._check_size, deny_list=self.deny_list
            )
        elif source.vocabulary.codec != self.codec:
            raise ValueError("a reused population must be encoded with the config's [protocol] codec")
        elif self.deny_list is not None and not isinstance(source, DeniedItemsSource):
            source = DeniedItemsSource(source, self.deny_list)
        self.source: PopulationSource = source
        self.n_users = self.source.n_users
        if self._fresh_server is None:  # a file's or a dataset's size is known once it is read
            if self.simulation != LAW:  # a law simulation holds counts, never the users
                self.source.require_memory(config.population.words_per_user)
            _check_shards(config, self.n_users)
            self._solve(self.n_users)
        assert self._fresh_server is not None
        # the server built for the target is the first one make_server hands out
        self._fresh_server.offer_vocabulary(self.source.vocabulary)
        self.privacy: PrivacyReport = self._fresh_server.guarantee()
        # What one user sends, from the protocol's own parameters (None: the spec declares no derivation).
        self.communication: Communication | None = (
            self.spec.communication(self._fresh_server) if self.spec.communication else None
        )

    @property
    def respond(self) -> ClientFunction:
        return self.spec.respond

    def make_server(self) -> ServerProtocol:
        """A server for one run, in its initial state (built once more for every later call), told
        when the run is a law simulation (:meth:`~fedhh.protocols.ServerProtocol.simulate_by_law`)."""
        server, self._fresh_server = self._fresh_server, None
        server = server if server is not None else self._build_server()
        if self.simulation == LAW:
            server.simulate_by_law()
        return server

    def _check_size(self, n_users: int) -> None:
        """What depends on the population size alone, before a sampled source encodes its vocabulary:
        the population's memory, the shard count, and the privacy target (:meth:`_solve`)."""
        if self.simulation != LAW:  # a law simulation holds counts, never the users
            require_population_memory(n_users, held_items_per_user(self.config["population"], self.codec))
        _check_shards(self.config, n_users)
        self._solve(n_users)

    def _solve(self, n_users: int) -> None:
        """Build the first server for ``n_users``, solving the privacy target (vocabulary not offered yet)."""
        self._fresh_server = self.spec.build_server(
            self.config.privacy, n_users, self.codec, self.seed, protocol=self.config["protocol"]
        )

    def _build_server(self) -> ServerProtocol:
        server = self.spec.build_server(
            self.config.privacy, self.n_users, self.codec, self.seed, protocol=self.config["protocol"]
        )
        server.offer_vocabulary(self.source.vocabulary)
        return server

    def build_shard(self, shard_index: int, num_shards: int) -> Shard:
        return self.source.build_shard(shard_index, num_shards)

    def counted_shard(self, shard_index: int, num_shards: int) -> CountedShard:
        """One shard's item counts, as a law simulation holds it (:mod:`fedhh.data.counted`)."""
        start, stop = shard_bounds(self.n_users, shard_index, num_shards)
        return counted_users(self.source, start, stop, self.seed)

    def hold_shard(self, shard_index: int, num_shards: int) -> Shard | CountedShard:
        """What a shard's holder keeps: its users, or in a law simulation their item counts."""
        if self.simulation == LAW:
            return self.counted_shard(shard_index, num_shards)
        return self.build_shard(shard_index, num_shards)

    def answer(self, request: Request, held: Shard | CountedShard) -> Response:
        """A held shard's response: its users' reports (``respond``), or their sum drawn from its law."""
        if isinstance(held, CountedShard):
            assert self.spec.law is not None  # refused when the experiment was made
            return self.spec.law(request, held, self.randomness)
        return self.spec.respond(request, held, self.randomness)

    @functools.cached_property
    def population_counts(self) -> PopulationCounts:
        """True counts of the whole population (evaluation only), counted chunk by chunk from the
        source (in a law simulation: the sum of the shards' counts, drawn as the shards draw
        them): for a process that holds no shard (a driver that built shards has their sum)."""
        if self.simulation == LAW:
            shards = fixed_shards(self.config)
            assert shards is not None  # refused when the experiment was made
            return PopulationCounts.combine(self.counted_shard(i, shards).counts() for i in range(shards))
        return self.source.population_counts()

    def whole_counts(self, counts: PopulationCounts | None = None) -> PopulationCounts:
        """``counts``, the sum of the shards a driver built, checked to cover the whole population
        (so the truth costs no second pass over it, nor a second copy in memory); without them,
        :attr:`population_counts`."""
        if counts is None:
            return self.population_counts
        if counts.users != self.n_users:
            raise ValueError(f"the shards' counts cover {counts.users} users, the population has {self.n_users}")
        return counts

    def truth(self, counts: PopulationCounts | None = None) -> Truth:
        """True item frequencies over the whole population (evaluation only), from the shards'
        ``counts`` or, without them, from the source (:meth:`whole_counts`)."""
        counts = self.whole_counts(counts)
        return Truth.from_counts(self.source.vocabulary.items, counts.frequency, counts.holders)

    def finish(
        self,
        result: ProtocolResult,
        timing: dict[str, float],
        transport: str,
        counts: PopulationCounts | None = None,
    ) -> dict[str, Any]:
        """The result document: discovery, privacy, parameters, trace, the bits a user sends
        (``communication``, :mod:`fedhh.protocols.communication`), and (with
        ``run.evaluation``) the evaluation against the truth, taken from the
        ``counts`` of the shards the driver built if it has them (:meth:`whole_counts`)."""
        document = {
            "protocol": result.protocol,
            "seed": self.seed,
            "n_users": self.n_users,
            "transport": transport,
            "simulation": self.simulation,
            "config": self.config.to_dict(),
            "population": self.source.describe(),
            **run_record(result, timing, report_cap(self.config), self.deny_list),
        }
        if self.deny_list is not None:
            document["deny_list"] = self.deny_list.record(self.source.vocabulary)
        if self.communication is not None:
            document["communication"] = self.communication.to_dict()
        if self.config.run.evaluation:
            document["evaluation"] = self.evaluate(document["heavy_hitters"], counts)
        return document

    def evaluate(self, heavy_hitters: list[dict[str, Any]], counts: PopulationCounts | None = None) -> dict[str, Any]:
        """Everything a result says about the true population, in one place.

        ``heavy_hitters`` are the published discoveries; each gets its true
        rank, count and frequency, in the same order.  ``counts`` as for
        :meth:`finish`.  None of this is covered by a privacy guarantee (see
        the privacy block's ``coverage``).
        """
        counts = self.whole_counts(counts)
        truth = self.truth(counts)
        rank = truth.rank_of()
        index = {item: i for i, item in enumerate(truth.items)}
        discovered = {hit["item"] for hit in heavy_hitters}
        estimates = {hit["item"]: hit.get("estimated_count") for hit in heavy_hitters}
        top_k = self.config.run.top_k

        def truth_of(item: str) -> dict[str, Any]:
            i = index.get(item)
            return {
                "item": item,
                "true_rank": rank.get(item),
                "true_count": int(truth.holders[i]) if i is not None else 0,
                "true_frequency": float(truth.frequency[i] / self.n_users) if i is not None else 0.0,
            }

        return {
            "note": EVALUATION_NOTE,
            "metrics": utility_metrics(discovered, truth, top_k, estimates),
            "heavy_hitters": [truth_of(hit["item"]) for hit in heavy_hitters],
            "missed_top_k": [item for item in truth.top(top_k) if item not in discovered],
            "truth_top": [
                {**truth_of(truth.items[i]), "discovered": truth.items[i] in discovered}
                for i in truth.order[: max(top_k, TRUTH_SHOWN)].tolist()
            ],
            "population": {**self.source.describe_data(), "users_without_items": counts.users_without_items},
        }
