"""Where a run's rounds spend their time, split between the server and the users' side.

Every driver times the same two things the same way (the fast driver's loop,
a sweep's trial, the Flower strategy), so ``timing_s.server_s`` means one
thing whichever transport carried the run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class RunClock:
    """Where a run's rounds spend their time: the server's own work and the shards' answers.

    ``server_s``: planning each request (``next_request``), combining the
    shards' responses and absorbing their sum (aggregation and decoding), and
    the final ``result``.  ``shards_s``: the shards' answers, that is the
    users' randomisation and what a simulated shard does for the server
    before it answers: summing its users' reports (the client function is
    vectorised over the shard) and, for an oracle whose statistics have no
    fixed-size form (OLH), the support counts of the request's candidates.  A
    deployment's server does that last part itself, over the individual
    reports, so for OLH-based protocols its decoding time lies between
    ``server_s`` and ``server_s + shards_s``.  Building the population is in
    neither.
    """

    def __init__(self) -> None:
        self.server_s = 0.0
        self.shards_s = 0.0

    def server(self) -> contextlib.AbstractContextManager[None]:
        """Time the body as the server's own work."""
        return self._adding_to("server_s")

    def shards(self) -> contextlib.AbstractContextManager[None]:
        """Time the body as the shards' answers."""
        return self._adding_to("shards_s")

    @contextlib.contextmanager
    def _adding_to(self, total: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, total, getattr(self, total) + time.perf_counter() - started)
