"""Heavy-hitter protocols: server state machines and client response functions."""

from .base import (
    ClientFunction,
    Discovery,
    ProtocolResult,
    Request,
    Response,
    RoundRecord,
    ServerProtocol,
)
from .registry import PROTOCOLS, ProtocolEntry, get_protocol, message_types

__all__ = [
    "ClientFunction",
    "Discovery",
    "PROTOCOLS",
    "ProtocolEntry",
    "ProtocolResult",
    "Request",
    "Response",
    "RoundRecord",
    "ServerProtocol",
    "get_protocol",
    "message_types",
]
