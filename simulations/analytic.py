"""What the protocols' analyses predict a run finds, to draw beside what the runs found.

* TrieHH: the worst-case discovery rate of Proposition 1 ([Zhu20]), the
  bound behind ``fedhh plan triehh``: an item held by ``t`` of ``n`` users,
  one item each, sharing no prefix with any other item, needs θ of the ``m``
  sampled users in each of the ``L`` rounds.  Real words share prefixes and
  are shorter than ``L``, so runs do at least this well.  With several items
  per user the paper gives no bound (a holder votes for the item only with
  its local frequency), and none is predicted here.
* PEM: the identification probability of each value, from the run's own
  design (γ, η, group split, candidates kept) evaluated on the population's
  true frequencies by the utility model of ``fedhh plan pem`` (the
  order-statistics model of :mod:`fedhh.protocols.prefix_search.selection_model`, which
  refines [Wang19]'s eq. (5) near rank k).  :func:`pem_identification` is the one
  place that calls the model, so a better one can replace it there.
  [Wang19]'s own eq. (5), which treats every value below the top k as
  absent, is predicted beside it (:data:`EQ5`), so that a figure shows both.
* TreeHist: the planner's model (``fedhh plan treehist``, ``fedhh size
  treehist``, :func:`fedhh.protocols.prefix_search.item_discovery.item_discovery`) at the
  run's own parameters: an item held by a share ``f`` of the users, alone
  among users holding nothing, found level by level and reported by the
  final pass.  Real words differ from that item both ways: other heavy
  values compete for the places a level keeps (runs do worse), and a word's
  prefixes are also the prefixes of other words, so its early levels are
  easier (runs do better).

Every prediction is a probability per item of the population's vocabulary,
one per model (:func:`predicted_discovery`: model column -> probabilities),
from which a sweep derives expected recall and NCR, and, where the model
gives it, F1 (:func:`expected_f1`: PEM reports its k values, so its F1
follows from the expected hits; TrieHH reports every item above its
threshold and TreeHist every survivor of its pruning, so neither model says
how many items a run reports, and neither gives F1).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from fedhh.data.counted import CountedShard
from fedhh.data.population import Shard
from fedhh.metrics import Truth
from fedhh.privacy.triehh import PrivacyTargetError, solve_triehh, worst_case_discovery_rate
from fedhh.protocols import ServerProtocol
from fedhh.protocols.prefix_search.item_discovery import item_discovery
from fedhh.protocols.prefix_search.pem import PEMServer
from fedhh.protocols.prefix_search.search import TOP_K
from fedhh.protocols.prefix_search.treehist import TreeHistServer
from fedhh.protocols.triehh.server import TrieHHServer

PREDICTED = "predicted"  # each protocol's own model: TrieHH's bound, PEM's order statistics, TreeHist's planner
EQ5 = "predicted_eq5"  # PEM only: [Wang19]'s eq. (5)
MODEL_COLUMNS = (PREDICTED, EQ5)
MODEL_LABELS = {
    (PREDICTED, "triehh"): "TrieHH worst-case bound (Prop. 1)",
    (PREDICTED, "pem"): "PEM order-statistics model",
    (EQ5, "pem"): "PEM [Wang19] eq. (5)",
    (PREDICTED, "treehist"): "TreeHist planner's model",
}
TREEHIST_GRID = 49  # frequencies at which TreeHist's model is evaluated, interpolated between (log scale)


def model_label(column: str, protocol: str) -> str:
    """What a model column is, for a legend: the model's name for ``protocol``."""
    return MODEL_LABELS.get((column, protocol), f"{protocol} {column.removeprefix('predicted').strip('_') or 'model'}")


def predicted_discovery(
    server: ServerProtocol, shard: Shard | CountedShard, truth: Truth, items: np.ndarray
) -> dict[str, np.ndarray]:
    """For the vocabulary items ``items``, the probability each model of the protocol's analysis
    gives that this run finds each: model column (:data:`MODEL_COLUMNS`) -> probabilities; empty
    where the protocol or the population has no analysis."""
    if isinstance(server, TrieHHServer) and shard.one_item_per_user:
        params = server.params
        return {
            PREDICTED: np.asarray(
                worst_case_discovery_rate(
                    truth.holders[items], params.n_users, params.batch_size, params.theta, params.max_rounds
                ),
                dtype=np.float64,
            )
        }
    if isinstance(server, PEMServer) and server.params.selection == TOP_K:
        return {column: found[items] for column, found in pem_identification(server, shard, truth).items()}
    if isinstance(server, TreeHistServer):
        return {PREDICTED: treehist_discovery(server, truth.frequency[items] / server.params.n_users)}
    return {}


