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
  order-statistics model of :mod:`fedhh.protocols.selection_model`, which
  refines [Wang19]'s eq. (5) near rank k).  :func:`pem_identification` is the one
  place that calls the model, so a better one can replace it there.
* TreeHist: no closed form; nothing is predicted.

Every prediction is a probability per item of the population's vocabulary
(:func:`predicted_discovery`), from which a sweep derives expected recall
and NCR.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from fedhh.metrics import Truth
from fedhh.population import Shard
from fedhh.privacy.triehh import PrivacyTargetError, solve_triehh, worst_case_discovery_rate
from fedhh.protocols import ServerProtocol
from fedhh.protocols.pem import PEMServer
from fedhh.protocols.prefix_search import TOP_K
from fedhh.protocols.triehh import TrieHHServer


def predicted_discovery(
    server: ServerProtocol, shard: Shard, truth: Truth, items: np.ndarray
) -> np.ndarray | None:
    """For the vocabulary items ``items``, the probability the protocol's analysis gives that
    this run finds each (``None`` where the protocol or the population has no analysis)."""
    if isinstance(server, TrieHHServer) and shard.one_item_per_user:
        params = server.params
        return np.asarray(worst_case_discovery_rate(
            truth.holders[items], params.n_users, params.batch_size, params.theta, params.max_rounds
        ), dtype=np.float64)
    if isinstance(server, PEMServer) and server.params.selection == TOP_K:
        return pem_identification(server, shard, truth)[items]
    return None


def prediction_key(server: ServerProtocol) -> Hashable:
    """What :func:`predicted_discovery` depends on besides the population: runs with equal keys on
    one population share their prediction (a sweep's trials at one grid point, for TrieHH)."""
    if isinstance(server, TrieHHServer):
        return ("triehh", server.params)
    if isinstance(server, PEMServer):
        return ("pem", server.params, server.level_epsilon, server.oracle_seed)
    return (server.name,)


def pem_identification(server: PEMServer, shard: Shard, truth: Truth) -> np.ndarray:
    """For every item, the product over levels of its chance to stay among the kept candidates
    (the utility model's default, order statistics), for the run's design and true frequencies.

    Users holding no encodable item report the empty value, which competes for
    the candidates' places like any value, so it is part of the frequencies.
    """
    from fedhh.protocols.pem_analysis import PEMDesign, UtilityModel

    params = server.params
    empty = float(shard.users_without_items)
    frequencies = np.append(truth.frequency, empty)
    order = np.lexsort((np.arange(frequencies.size), -frequencies))
    top_k = min(params.top_k, frequencies.size)
    model = UtilityModel(
        server.encoding.space, params.n_users, server.level_epsilon, top_k, params.oracle,
        frequencies, oracle_seed=server.oracle_seed,
    )
    design = PEMDesign(params.start_length, params.segment_lengths, params.shares, params.candidates_per_step)
    found = np.zeros(frequencies.size)
    found[order[:top_k]] = model.predict(design).overall
    return found[:-1]


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
