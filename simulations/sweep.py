"""``fedhh sweep``: every trial of a sweep file, in parallel, resumable, into one folder of tables.

Trials run by chunks: the trials sharing one population are split into as
many chunks as their share of the sweep calls for (``ceil(workers x share)``),
so each population is built about once, by the worker that runs its chunk,
and every worker has work.  One function runs a chunk
(:func:`simulations.sweep_trial.run_chunk`); two executors carry it:

* worker processes on this machine (``concurrent.futures``), each chunk's
  records streamed back trial by trial through a queue;
* Ray tasks on an existing Ray cluster (``--ray-address`` or
  ``RAY_ADDRESS``), each chunk a streaming generator task.

With one worker the chunks run in this process.  The output folder is
claimed, and locked for the whole sweep, before any worker starts
(:mod:`simulations.sweep_store`).  Each finished trial is written
atomically as it arrives, so an interrupted sweep resumes where it
stopped, also one stopped because its folder could not be written (a full
disk); the tables are rebuilt at the end, also after Ctrl-C.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fedhh.errors import InputError

from .placement import Placement, whole_population_holders
from .ray_runtime import init_ray, named_cluster
from .sweep_spec import SweepSpec, Trial
from .sweep_store import FolderUnwritable, SweepFolder
from .sweep_trial import PopulationCache, TrialRecord, run_chunk, run_chunk_in

Chunk = list[Trial]


class WorkerLost(RuntimeError):
    """A worker process or Ray task died (not a trial's failure, which is recorded as data)."""


def default_workers() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def plan_chunks(trials: Sequence[Trial], workers: int) -> list[Chunk]:
    """Trials grouped by population, each group cut into ``ceil(workers x its share)`` chunks,
    largest populations first (they take longest to build and run)."""
    groups: dict[str, list[Trial]] = {}
    for trial in trials:
        groups.setdefault(trial.population_key, []).append(trial)
    chunks: list[Chunk] = []
    for group in groups.values():
        count = min(len(group), math.ceil(workers * len(group) / len(trials)))
        bounds = [round(i * len(group) / count) for i in range(count + 1)]
        chunks.extend(group[bounds[i] : bounds[i + 1]] for i in range(count))
    users = {id(chunk): int(chunk[0].config["population"]["users"]) for chunk in chunks}
    return sorted(chunks, key=lambda chunk: (len(chunk), users[id(chunk)]), reverse=True)


# -- executors --------------------------------------------------------------------------------


class InProcessTrials:
    """Chunks run one after the other in this process (``--workers 1``)."""

    name = "in-process"

    def __init__(self) -> None:
        self.workers = 1

    def records(self, chunks: Sequence[Chunk]) -> Iterator[TrialRecord]:
        cache = PopulationCache()
        for chunk in chunks:
            yield from run_chunk(chunk, cache)

    def place(self, trials: Sequence[Trial]) -> None:
        """Nothing to place: every trial runs on this machine."""

    def close(self) -> None:
        pass


_RESULTS: Any = None  # a worker process's queue back to the sweep
WATCH_INTERVAL = 0.5  # seconds between a worker's looks at its sweep (stopped, or gone)
_WORKER_CACHE = PopulationCache()


def _start_worker(results: Any, stop: Any, parent: int) -> None:
    """Worker set-up: the results queue, and a watchdog that ends the worker with its sweep
    (Ctrl-C, or the sweep process killed: a pool's workers would otherwise live on).

    ``stop`` is a shared flag the watchdog polls, not an event it waits on: setting a
    multiprocessing event waits for each of its waiters to wake, and a worker killed while
    waiting (SIGTERM to the sweep's process group) never does."""
    global _RESULTS
    _RESULTS = results
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep decides what Ctrl-C stops

    def watch() -> None:
        while not stop.value and os.getppid() == parent:
            time.sleep(WATCH_INTERVAL)
        os._exit(1)

    threading.Thread(target=watch, name="sweep-watchdog", daemon=True).start()


def _run_chunk_in_worker(chunk: Chunk) -> int:
    count = 0
    for record in run_chunk(chunk, _WORKER_CACHE):
        _RESULTS.put(record)
        count += 1
    return count


class ProcessTrials:
    """Chunks on a pool of worker processes; records come back one by one through a queue."""

    name = "processes"

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self.workers = workers
        self._results = context.SimpleQueue()
        self._stop = context.RawValue("b", 0)  # set: the workers end (_start_worker)
        self._pool = futures.ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(self._results, self._stop, os.getpid()),
        )

    def records(self, chunks: Sequence[Chunk]) -> Iterator[TrialRecord]:
        pending = {self._pool.submit(_run_chunk_in_worker, chunk) for chunk in chunks}
        expected = received = 0
        while pending or received < expected:
            while not self._results.empty():
                received += 1
                yield self._results.get()
            done, pending = futures.wait(pending, timeout=0.05, return_when=futures.FIRST_COMPLETED)
            for future in done:
                try:
                    expected += future.result()
                except futures.process.BrokenProcessPool as error:
                    raise WorkerLost(f"a worker process died ({error})") from None

    def place(self, trials: Sequence[Trial]) -> None:
        """Nothing to place: every trial runs on this machine."""

    def close(self) -> None:
        self._stop.value = 1
        self._pool.shutdown(wait=True, cancel_futures=True)


