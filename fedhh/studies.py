"""A sweep's folder as readers see it: its layout, its manifest and its two tables.

``fedhh sweep`` writes (``simulations.sweep_store``)::

    DIR/sweep.json            manifest: the sweep file (and base) text, grid, runs, versions, machine
    DIR/trials/<key>.json     one finished trial (its table row and its per-item rows)
    DIR/trials.parquet        one row per trial, failed ones too (their ``error`` is not empty)
    DIR/items.parquet         per trial, the discovery of each of its true top items

and ``fedhh report`` and :func:`load_sweep` read.  The columns are listed
in ``docs/sweeps.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import InputError

if TYPE_CHECKING:
    import pyarrow

MANIFEST = "sweep.json"
TRIALS_DIR = "trials"
TRIALS_TABLE = "trials"
ITEMS_TABLE = "items"
FORMAT = "fedhh-sweep/1"
KIND = "sweep"  # what the folder's marker says it holds
REPORT_FOLDER = "report"  # fedhh report's default folder, inside the sweep folder


class Sweep(NamedTuple):
    """A sweep's two tables (``trials, items = fedhh.load_sweep(DIR)``)."""

    trials: pyarrow.Table  # one row per trial: its swept values, metrics, costs, error and config
    items: pyarrow.Table  # per trial, one row per true top item: rank, frequency, discovered, estimate


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of the sweep in ``folder``, or an :class:`InputError` saying there is none."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict):
        raise InputError(f"folder: {str(folder)!r} holds no sweep ({MANIFEST}); run fedhh sweep first")
    return manifest


def table_paths(folder: str | Path) -> dict[str, Path]:
    """The Parquet file of each table (``trials``, ``items``), checked to exist."""
    paths = {name: Path(folder) / f"{name}.parquet" for name in (TRIALS_TABLE, ITEMS_TABLE)}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise InputError(f"folder: {missing} missing; run the sweep again to rebuild its tables")
    return paths


def load_sweep(folder: str | Path) -> Sweep:
    """The trials and items tables of the sweep ``fedhh sweep`` wrote into ``folder``, as pyarrow tables.

    Every trial is a row of ``trials``, a failed one too (its ``error`` column
    says why); ``.to_pandas()`` or ``polars.from_arrow`` turn a table into a
    data frame.  A folder without a sweep, or whose tables are missing (a
    sweep stopped before writing them: run it again, it resumes), is an
    :class:`InputError`.
    """
    import pyarrow.parquet as pq

    read_manifest(folder)
    paths = table_paths(folder)
    return Sweep(pq.read_table(paths[TRIALS_TABLE]), pq.read_table(paths[ITEMS_TABLE]))
