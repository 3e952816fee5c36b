"""Populations on disk: a folder of Parquet shards with a manifest, and the source that runs from it.

``fedhh population build`` (:mod:`simulations.population_build`) writes a
population once; ``population.source = "dataset"`` with
``population.path = DIR`` runs from it any number of times, under any
driver, without generating or holding the whole population.

The folder (a fedhh output folder: :mod:`fedhh.results`' marker lists its
files, so nothing fedhh did not write is ever read as, or replaced by, a
population) holds:

* ``population.json``, the manifest: the format and its version, the
  number of users, the item codec the vocabulary was encoded with, each
  shard's file and user range, the users without items, the config the
  population was built from and what that config describes;
* ``vocabulary.parquet``: one row per item id, with the item's text and its
  true counts (``holders``, ``weight_units``: see
  :class:`fedhh.data.population.PopulationCounts`) and ``true_frequency``
  (share of users), for evaluation: the truth of a run from disk is read
  here, never recounted;
* ``shard-NNNNN.parquet``: the users ``[first_user, first_user + users)``,
  one row per user in user order, in row groups of at most
  :data:`ROW_GROUP_USERS` users.  A shard whose users hold at most one item
  each has one column ``item`` (int32 item id, ``-1`` for none); otherwise
  two list columns ``items`` (int32) and ``counts`` (int64, local counts).

A source reads only the manifest and the vocabulary when it opens; the
users of a range are read when asked for, from the row groups that hold
them (through a memory map), so a process holds the shards it uses and no
more.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..resources import require_dataset_memory
from ..results import marked_files
from .items import ItemCodec, ItemError
from .population import PopulationCounts, PopulationSource, Shard, SingleItemShard, Vocabulary

FORMAT = "fedhh-population"
VERSION = 1
MANIFEST = "population.json"
VOCABULARY_FILE = "vocabulary.parquet"
ROW_GROUP_USERS = 1 << 20  # users per Parquet row group: the unit a partial read decodes
ONE_ITEM_COLUMNS = ["item"]
ITEMS_COLUMNS = ["items", "counts"]
FIELD = "population.path"


def shard_file_name(index: int) -> str:
    return f"shard-{index:05d}.parquet"


def codec_settings(codec: ItemCodec) -> dict[str, Any]:
    """The codec's public settings, as the manifest records them."""
    return {
        "alphabet": codec.alphabet.name,
        "unit_size": codec.unit_size,
        "max_length": codec.max_length,
        "overlong": codec.overlong,
        "unknown_chars": codec.unknown_chars,
    }


def arrow_integers(column: Any) -> np.ndarray:
    """The values of a pyarrow integer array or chunked array without nulls, read from its data
    buffers (one chunk: no copy).

    What ``to_numpy`` gives, without its import of pandas: where pandas is installed, pyarrow's
    ``to_numpy`` (and building an array from numpy) imports it on first use, about 100 MB of
    address space, in a run that may be close to its memory limit with its largest shard loaded.
    """
    import pyarrow as pa

    if not pa.types.is_integer(column.type) or column.null_count:
        raise InputError(
            f"{FIELD}: a stored column holds {column.type} values or nulls, not integers; build the population again"
        )
    dtype = np.dtype(f"{'int' if pa.types.is_signed_integer(column.type) else 'uint'}{column.type.bit_width}")
    parts = [
        np.frombuffer(chunk.buffers()[1], dtype=dtype, count=chunk.offset + len(chunk))[chunk.offset :]
        for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column])
        if len(chunk)
    ]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


# -- writing --------------------------------------------------------------------------------


def write_shard(path: Path, shard: Shard) -> None:
    """Write one shard's users as a Parquet file (see the module docstring for the columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if shard.one_item_per_user:
        table = pa.table({"item": pa.array(shard.item_of_user.astype(np.int32, copy=False))})
    else:
        offsets = pa.array(shard.item_offsets.astype(np.int64, copy=False))
        table = pa.table(
            {
                "items": pa.LargeListArray.from_arrays(offsets, pa.array(shard.item_ids.astype(np.int32))),
                "counts": pa.LargeListArray.from_arrays(
                    offsets, pa.array(np.asarray(shard.item_counts, dtype=np.int64))
                ),
            }
        )
    pq.write_table(table, path, row_group_size=ROW_GROUP_USERS, compression="zstd")


def write_vocabulary(path: Path, vocabulary: Vocabulary, counts: PopulationCounts) -> None:
    """The vocabulary's items with their true counts, one row per item id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "item": pa.array(vocabulary.items, type=pa.string()),
                "holders": pa.array(counts.holders),
                "weight_units": pa.array(counts.weight_units),
                "true_frequency": pa.array(counts.frequency / max(counts.users, 1)),
            }
        ),
        path,
        compression="zstd",
    )


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredShard:
    file: Path
    first_user: int
    users: int

    @property
    def stop_user(self) -> int:
        return self.first_user + self.users


