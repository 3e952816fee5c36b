"""The ServerApp: build the server from the run config, run it, write the result.

The run config holds the fedhh config as dotted keys (``population.users``,
the tables of ``[tool.flwr.app.config]`` in ``pyproject.toml``) and the keys
only the Flower app reads: ``output-dir`` (claimed before anything else,
:mod:`fedhh.results`), ``overwrite``, ``progress``, ``run-id`` (the run's name
in ``privacy.ledger``) and ``protocol-module`` (:mod:`strategies.plugins`);
``docs/flower.md`` lists them; a ``~`` opening ``output-dir`` is the home
folder of whoever runs the ServerApp.  What is drawn and written besides
``result.json`` is the caller's (:func:`make_server_app` composes a result
writer and a progress display), so this layer never imports the one above
it.  The ServerApp charges the run to ``privacy.ledger`` itself, once, after
every check and before round 1, whichever way the run was started.

With ``run.federation = "shards"`` each SuperNode builds its shard of the
population the config describes.  With ``run.evaluation`` (the default)
the server builds the same population, to write the discovery next to the
true counts; without it the server reads nothing of the users' data (a
population file need not exist on the server): ``n`` is
``population.users`` for a sampled population, else what the nodes
report, and the result describes no population.  ``run.shards = "auto"``
runs on the SuperNodes that connect (:mod:`strategies.admission`).  With
``"devices"`` the data stays on the devices: the server knows only the
public parameters and ``n = population.users`` (never the number of devices
online, which whoever controls the devices could steer), waits up to
``run.connect_timeout`` for them and writes no true counts.  Every round
line carries the round's participation (:mod:`strategies.participation`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedhh.config import ConfigError, FedhhConfig, Scalar, config_from_flat, fixed_shards
from fedhh.data.deny_list import DenyList, read_deny_list
from fedhh.data.items import ItemCodec
from fedhh.data.sources import configured_users
from fedhh.experiment import Experiment, item_codec, report_cap, run_record
from fedhh.privacy.charge import charge_run
from fedhh.protocols import ProtocolResult, get_protocol
from fedhh.protocols.communication import Communication
from fedhh.protocols.spec import ProtocolSpec
from fedhh.results import ResultsFolder, write_result

from .admission import Admission, StatusCallback
from .base import LOGGER, ProgressFactory, ProtocolStrategy
from .codec import codec_for
from .errors import RunStopped
from .participation import participation_summary
from .plugins import load_protocol_module
from .secure import SecureAggregation
from .shards import DEVICES, SHARDS

OUTPUT_DIR = "output-dir"
PROGRESS = "progress"
OVERWRITE = "overwrite"
RUN_ID = "run-id"
POPULATION_PATH = "population.path"


@dataclass
class StopHandle:
    """How a driver that runs the ServerApp in one of its threads stops it.

    Setting ``requested`` ends the server's waits for its nodes within a
    poll interval (:class:`~strategies.errors.RunStopped`); ``thread`` is the
    thread the ServerApp runs in, to wait for it.
    """

    requested: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def stop(self, timeout: float) -> None:
        self.requested.set()
        if self.thread is not None:
            self.thread.join(timeout)


def _app_setting(run_config: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = run_config.get(key, default)
    if not isinstance(value, kind):
        raise ConfigError(f"{key}: expected {'true or false' if kind is bool else kind.__name__}, got {value!r}")
    return value


# Writes a run's result document into its claimed results folder; the path of result.json.
ResultWriter = Callable[[ResultsFolder, dict[str, Any]], Path]


@dataclass(frozen=True)
class PreparedRun:
    """A run that a driver in this process has already built and checked.

    The ServerApp then uses its experiment (population, truth, privacy
    solve: built once) and hands the result document to ``write``, which
    writes it into the folder the driver claimed (written once, in place),
    instead of building its own and writing to ``output-dir``.  ``name``
    names the run in the privacy ledger when the run config's ``run-id`` is
    empty.
    """

    experiment: Experiment
    write: Callable[[dict[str, Any]], Path | None]
    name: str = "result"


def run_on_grid(
    grid: Grid,
    run_config: Mapping[str, Any],
    context: Context,
    stop: threading.Event | None = None,
    *,
    write_outputs: ResultWriter = write_result,
    progress: ProgressFactory | None = None,
    status: StatusCallback | None = None,
) -> Path:
    """Run the configured experiment over the grid's nodes; the path of ``result.json``.

    ``write_outputs`` writes a shards run's folder (by default ``result.json``
    alone; a device federation's result, which has no truth, always is);
    ``progress`` draws the rounds when the run config's ``progress`` is true;
    ``status`` is told what the server does while it waits for its nodes.
    """
    output_dir = run_config.get(OUTPUT_DIR)
    if not isinstance(output_dir, str) or not output_dir:
        raise ConfigError(f"{OUTPUT_DIR}: the run config must name the results folder, got {output_dir!r}")
    output_dir = str(Path(output_dir).expanduser())
    show_progress = _app_setting(run_config, PROGRESS, bool, False)
    overwrite = _app_setting(run_config, OVERWRITE, bool, False)
    run_id = _app_setting(run_config, RUN_ID, str, "")
    claim = ResultsFolder.claim(output_dir, overwrite=overwrite, field=OUTPUT_DIR, overwrite_hint=f"{OVERWRITE}=true")
    with claim as folder:
        run_id = run_id or f"{folder.path.name}-flower-run-{context.run_id}"
        load_protocol_module(run_config)
        config = config_from_flat(run_config)
        experiment = Experiment(config) if server_holds_population(config) else None
        write = write_result if config["run"]["federation"] == DEVICES else write_outputs
        display = progress if show_progress else None
        path = _run(
            grid, config, experiment, context, lambda document: write(folder, document), display, run_id, stop, status
        )
        assert path is not None
        return path


def server_holds_population(config: FedhhConfig) -> bool:
    """Whether the ServerApp builds the population: only in a ``shards`` federation, and only to
    evaluate the discovery against it (``run.evaluation``); otherwise it reads none of the users' data."""
    return config["run"]["federation"] == SHARDS and bool(config["run"]["evaluation"])


