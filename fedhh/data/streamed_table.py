"""A user's own CSV or Parquet file of (user, item) rows, read a record batch at a time.

``fedhh population build`` turns such a file into stored shards without
holding it: one pass reads the file in record batches (pyarrow's streaming
CSV reader, Parquet batches), checks each row, numbers users and items by
first appearance (as :class:`fedhh.data.sources.FileSource` does) and spills the
rows as (user, item) pairs of integers, :data:`RUN_ROWS` at a time, each
run sorted by user into a pair of files.  A shard then takes, from every
run, the slice holding its users (a binary search in the memory-mapped
run).  Memory is one run being sorted, the item vocabulary, the index of
distinct users (one entry a user, not a row) and one shard's pairs,
whatever the number of rows; the shards and the vocabulary written are
byte for byte those of the whole-file reading.

Refusals are :class:`FileSource`'s, at the same place: a row without a user
at its first occurrence; else an empty or non-text item at its first
occurrence; else an item the codec refuses at its first occurrence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .items import ItemCodec, ItemError
from .population import PopulationSource, Shard, Vocabulary
from .sources import (
    _first_row,
    _is_text,
    check_text,
    check_users_present,
    csv_line,
    occurrence_place,
)
from .table_errors import CSV_BLOCK_BYTES, check_columns, unreadable

RUN_ROWS = 1 << 21  # rows spilled as one sorted run: 32 MiB of pairs
BATCH_ROWS = 1 << 16  # Parquet rows per record batch
SPILL_PREFIX = ".spill-"  # spill files, removed by :meth:`StreamedTableSource.discard_spill`
STREAMED_SUFFIXES = (".csv", ".parquet", ".pq")
COLUMNS = ["user", "item"]


def record_batches(file: Path, path: str) -> Iterator[Any]:
    """The ``user`` and ``item`` columns of a CSV or Parquet file, a record batch at a time
    (CSV cells as text: ``007`` stays ``007``), each checked as :func:`fedhh.data.sources.check_text`
    checks the whole file's."""
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.parquet

    rows = 0
    try:
        if file.suffix.lower() == ".csv":
            with pyarrow.csv.open_csv(file) as header:  # the column names, from the first block
                check_columns(path, header.schema.names, f"the header (line {csv_line(file, -1)})")
            reader = pyarrow.csv.open_csv(
                file,
                read_options=pyarrow.csv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                convert_options=pyarrow.csv.ConvertOptions(
                    column_types={"user": pa.string(), "item": pa.string()}, include_columns=COLUMNS
                ),
            )
        else:
            parquet = pyarrow.parquet.ParquetFile(file)
            check_columns(path, parquet.schema_arrow.names, "the schema")
            reader = parquet.iter_batches(batch_size=BATCH_ROWS, columns=COLUMNS, use_threads=False)
        for batch in reader:
            check_text(file, path, batch.column("user"), batch.column("item"), rows)
            yield batch
            rows += len(batch)
    except InputError:
        raise
    except Exception as error:  # pyarrow raises many types for malformed files
        raise unreadable(file, path, error) from None


