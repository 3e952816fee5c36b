"""One trial of a sweep, run wherever an executor puts it, and the table rows it yields.

A trial runs the fast driver's loop (:func:`fedhh.driving.drive`) in
process over one shard holding the whole population (in a law simulation,
``run.simulation = "law"``, its item counts, drawn once per population
seed); the shard count changes no result, and a sweep's parallelism is
across trials.  The
population is built once per chunk of trials sharing it
(:class:`PopulationCache` keeps the last one, so a worker given the next
chunk of the same population reuses it too).  Metrics come from the
protocol's result and the population's truth (:mod:`fedhh.metrics`); a
failure becomes the trial's ``error``, never the sweep's end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedhh.data.counted import CountedShard, counted_users
from fedhh.data.population import PopulationSource, Shard
from fedhh.data.sources import SampledSource, make_source
from fedhh.driving import drive
from fedhh.experiment import Experiment, item_codec, report_cap, reported_discoveries
from fedhh.metrics import Truth, count_errors, f1_at_k, ncr_at_k, precision_at_k, recall_at_k
from fedhh.protocols import ProtocolResult, ServerProtocol
from fedhh.protocols.registry import import_protocol_module
from fedhh.run_clock import RunClock

from .analytic import EQ5, PREDICTED, expected_f1, expected_ncr, expected_recall, predicted_discovery, prediction_key
from .sweep_spec import Trial

RECALL_KS = (1, 5, 10, 25, 50, 100, 250)
# per set of items, fedhh.metrics.count_errors
COUNT_ERRORS = ("mae", "rmse", "relative_error", "items", "without_estimate")
# Columns of the trials table measured in seconds: the only ones that differ between two runs of a sweep.
TIMING_COLUMNS = ("wall_s", "population_s", "server_s", "shards_s")
# The items table: column -> pyarrow type name (cells may be null where noted in docs/sweeps.md).
ITEM_COLUMNS = {
    "trial_key": "string",
    "item": "string",
    "true_rank": "int64",
    "true_frequency": "double",
    "true_count": "int64",
    "discovered": "bool",
    "estimated_count": "double",
    PREDICTED: "double",
    EQ5: "double",
}


@dataclass
class TrialRecord:
    """A finished trial: its row of the trials table and its rows of the items table (by column)."""

    key: str
    row: dict[str, Any]
    items: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.row.get("error"))

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "row": self.row, "items": self.items}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        return cls(str(data["key"]), dict(data["row"]), dict(data["items"]))


@dataclass
class Population:
    """A built population: its source, one shard with every user (or their item counts, for a law
    simulation), and (once asked) its truth."""

    key: str
    source: PopulationSource
    shard: Shard | CountedShard
    truth: Truth | None = None
    predictions: dict[Hashable, dict[str, np.ndarray]] = field(default_factory=dict)  # by prediction_key

    def ensure_truth(self, experiment: Experiment) -> float:
        """Take the truth from the first experiment run on this population; the seconds it took."""
        if self.truth is not None:
            return 0.0
        started = time.perf_counter()
        self.truth = experiment.truth(self.shard.counts())  # the shard holds everyone: no second build
        return time.perf_counter() - started


class PopulationCache:
    """The last population built, reused while trials share it; the next population that
    differs only in size reuses its encoded vocabulary and prefix index."""

    def __init__(self, dataset_folder: str | None = None) -> None:
        self._population: Population | None = None
        self._vocabulary_key = ""
        self._dataset_folder = dataset_folder  # where this node holds a population on disk, if not at its path

    def get(self, trial: Trial) -> tuple[Population, float]:
        """The trial's population and the seconds spent building it now (0 when reused)."""
        previous = self._population
        by_law = trial.config.run.simulation == "law"
        if (
            previous is not None
            and previous.key == trial.population_key
            and (isinstance(previous.shard, CountedShard) == by_law)
        ):
            return previous, 0.0
        self._population = None  # free the previous users before drawing the next
        started = time.perf_counter()
        config = trial.config
        if (
            previous is not None
            and isinstance(previous.source, SampledSource)
            and (self._vocabulary_key == trial.vocabulary_key)
        ):
            source: PopulationSource = previous.source.with_users(int(config["population"]["users"]))
        else:
            section = config["population"]
            if self._dataset_folder is not None and section["source"] == "dataset":
                section = {**section, "path": self._dataset_folder}
            source = make_source(section, item_codec(config), trial.population_seed)
        del previous
        shard: Shard | CountedShard
        if by_law:  # the counts drawn once per population seed, as users are built once
            shard = counted_users(source, 0, source.n_users, trial.population_seed)
        else:
            shard = source.build_all()
        shard.vocabulary.prefixes.build_all()
        self._population = Population(trial.population_key, source, shard)
        self._vocabulary_key = trial.vocabulary_key
        return self._population, time.perf_counter() - started


