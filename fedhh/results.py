"""Results folders: written whole or not at all, and never over anything fedhh did not write.

A run's results go to a folder that is *claimed* before the run starts and
*committed* when it ends (:class:`ResultsFolder`):

* Claiming checks everything that can be checked before any work: the path
  is not the working folder, one of its parents, the home or the root
  folder; it is a folder or does not exist yet; a folder is empty, or holds
  a previous fedhh result that the caller asked to replace; files can be
  created where the results will be written.  A refusal is an
  :class:`OutputError` (a user-input error: exit status 2 on the command
  line), raised before any round runs or any privacy budget is charged.
* A claim holds an exclusive lock (``flock``) on a hidden file beside the
  folder for as long as the run lasts, so a second writer of the same path
  is refused at once; the kernel drops the lock when a process dies, so a
  crash never blocks later runs.
* Committing writes every file into a hidden staging folder and moves it
  into place at the end, so a reader sees the complete results folder or
  none; a run that fails or is interrupted leaves nothing behind (the
  staging folder, the lock file and any parent folder the claim created
  are removed).
* A folder fedhh wrote carries a marker, :data:`MARKER`, listing the files
  it wrote (and, for some, what kind of folder it is: a sweep's report).
  Only such a folder, holding nothing but those files, is ever replaced,
  and only on request (``overwrite``) or, for a folder of a given kind,
  by the command that writes that kind; what fedhh removes is always a
  file it listed, never a whole tree.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from . import __version__
from .errors import InputError

MARKER = ".fedhh-results"  # in every results folder fedhh writes: the files it wrote
MARKER_FORMAT = "fedhh-results-folder"
STAGING_SUFFIX = ".fedhh-staging"
LOCK_SUFFIX = ".fedhh-lock"
REPLACED_SUFFIX = ".fedhh-replaced"
RESULT_FILE = "result.json"
MAX_NAME_ATTEMPTS = 1000  # unique default names: base, base-2, ..., base-1000

LOGGER = logging.getLogger(__name__)

Writer = Callable[[Path], None]


class OutputError(InputError):
    """A results folder that cannot, or must not, be written."""


class OutputTakenError(OutputError):
    """The path holds a result already, or another run is writing it."""


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _finite(value: Any) -> Any:
    """JSON has no infinity: write it as the string "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json(document: dict[str, Any]) -> str:
    return json.dumps(_finite(document), indent=2, ensure_ascii=False, default=_json_default)


# -- the marker ---------------------------------------------------------------------------


def _marker_text(state: str, files: list[str], kind: str | None = None) -> str:
    return to_json({
        "format": MARKER_FORMAT,
        "state": state,
        **({"kind": kind} if kind is not None else {}),
        "files": files,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fedhh": __version__,
    }) + "\n"


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a folder fedhh wrote, in whatever state, or ``None`` if ``folder`` carries no valid one."""
    marker = folder / MARKER
    try:
        if not stat.S_ISREG(os.lstat(marker).st_mode):
            return None
        document = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("format") != MARKER_FORMAT:
        return None
    files = document.get("files")
    if not isinstance(files, list) or not all(isinstance(name, str) and _plain_name(name) for name in files):
        return None
    if not isinstance(document.get("kind", ""), str) or not isinstance(document.get("state"), str):
        return None
    return document


def marked_files(folder: Path, state: str = "complete") -> list[str] | None:
    """The files a fedhh folder's marker lists, or ``None`` if ``folder`` carries no valid marker in ``state``."""
    document = read_marker(folder)
    if document is None or document["state"] != state:
        return None
    return list(document["files"])


def _plain_name(name: str) -> bool:
    """A file name directly inside a folder (no separator, not ``.``/``..``, not the marker)."""
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..", MARKER)


def _remove_listed(folder: Path, files: list[str]) -> bool:
    """Remove the listed regular files, the marker, then the folder if nothing else is left."""
    for name in [*files, MARKER]:
        path = folder / name
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                path.unlink()
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def remove_result_folder(folder: str | Path) -> None:
    """Remove a complete folder fedhh wrote (a run's results, a built population): the files its
    marker lists, the marker, then the folder; anything else there is left, and reported."""
    folder = Path(folder)
    files = marked_files(folder)
    if files is None:
        raise OutputError(f"{folder}: not a folder fedhh wrote (no {MARKER} marker); nothing removed")
    if not _remove_listed(folder, files):
        raise OutputError(f"{folder}: holds files fedhh did not write; they were left there")


def _discard_staging(staging: Path) -> None:
    """Remove a staging folder fedhh created (it holds only regular files fedhh wrote)."""
    if marked_files(staging, state="staging") is None:
        return  # not ours, or already gone
    names = [entry.name for entry in os.scandir(staging) if entry.is_file(follow_symlinks=False)]
    _remove_listed(staging, [name for name in names if name != MARKER])


