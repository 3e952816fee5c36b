"""Flower's ``flower-supernode``, polling its SuperLink more often when idle.

Flower's SuperNode (1.41, 1.42) asks the SuperLink for a message, and when there is
none sleeps a fixed 3 s (``flwr.supernode.start_client_internal``), with no
option to change it; it also checks for its ClientApp's reply every 0.5 s.
In a round-based protocol this costs nearly the whole 3 s every round: a
node asks again right after sending its reply, before the server has
seen the replies and sent the next round, so it then sleeps 3 s while the
next request waits.  This command is ``flower-supernode`` with the same
options, whose waits are capped at ``--idle-poll`` seconds (default
:data:`IDLE_POLL`): each idle SuperNode then sends one small HTTP request
to the SuperLink every ``--idle-poll`` seconds instead of every 3 s, fine
for the tens of shard nodes of a ``shards`` federation, not for a fleet of
millions of devices (keep Flower's own command there).

With ``--clientapp-process`` it also starts, as its child, one
long-running ClientApp process (``simulations.clientapp_process``; a
loopback Runtime API without TLS only) and runs the SuperNode with
``--isolation process``, instead of one ``flwr-clientapp`` process per
message.

Usage (every other option is ``flower-supernode``'s)::

    python -m simulations.supernode --idle-poll 0.1 --clientapp-process \
        --insecure --superlink 127.0.0.1:9093 --port 9094 --node-config "partition-id=0 num-partitions=3"
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from types import ModuleType
from typing import Any

import flwr.supernode.start_client_internal as fleet_loop
from flwr.supercore.constant import SUPERNODE_UVICORN_DEFAULT_PORT, UVICORN_DEFAULT_HOST
from flwr.supernode.cli.flower_supernode import flower_supernode

IDLE_POLL = 0.1  # seconds: at most this long between two requests for messages, or two checks for a reply


class CappedSleep:
    """The fleet loop's ``time`` module, with ``sleep`` capped at ``limit`` seconds."""

    def __init__(self, clock: ModuleType, limit: float) -> None:
        self._clock = clock
        self.limit = limit

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(min(seconds, self.limit))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clock, name)


def cap_idle_waits(limit: float) -> None:
    """Cap every wait of Flower's SuperNode fleet loop (this process only) at ``limit`` seconds."""
    if not 0.01 <= limit <= 3.0:
        raise ValueError(f"--idle-poll: must be in 0.01..3 seconds, got {limit}")
    fleet_loop.time = CappedSleep(time, limit)  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> None:
    """Run Flower's SuperNode with capped waits; every option but ours is passed on to it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--idle-poll", type=float, default=IDLE_POLL)
    parser.add_argument("--clientapp-process", action="store_true")
    parser.add_argument("--host", default=UVICORN_DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=SUPERNODE_UVICORN_DEFAULT_PORT)
    ours, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        cap_idle_waits(ours.idle_poll)
    except ValueError as error:
        sys.exit(str(error))
    flower_args = [*rest, "--host", ours.host, "--port", str(ours.port)]
    if ours.clientapp_process:
        if "--isolation" in rest:
            sys.exit("--clientapp-process sets --isolation process itself; do not pass --isolation")
        flower_args += ["--isolation", "process"]
        # like Flower's own SuperExec: a child that ends when this process ends
        subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-m",
                "simulations.clientapp_process",
                "--insecure",
                "--runtime-api-address",
                f"{ours.host}:{ours.port}",
                "--parent-pid",
                str(os.getpid()),
            ]
        )
    sys.argv = ["flower-supernode", *flower_args]
    flower_supernode()


if __name__ == "__main__":
    main()
