"""``fedhh population build`` from a user's own CSV or Parquet file, read a record batch at a time
(:mod:`fedhh.data.streamed_table`): the same bytes as reading the file whole, in bounded memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pyarrow.csv
import pyarrow.parquet as pq
import pytest

import fedhh.data.streamed_table as streamed
from fedhh.config import build_config
from fedhh.data.sources import FileSource
from fedhh.data.store import write_shard, write_vocabulary
from fedhh.errors import InputError
from fedhh.experiment import item_codec
from fedhh.results import ResultsFolder
from simulations.population_build import build_population

WORDS = ["apple", "banana", "cherry", "date", "fig", "grape", "kiwi", "lemon", "mango", "olive"]


def events(rows: int, users: int, seed: int = 0) -> pa.Table:
    """Rows of users in random order, several per user, Zipf-like items."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, rows)
    item = np.minimum(rng.zipf(1.5, rows) - 1, len(WORDS) - 1)
    return pa.table({"user": pa.array([f"u{u}" for u in range(users)]).take(pa.array(user)),
                     "item": pa.array(WORDS).take(pa.array(item))})


def config_of(path: Path) -> Any:
    return build_config({"population": {"source": "file", "path": str(path)}, "run": {"seed": 1}})


@pytest.mark.parametrize(("suffix", "numbered_users"), [(".csv", False), (".parquet", False), (".parquet", True)])
def test_the_streamed_build_writes_the_bytes_of_the_whole_file_reading(
    tmp_path: Path, suffix: str, numbered_users: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small batches and runs, so users' rows are spread over many of both."""
    monkeypatch.setattr(streamed, "CSV_BLOCK_BYTES", 1 << 14)
    monkeypatch.setattr(streamed, "BATCH_ROWS", 1000)
    monkeypatch.setattr(streamed, "RUN_ROWS", 2500)
    table = events(30_000, 2_500)
    if numbered_users:  # a Parquet user column of integers: users are told apart by their text, as read whole
        table = table.set_column(0, "user", pa.compute.cast(pa.compute.utf8_slice_codeunits(table["user"], 1), pa.int64()))
    file = tmp_path / f"events{suffix}"
    if suffix == ".csv":
        pyarrow.csv.write_csv(table, file)
        assert file.stat().st_size > 10 * streamed.CSV_BLOCK_BYTES
    else:
        pq.write_table(table, file, row_group_size=4000)
    folder = tmp_path / "pop"
    with ResultsFolder.claim(folder) as output:
        manifest = build_population(config_of(file), output, shards=3, workers=1)
    whole = FileSource(str(file), item_codec(config_of(file)))
    reference = tmp_path / "reference"
    reference.mkdir()
    for index in range(3):
        write_shard(reference / f"shard-{index:05d}.parquet", whole.build_shard(index, 3))
    write_vocabulary(reference / "vocabulary.parquet", whole.vocabulary, whole.population_counts())
    for name in ["vocabulary.parquet", *(f"shard-{index:05d}.parquet" for index in range(3))]:
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name
    assert manifest["users"] == whole.n_users == 2_500
    assert manifest["population"] == whole.describe()
    assert sorted(path.name for path in folder.iterdir()) == [  # no spill file left
        ".fedhh-results", "population.json", *(f"shard-{index:05d}.parquet" for index in range(3)), "vocabulary.parquet"]


@pytest.mark.parametrize(
    ("late", "early"),
    [
        ({"user": None}, None),  # a row without a user, in a later batch
        ({"user": ""}, {"item": ""}),  # an empty item first, a missing user later: the user is reported
        (None, {"item": ""}),
        ({"item": "Grape"}, None),  # an item the alphabet refuses, first seen in a later batch
    ],
)
def test_bad_rows_are_refused_where_the_whole_file_reading_refuses_them(
    tmp_path: Path, late: dict | None, early: dict | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streamed, "CSV_BLOCK_BYTES", 1 << 12)
    rows = events(3_000, 200).to_pylist()
    for row, change in ((rows[2_500], late), (rows[40], early)):
        row.update(change or {})
    file = tmp_path / "events.csv"
    pyarrow.csv.write_csv(pa.Table.from_pylist(rows, schema=pa.schema([("user", pa.string()), ("item", pa.string())])),
                          file)
    with pytest.raises(InputError) as whole:
        FileSource(str(file), item_codec(config_of(file)))
    with pytest.raises(InputError) as stream:
        streamed.StreamedTableSource(str(file), item_codec(config_of(file)), tmp_path)
    assert str(stream.value) == str(whole.value)
    assert type(stream.value) is type(whole.value)


def _invalid_utf8_parquet(path: Path) -> None:
    """A Parquet file whose text column holds a byte that is not UTF-8 (row 2): pyarrow writes it
    unchecked, and its values were read as a UnicodeDecodeError traceback."""
    offsets = pa.py_buffer(np.array([0, 4, 8, 12], dtype=np.int32).tobytes())
    item = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"moonsu\xffnstar")])
    pq.write_table(pa.table({"user": ["u1", "u2", "u3"], "item": item}), path)