class StreamedTableSource(PopulationSource):
    """The population of a CSV or Parquet file of (user, item) rows, spilled into ``spill_folder``."""

    def __init__(self, path: str, codec: ItemCodec, spill_folder: Path) -> None:
        import pyarrow.compute as pc

        self.path = path
        self._spill = spill_folder
        self._runs: list[tuple[Path, Path]] = []  # (users, items) files, each sorted by user
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # pairs not spilled yet
        users: dict[str, int] = {}
        items: dict[str, int] = {}
        first_row_of_item: list[int] = []
        bad_item: int | None = None
        rows = 0
        file = Path(path)
        if not file.is_file():
            raise InputError(f"population.path: {path!r} is not a file")
        for batch in record_batches(file, path):
            user, item = batch.column("user"), batch.column("item")
            check_users_present(self.path, user, rows)
            if bad_item is None:  # reported only if no row further on lacks its user
                found = (
                    _first_row(pc.is_null(item), pc.equal(item, "")) if _is_text(item) else (0 if len(item) else None)
                )
                bad_item = None if found is None else rows + found
            if bad_item is None:
                user_codes = _codes(user, users)
                item_codes, new_firsts = _codes_with_first_rows(item, items)
                first_row_of_item.extend((rows + new_firsts).tolist())
                self._spill_pairs(user_codes, item_codes)
            rows += len(batch)
        self._spill_pairs(None, None)
        if bad_item is not None:
            raise ItemError(
                f"population.path {path!r}: {occurrence_place(path, bad_item)} has an empty or non-text item"
            )
        if not items:
            raise InputError(f"population.path {path!r} has no items")
        self.n_users = len(users)
        self.rows = rows
        del users
        try:
            self.vocabulary, self._candidate_item = Vocabulary.encode(list(items), codec)
        except ItemError as error:
            if error.position is None:
                raise ItemError(f"population.path {path!r}: {error}") from None
            place = occurrence_place(path, first_row_of_item[error.position])
            raise ItemError(f"population.path {path!r}: {place}: {error.reason}") from None

    def _spill_pairs(self, user_codes: np.ndarray | None, item_codes: np.ndarray | None) -> None:
        """Keep a batch's pairs; write those kept as a run, sorted by user, once there are
        :data:`RUN_ROWS` of them or the file has ended (``None``)."""
        if user_codes is not None and item_codes is not None:
            self._pending.append((user_codes, item_codes))
        if not self._pending or (user_codes is not None and sum(u.size for u, _ in self._pending) < RUN_ROWS):
            return
        users = np.concatenate([u for u, _ in self._pending])
        items = np.concatenate([i for _, i in self._pending])
        self._pending.clear()
        order = np.argsort(users, kind="stable")
        run = tuple(self._spill / f"{SPILL_PREFIX}{len(self._runs):05d}-{column}.bin" for column in ("user", "item"))
        users[order].tofile(run[0])
        items[order].tofile(run[1])
        self._runs.append(run)  # type: ignore[arg-type]

    def build_users(self, start: int, stop: int) -> Shard:
        """Users ``[start, stop)`` from every run's slice of them: what ``FileSource`` slices from the whole."""
        users, items = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for users_file, items_file in self._runs:
            run_users = np.memmap(users_file, dtype=np.int64, mode="r")
            lo, hi = np.searchsorted(run_users, [start, stop])
            users.append(np.array(run_users[lo:hi]))
            items.append(np.array(np.memmap(items_file, dtype=np.int64, mode="r")[lo:hi]))
        return Shard.from_pairs(
            self.vocabulary,
            start,
            stop - start,
            np.concatenate(users) - start,
            self._candidate_item[np.concatenate(items)],
        )

    def discard_spill(self) -> None:
        """Remove the spill files (before the build's folder is committed)."""
        for run in self._runs:
            for file in run:
                file.unlink(missing_ok=True)
        self._runs.clear()

    def describe(self) -> dict[str, Any]:
        return {"source": "file", "path": self.path, "users": self.n_users}

    def describe_data(self) -> dict[str, Any]:
        return {"vocabulary": self.vocabulary.size, "encoding": self.vocabulary.encoding.to_dict()}


def _number(column: Any, known: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Number the batch's distinct values in ``known`` (by their text, as ``FileSource`` does),
    new ones on from ``len(known)`` in order of first appearance.  Returns each distinct value's
    code and each row's distinct value (pyarrow's dictionary follows first appearance)."""
    encoded = column.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    if not _is_text(column):
        distinct = [str(value) for value in distinct]
    codes = np.fromiter(
        (known.setdefault(value, len(known)) for value in distinct), dtype=np.int64, count=len(distinct)
    )
    return codes, encoded.indices.to_numpy(zero_copy_only=False)


def _codes(column: Any, known: dict[str, int]) -> np.ndarray:
    """Each row's code in ``known`` (:func:`_number`)."""
    codes, rows = _number(column, known)
    return codes[rows]


def _codes_with_first_rows(column: Any, known: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_codes`, and the batch rows where the values new to ``known`` first appear, by code."""
    before = len(known)
    codes, rows = _number(column, known)
    first_of_distinct = np.unique(rows, return_index=True)[1]
    return codes[rows], first_of_distinct[codes >= before]