def run_chunk(trials: Iterable[Trial], cache: PopulationCache | None = None) -> Iterator[TrialRecord]:
    """Run trials one after the other (a chunk shares one population), yielding each record."""
    if cache is None:
        cache = PopulationCache()
    for trial in trials:
        yield run_trial(trial, cache)


def run_chunk_in(trials: Iterable[Trial], folder: str) -> Iterator[TrialRecord]:
    """:func:`run_chunk` with a population on disk read from ``folder``, this node's copy of it
    (:mod:`simulations.placement`); the trials and their records are unchanged."""
    yield from run_chunk(trials, PopulationCache(dataset_folder=folder))


def run_trial(trial: Trial, cache: PopulationCache) -> TrialRecord:
    """Run one trial; any failure is recorded in the row's ``error``.

    ``wall_s`` is the trial's own time (experiment set-up, rounds, metrics);
    ``population_s`` the time it spent building its population and truth
    (0 for every trial after the first on a population); ``server_s`` and
    ``user_bits`` are the run's costs (:func:`_costs`).
    """
    identity = {
        "trial_key": trial.key,
        "point": trial.point,
        "trial": trial.index,
        **trial.values,
        "protocol": trial.config["protocol"]["name"],
        "simulation": trial.config.run.simulation,
        "seed": trial.seed,
        "population_seed": trial.population_seed,
    }
    population_s = 0.0
    started = time.perf_counter()
    try:
        if trial.protocol_module:  # a worker process knows fedhh's own protocols only
            import_protocol_module(trial.protocol_module, "the sweep's protocol module")
        population, population_s = cache.get(trial)
        started = time.perf_counter()
        experiment = Experiment(trial.config, source=population.source)
        truth_s = population.ensure_truth(experiment)
        population_s += truth_s
        started += truth_s
        server = experiment.make_server()
        shard = population.shard
        clock = RunClock()
        result = drive(server, lambda request: [experiment.answer(request, shard)], clock=clock)
        row, items = _outcome(trial, server, result, population)
        row.update(_costs(experiment, clock))
    except Exception as error:  # a trial's failure is data: the sweep goes on
        row, items = {"error": f"{type(error).__name__}: {error}"}, {}
    row = {
        **identity,
        **row,
        "wall_s": time.perf_counter() - started,
        "population_s": population_s,
        "error": row.get("error", ""),
        "config": json.dumps(trial.config.to_dict(), sort_keys=True),
    }
    return TrialRecord(trial.key, row, items)


