"""Secure aggregation of a round's responses with Flower's SecAgg+.

Responses are additive, so the server needs only their sum; with
``run.secure_aggregation`` it never sees a single node's response.  Flower
1.41 and 1.42 ship SecAgg+ as a server *workflow* (``SecAggPlusWorkflow``)
and a client *mod* (``secaggplus_mod``).  What they can carry, and how:

* the workflow is written against Flower's legacy API: it needs a
  ``LegacyContext`` holding a legacy ``flwr.server.strategy.Strategy``
  (``configure_fit`` / ``aggregate_fit`` over ``FitIns`` / ``FitRes``);
  it does not plug into the Message-API ``flwr.serverapp.strategy.Strategy``.
  It does run inside a Message-API ServerApp, though: each round,
  :class:`SecureAggregation` hands it a one-round legacy adapter whose
  ``configure_fit`` sends every node its request (inside ``FitIns``) and
  whose ``aggregate_fit`` receives only the unmasked sum;
* the mod works on a Message-API ``ClientApp`` (``@app.train(mods=[...])``)
  as long as the handler answers with a legacy ``FitRes`` record layout;
* it sums float vectors after clipping them to ``[-c, c]`` and quantizing
  them stochastically to ``[0, Q]``, weighted by ``num_examples``.  Counts
  come through exactly with ``c = Q / 2`` (the quantizer is then 1, and
  rounding an integer is exact), weight 1 for every node, and
  ``nodes * Q < 2**32`` (the modulus): the workflow returns the *mean*,
  which times the number of contributors is the integer sum;
* a sparse histogram has no fixed length, so a protocol's spec lays its
  response out densely over a public candidate set
  (:class:`~fedhh.protocols.spec.DenseLayout`; TrieHH: every extension of
  the trie's current level).

:class:`SecureAggregation` is the strategy's aggregation step
(``strategies.base.RoundAggregation``) for such runs: the round loop is the
same, only the way a round's sum reaches the server differs.

What the server learns per round: the sum, and which nodes contributed.
What it cannot do any more: check one node's reply (a node that lies can
only be caught if the sum itself is impossible, and then the whole round
is lost).  SecAgg+ needs at least two contributors per round and tolerates
drop-outs down to its reconstruction threshold; each round costs four
exchanges with every node instead of one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy as LegacyStrategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid

from fedhh.protocols import InvalidReply, Request, Response
from fedhh.protocols.spec import DenseLayout

from .base import LOGGER, ProtocolStrategy
from .codec import ARRAYS_RECORD, SCALARS_RECORD, MessageCodec
from .errors import FederationError

MODULUS = 2**32  # SecAgg+'s modulus range (its largest allowed value)
RECONSTRUCTION_THRESHOLD = 0.5  # share of a node's neighbours needed to unmask it
MAX_VECTOR = 1_000_000  # entries of one dense response: 8 MB per node per round


def request_to_fitins(codec: MessageCodec[Any], request: Request) -> FitIns:
    """A request in the legacy FitIns that SecAgg+ forwards: arrays as tensors, scalars as config."""
    encoded = codec.encode(request)
    arrays = cast(ArrayRecord, encoded[ARRAYS_RECORD])
    return FitIns(
        parameters=ndarrays_to_parameters([arrays[name].numpy() for name in codec.arrays]),
        config=dict(cast(Mapping[str, Any], encoded[SCALARS_RECORD])),
    )


def request_from_fitins(codec: MessageCodec[Any], fitins: FitIns) -> Any:
    """The request inside a FitIns, decoded as strictly as any other message."""
    tensors = parameters_to_ndarrays(fitins.parameters)
    if len(tensors) != len(codec.arrays):
        raise ValueError(f"{codec.tag}: FitIns carries {len(tensors)} arrays, expected {len(codec.arrays)}")
    arrays = ArrayRecord({name: Array(np.ascontiguousarray(t)) for name, t in zip(codec.arrays, tensors)})
    return codec.decode(RecordDict({ARRAYS_RECORD: arrays, SCALARS_RECORD: ConfigRecord(dict(fitins.config))}))


def masked_reply(message: Message, vector: np.ndarray) -> Message:
    """A node's vector as the FitRes that ``secaggplus_mod`` masks (weight 1, no metrics)."""
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([vector.astype(np.float64)]), 1, {})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=message)


@dataclass(frozen=True)
class SecureSum:
    """What one secure round gives the server: who contributed, and their checked sum."""

    contributors: set[int]
    response: Response | None  # None: SecAgg+ halted, or the sum was impossible
    rejected_because: str | None = None