# -- where a path stands ----------------------------------------------------------------


def _protected_role(path: Path) -> str | None:
    """Why ``path`` must never be a results folder: it holds the user's working files."""
    resolved = path.resolve()
    if resolved == Path(resolved.anchor):
        return "the root folder"
    with contextlib.suppress(OSError):
        if resolved == Path.cwd().resolve():
            return "the current folder"
        if Path.cwd().resolve().is_relative_to(resolved):
            return "a parent of the current folder"
    with contextlib.suppress(RuntimeError, OSError):  # no home folder known
        home = Path.home().resolve()
        if resolved == home:
            return "the home folder"
        if home.is_relative_to(resolved):
            return "a parent of the home folder"
    return None


def _describe(names: list[str], shown: int = 5) -> str:
    listed = ", ".join(repr(name) for name in sorted(names)[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


class ResultsFolder:
    """A results folder claimed for one run: checked and locked now, written by :meth:`commit`.

    Use it as a context manager, so that a run that fails (or is
    interrupted) releases the claim and leaves nothing behind::

        with ResultsFolder.claim("results/day-1") as folder:
            result = run(...)
            folder.commit(result, writers)
    """

    def __init__(
        self, path: str | Path, *, field: str, overwrite: bool, overwrite_hint: str, kind: str | None = None
    ) -> None:
        self.path = Path(os.path.abspath(path))  # ".." folded into its parent, symlinks kept
        self.field = field
        self.overwrite = overwrite
        self.overwrite_hint = overwrite_hint
        self.kind = kind
        self._created: list[Path] = []  # parent folders this claim made, outermost first
        self._lock_fd: int | None = None
        self._lock_path = self.path.parent / f".{self.path.name}{LOCK_SUFFIX}"
        self._mode: Literal["absent", "empty", "previous"] = "absent"
        self._previous: list[str] = []
        self._staging: Path | None = None
        self._committed = False

    # -- claiming ---------------------------------------------------------------------------

    @classmethod
    def claim(
        cls,
        path: str | Path,
        *,
        overwrite: bool = False,
        field: str = "output",
        overwrite_hint: str = "--overwrite",
        must_be_new: bool = False,
        kind: str | None = None,
    ) -> "ResultsFolder":
        """Check and lock ``path`` for one run's results, or raise :class:`OutputError`.

        ``field`` names the setting in messages (``--output``, ``output-dir``),
        ``overwrite_hint`` how to ask for a replacement.  ``must_be_new``
        refuses any existing path (:class:`OutputTakenError`), for names
        fedhh chooses itself.  ``kind`` names what the folder holds (``"report"``)
        in its marker; a claim with a kind replaces (given ``overwrite``)
        only a previous folder of that same kind.
        """
        folder = cls(path, field=field, overwrite=overwrite, overwrite_hint=overwrite_hint, kind=kind)
        try:
            folder._claim(must_be_new)
        except BaseException:
            folder.release()
            raise
        return folder

    @classmethod
    def claim_new(cls, base: str | Path, *, field: str = "output") -> "ResultsFolder":
        """Claim ``base``, or ``base-2``, ``base-3``, ... : the first name nothing holds or writes."""
        base = Path(base)
        for attempt in range(1, MAX_NAME_ATTEMPTS + 1):
            candidate = base if attempt == 1 else base.with_name(f"{base.name}-{attempt}")
            try:
                return cls.claim(candidate, field=field, must_be_new=True)
            except OutputTakenError:
                continue
        raise OutputError(f"{field}: {base} and {MAX_NAME_ATTEMPTS - 1} numbered variants are all taken; name a folder")

    def _claim(self, must_be_new: bool) -> None:
        role = _protected_role(self.path)
        if role is not None:
            raise OutputError(
                f"{self.field}: {self.path} is {role}; fedhh writes results into a folder of their own "
                f"and never replaces this one (e.g. {self.path / 'fedhh-results'})"
            )
        self._check_kind(self.path)
        self._make_parents()
        self._lock()
        self._discard_stale_staging()
        self._mode = self._inspect(must_be_new)
        inside, prefix = (self.path, "") if self._mode == "empty" else (self.path.parent, self.path.name)
        try:
            self._staging = _make_hidden_folder(inside, prefix, STAGING_SUFFIX)
            (self._staging / MARKER).write_text(_marker_text("staging", []), encoding="utf-8")
        except OSError as error:
            raise OutputError(f"{self.field}: cannot write in {inside} ({error.strerror})") from None

    def _check_kind(self, path: Path) -> None:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        except NotADirectoryError:
            blocker = next(parent for parent in path.parents if os.path.lexists(parent))
            raise OutputError(f"{self.field}: {blocker} is not a folder, so {path} cannot be made") from None
        except OSError as error:
            raise OutputError(f"{self.field}: cannot inspect {path} ({error.strerror})") from None
        if stat.S_ISLNK(mode):
            raise OutputError(f"{self.field}: {path} is a symbolic link; name the folder itself")
        if not stat.S_ISDIR(mode):
            raise OutputError(f"{self.field}: {path} exists and is not a folder; choose a folder")

    def _make_parents(self) -> None:
        missing: list[Path] = []
        parent = self.path.parent
        while not os.path.lexists(parent):
            missing.append(parent)
            parent = parent.parent
        if not parent.is_dir():
            raise OutputError(f"{self.field}: {parent} is not a folder, so {self.path} cannot be made")
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except OSError as error:
                raise OutputError(f"{self.field}: cannot create the folder {folder} ({error.strerror})") from None
            self._created.append(folder)

    def _lock(self) -> None:
        while True:
            try:
                fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as error:
                raise OutputError(f"{self.field}: cannot write in {self.path.parent} ({error.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputTakenError(f"{self.field}: another fedhh run is writing {self.path}") from None
            try:  # the holder before us may have removed the file we opened: lock the current one
                same = os.stat(self._lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd = fd
                return
            os.close(fd)

    def _discard_stale_staging(self) -> None:
        """Hidden folders of this path left by a crashed run (the lock says none is running)."""
        for folder in _hidden_folders(self.path.parent, self.path.name, STAGING_SUFFIX) + (
            _hidden_folders(self.path, "", STAGING_SUFFIX) if self.path.is_dir() else []
        ):
            with contextlib.suppress(OSError):
                _discard_staging(folder)
        for folder in _hidden_folders(self.path.parent, self.path.name, REPLACED_SUFFIX):
            listed = marked_files(folder)
            if listed is not None:
                with contextlib.suppress(OSError):
                    _remove_listed(folder, listed)

    def _inspect(self, must_be_new: bool) -> Literal["absent", "empty", "previous"]:
        self._check_kind(self.path)
        if not os.path.lexists(self.path):
            return "absent"
        if must_be_new:
            raise OutputTakenError(f"{self.field}: {self.path} exists")
        try:
            entries = list(os.scandir(self.path))
        except OSError as error:
            raise OutputError(f"{self.field}: cannot read the folder {self.path} ({error.strerror})") from None
        if not entries:
            return "empty"
        marker = read_marker(self.path)
        if marker is not None and marker["state"] != "complete":
            raise OutputError(
                f"{self.field}: {self.path} holds a fedhh {marker.get('kind') or 'folder'} that is written file by "
                "file; fedhh never replaces it: choose a new or empty folder"
            )
        listed = marked_files(self.path)
        if listed is None:
            raise OutputError(
                f"{self.field}: {self.path} is not empty and was not written by fedhh (it holds "
                f"{_describe([entry.name for entry in entries])}); fedhh never replaces such a folder: "
                "choose a new or empty folder"
            )
        if self.kind is not None and (marker or {}).get("kind") != self.kind:
            raise OutputError(
                f"{self.field}: {self.path} holds a fedhh result that is not a {self.kind}; fedhh replaces only "
                f"a previous {self.kind} there: choose a new or empty folder"
            )
        foreign = [
            entry.name for entry in entries
            if entry.name != MARKER and (entry.name not in listed or not entry.is_file(follow_symlinks=False))
        ]
        if foreign:
            raise OutputError(
                f"{self.field}: {self.path} holds a fedhh result and files fedhh did not write "
                f"({_describe(foreign)}); fedhh never replaces such a folder: choose a new or empty folder"
            )
        if not self.overwrite:
            raise OutputTakenError(
                f"{self.field}: {self.path} holds a previous fedhh result; {self.overwrite_hint} replaces it, "
                "or choose another folder"
            )
        self._previous = listed
        return "previous"

    # -- writing ----------------------------------------------------------------------------

    @property
    def staging_path(self) -> Path:
        """The hidden folder this claim writes into before :meth:`commit` puts it in place.

        Large outputs (a population's shard files) are streamed here while
        they are made, instead of being held until the commit; a claim that
        is released uncommitted removes them with the rest.
        """
        if self._staging is None or self._committed:
            raise RuntimeError(f"{self.path}: this claim is released or already committed")
        return self._staging

    def commit(
        self, result: dict[str, Any] | None, extra_writers: list[Writer] | None = None,
        document_name: str = RESULT_FILE,
    ) -> Path:
        """Write ``result`` as ``document_name`` (``result.json``) and what ``extra_writers`` add,
        with any file already written into :attr:`staging_path`, put them in place, release the claim.

        Each writer is called with the staging folder and writes regular
        files directly into it.  Returns the path of the document (of the
        folder when ``result`` is ``None``: the writers' files only).
        """
        if self._staging is None or self._committed:
            raise RuntimeError(f"{self.path}: this claim is released or already committed")
        staging = self._staging
        if result is not None:
            (staging / document_name).write_text(to_json(result) + "\n", encoding="utf-8")
        for writer in extra_writers or []:
            writer(staging)
        files = []
        for entry in os.scandir(staging):
            if entry.name == MARKER:
                continue
            if not entry.is_file(follow_symlinks=False):
                raise RuntimeError(f"a result writer left {entry.name!r}, which is not a regular file, in {staging}")
            files.append(entry.name)
        (staging / MARKER).write_text(_marker_text("complete", sorted(files), self.kind), encoding="utf-8")
        self._move_into_place(staging, sorted(files))
        self._committed = True
        self.release()
        return self.path / document_name if result is not None else self.path

    def _move_into_place(self, staging: Path, files: list[str]) -> None:
        if self._mode == "absent":
            if os.path.lexists(self.path):
                self._keep(staging, "appeared while the run was going")
            os.rename(staging, self.path)
        elif self._mode == "empty":
            others = [name for name in os.listdir(self.path) if name != staging.name]
            if others:
                self._keep(staging, f"was given files while the run was going ({_describe(others)})")
            for name in [*files, MARKER]:  # the marker last: it says the folder is complete
                try:
                    os.link(staging / name, self.path / name)  # never replaces an existing file
                except FileExistsError:
                    self._keep(staging, f"was given a file {name!r} while the run was going")
                (staging / name).unlink()
            staging.rmdir()
        else:
            if marked_files(self.path) != self._previous or set(os.listdir(self.path)) - {*self._previous, MARKER}:
                self._keep(staging, "changed while the run was going")
            replaced = _hidden_name(self.path.parent, self.path.name, REPLACED_SUFFIX)
            os.rename(self.path, replaced)
            os.rename(staging, self.path)
            if not _remove_listed(replaced, self._previous):
                LOGGER.warning("kept %s: it gained files fedhh did not write while it was being replaced", replaced)
        self._staging = None

    def _keep(self, staging: Path, what_happened: str) -> None:
        self._staging = None  # never discard a finished result
        raise OutputError(
            f"{self.field}: {self.path} {what_happened}; fedhh did not touch it. "
            f"The result of this run is in {staging}"
        )

    # -- releasing --------------------------------------------------------------------------

    def release(self) -> None:
        """Give the claim up: what was not committed is removed, as are the lock and new parents."""
        if self._staging is not None:
            with contextlib.suppress(OSError):
                _discard_staging(self._staging)
            self._staging = None
        if self._lock_fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._lock_path)
            os.close(self._lock_fd)  # drops the lock
            self._lock_fd = None
        if not self._committed:
            for folder in reversed(self._created):
                try:
                    folder.rmdir()
                except OSError as error:
                    if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                        raise
                    break  # something else lives there now: keep it and what holds it
        self._created = []

    def __enter__(self) -> "ResultsFolder":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


def _hidden_name(folder: Path, name: str, suffix: str) -> Path:
    """``folder/.name.<8 hex digits><suffix>``, a name nothing holds right now."""
    while True:
        stem = f".{name}." if name else "."
        candidate = folder / f"{stem}{secrets.token_hex(4)}{suffix}"
        if not os.path.lexists(candidate):
            return candidate


def _make_hidden_folder(folder: Path, name: str, suffix: str) -> Path:
    while True:
        candidate = _hidden_name(folder, name, suffix)
        try:
            candidate.mkdir(mode=0o755)
        except FileExistsError:
            continue
        return candidate


def _hidden_folders(folder: Path, name: str, suffix: str) -> list[Path]:
    """The folders :func:`_hidden_name` makes for ``name`` in ``folder`` (exactly those)."""
    stem = rf"\.{re.escape(name)}\." if name else r"\."
    pattern = re.compile(rf"{stem}[0-9a-f]{{8}}{re.escape(suffix)}")
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return [Path(entry.path) for entry in entries if pattern.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)]


def write_result(
    output: str | Path | ResultsFolder,
    result: dict[str, Any],
    extra_writers: list[Writer] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``result.json`` (and anything ``extra_writers`` add) as one results folder.

    ``output`` is a folder claimed earlier, or a path claimed now: a path
    that holds a previous fedhh result is replaced only with ``overwrite``,
    and anything else fedhh did not write is never touched
    (:class:`OutputError`).
    """
    if isinstance(output, ResultsFolder):
        return output.commit(result, extra_writers)
    with ResultsFolder.claim(output, overwrite=overwrite) as folder:
        return folder.commit(result, extra_writers)
