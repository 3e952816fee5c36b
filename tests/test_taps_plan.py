"""``fedhh plan taps`` and ``fedhh size taps``: the plan describes the run the server makes (its first
level exactly, later levels no longer than the run's, each party's noise as the server computes it),
the sizing's answer is the smallest population meeting its analysis, never grows with ε, and runs at
the answer find the item about as often as asked (by law above 10^6 users); bad input exits 2 naming
the flag."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.planning.sizing import PRECISION
from fedhh.protocols import PROTOCOLS
from fedhh.protocols.taps.plan import plan_taps, planned_server
from fedhh.protocols.taps.sizing import discovery_probability, size_taps
from simulations.cli import main
from simulations.fast import run_fast

LANGUAGES = ['protocol.name="taps"', 'population.languages="en,fr,de,es"', "population.vocabulary=2000",
             "population.users=200000"]


def test_the_plan_is_registered_and_states_the_guarantee(capsys: pytest.CaptureFixture[str]) -> None:
    spec = PROTOCOLS["taps"]
    assert spec.planner is plan_taps and spec.plan_command is not None and spec.sizing is not None
    assert main(["plan", "taps", "--users", "1000000", "--epsilon", "4", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["privacy"]["epsilon"] == 4.0 and plan["privacy"]["delta"] == 0.0
    assert plan["shuffle"]["local_epsilon"] == 4.0 and 0 < plan["shuffle"]["epsilon"] < 4.0
    assert plan["party_users"] == [250_000] * 4 and plan["levels"] == len(plan["levels_planned"]) == 9
    assert main(["plan", "taps", "--users", "1000000", "--epsilon", "4"]) == 0
    table = capsys.readouterr().out
    assert "TAPS plan: n = 1,000,000, ε = 4, P = 4, 9 levels" in table and "level 9: 50 of 50 bits" in table
    assert table.count("shuffled central (ε, δ)") == 1


def test_the_plan_describes_the_run() -> None:
    """A run on four languages: its first level's length is the plan's, every later level's at least
    the plan's (the plan assumes every party keeps kept_per_level prefixes, the most), the last whole
    values; each party's estimate's standard deviation is the plan's, to the randomness of how many
    of its users a level holds."""
    config = load_config(None, LANGUAGES)
    experiment = Experiment(config)
    run = run_fast(experiment, 1, "inprocess")
    plan = plan_taps(200_000, config.privacy.epsilon, max_length=config.protocol.max_length)
    lengths = [level["prefix_length"] for level in plan["levels_planned"]]
    assert run.result.params["prefix_lengths"][0] == lengths[0]
    assert all(ran >= planned for ran, planned in zip(run.result.params["prefix_lengths"], lengths, strict=True))
    assert run.result.params["prefix_lengths"][-1] == lengths[-1] == plan["value_length"]
    assert plan["levels_planned"][0]["candidates_per_party"] == 1024
    server = experiment.make_server()
    request = server.next_request()
    held = experiment.build_shard(0, 1)
    response = PROTOCOLS["taps"].respond(request, held, experiment.randomness)
    estimates = server._estimate(request, response)
    for party, level in enumerate(estimates):
        planned = plan["levels_planned"][0]["party_sd"][party]
        reporters = int(response.reporters[party])
        expected_reporters = plan["users_per_level_group"][party]
        assert abs(reporters - expected_reporters) < 5 * math.sqrt(expected_reporters)
        assert math.sqrt(level.variances[0]) == pytest.approx(planned, rel=5 / math.sqrt(expected_reporters))
    first = plan["levels_planned"][0]
    assert first["global_sd"] == pytest.approx(math.sqrt(4) * first["party_sd"][0], rel=1e-3)
    assert first["global_threshold_share"] == pytest.approx(first["party_threshold_share"][0] / 2, rel=1e-3)
    assert first["party_threshold_count"][0] == pytest.approx(2.0 * first["party_sd"][0])


def test_grr_s_noise_grows_with_the_prefix_s_domain() -> None:
    plan = plan_taps(10**9, 2.0, tree_oracle="grr", tree_encoding="symbols")
    variances = [level["per_report_variance"] for level in plan["levels_planned"]]
    assert variances == sorted(variances) and variances[-1] > 1e6 * variances[0]
    olh = plan_taps(10**9, 2.0, tree_encoding="symbols")
    assert len({level["per_report_variance"] for level in olh["levels_planned"]}) == 1


@pytest.mark.parametrize(("arguments", "flag"), [
    (["--users", "0", "--epsilon", "1"], "--users"),
    (["--users", "1000", "--epsilon", "0"], "--epsilon"),
    (["--users", "1000", "--epsilon", "nan"], "--epsilon"),
    (["--users", "1000", "--epsilon", "1", "--parties", "1"], "--parties"),
    (["--users", "1000", "--epsilon", "1", "--levels", "2"], "--levels"),
    (["--users", "5", "--epsilon", "1"], "--users"),
    (["--users", "1000", "--epsilon", "1", "--kept-per-level", "0"], "--kept-per-level"),
    (["--users", "1000", "--epsilon", "1", "--consensus-z", "-1"], "--consensus-z"),
    (["--users", "1000", "--epsilon", "1", "--alphabet", "klingon"], "--alphabet"),
    (["--users", "1000", "--epsilon", "1", "--max-length", "0"], "--max-length"),
])
def test_plan_bad_input_exits_2_naming_the_flag(
    arguments: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "taps", *arguments]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and flag in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err


# -- fedhh size taps -------------------------------------------------------------------------------------


def discovery_at(users: int, frequency: float, epsilon: float, spread: str = "even", **design: object) -> float:
    return discovery_probability(planned_server(users, epsilon, **design), frequency, spread)


@pytest.mark.parametrize(("design", "frequency"), [
    ({}, 0.01),
    ({"tree_oracle": "grr", "tree_encoding": "symbols", "max_length": 4}, 0.05),
    ({"parties": 8, "consensus_z": 3.0}, 0.01),
], ids=["olh", "grr", "8-parties"])
def test_size_taps_is_the_smallest_population_and_never_grows_with_epsilon(
    design: dict[str, object], frequency: float
) -> None:
    epsilons = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
    answers = [size_taps(frequency, 0.9, epsilon, **design) for epsilon in epsilons]
    users = [answer.users for answer in answers]
    assert users == sorted(users, reverse=True) and len(set(users)) == len(users), users
    for epsilon, answer in zip(epsilons, answers):
        assert discovery_at(answer.users, frequency, epsilon, **design) >= 0.9 > discovery_at(
            int(answer.users * (1 - PRECISION)), frequency, epsilon, **design)
        assert answer.warnings == [] and answer.parameters["levels"] == len(answer.parameters["prefix_lengths"])
    # what the bisection relies on: the analysis grows with n and with ε
    sizes = np.geomspace(min(users) / 10, max(users) * 10, 30).astype(int)
    grid = np.array([[discovery_at(int(n), frequency, epsilon, **design) for n in sizes] for epsilon in epsilons])
    assert np.all(np.diff(grid, axis=1) >= -1e-12) and np.all(np.diff(grid, axis=0) >= -1e-12)
    assert grid[0, 0] < 0.5 < grid[-1, -1]


def test_size_taps_verify_runs_the_protocol_by_users_and_by_law(capsys: pytest.CaptureFixture[str]) -> None:
    """At the answer, runs of the real protocol on the item planted in every party, or in one, find it
    about as often as the analysis says: by users below 10^6, by law above."""
    for frequency, spread, simulation in ((0.02, "even", "users"), (0.02, "one", "users"), (0.002, "even", "law")):
        assert main(["size", "taps", "--frequency", str(frequency), "--discovery", "0.9", "--epsilon", "4", "--verify",
                     "--spread", spread, "--trials", "40", "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        verification = answer["verification"]
        assert verification["simulation"] == simulation and verification["users"] == answer["users"]
        assert abs(verification["rate"] - answer["discovery"]) < 0.12, verification


def test_holders_in_one_party_need_fewer_users_than_holders_spread_evenly() -> None:
    """A party must see the item by its own estimate (the others' evidence only raises its rank), so a
    share held in one party is found in a smaller population than the same share spread over four;
    a share above 1/P cannot be in one party."""
    even, one = size_taps(0.02, 0.9, 4.0), size_taps(0.02, 0.9, 4.0, spread="one")
    assert one.users < even.users / 3 and one.parameters["spread"] == "one"
    assert max(one.parameters["party_keeps_to_the_end"][1:]) < 1e-6  # the others see noise only
    with pytest.raises(InputError, match="--frequency: 0.3 of the users cannot all be in one of 4"):
        size_taps(0.3, 0.9, 4.0, spread="one")


@pytest.mark.parametrize(("arguments", "flag"), [
    (["--frequency", "0", "--discovery", "0.9", "--epsilon", "2"], "--frequency"),
    (["--frequency", "0.01", "--discovery", "1", "--epsilon", "2"], "--discovery"),
    (["--frequency", "0.01", "--discovery", "0.9", "--epsilon", "-2"], "--epsilon"),
    (["--frequency", "0.01", "--discovery", "0.9", "--epsilon", "2", "--parties", "65"], "--parties"),
    (["--frequency", "0.01", "--discovery", "0.9", "--epsilon", "2", "--oracle", "oue"], "--oracle"),
    (["--frequency", "0.01", "--discovery", "0.9", "--epsilon", "2", "--levels", "1"], "--levels"),
    (["--frequency", "1e-9", "--discovery", "0.9", "--epsilon", "0.01"], "--frequency / --discovery"),
    (["--frequency", "0.01", "--discovery", "0.9", "--epsilon", "2", "--top-k", "5"], "--top-k"),
    (["--frequency", "0.01", "--discovery", "0.9", "--epsilon", "2", "--spread", "half"], "--spread"),
    (["--frequency", "0.5", "--discovery", "0.9", "--epsilon", "2", "--spread", "one"], "--frequency"),
])
def test_size_bad_input_exits_2_naming_the_flag(
    arguments: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["size", "taps", *arguments]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and flag in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err


def test_size_taps_by_recall_on_a_population_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "small.toml"
    config.write_text('[population]\nsource = "zipf"\nusers = 20000\nvocabulary = 300\nitem_length = 4\n'
                      'zipf_exponent = 1.3\n[protocol]\nmax_length = 4\n[privacy]\nepsilon = 4.0\n', encoding="utf-8")
    assert main(["size", "taps", "--top-k", "5", "--recall", "0.8", "--population", str(config), "--trials", "2",
                 "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["protocol"] == "taps" and answer["recall"] >= 0.8 and answer["top_k"] == 5
    assert sorted(path.name for path in tmp_path.iterdir()) == ["small.toml"]  # nothing written
