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
two jobs charging at once cannot lose a run.  A ledger in a folder fedhh
cannot write to is refused before the run, by the read-only preview too.

Every entry keeps the mechanism's parameters its (ε, δ) was derived from.
On every read, each entry's (ε, δ) is derived again from them by the
accounting code that stated it (:data:`ACCOUNTANTS`, keyed by the report's
privacy model), and a ledger whose entry disagrees with its own parameters
is refused: lowering a stored ε by hand cannot make room in the budget.
Someone who rewrites the parameters consistently as well is outside what a
file can defend against (``docs/privacy.md``).

A run that leaves out items already known (``run.deny_list``) is charged
with the list's source: the hash of the file, or the previous run's results
folder, the hash of its ``result.json`` and the name the ledger charged that
run under.  Runs chained this way are runs on the same users like any other
(the deny list is public and removing its items is the same map on every
user's data), so the chain's guarantee is the composition of its runs';
:meth:`Ledger.chain` follows the links back from a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..results import to_json
from . import aggregate_trie, central, ldp, shuffle, triehh
from .composition import compose
from .report import NO_GUARANTEE, CompositionSummary, PrivacyReport

FORMAT = "fedhh-privacy-ledger"
VERSION = 1

Accountant = Callable[[Mapping[str, Any]], tuple[float, float]]
# Per privacy model (a report's ``model``), the code that derives a run's (ε, δ) from its parameters.
ACCOUNTANTS: dict[str, Accountant] = {
    triehh.MODEL: triehh.triehh_guarantee,
    ldp.MODEL: ldp.ldp_guarantee,
    central.MODEL: central.central_guarantee,
    aggregate_trie.MODEL: aggregate_trie.aggregate_trie_guarantee,
    shuffle.MODEL: shuffle.shuffle_accountant,
}
DERIVATION_TOLERANCE = 1e-9  # relative: the same formulas on another machine's libm may differ in the last bits


def register_accountant(model: str, accountant: Accountant) -> None:
    """Let ledgers charge runs of privacy model ``model`` (a protocol registered outside fedhh with a
    model of its own): ``accountant(parameters)`` returns the (ε, δ) the report's parameters give."""
    if not isinstance(model, str) or not model or model.startswith(NO_GUARANTEE):
        raise InputError(f"model: must name a privacy model with a guarantee, got {model!r}")
    ACCOUNTANTS[model] = accountant


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
    deny_list: dict[str, Any] | None = None  # where the run's deny list came from (DenyList.source)

    def to_dict(self) -> dict[str, Any]:
        report = self.report.to_dict()
        report.pop("composition", None)  # derived data; recomputed from the entries
        report.pop("coverage", None)  # documentation of a result's fields, not part of the guarantee
        report.pop("shuffle", None)  # derived (in the shuffle model, from the parameters kept)
        entry = {"run_id": self.run_id, "recorded_at": self.recorded_at, "report": report}
        if self.deny_list is not None:
            entry["deny_list"] = self.deny_list
        return entry

    @property
    def previous_run_id(self) -> str | None:
        """The run whose results folder this run's deny list was, if it was charged to a ledger."""
        return None if self.deny_list is None else self.deny_list.get("previous_run_id")


TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MAX_LEDGER_BYTES = 64 * 1024 * 1024  # about 100,000 runs; refuse to read without bound
_DOCUMENT_KEYS = {"format", "version", "delta", "runs", "cumulative"}
_ENTRY_KEYS = {"run_id", "recorded_at", "report"}
_DENY_LIST_KINDS = ("file", "result")  # a text file, or a previous run's results folder
_REPORT_TEXT_KEYS = ("model", "mechanism", "method", "adjacency")
_REPORT_KEYS = {"epsilon", "delta", "parameters", *_REPORT_TEXT_KEYS}


class _Reader:
    """Strict validation of a ledger document: every message names the file and the entry.

    The ledger is a file people can edit, and every later run trusts what it
    says, so nothing is coerced: ``true`` is not a number, ``{}`` is not a
    list of runs, and an entry whose δ is not below ``1/n`` (a "guarantee"
    that publishing a random user's data meets) is refused, not composed.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> LedgerError:
        return LedgerError(
            f"privacy.ledger {str(self.path)!r}: {where}: {problem}; the file is left as is, fix or move it"
        )

    def number(self, value: Any, where: str, allowed: str, check: Callable[[float], bool]) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not check(float(value)):
            raise self.fail(where, f"must be {allowed}, got {json.dumps(value)}")
        return float(value)

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"must be a non-empty string, got {json.dumps(value)}")
        return value

    def keys(self, data: Any, where: str, required: set[str], allowed: set[str]) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(where, f"must be a JSON object, got {type(data).__name__}")
        missing, unknown = required - set(data), set(data) - allowed
        if missing:
            raise self.fail(where, f"missing key(s) {sorted(missing)}")
        if unknown:
            raise self.fail(where, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        return data

    def document(self, data: Any) -> tuple[float | None, list[LedgerEntry]]:
        data = self.keys(data, "the document", {"format", "version", "runs"}, _DOCUMENT_KEYS)
        if data["format"] != FORMAT or isinstance(data["version"], bool) or data["version"] != VERSION:
            raise self.fail(
                "format, version",
                f"not a {FORMAT} version {VERSION} file, got "
                f"{json.dumps(data['format'])} version {json.dumps(data['version'])}",
            )
        delta = data.get("delta")
        if delta is not None:
            delta = self.number(
                delta,
                "delta (the total δ)",
                "null or a number in the open interval (0, 1)",
                lambda value: 0 < value < 1,
            )
        runs = data["runs"]
        if not isinstance(runs, list):
            raise self.fail("runs", f"must be a list of charged runs, got {type(runs).__name__} {json.dumps(runs)}")
        entries = [self.entry(run, f"runs[{index}]") for index, run in enumerate(runs)]
        seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            if entry.run_id in seen:
                raise self.fail(
                    f"runs[{index}]", f"run_id {entry.run_id!r} is charged twice (also runs[{seen[entry.run_id]}])"
                )
            seen[entry.run_id] = index
            if entry.report.adjacency != entries[0].report.adjacency:
                raise self.fail(
                    f"runs[{index}] (run_id {entry.run_id!r})",
                    "its adjacency differs from runs[0]'s, and guarantees under different adjacencies do not compose",
                )
        if delta is not None and entries:
            smallest = min(entries, key=lambda entry: _population(entry.report) or math.inf)
            users = _population(smallest.report)
            if users is not None and delta * users >= 1:
                raise self.fail(
                    "delta (the total δ)",
                    f"{delta:g} is not below 1/n = 1/{users:,} of run "
                    f"{smallest.run_id!r}, where a guarantee means nothing",
                )
        return delta, entries

    def entry(self, data: Any, where: str) -> LedgerEntry:
        data = self.keys(data, where, _ENTRY_KEYS, _ENTRY_KEYS | {"deny_list"})
        run_id = self.text(data["run_id"], f"{where}.run_id")
        where = f"{where} (run_id {run_id!r})"
        recorded_at = self.text(data["recorded_at"], f"{where}.recorded_at")
        try:
            time.strptime(recorded_at, TIME_FORMAT)
        except ValueError:
            raise self.fail(
                f"{where}.recorded_at", f"must be a UTC time like 2026-01-31T23:59:59Z, got {recorded_at!r}"
            ) from None
        report = self.report(data["report"], f"{where}.report")
        deny_list = data.get("deny_list")
        return LedgerEntry(
            run_id, recorded_at, report, None if deny_list is None else self.deny_list(deny_list, f"{where}.deny_list")
        )

    def deny_list(self, data: Any, where: str) -> dict[str, Any]:
        """The source of a run's deny list: its kind, path, SHA-256, item count, and the previous run."""
        data = self.keys(
            data, where, {"kind", "path", "sha256", "items"}, {"kind", "path", "sha256", "items", "previous_run_id"}
        )
        if data["kind"] not in _DENY_LIST_KINDS:
            raise self.fail(f"{where}.kind", f"must be one of {list(_DENY_LIST_KINDS)}, got {json.dumps(data['kind'])}")
        self.text(data["path"], f"{where}.path")
        digest = data["sha256"]
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise self.fail(f"{where}.sha256", f"must be 64 lowercase hexadecimal digits, got {json.dumps(digest)}")
        self.number(
            data["items"],
            f"{where}.items",
            "an integer >= 1",
            lambda value: isinstance(data["items"], int) and value >= 1,
        )
        if "previous_run_id" in data:
            self.text(data["previous_run_id"], f"{where}.previous_run_id")
        return dict(data)

    def report(self, data: Any, where: str) -> PrivacyReport:
        data = self.keys(data, where, {"epsilon", "delta", "parameters", *_REPORT_TEXT_KEYS}, _REPORT_KEYS)
        texts: dict[str, Any] = {key: self.text(data[key], f"{where}.{key}") for key in _REPORT_TEXT_KEYS}
        if texts["model"].startswith(NO_GUARANTEE):
            raise self.fail(f"{where}.model", f"a run without a guarantee cannot be composed: {texts['model']!r}")
        parameters = data["parameters"]
        if not isinstance(parameters, dict):
            raise self.fail(f"{where}.parameters", f"must be a JSON object, got {type(parameters).__name__}")
        epsilon = self.number(
            data["epsilon"], f"{where}.epsilon", "a finite number > 0", lambda value: math.isfinite(value) and value > 0
        )
        users = parameters.get("n_users")
        if users is not None and (isinstance(users, bool) or not isinstance(users, int) or users < 1):
            raise self.fail(f"{where}.parameters.n_users", f"must be an integer >= 1, got {json.dumps(users)}")
        if users is None:
            delta = self.number(data["delta"], f"{where}.delta", "a number in [0, 1)", lambda value: 0 <= value < 1)
        else:
            delta = self.number(
                data["delta"],
                f"{where}.delta",
                f"a number in [0, 1/n) = [0, {1 / users:.3g}) for n_users = {users:,}",
                lambda value: 0 <= value and value * users < 1,
            )
        self.derived(texts["model"], parameters, epsilon, delta, where)
        return PrivacyReport(epsilon=epsilon, delta=delta, parameters=parameters, **texts)

    def derived(self, model: str, parameters: dict[str, Any], epsilon: float, delta: float, where: str) -> None:
        """Refuse a run whose (ε, δ) is not what its own parameters give (:data:`ACCOUNTANTS`)."""
        accountant = ACCOUNTANTS.get(model)
        if accountant is None:
            raise self.fail(
                f"{where}.model",
                f"no accounting derives the guarantee of model {model!r} from its "
                f"parameters, so its (ε, δ) cannot be checked; known models: {sorted(ACCOUNTANTS)}",
            )
        try:
            derived_epsilon, derived_delta = accountant(parameters)
        except InputError as error:
            raise self.fail(f"{where}.parameters", f"do not state the run's mechanism ({error})") from None
        if not (_agrees(epsilon, derived_epsilon) and _agrees(delta, derived_delta)):
            raise self.fail(
                where,
                f"ε = {epsilon!r}, δ = {delta!r} disagree with its own parameters, which "
                f"give ε = {derived_epsilon!r}, δ = {derived_delta!r} ({model}); the entry was edited "
                "or damaged",
            )


def _agrees(stated: float, derived: float) -> bool:
    return math.isclose(stated, derived, rel_tol=DERIVATION_TOLERANCE, abs_tol=0.0)


def _population(report: PrivacyReport) -> int | None:
    """The population size a report's guarantee was stated for, when it says."""
    users = report.parameters.get("n_users")
    return users if isinstance(users, int) and not isinstance(users, bool) else None


def check_max_epsilon(max_epsilon: float | None) -> float | None:
    if max_epsilon is None:
        return None
    if (
        isinstance(max_epsilon, bool)
        or not isinstance(max_epsilon, (int, float))
        or not (math.isfinite(max_epsilon) and max_epsilon > 0)
    ):
        raise InputError(f"privacy.max_epsilon: must be a finite number > 0, got {max_epsilon!r}")
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
            raise InputError(f"delta (the ledger's total δ): must be in the open interval (0, 1), got {delta!r}")
        self._delta = None if delta is None else float(delta)

    # reading ------------------------------------------------------------------
    def _load(self) -> tuple[float | None, list[LedgerEntry]]:
        try:
            status = self.path.stat()
        except FileNotFoundError:
            return self._delta, []
        except OSError as error:
            raise LedgerError(f"privacy.ledger {str(self.path)!r}: cannot be read ({error.strerror})") from None
        if not stat.S_ISREG(status.st_mode):
            raise LedgerError(
                f"privacy.ledger {str(self.path)!r}: not a regular file; name a JSON file (created if absent)"
            )
        if status.st_size > MAX_LEDGER_BYTES:
            raise LedgerError(
                f"privacy.ledger {str(self.path)!r}: {status.st_size:,} bytes, more than a ledger's "
                f"{MAX_LEDGER_BYTES:,}; the file is left as is"
            )
        reader = _Reader(self.path)
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as error:
            raise reader.fail("the document", f"not a readable privacy ledger ({error})") from None
        stored, entries = reader.document(data)
        if self._delta is not None and stored != self._delta:
            raise LedgerError(
                f"delta (the ledger's total δ): the ledger {str(self.path)!r} states its ε at "
                f"δ = {'2 Σ δ_i' if stored is None else f'{stored:g}'}, got {self._delta:g}"
            )
        return stored, entries

    @property
    def entries(self) -> list[LedgerEntry]:
        return self._load()[1]

    def chain(self, run_id: str) -> list[LedgerEntry]:
        """The charged runs that led to ``run_id`` through deny lists taken from earlier runs' results
        folders, first run first, ending with ``run_id``'s own entry."""
        entries = {entry.run_id: entry for entry in self.entries}
        if run_id not in entries:
            raise LedgerError(f"run_id: {run_id!r} is not charged in {str(self.path)!r}")
        chain = [entries[run_id]]
        while (previous := chain[-1].previous_run_id) is not None and previous in entries:
            if any(entry.run_id == previous for entry in chain):
                break  # a hand-edited loop: each run once
            chain.append(entries[previous])
        return chain[::-1]

    def chain_summary(self, run_id: str, delta: float | None = None) -> CompositionSummary:
        """The cumulative guarantee of :meth:`chain` ``(run_id)``, composed as any runs are (at the
        ledger's total δ unless ``delta`` is given)."""
        stored, _ = self._load()
        return compose(_guarantees(self.chain(run_id)), delta if delta is not None else stored)

    def summary(self, delta: float | None = None) -> CompositionSummary:
        """The cumulative guarantee of the charged runs (at ``delta`` if given)."""
        stored, entries = self._load()
        return compose(_guarantees(entries), delta if delta is not None else stored)

    def preview(self, report: PrivacyReport) -> CompositionSummary:
        """The cumulative guarantee if ``report``'s run were charged now (nothing is written; a ledger
        that could not be written is refused now, as charging would refuse it)."""
        _check_chargeable(report)
        self._check_writable()
        stored, entries = self._load()
        _check_adjacency(entries, report)
        return compose([*_guarantees(entries), (report.epsilon, report.delta)], stored)

    # writing ------------------------------------------------------------------
    def record(
        self,
        report: PrivacyReport,
        run_id: str,
        max_epsilon: float | None = None,
        deny_list: Mapping[str, Any] | None = None,
    ) -> PrivacyReport:
        """Charge a run; returns ``report`` with the cumulative guarantee attached.  ``deny_list``:
        the source of the run's deny list (:meth:`fedhh.data.deny_list.DenyList.source`), kept in
        its entry.

        Refused, with the ledger unchanged, when ``run_id`` is already charged,
        when the run's adjacency differs from the ledger's runs, when the run
        or the cumulative guarantee would not be a guarantee (no finite ε, or
        δ not below ``1/n``), or (with ``max_epsilon``) when the cumulative ε
        would exceed the budget.
        """
        budget = check_max_epsilon(max_epsilon)
        _check_chargeable(report)
        if not isinstance(run_id, str) or not run_id:
            raise InputError(f"run_id: must be a non-empty string, got {run_id!r}")
        entry = LedgerEntry(
            run_id, time.strftime(TIME_FORMAT, time.gmtime()), report, None if deny_list is None else dict(deny_list)
        )
        _Reader(self.path).entry(entry.to_dict(), "the run to charge")  # the checks a stored entry gets
        with self._locked():
            stored, entries = self._load()
            if any(entry.run_id == run_id for entry in entries):
                raise LedgerError(f"run_id: {run_id!r} is already charged in {str(self.path)!r}")
            _check_adjacency(entries, report)
            after = compose([*_guarantees(entries), (report.epsilon, report.delta)], stored)
            _check_total_delta(self.path, [*entries, entry], after)
            if budget is not None and not after.epsilon <= budget:
                raise BudgetExceededError(run_id, budget, compose(_guarantees(entries), stored), after)
            entries.append(entry)
            self._write(stored, entries, after)
        return report.with_composition(after)

    def _check_writable(self) -> None:
        """Refuse a ledger whose folder fedhh cannot create or write in (the ledger, its lock and its
        temporary file live there), by trying: permission bits do not tell (root, read-only mounts,
        ``/proc``).  Whatever the trial creates is removed at once."""
        folder = self.path.parent
        existing = next(parent for parent in (folder, *folder.parents) if os.path.lexists(parent))
        if not existing.is_dir():
            raise self._unwritable(f"{str(existing)!r} is not a folder")
        try:
            if existing == folder:
                handle, trial = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
                os.close(handle)
                os.unlink(trial)
            else:
                os.rmdir(tempfile.mkdtemp(prefix=".fedhh-ledger-", dir=existing))
        except OSError as error:
            raise self._unwritable(
                f"cannot {'write in' if existing == folder else 'create folders in'} "
                f"{str(existing)!r} ({error.strerror})"
            ) from None

    def _unwritable(self, problem: str) -> LedgerError:
        return LedgerError(
            f"privacy.ledger {str(self.path)!r}: {problem}; name a JSON file in a folder "
            "fedhh can write to (created if absent)"
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock on ``<ledger>.lock`` for one read-modify-write."""
        self._check_writable()
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(lock_path, "a+")
        except OSError as error:
            raise self._unwritable(f"cannot create {str(lock_path)!r} ({error.strerror})") from None
        with lock:
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


def _check_total_delta(path: Path, entries: list[LedgerEntry], total: CompositionSummary) -> None:
    """The cumulative guarantee must hold at a δ below ``1/n`` too."""
    sizes = [users for entry in entries if (users := _population(entry.report)) is not None]
    if sizes and total.delta * min(sizes) >= 1:
        raise LedgerError(
            f"privacy.ledger {str(path)!r}: with this run the runs' cumulative guarantee would be stated at "
            f"δ = {total.delta:.3g}, not below 1/n = 1/{min(sizes):,}, where it means nothing; start a new "
            "ledger with a smaller total δ, or charge fewer runs to this population"
        )


def _check_chargeable(report: PrivacyReport) -> None:
    """A run without a guarantee (the exact baseline, parameters outside a theorem) has no (ε, δ) to
    compose: it is refused, never recorded as an infinite ε that would end the ledger's budget."""
    if not report.has_guarantee:
        raise LedgerError(
            f"privacy.ledger: this run has no privacy guarantee ({report.model}; ε = {report.epsilon:g}, "
            f"δ = {report.delta:g}), so no ledger can charge it and no budget covers it; leave privacy.ledger "
            "empty to run it"
        )


def _check_adjacency(entries: list[LedgerEntry], report: PrivacyReport) -> None:
    """Guarantees compose only under one neighbouring relation."""
    if entries and entries[0].report.adjacency != report.adjacency:
        raise LedgerError(
            f"adjacency: the ledger's runs are private under {entries[0].report.adjacency!r} but this "
            f"run under {report.adjacency!r}; their ε do not add up, use a separate ledger"
        )