def _outcome(
    trial: Trial, server: ServerProtocol, result: ProtocolResult, population: Population
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The trial's metrics row and its per-item rows over the true top items."""
    truth = population.truth
    assert truth is not None
    n_users = population.source.n_users
    reported = reported_discoveries(result.discoveries, report_cap(trial.config))
    discovered = {found.item for found in reported}
    estimates = {found.item: found.estimated_count for found in reported}
    top_k = int(trial.config["run"]["top_k"])
    privacy = result.privacy
    row: dict[str, Any] = {
        "n": n_users,
        "epsilon": float(privacy.epsilon),
        "delta": float(privacy.delta),
        "privacy_model": privacy.model,
        "shuffle_epsilon": (privacy.shuffle or {}).get("epsilon"),  # the LDP reports' ε once shuffled
        **{f"param.{name}": _scalar(value) for name, value in result.params.items()},
        "top_k": top_k,
        **{f"recall_at_{k}": recall_at_k(discovered, truth, k) for k in RECALL_KS},
        "precision": precision_at_k(discovered, truth, top_k),
        "f1": f1_at_k(discovered, truth, top_k),
        "ncr": ncr_at_k(discovered, truth, top_k),
        "discovered": len(discovered),
        "found_before_cap": len(result.discoveries),
        **_count_error_columns(estimates, truth, sorted(discovered), truth.top(top_k)),
        "rounds": len(result.trace),
        "stopped_because": result.stopped_because,
    }
    ranked = truth.order[truth.frequency[truth.order] > 0]
    tracked = ranked[: max(trial.items, max(RECALL_KS), top_k)]
    memo = (prediction_key(server), tracked.size)
    if memo not in population.predictions:
        population.predictions[memo] = predicted_discovery(server, population.shard, truth, tracked)
    predictions = population.predictions[memo]
    for column, predicted in predictions.items():  # each model's expectations: predicted_ncr, predicted_eq5_ncr, ...
        row.update({f"{column}_recall_at_{k}": expected_recall(predicted, k) for k in RECALL_KS})
        row[f"{column}_ncr"] = expected_ncr(predicted, top_k)
        f1 = expected_f1(server, predicted, top_k)
        if f1 is not None:
            row[f"{column}_f1"] = f1
    shown = tracked[: trial.items]
    names = [truth.items[i] for i in shown.tolist()]
    items = {
        "trial_key": [trial.key] * len(names),
        "item": names,
        "true_rank": list(range(1, len(names) + 1)),
        "true_frequency": (truth.frequency[shown] / n_users).tolist(),
        "true_count": truth.holders[shown].astype(np.int64).tolist(),
        "discovered": [name in discovered for name in names],
        "estimated_count": [estimates.get(name) for name in names],
        **{
            column: predictions[column][: len(names)].tolist() if column in predictions else [None] * len(names)
            for column in (PREDICTED, EQ5)
        },
    }
    return row, items


def _count_error_columns(
    estimates: dict[str, float | None], truth: Truth, found: list[str], top: list[str]
) -> dict[str, Any]:
    """The count errors (:func:`fedhh.metrics.count_errors`) on the items found and on the true top K,
    as columns ``count_<error>_found`` and ``count_<error>_top_k``."""
    columns: dict[str, Any] = {}
    for where, items in (("found", found), ("top_k", top)):
        errors = count_errors(estimates, truth, items)
        columns.update({f"count_{name}_{where}": errors[name] for name in COUNT_ERRORS})
    return columns


def _costs(experiment: Experiment, clock: RunClock) -> dict[str, Any]:
    """The run's costs: the server's own time (aggregation and decoding) and the shards'
    (the users' reports and what a shard sums for the server, :class:`RunClock`), and the
    bits one user sends over the run, on average and at most (:mod:`fedhh.protocols.communication`;
    empty for a protocol that declares no derivation)."""
    communication = experiment.communication
    return {
        "server_s": clock.server_s,
        "shards_s": clock.shards_s,
        "user_bits": communication.expected_bits if communication is not None else None,
        "user_bits_max": communication.max_bits if communication is not None else None,
    }


def _scalar(value: Any) -> Any:
    """A protocol parameter as a table cell: lists and tables become JSON text."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    if isinstance(value, np.generic):
        return value.item()
    return value
