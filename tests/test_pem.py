"""PEM: value encodings, invariance to sharding, transport and collection mode, the utility
analysis of [Wang19] (eq. (5)) against measured identification rates, the optimizer against
a short segment, the privacy report, the result document, and bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from fedhh.config import ConfigError, load_config, schema
from fedhh.driving import drive
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.oracles.registry import ORACLE_NAMES
from fedhh.postprocess import POSTPROCESSORS
from fedhh.protocols import plan
from fedhh.protocols.common.prefix_encoding import PrefixEncoding, ValueSpace
from fedhh.protocols.prefix_search.oracles import answers_with_support, decode_counts
from fedhh.protocols.prefix_search.pem import PEMServer
from fedhh.protocols.prefix_search.pem_analysis import PEMDesign, UtilityModel, optimize_pem, zipf_frequencies
from fedhh.protocols.prefix_search.reports import respond
from fedhh.protocols.prefix_search.search import SearchParameters, level_shares, uniform_segments
from simulations.cli import main
from simulations.fast import run_fast
from simulations.plan_cli import add_plan_parser

from .helpers import lowercase_codec, population_of

SMALL_RUN = [
    'protocol.name="pem"', 'population.source="zipf"', "population.users=20000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.3", "protocol.max_length=4", "privacy.epsilon=4.0",
    "protocol.start_length=4", "protocol.segment_length=8", 'protocol.oracle="flh"', "run.seed=5", "run.top_k=10",
]


def run_view(result) -> tuple[list[tuple[str, float | None]], list[dict]]:  # noqa: ANN001
    return [(d.item, d.estimated_count) for d in result.discoveries], [r.to_dict() for r in result.trace]


def pem_parameters(n_users: int, epsilon: float, m: int, gamma: int, eta: int, oracle: str, **options) -> SearchParameters:
    segments = uniform_segments(m, gamma, eta)
    return SearchParameters("pem", n_users, epsilon, "bits", gamma, segments, level_shares(len(segments)), oracle,
                            options.pop("candidates", 32), options.pop("top_k", 32), "top-k", **options)


def discoveries(params: SearchParameters, shard, codec, seed: int) -> list[str]:  # noqa: ANN001
    server = PEMServer(params, codec, seed)
    randomness = KeyedRandomness(seed)
    return [d.item for d in drive(server, lambda request: [respond(request, shard, randomness)]).discoveries]


# -- encodings ------------------------------------------------------------------------------


def test_bit_encoding_is_the_character_codes_and_decodes_back() -> None:
    shard = population_of(["ab", "zz"], lowercase_codec(max_length=3))
    encoding = PrefixEncoding("bits", shard.vocabulary.codec)
    units = encoding.units(shard.vocabulary)
    assert encoding.length == 15 and units.shape == (2, 15)
    assert "".join(map(str, units[0])) == "00001" "00010" "00000"  # a = 1, b = 2, then "no character"
    assert [encoding.decode(row) for row in units] == ["ab", "zz"]
    keys = encoding.prefix_keys(shard.vocabulary, 10)
    assert keys.tolist() == [0b0000100010, 0b1101011010, 0]  # integer prefixes; the empty value last


def test_symbol_prefixes_that_ended_have_a_single_extension() -> None:
    encoding = PrefixEncoding("symbols", lowercase_codec(max_length=4))
    assert encoding.extensions(2).shape == (26 * 26 + 26 + 1, 2)
    children = encoding.extend(np.array([[3, 0], [1, 2]]), 1)
    assert children.shape == (1 + 27, 3)
    assert children[0].tolist() == [3, 0, 0]  # "c" had ended
    long_keys = encoding.keys(np.ones((2, 14), dtype=np.int64))  # 27^14 > 2^64: hashed
    assert long_keys[0] == long_keys[1] and long_keys[0] != encoding.keys(np.ones((1, 13), dtype=np.int64))[0]


def test_only_values_that_can_be_items_are_reportable() -> None:
    """The empty value (what users without an item report), a character after a "no
    character" code (it would decode like a shorter value), and codes beyond the alphabet."""
    codec = lowercase_codec(max_length=3)
    bits = PrefixEncoding("bits", codec)
    rows = np.array([[int(b) for b in f"{a:05b}{b:05b}{c:05b}"] for a, b, c in
                     [(1, 2, 0), (0, 0, 0), (1, 0, 2), (27, 1, 0), (26, 26, 26), (3, 0, 0)]])
    assert bits.reportable(rows).tolist() == [True, False, False, False, True, True]
    symbols = PrefixEncoding("symbols", lowercase_codec(max_length=4, unit_size=2))
    radix = symbols.codec.radix
    rows = np.array([[1 * radix + 2, 3 * radix], [0, 0], [1 * radix + 2, 3], [1 * radix, 2 * radix]])
    assert symbols.reportable(rows).tolist() == [True, False, False, False]


