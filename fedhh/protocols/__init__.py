"""Heavy-hitter protocols: server state machines, client response functions, one spec each.

Importing the package registers the built-in protocols (each module
registers its own :class:`ProtocolSpec`), in the order their names are listed.
"""

from .base import (
    ClientFunction,
    Discovery,
    ProtocolResult,
    Request,
    Response,
    RoundRecord,
    ServerProtocol,
)
from .registry import PROTOCOLS, get_protocol, plan, protocol_module, register_protocol, split_budget
from .spec import ContractText, HeldUsers, InvalidReply, ProtocolSpec

from . import triehh, prefix_search, bitstogram, spm, mcm, rappor, sfp  # noqa: E402,F401  (registers the built-in protocols, in this order)

__all__ = [
    "ClientFunction",
    "ContractText",
    "Discovery",
    "HeldUsers",
    "InvalidReply",
    "PROTOCOLS",
    "ProtocolResult",
    "ProtocolSpec",
    "Request",
    "Response",
    "RoundRecord",
    "ServerProtocol",
    "get_protocol",
    "plan",
    "protocol_module",
    "register_protocol",
    "split_budget",
]
