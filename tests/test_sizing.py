"""``fedhh size`` and ``fedhh plan treehist``: answers consistent with the planners and with runs,
recall-based sizing, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.privacy.triehh import PrivacyTargetError
from fedhh.protocols.common.prefix_encoding import ValueSpace
from fedhh.protocols.prefix_search.item_discovery import item_discovery
from fedhh.planning.sizing import FAR_BELOW, SizeAnswer
from fedhh.protocols.prefix_search.pem_analysis import candidate_designs
from fedhh.protocols.prefix_search.pem_assumptions import DEFAULT_QUERY_LIMIT
from fedhh.protocols.prefix_search.search import TOP_K, SearchParameters
from fedhh.protocols.prefix_search.sizing import answer_search, size_pem, size_treehist
from fedhh.protocols.prefix_search.treehist_plan import plan_treehist, treehist_parameters
from fedhh.protocols.triehh.plan import plan_triehh
from fedhh.protocols.triehh.sizing import _TrieHHFamily, size_triehh
from simulations.cli import main
from simulations.sizing import planted_population, size_by_recall, verify_item

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def discovery_at(users: int, frequency: float, epsilon: float, delta: float, max_rounds: int) -> float:
    return plan_triehh(users, epsilon, delta, max_rounds, (frequency,))["worst_case_discovery_rate"][f"{frequency:g}"]


@pytest.mark.parametrize(
    ("frequency", "discovery", "epsilon", "delta", "max_rounds"),
    [(0.001, 0.9, 4.0, 1e-12, 10), (0.01, 0.5, 1.0, 1e-9, 8), (0.002, 0.99, 8.0, 1e-10, 6)],
)
def test_size_triehh_agrees_with_plan_triehh(
    frequency: float, discovery: float, epsilon: float, delta: float, max_rounds: int
) -> None:
    """The bound (as `fedhh plan triehh` computes it) meets the target at the answer and not at 1%
    fewer users, nor at one user fewer; and it meets it at every population in a window above."""
    answer = size_triehh(frequency, discovery, epsilon, delta, max_rounds)
    assert discovery_at(answer.users, frequency, epsilon, delta, max_rounds) >= discovery
    assert discovery_at(int(answer.users * 0.99), frequency, epsilon, delta, max_rounds) < discovery
    assert discovery_at(answer.users - 1, frequency, epsilon, delta, max_rounds) < discovery
    assert answer.parameters["theta"] == plan_triehh(answer.users, epsilon, delta, max_rounds)["theta"]
    family = _TrieHHFamily(frequency, epsilon, delta, max_rounds, answer.parameters["theta"])
    above = np.arange(answer.users, answer.users + 20 * family.step())
    assert np.all(family.rates(above) >= discovery)


def discovery_or_zero(users: int, frequency: float, epsilon: float, delta: float, max_rounds: int) -> float:
    """The bound as `fedhh plan triehh` computes it, 0 where the privacy target cannot be met at all."""
    try:
        return discovery_at(users, frequency, epsilon, delta, max_rounds)
    except PrivacyTargetError:
        return 0.0


@pytest.mark.parametrize(
    ("frequency", "discovery", "epsilon", "delta", "max_rounds"),
    [
        (1.0, 0.9, 4.0, 1e-6, 10),  # the item everyone holds: the smallest n where the target can be met at all
        (1.0, 0.5, 8.0, 1e-9, 3),
        (0.5, 0.99, 2.0, 1e-7, 4),
        (0.3, 0.9, 1e308, 1e-8, 6),  # a huge ε: the sampling limit m <= n/(θ+1) binds, as in `fedhh plan`
        (0.05, 0.9, 4.0, 1e-9, 8),
        (1e-5, 0.9, 4.0, 1e-14, 10),  # a large answer (about 1.4e8 users)
    ],
)
def test_size_triehh_answers_the_smallest_population(
    frequency: float, discovery: float, epsilon: float, delta: float, max_rounds: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The answer n meets the target by the bound `fedhh plan triehh` computes, and n - 1 does not,
    for answers of a few hundred users as for answers of a hundred million (the search once started
    at 1,024 users and answered 512 or 1,024 for an item everyone holds)."""
    answer = size_triehh(frequency, discovery, epsilon, delta, max_rounds)
    assert discovery_or_zero(answer.users, frequency, epsilon, delta, max_rounds) >= discovery
    assert discovery_or_zero(answer.users - 1, frequency, epsilon, delta, max_rounds) < discovery
    assert main(["size", "triehh", "--frequency", repr(frequency), "--discovery", repr(discovery), "--epsilon",
                 repr(epsilon), "--delta", repr(delta), "--max-rounds", str(max_rounds), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["users"] == answer.users


def test_the_everyone_item_needs_only_a_population_where_the_target_can_be_met() -> None:
    """An item every user holds is found in every round where θ <= m: the answer is the smallest such n."""
    answer = size_triehh(1.0, 0.9, 4.0, 1e-6, 10)
    with pytest.raises(PrivacyTargetError):
        plan_triehh(answer.users - 1, 4.0, 1e-6, 10)
    assert plan_triehh(answer.users, 4.0, 1e-6, 10)["batch_size"] == answer.parameters["theta"]
    assert answer.users < 1024 and answer.discovery == 1.0


def test_the_rate_is_not_monotone_step_by_step() -> None:
    """Why the answer is defined over every larger population: between the sizes where m or the
    holders grow, more users lower the rate."""
    family = _TrieHHFamily(0.01, 4.0, 1e-12, 10, 15)
    rates = family.rates(np.arange(200_000, 200_400))
    assert np.any(np.diff(rates) < 0) and np.any(np.diff(rates) > 0)


def test_runs_at_the_answer_find_the_item_as_often_as_asked() -> None:
    """Real TrieHH runs on a planted population (round(f n) users hold one 4-letter item, the others
    nothing) at the answered n find the item at least as often as asked: the one-sided binomial
    tolerance of 300 runs, 3 standard deviations."""
    frequency, target, epsilon, delta, max_rounds = 0.01, 0.9, 4.0, 1e-8, 5
    answer = size_triehh(frequency, target, epsilon, delta, max_rounds)
    runs = verify_item("triehh", answer.users, frequency, answer.discovery, 300, seed=11,
                       privacy=(epsilon, delta, max_rounds))
    assert runs.rate >= target - 3 * np.sqrt(target * (1 - target) / runs.trials), runs
    assert runs.consistent


def test_planted_population_holds_one_item_that_shares_no_first_bit() -> None:
    from fedhh.protocols.common.prefix_encoding import PrefixEncoding
    from fedhh.protocols.prefix_search.item_discovery import bits_codec

    for bits in (40, 35, 14):
        codec = bits_codec(bits)
        shard, item = planted_population(codec, 1000, 37)
        assert shard.counts().holders.tolist() == [37] and shard.n_users == 1000
        units = PrefixEncoding("bits", codec).units(shard.vocabulary)
        assert units.shape == (1, bits) and units[0, 0] == 1, item


def test_treehist_analysis_agrees_with_runs() -> None:
    """The planted-item analysis of TreeHist (binary tree over 10 bits, count sketch of Hadamard
    bits) at the population where it predicts 0.5, against 60 real runs: within 3.5 binomial
    standard deviations plus 0.08 for the model's approximations (expected candidates per level)."""
    answer = size_treehist(0.1, 0.5, 4.0, value_bits=10)
    assert 0.5 <= answer.discovery and answer.below_discovery < 0.5
    runs = verify_item("treehist", answer.users, 0.1, answer.discovery, 60, seed=3,
                       search=treehist_parameters(answer.users, 4.0, value_bits=10))
    assert abs(runs.rate - answer.discovery) <= 3.5 * np.sqrt(0.25 / runs.trials) + 0.08, runs


def test_plan_treehist_describes_the_run_and_what_it_finds() -> None:
    plan = plan_treehist(1_000_000, 4.0, value_bits=40, segment_length=4, oracle="olh")
    assert plan["levels"] == 10 and plan["prefix_lengths"][-1] == 40 and plan["users_per_level"] == 100_000
    assert plan["budget_split"] == {"prefix at a uniformly chosen level": 2.0, "full string": 2.0}
    assert plan["privacy"]["epsilon"] == 4.0 and plan["privacy"]["delta"] == 0.0
    half, most = plan["detectable_share"]["0.5"], plan["detectable_share"]["0.9"]
    assert 0 < half < most < 1
    params = treehist_parameters(1_000_000, 4.0, value_bits=40, segment_length=4, oracle="olh")
    assert item_discovery(params, ValueSpace(40, 2), most).probability == pytest.approx(0.9, abs=0.02)
    sketch = plan_treehist(1_000_000, 4.0, value_bits=20)
    assert sketch["oracle"] == "count-sketch-hadamard" and sketch["sketch"] == {"rows": 13, "width": 1024}


def test_size_commands_print_json_with_users(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "triehh", "--frequency", "0.001", "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-12",
                 "--max-rounds", "10", "--json"]) == 0
    triehh = json.loads(capsys.readouterr().out)
    assert triehh["users"] == size_triehh(0.001, 0.9, 4.0, 1e-12, 10).users
    assert main(["size", "treehist", "--frequency", "0.1", "--discovery", "0.9", "--epsilon", "4", "--bits", "10",
                 "--json"]) == 0
    treehist = json.loads(capsys.readouterr().out)
    assert treehist["users"] > 0 and treehist["discovery"] >= 0.9 > treehist["below_discovery"]
    assert main(["size", "pem", "--frequency", "0.05", "--discovery", "0.5", "--epsilon", "2", "--bits", "10",
                 "--top-k", "8", "--json"]) == 0
    pem = json.loads(capsys.readouterr().out)
    assert pem["users"] > 0 and pem["discovery"] >= 0.5 > pem["below_discovery"]
    assert pem["parameters"]["utility_model"] == "order-statistics"


def test_size_verify_from_the_command_line_runs_the_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    """``--verify`` runs the simulations the command line hands to ``fedhh size``: the same runs as
    :func:`verify_item` at the answer, seed for seed."""
    assert main(["size", "triehh", "--frequency", "0.01", "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-8",
                 "--max-rounds", "5", "--verify", "--trials", "20", "--seed", "7", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    answer = size_triehh(0.01, 0.9, 4.0, 1e-8, 5)
    runs = verify_item("triehh", answer.users, 0.01, answer.discovery, 20, seed=7, privacy=(4.0, 1e-8, 5))
    assert document["users"] == answer.users
    assert document["verification"] == json.loads(json.dumps(runs.to_dict(), default=float))
    assert document["verification"]["trials"] == 20 and document["verification"]["seed"] == 7


def test_size_by_recall_on_a_population_config(tmp_path: Path) -> None:
    """Bisection over simulated runs: the answer reaches the recall, the largest size tried below it
    does not, and every size used the same seeds."""
    config = load_config(None, [
        'population.source="zipf"', "population.users=20000", "population.vocabulary=500",
        "population.item_length=4", "population.zipf_exponent=1.3", "protocol.max_length=4", "privacy.epsilon=4.0",
        "privacy.delta=1e-8", 'run.driver="fast"',
    ])
    answer = size_by_recall(config, 5, 0.8, 2)
    assert answer.recall >= 0.8 and answer.below_recall is not None and answer.below_recall < 0.8
    assert answer.below_users < answer.users <= answer.below_users * 1.011 + 1
    assert answer.seeds == [0, 1] and {step["users"] for step in answer.steps} >= {answer.users, answer.below_users}
    # the interval of sizes the runs leave open: every run short at its low end, every run of every size
    # tried from its high end on at the target
    low, high = answer.interval
    assert low is not None and high is not None and low < answer.users <= high
    steps = {step["users"]: step for step in answer.steps}
    assert all(run < 0.8 for run in steps[low]["runs"])
    assert all(run >= 0.8 for users, step in steps.items() if users >= high for run in step["runs"])
    assert all(step["low"] <= step["recall"] <= step["high"] for step in steps.values())


# [Wang19]'s PEM with FLH on 15-bit values, k = 8, an item of share 0.05 found with probability 0.9: sized
# through the optimizer's design the answer jumped where the design changed (13,047 users at ε = 2.5,
# 690,871 at ε = 2, 7,816,317 at ε = 1.5, with 0.796 at 1% fewer users at ε = 2).
FLH_EXAMPLE = {"value_bits": 15, "top_k": 8, "oracle": "flh"}
FLH_EPSILONS = (1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0)


def best_design_discovery(users: int, epsilon: float) -> float:
    """The best item discovery over every design PEM's optimizer considers, computed here design by design."""
    space = ValueSpace(15, 2)
    return max(item_discovery(SearchParameters("pem", users, epsilon, "bits", design.start_length,
                                               design.segment_lengths, design.shares, "flh", 8, 8, TOP_K),
                              space, 0.05).probability
               for design in candidate_designs(space, 8, DEFAULT_QUERY_LIMIT))


def test_size_pem_with_flh_is_monotone_in_epsilon_and_does_not_jump() -> None:
    answers = [size_pem(0.05, 0.9, epsilon, **FLH_EXAMPLE) for epsilon in FLH_EPSILONS]
    users = [answer.users for answer in answers]
    assert users == sorted(users, reverse=True) and len(set(users)) == len(users), users
    for epsilon, answer in zip(FLH_EPSILONS, answers):
        assert answer.discovery >= 0.9 > answer.below_discovery >= 0.9 - FAR_BELOW, (epsilon, answer)
        assert answer.warnings == []
    # the answer is the smallest n at which some design reaches the target: none does at 1% fewer users
    for epsilon, answer in zip(FLH_EPSILONS[::3], answers[::3]):
        assert best_design_discovery(answer.users, epsilon) >= 0.9 > best_design_discovery(answer.below_users, epsilon)
    at_two = answers[FLH_EPSILONS.index(2.0)]
    assert at_two.users < 50_000  # the three- or four-level design; the optimizer's one-level one levels off
    assert at_two.parameters["optimizer_discovery"] < 0.9 and len(at_two.parameters["segment_lengths"]) > 1


def test_a_fixed_pem_design_finds_the_item_more_often_with_more_users_or_more_epsilon() -> None:
    """What the search over designs relies on: for each design, discovery grows with n and with ε."""
    space = ValueSpace(15, 2)
    users = np.unique(np.geomspace(2_000, 5_000_000, 40).astype(int)).tolist()
    for design in candidate_designs(space, 8, DEFAULT_QUERY_LIMIT):
        grid = np.array([[item_discovery(SearchParameters("pem", n, epsilon, "bits", design.start_length,
                                                          design.segment_lengths, design.shares, "flh", 8, 8, TOP_K),
                                         space, 0.05).probability for n in users] for epsilon in (1.5, 2.5)])
        assert np.all(np.diff(grid, axis=1) >= -1e-12) and np.all(grid[1] >= grid[0] - 1e-12), design


def test_a_jump_at_the_answer_is_warned_of(capsys: pytest.CaptureFixture[str]) -> None:
    jump = SizeAnswer("pem", 690_871, 0.05, 0.9, 0.963, 683_962, 0.796, "definition", {})
    assert len(jump.warnings) == 1 and "0.796 at 683,962 users (1% fewer), far below the target 0.9" in jump.warnings[0]
    assert jump.to_dict()["warnings"] == jump.warnings
    assert SizeAnswer("pem", 28_150, 0.05, 0.9, 0.9005, 27_868, 0.8991, "definition", {}).warnings == []
    assert main(["size", "pem", "--frequency", "0.05", "--discovery", "0.9", "--epsilon", "2", "--bits", "15",
                 "--top-k", "8", "--oracle", "flh", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["warnings"] == [] and answer["users"] == size_pem(0.05, 0.9, 2.0, **FLH_EXAMPLE).users


def test_pem_verify_runs_the_answer_s_design() -> None:
    """``--verify`` runs the design that reached the target (not the optimizer's), with a Clopper-Pearson
    interval over its runs."""
    answer = size_pem(0.05, 0.9, 2.0, **FLH_EXAMPLE)
    search = answer_search(answer, answer.users)
    assert (search.start_length, list(search.segment_lengths)) == (answer.parameters["start_length"],
                                                                  answer.parameters["segment_lengths"])
    runs = verify_item("pem", answer.users, 0.05, answer.discovery, 12, search=search)
    low, high = runs.interval
    assert 0 <= low <= runs.rate <= high <= 1 and high - low > 0.1  # 12 runs: a wide exact interval
    assert runs.consistent


def test_size_by_recall_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "small.toml"
    config.write_text(
        '[population]\nsource = "zipf"\nusers = 20000\nvocabulary = 500\nitem_length = 4\nzipf_exponent = 1.3\n'
        '[protocol]\nmax_length = 4\n[privacy]\nepsilon = 4.0\ndelta = 1e-8\n',
        encoding="utf-8",
    )
    assert main(["size", "triehh", "--top-k", "5", "--recall", "0.8", "--population", str(config), "--trials", "2",
                 "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["users"] > 0 and answer["recall"] >= 0.8 and answer["top_k"] == 5
    assert answer["users"] == size_by_recall(load_config(config), 5, 0.8, 2).users
    assert sorted(path.name for path in tmp_path.iterdir()) == ["small.toml"]  # nothing written


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (["size", "triehh", "--frequency", "0", "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-9",
          "--max-rounds", "5"], "--frequency"),
        (["size", "triehh", "--frequency", "0.01", "--discovery", "1.5", "--epsilon", "4", "--delta", "1e-9",
          "--max-rounds", "5"], "--discovery"),
        (["size", "triehh", "--frequency", "0.01", "--discovery", "0.9", "--epsilon", "4", "--max-rounds", "5"],
         "--delta"),
        (["size", "pem", "--frequency", "0.01", "--discovery", "0.9"], "--epsilon"),
        (["size", "pem", "--frequency", "0.01", "--discovery", "0.9", "--epsilon", "-1"], "--epsilon"),
        (["size", "pem", "--frequency", "0.01", "--discovery", "0.9", "--epsilon", "2", "--bits", "0"], "--bits"),
        (["size", "pem", "--frequency", "0.01", "--discovery", "0.9", "--epsilon", "2", "--oracle", "nope"], "oracle"),
        (["size", "treehist", "--frequency", "2", "--discovery", "0.9", "--epsilon", "2"], "--frequency"),
        (["size", "treehist", "--frequency", "0.1", "--discovery", "0.9", "--epsilon", "2", "--segment-length", "0"],
         "--segment-length"),
        (["size", "treehist", "--frequency", "0.1", "--discovery", "0.9", "--epsilon", "2", "--oracle", "nope"],
         "--oracle"),
        (["size", "treehist", "--top-k", "5", "--recall", "0.9"], "--population"),
        (["size", "pem", "--top-k", "5", "--recall", "0.9", "--population", "x.toml", "--frequency", "0.1"],
         "--frequency"),
        (["size", "triehh", "--frequency", "0.1", "--discovery", "0.9", "--epsilon", "inf", "--delta", "1e-9",
          "--max-rounds", "5"], "--epsilon"),
        (["size", "triehh", "--frequency", "0.1", "--discovery", "0.9", "--epsilon", "1e-300", "--delta", "1e-9",
          "--max-rounds", "5"], "--epsilon / --delta / --max-rounds"),
        (["size", "triehh", "--frequency", "0.1", "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-3",
          "--max-rounds", "5"], "--delta"),
        (["size", "triehh", "--frequency", "0.1", "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-9",
          "--max-rounds", "0"], "--max-rounds"),
        (["plan", "treehist", "--users", "0", "--epsilon", "2"], "--users"),
        (["plan", "treehist", "--users", "1000", "--epsilon", "0"], "--epsilon"),
        (["plan", "treehist", "--users", "1000", "--epsilon", "2", "--bits", "8", "--segment-length", "9"],
         "--segment-length"),
        (["plan", "treehist", "--users", "1000", "--epsilon", "2", "--threshold", "2"], "--threshold"),
        (["size", "triehh", "--frequency", "0.01", "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-9",
          "--max-rounds", "5", "--verify", "--trials", "0"], "--trials"),
        (["size", "pem", "--top-k", "50", "--recall", "0.9", "--population", str(CONFIGS / "pem-wordfreq.toml")],
         "--top-k"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    arguments: list[str], field: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert field in error and len(error.strip().splitlines()) == 1, error
    assert not list(tmp_path.iterdir())


def test_every_sizing_takes_the_documented_recall_form(capsys: pytest.CaptureFixture[str]) -> None:
    """`fedhh size P --top-k K --recall R --population CONFIG` is parsed for every protocol docs/cli.md
    lists for it: the missing config is what is refused, not an unknown --top-k."""
    line = next(
        line for line in (CONFIGS.parent / "docs" / "cli.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("fedhh size ") and "--recall" in line
    )
    protocols = line.split()[2].split("|")
    assert {"triehh", "pem", "treehist", "aggregate-trie", "taps"} <= set(protocols)
    for protocol in protocols:
        try:
            status = main(["size", protocol, "--top-k", "5", "--recall", "0.8", "--population", "no-such-config.toml"])
        except SystemExit as stopped:  # argparse: an unknown option
            status = stopped.code
        captured = capsys.readouterr()
        assert status == 2, protocol
        assert "no-such-config.toml" in captured.out + captured.err, protocol
        assert "unrecognized" not in captured.err, protocol


def test_the_size_search_tries_no_population_above_its_limit() -> None:
    """`bracket` stays within MAX_USERS: a target first met below the limit but past the last doubling
    is found at the limit, and an unreachable one is described at the limit, not beyond it."""
    from fedhh.errors import InputError
    from fedhh.planning.sizing import MAX_USERS, bracket

    tried: list[int] = []

    def meets(n: int) -> bool:
        tried.append(n)
        return n >= 0.9 * MAX_USERS

    assert bracket(meets, MAX_USERS // 4, 1, "--frequency") == (MAX_USERS // 2, MAX_USERS)
    assert max(tried) == MAX_USERS
    described: list[int] = []
    with pytest.raises(InputError, match="not reached with up to 1,000,000,000,000 users"):
        bracket(lambda n: False, 3 * MAX_USERS, 1, "--frequency", lambda n: described.append(n) or "")
    assert described == [MAX_USERS]
