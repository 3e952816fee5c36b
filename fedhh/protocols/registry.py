"""The protocols a config can name, with how to build their server side.

Each entry knows how to turn a validated config (its ``[privacy]`` and
``[protocol]`` sections, the population size and the item codec) into a
server state machine with its privacy guarantee, which client function
answers its requests, and which message classes its transports must carry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import SCHEMA
from ..errors import InputError
from ..items import ItemCodec
from ..privacy.triehh import solve_triehh
from . import pem, prefix_reports, treehist, triehh
from .base import ClientFunction, Request, Response, ServerProtocol

Section = Mapping[str, Any]
Builder = Callable[[Section, Section, int, ItemCodec, int], ServerProtocol]


@dataclass(frozen=True)
class ProtocolEntry:
    """How to build and answer one protocol."""

    name: str
    builder: Builder  # (privacy section, protocol section, n_users, codec, seed)
    respond: ClientFunction
    request_type: type[Request]
    response_type: type[Response]

    def build_server(
        self, privacy: Section, n_users: int, codec: ItemCodec, seed: int, protocol: Section | None = None
    ) -> ServerProtocol:
        """The server of one run; ``protocol`` is the config's ``[protocol]`` section
        (its documented defaults when not given)."""
        section = protocol if protocol is not None else {key: spec.default for key, spec in SCHEMA["protocol"].items()}
        return self.builder(privacy, section, n_users, codec, seed)


def _build_triehh(privacy: Section, protocol: Section, n_users: int, codec: ItemCodec, seed: int) -> ServerProtocol:
    params = solve_triehh(n_users, privacy["epsilon"], privacy["delta"], codec.max_rounds)
    return triehh.TrieHHServer(params, codec, seed)


PROTOCOLS: dict[str, ProtocolEntry] = {
    "triehh": ProtocolEntry(
        "triehh", _build_triehh, triehh.respond, triehh.TrieHHRequest, triehh.TrieHHResponse
    ),
    "pem": ProtocolEntry("pem", pem.build_pem, prefix_reports.respond, pem.PEMRequest, pem.PEMResponse),
    "treehist": ProtocolEntry(
        "treehist", treehist.build_treehist, prefix_reports.respond, treehist.TreeHistRequest,
        treehist.TreeHistResponse,
    ),
}


def get_protocol(name: str) -> ProtocolEntry:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise InputError(f"protocol.name: got {name!r}; allowed: {sorted(PROTOCOLS)}") from None


def message_types() -> dict[str, type[Request] | type[Response]]:
    """Every request and response class by name, for transports' decoders."""
    types: dict[str, type[Request] | type[Response]] = {}
    for entry in PROTOCOLS.values():
        types[entry.request_type.__name__] = entry.request_type
        types[entry.response_type.__name__] = entry.response_type
    return types
