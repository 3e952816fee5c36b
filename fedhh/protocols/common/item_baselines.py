"""What the two baselines (``central``, a curator's noisy histogram, and ``exact``, the true top k)
share: one round in which users send their items in the clear, a server that publishes items with
their counts from that round's histogram, and the check of the histogram's item rows."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from ...data.items import EOS, PAD, ItemCodec
from ...data.prefixes import row_keys
from ..base import Discovery, ProtocolResult, Request, Response, RoundRecord, ServerProtocol
from ..spec import InvalidReply

NO_DENSE_LAYOUT = (
    "its replies are histograms of the items users hold, whose set is not public: no list of fixed length "
    "holds them (every string of up to max_length symbols would)"
)


class ItemHistogramServer(ServerProtocol):
    """A server of one round: it asks every user for its items (``request_type``), then publishes items
    with their counts (:meth:`publish`); its result's parameters are the subclass's (:meth:`parameters`)
    and the item codec's."""

    name: ClassVar[str]
    request_type: ClassVar[type[Request]]

    def __init__(self, codec: ItemCodec) -> None:
        self.codec = codec
        self._found: list[Discovery] | None = None
        self._trace: list[RoundRecord] = []

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    @property
    def max_rounds(self) -> int:
        return 1

    def next_request(self) -> Request | None:
        return self.request_type(round=1) if self._found is None else None

    def check_pending(self, response: Response) -> None:
        """Refuse a response to anything but the one round, before it is answered."""
        if self._found is not None or response.round != 1:
            raise ValueError(f"response for round {response.round}, but no request is pending")

    def publish(
        self, rows: np.ndarray, counts: np.ndarray, values: dict[str, Any], server_view: dict[str, Any] | None = None
    ) -> None:
        """Publish the items of symbol ``rows`` with their ``counts``, and the round's record: its published
        ``values`` then how many items are released, and what the server saw (``server_view``)."""
        self._found = [
            Discovery(item, tuple(row), estimated_count=count)
            for item, row, count in zip(self.codec.decode_rows(rows), rows.tolist(), counts.tolist())
        ]
        self._trace.append(RoundRecord(1, {**values, "released": len(self._found)}, server_view or {}))

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The run's parameters in its result, before the item codec's."""

    def result(self) -> ProtocolResult:
        return ProtocolResult(
            protocol=self.name,
            discoveries=list(self._found or []),
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.guarantee(),
            params={
                **self.parameters(),
                "max_length": self.codec.max_length,
                "unit_size": self.codec.unit_size,
                "alphabet": self.codec.alphabet.name,
            },
            stopped_because="one round" if self._found is not None else "not finished",
        )


def check_item_rows(rows: np.ndarray, symbols: int, field: str) -> None:
    """Raise :class:`InvalidReply` unless ``rows`` (the reply's ``field``) are distinct items: symbol ids
    below ``symbols`` ending in the end symbol, padding only after it."""
    if np.unique(row_keys(rows)).size != rows.shape[0]:
        raise InvalidReply(f"{field}: an item is listed twice")
    if rows.size and (rows.max() >= symbols or not np.all((rows == EOS).any(axis=1))):
        raise InvalidReply(f"{field}: a row must be symbol ids below {symbols} ending in the end symbol")
    if rows.size and np.any((rows == PAD)[:, :-1] & (rows[:, 1:] != PAD)):
        raise InvalidReply(f"{field}: a symbol after the padding")