class SecureAggregation:
    """The aggregation step that runs one SecAgg+ workflow per round and sees only the decoded sum."""

    label = "SecAgg+ sums"

    def __init__(self, context: Context, dense: DenseLayout, request_codec: MessageCodec[Any]) -> None:
        self._context = context
        self.dense = dense
        self.request_codec = request_codec

    def run_round(self, strategy: ProtocolStrategy, server_round: int, grid: Grid) -> Any:
        """One round summed by SecAgg+: the server learns the sum and who contributed, nothing else."""
        request = strategy.next_request()
        assert request is not None
        asked, participation = strategy.targets(server_round, request, grid)
        secure_sum = self.aggregate(grid, server_round, request, asked, strategy.round_timeout)
        for node in asked:
            shard = strategy.federation.members[node].shard_index
            if node not in secure_sum.contributors:
                participation.failed.append(shard)  # SecAgg+ does not say why a node dropped out
            elif secure_sum.rejected_because is not None:
                participation.rejected.append(shard)
        if secure_sum.rejected_because is not None:
            LOGGER.warning("round %d: rejected the secure sum: %s", server_round, secure_sum.rejected_because)
        responses = [secure_sum.response] if secure_sum.response is not None else []
        participation.answered = len(secure_sum.contributors) if responses else 0
        return strategy.absorb_round(server_round, responses, participation)

    def aggregate(
        self, grid: Grid, server_round: int, request: Request, asked: Mapping[int, Request], timeout: float
    ) -> SecureSum:
        """The checked sum of the asked nodes' responses, and who contributed to it."""
        if len(asked) < 2:
            raise FederationError(
                f"round {server_round}: secure aggregation needs at least 2 nodes, {len(asked)} can answer "
                "(a sum over one node is that node's response)"
            )
        length = self.dense.length(request)
        if length > MAX_VECTOR:
            raise FederationError(
                f"round {server_round}: the secure-sum vector would have {length:,} entries (more than "
                f"{MAX_VECTOR:,}): use a smaller protocol.alphabet or protocol.unit_size, or turn "
                "run.secure_aggregation off"
            )
        largest = max(self.dense.max_entry(node_request) for node_request in asked.values())
        levels = 1 << max(1, math.ceil(math.log2(2 * largest + 2)))  # Q: entries up to Q/2 are exact
        if len(asked) * levels >= MODULUS:
            raise FederationError(
                f"round {server_round}: {len(asked)} nodes with counts up to {largest} overflow SecAgg+'s "
                f"modulus 2**32; use fewer, larger shards"
            )
        adapter = _OneRound(grid, {node: request_to_fitins(self.request_codec, r) for node, r in asked.items()})
        legacy = LegacyContext(self._context, strategy=adapter)
        legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: server_round})
        legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
        SecAggPlusWorkflow(
            num_shares=1.0,
            reconstruction_threshold=RECONSTRUCTION_THRESHOLD,
            max_weight=1.0,
            clipping_range=levels / 2,
            quantization_range=levels,
            modulus_range=MODULUS,
            timeout=timeout,
        )(grid, legacy)
        if adapter.mean is None:
            return SecureSum(set(), None)
        contributors = set(adapter.contributors)
        vector = np.rint(adapter.mean * len(contributors)).astype(np.int64)
        try:
            return SecureSum(contributors, self.dense.decode(request, vector, [asked[node] for node in contributors]))
        except InvalidReply as error:
            return SecureSum(contributors, None, str(error))


class _OneRound(LegacyStrategy):
    """The legacy strategy SecAggPlusWorkflow drives for one round: send, then receive the sum."""

    def __init__(self, grid: Grid, fitins: Mapping[int, FitIns]) -> None:
        self._grid = grid
        self._fitins = fitins
        self.mean: np.ndarray | None = None
        self.contributors: list[int] = []

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        run_id = self._grid.run.run_id
        return [(GridClientProxy(node, self._grid, run_id), fitins) for node, fitins in self._fitins.items()]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Any]]:
        """SecAgg+ puts the unmasked mean into every result; keep it once, with who sent it."""
        if results:
            (self.mean,) = parameters_to_ndarrays(results[0][1].parameters)
            self.contributors = [cast(GridClientProxy, proxy).node_id for proxy, _ in results]
        return None, {}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list[Any]:
        return []

    def aggregate_evaluate(
        self, server_round: int, results: list[Any], failures: list[Any]
    ) -> tuple[None, dict[str, Any]]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> None:
        return None