def test_pem_reports_k_values_when_k_candidates_exist() -> None:
    """16-bit values (two bytes) of wordfreq words, seed 9: most users hold a longer word, so
    they report the empty value, which came out on top and took one of the 16 places."""
    config = load_config(None, [
        'protocol.name="pem"', "population.users=50000", 'protocol.alphabet="bytes"', "protocol.max_length=2",
        "protocol.top_k=16", "protocol.candidates_per_step=16", "run.seed=9", "run.top_k=16",
    ])
    experiment = Experiment(config)
    result = run_fast(experiment, 1, backend="inprocess").result
    assert len(result.discoveries) == 16 and "" not in {d.item for d in result.discoveries}
    assert result.stopped_because == "all 1 levels done"
    assert experiment.truth().holders.size > 16  # k candidates exist
    # When fewer than k can be found, the result says why.
    few = Experiment(config.with_overrides({"protocol.selection": "threshold", "protocol.threshold": 0.01}))
    short = run_fast(few, 1, backend="inprocess").result
    assert len(short.discoveries) < 16
    assert short.stopped_because.endswith(f"{len(short.discoveries)} of k = 16 values reported: the others were below the threshold")


def test_config_choices_name_what_the_protocol_layer_defines() -> None:
    keys = schema()["protocol"]
    assert keys["oracle"].choices == ("auto", *ORACLE_NAMES)
    assert keys["postprocess"].choices == tuple(POSTPROCESSORS)


# -- invariance -------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ['protocol.oracle="olh"', "population.words_per_user=2"], ['protocol.oracle="hm"']])
def test_one_and_eight_shards_and_one_shot_give_the_same_run(extra: list[str]) -> None:
    experiment = Experiment(load_config(None, SMALL_RUN + extra))
    one = run_fast(experiment, 1, "inprocess").result
    eight = run_fast(experiment, 8, "inprocess").result
    assert len(one.discoveries) >= 10
    assert run_view(one) == run_view(eight)
    one_shot = Experiment(load_config(None, [*SMALL_RUN, *extra, 'protocol.collection="one-shot"']))
    collected = run_fast(one_shot, 3, "inprocess").result
    assert run_view(collected)[0] == run_view(one)[0]
    assert len(collected.trace) == 1 and len(one.trace) == 2


def test_ray_actors_give_the_same_run_as_in_process() -> None:
    import ray

    experiment = Experiment(load_config(None, SMALL_RUN))
    try:
        via_ray = run_fast(experiment, 3, "ray")
    finally:
        ray.shutdown()
    assert via_ray.backend == "ray"
    assert run_view(via_ray.result) == run_view(run_fast(experiment, 1, "inprocess").result)


def test_flower_simulation_matches_the_fast_driver(tmp_path: Path) -> None:
    from simulations.flower import run_flower_simulation

    config = load_config(None, SMALL_RUN)
    reference = run_fast(Experiment(config), 1, "inprocess").result
    document = run_flower_simulation(config, 3, output_dir=tmp_path / "out")
    found = {(h["item"], h["estimated_count"]) for h in document["heavy_hitters"]}
    assert found == {(d.item, d.estimated_count) for d in reference.discoveries}
    assert [{k: v for k, v in r.items() if k in reference.trace[0].values} for r in document["rounds"]] == [
        r.values for r in reference.trace
    ]


def test_responses_are_additive_across_any_split() -> None:
    experiment = Experiment(load_config(None, SMALL_RUN))
    population = experiment.build_shard(0, 1)
    request = experiment.make_server().next_request()
    whole = respond(request, population, experiment.randomness)
    parts = [respond(request, population.slice(a, b), experiment.randomness) for a, b in [(0, 3), (3, 9000), (9000, 20000)]]
    combined = type(whole).combine(parts)
    np.testing.assert_array_equal(combined.counts, whole.counts)
    np.testing.assert_array_equal(combined.reporters, whole.reporters)
    assert combined.sampled_users == whole.sampled_users == sum(p.sampled_users for p in parts)


