"""Small populations built from hand-written items, shared by the tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, Vocabulary
from fedhh.kernels.randomness import KeyedRandomness


def lowercase_codec(max_length: int = 8, unit_size: int = 1) -> ItemCodec:
    return ItemCodec(get_alphabet("lowercase"), unit_size, max_length)


def population_of(items: list[str], codec: ItemCodec | None = None) -> Shard:
    """One user per listed item, in order."""
    vocabulary, item_ids = Vocabulary.encode(items, codec or lowercase_codec())
    return Shard.single_item(vocabulary, 0, item_ids)


def processes_left_behind(before: dict[int, int], timeout: float = 30.0) -> list[int]:
    """PIDs of this process's descendants that were not in ``before`` and are still running after
    up to ``timeout`` seconds (a cluster's processes take a moment to exit after its shutdown)."""
    import os
    import time

    from simulations.processes import descendant_identities

    deadline = time.monotonic() + timeout
    while (left := set(descendant_identities(os.getpid()).items()) - set(before.items())) and time.monotonic() < deadline:
        time.sleep(0.2)
    return sorted(pid for pid, _ in left)


def run_view(result) -> list[tuple[str, float | None]]:  # noqa: ANN001 -- a protocol's DiscoveryResult
    """A run's discoveries as (item, estimated count) pairs, in the server's order."""
    return [(d.item, d.estimated_count) for d in result.discoveries]


def one_and_seven_shards(overrides: list[str], whole_trace: bool = True) -> list[tuple[str, float | None]]:
    """Run a config on the fast driver with 1 and 7 in-process shards, assert the two runs agree
    (discoveries, and every round's trace or only the first), and return the discoveries."""
    from fedhh.config import load_config
    from fedhh.experiment import Experiment
    from simulations.fast import run_fast

    experiment = Experiment(load_config(None, overrides))
    one = run_fast(experiment, 1, "inprocess").result
    seven = run_fast(experiment, 7, "inprocess").result
    assert run_view(one) == run_view(seven)
    compared = len(one.trace) if whole_trace else 1
    assert [r.to_dict() for r in one.trace[:compared]] == [r.to_dict() for r in seven.trace[:compared]]
    return run_view(one)


def flower_matches_fast(overrides: list[str], output_dir: Path) -> tuple[set[tuple[str, float | None]], int]:
    """Run a config in Flower's simulation with 2 nodes, assert it finds exactly the one-shard fast
    run's items and estimates, and return them with the number of rounds the document records."""
    from fedhh.config import load_config
    from fedhh.experiment import Experiment
    from simulations.fast import run_fast
    from simulations.flower import run_flower_simulation

    config = load_config(None, overrides)
    reference = run_fast(Experiment(config), 1, "inprocess").result
    document = run_flower_simulation(config, 2, output_dir=output_dir)
    found = {(h["item"], h["estimated_count"]) for h in document["heavy_hitters"]}
    assert found == set(run_view(reference))
    return found, len(document["rounds"])


@dataclass
class PlantedRuns:
    """What runs of one protocol found on a population with planted words."""

    counts: dict[str, list[float]]  # each planted word's estimated count, in every run that found it
    others: int  # discoveries of words not planted, over all runs
    server: Any  # the last run's server (its oracles give the predicted spread)


def planted_runs(
    make_server: Callable[[int], Any], respond: Callable[..., Any], population: Shard, planted: Iterable[str],
    seeds: Iterable[int],
) -> PlantedRuns:
    """One run per seed, in one process: ``make_server(seed)``'s rounds answered by the whole
    ``population`` with the protocol's ``respond`` and ``KeyedRandomness(seed)``."""
    from fedhh.driving import drive

    counts: dict[str, list[float]] = {item: [] for item in planted}
    others, server = 0, None
    for seed in seeds:
        server, randomness = make_server(seed), KeyedRandomness(seed)
        result = drive(server, lambda request: [respond(request, population, randomness)])
        for found in result.discoveries:
            if found.item in counts:
                counts[found.item].append(found.estimated_count)
            else:
                others += 1
    return PlantedRuns(counts, others, server)
