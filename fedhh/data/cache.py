"""fedhh's cache folder: slow, deterministic preparations kept between processes.

Every ``fedhh run`` on wordfreq would import wordfreq and filter its whole
list (321,180 English words) to get the same candidates; a study of hundreds
of runs would pay it every time.  An entry here
holds such a result as numpy arrays, named by a digest of everything it
depends on (its *key*: versions and parameters), and stores that key to be
checked on reading: a changed input gives another name, never a stale entry.

The folder is ``$FEDHH_CACHE_DIR`` if set (empty: no cache), else
``$XDG_CACHE_HOME/fedhh``, else ``~/.cache/fedhh``.  Writing is safe
alongside other processes and never touches a file fedhh did not create:
an entry is written to a fresh temporary file (created exclusively) and
hard-linked under its name, which fails, leaving what is there, if the name
exists.  The cache is only an optimisation: a folder that cannot be
created or written, or an entry that cannot be read or does not hold its
key, is ignored, and the caller computes the result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

CACHE_VARIABLE = "FEDHH_CACHE_DIR"
MAX_ENTRY_BYTES = 1 << 28  # an entry is a few MB; anything larger is not one of ours
TEXT_SEPARATOR = "\x00"  # between the texts of a list stored as one UTF-8 array


def cache_folder() -> Path | None:
    """Where entries live (``None``: caching is off)."""
    chosen = os.environ.get(CACHE_VARIABLE)
    if chosen is not None:
        return Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fedhh"


def entry_path(kind: str, key: dict[str, Any]) -> Path | None:
    """The file of the entry of ``kind`` for ``key`` (a JSON-serialisable dict)."""
    folder = cache_folder()
    if folder is None:
        return None
    digest = hashlib.sha256(_key_text(key).encode("utf-8")).hexdigest()[:32]
    return folder / f"{kind}-{digest}.npz"


def load(kind: str, key: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The arrays stored for ``key``, or ``None`` (no entry, caching off, or an unreadable
    file or one that does not hold this key: never trusted)."""
    path = entry_path(kind, key)
    if path is None:
        return None
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block us
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            loaded = np.load(handle, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy array: not an entry
                return None
            with loaded as stored:
                stored_key = stored["key"]  # checked before anything else is read
                if stored_key.dtype != np.uint8 or stored_key.tobytes() != _key_text(key).encode("utf-8"):
                    return None
                return {name: stored[name] for name in stored.files if name != "key"}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):  # damaged, or not an entry
        return None
    finally:
        os.close(descriptor)


def store(kind: str, key: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path | None:
    """Keep ``arrays`` as the entry for ``key``; returns its file, or ``None`` if it was not
    written (caching off, the folder not writable, or the name already taken)."""
    path = entry_path(kind, key)
    if path is None or "key" in arrays:
        return None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{kind}-", suffix=".partial", dir=path.parent)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            entry: dict[str, Any] = {"key": np.frombuffer(_key_text(key).encode("utf-8"), dtype=np.uint8), **arrays}
            np.savez(handle, **entry)
        os.link(temporary, path)  # fails if the name exists: whatever is there stays
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    return path


def texts_to_array(texts: list[str]) -> np.ndarray | None:
    """A list of strings as one UTF-8 array (``None`` if a text holds the separator)."""
    if any(TEXT_SEPARATOR in text for text in texts):
        return None
    return np.frombuffer(TEXT_SEPARATOR.join(texts).encode("utf-8"), dtype=np.uint8)


def array_to_texts(array: np.ndarray, count: int) -> list[str]:
    """The ``count`` strings :func:`texts_to_array` stored."""
    if count == 0:
        return []
    texts = array.tobytes().decode("utf-8").split(TEXT_SEPARATOR)
    if len(texts) != count:
        raise ValueError(f"a cached list of {count} texts holds {len(texts)}")
    return texts


def _key_text(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))