def expected_f1(server: ServerProtocol, by_rank: np.ndarray, k: int) -> float | None:
    """Expected F1 at ``k`` where the model gives it: PEM reports its ``top_k`` values, so F1 is
    ``2 hits / (k + top_k)``, linear in the per-item probabilities; ``None`` for the others
    (the module docstring says why)."""
    if not isinstance(server, PEMServer):
        return None
    top = by_rank[:k]
    return float(2 * top.sum() / (min(k, by_rank.size) + server.params.top_k)) if top.size else math.nan


def treehist_discovery(server: TreeHistServer, shares: np.ndarray) -> np.ndarray:
    """TreeHist's planner model at the run's parameters for items held by ``shares`` of the users,
    evaluated on a log grid over their range and interpolated (the model is smooth in log f)."""
    shares = np.asarray(shares, dtype=np.float64)
    found = np.zeros(shares.size)
    positive = shares > 0
    if not positive.any():
        return found
    low, high = float(shares[positive].min()), float(shares[positive].max())
    grid = np.geomspace(low, high, TREEHIST_GRID) if high > low else np.array([low])
    space = server.encoding.space
    rates = np.array([item_discovery(server.params, space, float(f), server.oracle_seed).probability for f in grid])
    found[positive] = np.interp(np.log(shares[positive]), np.log(grid), rates)
    return found


def prediction_key(server: ServerProtocol) -> Hashable:
    """What :func:`predicted_discovery` depends on besides the population: runs with equal keys on
    one population share their prediction (a sweep's trials at one grid point, for TrieHH)."""
    if isinstance(server, TrieHHServer):
        return ("triehh", server.params)
    if isinstance(server, (PEMServer, TreeHistServer)):
        return (server.variant.name, server.params, server.level_epsilon, server.oracle_seed)
    return (type(server),)


def pem_identification(server: PEMServer, shard: Shard | CountedShard, truth: Truth) -> dict[str, np.ndarray]:
    """For every item, the product over levels of its chance to stay among the kept candidates,
    for the run's design and true frequencies: by the utility model's default, order statistics
    (:data:`PREDICTED`), and by [Wang19]'s eq. (5) (:data:`EQ5`).

    Users holding no encodable item report the empty value, which competes for
    the candidates' places like any value, so it is part of the frequencies.
    """
    from fedhh.protocols.prefix_search.pem_analysis import EQUATION_5, PEMDesign, UtilityModel

    params = server.params
    empty = float(shard.users_without_items)
    frequencies = np.append(truth.frequency, empty)
    order = np.lexsort((np.arange(frequencies.size), -frequencies))
    top_k = min(params.top_k, frequencies.size)
    model = UtilityModel(
        server.encoding.space,
        params.n_users,
        server.level_epsilon,
        top_k,
        params.oracle,
        frequencies,
        oracle_seed=server.oracle_seed,
    )
    design = PEMDesign(params.start_length, params.segment_lengths, params.shares, params.candidates_per_step)
    predictions = {}
    for column, each in ((PREDICTED, model), (EQ5, model.with_model(EQUATION_5))):
        found = np.zeros(frequencies.size)
        found[order[:top_k]] = each.predict(design).overall
        predictions[column] = found[:-1]
    return predictions


def triehh_rate(
    frequency: float | Sequence[float] | np.ndarray, n_users: int, batch_size: int, theta: int, max_rounds: int
) -> np.ndarray:
    """Proposition 1 for items held by ``frequency x n`` users, at a run's θ, m and L."""
    shares = np.asarray(frequency, dtype=np.float64)
    holders = np.minimum(np.rint(shares * n_users), n_users).astype(np.int64)
    return np.asarray(worst_case_discovery_rate(holders, n_users, batch_size, theta, max_rounds), dtype=np.float64)


def triehh_bound(
    frequency: float | Sequence[float] | np.ndarray, n_users: int, epsilon: float, delta: float, max_rounds: int
) -> np.ndarray:
    """Proposition 1 at a privacy target: θ and m solved as ``fedhh plan triehh`` solves them
    (0 where the target cannot be met with ``n`` users)."""
    try:
        params = solve_triehh(int(n_users), float(epsilon), float(delta), int(max_rounds))
    except PrivacyTargetError:
        return np.zeros_like(np.asarray(frequency, dtype=np.float64))
    return triehh_rate(frequency, params.n_users, params.batch_size, params.theta, params.max_rounds)


def expected_recall(by_rank: np.ndarray, k: int) -> float:
    """Expected share of the true top-``k`` found, from the probabilities of the items by true rank."""
    top = by_rank[:k]
    return float(top.mean()) if top.size else math.nan


def expected_ncr(by_rank: np.ndarray, k: int) -> float:
    """Expected NCR at ``k`` (it is linear in the per-item probabilities)."""
    top = by_rank[:k]
    if not top.size:
        return math.nan
    weights = top.size + 1 - np.arange(1, top.size + 1)
    return float(weights @ top / (top.size * (top.size + 1) / 2))
