"""``fedhh population build``: write a configured population to disk, streamed and in parallel.

The config's ``[population]`` (wordfreq, Zipf, exponential, or a user's own
file of (user, item) rows, with each user's most frequent item alone when
``population.per_user = "mode"``) is cut into stored shards of consecutive users; worker
processes each build a shard from the config, write it into the output's
staging folder and return only its true counts, so no process ever holds
more than one stored shard of users.  The parent adds the counts up,
writes the vocabulary with them and the manifest, and commits the folder
(:class:`fedhh.results.ResultsFolder`: complete or absent, never over
anything fedhh did not write).  The format is :mod:`fedhh.data.store`.

Sampled sources draw each user from (seed, user id), so the stored
population is exactly the one a run of the same config generates in
memory.  A user's CSV or Parquet file is read a record batch at a time and
spilled into the staging folder by user (:mod:`fedhh.data.streamed_table`),
then written a shard at a time from the parent process; a text file is
read whole.
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fedhh import __version__
from fedhh.config import FedhhConfig, config_from_flat
from fedhh.data.per_user import keep_per_user
from fedhh.data.population import PopulationCounts, PopulationSource, check_shard_count, shard_bounds
from fedhh.data.sources import make_source
from fedhh.data.store import (
    FORMAT,
    MANIFEST,
    VERSION,
    VOCABULARY_FILE,
    codec_settings,
    shard_file_name,
    write_shard,
    write_vocabulary,
)
from fedhh.data.streamed_table import STREAMED_SUFFIXES, StreamedTableSource
from fedhh.errors import InputError
from fedhh.experiment import item_codec
from fedhh.results import ResultsFolder

DEFAULT_SHARD_USERS = 1 << 22  # users per stored shard by default: about 16 MiB of one-item users in memory
DEFAULT_SHARD_ROWS = 1 << 22  # a file's rows per stored shard by default: its (user, item) pairs, 64 MiB
BUILDABLE = ("wordfreq", "zipf", "exponential", "file")


def default_workers() -> int:
    return max(len(os.sched_getaffinity(0)), 1)


def stored_shard_count(n_users: int, requested: int | None, rows: int = 0) -> int:
    """``--shards``, or by default one per :data:`DEFAULT_SHARD_USERS` users and, for a file, at least
    one per :data:`DEFAULT_SHARD_ROWS` rows (a shard's rows are held at once while it is written)."""
    if requested is None:
        return min(max(math.ceil(n_users / DEFAULT_SHARD_USERS), math.ceil(rows / DEFAULT_SHARD_ROWS), 1), n_users)
    if requested < 1:
        raise InputError(f"--shards: must be >= 1, got {requested}")
    try:
        return check_shard_count(n_users, requested)
    except InputError:
        raise InputError(
            f"--shards: {requested:,} shards for {n_users:,} users would leave shards without users; "
            f"use at most {n_users:,}"
        ) from None


@functools.lru_cache(maxsize=1)
def _source(flat_config: tuple[tuple[str, Any], ...]) -> PopulationSource:
    """A worker's population source, made once per worker process."""
    config = config_from_flat(dict(flat_config))
    return make_source(config["population"], item_codec(config), int(config["run"]["seed"]))


def _build_shard(
    flat_config: tuple[tuple[str, Any], ...], index: int, num_shards: int, staging: str
) -> PopulationCounts:
    """Build stored shard ``index`` into ``staging``; return its true counts (all that goes back)."""
    source = _source(flat_config)
    shard = source.build_shard(index, num_shards)
    write_shard(Path(staging) / shard_file_name(index), shard)
    return shard.counts()


def _built_shards(
    source: PopulationSource,
    flat: tuple[tuple[str, Any], ...],
    num_shards: int,
    workers: int,
    staging: Path,
    in_process: bool,
) -> Iterator[PopulationCounts]:
    """Build every stored shard into ``staging``; yield each one's counts as it is done."""
    if in_process:
        for index in range(num_shards):
            shard = source.build_shard(index, num_shards)
            write_shard(staging / shard_file_name(index), shard)
            yield shard.counts()
        return
    context = multiprocessing.get_context("spawn")  # no fork of a process that may run threads
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [pool.submit(_build_shard, flat, i, num_shards, str(staging)) for i in range(num_shards)]
        for future in concurrent.futures.as_completed(futures):
            yield future.result()


def build_population(
    config: FedhhConfig,
    output: ResultsFolder,
    shards: int | None = None,
    workers: int | None = None,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Build ``config``'s population into the claimed ``output``; returns the manifest written."""
    population = config["population"]
    if population["source"] not in BUILDABLE:
        raise InputError(
            f"population.source: {population['source']!r} cannot be built; allowed: {list(BUILDABLE)} "
            "(a dataset is built already: run from it)"
        )
    if workers is not None and workers < 1:
        raise InputError(f"--workers: must be >= 1, got {workers}")
    started = time.perf_counter()
    codec = item_codec(config)
    staging = output.staging_path
    streamed: StreamedTableSource | None = None
    path = config.population.path
    if population["source"] == "file" and Path(path).suffix.lower() in STREAMED_SUFFIXES:
        streamed = StreamedTableSource(path, codec, staging)  # one pass, spilled
        source: PopulationSource = keep_per_user(streamed, config.population.per_user, config.run.seed)
    else:
        source = make_source(population, codec, int(config["run"]["seed"]))  # the vocabulary; checks the config
    num_shards = stored_shard_count(source.n_users, shards, streamed.rows if streamed is not None else 0)
    workers = min(workers or default_workers(), num_shards)
    flat = tuple(sorted(config.to_flat().items()))
    from .progress import task_progress

    in_process = workers == 1 or population["source"] == "file"  # a file is parsed here already: no copy per worker
    total: PopulationCounts | None = None
    with task_progress("building shards", num_shards, enabled=show_progress) as advance:
        for part in _built_shards(source, flat, num_shards, workers, staging, in_process):
            total = part if total is None else total + part  # integer counts: the order does not matter
            advance()
    assert total is not None  # at least one shard
    if streamed is not None:
        streamed.discard_spill()
    counts = total
    write_vocabulary(staging / VOCABULARY_FILE, source.vocabulary, counts)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "users": source.n_users,
        "users_without_items": counts.users_without_items,
        "vocabulary": {"file": VOCABULARY_FILE, "items": source.vocabulary.size},
        "codec": codec_settings(codec),
        "shards": [
            {"file": shard_file_name(i), "first_user": start, "users": stop - start}
            for i, (start, stop) in enumerate(shard_bounds(source.n_users, i, num_shards) for i in range(num_shards))
        ],
        "population": source.describe(),
        "built_from": config.to_dict(),
        "build": {"seconds": time.perf_counter() - started, "workers": workers, "fedhh": __version__},
    }
    output.commit(manifest, document_name=MANIFEST)
    return manifest