class PopulationStore:
    """A population folder written by ``fedhh population build``, opened and checked.

    Every refusal is an :class:`InputError` naming ``population.path`` and
    what is wrong (exit status 2 on the command line).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        folder = repr(str(path))
        if not self.path.is_dir():
            raise InputError(
                f"{FIELD}: {folder} is not a folder; a dataset population is a folder written by "
                "`fedhh population build CONFIG --output DIR`"
            )
        listed = marked_files(self.path)
        if listed is None or MANIFEST not in listed:
            what = "a fedhh results folder, not a population" if listed is not None else "not written by fedhh"
            raise InputError(
                f"{FIELD}: {folder} is {what}; a dataset population is a folder written by "
                "`fedhh population build CONFIG --output DIR`"
            )
        try:
            manifest = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"{FIELD}: {folder}: cannot read {MANIFEST} ({error})") from None
        except ValueError as error:
            raise InputError(
                f"{FIELD}: {folder}: {MANIFEST} is not valid JSON ({error}); build the population again"
            ) from None
        self.manifest = self._checked(manifest, listed, folder)
        self.n_users = int(self.manifest["users"])
        self.shards = [
            StoredShard(self.path / entry["file"], int(entry["first_user"]), int(entry["users"]))
            for entry in self.manifest["shards"]
        ]
        self._starts = np.array([shard.first_user for shard in self.shards], dtype=np.int64)

    def _checked(self, manifest: Any, listed: list[str], folder: str) -> dict[str, Any]:
        """The manifest, if it is one this version reads and its shards cover ``0..users-1`` exactly."""

        def broken(problem: str) -> InputError:
            return InputError(f"{FIELD}: {folder}: {MANIFEST} {problem}; build the population again")

        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise broken(f"is not a fedhh population manifest (format must be {FORMAT!r})")
        if manifest.get("version") != VERSION:
            raise broken(f"has format version {manifest.get('version')!r}; this fedhh reads version {VERSION}")
        try:
            users = manifest["users"]
            shards = manifest["shards"]
            expected = 0
            for entry in shards:
                if entry["first_user"] != expected or not isinstance(entry["users"], int) or entry["users"] < 1:
                    raise broken(
                        f"lists shard {entry.get('file')!r} at users {entry['first_user']}.., expected {expected}.."
                    )
                if entry["file"] not in listed:
                    raise broken(f"lists shard {entry['file']!r}, which is not in the folder")
                expected += entry["users"]
            if not isinstance(users, int) or users < 1 or expected != users:
                raise broken(f"says {users!r} users, its shards hold {expected}")
            if VOCABULARY_FILE not in listed or not isinstance(manifest["users_without_items"], int):
                raise broken(f"has no {VOCABULARY_FILE}")
            codec = manifest["codec"]
            if not isinstance(codec, dict):
                raise broken("has no codec")
        except (KeyError, TypeError) as error:
            raise broken(f"is missing or has a malformed field ({error})") from None
        return manifest

    @functools.cached_property
    def vocabulary_table(self) -> Any:
        table = self._read(self.path / VOCABULARY_FILE, None)
        missing = {"item", "holders", "weight_units"} - set(table.column_names)
        if missing:
            raise InputError(
                f"{FIELD}: {str(self.path)!r}: {VOCABULARY_FILE} lacks column(s) {sorted(missing)}; "
                "build the population again"
            )
        return table

    def counts(self) -> PopulationCounts:
        """The true counts recorded when the population was built."""
        table = self.vocabulary_table
        return PopulationCounts(
            self.n_users,
            arrow_integers(table.column("weight_units")).astype(np.int64),
            arrow_integers(table.column("holders")).astype(np.int64),
            int(self.manifest["users_without_items"]),
        )

    def _read(self, file: Path, row_groups: list[int] | None, columns: list[str] | None = None) -> Any:
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(file, memory_map=True)
            if row_groups is None:
                return parquet.read(columns=columns, use_threads=False)
            return parquet.read_row_groups(row_groups, columns=columns, use_threads=False)
        except FileNotFoundError:
            raise InputError(
                f"{FIELD}: {str(self.path)!r}: {file.name} is missing; build the population again"
            ) from None
        except MemoryError:  # the machine's problem, not the file's
            raise
        except Exception as error:  # pyarrow raises many types for damaged files
            raise InputError(
                f"{FIELD}: {str(self.path)!r}: {file.name} cannot be read ({error}); build the population again"
            ) from None

    def read_users(self, start: int, stop: int) -> list[tuple[int, Any]]:
        """The users ``[start, stop)`` as (first user, Arrow table of one row per user) pieces, one per
        stored shard they span, each read from the row groups that hold it."""
        pieces = []
        first = max(int(np.searchsorted(self._starts, start, side="right")) - 1, 0)
        for stored in self.shards[first:]:
            if stored.first_user >= stop:
                break
            lo, hi = max(start, stored.first_user) - stored.first_user, min(stop, stored.stop_user) - stored.first_user
            groups = list(range(lo // ROW_GROUP_USERS, math.ceil(hi / ROW_GROUP_USERS)))
            table = self._read(stored.file, groups)
            offset = groups[0] * ROW_GROUP_USERS
            expected = min(stored.users, (groups[-1] + 1) * ROW_GROUP_USERS) - offset
            if table.num_rows != expected or not (
                table.column_names == ONE_ITEM_COLUMNS or table.column_names == ITEMS_COLUMNS
            ):
                raise InputError(
                    f"{FIELD}: {str(self.path)!r}: {stored.file.name} does not hold the users its "
                    "manifest lists; build the population again"
                )
            pieces.append((stored.first_user + lo, table.slice(lo - offset, hi - lo)))
        return pieces


class DatasetSource(PopulationSource):
    """A population read from a folder written by ``fedhh population build``.

    The stored vocabulary is encoded with the run's codec; when that codec
    keeps every stored item as it is (the usual case: the codec the
    population was built with), item ids are the stored ones and the truth
    is the manifest's.  A different codec may drop or merge items: ids are
    mapped, and the truth is recounted from the shards.
    """

    def __init__(self, path: str, codec: ItemCodec) -> None:
        self.store = PopulationStore(path)
        self.n_users = self.store.n_users
        stored_items = self.store.vocabulary_table.column("item").to_pylist()
        try:
            self.vocabulary, self._run_item = Vocabulary.encode(stored_items, codec)
        except ItemError as error:
            raise ItemError(f"{FIELD} {path!r}: {error}") from None
        self._same_ids = bool(np.array_equal(self._run_item, np.arange(len(stored_items))))
        self._run_item_with_none = np.append(self._run_item, -1).astype(np.int32)  # stored -1 maps to -1

    def require_memory(self, items_per_user: int) -> None:
        """Only the largest stored shard must fit: the population is never loaded whole."""
        require_dataset_memory(max(stored.users for stored in self.store.shards))

    def build_users(self, start: int, stop: int) -> Shard:
        pieces = self.store.read_users(start, stop)
        if all(table.column_names == ONE_ITEM_COLUMNS for _, table in pieces):
            items = np.concatenate([arrow_integers(table.column("item")) for _, table in pieces])
            if not self._same_ids:
                items = self._run_item_with_none[items]
            return SingleItemShard(self.vocabulary, start, items)
        return self._items_shard(start, stop, pieces)

    def _items_shard(self, start: int, stop: int, pieces: list[tuple[int, Any]]) -> Shard:
        """Users with several items (or a mix of layouts): the CSR form, straight from the columns."""
        lengths, ids, counts = [], [], []
        for _, table in pieces:
            if table.column_names == ONE_ITEM_COLUMNS:
                held = arrow_integers(table.column("item"))
                lengths.append((held >= 0).astype(np.int64))
                ids.append(held[held >= 0])
                counts.append(np.ones(ids[-1].size, dtype=np.int64))
                continue
            lists = table.column("items").combine_chunks()
            offsets = arrow_integers(lists.offsets)
            lengths.append(np.diff(offsets))
            ids.append(arrow_integers(lists.values)[offsets[0] : offsets[-1]])
            counts.append(arrow_integers(table.column("counts").combine_chunks().values)[offsets[0] : offsets[-1]])
        per_user, item_ids, item_counts = np.concatenate(lengths), np.concatenate(ids), np.concatenate(counts)
        if not self._same_ids:  # the run's codec dropped some stored items: their entries go
            item_ids = self._run_item[item_ids]
            kept = item_ids >= 0
            owner = np.repeat(np.arange(per_user.size), per_user)
            per_user = np.bincount(owner[kept], minlength=per_user.size)
            item_ids, item_counts = item_ids[kept], item_counts[kept]
        offsets = np.concatenate(([0], np.cumsum(per_user, dtype=np.int64)))
        return Shard(self.vocabulary, start, offsets, item_ids.astype(np.int64), item_counts.astype(np.int64))

    def population_counts(self) -> PopulationCounts:
        return self.store.counts() if self._same_ids else super().population_counts()

    def describe(self) -> dict[str, Any]:
        return {
            "source": "dataset",
            "path": str(self.store.path),
            "users": self.n_users,
            "shards": len(self.store.shards),
            "built_from": self.store.manifest.get("population", {}),
        }

    def describe_data(self) -> dict[str, Any]:
        return {"vocabulary": self.vocabulary.size, "encoding": self.vocabulary.encoding.to_dict()}


@functools.lru_cache(maxsize=2)
def cached_dataset_source(path: str, manifest_modified_ns: int, codec: ItemCodec) -> DatasetSource:
    """One opening per process and population version (a process's shards share its vocabulary)."""
    return DatasetSource(path, codec)
