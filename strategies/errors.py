"""What can go wrong in a federation, as exceptions the ServerApp reports by name."""

from __future__ import annotations

from fedhh.protocols import InvalidReply  # raised by the protocols' reply checks

__all__ = ["FederationError", "InvalidReply", "RunStopped"]


class FederationError(RuntimeError):
    """The federation cannot run the protocol (too few nodes, or a round nobody answered)."""


class RunStopped(RuntimeError):
    """The process driving the run asked it to stop (Ctrl-C or SIGTERM)."""
