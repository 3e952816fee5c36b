"""Ray for the length of one run: started here if needed, shut down afterwards.

Both Ray-backed drivers (the fast driver's shard actors and Flower's
simulation engine) run inside :func:`ray_runtime`.  If Ray is not running
yet it is started here, with the given ``ray.init`` arguments, and shut
down when the run ends, however it ends (an error, Ctrl-C, SIGTERM), so a
run leaves no Ray processes behind.  A Ray that was already running (a
cluster named by ``RAY_ADDRESS``, a caller's own session) is left as it is.

``ray.init`` connects this process to Ray as its driver (Ray's C++ core
worker, constructed from Python) without being cut short by a stop
signal (:func:`init_ray`): a SIGINT or SIGTERM arriving while the driver
connects is held until it has connected
(``simulations.interrupts.stop_deferred``), and then stops the run as
anywhere else; one arriving while Ray's processes start stops it at once.
Cut short, the construction leaves Ray's C++ core worker running, with
its threads, and no Python object to shut it down (the signal's exception
is raised in Python code that the core worker runs as it starts), so
``ray.shutdown`` cannot; the process then crashes at exit (a segmentation
fault, as C++ destroys that core worker under its own periodic tasks).
Only the connection is held: Ray's processes take most of ``ray.init``'s
time, many seconds on a loaded machine, and the shutdown stops them
whenever they were cut short.  For the same reason ``ray.init`` is kept
from installing its own SIGTERM handler (a ``sys.exit``, which would cut
the connection short just the same) while it runs; the handlers installed
before (``simulations.interrupts``) are also put back after it, so SIGTERM
stops a run the same way as Ctrl-C.

Ray's C++ failure-signal handler (its stack trace of a crash) is turned
off, here and in the Ray processes started from here
(``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, unless the environment sets it):
``ray.shutdown`` uninstalls it by setting SIGTERM to its default action
underneath Python, so a SIGTERM after any shutdown (Flower's engine shuts
Ray down itself, while the results are still being written) would kill the
process on the spot, leaving its results folder's lock and staging behind.

The shutdown runs whenever Ray was started here, also after a ``ray.init``
that failed or was stopped (Ray may then have processes and a connected
driver without calling itself initialised; ``ray.shutdown`` undoes both),
and a stop signal arriving while it runs is held until it has finished
(``simulations.interrupts.stop_deferred``): a shutdown stopped half-way leaves
Ray's driver torn down underneath its Python objects, and Ray ends the
process (exit status 1) at the next one released.
A Ray stopped while it was still starting up can leave its raylet's agents
running: every process Ray started under this one is recorded, and any of
them still running after the shutdown is stopped by PID.

A cluster is joined only when it is named: ``RAY_ADDRESS`` (or a
command's ``--ray-address``) must be an address (``host:port``, or
``ray://host:port`` for Ray Client).  ``auto`` is refused
(:func:`named_cluster`): with it Ray joins whatever cluster it finds on
this machine (the last one started here, by anyone), which would run the
user's population on a cluster they did not choose.  For the same reason a
run that names no cluster starts a Ray of its own (``address="local"``):
given no address, ``ray.init`` would join the last cluster ``ray start``
recorded on this machine.  Joining a cluster
starts no Ray process on this machine, so nothing but the connection is
undone at the end; the cluster belongs to whoever started it.

A Ray started here runs without its autoscaler monitor: one machine's Ray of
fixed size has nothing to scale, and the monitor held every ``ray.shutdown``
up for a second (stopped after the GCS, it answers SIGTERM by reporting to
the GCS that is gone, until Ray kills it after a second).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

from fedhh.errors import InputError

from .interrupts import restore_stop_handlers, stop_deferred, stop_handlers
from .processes import descendant_identities, stop_leftovers

LEFTOVER_GRACE = 2.0  # seconds a Ray process left after shutdown gets between SIGTERM and SIGKILL
ADDRESS_VARIABLE = "RAY_ADDRESS"
NICENESS_VARIABLE = "RAY_worker_niceness"  # Ray's config, read from the environment by its raylet
CONNECT_TIMEOUT = 5.0  # seconds to reach a named cluster's head before it is called unreachable
LOCAL = "local"  # ray.init's address for a new Ray of this process's own
DEFAULT_NUM_CPUS = 2  # this machine; each virtual SuperNode's ClientApp takes one

# Read by Ray when it is imported: set before any import of ray (simulations.run imports this module
# before it starts importing Flower, and Flower Ray, in a thread of its own).
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")


def named_cluster(address: str | None, field: str = f"{ADDRESS_VARIABLE} (or --ray-address)") -> str | None:
    """The cluster address the user named (``None``: none), refusing ``auto``, which names no cluster."""
    address = (address or "").strip()
    if not address:
        return None
    if address.lower() == "auto":
        raise InputError(
            f"{field}: 'auto' lets Ray join any cluster it finds on this machine, which may not be yours; "
            "name the cluster: its head's address host:port (as `ray start --head` prints it) or ray://host:10001"
        )
    _require_listening(address, field)
    return address


def _require_listening(address: str, field: str) -> None:
    """Refuse a ``host:port`` where nothing listens (a cluster stopped since): ``ray.init`` would
    otherwise wait for it for many minutes.  A ``ray://`` address is left to Ray Client."""
    host, separator, port = address.rpartition(":")
    if "://" in address or not separator or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as error:
        raise InputError(
            f"{field}: no Ray cluster answers at {address} ({error.strerror or error}); "
            "is it running? (`ray status --address` on its head tells)"
        ) from None


