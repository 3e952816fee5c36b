"""Shards of a population on disk placed on the Ray nodes that hold their files.

A population on disk (``population.source = "dataset"``) need not be on a
shared file system: each node of a Ray cluster may hold a copy of the
population folder with only some of its stored shards (the manifest,
``vocabulary.parquet`` and fedhh's marker file are in every copy).  A node
says where its copies are in the environment its Ray processes start with:

    FEDHH_POPULATIONS=/data/web-pop ray start --address HEAD:6379

(a list separated by ``:``; the folder ``population.path`` names is always
looked at too).  Before any actor starts, one small task pinned to each
alive node (:func:`_held_on_this_node`) opens each of those folders and
reports which stored shards of *this* population (the same manifest as the
run's) are there.  Each run shard (a range of users, which may span stored
shards) then goes to a node that holds every stored shard it reads (the one
with the fewest actors per CPU so far), and its actor reads that node's folder.

When every node holds every shard under ``population.path`` (a shared file
system, or one machine) nothing is constrained: Ray places the actors as
before.  A run shard that no node holds fully is refused with an
:class:`~fedhh.errors.InputError` before any actor starts and before the
privacy ledger is charged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fedhh.config import FedhhConfig
from fedhh.data.population import shard_bounds
from fedhh.errors import InputError

HOLDINGS_VARIABLE = "FEDHH_POPULATIONS"  # on a node: the population folders it holds, os.pathsep-separated
FIELD = "population.path"


@dataclass(frozen=True)
class Holding:
    """A folder on one node holding some stored shards of the run's population."""

    node_id: str
    folder: str
    stored_shards: frozenset[int]


@dataclass(frozen=True)
class Placement:
    """Where a run shard's actor runs, and the folder it reads there."""

    node_id: str
    folder: str
    cpus: float  # the actor's share of its node's CPUs (at most one)


def _held_on_this_node(run_folder: str, manifest: dict[str, Any]) -> tuple[str, list[tuple[str, list[int]]]]:
    """Run on a node: its id, and for each folder it holds with ``manifest``'s population, the stored
    shards present there (the folder the run names, then the node's declared ones)."""
    import ray

    from fedhh.data.store import VOCABULARY_FILE, PopulationStore

    declared = [folder for folder in os.environ.get(HOLDINGS_VARIABLE, "").split(os.pathsep) if folder]
    held = []
    for folder in dict.fromkeys([run_folder, *declared]):
        try:
            store = PopulationStore(folder)
        except InputError:  # not here, or not a population folder
            continue
        if store.manifest != manifest or not (store.path / VOCABULARY_FILE).is_file():
            continue
        held.append((folder, [i for i, stored in enumerate(store.shards) if stored.file.is_file()]))
    return ray.get_runtime_context().get_node_id(), held


def find_holdings(run_folder: str, manifest: dict[str, Any]) -> tuple[list[Holding], dict[str, float]]:
    """Every alive node's holdings of the population (Ray must be initialised), and each node's CPUs."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = {node["NodeID"]: float(node["Resources"].get("CPU", 0.0)) for node in ray.nodes() if node["Alive"]}
    probe = ray.remote(num_cpus=0)(_held_on_this_node)  # runs even where every CPU is taken
    answers = ray.get(
        [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(
                run_folder, manifest
            )
            for node_id in nodes
        ]
    )
    holdings = [Holding(node_id, folder, frozenset(shards)) for node_id, held in answers for folder, shards in held]
    return holdings, nodes


def stored_shards_of(first_users: Sequence[int], n_users: int, start: int, stop: int) -> frozenset[int]:
    """The stored shards (by their first users, ascending) that users ``[start, stop)`` lie in."""
    bounds = [*first_users, n_users]
    return frozenset(i for i in range(len(first_users)) if bounds[i] < stop and bounds[i + 1] > start)


def place_shards(
    holdings: Sequence[Holding],
    node_cpus: dict[str, float],
    run_folder: str,
    first_users: Sequence[int],
    n_users: int,
    num_shards: int,
) -> list[Placement] | None:
    """A node and folder for each run shard, or ``None`` when every node holds every stored shard
    under ``run_folder`` (nothing to constrain).  Refuses a run shard no node holds fully."""
    everything = frozenset(range(len(first_users)))
    if all(
        any(h.node_id == node_id and h.folder == run_folder and h.stored_shards == everything for h in holdings)
        for node_id in node_cpus
    ):
        return None
    load = {node_id: 0 for node_id in node_cpus}
    chosen: list[Holding] = []
    for index in range(num_shards):
        needed = stored_shards_of(first_users, n_users, *shard_bounds(n_users, index, num_shards))
        candidates = [h for h in holdings if needed <= h.stored_shards]
        if not candidates:
            start, stop = shard_bounds(n_users, index, num_shards)
            raise InputError(
                f"{FIELD}: run shard {index} (users {start:,}..{stop - 1:,}) reads stored shard(s) "
                f"{sorted(needed)}, which no node of the Ray cluster holds in one folder ({_describe(holdings)}); "
                f"copy them to a node's population folder (listed in that node's {HOLDINGS_VARIABLE}) "
                "or choose run.shards to match how the stored shards are spread"
            )
        # the node with the fewest actors per CPU (the first of them: deterministic)
        best = min(candidates, key=lambda h: load[h.node_id] / max(node_cpus[h.node_id], 1.0))
        load[best.node_id] += 1
        chosen.append(best)
    return [Placement(h.node_id, h.folder, min(1.0, node_cpus[h.node_id] / load[h.node_id])) for h in chosen]


def _describe(holdings: Sequence[Holding]) -> str:
    if not holdings:
        return "no node holds any of this population"
    return "; ".join(f"node {h.node_id[:8]} holds {sorted(h.stored_shards)} in {h.folder}" for h in holdings)


def dataset_placement(config: FedhhConfig, num_shards: int) -> list[Placement] | None:
    """The placement of ``config``'s run shards when its population is on disk (Ray must be
    initialised); ``None`` for other populations and when nothing needs placing."""
    if config["population"]["source"] != "dataset":
        return None
    return _placed(config, num_shards)[0]


def whole_population_holders(config: FedhhConfig) -> list[Placement] | None:
    """Where work that reads all of ``config``'s population on disk can run (a sweep's trials): one
    placement per node holding every stored shard in one folder; ``None`` for other populations and
    when every node holds it at ``population.path``.  Refuses a population no node holds whole."""
    if config["population"]["source"] != "dataset":
        return None
    placed, holdings, stored = _placed(config, 1)
    if placed is None:
        return None
    whole: dict[str, Holding] = {}  # by node, its first folder holding everything
    for holding in holdings:
        if holding.stored_shards == frozenset(range(stored)):
            whole.setdefault(holding.node_id, holding)
    return [Placement(node_id, holding.folder, 1.0) for node_id, holding in whole.items()]


def _placed(config: FedhhConfig, num_shards: int) -> tuple[list[Placement] | None, list[Holding], int]:
    """:func:`place_shards` for ``config``'s population on disk, with the holdings and the number of
    stored shards it was placed from."""
    from fedhh.data.store import PopulationStore

    folder = os.path.abspath(config.population.path)  # the nodes' workers do not share this directory
    store = PopulationStore(folder)
    holdings, node_cpus = find_holdings(folder, store.manifest)
    placed = place_shards(holdings, node_cpus, folder, [s.first_user for s in store.shards], store.n_users, num_shards)
    return placed, holdings, len(store.shards)