def run_prepared(
    grid: Grid,
    run_config: Mapping[str, Any],
    context: Context,
    prepared: PreparedRun,
    stop: threading.Event | None = None,
    progress: ProgressFactory | None = None,
    status: StatusCallback | None = None,
) -> Path | None:
    """Run a driver's prepared experiment over the grid's nodes; what ``prepared.write`` returns."""
    display = progress if _app_setting(run_config, PROGRESS, bool, False) else None
    run_id = _app_setting(run_config, RUN_ID, str, "") or f"{prepared.name}-flower-run-{context.run_id}"
    experiment = prepared.experiment
    return _run(grid, experiment.config, experiment, context, prepared.write, display, run_id, stop, status)


def _run(
    grid: Grid,
    config: FedhhConfig,
    experiment: Experiment | None,
    context: Context,
    write: Callable[[dict[str, Any]], Path | None],
    progress: ProgressFactory | None,
    run_id: str,
    stop: threading.Event | None,
    status: StatusCallback | None,
) -> Path | None:
    """The run itself; ``experiment`` is ``None`` when the server holds no data (a device
    federation, or a shards federation without ``run.evaluation``)."""
    started = time.perf_counter()
    run = config["run"]
    spec = get_protocol(str(config["protocol"]["name"]))
    devices = run["federation"] == DEVICES
    codec = item_codec(config)
    round_timeout, connect_timeout = float(run["round_timeout"]), float(run["connect_timeout"])
    shards = int(config["population"]["users"]) if devices else fixed_shards(config)
    federation = None  # admitted here, before the server is built, when only the nodes know n
    admission_s = 0.0
    deny_list = read_deny_list(config.run.deny_list, codec) if experiment is None else experiment.deny_list
    if experiment is None:
        n_users = int(config["population"]["users"]) if devices else configured_users(config["population"])
        if n_users is None:
            admitted = time.perf_counter()
            federation = Admission(SHARDS, shards, None, connect_timeout, round_timeout, stop, status).run(grid)
            n_users, admission_s = federation.n_users, time.perf_counter() - admitted
        server = spec.build_server(config["privacy"], n_users, codec, int(run["seed"]), protocol=config["protocol"])
    else:
        n_users = experiment.n_users
        server = experiment.make_server()
    server.check_ready()  # before anything is charged or asked of the nodes
    # what one user sends, from the fresh server (an experiment has it already)
    communication = spec.communication(server) if spec.communication is not None and experiment is None else None
    strategy = ProtocolStrategy(
        spec,
        server,
        n_users,
        shards,
        federation_kind=str(run["federation"]),
        round_timeout=round_timeout,
        connect_timeout=connect_timeout,
        aggregation=secure_aggregation(spec, codec, context) if run["secure_aggregation"] else None,
        progress=progress,
        stop=stop,
        federation=federation,
        status=status,
    )
    privacy = charge_run(config["privacy"], server.guarantee(), run_id, deny_list)  # last, before round 1
    experiment_s = time.perf_counter() - started - admission_s
    strategy.start(grid)
    rounds = strategy.round_seconds
    timing = {
        "experiment_s": experiment_s,  # server: population (shards), vocabulary, privacy solve
        "setup_s": admission_s + strategy.setup_seconds,  # nodes connected and shards built
        "rounds_s": sum(rounds),
        "mean_round_s": sum(rounds) / len(rounds) if rounds else 0.0,
        "max_round_s": max(rounds, default=0.0),
    }
    with strategy.clock.server():
        result = server.result()
    timing["server_s"] = strategy.clock.server_s  # requests, combining and absorbing, the result
    if experiment is None:
        document = dataless_document(config, result, timing, n_users, communication, deny_list)
    else:
        document = experiment.finish(result, timing, transport="flower")
    if not devices:  # "auto": the shards the nodes held
        document["config"]["run"]["shards"] = strategy.num_shards
    add_participation(document, strategy)
    document["privacy"] = privacy.to_dict()
    if config.privacy.ledger:
        document["run_id"] = run_id  # the name the ledger charged it under, which a later run's deny list names
    path = write(document)
    if path is not None:
        LOGGER.info("result written to %s", path)
    return path


