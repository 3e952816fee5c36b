"""Run one configured experiment on the configured driver and write its results."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fedhh.config import FedhhConfig
from fedhh.experiment import Experiment

from .fast import run_fast
from .report import write_run_outputs


def run_experiment(config: FedhhConfig, output_dir: Path, show_progress: bool = True) -> dict[str, Any]:
    """Run ``config`` and write its results folder; returns the result document.

    The experiment is built (and its privacy target solved) before any driver
    starts, so an invalid run fails without leaving a results folder.
    """
    started = time.perf_counter()
    experiment = Experiment(config)
    population_s = time.perf_counter() - started
    run = config["run"]
    if run["driver"] == "flower":
        from .flower import run_flower_simulation

        return run_flower_simulation(config, output_dir=output_dir, show_progress=show_progress)
    fast = run_fast(experiment, run["shards"], run["backend"], show_progress=show_progress)
    timing = {"population_s": population_s, **fast.timing}
    result = experiment.finish(fast.result, timing, f"fast/{fast.backend}")
    timing["total_s"] = time.perf_counter() - started
    write_run_outputs(output_dir, result)
    return result
