"""Items already known, left out of what users contribute (``run.deny_list``).

A job that runs discovery again and again on the same users (a daily job)
would spend each run's budget finding the same head again.  A deny list
names the items already known, and every user's data is read *without*
them: a user holding a denied item and others contributes one of the
others, by their local frequencies among what is left, and a user holding
only denied items is a user holding nothing, who takes the protocol's "no
item" path (TrieHH: it does not vote; an LDP protocol: it reports the empty
value).  The budget then goes to the next items.

Where the exclusion happens: in the population, as a user's items are read
(:class:`DeniedItemsSource` around any source, :func:`without_denied` for a
device's own items), before any protocol's device side sees them.  Every
driver builds its shards through it (the fast driver, Flower's virtual
SuperNodes from the run config, a device from its data file), so the users'
responses are the same under any transport or shard count, and the truth a
run is evaluated against is the population without the denied items: the
metrics measure what a daily job wants, the discovery of the next heavy
hitters.  The server also leaves denied items out of what it publishes (a
protocol whose domain is every string may report one nobody holds any more,
on noise): :meth:`DenyList.published`.

Privacy: the deny list is public and fixed before the run; removing its
items is the same map applied to every user's data alone, so two
populations differing in one user stay two populations differing in one
user and every guarantee holds as stated.  (A deny list taken from a
previous run's output is post-processing of that run's release; the two
runs compose, which the ledger does: :mod:`fedhh.privacy.ledger`.)

A deny list is a UTF-8 text file, one item a line, or a previous run's
results folder, whose ``result.json`` gives what that run denied and what
it discovered: chaining runs by their folders denies everything found so
far.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..results import RESULT_FILE
from .items import ItemCodec
from .population import PopulationSource, Shard, SingleItemShard, Vocabulary

KEY = "run.deny_list"
ALLOWED = "a UTF-8 text file of items, one a line, or a fedhh results folder (its result.json)"
MAX_DENY_LIST_BYTES = 64 * 1024 * 1024  # millions of items; anything larger is not a list of known items


class DenyListError(InputError):
    """A deny list that cannot be read or used."""


def _fail(path: str, problem: str) -> DenyListError:
    return DenyListError(f"{KEY} {path!r}: {problem}; allowed values: {ALLOWED}, or empty for none")


@dataclass(frozen=True)
class DenyList:
    """The denied items (distinct, in the order first listed) and where they come from.

    ``sha256`` is the hash of the bytes read (the text file, or the previous
    run's ``result.json``); ``previous_run_id``, for a results folder, the
    name the previous run was charged under in its ledger, if it was.
    """

    items: tuple[str, ...]
    path: str
    kind: str  # "file" or "result"
    sha256: str
    previous_run_id: str | None = None

    @functools.cached_property
    def denied(self) -> frozenset[str]:
        return frozenset(self.items)

    def source(self) -> dict[str, Any]:
        """Where the list comes from, as a ledger entry names it (no items)."""
        source: dict[str, Any] = {"kind": self.kind, "path": self.path, "sha256": self.sha256, "items": len(self.items)}
        if self.previous_run_id is not None:
            source["previous_run_id"] = self.previous_run_id
        return source

    def record(self, vocabulary: Vocabulary | None = None) -> dict[str, Any]:
        """The result document's ``deny_list``: its source, how many of its items the population's
        vocabulary holds, and the items themselves (so that a later run denying this run's folder
        denies them too)."""
        record = self.source()
        if vocabulary is not None:
            record["in_vocabulary"] = int(np.count_nonzero(denied_mask(vocabulary, self)))
        record["denied"] = list(self.items)
        return record

    def published(self, discoveries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``discoveries`` (plain data with an ``item``) without the denied items."""
        return [hit for hit in discoveries if hit["item"] not in self.denied]


def read_deny_list(path: str, codec: ItemCodec) -> DenyList | None:
    """The deny list ``run.deny_list`` names (``None`` for an empty value), checked whole:
    a readable regular file or results folder, UTF-8, no empty line and no item longer than an
    item can be (``protocol.max_length``).  Read once per process and file version."""
    if not path:
        return None
    target = Path(path)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        raise _fail(path, "does not exist") from None
    except (OSError, ValueError) as error:
        raise _fail(path, f"cannot be read ({getattr(error, 'strerror', None) or error})") from None
    source = target / RESULT_FILE if stat.S_ISDIR(mode) else target
    try:
        stamp = source.stat().st_mtime_ns
    except OSError:
        raise _fail(path, f"is a folder without a {RESULT_FILE}, not a fedhh results folder") from None
    return _read(path, str(source), stat.S_ISDIR(mode), stamp, codec.max_length)


@functools.lru_cache(maxsize=4)
def _read(path: str, source: str, folder: bool, modified_ns: int, max_length: int) -> DenyList:
    data = _bytes(path, source)
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _fail(path, f"is not UTF-8 text (byte {error.start}: {error.reason})") from None
    if folder:
        items, run_id = _from_result(path, text)
        return DenyList(_checked(path, items, max_length, "item"), path, "result", digest, run_id)
    lines = text.splitlines()
    return DenyList(_checked(path, lines, max_length, "line"), path, "file", digest)


def _bytes(path: str, source: str) -> bytes:
    try:
        descriptor = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise _fail(path, f"cannot be opened ({error.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _fail(path, "is not a regular file")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(MAX_DENY_LIST_BYTES + 1)
    except OSError as error:
        raise _fail(path, f"cannot be read ({error.strerror})") from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_DENY_LIST_BYTES:
        raise _fail(path, f"is larger than {MAX_DENY_LIST_BYTES:,} bytes")
    return data


def _from_result(path: str, text: str) -> tuple[list[str], str | None]:
    """What a previous run denied and what it discovered, and the name its ledger charged it under."""
    try:
        document = json.loads(text)
        found = [hit["item"] for hit in document["heavy_hitters"]]
        before = document.get("deny_list", {}).get("denied", [])
        run_id = document.get("run_id")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise _fail(path, f"its {RESULT_FILE} is not a fedhh result (heavy_hitters, each with an item)") from None
    items = [*before, *found]
    if not all(isinstance(item, str) for item in items) or not (run_id is None or isinstance(run_id, str)):
        raise _fail(path, f"its {RESULT_FILE} lists items that are not strings")
    return items, run_id


def _checked(path: str, items: list[str], max_length: int, what: str) -> tuple[str, ...]:
    for number, item in enumerate(items, start=1):
        if not item:
            raise _fail(path, f"{what} {number} is empty")
        if len(item) > max_length:
            raise _fail(
                path,
                f"{what} {number} has {len(item):,} characters, more than any item can "
                f"(protocol.max_length = {max_length})",
            )
    if not items:
        raise _fail(path, "lists no item")
    return tuple(dict.fromkeys(items))


def denied_mask(vocabulary: Vocabulary, deny_list: DenyList) -> np.ndarray:
    """Per vocabulary item, whether the deny list names it (by its text, as results name items)."""
    denied = deny_list.denied
    return np.fromiter((item in denied for item in vocabulary.items), dtype=bool, count=vocabulary.size)


def without_denied(shard: Shard, mask: np.ndarray) -> Shard:
    """``shard``'s users without the items ``mask`` marks (a user left with none holds nothing)."""
    if shard.one_item_per_user:
        items = shard.item_of_user
        kept = np.where((items >= 0) & mask[np.maximum(items, 0)], -1, items).astype(items.dtype, copy=False)
        return SingleItemShard(shard.vocabulary, shard.first_user, kept)
    keep = ~mask[shard.item_ids]
    owner = np.repeat(np.arange(shard.n_users), np.diff(shard.item_offsets))[keep]
    offsets = np.searchsorted(owner, np.arange(shard.n_users + 1), side="left").astype(np.int64)
    return Shard(shard.vocabulary, shard.first_user, offsets, shard.item_ids[keep], np.asarray(shard.item_counts)[keep])


class DeniedItemsSource(PopulationSource):
    """The population of ``source`` with the deny list's items removed from every user (module
    docstring); its truth is counted from the users as they are left, never taken from ``source``.

    Refused when the list denies every item of the vocabulary: no user would have anything left.
    """

    def __init__(self, source: PopulationSource, deny_list: DenyList) -> None:
        self.source = source
        self.deny_list = deny_list
        self.n_users = source.n_users
        self.vocabulary = source.vocabulary
        self.mask = denied_mask(source.vocabulary, deny_list)
        if self.mask.all():
            raise _fail(
                deny_list.path,
                f"denies every one of the population's {self.vocabulary.size:,} items, "
                "so no user would have anything to contribute",
            )

    def build_users(self, start: int, stop: int) -> Shard:
        return without_denied(self.source.build_users(start, stop), self.mask)

    def item_law(self) -> np.ndarray | None:
        """The law of a user's one item (entry 0: holding nothing, ``1 + i``: item id ``i``) as
        :meth:`build_users` leaves it: ``source``'s, with the denied items' mass moved to holding
        nothing; ``None`` when ``source`` has none (a law simulation then counts built users)."""
        inner = getattr(self.source, "item_law", None)
        law = inner() if inner is not None else None
        return None if law is None else self._left(law)

    def range_laws(self, start: int, stop: int) -> list[tuple[int, int, np.ndarray]] | None:
        """``source``'s ranges of one item law each within ``[start, stop)``, each law as
        :meth:`item_law` leaves it; ``None`` when ``source`` has none."""
        inner = getattr(self.source, "range_laws", None)
        ranges = inner(start, stop) if inner is not None else None
        return None if ranges is None else [(first, last, self._left(law)) for first, last, law in ranges]

    def _left(self, law: np.ndarray) -> np.ndarray:
        """``law`` with the denied items' mass moved to holding nothing (entry 0)."""
        left = np.asarray(law, dtype=np.float64).copy()
        left[0] += left[1:][self.mask].sum()
        left[1:][self.mask] = 0.0
        return left

    def require_memory(self, items_per_user: int) -> None:
        self.source.require_memory(items_per_user)

    def describe(self) -> dict[str, Any]:
        return self.source.describe()

    def describe_data(self) -> dict[str, Any]:
        return self.source.describe_data()