@pytest.mark.parametrize("oracle", ORACLE_NAMES)
def test_shards_send_counts_that_decode_once_to_the_one_shard_support(oracle: str) -> None:
    """Every oracle: the 4 shards' summed counts decode to exactly the support of one shard
    holding everyone, and (oracles with flat statistics) to the sum of the 4 shards' own
    supports, which is what each shard decoded before."""
    experiment = Experiment(load_config(None, [*SMALL_RUN, f'protocol.oracle="{oracle}"', "population.users=4000"]))
    server = experiment.make_server()
    request = server.next_request()
    level_oracle = server.level_oracle(request.level)
    shards = [experiment.build_shard(i, 4) for i in range(4)]
    parts = [respond(request, shard, experiment.randomness) for shard in shards]
    whole = respond(request, experiment.build_shard(0, 1), experiment.randomness)
    combined = type(whole).combine(parts)
    once = decode_counts(level_oracle, combined.counts, combined.reporters, request.candidates)
    reference = decode_counts(level_oracle, whole.counts, whole.reporters, request.candidates)
    np.testing.assert_array_equal(once.counts, reference.counts)
    np.testing.assert_array_equal(once.n_users, reference.n_users)
    if not answers_with_support(level_oracle, request.candidates.size):
        assert combined.counts.size == level_oracle.flat_size()  # statistics, whatever the candidates
        per_shard = [decode_counts(level_oracle, p.counts, p.reporters, request.candidates).counts for p in parts]
        np.testing.assert_array_equal(once.counts, np.sum(per_shard, axis=0))


# -- [Wang19]'s analysis ----------------------------------------------------------------------

ANALYSIS_POPULATION = [
    'population.source="zipf"', "population.users=100000", "population.vocabulary=10000",
    "population.item_length=5", "population.zipf_exponent=1.5", "protocol.max_length=5", "run.seed=1",
]


@pytest.fixture(scope="module")
def zipf_15() -> Experiment:
    """[Wang19] §V: n = 100,000 values, Zipf(1.5), random values; m = 25 bits (5 letters)."""
    return Experiment(load_config(None, ANALYSIS_POPULATION))


def test_measured_identification_agrees_with_equation_5(zipf_15: Experiment) -> None:
    """γ = 5, η = 10, |C_i| = 32, ε = 1 as in §V-A (m = 25 bits instead of 64 for test time, FLH
    instead of OLH for the same reason).  Over 60 runs, each top-32 value is found as often as
    eq. (5) predicts, within 3.5 binomial standard deviations (plus one run of slack); the same
    data rejects the model without FLH's hash-choice variance, so the check has power."""
    n, runs = zipf_15.n_users, 60
    shard, truth = zipf_15.build_shard(0, 1), zipf_15.truth()
    top = [truth.items[i] for i in truth.order[:32]]
    params = pem_parameters(n, 1.0, 25, 5, 10, "flh")
    found = np.zeros(32)
    for run in range(runs):
        items = set(discoveries(params, shard, zipf_15.codec, 1000 + run))
        found += [item in items for item in top]
    measured = found / runs
    frequencies = truth.frequency[truth.order] / n
    design = PEMDesign(5, params.segment_lengths, params.shares, 32)

    def off_by(oracle: str) -> np.ndarray:
        predicted = UtilityModel(ValueSpace(25, 2), n, 1.0, 32, oracle, frequencies).predict(design).overall
        tolerance = 3.5 * np.sqrt(predicted * (1 - predicted) / runs) + 1 / runs
        return np.abs(measured - predicted) / tolerance

    assert 0.2 < measured[3] < 0.9, "a value in the transition region makes the check informative"
    assert np.all(off_by("flh") <= 1), (measured, off_by("flh"))
    assert np.any(off_by("olh") > 1.5)


