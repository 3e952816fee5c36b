"""Run one configured experiment on the configured driver and write its results."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fedhh.config import ConfigError, FedhhConfig
from fedhh.experiment import Experiment
from fedhh.privacy.ledger import Ledger
from fedhh.privacy.report import PrivacyReport

from .fast import run_fast
from .report import write_run_outputs


def charge_ledger(config: FedhhConfig, report: PrivacyReport, run_id: str) -> PrivacyReport:
    """Charge the run to the configured ledger before it starts.

    Charging first is the conservative order: a run that crashes mid-way may
    already have released rounds.  A run over the budget is refused here,
    with the ledger unchanged and nothing written.
    """
    privacy = config["privacy"]
    if not privacy["ledger"]:
        return report
    return Ledger(privacy["ledger"]).record(report, run_id, max_epsilon=privacy["max_epsilon"] or None)


def run_experiment(config: FedhhConfig, output_dir: Path, show_progress: bool = True) -> dict[str, Any]:
    """Run ``config`` and write its results folder; returns the result document.

    The experiment is built (and its privacy target solved and charged)
    before any driver starts, so an invalid run fails without leaving a
    results folder.
    """
    if config["run"]["federation"] == "devices":
        raise ConfigError(
            'run.federation: "devices" means real devices hold their own data (see '
            'docs/deployment.md); fedhh run simulates shards: use "shards"'
        )
    started = time.perf_counter()
    experiment = Experiment(config)
    population_s = time.perf_counter() - started
    privacy = charge_ledger(config, experiment.privacy, run_id=output_dir.name)
    run = config["run"]
    if run["driver"] == "flower":
        from .flower import run_flower_simulation

        result = run_flower_simulation(config, show_progress=show_progress)
    else:
        fast = run_fast(experiment, run["shards"], run["backend"], show_progress=show_progress)
        timing = {"population_s": population_s, **fast.timing}
        result = experiment.finish(fast.result, timing, f"fast/{fast.backend}")
    result["timing_s"]["total_s"] = time.perf_counter() - started
    result["privacy"] = privacy.to_dict()
    write_run_outputs(output_dir, result)
    return result
