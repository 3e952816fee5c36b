"""The processes a run started, found through Linux ``/proc`` and stopped by PID.

fedhh never stops processes by name or pattern, nor a whole machine's Ray:
on a shared machine that would stop other people's SuperLinks and Ray
clusters too.  A run stops what it started:
the process groups it created, and the descendants it saw.  A process is
recognised by its PID *and* its start time, so a PID the kernel has handed
to someone else since is never signalled.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    parent: int
    group: int
    zombie: bool
    started: int  # clock ticks after boot: with the PID, the process's identity


def processes() -> list[ProcessEntry]:
    """The processes of this machine, from Linux ``/proc``."""
    entries = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while we looked
        entries.append(
            ProcessEntry(int(stat.parent.name), int(fields[1]), int(fields[2]), fields[0] == "Z", int(fields[19]))
        )
    return entries


def descendants(root: int) -> set[int]:
    """Every process below ``root``, whatever group or session it moved to."""
    return set(descendant_identities(root))


def descendant_identities(*roots: int) -> dict[int, int]:
    """PID -> start time of every live process below any of ``roots`` (one look at ``/proc``)."""
    table = processes()
    children: dict[int, list[ProcessEntry]] = {}
    for entry in table:
        children.setdefault(entry.parent, []).append(entry)
    found: dict[int, int] = {}
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child.pid not in found and not child.zombie:
                found[child.pid] = child.started
                stack.append(child.pid)
    return found


def still_running(identities: dict[int, int]) -> list[int]:
    """The PIDs of ``identities`` that still name the same live (non-zombie) process."""
    live = {entry.pid: entry for entry in processes()}
    return [
        pid
        for pid, started in identities.items()
        if pid in live and live[pid].started == started and not live[pid].zombie
    ]


def stop_leftovers(identities: dict[int, int], grace: float) -> list[int]:
    """SIGTERM the processes of ``identities`` still running, SIGKILL them after ``grace`` seconds.

    Returns the PIDs that had to be stopped (an empty list: all had ended).
    """
    left = still_running(identities)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in still_running({pid: identities[pid] for pid in left}):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while still_running({pid: identities[pid] for pid in left}) and time.monotonic() < deadline:
            time.sleep(0.05)
    return left
