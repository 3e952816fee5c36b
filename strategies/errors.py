"""What can go wrong in a federation, as exceptions the ServerApp reports by name."""

from __future__ import annotations

from fedhh.protocols import InvalidReply  # raised by the protocols' reply checks

__all__ = ["FederationError", "InvalidReply", "RunStopped", "last_line"]


class FederationError(RuntimeError):
    """The federation cannot run the protocol (too few nodes, or a round nobody answered)."""


class RunStopped(RuntimeError):
    """The process driving the run asked it to stop (Ctrl-C or SIGTERM)."""


def last_line(text: str | None) -> str:
    """The last non-empty line of an error text (a ClientApp's traceback ends with its message)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else (text or "")