class RayTrials:
    """Chunks as Ray tasks (streaming generators), on the cluster at ``address`` or the one
    this process is already connected to."""

    name = "ray"

    def __init__(self, address: str | None) -> None:
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        import ray

        self._connected_here = not ray.is_initialized()
        if self._connected_here:
            try:
                init_ray(
                    address=address,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    logging_level=logging.ERROR,
                )
            except (ConnectionError, ValueError, RuntimeError) as error:
                raise InputError(f"--ray-address {address}: cannot connect to a Ray cluster ({error})") from None
        self._ray: Any = ray
        self.workers = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        self._task = ray.remote(num_cpus=1, num_returns="streaming")(run_chunk)
        self._task_in = ray.remote(num_cpus=1, num_returns="streaming")(run_chunk_in)
        self._pending: list[Any] = []
        self._placements: dict[str, Iterator[Placement]] = {}  # population.path -> where its chunks run, in turn

    def place(self, trials: Sequence[Trial]) -> None:
        """The nodes holding every stored shard of each population on disk the trials run from (see
        :mod:`simulations.placement`); refuses one that no node holds whole, before any trial runs."""
        for path, config in {
            trial.config.population.path: trial.config
            for trial in trials
            if trial.config["population"]["source"] == "dataset"
        }.items():
            holders = whole_population_holders(config)
            if holders is not None:
                self._placements[path] = itertools.cycle(holders)  # the chunks of a population in turn

    def _submit(self, chunk: Chunk) -> Any:
        holders = self._placements.get(chunk[0].config.population.path)
        if holders is None:
            return self._task.remote(chunk)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        place = next(holders)
        return self._task_in.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(place.node_id, soft=False)
        ).remote(chunk, place.folder)

    def records(self, chunks: Sequence[Chunk]) -> Iterator[TrialRecord]:
        from ray.exceptions import RayError

        self._pending = pending = [self._submit(chunk) for chunk in chunks]
        while pending:
            ready, _ = self._ray.wait(pending, num_returns=1)
            for generator in ready:
                try:
                    reference = next(generator)
                    record = self._ray.get(reference)
                except StopIteration:
                    pending.remove(generator)
                    continue
                except RayError as error:
                    raise WorkerLost(f"a Ray task failed ({type(error).__name__}: {error})") from None
                yield record

    def close(self) -> None:
        """Cancel what is still running and disconnect if this sweep connected; the cluster
        itself belongs to whoever started it."""
        for generator in self._pending:
            self._ray.cancel(generator, force=True)
        self._pending = []
        if self._connected_here:
            self._ray.shutdown()


def make_executor(workers: int, ray_address: str | None) -> InProcessTrials | ProcessTrials | RayTrials:
    ray_address = named_cluster(ray_address, "--ray-address (or RAY_ADDRESS)")
    if ray_address:
        return RayTrials(ray_address)
    if workers <= 1:
        return InProcessTrials()
    return ProcessTrials(workers)


# -- the sweep --------------------------------------------------------------------------------


@dataclass
class SweepOutcome:
    """What one invocation of a sweep did."""

    folder: Path
    total: int
    skipped: int
    computed: int
    failed: int
    not_run: int
    status: str
    seconds: float
    rows: int | None  # None: the tables could not be rebuilt (the folder cannot be written)
    failed_total: int = 0  # failed trials in the tables, this run's and earlier runs' not retried
    errors: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # message -> trials


class SweepProgress:
    """A bar over the trials to run, with failures and ETA, on stderr (a no-op when disabled)."""

    def __init__(self, total: int, skipped: int, enabled: bool) -> None:
        self._progress: Progress | None = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]sweep[/] trials"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("[red]{task.fields[failures]} failed[/]"),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
            )
            note = f"({skipped} done before)" if skipped else ""
            self._task = self._progress.add_task(note, total=total, failures=0)

    def __enter__(self) -> SweepProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def advance(self, failures: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, failures=failures)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()


def run_sweep(
    spec: SweepSpec,
    output: str | Path,
    workers: int | None = None,
    ray_address: str | None = None,
    csv: bool = False,
    show_progress: bool = True,
    retry_failed: bool = False,
) -> SweepOutcome:
    """Run the trials of ``spec`` not yet in ``output`` and rebuild its tables.

    The folder is claimed first, and held for the whole sweep: a folder
    fedhh must not write, or one another sweep is writing, is refused
    (:class:`fedhh.results.OutputError`) before any worker starts.  A
    folder that cannot be written any more (a full disk) stops the sweep
    with what it wrote kept, to resume from (the outcome's ``status``).
    """
    started = time.perf_counter()
    trials = spec.expand()
    with SweepFolder.claim(output, spec) as folder:
        executor = make_executor(
            workers or default_workers(), ray_address
        )  # a cluster that cannot be reached writes nothing
        try:
            executor.place(trials)  # nor does a population on disk that no node of the cluster holds
        except BaseException:
            executor.close()
            raise
        finished = folder.finished()
        todo = [t for t in trials if t.key not in finished or (retry_failed and finished[t.key])]
        computed = failed = 0
        rows: int | None = None
        status = "interrupted"
        run: dict[str, Any] | None = None
        try:
            run = folder.start_run(executor.name, executor.workers, len(todo), len(trials) - len(todo))
            with SweepProgress(len(todo), len(trials) - len(todo), show_progress) as progress:
                for record in executor.records(plan_chunks(todo, executor.workers) if todo else []):
                    folder.write_record(record)
                    computed += 1
                    failed += record.failed
                    progress.advance(failed)
            status = "complete"
        except (WorkerLost, FolderUnwritable) as error:
            status = f"stopped: {error}"
        finally:
            executor.close()
            try:
                rows = folder.write_tables(trials, csv)
                if run is not None:
                    folder.end_run(run, status, computed, failed, rows)
            except FolderUnwritable as error:
                status = status if status.startswith("stopped") else f"stopped: {error}"
        errors = folder.errors(trials)
    return SweepOutcome(
        folder.path,
        len(trials),
        len(trials) - len(todo),
        computed,
        failed,
        len(todo) - computed,
        status,
        time.perf_counter() - started,
        rows,
        sum(errors.values()),
        errors,
    )
