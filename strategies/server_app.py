"""The ServerApp: build the server from the run config, run it, write the result.

The run config holds the fedhh config as dotted keys (``population.users``,
the tables of ``[tool.flwr.app.config]`` in ``pyproject.toml``, overridable
with ``flwr run --run-config``), plus keys that only the Flower app reads:

* ``output-dir``: the results folder (``result.json``; for a shards
  federation also CSVs and a plot; written atomically); a relative path is
  relative to the working directory of the process running the ServerApp
  (for ``flwr run`` on a local SuperLink: where it was started);
* ``progress``: whether to draw the per-round progress bar.

What the server knows depends on ``run.federation``:

* ``shards``: the population config describes the users, so the server
  builds the same population as its nodes, waits for ``run.shards``
  SuperNodes and writes the discovery next to the true counts;
* ``devices``: the data stays on the devices.  The server knows only the
  public parameters and ``n = population.users``, the enrolled population
  the privacy parameters are solved for (never the number of devices that
  happen to be online, which whoever controls the devices could steer).
  It waits up to ``run.connect_timeout`` for the n devices and runs with
  those that came; its result has no true counts.

Either way every round line of the result carries the round's
participation (``strategies.participation``), and a ``participation``
summary says which shards were lost and why the privacy report holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedhh.config import ConfigError, FedhhConfig, Scalar, config_from_flat
from fedhh.experiment import Experiment, item_codec, run_record
from fedhh.protocols import ProtocolResult, ServerProtocol, get_protocol
from fedhh.results import write_result
from simulations.report import write_run_outputs

from .base import LOGGER, ProtocolStrategy
from .participation import participation_summary
from .registry import flower_protocol
from .secure import SecureAggregation
from .shards import DEVICES

OUTPUT_DIR = "output-dir"
PROGRESS = "progress"


def run_experiment(grid: Grid, run_config: Mapping[str, Any], context: Context) -> Path:
    """Run the configured experiment over the grid's nodes; the path of ``result.json``."""
    output_dir = run_config.get(OUTPUT_DIR)
    if not isinstance(output_dir, str) or not output_dir:
        raise ConfigError(f"{OUTPUT_DIR}: the run config must name the results folder, got {output_dir!r}")
    show_progress = run_config.get(PROGRESS, False)
    if not isinstance(show_progress, bool):
        raise ConfigError(f"{PROGRESS}: expected true or false, got {show_progress!r}")

    started = time.perf_counter()
    config = config_from_flat(run_config)
    run = config["run"]
    flower = flower_protocol(str(config["protocol"]["name"]))
    devices = run["federation"] == DEVICES
    codec = item_codec(config)
    if devices:
        experiment = None
        n_users = int(config["population"]["users"])
        server = get_protocol(str(config["protocol"]["name"])).build_server(
            config["privacy"], n_users, codec, int(run["seed"]), protocol=config["protocol"]
        )
    else:
        experiment = Experiment(config)
        n_users = experiment.n_users
        server = experiment.make_server()
    secure = None
    if run["secure_aggregation"]:
        if flower.dense is None:
            raise ConfigError(
                f"run.secure_aggregation: protocol {config['protocol']['name']!r} has no fixed-length "
                "layout to sum securely; set run.secure_aggregation = false"
            )
        secure = SecureAggregation(context, flower.dense(codec), flower.request)
    strategy = flower.strategy(
        server,
        flower.request,
        flower.response,
        n_users,
        n_users if devices else int(run["shards"]),
        federation=str(run["federation"]),
        round_timeout=float(run["round_timeout"]),
        connect_timeout=float(run["connect_timeout"]),
        secure=secure,
        show_progress=show_progress,
    )
    experiment_s = time.perf_counter() - started
    strategy.start(grid)
    rounds = strategy.round_seconds
    timing = {
        "experiment_s": experiment_s,  # server: population (shards), vocabulary, privacy solve
        "setup_s": strategy.setup_seconds,  # nodes connected and shards built
        "rounds_s": sum(rounds),
        "mean_round_s": sum(rounds) / len(rounds) if rounds else 0.0,
        "max_round_s": max(rounds, default=0.0),
    }
    if experiment is None:
        document = device_document(config, server, timing)
    else:
        document = experiment.finish(server.result(), timing, transport="flower")
    add_participation(document, strategy)
    write = write_result if experiment is None else write_run_outputs
    path = write(output_dir, document)
    LOGGER.info("result written to %s", path.resolve())
    return path


def add_participation(document: dict[str, Any], strategy: ProtocolStrategy) -> None:
    """Each round line gets its participation; the document gets the run's summary."""
    for line, record in zip(document["rounds"], strategy.participation, strict=True):
        line.update(record.to_dict())
    document["participation"] = participation_summary(
        strategy.participation,
        len(strategy.federation.members),
        strategy.federation.missing_users,
        strategy.dropout_privacy,
    )


def device_document(config: FedhhConfig, server: ServerProtocol, timing: dict[str, float]) -> dict[str, Any]:
    """The result of a device federation: what the server can know without anyone's data."""
    result: ProtocolResult = server.result()
    return {
        "protocol": result.protocol,
        "seed": int(config["run"]["seed"]),
        "n_users": int(config["population"]["users"]),
        "transport": "flower/devices",
        "config": config.to_dict(),
        **run_record(result, timing),
    }


def make_server_app(run_config: Mapping[str, Scalar] | None = None) -> ServerApp:
    """The ServerApp; ``run_config``, if given, stands in for the context's run config.

    ``flwr run`` hands the run config to ``app`` below; Flower's in-process
    ``run_simulation`` has no run config, so ``simulations.flower`` binds one.
    """
    bound = dict(run_config) if run_config is not None else None
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        run_experiment(grid, context.run_config if bound is None else bound, context)

    return server_app


app = make_server_app()
