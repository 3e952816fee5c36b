"""SFP's law sampler (run.simulation = "law") against its users path.

* **Moments of the round**: each cell of both sketches (per position for the fragments) has the
  users path's exact mean and variance given the shard's items: a user reports at position
  ``k`` with probability ``1/P`` its fragment there with the word's hash, and its word, each
  through the sketch (one user's moments: :func:`tests.test_oracle_laws.user_moments`),
  within 5 standard errors over fixed seeds; draws scaled by 5 % are not.
* **Utility in distribution**: F1, recall@K and NCR over 100 seeds at 10^5 users, users path
  against law (Welch per metric, Bonferroni over the three: see
  :mod:`tests.test_law_protocols`), and a law whose sketches run at an ε whose OUE ``q`` is
  5 % low is told apart.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.data.counted import counted_users
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols import get_protocol
from fedhh.protocols.sfp.encoding import vocabulary_values
from fedhh.protocols.sfp.messages import SFPRequest
from simulations.fast import run_fast

from .test_law_protocols import SMALL, Law, assert_told_apart, two_sample
from .test_law_runs import BILLION, TOP_WORDS, law_config
from .test_law_samplers import moments_agree
from .test_oracle_laws import user_moments

SKETCH = ["protocol.name=sfp", "protocol.fragment_sketch_rows=8", "protocol.fragment_sketch_width=64"]


def q_five_percent_low(epsilon: float) -> float:
    """The ε whose OUE ``q = 1/(e^ε + 1)`` is 5 % below ``epsilon``'s."""
    return math.log((math.exp(epsilon) + 1) / 0.95 - 1)


def sharper(law: Law) -> Law:
    """SFP's law with both sketches at the ε of :func:`q_five_percent_low`."""
    def wrong(request: SFPRequest, held: object, randomness: KeyedRandomness) -> object:
        return law(dataclasses.replace(request, fragment_epsilon=q_five_percent_low(request.fragment_epsilon),
                                       word_epsilon=q_five_percent_low(request.word_epsilon)), held, randomness)
    return wrong


def test_sfp_law_and_users_agree_in_distribution() -> None:
    config = load_config(overrides=SMALL + SKETCH + ["run.top_k=10", "privacy.epsilon=1"])
    same, apart = two_sample(config, sharper(get_protocol("sfp").law), seeds=100)
    assert_told_apart(same, apart)


@pytest.mark.parametrize("oracle", ["cms", "hcms"])
def test_the_sfp_round_has_the_exact_moments(oracle: str) -> None:
    """Fragment cells at position k: sum over items of reporters x (mean, mean square) / P of the
    item's (fragment k, hash) report; word cells: sum over items of reporters x its word's."""
    config = load_config(overrides=[*SMALL[:-1], "run.simulation=law", "population.users=3000", *SKETCH,
                                    "protocol.fragment_sketch_rows=4", "protocol.fragment_sketch_width=16",
                                    f"protocol.fragment_oracle={oracle}", "privacy.epsilon=2"])
    experiment = Experiment(config)
    request = experiment.make_server().next_request()
    assert isinstance(request, SFPRequest)
    shard = experiment.counted_shard(0, 1)
    law = get_protocol("sfp").law
    assert law is not None
    draws = []
    for seed in range(2000):
        response = law(request, counted_users(experiment.source, 0, shard.n_users, 0), KeyedRandomness(seed))
        draws.append(np.concatenate((*np.concatenate((response.fragment_counts, response.fragment_reporters), axis=1),
                                     response.word_counts, response.word_reporters)))
    codec = experiment.codec
    fragments = request.fragment_codec(codec)
    reports, words = vocabulary_values(fragments, experiment.source.vocabulary)
    holders = np.append(shard.holders, shard.users_without_items).astype(np.float64)
    share = 1.0 / fragments.positions
    means, variances = [], []
    for values, oracle_, weight in [*((reports[:, k], request.fragment_oracle(codec), share)
                                      for k in range(fragments.positions)),
                                    (words, request.word_oracle(), 1.0)]:
        distinct, inverse = np.unique(values, return_inverse=True)
        counts = np.bincount(inverse, weights=holders, minlength=distinct.size)
        per_value = [user_moments(oracle_, int(value)) for value in distinct]
        means.append(sum(c * weight * first for c, (first, _) in zip(counts, per_value)))
        variances.append(sum(c * (weight * second - (weight * first) ** 2) for c, (first, second) in zip(counts, per_value)))
    mean, variance = np.concatenate(means), np.maximum(np.concatenate(variances), 0.0)
    assert moments_agree(np.array(draws), mean, variance)
    assert not moments_agree(np.array(draws) * 1.05, mean, variance)


def test_a_billion_users_run_by_law_finds_the_top_words() -> None:
    """A generated population of 10^9 users in two shards of counts: wordfreq's ten most frequent
    words come out."""
    experiment = Experiment(law_config("protocol.name=sfp"))
    run = run_fast(experiment, 2, "inprocess")
    document = experiment.finish(run.result, run.timing, "fast/inprocess", counts=run.counts)
    assert document["n_users"] == BILLION and document["simulation"] == "law"
    assert TOP_WORDS <= {hit["item"] for hit in document["heavy_hitters"]}
