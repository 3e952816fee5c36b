"""Which Flower strategy and wire codecs carry each protocol of the core.

The core's registry (``fedhh.protocols.PROTOCOLS``) names the protocols and
their message classes; this one adds what Flower needs for each.  A protocol
added to the core without an entry here fails with a clear error when a
Flower run is configured, not in the middle of a round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedhh.errors import InputError
from fedhh.items import ItemCodec
from fedhh.protocols import get_protocol

from . import pem, treehist, triehh
from .base import ProtocolStrategy
from .codec import MessageCodec
from .secure import DenseCodec


@dataclass(frozen=True)
class FlowerProtocol:
    """A protocol's strategy class, the codecs of its messages, and its secure-sum layout.

    ``dense`` builds, from the public item codec, the fixed-length vector
    layout that secure aggregation sums (``None``: the protocol cannot run
    with ``run.secure_aggregation``).
    """

    strategy: type[ProtocolStrategy]
    request: MessageCodec[Any]
    response: MessageCodec[Any]
    dense: Callable[[ItemCodec], DenseCodec] | None = None


FLOWER_PROTOCOLS: dict[str, FlowerProtocol] = {
    "triehh": FlowerProtocol(triehh.TrieHHStrategy, triehh.REQUEST_CODEC, triehh.RESPONSE_CODEC, triehh.TrieHHDense),
    "pem": FlowerProtocol(pem.PEMStrategy, pem.REQUEST_CODEC, pem.RESPONSE_CODEC),
    "treehist": FlowerProtocol(treehist.TreeHistStrategy, treehist.REQUEST_CODEC, treehist.RESPONSE_CODEC),
}


def flower_protocol(name: str) -> FlowerProtocol:
    """The Flower pieces of protocol ``name``, checked against the core's message classes."""
    entry = get_protocol(name)  # an unknown name fails here, listing the core's protocols
    try:
        flower = FLOWER_PROTOCOLS[name]
    except KeyError:
        raise InputError(
            f"protocol.name: {name!r} has no Flower strategy yet (available on Flower: "
            f"{sorted(FLOWER_PROTOCOLS)}); use run.driver = \"fast\""
        ) from None
    if (flower.request.message_type, flower.response.message_type) != (entry.request_type, entry.response_type):
        raise TypeError(
            f"Flower codecs of {name!r} carry {flower.request.tag}/{flower.response.tag}, the core "
            f"protocol uses {entry.request_type.__name__}/{entry.response_type.__name__}"
        )
    return flower
