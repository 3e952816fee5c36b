"""Run one configured experiment on the configured driver and write its results."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console

from fedhh.config import ConfigError, FedhhConfig, fixed_shards, with_fixed_shards
from fedhh.experiment import Experiment
from fedhh.privacy.charge import charge_run, check_budget, run_label
from fedhh.results import ResultsFolder

from .fast import run_fast
from .import_aside import ImportAside
from .progress import StatusLine, terminal_console
from .ray_runtime import ray_runtime, run_init_args
from .report import write_run_outputs
from .run_log import LOG_NAME, captured_output


class FlowerRunFailed(RuntimeError):
    """A Flower run that started and failed in its federation: the ServerApp's error (nodes that did
    not answer, a round nobody answered).  Neither bad input (exit status 2) nor a bug in fedhh (a
    traceback): a run that did not complete, reported as one line with exit status 1.  ``log`` is
    the run's log, kept in the results folder with the error's traceback (no result is written)."""

    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log


def run_experiment(
    config: FedhhConfig, output: ResultsFolder, show_progress: bool = True, verbose: bool = False
) -> dict[str, Any]:
    """Run ``config`` and write its results into the claimed ``output``; returns the result document.

    Everything that can be checked is checked before the privacy ledger is
    charged or any round runs: the results folder (claimed by the caller),
    the population and what it needs (``Experiment``), the privacy target,
    the placement of its shards (on a Ray cluster, a population on disk
    must be held by its nodes: :mod:`simulations.placement`) and the
    ledger's budget.  The charge is made once, under the results
    folder's name and the time (``run_label``): here for the fast driver, by
    the ServerApp for Flower.

    ``show_progress`` draws a status line from the start and the rounds'
    bar on stderr.  A Flower run writes Flower's and Ray's logs into
    ``run.log`` in the results folder, and shows them on the terminal
    too only when ``verbose`` (:mod:`simulations.run_log`), instead of the
    status line and the bar, which the log lines would break up.
    """
    if config["run"]["federation"] == "devices":
        raise ConfigError(
            'run.federation: "devices" means real devices hold their own data (see '
            'docs/deployment.md); fedhh run simulates shards: use "shards"'
        )
    config = with_fixed_shards(config)  # "auto": the shards this process starts itself
    if config["run"]["driver"] == "flower":
        return _run_on_flower(config, output, show_progress, verbose)
    started = time.perf_counter()
    with StatusLine(Console(file=sys.stderr), enabled=show_progress) as status:
        status("building the population")
        experiment = Experiment(config)
    population_s = time.perf_counter() - started
    run_id = run_label(output.path.name)
    # A run over budget is refused before Ray starts or shards are built; the charge itself comes
    # once the shards are placed (a population on disk may be refused there).
    check_budget(config["privacy"], experiment.privacy, run_id)
    shards = fixed_shards(config)
    assert shards is not None  # with_fixed_shards above
    charged = []  # once the shards are placed (a population on disk may be refused there)
    fast = run_fast(
        experiment,
        shards,
        config.run.backend,
        show_progress=show_progress,
        when_placed=lambda: charged.append(
            charge_run(config["privacy"], experiment.privacy, run_id, experiment.deny_list)
        ),
    )
    privacy = charged[0]
    timing = {"population_s": population_s, **fast.timing}
    result = experiment.finish(fast.result, timing, f"fast/{fast.backend}", counts=fast.counts)
    result["privacy"] = privacy.to_dict()
    if config.privacy.ledger:
        result["run_id"] = run_id  # the name the ledger charged it under, which a later run's deny list names
    result["timing_s"]["total_s"] = time.perf_counter() - started
    write_run_outputs(output, result)
    return result


def _run_on_flower(config: FedhhConfig, output: ResultsFolder, show_progress: bool, verbose: bool) -> dict[str, Any]:
    """The Flower run of :func:`run_experiment`: its output captured into ``run.log`` from the
    start, a federation's failure kept there with its traceback (the folder then holds the log only)."""
    log = output.staging_path / LOG_NAME
    show_progress = show_progress and not verbose  # the log lines say it, one by one
    started = time.perf_counter()
    try:
        with (
            captured_output(log, verbose) as terminal,
            StatusLine(terminal_console(terminal), enabled=show_progress) as status,
        ):
            status("building the population")
            experiment = Experiment(config)
            run_id = run_label(output.path.name)
            # A run over budget is refused before Ray starts; the ServerApp charges it before round 1.
            check_budget(config["privacy"], experiment.privacy, run_id)

            def write(document: dict[str, Any]) -> Path:
                status("writing the results, stopping Flower and Ray")
                document["timing_s"]["total_s"] = time.perf_counter() - started
                return write_run_outputs(output, document)

            # Flower's modules are imported aside while Ray starts.
            flower = ImportAside("simulations.flower")
            status("starting Ray")
            with ray_runtime(**run_init_args(verbose=verbose, captured=True)):
                from strategies.errors import FederationError

                # One experiment (population, truth, privacy solve) and one write, by the ServerApp.
                try:
                    return flower.module().run_flower_simulation(
                        config,
                        experiment=experiment,
                        write=write,
                        show_progress=show_progress,
                        run_id=run_id,
                        verbose=verbose,
                        log=log,
                        status=status,
                    )
                except FederationError as error:
                    with open(log, "a", encoding="utf-8") as handle:
                        handle.write("fedhh: the ServerApp failed:\n" + "".join(traceback.format_exception(error)))
                    raise FlowerRunFailed(f"the Flower run failed in its ServerApp: {error}") from error
    except FlowerRunFailed as failure:
        failure.log = output.commit(None) / LOG_NAME  # the log alone: no result
        raise