def secure_aggregation(spec: ProtocolSpec, codec: ItemCodec, context: Context) -> SecureAggregation:
    """The SecAgg+ aggregation step of a protocol whose spec lays its responses out densely."""
    if spec.dense is None:
        reason = f" ({spec.no_dense_reason})" if spec.no_dense_reason else ""
        raise ConfigError(
            f"run.secure_aggregation: protocol {spec.name!r} has no fixed-length layout to sum "
            f"securely{reason}; set run.secure_aggregation = false"
        )
    return SecureAggregation(context, spec.dense(codec), codec_for(spec.request_type))


def add_participation(document: dict[str, Any], strategy: ProtocolStrategy) -> None:
    """Each round line gets its participation; the document gets the run's summary."""
    for line, record in zip(document["rounds"], strategy.participation, strict=True):
        line.update(record.to_dict())
    document["participation"] = participation_summary(
        strategy.participation,
        len(strategy.federation.members),
        strategy.federation.missing_users,
        strategy.spec.dropout_privacy,
    )


def dataless_document(
    config: FedhhConfig,
    result: ProtocolResult,
    timing: dict[str, float],
    n_users: int,
    communication: Communication | None = None,
    deny_list: DenyList | None = None,
) -> dict[str, Any]:
    """The result of a server that holds no data (a device federation, or a shards federation
    without ``run.evaluation``): what it can know without anyone's data; no population is described."""
    devices = config["run"]["federation"] == DEVICES
    document = {
        "protocol": result.protocol,
        "seed": int(config["run"]["seed"]),
        "n_users": n_users,
        "transport": "flower/devices" if devices else "flower",
        "config": config.to_dict(),
        **run_record(result, timing, report_cap(config), deny_list),
        **({"communication": communication.to_dict()} if communication is not None else {}),
    }
    if deny_list is not None:
        document["deny_list"] = deny_list.record()
    return document


def with_app_files(run_config: Mapping[str, Any], app_dir: Path) -> dict[str, Any]:
    """``run_config`` with a relative ``population.path`` read as a file of the app folder ``app_dir``.

    Flower installs an app bundle in a folder of its own on the server and on
    every node, and runs the ServerApp in the SuperLink's working folder: a
    file that travels in the bundle (a ``.jsonl`` population, say) is found
    there, whatever folder ``flwr run`` was given.  An absolute path, or
    none, is left as it is.
    """
    path = run_config.get(POPULATION_PATH)
    if not isinstance(path, str) or not path or Path(path).is_absolute():
        return dict(run_config)
    return {**run_config, POPULATION_PATH: str(app_dir / path)}


def make_server_app(
    run_config: Mapping[str, Scalar] | None = None,
    stop: StopHandle | None = None,
    prepared: PreparedRun | None = None,
    *,
    write_outputs: ResultWriter = write_result,
    progress: ProgressFactory | None = None,
    status: StatusCallback | None = None,
    app_dir: Path | None = None,
) -> ServerApp:
    """The ServerApp; ``run_config``, if given, stands in for the context's run config.

    ``flwr run`` hands the run config to the app; Flower's in-process
    ``run_simulation`` has no run config, so ``simulations.flower`` binds one,
    a ``stop`` handle to end the run early, and the run it has already
    prepared (``prepared``: nothing is built or written twice).  A run
    stopped through ``stop`` returns without a result, as any ServerApp
    that ends: the driver that stopped it reports the stop, and Flower's
    engine ends as it does after a completed run.
    ``write_outputs`` writes the results folder of a run the app builds
    itself (default: ``result.json`` only) and ``progress`` draws its rounds
    when the run config's ``progress`` is true (default: nothing drawn);
    ``status`` is told what the server does while it waits for its nodes
    (default: it is only logged).  With ``app_dir``, the folder of an app
    bundle's own module that names this app as its ServerApp, a relative
    ``population.path`` is a file of that bundle (:func:`with_app_files`).
    """
    bound = dict(run_config) if run_config is not None else None
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        if stop is not None:
            stop.thread = threading.current_thread()
        run_config = context.run_config if bound is None else bound
        if app_dir is not None:
            run_config = with_app_files(run_config, app_dir)
        requested = stop.requested if stop is not None else None
        try:
            if prepared is None:
                run_on_grid(
                    grid, run_config, context, requested, write_outputs=write_outputs, progress=progress, status=status
                )
            else:
                run_prepared(grid, run_config, context, prepared, requested, progress, status)
        except RunStopped:
            if requested is None or not requested.is_set():
                raise

    return server_app
