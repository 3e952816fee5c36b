"""The ground truth of a run comes from the shards its driver built, and equals the whole population's."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.data.population import PopulationCounts
from fedhh.experiment import Experiment
from simulations.fast import run_fast

RUN = [
    'population.source="zipf"', "population.users=30000", "population.vocabulary=3000",
    "population.item_length=5", "population.zipf_exponent=1.2", "protocol.max_length=6",
    "privacy.epsilon=8.0", "privacy.delta=1e-6", "run.seed=11", 'run.driver="fast"',
]


def refuse_a_second_build() -> PopulationCounts:
    raise AssertionError("the truth was counted from the source again")


@pytest.mark.parametrize("words_per_user", [1, 3])
def test_fast_driver_truth_comes_from_its_shards_and_equals_the_whole_population(
    words_per_user: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(None, [*RUN, f"population.words_per_user={words_per_user}"])
    experiment = Experiment(config)
    monkeypatch.setattr(experiment.source, "population_counts", refuse_a_second_build)
    run = run_fast(experiment, 8, "inprocess")
    document = experiment.finish(run.result, {}, "fast/inprocess", counts=run.counts)

    reference = Experiment(config)  # holds no shard: counts the population itself
    whole = reference.source.build_all().counts()
    for counts in (run.counts, reference.population_counts):
        np.testing.assert_array_equal(counts.weight_units, whole.weight_units)
        np.testing.assert_array_equal(counts.holders, whole.holders)
        assert (counts.users, counts.users_without_items) == (whole.users, whole.users_without_items)
    np.testing.assert_array_equal(experiment.truth(run.counts).order, reference.truth().order)
    assert reference.finish(run.result, {}, "fast/inprocess") == document
    assert document["evaluation"]["truth_top"][0]["true_count"] == int(whole.holders.max())


def test_counts_of_another_population_are_refused() -> None:
    experiment = Experiment(load_config(None, RUN))
    other = Experiment(load_config(None, [*RUN, "population.users=29999"]))
    with pytest.raises(ValueError, match="cover 29999 users, the population has 30000"):
        experiment.truth(other.population_counts)
    run = run_fast(experiment, 2, "inprocess")
    with pytest.raises(ValueError, match="cover 29999 users, the population has 30000"):
        experiment.finish(run.result, {}, "fast/inprocess", counts=other.population_counts)
