"""Heavy-hitter protocols: server state machines, client response functions, one spec each.

This package holds what every protocol shares -- the contract (``base``),
the wire declarations of messages (``messages``), the spec (``spec``), the
registry (``registry``), the bits a user sends (``communication``) and the
helpers several families share (``common``) -- and one package per
protocol or family (``triehh``, ``prefix_search`` for PEM and TreeHist,
``bitstogram``, ``spm``, ``mcm``, ``rappor``, ``sfp``, the baselines
``central``, a curator's noisy histogram, and ``exact``, without privacy,
and ``aggregate_trie``, the aggregate-DP prefix tree).  Importing it
registers the built-in protocols (each package registers its own
:class:`ProtocolSpec`), in the order their names are listed, then those of
the installed plugins (:func:`~fedhh.protocols.registry.load_plugins`).
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
from .registry import PROTOCOLS, get_protocol, load_plugins, plan, protocol_module, register_protocol, split_budget
from .spec import ContractText, HeldUsers, InvalidReply, ProtocolSpec

# isort: off
from . import triehh, prefix_search, bitstogram, spm, mcm, rappor, sfp, central, exact, aggregate_trie, taps  # noqa: F401  (registers them, in this order)
# isort: on

load_plugins()  # then the protocols of installed plugins (the fedhh.protocols entry points)

__all__ = [
    "PROTOCOLS",
    "ClientFunction",
    "ContractText",
    "Discovery",
    "HeldUsers",
    "InvalidReply",
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
