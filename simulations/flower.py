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

An interruption (Ctrl-C, SIGTERM: ``fedhh.interrupts``) arrives in the
main thread, inside Flower's engine, which then stops its Ray actors; the
ServerApp, in a thread of its own, is told to stop (its waits for nodes end
within a poll interval) and waited for, so nothing keeps the process
alive and no result is written.
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

from flwr.simulation import run_simulation

from fedhh.config import FedhhConfig
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.interrupts import stop_requested
from fedhh.privacy.charge import check_budget
from fedhh.results import ResultsFolder
from strategies.base import LOGGER
from strategies.client_app import make_client_app
from strategies.registry import flower_protocol
from strategies.server_app import OUTPUT_DIR, OVERWRITE, PROGRESS, RUN_ID, StopHandle, make_server_app

from .ray_runtime import ray_runtime

DEFAULT_NUM_CPUS = 2  # this machine; each virtual SuperNode's ClientApp takes one
STOP_GRACE = 5.0  # seconds an interrupted ServerApp gets to end (its waits end within 0.1 s)


def run_flower_simulation(
    config: FedhhConfig,
    num_supernodes: int | None = None,
    *,
    output_dir: str | Path | None = None,
    overwrite: bool = False,
    run_id: str = "",
    show_progress: bool = False,
    verbose: bool = False,
    num_cpus: int = DEFAULT_NUM_CPUS,
) -> dict[str, Any]:
    """Run ``config`` over ``num_supernodes`` virtual SuperNodes; the result document.

    ``num_supernodes`` defaults to ``run.shards`` and, when given, replaces
    it (one shard per SuperNode).  The result is written by the ServerApp to
    ``output_dir/result.json`` (replacing a previous fedhh result there only
    with ``overwrite``); without ``output_dir`` it goes to a temporary
    folder that is removed after it has been read.  The ServerApp charges
    ``privacy.ledger`` under ``run_id`` (empty: a name of its own).
    """
    shards = int(config["run"]["shards"]) if num_supernodes is None else num_supernodes
    if shards < 1:
        raise InputError(f"num_supernodes must be >= 1, got {shards}")
    if num_cpus < 1:
        raise InputError(f"num_cpus must be >= 1, got {num_cpus}")
    if config["run"]["federation"] != "shards":
        raise InputError(
            "run.federation: a simulation's virtual SuperNodes hold shards of the configured "
            "population; a \"devices\" federation needs real SuperNodes (see docs/deployment.md)"
        )
    config = config.with_overrides({"run.shards": shards, "run.driver": "flower"})
    # Refuse what the ServerApp would refuse (privacy target out of reach, a
    # protocol without Flower codecs, an output folder that must not be
    # written, a run over the ledger's budget) before Ray starts, not inside its thread.
    experiment = Experiment(config)
    flower_protocol(str(config["protocol"]["name"]))
    if output_dir is not None:
        ResultsFolder.claim(output_dir, overwrite=overwrite, field="output_dir").release()
    check_budget(config["privacy"], experiment.privacy, run_id or "this run")
    stop = StopHandle()
    with tempfile.TemporaryDirectory(prefix="fedhh-flower-") as scratch:
        destination = Path(output_dir) if output_dir is not None else Path(scratch) / "result"
        run_config = {
            **config.to_flat(),
            OUTPUT_DIR: str(destination.resolve()),
            PROGRESS: show_progress,
            OVERWRITE: overwrite,
            RUN_ID: run_id,
        }
        init_args = {
            "num_cpus": num_cpus,
            "logging_level": "INFO" if verbose else "ERROR",
            "log_to_driver": verbose,
            "configure_logging": verbose,
        }
        backend_config = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": init_args}
        with _quiet_unless(verbose), ray_runtime(**init_args):
            try:
                run_simulation(
                    server_app=make_server_app(run_config, stop),
                    client_app=make_client_app(run_config),
                    num_supernodes=shards,
                    backend_name="ray",
                    backend_config=backend_config,
                    verbose_logging=verbose,
                )
            except BaseException:
                stop.stop(STOP_GRACE)  # the ServerApp's thread outlives Flower's engine otherwise
                raise
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
    after_stop = _SilentAfterStop()
    flower.addFilter(after_stop)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
            yield
    finally:
        flower.removeFilter(after_stop)
        flower.setLevel(saved[0])
        LOGGER.setLevel(saved[1])


class _SilentAfterStop(logging.Filter):
    """Once the run is being stopped (Ctrl-C, SIGTERM), Flower's errors are the echo of the stop: drop them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not stop_requested()
