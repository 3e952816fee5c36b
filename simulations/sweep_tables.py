"""A sweep folder's tables as a report reads them: the successful trials, their items, and a selection.

:class:`SweepTables` reads ``sweep.json``, ``trials.parquet`` and
``items.parquet`` once.  A report may narrow them to the trials whose
columns hold given values (``--where KEY=VALUE``, :meth:`SweepTables.where`);
the swept axes are then the sweep's keys (a zipped group is one axis) that
still vary among the trials kept.  Per trial, it also derives from the
items table the recall of the true top K for any K (``--y recall@K``) and
what each model predicts for it.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.config import ConfigError, schema
from fedhh.errors import InputError
from fedhh.studies import ITEMS_TABLE, TRIALS_TABLE, read_manifest, table_paths

from .analytic import MODEL_COLUMNS

DISCOVERY = "discovery"
RECALL_AT = re.compile(r"recall@(\d+)")  # --y recall@K: from the items table, for any K


class SweepTables:
    """A sweep folder's manifest and tables, read once; the successful trials as columns."""

    def __init__(self, folder: str | Path) -> None:
        import pyarrow.parquet as pq

        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        paths = table_paths(self.folder)
        self.all_rows: dict[str, list[Any]] = pq.read_table(paths[TRIALS_TABLE]).to_pydict()
        ok = [i for i, error in enumerate(self.all_rows.get("error", [])) if not error]
        self.rows = {column: [values[i] for i in ok] for column, values in self.all_rows.items()}
        self.count = len(ok)
        self.filters: list[str] = []  # the --where filters applied, as given
        items = pq.read_table(paths[ITEMS_TABLE])
        keep = {key: i for i, key in enumerate(self.rows.get("trial_key", []))}
        trial_of = np.array([keep.get(key, -1) for key in items.column("trial_key").to_pylist()], dtype=np.int64)
        kept = trial_of >= 0
        self.item_trial = trial_of[kept]
        self.item_name = np.asarray(items.column("item").to_pylist(), dtype=object)[kept]
        self.item_rank = items.column("true_rank").to_numpy()[kept]
        self.item_frequency = items.column("true_frequency").to_numpy()[kept]
        self.item_found = items.column("discovered").to_numpy(zero_copy_only=False)[kept].astype(np.float64)
        self.item_models: dict[str, np.ndarray] = {}  # model column -> per item-trial prediction (NaN: none)
        for column in MODEL_COLUMNS:
            if column in items.column_names:
                values = np.asarray(items.column(column).to_numpy(zero_copy_only=False), dtype=np.float64)[kept]
                if not np.all(np.isnan(values)):
                    self.item_models[column] = values

    # -- columns and axes -------------------------------------------------------------------

    @property
    def swept(self) -> list[str]:
        """The axes that vary among the trials: each swept key, and each zipped group as one axis
        of its keys joined by commas."""
        zipped = [[key for key in group if key in self.rows] for group in self.manifest.get("zip", [])]
        in_zip = {key for group in zipped for key in group}
        axes = [key for key in self.manifest.get("swept_keys", []) if key in self.rows and key not in in_zip]
        axes += [",".join(group) for group in zipped if group]
        return [axis for axis in axes if len(set(self.column(axis))) > 1]

    def column(self, name: str, flag: str = "column") -> list[Any]:
        """A column's values; ``a,b`` names the pairs of columns ``a`` and ``b`` (a zipped axis)."""
        parts = name.split(",")
        for part in parts:
            if part not in self.rows:
                raise InputError(f"{flag} {part}: not a column of {TRIALS_TABLE}.parquet; allowed: {sorted(self.rows)}")
        if len(parts) == 1:
            return self.rows[name]
        return list(zip(*(self.rows[part] for part in parts)))

    def numeric(self, name: str, flag: str = "--y") -> np.ndarray:
        values = self.column(name, flag)
        if not all((isinstance(v, (int, float)) and not isinstance(v, bool)) or v is None for v in values):
            raise InputError(
                f"{flag} {name}: not a numeric column; allowed: {self.numeric_columns()}, {DISCOVERY} or recall@K"
            )
        return np.array([math.nan if v is None else float(v) for v in values])

    def numeric_columns(self) -> list[str]:
        return sorted(
            name
            for name, values in self.rows.items()
            if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        )

    # -- selection --------------------------------------------------------------------------

    def where(self, filters: Sequence[str]) -> SweepTables:
        """The trials whose columns hold the values of ``filters`` (``KEY=VALUE``, the value read as
        a config value; several values of one key: any of them; several keys: all of them)."""
        if not filters:
            return self
        wanted: dict[str, list[Any]] = {}
        for text in filters:
            key, sep, value = text.partition("=")
            key = key.strip()
            if not sep or not key:
                raise InputError(
                    f"--where {text!r}: expected KEY=VALUE, a column of {TRIALS_TABLE}.parquet and a value"
                )
            if key not in self.rows:
                raise InputError(f"--where {key}: not a column of {TRIALS_TABLE}.parquet; allowed: {sorted(self.rows)}")
            parsed = config_value(key, value)
            present = self.rows[key]
            if not any(_equal(cell, parsed) for cell in present):
                values = ", ".join(sorted({repr(v) for v in present}))
                raise InputError(
                    f"--where {key}={value.strip()}: no successful trial has {key} = {parsed!r}; its values: {values}"
                )
            wanted.setdefault(key, []).append(parsed)
        keep = [
            i
            for i in range(self.count)
            if all(any(_equal(self.rows[key][i], v) for v in values) for key, values in wanted.items())
        ]
        if not keep:
            raise InputError(f"--where {' '.join(filters)}: no successful trial holds all these values together")
        return self._subset(np.array(keep, dtype=np.int64), list(filters))

    def _subset(self, keep: np.ndarray, filters: list[str]) -> SweepTables:
        chosen = object.__new__(SweepTables)
        chosen.folder, chosen.manifest, chosen.all_rows = self.folder, self.manifest, self.all_rows
        chosen.rows = {column: [values[i] for i in keep.tolist()] for column, values in self.rows.items()}
        chosen.count = int(keep.size)
        chosen.filters = [*self.filters, *filters]
        new_index = np.full(self.count, -1, dtype=np.int64)
        new_index[keep] = np.arange(keep.size)
        mapped = new_index[self.item_trial]
        kept = mapped >= 0
        chosen.item_trial = mapped[kept]
        for name in ("item_name", "item_rank", "item_frequency", "item_found"):
            setattr(chosen, name, getattr(self, name)[kept])
        chosen.item_models = {column: values[kept] for column, values in self.item_models.items()}
        return chosen

    # -- per trial, from the items table -----------------------------------------------------

    def recall_at(self, k: int, column: str | None = None) -> np.ndarray:
        """Per trial, the share of its true top ``k`` items found (``column``: the share a model
        predicts); NaN for a trial whose items table stops before its ``k``-th item."""
        if k < 1:
            raise InputError(f"--y recall@{k}: K must be an integer >= 1")
        weights = self.item_found if column is None else self.item_models[column]
        top = self.item_rank <= k
        hits = np.bincount(self.item_trial[top], weights=weights[top], minlength=self.count)
        rows = np.bincount(self.item_trial[top], minlength=self.count)
        recorded = np.bincount(self.item_trial, minlength=self.count)
        # a trial with fewer rows than K holds its whole ranked vocabulary only if it recorded fewer
        # than the sweep asked for; otherwise the items beyond its table are unknown
        complete = (rows >= k) | (recorded < int(self.manifest.get("items", 0)))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(complete & (rows > 0), hits / np.maximum(rows, 1), np.nan)

    def check_recall_depth(self, k: int) -> None:
        """Refuse ``recall@k`` when no trial's items table reaches its ``k``-th item."""
        if np.all(np.isnan(self.recall_at(k))):
            depth = int(np.bincount(self.item_trial, minlength=self.count).max()) if self.item_trial.size else 0
            raise InputError(
                f"--y recall@{k}: the items table holds the true top {depth} of each trial "
                f"(sweep.items = {self.manifest.get('items')}); K at most {depth}"
            )


def config_value(key: str, text: str) -> Any:
    """``text`` read as a config value is read (TOML, else a string), and checked against the
    config schema when ``key`` is a config key (so ``4`` is the ε 4.0)."""
    try:
        value = tomllib.loads(f"value = {text.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    section, _, name = key.partition(".")
    known = schema()
    if section in known and name in known[section]:
        try:
            value = known[section][name].validate(key, value)
        except ConfigError as error:
            raise InputError(f"--where {key}={text.strip()}: {error}") from None
    return value


def _equal(cell: Any, value: Any) -> bool:
    if isinstance(cell, bool) or isinstance(value, bool):
        return cell is value or (cell == value and type(cell) is type(value))
    return bool(cell == value)
