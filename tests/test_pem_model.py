"""The order-statistics model of PEM against eq. (5) and against runs, and the optimizer that uses it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.driving import drive
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols.common.prefix_encoding import ValueSpace
from fedhh.protocols.prefix_search.pem import PEMServer
from fedhh.protocols.prefix_search.pem_analysis import (
    DEFAULT_QUERY_LIMIT,
    EQUATION_5,
    ORDER_STATISTICS,
    PEMDesign,
    UtilityModel,
    candidate_designs,
    optimize_pem,
    zipf_frequencies,
)
from fedhh.protocols.prefix_search.reports import respond
from fedhh.protocols.prefix_search.search import SearchParameters
from simulations.cli import main

RUNS = 40


def test_order_statistics_model_is_closer_to_runs_than_equation_5() -> None:
    """The issue's setting: n = 50,000, ε = 2, OLH, k = 8 (one level over 10-bit values, two letters with
    Zipf(1.1) popularity, to keep OLH's decoding short).  Eq. (5) gives each of the top 8 its k - j + 1
    places among zero-frequency candidates and calls the 8th value near-certain; the runs find it about
    half the time, as the order-statistics model says.  Tolerances: 3.5 binomial standard deviations of
    RUNS runs around each prediction, plus 0.05 for the model's approximations."""
    population = Experiment(load_config(None, [
        'population.source="zipf"', "population.users=50000", "population.vocabulary=300",
        "population.item_length=2", "population.zipf_exponent=1.1", "protocol.max_length=2", "run.seed=0",
    ]))
    n, shard, truth = population.n_users, population.build_shard(0, 1), population.truth()
    top = [truth.items[i] for i in truth.order[:8]]
    params = SearchParameters("pem", n, 2.0, "bits", 0, (10,), (1.0,), "olh", 8, 8, "top-k")
    found = np.zeros(8)
    for run in range(RUNS):
        randomness = KeyedRandomness(1000 + run)
        result = drive(PEMServer(params, population.codec, 1000 + run), lambda request: [respond(request, shard, randomness)])
        found += [item in {d.item for d in result.discoveries} for item in top]
    measured = found / RUNS
    frequencies = truth.frequency[truth.order] / n
    design = PEMDesign(0, (10,), (1.0,), 8)

    def predicted(model: str) -> np.ndarray:
        return UtilityModel(ValueSpace(10, 2), n, 2.0, 8, "olh", frequencies, model=model).predict(design).overall

    order_statistics, equation_5 = predicted(ORDER_STATISTICS), predicted(EQUATION_5)
    spread = np.sqrt(np.maximum(order_statistics * (1 - order_statistics), 1 / RUNS) / RUNS)
    assert np.all(np.abs(measured - order_statistics) <= 3.5 * spread + 0.05), (measured, order_statistics)
    assert 0.2 < measured[7] < 0.8, "the 8th value is in the transition: the check is informative"
    assert equation_5[7] - measured[7] > 3.5 * np.sqrt(max(equation_5[7] * (1 - equation_5[7]), 1 / RUNS) / RUNS)
    assert np.sum((measured - order_statistics) ** 2) < np.sum((measured - equation_5) ** 2) / 4


def test_screened_optimizer_matches_the_exhaustive_one() -> None:
    """Eq. (5) screens the designs, the model decides: on a small space the choice is within 0.01 of
    the F1 of comparing every design by the model."""
    model = UtilityModel(ValueSpace(30, 2), 200_000, 2.0, 8, "olh", zipf_frequencies(1.0, 2000))
    chosen = optimize_pem(model)
    designs = candidate_designs(model.space, 8, DEFAULT_QUERY_LIMIT)
    assert len(designs) > 6
    exhaustive = max(model.predict(design).f1 for design in designs)
    assert chosen.f1 >= exhaustive - 0.01
    assert chosen.f1 < model.with_model(EQUATION_5).predict(chosen.design).f1  # eq. (5) is the optimistic one


def test_plan_pem_prints_both_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "pem", "--users", "50000", "--epsilon", "2", "--bits", "30", "--top-k", "8", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["utility_model"] == ORDER_STATISTICS
    assert plan["predicted_f1"] < plan["equation_5"]["predicted_f1"]
    assert len(plan["identification_probability"]) == len(plan["equation_5"]["identification_probability"]) == 8
    assert main(["plan", "pem", "--users", "50000", "--epsilon", "2", "--bits", "30", "--model", "eq5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["utility_model"] == EQUATION_5
    with pytest.raises(SystemExit) as refused:
        main(["plan", "pem", "--users", "50000", "--epsilon", "2", "--model", "nope"])
    assert refused.value.code == 2
