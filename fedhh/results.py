"""Results folders: written whole or not at all, and never over anything fedhh did not write.

Every command that writes files writes them through one of two claimed
folders, which share the rules below: a run's results, a built population,
a report (:class:`ResultsFolder`, written whole at the end), or a sweep
(:class:`IncrementalFolder`, written file by file over a long job that may
stop and resume).

A run's results go to a folder that is *claimed* before the run starts and
*committed* when it ends (:class:`ResultsFolder`):

* Claiming checks everything that can be checked before any work: the path
  is not the working folder, one of its parents, the home or the root
  folder; it is a folder or does not exist yet, and not a symbolic link
  (:func:`output_path`); a folder is empty, or holds
  a previous fedhh result that the caller asked to replace; files can be
  created where the results will be written.  A refusal is an
  :class:`OutputError` (a user-input error: exit status 2 on the command
  line), raised before any round runs or any privacy budget is charged.
* A claim holds an exclusive lock (``flock``) on a hidden file beside the
  folder for as long as the run lasts, so a second writer of the same path
  is refused at once, told which process holds it; the kernel drops the
  lock when a process dies, so a crash never blocks later runs.
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

from .errors import InputError
from .version import __version__

MARKER = ".fedhh-results"  # in every results folder fedhh writes: the files it wrote
MARKER_FORMAT = "fedhh-results-folder"
STAGING_SUFFIX = ".fedhh-staging"
LOCK_SUFFIX = ".fedhh-lock"
REPLACED_SUFFIX = ".fedhh-replaced"
TEMPORARY_SUFFIX = ".fedhh-tmp"  # a file being written, renamed over its place when whole
INCREMENTAL = "incremental"  # the marker state of a folder written file by file
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
    return (
        to_json(
            {
                "format": MARKER_FORMAT,
                "state": state,
                **({"kind": kind} if kind is not None else {}),
                "files": files,
                "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "fedhh": __version__,
            }
        )
        + "\n"
    )


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


def output_path(path: str | Path, field: str = "--output") -> Path:
    """``path`` made absolute (``..`` folded into its parent, symbolic links kept), if fedhh may write
    a folder of its own there; else an :class:`OutputError` naming ``field``.

    The rules every command that writes follows, checked before any work:
    never the root, the home or the current folder, nor a parent of one
    of them (they hold the user's own files); never a symbolic link (the
    folder itself must be named) nor anything that is not a folder.  What
    the folder may already hold is the writer's own rule
    (:class:`ResultsFolder`, :class:`IncrementalFolder`).
    """
    absolute = Path(os.path.abspath(path))
    role = _protected_role(absolute)
    if role is not None:
        raise OutputError(
            f"{field}: {absolute} is {role}; fedhh writes results into a folder of their own "
            f"and never replaces this one (e.g. {absolute / 'fedhh-results'})"
        )
    _check_kind(absolute, field)
    return absolute


def _protected_role(path: Path) -> str | None:
    """Why ``path`` must never be a results folder: it holds the user's working files."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a loop of symbolic links: refused as a link later
        return None
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


def _check_kind(path: Path, field: str) -> None:
    """Refuse a ``path`` that exists and is not a folder, or is a symbolic link, or cannot be made."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:
        blocker = next(parent for parent in path.parents if os.path.lexists(parent))
        raise OutputError(f"{field}: {blocker} is not a folder, so {path} cannot be made") from None
    except OSError as error:
        raise OutputError(f"{field}: cannot inspect {path} ({error.strerror})") from None
    if stat.S_ISLNK(mode):
        raise OutputError(f"{field}: {path} is a symbolic link; name the folder itself")
    if not stat.S_ISDIR(mode):
        raise OutputError(f"{field}: {path} exists and is not a folder; choose a folder")


def _make_parents(path: Path, field: str) -> list[Path]:
    """Create the missing parents of ``path``; the folders created, outermost first."""
    missing: list[Path] = []
    parent = path.parent
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{field}: {parent} is not a folder, so {path} cannot be made")
    created: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except OSError as error:
            _remove_made(created)
            raise OutputError(f"{field}: cannot create the folder {folder} ({error.strerror})") from None
        created.append(folder)
    return created


def _remove_made(created: list[Path]) -> None:
    """Remove the folders a claim made (outermost first in ``created``) while they are empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise
            break  # something else lives there now: keep it and what holds it


