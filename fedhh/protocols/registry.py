"""The protocols a config can name, with how to build their server side.

Each entry knows how to turn a validated config (plus the population size
and item codec) into a server state machine with its privacy guarantee,
which client function answers its requests, and which message classes its
transports must carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..items import ItemCodec
from ..privacy.triehh import solve_triehh
from . import triehh
from .base import ClientFunction, Request, Response, ServerProtocol


@dataclass(frozen=True)
class ProtocolEntry:
    """How to build and answer one protocol."""

    name: str
    build_server: Callable[[dict[str, Any], int, ItemCodec, int], ServerProtocol]
    respond: ClientFunction
    request_type: type[Request]
    response_type: type[Response]


def _build_triehh(privacy: dict[str, Any], n_users: int, codec: ItemCodec, seed: int) -> ServerProtocol:
    params = solve_triehh(n_users, privacy["epsilon"], privacy["delta"], codec.max_rounds)
    return triehh.TrieHHServer(params, codec, seed)


PROTOCOLS: dict[str, ProtocolEntry] = {
    "triehh": ProtocolEntry(
        "triehh", _build_triehh, triehh.respond, triehh.TrieHHRequest, triehh.TrieHHResponse
    ),
}


def get_protocol(name: str) -> ProtocolEntry:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"protocol.name: got {name!r}; allowed: {sorted(PROTOCOLS)}") from None


def message_types() -> dict[str, type[Request] | type[Response]]:
    """Every request and response class by name, for transports' decoders."""
    types: dict[str, type[Request] | type[Response]] = {}
    for entry in PROTOCOLS.values():
        types[entry.request_type.__name__] = entry.request_type
        types[entry.response_type.__name__] = entry.response_type
    return types
