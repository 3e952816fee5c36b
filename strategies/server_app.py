"""The ServerApp: build the experiment from the run config, run it, write the result.

The run config holds the fedhh config as dotted keys (``population.users``,
the tables of ``[tool.flwr.app.config]`` in ``pyproject.toml``, overridable
with ``flwr run --run-config``), plus keys that only the Flower app reads:

* ``output-dir``: the results folder (``result.json``, CSVs, plot; written
  atomically); a relative
  path is relative to the working directory of the process running the
  ServerApp (for ``flwr run`` on a local SuperLink: where it was started);
* ``progress``: whether to draw the per-round progress bar.

The number of SuperNodes must equal ``run.shards``: the server waits for
that many nodes, and each node holds the users of one shard.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedhh.config import ConfigError, Scalar, config_from_flat
from fedhh.experiment import Experiment
from simulations.report import write_run_outputs

from .base import LOGGER
from .registry import flower_protocol

OUTPUT_DIR = "output-dir"
PROGRESS = "progress"


def run_experiment(grid: Grid, run_config: Mapping[str, Any]) -> Path:
    """Run the configured experiment over the grid's nodes; the path of ``result.json``."""
    output_dir = run_config.get(OUTPUT_DIR)
    if not isinstance(output_dir, str) or not output_dir:
        raise ConfigError(f"{OUTPUT_DIR}: the run config must name the results folder, got {output_dir!r}")
    show_progress = run_config.get(PROGRESS, False)
    if not isinstance(show_progress, bool):
        raise ConfigError(f"{PROGRESS}: expected true or false, got {show_progress!r}")

    started = time.perf_counter()
    config = config_from_flat(run_config)
    experiment = Experiment(config)
    flower = flower_protocol(config["protocol"]["name"])
    server = experiment.make_server()
    strategy = flower.strategy(
        server,
        flower.request,
        flower.response,
        experiment.n_users,
        int(config["run"]["shards"]),
        show_progress=show_progress,
    )
    experiment_s = time.perf_counter() - started
    strategy.start(grid)
    rounds = strategy.round_seconds
    timing = {
        "experiment_s": experiment_s,  # server: population, vocabulary, privacy solve
        "setup_s": strategy.setup_seconds,  # nodes connected and shards built
        "rounds_s": sum(rounds),
        "mean_round_s": sum(rounds) / len(rounds) if rounds else 0.0,
        "max_round_s": max(rounds, default=0.0),
    }
    path = write_run_outputs(output_dir, experiment.finish(server.result(), timing, transport="flower"))
    LOGGER.info("result written to %s", path.resolve())
    return path


def make_server_app(run_config: Mapping[str, Scalar] | None = None) -> ServerApp:
    """The ServerApp; ``run_config``, if given, stands in for the context's run config.

    ``flwr run`` hands the run config to ``app`` below; Flower's in-process
    ``run_simulation`` has no run config, so ``simulations.flower`` binds one.
    """
    bound = dict(run_config) if run_config is not None else None
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        run_experiment(grid, context.run_config if bound is None else bound)

    return server_app


app = make_server_app()