def test_optimizer_beats_a_short_segment_in_measured_f1() -> None:
    """§IV-C on data that follows the optimizer's assumption, Zipf(1) (ε = 4, k = 32, FLH): its
    design (queries within 2^17) finds more of the true top 32 than η = 2, beyond run-to-run noise."""
    population = Experiment(load_config(None, [*ANALYSIS_POPULATION, "population.zipf_exponent=1.0"]))
    n, shard, truth = population.n_users, population.build_shard(0, 1), population.truth()
    top = {truth.items[i] for i in truth.order[:32]}
    model = UtilityModel(ValueSpace(25, 2), n, 4.0, 32, "flh", zipf_frequencies(1.0, 10_000))
    chosen = optimize_pem(model, query_limit=1 << 17).design
    assert chosen.queries(ValueSpace(25, 2)) <= 1 << 17 and max(chosen.segment_lengths) >= 8
    optimized = SearchParameters("pem", n, 4.0, "bits", chosen.start_length, chosen.segment_lengths, chosen.shares,
                                 "flh", 32, 32, "top-k")
    short = pem_parameters(n, 4.0, 25, 5, 2, "flh")
    f1 = {
        name: np.array([len(top & set(discoveries(params, shard, population.codec, 50 + run))) / 32 for run in range(6)])
        for name, params in (("optimized", optimized), ("short", short))
    }
    spread = np.sqrt(f1["optimized"].var(ddof=1) / 6 + f1["short"].var(ddof=1) / 6)
    assert f1["optimized"].mean() - f1["short"].mean() > 3 * spread, f1


def test_plan_pem_prints_the_design_and_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    planned = plan("pem", n_users=1_000_000, epsilon=4.0, value_bits=64, top_k=32, oracle="flh")
    assert planned["queries"] <= 1 << 20 and sum(planned["segment_lengths"]) + planned["start_length"] == 64
    assert 0 < planned["predicted_f1"] <= planned["predicted_ncr"] <= 1
    assert planned["privacy"]["epsilon"] == 4.0 and planned["privacy"]["delta"] == 0.0
    parser = argparse.ArgumentParser()
    add_plan_parser(parser.add_subparsers(), "pem")
    args = parser.parse_args(["pem", "--users", "1000000", "--epsilon", "4", "--oracle", "flh", "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["segment_lengths"] == planned["segment_lengths"]


# -- privacy, results, bad input ----------------------------------------------------------------


def test_privacy_report_is_one_epsilon_ldp_report_per_user() -> None:
    report = Experiment(load_config(None, SMALL_RUN)).privacy
    assert (report.epsilon, report.delta) == (4.0, 0.0)
    assert report.model == "local, per-user ε-LDP"
    assert report.parameters["split"] == {"prefix of the user's group": 4.0}


def test_fedhh_run_writes_estimated_counts(tmp_path: Path) -> None:
    output = tmp_path / "run"
    assert main(["run", *[f"--set={s}" for s in SMALL_RUN], "--set=run.driver=fast", "--output", str(output), "--quiet"]) == 0
    document = json.loads((output / "result.json").read_text(encoding="utf-8"))
    assert document["protocol"] == "pem" and document["privacy"]["delta"] == 0.0
    top, truth = document["heavy_hitters"][0], document["evaluation"]["heavy_hitters"][0]
    assert truth["item"] == top["item"] and truth["true_rank"] == 1
    assert abs(top["estimated_count"] - truth["true_count"]) < 0.1 * truth["true_count"]
    assert document["params"]["prefix_lengths"] == [12, 20]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"segment_lengths": (0, 20)}, "protocol.segment_length"),
        ({"start_length": 15}, "protocol.start_length + protocol.segment_length"),
        ({"top_k": 0}, "protocol.top_k"),
        ({"oracle": "nope"}, "protocol.oracle"),
        ({"n_users": 1, "segment_lengths": (4, 4), "shares": (0.5, 0.5)}, "at most 1 levels"),
        ({"candidates_per_step": 0}, "protocol.candidates_per_step"),
    ],
)
def test_bad_parameters_name_the_field(change: dict, field: str) -> None:
    values = {
        "protocol": "pem", "n_users": 1000, "epsilon": 1.0, "encoding": "bits", "start_length": 12,
        "segment_lengths": (8,), "shares": (1.0,), "oracle": "olh", "candidates_per_step": 32, "top_k": 32,
        "selection": "top-k", **change,
    }
    with pytest.raises(ValueError, match=field.replace("+", r"\+")):
        PEMServer(SearchParameters(**values), lowercase_codec(max_length=4), 0)


def test_bad_config_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match="protocol.oracle"):
        load_config(None, ['protocol.name="pem"', 'protocol.oracle="nope"'])
    with pytest.raises(ValueError, match="protocol.start_length"):
        Experiment(load_config(None, [*SMALL_RUN, "protocol.start_length=30"]))
    with pytest.raises(ValueError, match="protocol.postprocess"):
        Experiment(load_config(None, [*SMALL_RUN, 'protocol.oracle="count-median"', 'protocol.postprocess="mle-apx"']))
    assert main(["run", *[f"--set={s}" for s in SMALL_RUN], "--set=protocol.segment_length=-1"]) == 2
