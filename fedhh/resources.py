"""Memory a run cannot do without, checked against what the process may have before it is allocated.

Some configs ask for more memory than the machine has: a population of
10^12 users (the server holds the whole population once, to count the true
frequencies; a population built on disk is loaded a shard at a time and
needs only its largest shard in memory), or items of a million characters (each vocabulary item
becomes a row of ``max_length`` symbols).  Such a run would charge the
privacy ledger and then die with a ``MemoryError``, or be killed by the
kernel.  Instead, the arrays fedhh must allocate are counted from the
config before they exist, and a run whose count exceeds the memory this
process may have (:func:`memory_limits`) is refused (a
:class:`ResourceError`, exit status 2 on the command line) with the
numbers.  The counts are lower bounds (only arrays that are certainly
allocated, at their exact size, and that exist at the same time), so a
refusal is never a false alarm; a run that passes may still need more.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from .errors import InputError

INDEX_BYTES = 8  # numpy int64: item ids, counts, offsets, symbols
ITEM_ID_BYTES = 4  # int32: the item id of a user holding one item, in memory and in a loaded stored shard
CGROUP_LIMIT_FILES = {"cgroup2": "memory.max", "cgroup": "memory.limit_in_bytes"}  # v2, v1
PROCESS_LIMITS = (  # (what sets it, the resource, the /proc/self/status line of what is in use)
    ("the address-space limit (ulimit -v)", resource.RLIMIT_AS, "VmSize"),
    ("the data-segment limit (ulimit -d)", resource.RLIMIT_DATA, "VmData"),
)


class ResourceError(InputError):
    """A configured run needs more memory than this process may have."""


def memory_limits() -> dict[str, int]:
    """Bytes this process may still take, by what bounds them.

    * the machine's physical memory;
    * the memory cgroup's limit (v2 ``memory.max``, v1
      ``memory.limit_in_bytes``) of the process's own group and of every group
      above it, the tightest (a container's limit);
    * the room left under the address-space and data-segment limits
      (``ulimit -v``, ``ulimit -d``: ``RLIMIT_AS``, ``RLIMIT_DATA``) beyond
      what the process maps already (``VmSize``, ``VmData``).

    Read anew at each call: the room under a process limit shrinks as the
    process grows, and a limit may be set after fedhh is imported.
    """
    limits = {"the machine's physical memory": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}
    cgroup = cgroup_memory_limit()
    if cgroup is not None:
        limits["the memory cgroup's limit"] = cgroup
    in_use = _status_bytes()
    for name, limit, used in PROCESS_LIMITS:
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            limits[name] = max(soft - in_use.get(used, 0), 0)
    return limits


def memory_limit() -> int:
    """Bytes this process may still take: the tightest of :func:`memory_limits`."""
    return min(memory_limits().values())


def cgroup_memory_limit() -> int | None:
    """The tightest memory limit of the cgroups this process is in (v1 or v2, its own group and
    every group above it, where the file system shows them); ``None`` when none is set."""
    try:
        groups = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    own: dict[str, str] = {}  # file system type -> the process's group in that hierarchy
    for line in groups:
        hierarchy, controllers, group = [*line.split(":", 2), "", ""][:3]
        if hierarchy == "0" and not controllers:
            own["cgroup2"] = group
        elif "memory" in controllers.split(","):
            own["cgroup"] = group
    limits = []
    for mount in mounts:
        before, _, after = mount.partition(" - ")
        fields, described = before.split(), after.split()
        if len(fields) < 5 or len(described) < 3 or described[0] not in own:
            continue
        kind, root, point = described[0], fields[3], Path(fields[4])
        if kind == "cgroup" and "memory" not in described[2].split(","):
            continue
        relative = os.path.relpath(own[kind], root)
        folder = point / relative if not relative.startswith("..") else point
        for level in (folder, *folder.parents):
            limit = _read_limit(level / CGROUP_LIMIT_FILES[kind])
            if limit is not None:
                limits.append(limit)
            if level == point:
                break
    return min(limits, default=None)


UNLIMITED_CGROUP = 1 << 62  # cgroup v1 writes "no limit" as the largest page-aligned long


def _read_limit(path: Path) -> int | None:
    try:
        limit = int(path.read_text().strip())
    except (OSError, ValueError):  # absent, or "max"
        return None
    return limit if limit < UNLIMITED_CGROUP else None


def _status_bytes() -> dict[str, int]:
    """The ``Vm*`` sizes of ``/proc/self/status``, in bytes (empty where there is no such file)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    sizes = {}
    for line in lines:
        key, _, value = line.partition(":")
        parts = value.split()
        if key.startswith("Vm") and len(parts) == 2 and parts[1] == "kB":
            sizes[key] = int(parts[0]) * 1024
    return sizes


def size_text(n_bytes: float) -> str:
    """``n_bytes`` in binary units, e.g. ``22.7 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n_bytes < 1024 or unit == "PiB":
            return f"{n_bytes:,.1f} {unit}" if unit != "B" else f"{n_bytes:,.0f} B"
        n_bytes /= 1024
    raise AssertionError("unreachable")


def require_memory(n_bytes: int, what: str, remedy: str) -> None:
    """Refuse to allocate ``n_bytes`` for ``what`` if this process cannot have them (:func:`memory_limit`).

    ``what`` names the config keys responsible and how the bytes add up;
    ``remedy`` says what to change.
    """
    limit = memory_limit()
    if n_bytes > limit:
        bound = [name for name, value in memory_limits().items() if value == limit]
        raise ResourceError(
            f"{what} needs at least {size_text(n_bytes)} of memory, more than the {size_text(limit)} "
            f"this process may have{f' ({bound[0]})' if bound else ''}; {remedy}"
        )


def population_bytes(n_users: int, items_per_user: float) -> int:
    """A population in memory: one int32 item id per user when each holds one item
    (:class:`fedhh.data.population.SingleItemShard`), else CSR form (an offset per user, an item id
    and a count per item held; ``items_per_user`` may be an expectation,
    :func:`fedhh.data.sources.held_items_per_user`)."""
    if items_per_user == 1:
        return n_users * ITEM_ID_BYTES
    return int(n_users * INDEX_BYTES * (1 + 2 * items_per_user))


def require_population_memory(n_users: int, items_per_user: float) -> None:
    per_user = population_bytes(1, items_per_user) if items_per_user == 1 else INDEX_BYTES * (1 + 2 * items_per_user)
    require_memory(
        population_bytes(n_users, items_per_user),
        f"population.users = {n_users:,}: the population ({per_user:,.4g} bytes a user for "
        f"{items_per_user:,.4g} item(s) each, held whole once to count the true frequencies)",
        "use fewer users",
    )


def require_dataset_memory(largest_shard_users: int) -> None:
    """A population on disk is never held whole: a process loads a stored shard at a time at
    least, so the largest one is what must fit (``fedhh.data.store``)."""
    require_memory(
        largest_shard_users * ITEM_ID_BYTES,
        f"population.path: the dataset's largest shard ({largest_shard_users:,} users, "
        f"{ITEM_ID_BYTES} bytes a user at least)",
        "build the population again with more shards (fedhh population build --shards)",
    )
