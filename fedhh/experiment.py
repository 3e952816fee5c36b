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

from . import __version__
from .config import FedhhConfig
from .items import ItemCodec, get_alphabet
from .metrics import Truth, utility_metrics
from .population import PopulationCounts, Shard
from .privacy.report import PrivacyReport
from .protocols import ClientFunction, ProtocolResult, ServerProtocol, get_protocol
from .randomness import KeyedRandomness
from .sources import PopulationSource, make_source


def item_codec(config: FedhhConfig) -> ItemCodec:
    """The public item codec of a run (``[protocol]``), as the server and every device build it."""
    protocol = config["protocol"]
    return ItemCodec(
        get_alphabet(protocol["alphabet"]),
        protocol["unit_size"],
        protocol["max_length"],
        overlong=protocol["overlong"],
        unknown_chars=protocol["unknown_chars"],
    )


def run_record(result: ProtocolResult, timing: dict[str, float]) -> dict[str, Any]:
    """The part of a result document every run has, with or without a known truth."""
    return {
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


TRUTH_SHOWN = 500  # true top items written to the result, for plots and audits


class Experiment:
    """Everything a driver needs to run one configured experiment."""

    def __init__(self, config: FedhhConfig) -> None:
        self.config = config
        self.codec = item_codec(config)
        self.protocol = get_protocol(config["protocol"]["name"])
        self.seed = int(config["run"]["seed"])
        self.randomness = KeyedRandomness(self.seed)
        self.source: PopulationSource = make_source(config["population"], self.codec, self.seed)
        self.n_users = self.source.n_users
        self._population_counts: PopulationCounts | None = None
        # Solving the privacy target here refuses an impossible run before any round.
        self.privacy: PrivacyReport = self.make_server().privacy_report()

    @property
    def respond(self) -> ClientFunction:
        return self.protocol.respond

    @property
    def request_type(self) -> type:
        return self.protocol.request_type

    @property
    def response_type(self) -> type:
        return self.protocol.response_type

    def make_server(self) -> ServerProtocol:
        return self.protocol.build_server(
            self.config["privacy"], self.n_users, self.codec, self.seed, protocol=self.config["protocol"]
        )

    def build_shard(self, shard_index: int, num_shards: int) -> Shard:
        return self.source.build_shard(shard_index, num_shards)

    def set_population_counts(self, counts: PopulationCounts) -> None:
        """Take the true counts from the shards a driver built (their sum), so that the
        truth costs no second pass over the population, nor a second copy of it in memory."""
        if counts.users != self.n_users:
            raise ValueError(f"the shards' counts cover {counts.users} users, the population has {self.n_users}")
        self._population_counts = counts
        self.__dict__.pop("truth", None)

    @property
    def population_counts(self) -> PopulationCounts:
        """True counts of the whole population (evaluation only): the drivers' shards' sum, or,
        in a process that holds no shard, counted chunk by chunk from the source."""
        if self._population_counts is None:
            self._population_counts = self.source.population_counts()
        return self._population_counts

    @functools.cached_property
    def truth(self) -> Truth:
        """True item frequencies over the whole population (evaluation only)."""
        counts = self.population_counts
        return Truth.from_counts(self.source.vocabulary.items, counts.frequency, counts.holders)

    def finish(self, result: ProtocolResult, timing: dict[str, float], transport: str) -> dict[str, Any]:
        """The result document: discovery next to the truth, privacy, parameters, trace."""
        truth = self.truth
        rank = truth.rank_of()
        index = {item: i for i, item in enumerate(truth.items)}
        heavy_hitters = []
        for found in result.discoveries:
            i = index.get(found.item)
            entry: dict[str, Any] = {
                "item": found.item,
                "true_rank": rank.get(found.item),
                "true_count": int(truth.holders[i]) if i is not None else 0,
                "true_frequency": float(truth.frequency[i] / self.n_users) if i is not None else 0.0,
            }
            if found.estimated_count is not None:
                entry["estimated_count"] = found.estimated_count
            if found.support is not None:
                entry["support"] = found.support
            heavy_hitters.append(entry)
        heavy_hitters.sort(key=lambda e: (e["true_rank"] is None, e["true_rank"] or 0, e["item"]))
        discovered = {d.item for d in result.discoveries}
        top_k = int(self.config["run"]["top_k"])
        return {
            "protocol": result.protocol,
            "seed": self.seed,
            "n_users": self.n_users,
            "transport": transport,
            "config": self.config.to_dict(),
            "population": {
                **self.source.describe(),
                "users_without_items": self.population_counts.users_without_items,
            },
            "heavy_hitters": heavy_hitters,
            "metrics": utility_metrics(discovered, truth, top_k),
            "missed_top_k": [item for item in truth.top(top_k) if item not in discovered],
            "truth_top": [
                {
                    "item": truth.items[i],
                    "true_count": int(truth.holders[i]),
                    "true_frequency": float(truth.frequency[i] / self.n_users),
                    "discovered": truth.items[i] in discovered,
                }
                for i in truth.order[: max(top_k, TRUTH_SHOWN)].tolist()
            ],
            **run_record(result, timing),
        }
