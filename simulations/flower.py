"""Run an experiment under Flower's simulation engine (Ray backend), in this process.

This is the deployment-faithful transport: the same ServerApp and ClientApp
that ``flwr run`` loads, with every request and response encoded into
Flower records and scheduled by Flower's simulation engine onto Ray actors;
one virtual SuperNode per shard of users.  Flower 1.41's in-process entry
point is ``flwr.simulation.run_simulation`` (deprecated in favour of
``flwr run``, which needs a SuperLink process, but still supported); it
gives the apps no run config, so the experiment's config is bound into
them (``make_server_app`` / ``make_client_app``).

Ray and Flower log a lot (Flower also warns that ``run_simulation`` is
deprecated); unless ``verbose`` is set only their errors are shown, while
fedhh's own round lines stay visible.  Ray is shut down afterwards if this
call started it, so a run leaves no Ray processes behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from flwr.simulation import run_simulation

from fedhh.config import FedhhConfig
from fedhh.experiment import Experiment
from strategies.base import LOGGER
from strategies.client_app import make_client_app
from strategies.registry import flower_protocol
from strategies.server_app import OUTPUT_DIR, PROGRESS, make_server_app

DEFAULT_NUM_CPUS = 2  # this machine; each virtual SuperNode's ClientApp takes one


def run_flower_simulation(
    config: FedhhConfig,
    num_supernodes: int | None = None,
    *,
    output_dir: str | Path | None = None,
    show_progress: bool = False,
    verbose: bool = False,
    num_cpus: int = DEFAULT_NUM_CPUS,
) -> dict[str, Any]:
    """Run ``config`` over ``num_supernodes`` virtual SuperNodes; the result document.

    ``num_supernodes`` defaults to ``run.shards`` and, when given, replaces
    it (one shard per SuperNode).  The result is written by the ServerApp to
    ``output_dir/result.json``; without ``output_dir`` it goes to a
    temporary folder that is removed after it has been read.
    """
    shards = int(config["run"]["shards"]) if num_supernodes is None else num_supernodes
    if shards < 1:
        raise ValueError(f"num_supernodes must be >= 1, got {shards}")
    if num_cpus < 1:
        raise ValueError(f"num_cpus must be >= 1, got {num_cpus}")
    if config["run"]["federation"] != "shards":
        raise ValueError(
            "run.federation: a simulation's virtual SuperNodes hold shards of the configured "
            "population; a \"devices\" federation needs real SuperNodes (see docs/deployment.md)"
        )
    config = config.with_overrides({"run.shards": shards, "run.driver": "flower"})
    # Refuse what the ServerApp would refuse (privacy target out of reach, a
    # protocol without Flower codecs) before Ray starts, not inside its thread.
    Experiment(config)
    flower_protocol(str(config["protocol"]["name"]))
    with tempfile.TemporaryDirectory(prefix="fedhh-flower-") as scratch:
        destination = Path(output_dir) if output_dir is not None else Path(scratch) / "result"
        run_config = {
            **config.to_flat(),
            OUTPUT_DIR: str(destination.resolve()),
            PROGRESS: show_progress,
        }
        backend_config = {
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {
                "num_cpus": num_cpus,
                "logging_level": "INFO" if verbose else "ERROR",
                "log_to_driver": verbose,
                "configure_logging": verbose,
            },
        }
        with _quiet_unless(verbose), _own_ray():
            run_simulation(
                server_app=make_server_app(run_config),
                client_app=make_client_app(run_config),
                num_supernodes=shards,
                backend_name="ray",
                backend_config=backend_config,
                verbose_logging=verbose,
            )
        result_file = destination / "result.json"
        if not result_file.is_file():
            raise RuntimeError(f"the Flower simulation ended without writing {result_file}")
        return json.loads(result_file.read_text(encoding="utf-8"))


@contextlib.contextmanager
def _quiet_unless(verbose: bool) -> Iterator[None]:
    """Flower's logger at ERROR and Ray's start-up warnings off, unless verbose.

    fedhh's logger (a child of Flower's) keeps INFO, so the round lines show.
    """
    if verbose:
        yield
        return
    flower = logging.getLogger("flwr")
    saved = flower.level, LOGGER.level
    flower.setLevel(logging.ERROR)
    LOGGER.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
            yield
    finally:
        flower.setLevel(saved[0])
        LOGGER.setLevel(saved[1])


@contextlib.contextmanager
def _own_ray() -> Iterator[None]:
    """Shut Ray down afterwards if Flower's backend started it inside this call."""
    started_here = not ray.is_initialized()
    try:
        yield
    finally:
        if started_here and ray.is_initialized():
            ray.shutdown()
