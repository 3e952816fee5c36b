"""A sweep's output folder: its manifest, one file per finished trial, and the tables built from them.

The layout, and how a reader finds the tables, is :mod:`fedhh.studies`
(``--csv`` adds ``trials.csv`` and ``items.csv`` beside the Parquet tables).

The folder is claimed as every fedhh output is, and written file by file
(:class:`fedhh.results.IncrementalFolder`): a new or empty folder, or an
earlier run of the same sweep file holding nothing fedhh did not write
there (its marker lists the files; ``DIR/report`` is the report's own
folder); never the current, home or root folder, nor through a symbolic
link.  A lock beside the folder is held for the whole sweep, so a second
sweep of the same folder is refused, told which process holds it.  Every
file is written to a temporary name in its folder and renamed into place,
so a sweep stopped at any instant (``kill -9``, a lost machine, a full
disk) leaves whole files only: the finished trials are kept and a re-run
skips them (trials are keyed by a hash of their full config), and the
tables are rebuilt from the trial files.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import platform
import re
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from fedhh.results import FileWriter, IncrementalFolder, OutputError
from fedhh.studies import FORMAT, ITEMS_TABLE, KIND, MANIFEST, REPORT_FOLDER, TRIALS_DIR, TRIALS_TABLE
from fedhh.version import __version__

from .sweep_spec import SweepSpec, Trial
from .sweep_trial import ITEM_COLUMNS, TrialRecord

TRIAL_FILE = re.compile(r"[0-9a-f]{20}\.json")  # trials/<key>.json


class FolderUnwritable(RuntimeError):
    """The sweep folder cannot be written any more (a full disk, a lost mount): the sweep stops,
    and what it wrote stays, to resume from."""

    def __init__(self, folder: Path, error: OSError) -> None:
        super().__init__(f"cannot write in {folder} ({error.strerror or error})")


class SweepFolder:
    """The output folder of one sweep file, claimed (checked and locked) for the whole sweep;
    use it as a context manager, or :meth:`release` it."""

    def __init__(self, folder: IncrementalFolder, spec: SweepSpec) -> None:
        self.folder = folder
        self.path = folder.path
        self.spec = spec
        self.records = self.path / TRIALS_DIR
        self.manifest_path = self.path / MANIFEST

    @classmethod
    def claim(cls, path: str | Path, spec: SweepSpec) -> SweepFolder:
        """Claim the folder, to fill or to resume in if it holds an earlier run of the same sweep file."""
        folder = IncrementalFolder.claim(
            path, kind=KIND, field="--output", subfolders={TRIALS_DIR: TRIAL_FILE}, nested=(REPORT_FOLDER,)
        )
        sweep = cls(folder, spec)
        try:
            previous = sweep.read_manifest() if folder.resumed else None
            if previous is not None and (
                previous.get("format") != FORMAT or previous.get("sweep_file") != str(spec.path)
            ):
                raise OutputError(
                    f"--output: {str(sweep.path)!r} holds a sweep of {previous.get('sweep_file')!r}, not of "
                    f"{str(spec.path)!r}; choose another folder"
                )
        except BaseException:
            folder.release()
            raise
        return sweep

    def release(self) -> None:
        """Give the folder up (its lock); what was written stays, to resume from."""
        self.folder.release()

    def __enter__(self) -> SweepFolder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()

    # -- trials ---------------------------------------------------------------------------

    def finished(self) -> dict[str, bool]:
        """Keys of the trials on disk, each with whether it failed."""
        done: dict[str, bool] = {}
        if not self.records.is_dir():
            return done
        for file in self.records.glob("*.json"):
            try:
                row = json.loads(file.read_text(encoding="utf-8"))["row"]
            except (OSError, ValueError, KeyError):
                continue  # not one of ours (whole files only are renamed into place)
            done[file.stem] = bool(row.get("error"))
        return done

    def write_record(self, record: TrialRecord) -> None:
        text = json.dumps(record.to_dict(), ensure_ascii=False).encode("utf-8")
        self._write(f"{record.key}.json", lambda handle: handle.write(text), subfolder=TRIALS_DIR)

    def _write(self, name: str, write: FileWriter, subfolder: str | None = None) -> None:
        try:
            self.folder.write(name, write, subfolder)
        except OSError as error:
            raise FolderUnwritable(self.path, error) from error

    def errors(self, trials: Sequence[Trial]) -> collections.Counter[str]:
        """The errors of the failed trials of the grid on disk: message -> how many trials."""
        done = self.finished()
        counts: collections.Counter[str] = collections.Counter()
        for trial in trials:
            if done.get(trial.key):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    counts[str(self.read_record(trial.key).row["error"])] += 1
        return counts

    def read_record(self, key: str) -> TrialRecord:
        return TrialRecord.from_dict(json.loads((self.records / f"{key}.json").read_text(encoding="utf-8")))

    # -- tables ---------------------------------------------------------------------------

    def write_tables(self, trials: Sequence[Trial], csv: bool) -> int:
        """Rebuild the tables from the finished trials of the grid, in grid order; the row count.

        A trial written by an earlier run of a sweep file since extended (a
        new axis, more values) keeps its results, and takes its place in the
        grid as it is now: its point, index and swept values."""
        import pyarrow as pa

        done = self.finished()
        found = [(trial, self.read_record(trial.key)) for trial in trials if trial.key in done]
        records = [record for _, record in found]
        rows = table_from_rows(
            [
                {
                    "trial_key": trial.key,
                    "point": trial.point,
                    "trial": trial.index,
                    **trial.values,
                    **{
                        column: value
                        for column, value in record.row.items()
                        if column not in ("trial_key", "point", "trial", *trial.values)
                    },
                }
                for trial, record in found
            ]
        )
        items = {
            column: [value for record in records for value in record.items.get(column, [])] for column in ITEM_COLUMNS
        }
        schema = pa.schema([(column, pa.type_for_alias(kind)) for column, kind in ITEM_COLUMNS.items()])
        tables = {TRIALS_TABLE: rows, ITEMS_TABLE: pa.Table.from_pydict(items, schema=schema)}
        for name, table in tables.items():
            self._write(f"{name}.parquet", _table_writer(table, "parquet"))
            if csv:
                self._write(f"{name}.csv", _table_writer(table, "csv"))
        return len(records)

    # -- manifest -------------------------------------------------------------------------

    def start_run(self, executor: str, workers: int, todo: int, skipped: int) -> dict[str, Any]:
        """Record in the manifest that a run of the sweep starts; the run's entry, to finish later.

        The sweep file may have changed since the folder's first run (a grid
        extended, ``redraw_population`` flipped): the manifest describes the
        sweep as it is now, as the tables rebuilt at the end will."""
        manifest = self.read_manifest() or self._new_manifest()
        manifest.update(self._sweep_fields())
        run = {
            "started": _now(),
            "ended": None,
            "status": "running",
            "executor": executor,
            "workers": workers,
            "to_run": todo,
            "skipped": skipped,
            "computed": 0,
            "failed": 0,
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        }
        manifest["runs"].append(run)
        self._write_manifest(manifest)
        return run

    def end_run(self, run: dict[str, Any], status: str, computed: int, failed: int, rows: int) -> None:
        manifest = self.read_manifest() or self._new_manifest()
        run.update(ended=_now(), status=status, computed=computed, failed=failed)
        manifest["runs"][-1] = run
        manifest["rows"] = rows
        manifest["status"] = status
        self._write_manifest(manifest)

    def read_manifest(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.manifest_path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def _sweep_fields(self) -> dict[str, Any]:
        """What the manifest says of the sweep file itself."""
        spec = self.spec
        return {
            "sweep_file": str(spec.path),
            "sweep_text": spec.text,
            "base_file": str(spec.base_path) if spec.base_path else None,
            "base_text": spec.base_text,
            "swept_keys": spec.swept_keys,
            "axes": spec.axes,
            "zip": spec.zipped,
            "trials_per_point": spec.trials,
            "items": spec.items,
            "redraw_population": spec.redraw_population,
            "points": spec.point_count,
            "trials": spec.trial_count,
        }

    def _new_manifest(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            **self._sweep_fields(),
            "status": "running",
            "rows": 0,
            "runs": [],
            "versions": versions(),
            "machine": machine(),
        }

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        text = (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        self._write(MANIFEST, lambda handle: handle.write(text))


def table_from_rows(rows: Sequence[dict[str, Any]]) -> Any:
    """A pyarrow table with one row per dict; columns in first-seen order, missing cells null."""
    import pyarrow as pa

    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return pa.table({name: pa.array([row.get(name) for row in rows]) for name in columns})


def _table_writer(table: Any, kind: str) -> FileWriter:
    import pyarrow.csv
    import pyarrow.parquet

    def write(handle: Any) -> None:
        if kind == "parquet":
            pyarrow.parquet.write_table(table, handle)
        else:
            pyarrow.csv.write_csv(table, handle)

    return write


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def versions() -> dict[str, str]:
    """Versions of what decides a sweep's numbers."""
    import pyarrow
    import scipy

    return {
        "fedhh": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pyarrow": pyarrow.__version__,
    }


def machine() -> dict[str, Any]:
    """The machine a sweep ran on (for timings)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
    }
