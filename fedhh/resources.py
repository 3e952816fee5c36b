"""Memory a run cannot do without, checked against the machine before it is allocated.

Some configs ask for more memory than the machine has: a population of
10^12 users (the server holds the whole population once, to count the true
frequencies; a population built on disk is loaded a shard at a time and
needs only its largest shard in memory), or items of a million characters (each vocabulary item
becomes a row of ``max_length`` symbols).  Such a run would charge the
privacy ledger and then die with a ``MemoryError``.  Instead, the arrays
fedhh must allocate are counted from the config before they exist, and a
run whose count exceeds the machine's memory is refused (a
:class:`ResourceError`, exit status 2 on the command line) with the
numbers.  The counts are lower bounds (only arrays that are certainly
allocated, at their exact size), so a refusal is never a false alarm; a run
that passes may still need more.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from .errors import InputError

INDEX_BYTES = 8  # numpy int64: item ids, counts, offsets, symbols
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


class ResourceError(InputError):
    """A configured run needs more memory than this machine has."""


@functools.cache
def memory_limit() -> int:
    """Bytes of memory this process can have: the machine's physical memory, or a container's limit."""
    limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in CGROUP_LIMITS:
        try:
            limit = min(limit, int(path.read_text().strip()))
        except (OSError, ValueError):  # absent, or "max"
            continue
    return limit


def size_text(n_bytes: float) -> str:
    """``n_bytes`` in binary units, e.g. ``22.7 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n_bytes < 1024 or unit == "PiB":
            return f"{n_bytes:,.1f} {unit}" if unit != "B" else f"{n_bytes:,.0f} B"
        n_bytes /= 1024
    raise AssertionError("unreachable")


def require_memory(n_bytes: int, what: str, remedy: str) -> None:
    """Refuse to allocate ``n_bytes`` for ``what`` if the machine cannot hold them.

    ``what`` names the config keys responsible and how the bytes add up;
    ``remedy`` says what to change.
    """
    limit = memory_limit()
    if n_bytes > limit:
        raise ResourceError(
            f"{what} needs at least {size_text(n_bytes)} of memory, more than the {size_text(limit)} "
            f"of this machine; {remedy}"
        )


def population_bytes(n_users: int, items_per_user: int) -> int:
    """A population in CSR form: an offset per user, an item id and a count per item held."""
    return n_users * INDEX_BYTES * (1 + 2 * items_per_user)


def require_population_memory(n_users: int, items_per_user: int) -> None:
    per_user = INDEX_BYTES * (1 + 2 * items_per_user)
    require_memory(
        population_bytes(n_users, items_per_user),
        f"population.users = {n_users:,}: the population ({per_user} bytes a user for "
        f"{items_per_user} item(s) each, held whole once to count the true frequencies)",
        "use fewer users",
    )


STORED_ITEM_BYTES = 4  # a dataset population's item id per user (int32), as a loaded shard holds it


def require_dataset_memory(largest_shard_users: int) -> None:
    """A population on disk is never held whole: a process loads a stored shard at a time at
    least, so the largest one is what must fit (``fedhh.population_store``)."""
    require_memory(
        largest_shard_users * STORED_ITEM_BYTES,
        f"population.path: the dataset's largest shard ({largest_shard_users:,} users, "
        f"{STORED_ITEM_BYTES} bytes a user at least)",
        "build the population again with more shards (fedhh population build --shards)",
    )
