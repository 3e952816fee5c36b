"""Run an experiment under Flower's simulation engine (Ray backend), in this process.

This is the deployment-faithful transport: the same ServerApp and ClientApp
that ``flwr run`` loads, with every request and response encoded into
Flower records and scheduled by Flower's simulation engine onto Ray actors;
one virtual SuperNode per shard of users.  Flower's in-process entry
point is ``flwr.simulation.run_simulation`` (deprecated in favour of
``flwr run``, which needs a SuperLink process, but still supported); it
gives the apps no run config, so the experiment's config is bound into
them (``make_server_app`` / ``make_client_app``).  The ServerApp runs in
this process: it gets the experiment built and checked here and the
function that writes the result, so a run builds its population, truth and
server once and writes its results folder once, in place.

With a Ray cluster named (``RAY_ADDRESS``, ``fedhh run --ray-address``:
``simulations.ray_runtime``), the simulation runs on it: Flower sizes its
actor pool from the cluster's CPUs, one ClientApp actor per CPU on every
node, and the nodes fetch the population source from Ray's object store
(docs/scale.md).

Ray and Flower log a lot (Flower also warns that ``run_simulation`` is
deprecated).  Given a ``log`` file (``fedhh run``: ``run.log`` in the
results folder), Flower's log, fedhh's round lines among it, goes there,
and reaches the terminal only when ``verbose`` is set; without one, only
Flower's errors and fedhh's own round lines are shown, unless ``verbose``.
A ``status`` line (``simulations.progress.StatusLine``) says what the run
waits for before round 1, and the rounds' bar replaces it.  Ray is shut
down afterwards if this call started it, so a run leaves no Ray processes
behind.

An interruption (Ctrl-C, SIGTERM: ``simulations.interrupts``) must not cut
Flower's engine short.  The engine runs in the main thread and, however it
ends, shuts Ray down itself.  Interrupted while it waits for its worker
threads, it shuts Ray down under those still waiting in ``ray.get`` for a
ClientApp actor, which may then wait forever; interrupted inside that
shutdown, it leaves Ray's driver half torn down, and Ray ends the process
(exit status 1) the next time a Ray object is released.  So the signal is
deferred for the length of the engine (``simulations.interrupts.stop_deferred``):
it tells the ServerApp to stop (its waits for nodes end within a poll
interval, and it returns without a result), the engine then ends as it
does after any run, its workers finishing their current message and its
Ray shut down after them, and the signal is raised once ``run_simulation``
has returned.  A result the ServerApp had already handed over (the stop
came while the engine was stopping) is still written, completely, and the
interruption says so.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.simulation import run_simulation

from fedhh.config import DEFAULT_SHARDS, FedhhConfig, fixed_shards
from fedhh.data.population import PopulationSource
from fedhh.data.sources import SampledSource
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.privacy.charge import check_budget
from fedhh.protocols import protocol_module
from fedhh.results import ResultsFolder
from strategies.base import LOGGER
from strategies.client_app import make_client_app
from strategies.plugins import PROTOCOL_MODULE
from strategies.server_app import PROGRESS, RUN_ID, PreparedRun, StopHandle, make_server_app

from .interrupts import restore_stop_handlers, stop_deferred, stop_handlers, stop_requested
from .plot_process import plots_aside
from .progress import RoundProgress, StatusLine
from .ray_runtime import DEFAULT_NUM_CPUS, ray_runtime, run_init_args
from .report import write_run_outputs
from .run_log import log_handler

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
    experiment: Experiment | None = None,
    write: Callable[[dict[str, Any]], Path | None] | None = None,
    log: Path | None = None,
    status: StatusLine | None = None,
) -> dict[str, Any]:
    """Run ``config`` over ``num_supernodes`` virtual SuperNodes; the result document.

    ``num_supernodes`` defaults to ``run.shards`` (8 for ``"auto"``) and,
    when given, replaces it (one shard per SuperNode).  The ServerApp runs in this process, so it
    takes the experiment built and checked here (or ``experiment``, already
    built by the caller for this config) and hands its result document to
    ``write``; by default the document is written to
    ``output_dir/result.json`` (replacing a previous fedhh result there only
    with ``overwrite``), or nowhere without ``output_dir``.  The ServerApp
    charges ``privacy.ledger`` under ``run_id`` (empty: a name of its own).
    ``num_cpus`` is the size of the Ray started for the run (ignored on a
    named cluster, which has its own).  ``log`` receives Flower's log
    (and ``status`` shows the run's state), as the module's doc says.
    """
    shards = (fixed_shards(config) or DEFAULT_SHARDS) if num_supernodes is None else num_supernodes
    if shards < 1:
        raise InputError(f"num_supernodes must be >= 1, got {shards}")
    if num_cpus < 1:
        raise InputError(f"num_cpus must be >= 1, got {num_cpus}")
    if config["run"]["federation"] != "shards":
        raise InputError(
            "run.federation: a simulation's virtual SuperNodes hold shards of the configured "
            'population; a "devices" federation needs real SuperNodes (see docs/deployment.md)'
        )
    if write is not None and output_dir is not None:
        raise ValueError("give output_dir or write, not both")
    config = config.with_overrides({"run.shards": shards, "run.driver": "flower"})
    # Refuse what the ServerApp would refuse (privacy target out of reach, an
    # output folder that must not be written, a run over the ledger's budget)
    # before Ray starts, not inside its thread.
    if experiment is None or experiment.config != config:
        experiment = Experiment(config)
    check_budget(config["privacy"], experiment.privacy, run_id or "this run")
    documents: list[dict[str, Any]] = []
    stop = StopHandle()
    with contextlib.ExitStack() as stack:
        folder = None
        if output_dir is not None:
            folder = stack.enter_context(ResultsFolder.claim(output_dir, overwrite=overwrite, field="output_dir"))

        if write is not None or folder is not None:
            # The results folder's plot: matplotlib imported by a child forked now, before Ray
            # starts, while Ray starts (or the one `fedhh run` forked); the ServerApp's thread
            # draws through it (this context).
            stack.enter_context(plots_aside())
        context = contextvars.copy_context()

        writes = (
            write
            if write is not None
            else (functools.partial(write_run_outputs, folder) if folder is not None else None)
        )
        writing: list[_Writing] = []

        def deliver(document: dict[str, Any]) -> None:
            documents.append(document)
            if writes is not None:
                writing.append(_Writing(context, writes, document))

        prepared = PreparedRun(experiment, deliver, Path(output_dir).name if output_dir is not None else "result")
        run_config = {
            **config.to_flat(),
            PROGRESS: show_progress,
            RUN_ID: run_id,
            PROTOCOL_MODULE: protocol_module(str(config["protocol"]["name"])),
        }
        init_args = run_init_args(num_cpus, verbose)
        backend_config = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": init_args}
        if status is not None:
            status("starting Flower's simulation engine")
        progress = status.rounds if status is not None else RoundProgress
        with _flower_logging(verbose, log), ray_runtime(**init_args):
            population = (
                SharedPopulation.put(experiment.source) if isinstance(experiment.source, SampledSource) else None
            )
            handlers = stop_handlers()
            try:
                with stop_deferred(stop.requested.set):  # never inside the engine: the module's doc
                    try:
                        run_simulation(
                            server_app=make_server_app(run_config, stop, prepared, progress=progress, status=status),
                            client_app=make_client_app(run_config, population),
                            num_supernodes=shards,
                            backend_name="ray",
                            backend_config=backend_config,
                            verbose_logging=verbose,
                        )
                    finally:
                        restore_stop_handlers(handlers)  # the engine's own ray.shutdown may have reset SIGTERM
            except BaseException as error:
                stop.stop(STOP_GRACE)  # the ServerApp's thread outlives Flower's engine otherwise
                for started in writing:
                    started.join()
                    if isinstance(error, KeyboardInterrupt) and started.succeeded:
                        error.add_note(f"the result was written to {started.result()} before the stop")
                raise
            for started in writing:
                path = started.result()
                if path is not None:
                    LOGGER.info("result written to %s", path)
    if not documents:
        raise RuntimeError("the Flower simulation ended without a result")
    return documents[0]


class _Writing(threading.Thread):
    """The result document being written while Flower's engine and Ray stop.

    The ServerApp hands its document over when its last round ends; Flower
    then stops its engine (its workers notice within their 1 s queue
    timeout) and shuts Ray down, mostly waiting.  Writing the results folder
    (result files, the plot drawn by the plot process) in that time rather
    than before it takes the writing off the run's time.  The
    write runs in the driver's context (its plot process); its error is
    raised by :meth:`result`, after the simulation has ended.
    """

    def __init__(
        self, context: contextvars.Context, write: Callable[[dict[str, Any]], Path | None], document: dict[str, Any]
    ) -> None:
        super().__init__(name="fedhh-write-result")
        self._write: Callable[[], Path | None] = functools.partial(context.run, write, document)
        self._path: Path | None = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._path = self._write()
        except BaseException as error:  # raised by result(), in the driver's thread
            self._error = error

    def result(self) -> Path | None:
        """The path the write returned, once written; its error is raised here."""
        self.join()
        if self._error is not None:
            raise self._error
        return self._path

    @property
    def succeeded(self) -> bool:
        """Whether the write has ended and written a path."""
        return not self.is_alive() and self._error is None and self._path is not None


@dataclass(frozen=True)
class SharedPopulation:
    """The driver's population source, put once into Ray's object store for the nodes.

    A sampled population's source is its vocabulary and distribution (no
    users): rebuilding it costs each Ray actor about a second (wordfreq's
    list read and encoded), fetching it from the object store some
    milliseconds.  Each node then builds only its own shard from it.  This
    handle is pickled with the ClientApp for every message, so it holds only
    the object's reference; nodes cache what it returns per process
    (``strategies.client_app``), keyed by the reference's id.
    """

    key: str
    ref: Any = field(compare=False)  # ray.ObjectRef

    @classmethod
    def put(cls, source: PopulationSource) -> SharedPopulation:
        import ray

        ref = ray.put(source)
        return cls(ref.hex(), ref)

    def __call__(self) -> PopulationSource:
        import ray

        source: PopulationSource = ray.get(self.ref)
        return source


@contextlib.contextmanager
def _flower_logging(verbose: bool, log: Path | None) -> Iterator[None]:
    """Where Flower's log goes for one run (the module's doc).

    With a ``log`` file, Flower's logger (fedhh's is its child) writes
    into it at INFO (DEBUG when ``verbose``), and its terminal handler is
    silenced unless ``verbose``.  Without one and without ``verbose``,
    Flower's logger passes only errors, fedhh's keeps INFO.  Unless
    ``verbose``, Ray's start-up warnings are off, and so are Flower's errors
    once the run is being stopped (they are the echo of the stop).
    """
    flower = logging.getLogger("flwr")
    saved = flower.level, LOGGER.level
    terminal = [
        handler
        for handler in flower.handlers
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
    ]
    levels = [handler.level for handler in terminal]
    after_stop = _SilentAfterStop()
    with contextlib.ExitStack() as stack:
        if log is not None:
            flower.setLevel(logging.DEBUG if verbose else logging.INFO)
            stack.enter_context(log_handler(log, (flower.name,), logging.DEBUG if verbose else logging.INFO))
        if not verbose:
            if log is not None:
                for handler in terminal:
                    handler.setLevel(logging.CRITICAL + 1)
            else:
                flower.setLevel(logging.ERROR)
                LOGGER.setLevel(logging.INFO)
            flower.addFilter(after_stop)
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
        try:
            yield
        finally:
            flower.removeFilter(after_stop)
            for handler, level in zip(terminal, levels, strict=True):
                handler.setLevel(level)
            flower.setLevel(saved[0])
            LOGGER.setLevel(saved[1])


class _SilentAfterStop(logging.Filter):
    """Once the run is being stopped (Ctrl-C, SIGTERM), Flower's errors are the echo of the stop: drop them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not stop_requested()