class _FolderLock:
    """An exclusive ``flock`` on a hidden file beside a folder, holding the locker's process id.

    The kernel drops the lock when its process dies, so a crash never
    blocks later writers; a refused writer is told which process holds it.
    """

    def __init__(self, folder: Path, field: str) -> None:
        self.folder = folder
        self.field = field
        self.path = folder.parent / f".{folder.name}{LOCK_SUFFIX}"
        self._fd: int | None = None

    def acquire(self) -> None:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as error:
                raise OutputError(f"{self.field}: cannot write in {self.folder.parent} ({error.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _lock_holder(fd)
                os.close(fd)
                raise OutputTakenError(f"{self.field}: another fedhh run is writing {self.folder}{holder}") from None
            try:  # the holder before us may have removed the file we opened: lock the current one
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                with contextlib.suppress(OSError):  # who holds it, for the writers refused meanwhile
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
                self._fd = fd
                return
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            os.close(self._fd)  # drops the lock
            self._fd = None


def _lock_holder(fd: int) -> str:
    """`` (process 1234 holds it)``: the process a lock file names, or nothing if it names none yet."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode("ascii").strip())
        return f" (process {pid} holds it)"
    return ""


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
        self._lock = _FolderLock(self.path, field)
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
    ) -> ResultsFolder:
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
    def claim_new(cls, base: str | Path, *, field: str = "output") -> ResultsFolder:
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
        output_path(self.path, self.field)
        self._created = _make_parents(self.path, self.field)
        self._lock.acquire()
        self._discard_stale_staging()
        self._mode = self._inspect(must_be_new)
        inside, prefix = (self.path, "") if self._mode == "empty" else (self.path.parent, self.path.name)
        try:
            self._staging = _make_hidden_folder(inside, prefix, STAGING_SUFFIX)
            (self._staging / MARKER).write_text(_marker_text("staging", []), encoding="utf-8")
        except OSError as error:
            raise OutputError(f"{self.field}: cannot write in {inside} ({error.strerror})") from None

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
        _check_kind(self.path, self.field)
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
        if marker is not None and marker["state"] == INCREMENTAL:
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
            entry.name
            for entry in entries
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
        self,
        result: dict[str, Any] | None,
        extra_writers: list[Writer] | None = None,
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
            f"{self.field}: {self.path} {what_happened}; fedhh did not touch it. The result of this run is in {staging}"
        )

    # -- releasing --------------------------------------------------------------------------

    def release(self) -> None:
        """Give the claim up: what was not committed is removed, as are the lock and new parents."""
        if self._staging is not None:
            with contextlib.suppress(OSError):
                _discard_staging(self._staging)
            self._staging = None
        self._lock.release()
        if not self._committed:
            _remove_made(self._created)
        self._created = []

    def __enter__(self) -> ResultsFolder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


FileWriter = Callable[[Any], Any]  # writes a file's content to a binary handle


class IncrementalFolder:
    """A folder fedhh fills file by file over a long job that may stop and resume (a sweep).

    Claimed by the rules of every output (:func:`output_path`, the lock
    beside the folder, held until :meth:`release`), it is new, empty, or
    one the same kind of job wrote before, holding nothing else: its marker
    (state ``incremental``, the ``kind``, the files written so far), those
    files, the owner's ``subfolders`` of regular files whose names match
    their pattern, and the ``nested`` folders another fedhh command wrote
    there (a sweep's report).  Anything else, a symbolic link included, is
    refused: fedhh never writes beside what it did not write.

    Nothing is created before the first write, so a job refused after the
    claim leaves nothing behind.  Each file is written to a hidden
    temporary name and renamed over its place (:func:`write_replacing`),
    so a job stopped at any instant (``kill -9``, a full disk) leaves whole
    files only, and a name is never written through a symbolic link.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        kind: str,
        field: str,
        subfolders: dict[str, re.Pattern[str]],
        nested: tuple[str, ...],
    ) -> None:
        self.path = Path(os.path.abspath(path))
        self.kind = kind
        self.field = field
        self.subfolders = subfolders
        self.nested = nested
        self.resumed = False  # whether the folder holds an earlier run of the job
        self._files: list[str] = []
        self._started = False  # the folder, its marker and its subfolders exist
        self._created: list[Path] = []
        self._lock = _FolderLock(self.path, field)

    @classmethod
    def claim(
        cls,
        path: str | Path,
        *,
        kind: str,
        field: str = "--output",
        subfolders: dict[str, re.Pattern[str]] | None = None,
        nested: tuple[str, ...] = (),
    ) -> IncrementalFolder:
        """Check and lock ``path`` for a job of ``kind``, or raise :class:`OutputError`."""
        folder = cls(path, kind=kind, field=field, subfolders=subfolders or {}, nested=nested)
        try:
            output_path(folder.path, field)
            folder._created = _make_parents(folder.path, field)
            folder._lock.acquire()
            folder._inspect()
        except BaseException:
            folder.release()
            raise
        return folder

    def _inspect(self) -> None:
        _check_kind(self.path, self.field)
        if not os.path.lexists(self.path):
            return
        try:
            entries = list(os.scandir(self.path))
        except OSError as error:
            raise OutputError(f"{self.field}: cannot read the folder {self.path} ({error.strerror})") from None
        if not entries:
            return  # the user's empty folder: filled in place
        marker = read_marker(self.path)
        if marker is None:
            raise OutputError(
                f"{self.field}: {self.path} is not empty and holds no {self.kind} manifest (it holds "
                f"{_describe([entry.name for entry in entries])}); fedhh writes a {self.kind} only into a new or "
                f"empty folder, or into one where it wrote an earlier {self.kind}"
            )
        if marker["state"] != INCREMENTAL or marker.get("kind") != self.kind:
            what = marker.get("kind") or "result"
            raise OutputError(
                f"{self.field}: {self.path} holds a fedhh {what}, not a {self.kind}; choose a new or empty folder"
            )
        self._files = list(marker["files"])
        stale: list[Path] = []
        foreign: list[str] = []
        for entry in entries:
            foreign.extend(self._foreign(entry, stale))
        if foreign:
            raise OutputError(
                f"{self.field}: {self.path} holds a fedhh {self.kind} and files fedhh did not write "
                f"({_describe(foreign)}); fedhh never writes beside them: move them away or choose a new folder"
            )
        for path in stale:  # files a stopped job was writing (the lock says none is running)
            with contextlib.suppress(OSError):
                path.unlink()
        self.resumed = True

    def _foreign(self, entry: os.DirEntry[str], stale: list[Path]) -> list[str]:
        """The names under ``entry`` that fedhh did not write here (none if all is fedhh's)."""
        name = entry.name
        if name == MARKER or (name in self._files and entry.is_file(follow_symlinks=False)):
            return []
        if _TEMPORARY.fullmatch(name) and entry.is_file(follow_symlinks=False):
            stale.append(Path(entry.path))
            return []
        if name in self.subfolders and entry.is_dir(follow_symlinks=False):
            foreign = []
            try:
                inside = list(os.scandir(entry.path))
            except OSError as error:
                raise OutputError(f"{self.field}: cannot read the folder {entry.path} ({error.strerror})") from None
            for inner in inside:
                if not inner.is_file(follow_symlinks=False):
                    foreign.append(f"{name}/{inner.name}")
                elif _TEMPORARY.fullmatch(inner.name):
                    stale.append(Path(inner.path))
                elif not self.subfolders[name].fullmatch(inner.name):
                    foreign.append(f"{name}/{inner.name}")
            return foreign
        if (
            name in self.nested
            and entry.is_dir(follow_symlinks=False)
            and (marked_files(Path(entry.path)) is not None or _empty(entry.path))
        ):
            return []
        if any(_claim_in_progress(nested, name) for nested in self.nested):
            return []  # another fedhh command writing its nested folder right now
        return [name]

    def write(self, name: str, write: FileWriter, subfolder: str | None = None) -> Path:
        """Write ``name`` (in ``subfolder``, one of the owner's) through ``write(binary handle)``,
        replacing the previous file of that name whole; its path."""
        if not self._lock.held:
            raise RuntimeError(f"{self.path}: this claim is released")
        self._start()
        if subfolder is None:
            if name not in self._files:  # listed before it exists: a stop in between leaves no stray file
                self._files.append(name)
                self._write_marker()
            path = self.path / name
        else:
            if not self.subfolders[subfolder].fullmatch(name):
                raise ValueError(f"{name!r} is not a file name of {subfolder}/")
            path = self.path / subfolder / name
        write_replacing(path, write)
        return path

    def _start(self) -> None:
        """Create the folder, its marker and its subfolders, on the first write."""
        if self._started:
            return
        if not os.path.lexists(self.path):
            try:
                self.path.mkdir()
                self._created.append(self.path)
            except FileExistsError:
                self._inspect()  # made meanwhile: it must still be empty, or fedhh's
        self._write_marker()  # first: it says the folder is fedhh's
        for subfolder in self.subfolders:
            with contextlib.suppress(FileExistsError):
                (self.path / subfolder).mkdir()
        self._started = True

    def _write_marker(self) -> None:
        text = _marker_text(INCREMENTAL, sorted(self._files), self.kind).encode("utf-8")
        write_replacing(self.path / MARKER, lambda handle: handle.write(text))

    def release(self) -> None:
        """Give the lock up; parent folders made for a job that wrote nothing are removed."""
        self._lock.release()
        if self.path not in self._created:
            _remove_made(self._created)
        self._created = []

    def __enter__(self) -> IncrementalFolder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


def _empty(folder: str) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False


_TEMPORARY = re.compile(rf"\..+\.[0-9a-f]{{8}}{re.escape(TEMPORARY_SUFFIX)}")


def _claim_in_progress(name: str, entry: str) -> bool:
    """Whether ``entry`` is a hidden file or folder a :class:`ResultsFolder` claim of ``name`` makes beside it."""
    stem = re.escape(name)
    return bool(
        re.fullmatch(
            rf"\.{stem}{re.escape(LOCK_SUFFIX)}|\.{stem}\.[0-9a-f]{{8}}({re.escape(STAGING_SUFFIX)}|{re.escape(REPLACED_SUFFIX)})",
            entry,
        )
    )


def write_replacing(path: Path, write: FileWriter) -> None:
    """Write ``path`` through ``write(binary handle)`` into a new hidden file beside it, then rename
    that over ``path``: readers see the old file or the new one, whole, and a symbolic link at
    ``path`` is replaced, never followed.  A failure (a full disk) removes the partial file."""
    temporary = _hidden_name(path.parent, path.name, TEMPORARY_SUFFIX)
    try:
        with open(temporary, "xb") as handle:  # exclusive: never through a link planted there
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


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
    return [
        Path(entry.path) for entry in entries if pattern.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)
    ]


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