BAD_FILES = {
    # name: (file contents or a writer, what the refusal says after "population.path '<file>': ")
    "duplicated column.csv": (b"user,item,item\nu1,moon,sun\nu2,star,sun\n",
                              "the header (line 1) has column 'item' 2 times (columns 2, 3); 'user' and 'item' must "
                              "each appear once"),
    "duplicated column after blank lines.csv": (b"\n\nuser,user,item\nu1,u2,moon\n",
                                                "the header (line 3) has column 'user' 2 times (columns 1, 2)"),
    "duplicated column.parquet": (lambda path: pq.write_table(
        pa.table([pa.array(["u1"]), pa.array(["moon"]), pa.array(["sun"])], names=["user", "item", "item"]), path),
        "the schema has column 'item' 2 times (columns 2, 3)"),
    "field too many.csv": (b"user,item\nu1,moon\nu2,sun,star\nu3,star\n",
                           "line 3: 3 field(s), where the header (line 1) has 2; column 3 is one too many"),
    "field missing.csv": (b"user,item\nu1,moon\nu2\n", "line 3: 1 field(s), where the header (line 1) has 2; "
                          "column 2 is missing"),
    "invalid UTF-8.csv": (b"user,item\nu1,moon\nu2,su\xffn\n",
                          "line 3, column 2: not valid UTF-8 (byte 6 of the line)"),
    "invalid UTF-8 in a user.csv": (b"user,item\nu\xff1,moon\n", "line 2, column 1: not valid UTF-8"),
    "quote left open.csv": (b'user,item\nu1,moon\nu2,"sun\nu3,star\n',
                            "line 3, column 2: a quoted field is not closed on its line (a CSV row is one line)"),
    "invalid UTF-8.parquet": (_invalid_utf8_parquet, "row 2, column 'item': not valid UTF-8"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_unreadable_files_are_refused_naming_the_line_and_column(tmp_path: Path, name: str) -> None:
    """Both readings (whole, streamed) refuse the file with the same message: the file, then its
    line and column (CSV) or row and column (Parquet); once a KeyError traceback (a duplicated
    column) or pyarrow's own words, which name no line."""
    contents, expected = BAD_FILES[name]
    file = tmp_path / name.replace(" ", "-")
    if callable(contents):
        contents(file)
    else:
        file.write_bytes(contents)
    with pytest.raises(InputError) as whole:
        FileSource(str(file), item_codec(config_of(file)))
    with pytest.raises(InputError) as stream:
        streamed.StreamedTableSource(str(file), item_codec(config_of(file)), tmp_path)
    assert str(whole.value).startswith(f"population.path {str(file)!r}: {expected}"), whole.value
    assert str(stream.value) == str(whole.value)


def test_a_100_mb_field_is_refused_naming_its_line(tmp_path: Path) -> None:
    """A row longer than the block pyarrow parses at a time was "straddling object straddles two block
    boundaries (try to increase block size?)"."""
    file = tmp_path / "big.csv"
    with open(file, "w", encoding="utf-8") as handle:
        handle.write("user,item\nu1,moon\nu2,")
        handle.write("x" * (100 << 20))
        handle.write("\nu3,sun\n")
    expected = (f"population.path {str(file)!r}: line 3, column 2: the row is longer than 1,048,576 bytes, "
                "the most a CSV row may have")
    for read in (lambda: FileSource(str(file), item_codec(config_of(file))),
                 lambda: streamed.StreamedTableSource(str(file), item_codec(config_of(file)), tmp_path)):
        with pytest.raises(InputError) as refused:
            read()
        assert str(refused.value) == expected


LIMITED_BUILD = textwrap.dedent("""
    import resource, sys
    from fedhh.config import build_config
    from fedhh.experiment import item_codec
    from fedhh.results import ResultsFolder
    from fedhh.data.sources import FileSource
    from simulations.population_build import build_population
    import pyarrow.csv, pyarrow.compute  # what either reading loads, before the limit

    how, path, output, headroom = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    config = build_config({"population": {"source": "file", "path": path}, "run": {"seed": 1}})

    def address_space():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    limit = address_space() + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        if how == "streamed":
            with ResultsFolder.claim(output) as folder:
                print(build_population(config, folder, shards=8, workers=1)["users"])
        else:
            print(FileSource(path, item_codec(config)).n_users)
    except MemoryError:
        print("out of memory")
        sys.exit(3)
""")


def test_a_csv_is_built_under_a_memory_limit_that_reading_it_whole_exceeds(tmp_path: Path) -> None:
    """2,000,000 rows (39 MiB of CSV): the whole-file reading needs about 500 MiB of address space
    beyond the imports (its Python lists), the streamed build about 160 MiB; the limit is 300 MiB."""
    users = 20_000
    file = tmp_path / "events.csv"
    pyarrow.csv.write_csv(events(2_000_000, users, seed=3), file)
    env = {**os.environ, "MALLOC_ARENA_MAX": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}

    def limited(how: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", LIMITED_BUILD, how, str(file), str(tmp_path / how), str(300 << 20)],
                              capture_output=True, text=True, env=env, timeout=300)

    built = limited("streamed")
    assert built.returncode == 0, built.stderr[-2000:]
    assert int(built.stdout.split()[-1]) == users
    whole = limited("whole")
    assert whole.returncode == 3 and "out of memory" in whole.stdout, whole.stderr[-2000:]


def test_a_files_default_shards_hold_a_bounded_number_of_rows() -> None:
    """A shard's rows are held at once while it is written: by default a file of many rows per user
    gets a shard per DEFAULT_SHARD_ROWS rows, never more shards than users."""
    from simulations.population_build import DEFAULT_SHARD_ROWS, stored_shard_count

    assert stored_shard_count(20_000, None, rows=2 * DEFAULT_SHARD_ROWS + 1) == 3
    assert stored_shard_count(2, None, rows=10 * DEFAULT_SHARD_ROWS) == 2
    assert stored_shard_count(20_000, None) == 1 and stored_shard_count(20_000, 5, rows=10 * DEFAULT_SHARD_ROWS) == 5
