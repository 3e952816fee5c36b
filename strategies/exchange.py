"""Send messages to nodes and collect the replies that arrive before a deadline.

``Grid.send_and_receive`` would do, but Flower's HTTP grid (1.41, 1.42) (the one a
ServerApp gets under a real SuperLink) sleeps 3 s between polls, which adds
up to 3 s to every round; here the replies are polled every
:data:`POLL_INTERVAL` seconds.  Whatever has not arrived by the deadline is
left out: the caller counts those nodes as late.

The deadline is either fixed (a round: ``timeout`` after the push) or
kept alive by progress (``while_progressing``: ``timeout`` after the last
reply).  The second is for work whose length grows with the load of the
machines rather than with a node's health, such as every node building
its shard before round 1: on an overloaded machine the replies come
slower but keep coming, and a run must slow down rather than fail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from flwr.app import Message
from flwr.serverapp import Grid

from .errors import RunStopped

POLL_INTERVAL = 0.02  # seconds between pulls: one cheap request to the SuperLink each


def exchange(
    grid: Grid,
    messages: Sequence[Message],
    timeout: float,
    stop: threading.Event | None = None,
    *,
    while_progressing: bool = False,
) -> tuple[list[Message], set[str]]:
    """Push ``messages``, pull replies until all arrived or the deadline passed.

    The deadline is ``timeout`` seconds after the push or, with
    ``while_progressing``, after the latest reply.  Returns the replies and
    the ids of the messages that were pushed (each message's
    ``metadata.message_id`` is set by the grid when it is pushed; a message
    whose id is not in the set could not be delivered).  Raises
    :class:`RunStopped` within one poll interval of ``stop`` being set.
    """
    if not messages:
        return [], set()
    deadline = time.monotonic() + timeout
    pushed = {message_id for message_id in grid.push_messages(list(messages)) if message_id}
    pending = set(pushed)
    replies: list[Message] = []
    while pending:
        arrived = grid.pull_messages(sorted(pending))
        for reply in arrived:
            replies.append(reply)
            pending.discard(reply.metadata.reply_to_message_id)
        if arrived and while_progressing:
            deadline = time.monotonic() + timeout
        if not pending or time.monotonic() >= deadline:
            break
        pause(min(POLL_INTERVAL, max(deadline - time.monotonic(), 0.0)), stop)
    return replies, pushed


def pause(seconds: float, stop: threading.Event | None) -> None:
    """Sleep ``seconds``, or raise :class:`RunStopped` as soon as ``stop`` is set."""
    if stop is None:
        time.sleep(seconds)
    elif stop.wait(seconds) or stop.is_set():
        raise RunStopped("the run was stopped while waiting for its nodes")
