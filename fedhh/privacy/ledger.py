"""A privacy ledger: every run's (ε, δ) on disk, their composition, and a budget.

A job that reruns discovery on the same users (a daily run) spends privacy
each time.  The ledger is one JSON file listing the runs that have been
charged; its cumulative guarantee comes from :func:`fedhh.privacy.composition.compose`
(dp-accounting's PLDs, with basic and advanced composition beside them).

Charge *before* the run starts: :meth:`Ledger.record` refuses a run that
would push the cumulative ε above ``max_epsilon`` (raising
:class:`BudgetExceededError`, ledger untouched), and otherwise writes the
run down.  A run that crashes half-way may already have released rounds, so
its budget stays spent.

The file is replaced atomically (temporary file in the same folder, fsync,
``os.replace``, fsync of the folder), under an exclusive lock on a sidecar
``.lock`` file, so a crash leaves either the old ledger or the new one, and
two jobs charging at once cannot lose a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..results import to_json
from .composition import compose
from .report import CompositionSummary, PrivacyReport

FORMAT = "fedhh-privacy-ledger"
VERSION = 1


class LedgerError(InputError):
    """A ledger file that cannot be read, or a run it cannot take."""


class BudgetExceededError(LedgerError):
    """Charging a run would exceed the budget; nothing was written."""

    def __init__(self, run_id: str, max_epsilon: float, before: CompositionSummary, after: CompositionSummary) -> None:
        self.run_id = run_id
        self.max_epsilon = max_epsilon
        self.before = before
        self.after = after
        super().__init__(
            f"privacy.max_epsilon: run {run_id!r} refused before it starts: with it the ledger's "
            f"cumulative ε would be {after.epsilon:.6g} at δ = {after.delta:.3g} "
            f"(basic {after.basic_epsilon:.6g}, advanced {after.advanced_epsilon:.6g}, "
            f"PLD {after.pld_epsilon:.6g}) over {after.runs} run(s), above the budget "
            f"max_epsilon = {max_epsilon:g}; spent so far: ε = {before.epsilon:.6g} over "
            f"{before.runs} run(s)"
        )


@dataclass(frozen=True)
class LedgerEntry:
    """One charged run."""

    run_id: str
    recorded_at: str  # UTC, ISO 8601
    report: PrivacyReport

    def to_dict(self) -> dict[str, Any]:
        report = self.report.to_dict()
        report.pop("composition", None)  # derived data; recomputed from the entries
        return {"run_id": self.run_id, "recorded_at": self.recorded_at, "report": report}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LedgerEntry":
        return cls(str(data["run_id"]), str(data["recorded_at"]), PrivacyReport.from_dict(data["report"]))


def check_max_epsilon(max_epsilon: float | None) -> float | None:
    if max_epsilon is None:
        return None
    if isinstance(max_epsilon, bool) or not isinstance(max_epsilon, (int, float)) or not (
        math.isfinite(max_epsilon) and max_epsilon > 0
    ):
        raise ValueError(f"privacy.max_epsilon: must be a finite number > 0, got {max_epsilon!r}")
    return float(max_epsilon)


class Ledger:
    """The runs charged to one population, kept in the JSON file at ``path``.

    ``delta`` is the total δ at which the cumulative ε is stated and
    budgeted.  Left ``None`` it is :func:`fedhh.privacy.composition.default_delta`,
    twice the runs' summed δ; a value given here is stored in the file when
    the ledger is created, and a later different value is refused (a budget
    must not change meaning between runs).
    """

    def __init__(self, path: str | Path, delta: float | None = None) -> None:
        self.path = Path(path)
        if delta is not None and (isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1):
            raise ValueError(f"delta (the ledger's total δ): must be in the open interval (0, 1), got {delta!r}")
        self._delta = None if delta is None else float(delta)

    # reading ------------------------------------------------------------------
    def _load(self) -> tuple[float | None, list[LedgerEntry]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return self._delta, []
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT or data.get("version") != VERSION:
                raise ValueError(f"not a {FORMAT} version {VERSION} file")
            entries = [LedgerEntry.from_dict(entry) for entry in data["runs"]]
            stored = data.get("delta")
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise LedgerError(
                f"privacy.ledger: {str(self.path)!r} is not a readable privacy ledger ({error}); "
                "it is left as is, fix or move it"
            ) from None
        stored = None if stored is None else float(stored)
        if self._delta is not None and stored != self._delta:
            raise LedgerError(
                f"delta (the ledger's total δ): the ledger {str(self.path)!r} states its ε at "
                f"δ = {'2 Σ δ_i' if stored is None else f'{stored:g}'}, got {self._delta:g}"
            )
        return stored, entries

    @property
    def entries(self) -> list[LedgerEntry]:
        return self._load()[1]

    def summary(self, delta: float | None = None) -> CompositionSummary:
        """The cumulative guarantee of the charged runs (at ``delta`` if given)."""
        stored, entries = self._load()
        return compose(_guarantees(entries), delta if delta is not None else stored)

    def preview(self, report: PrivacyReport) -> CompositionSummary:
        """The cumulative guarantee if ``report``'s run were charged now (nothing is written)."""
        stored, entries = self._load()
        _check_adjacency(entries, report)
        return compose([*_guarantees(entries), (report.epsilon, report.delta)], stored)

    # writing ------------------------------------------------------------------
    def record(self, report: PrivacyReport, run_id: str, max_epsilon: float | None = None) -> PrivacyReport:
        """Charge a run; returns ``report`` with the cumulative guarantee attached.

        Refused, with the ledger unchanged, when ``run_id`` is already charged,
        when the run's adjacency differs from the ledger's runs, or (with
        ``max_epsilon``) when the cumulative ε would exceed the budget.
        """
        budget = check_max_epsilon(max_epsilon)
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id: must be a non-empty string, got {run_id!r}")
        with self._locked():
            stored, entries = self._load()
            if any(entry.run_id == run_id for entry in entries):
                raise LedgerError(f"run_id: {run_id!r} is already charged in {str(self.path)!r}")
            _check_adjacency(entries, report)
            after = compose([*_guarantees(entries), (report.epsilon, report.delta)], stored)
            if budget is not None and not after.epsilon <= budget:
                raise BudgetExceededError(run_id, budget, compose(_guarantees(entries), stored), after)
            recorded_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            entries.append(LedgerEntry(run_id, recorded_at, report))
            self._write(stored, entries, after)
        return report.with_composition(after)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock on ``<ledger>.lock`` for one read-modify-write."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, delta: float | None, entries: list[LedgerEntry], total: CompositionSummary) -> None:
        document = {
            "format": FORMAT,
            "version": VERSION,
            "delta": delta,
            "runs": [entry.to_dict() for entry in entries],
            "cumulative": total.to_dict(),  # for readers; recomputed on load
        }
        write_atomically(self.path, to_json(document) + "\n")


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old file or the new one.

    The temporary file lives in the destination folder (``os.replace`` is
    atomic only within one file system), is fsynced before the rename, and
    the folder is fsynced after it so the rename itself survives a power cut.
    """
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _guarantees(entries: list[LedgerEntry]) -> list[tuple[float, float]]:
    return [(entry.report.epsilon, entry.report.delta) for entry in entries]


def _check_adjacency(entries: list[LedgerEntry], report: PrivacyReport) -> None:
    """Guarantees compose only under one neighbouring relation."""
    if entries and entries[0].report.adjacency != report.adjacency:
        raise LedgerError(
            f"adjacency: the ledger's runs are private under {entries[0].report.adjacency!r} but this "
            f"run under {report.adjacency!r}; their ε do not add up, use a separate ledger"
        )