def run_init_args(num_cpus: int = DEFAULT_NUM_CPUS, verbose: bool = False, captured: bool = False) -> dict[str, Any]:
    """``ray.init`` arguments of a Flower run: ``num_cpus`` for a Ray of its own (a named cluster
    has its own CPUs); Ray's logs shown only when ``verbose``, and its workers' output (the
    ClientApps') passed to this process also when its output is ``captured`` into a run's log
    (``simulations.run_log``)."""
    on_cluster = bool(os.environ.get(ADDRESS_VARIABLE, "").strip())
    return {
        **({} if on_cluster else {"num_cpus": num_cpus}),
        "logging_level": "INFO" if verbose else "ERROR",
        "log_to_driver": verbose or captured,
        "configure_logging": verbose,
    }


@contextlib.contextmanager
def ray_runtime(**init_args: Any) -> Iterator[None]:
    """Ray initialised for the body; shut down afterwards, with every process it started, if started here."""
    # Opt in to Ray's future accelerator behaviour now (no GPUs here), which
    # silences its FutureWarning at start-up.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    import ray

    address = named_cluster(os.environ.get(ADDRESS_VARIABLE))
    handlers = stop_handlers()
    started_here = not ray.is_initialized()
    started: dict[int, int] = {}  # Ray's processes: PID -> start time
    before = descendant_identities(os.getpid())
    try:
        if started_here:
            try:
                with _worker_environment(address is None):
                    # "local": a Ray of our own; with no address Ray joins the last cluster `ray start` recorded
                    init_ray(address=address or LOCAL, include_dashboard=False, **init_args)
            finally:
                restore_stop_handlers(handlers)
                if address is None:
                    _stop_autoscaler_monitor()
                    started = _new_processes(before)
        yield
    finally:
        if started_here:
            with stop_deferred():
                if address is None:  # a Ray started here: its processes, and the workers its raylet started since
                    started.update(_new_processes(before))
                    started.update(descendant_identities(*started))
                ray.shutdown()  # also after an init cut short, which ray.is_initialized() does not report
                restore_stop_handlers(handlers)
                # A Ray stopped while starting up can orphan its agents: stop what is left, by PID.
                stop_leftovers(started, LEFTOVER_GRACE)


def init_ray(**init_args: Any) -> None:
    """``ray.init(**init_args)``, with its driver's connection never cut short by a stop signal (see the
    module's doc): a signal while the driver connects is raised as
    :class:`~simulations.interrupts.Interrupted` once it is connected, anywhere else at once.

    While ``ray.init`` runs, SIGTERM stays with the handler installed before, like SIGINT: ``ray.init``
    would install its own, which exits at once, also while the driver connects.
    """
    import ray
    from ray._private import utils, worker

    connect, set_sigterm_handler = worker.connect, utils.set_sigterm_handler

    def connect_whole(*args: Any, **kwargs: Any) -> Any:
        with stop_deferred():
            return connect(*args, **kwargs)

    worker.connect, utils.set_sigterm_handler = connect_whole, _keep_sigterm_handler
    try:
        ray.init(**init_args)
    finally:
        worker.connect, utils.set_sigterm_handler = connect, set_sigterm_handler


def _keep_sigterm_handler(handler: Callable[[int, Any], Any]) -> None:
    """In place of Ray's ``set_sigterm_handler`` while ``ray.init`` runs: the SIGTERM handler stays as it is."""


@contextlib.contextmanager
def _worker_environment(local: bool) -> Iterator[None]:
    """While a local Ray starts, the environment its processes inherit: ``PYTHONPATH`` is this
    process's import path, so its workers import fedhh's modules (and a test's) by name, and
    ``RAY_worker_niceness`` is 0 unless the user set it.

    A job-level ``runtime_env`` would pass the path too, but keeps the workers
    Ray starts ahead of time from serving the first actors, which then wait
    seconds for new ones.  Ray starts its workers at niceness 15 by default:
    next to busy processes of normal priority (a loaded machine) they get
    almost no CPU, so a run would starve rather than slow down; at 0 they
    share the CPU like the driver does.
    """
    if not local:
        yield
        return
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", NICENESS_VARIABLE)}
    os.environ["PYTHONPATH"] = os.pathsep.join([*sys.path, *filter(None, [saved["PYTHONPATH"]])])
    os.environ.setdefault(NICENESS_VARIABLE, "0")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _new_processes(before: dict[int, int]) -> dict[int, int]:
    """This process's descendants that were not there ``before`` (Ray's GCS, raylet, agents, workers)."""
    return {pid: tick for pid, tick in descendant_identities(os.getpid()).items() if before.get(pid) != tick}


def _stop_autoscaler_monitor() -> None:
    """Stop the autoscaler monitor of the Ray this process just started, by its PID (see the module's doc)."""
    from ray._private import ray_constants, worker

    node = getattr(worker, "_global_node", None)
    for info in getattr(node, "all_processes", {}).get(ray_constants.PROCESS_TYPE_MONITOR, []):
        info.process.kill()
        info.process.wait()
