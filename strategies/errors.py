"""What can go wrong in a federation, as exceptions the ServerApp reports by name."""

from __future__ import annotations


class FederationError(RuntimeError):
    """The federation cannot run the protocol (too few nodes, or a round nobody answered)."""


class InvalidReply(ValueError):
    """A well-formed reply whose content its node (or, summed, its nodes) cannot have produced honestly."""


class RunStopped(RuntimeError):
    """The process driving the run asked it to stop (Ctrl-C or SIGTERM)."""
