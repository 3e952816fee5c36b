"""The exact baseline's server: the true top k of the summed shares, nothing added."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...data.items import ItemCodec
from ...data.population import Vocabulary
from ...data.prefixes import row_keys
from ...privacy.report import EVALUATION_NOT_COVERED, NO_GUARANTEE, Coverage, PrivacyReport
from ...schema import ConfigSection, PrivacySection
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..common.keys import TOP_K_KEY
from ..spec import Section
from .messages import SHARE_UNIT, ItemsRequest, ItemWeights

NAME = "exact"

MODEL = f"{NO_GUARANTEE}: exact counts of every user's items, no noise"
COVERAGE = Coverage(
    covered=(),
    not_covered=(
        "everything: heavy_hitters[] are the population's exact top items with their exact counts; no privacy "
        "guarantee covers any field of this run, which is the ceiling of the comparisons, not a deployment",
        EVALUATION_NOT_COVERED,
    ),
)


class ExactServer(ServerProtocol):
    """One round: sum every user's shares of its items and publish the ``top_k`` largest.

    The ranking is the evaluation's truth (:class:`fedhh.metrics.Truth`): by summed share, ties
    broken by the vocabulary's order when the server is offered the vocabulary (every simulation),
    else by the items' symbol rows.
    """

    def __init__(self, top_k: int, codec: ItemCodec) -> None:
        self.top_k = top_k
        self.codec = codec
        self._vocabulary: Vocabulary | None = None
        self._found: list[Discovery] | None = None
        self._trace: list[RoundRecord] = []

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    @property
    def max_rounds(self) -> int:
        return 1

    def privacy_report(self) -> PrivacyReport:
        return PrivacyReport(
            model=MODEL,
            epsilon=math.inf,
            delta=1.0,
            mechanism="every user sends all of its items with their shares; the server publishes the exact top k",
            method="none: a baseline without privacy, the ceiling of what any protocol can find",
            adjacency="none",
            parameters={"top_k": self.top_k},
            coverage=COVERAGE,
        )

    def offer_vocabulary(self, vocabulary: Vocabulary) -> None:
        self._vocabulary = vocabulary

    def next_request(self) -> ItemsRequest | None:
        return ItemsRequest(round=1) if self._found is None else None

    def absorb(self, response: Response) -> None:
        if not isinstance(response, ItemWeights):
            raise TypeError(f"exact expects ItemWeights, got {type(response).__name__}")
        if self._found is not None or response.round != 1:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        order = np.lexsort((self._tie_order(response.items), -response.weights))[: self.top_k]
        rows = response.items[order]
        self._found = [
            Discovery(item, tuple(row), estimated_count=weight / SHARE_UNIT)
            for item, row, weight in zip(self.codec.decode_rows(rows), rows.tolist(), response.weights[order].tolist())
        ]
        self._trace.append(
            RoundRecord(
                1,
                {
                    "users": int(response.responding_users),
                    "items_present": int(response.weights.size),
                    "released": len(self._found),
                },
            )
        )

    def _tie_order(self, rows: np.ndarray) -> np.ndarray:
        """Each row's place among equal counts: its vocabulary id (as the truth orders ties), or,
        without a vocabulary, its place in the response (the rows' key order)."""
        if self._vocabulary is None or not rows.shape[0]:
            return np.arange(rows.shape[0])
        known = row_keys(self._vocabulary.rows)
        by_key = np.argsort(known, kind="stable")
        place = np.minimum(np.searchsorted(known[by_key], row_keys(rows)), by_key.size - 1)
        ids = by_key[place]
        return np.where(known[ids] == row_keys(rows), ids, self._vocabulary.size + np.arange(rows.shape[0]))

    def result(self) -> ProtocolResult:
        return ProtocolResult(
            protocol=NAME,
            discoveries=list(self._found or []),
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.guarantee(),
            params={
                "top_k": self.top_k,
                "max_length": self.codec.max_length,
                "unit_size": self.codec.unit_size,
                "alphabet": self.codec.alphabet.name,
            },
            stopped_because="one round" if self._found is not None else "not finished",
        )


@dataclass(frozen=True)
class ExactKeys(ConfigSection):
    """The exact baseline's own ``[protocol]`` keys."""

    top_k: int = TOP_K_KEY.field()


def build_exact(privacy: PrivacySection, protocol: Section, n_users: int, codec: ItemCodec, seed: int) -> ExactServer:
    """The exact top k from a config (the privacy target is ignored: this baseline has none)."""
    return ExactServer(ExactKeys.of(protocol).top_k, codec)
