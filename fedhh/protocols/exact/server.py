"""The exact baseline's server: the true top k of the summed shares, nothing added."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...data.population import Vocabulary
from ...data.prefixes import row_keys
from ...privacy.report import EVALUATION_NOT_COVERED, NO_GUARANTEE, Coverage, PrivacyReport
from ...schema import ConfigSection, PrivacySection
from ..base import Response
from ..common.item_baselines import ItemHistogramServer
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


class ExactServer(ItemHistogramServer):
    """One round: sum every user's shares of its items and publish the ``top_k`` largest.

    The ranking is the evaluation's truth (:class:`fedhh.metrics.Truth`): by summed share, ties
    broken by the vocabulary's order when the server is offered the vocabulary (every simulation),
    else by the items' symbol rows.
    """

    name = NAME
    request_type = ItemsRequest

    def __init__(self, top_k: int, codec: ItemCodec) -> None:
        super().__init__(codec)
        self.top_k = top_k
        self._vocabulary: Vocabulary | None = None

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

    def absorb(self, response: Response) -> None:
        if not isinstance(response, ItemWeights):
            raise TypeError(f"exact expects ItemWeights, got {type(response).__name__}")
        self.check_pending(response)
        order = np.lexsort((self._tie_order(response.items), -response.weights))[: self.top_k]
        self.publish(
            response.items[order],
            response.weights[order] / SHARE_UNIT,
            {"users": int(response.responding_users), "items_present": int(response.weights.size)},
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

    def parameters(self) -> dict[str, Any]:
        return {"top_k": self.top_k}


@dataclass(frozen=True)
class ExactKeys(ConfigSection):
    """The exact baseline's own ``[protocol]`` keys."""

    top_k: int = TOP_K_KEY.field()


def build_exact(privacy: PrivacySection, protocol: Section, n_users: int, codec: ItemCodec, seed: int) -> ExactServer:
    """The exact top k from a config (the privacy target is ignored: this baseline has none)."""
    return ExactServer(ExactKeys.of(protocol).top_k, codec)
