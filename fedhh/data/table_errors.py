"""Why a user's CSV or Parquet population file is refused, said in the file's own lines and columns.

pyarrow reads these files (:mod:`fedhh.data.sources`, :mod:`fedhh.data.streamed_table`)
and its refusals name no place in the file: a row with a field too many is
"CSV parse error: Expected 2 columns, got 3", a byte that is not UTF-8 is
"invalid UTF8 data" somewhere in a column, a row longer than a parsing
block is "straddling object straddles two block boundaries".  When pyarrow
refuses a CSV file, a Python pass over its lines (run only then, to explain
the refusal) finds the first line that breaks a rule and says where; a
Parquet file's text columns are checked for UTF-8 before their values are
read, naming the row.  The columns themselves are checked first, in both
formats: ``user`` and ``item`` present, each once.

A CSV row is one line: fedhh reads with pyarrow's default
``newlines_in_values = False``, so a quoted field is closed on its own line.
"""

from __future__ import annotations

import csv
import itertools
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import InputError

COLUMNS = ("user", "item")
CSV_BLOCK_BYTES = 1 << 20  # bytes pyarrow parses at a time: every CSV row must fit in one block
UTF8_BOM = b"\xef\xbb\xbf"


def check_columns(path: str, names: list[str], header: str) -> None:
    """Refuse a file without a ``user`` or an ``item`` column, or with either of them twice
    (which of two ``item`` columns holds the items?); ``header`` says where the names are
    (``"the header (line 1)"``, ``"the schema"``)."""
    missing = sorted(set(COLUMNS) - set(names))
    if missing:
        raise InputError(
            f"population.path {path!r}: missing column(s) {missing}; needs columns 'user' and 'item', has {names}"
        )
    repeated = {name: count for name, count in Counter(names).items() if name in COLUMNS and count > 1}
    for name in repeated:
        positions = [str(index + 1) for index, other in enumerate(names) if other == name]
        raise InputError(
            f"population.path {path!r}: {header} has column {name!r} {repeated[name]} times "
            f"(columns {', '.join(positions)}); 'user' and 'item' must each appear once"
        )


def unreadable(file: Path, path: str, error: Exception) -> InputError:
    """The refusal of a file pyarrow could not read: for a CSV file, the line and column of the
    first problem :func:`csv_problem` finds; otherwise (or if it finds none) pyarrow's message."""
    if file.suffix.lower() == ".csv":
        try:
            place = csv_problem(file)
        except OSError:
            place = None
        if place is not None:
            return InputError(f"population.path {path!r}: {place}")
    return InputError(f"population.path {path!r}: cannot read ({error})")


def csv_problem(file: Path) -> str | None:
    """The first line of a CSV file that pyarrow cannot read, and why: a row longer than
    :data:`CSV_BLOCK_BYTES`, bytes that are not UTF-8, a quoted field not closed on its line,
    or a number of fields other than the header's.  Memory stays one block whatever the lines."""
    header: tuple[int, int] | None = None  # (its line, its number of fields)
    with open(file, "rb") as handle:
        number = 0
        while raw := handle.readline(CSV_BLOCK_BYTES + 1):
            number += 1
            if number == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM) :]
            if len(raw) > CSV_BLOCK_BYTES:
                column = _field_at(raw.decode("utf-8", errors="replace"))
                return (
                    f"line {number}, column {column}: the row is longer than {CSV_BLOCK_BYTES:,} bytes, "
                    "the most a CSV row may have"
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                column = _field_at(raw[: error.start].decode("utf-8", errors="replace"))
                return f"line {number}, column {column}: not valid UTF-8 (byte {error.start + 1} of the line)"
            line = text.rstrip("\r\n")
            if not line:
                continue  # pyarrow skips blank lines
            try:
                fields = next(csv.reader([line], strict=True))
            except csv.Error:
                return (
                    f"line {number}, column {_field_at(line)}: a quoted field is not closed on its line "
                    f"(a CSV row is one line)"
                )
            if header is None:
                header = (number, len(fields))
            elif len(fields) != header[1]:
                return (
                    f"line {number}: {len(fields)} field(s), where the header (line {header[0]}) has "
                    f"{header[1]}; column {min(len(fields), header[1]) + 1} is "
                    f"{'one too many' if len(fields) > header[1] else 'missing'}"
                )
    return None


def check_csv_rows(file: Path, path: str, columns: list[Any]) -> None:
    """Refuse a CSV file whose values pyarrow read with a line break inside: a quoted field left
    open runs on to the end of the file, swallowing every later row into one value."""
    import pyarrow.compute as pc

    if not any(pc.any(pc.match_substring_regex(column, "[\r\n]")).as_py() for column in columns):
        return
    with open(file, newline="", encoding="utf-8-sig", errors="replace") as handle:
        reader = csv.reader(handle, strict=True)
        start = 1
        try:
            for _ in reader:
                start = reader.line_num + 1
        except csv.Error:
            handle.seek(0)
            line = next(itertools.islice(handle, start - 1, None), "").rstrip("\r\n")
            raise InputError(
                f"population.path {path!r}: line {start}, column {_field_at(line)}: a quoted field is "
                "not closed on its line (a CSV row is one line)"
            ) from None


def check_utf8(path: str, column: Any, name: str, first_row: int = 0) -> None:
    """Refuse a Parquet text column (a pyarrow array whose row 0 is row ``first_row`` of the file)
    holding bytes that are not UTF-8, naming the row: its values cannot be read as text."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    offset = first_row
    for chunk in chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as error:
            values = chunk.view(pa.large_binary() if pa.types.is_large_string(chunk.type) else pa.binary())
            for index, value in enumerate(values.to_pylist()):  # only to name the row of a refusal
                if value is not None and not _is_utf8(value):
                    raise InputError(
                        f"population.path {path!r}: row {offset + index + 1}, column {name!r}: not valid UTF-8"
                    ) from None
            raise InputError(f"population.path {path!r}: cannot read column {name!r} ({error})") from None
        offset += len(chunk)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _field_at(prefix: str) -> int:
    """The 1-based number of the field where a line's ``prefix`` ends."""
    try:
        return max(len(next(csv.reader([prefix]))), 1)
    except (csv.Error, StopIteration):
        return prefix.count(",") + 1
