"""Run one configured experiment on the configured driver and write its results."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fedhh.config import ConfigError, FedhhConfig, with_fixed_shards
from fedhh.experiment import Experiment
from fedhh.privacy.charge import charge_run, check_budget, run_label
from fedhh.results import ResultsFolder

from .fast import run_fast
from .import_aside import ImportAside
from .ray_runtime import ray_runtime, run_init_args
from .report import write_run_outputs


class FlowerRunFailed(RuntimeError):
    """A Flower run that started and failed in its federation: the ServerApp's error (nodes that did
    not answer, a round nobody answered).  Neither bad input (exit status 2) nor a bug in fedhh (a
    traceback): a run that did not complete, reported as one line with exit status 1."""


def run_experiment(config: FedhhConfig, output: ResultsFolder, show_progress: bool = True) -> dict[str, Any]:
    """Run ``config`` and write its results into the claimed ``output``; returns the result document.

    Everything that can be checked is checked before the privacy ledger is
    charged or any round runs: the results folder (claimed by the caller),
    the population and what it needs (``Experiment``), the privacy target,
    the placement of its shards (on a Ray cluster, a population on disk
    must be held by its nodes: :mod:`simulations.placement`) and the
    ledger's budget.  The charge is made once, under the results
    folder's name and the time (``run_label``): here for the fast driver, by
    the ServerApp for Flower.
    """
    if config["run"]["federation"] == "devices":
        raise ConfigError(
            'run.federation: "devices" means real devices hold their own data (see '
            'docs/deployment.md); fedhh run simulates shards: use "shards"'
        )
    config = with_fixed_shards(config)  # "auto": the shards this process starts itself
    started = time.perf_counter()
    experiment = Experiment(config)
    population_s = time.perf_counter() - started
    run_id = run_label(output.path.name)
    run = config["run"]
    # A run over budget is refused before Ray starts or shards are built; the charge itself comes
    # later (by the ServerApp for Flower, once the shards are placed for the fast driver).
    check_budget(config["privacy"], experiment.privacy, run_id)
    if run["driver"] == "flower":

        def write(document: dict[str, Any]) -> Path:
            document["timing_s"]["total_s"] = time.perf_counter() - started
            return write_run_outputs(output, document)

        # Flower's modules are imported aside while Ray starts.
        flower = ImportAside("simulations.flower")
        with ray_runtime(**run_init_args()):
            from strategies.errors import FederationError

            # One experiment (population, truth, privacy solve) and one write, by the ServerApp.
            try:
                return flower.module().run_flower_simulation(
                    config, experiment=experiment, write=write, show_progress=show_progress, run_id=run_id
                )
            except FederationError as error:
                raise FlowerRunFailed(f"the Flower run failed in its ServerApp: {error}") from error
    charged = []  # once the shards are placed (a population on disk may be refused there)
    fast = run_fast(experiment, run["shards"], run["backend"], show_progress=show_progress,
                    when_placed=lambda: charged.append(charge_run(config["privacy"], experiment.privacy, run_id)))
    privacy = charged[0]
    timing = {"population_s": population_s, **fast.timing}
    result = experiment.finish(fast.result, timing, f"fast/{fast.backend}", counts=fast.counts)
    result["privacy"] = privacy.to_dict()
    result["timing_s"]["total_s"] = time.perf_counter() - started
    write_run_outputs(output, result)
    return result
