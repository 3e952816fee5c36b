"""The command line: a small end-to-end run, the plan command, and bad input."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedhh.errors import InputError
from fedhh.results import MARKER, marked_files
from simulations.cli import build_parser, main

SMALL = [
    "--set", 'population.source="zipf"', "--set", "population.users=20000",
    "--set", "population.vocabulary=2000", "--set", "population.item_length=5",
    "--set", "protocol.max_length=6", "--set", "privacy.epsilon=8", "--set", "privacy.delta=1e-6",
    "--set", 'run.driver="fast"', "--set", "run.shards=2", "--set", "run.top_k=20", "--quiet",
]


def test_fast_run_writes_the_documented_result(tmp_path: Path) -> None:
    output = tmp_path / "out"
    assert main(["run", *SMALL, "--output", str(output)]) == 0
    result = json.loads((output / "result.json").read_text(encoding="utf-8"))
    for key in ("protocol", "seed", "n_users", "config", "heavy_hitters", "evaluation", "privacy",
                "params", "rounds", "timing_s"):
        assert key in result
    assert result["protocol"] == "triehh" and result["n_users"] == 20000
    evaluation = result["evaluation"]
    assert set(evaluation) == {"note", "metrics", "heavy_hitters", "missed_top_k", "truth_top", "population"}
    assert set(evaluation["metrics"]) >= {"recall_at_k", "precision", "f1", "ncr"}
    assert set(result["privacy"]) >= {"epsilon", "delta", "model", "coverage"}
    assert any(line.startswith("evaluation:") for line in result["privacy"]["coverage"]["not_covered"])
    assert set(result["params"]) >= {"theta", "batch_size", "max_length"}
    assert result["privacy"]["epsilon"] <= 8.0
    assert result["heavy_hitters"] and set(result["heavy_hitters"][0]) == {"item", "support"}
    truths = evaluation["heavy_hitters"]  # the truth of each published discovery, in the same order
    assert [t["item"] for t in truths] == [hit["item"] for hit in result["heavy_hitters"]]
    assert {"item", "true_rank", "true_count", "true_frequency"} == set(truths[0])
    supports = [hit["support"] for hit in result["heavy_hitters"]]
    assert supports == sorted(supports, reverse=True)  # published in the protocol's order, not by true rank
    assert len(result["rounds"]) >= 2
    found = {hit["item"] for hit in result["heavy_hitters"]}
    top = evaluation["truth_top"]
    assert {t["item"] for t in top if t["discovered"]} == found & {t["item"] for t in top}
    written = {"result.json", "heavy_hitters.csv", "rounds.csv", "discovery.png"}
    assert {p.name for p in output.iterdir()} == written | {MARKER}
    assert marked_files(output) == sorted(written)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging or lock left


def test_evaluation_false_leaves_no_ground_truth_in_the_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """For real data: nothing computed from the true population is written, anywhere."""
    on, off = tmp_path / "on", tmp_path / "off"
    assert main(["run", *SMALL, "--output", str(on)]) == 0
    assert main(["run", *SMALL, "--set", "run.evaluation=false", "--output", str(off)]) == 0
    assert "evaluation  off (run.evaluation = false)" in capsys.readouterr().out.replace("\n", " ")
    with_truth = json.loads((on / "result.json").read_text(encoding="utf-8"))
    result = json.loads((off / "result.json").read_text(encoding="utf-8"))
    assert "evaluation" not in result and result["config"]["run"]["evaluation"] is False
    assert result["heavy_hitters"] == with_truth["heavy_hitters"]  # the same discovery, without its truth
    text = (off / "result.json").read_text(encoding="utf-8") + (off / "heavy_hitters.csv").read_text(encoding="utf-8")
    for truth_only in ("true_rank", "true_count", "true_frequency", "truth_top", "missed_top_k", "recall_at_k",
                       "users_without_items"):
        assert truth_only not in text
    true_counts = {str(t["true_count"]) for t in with_truth["evaluation"]["heavy_hitters"]}
    assert not true_counts & set((off / "heavy_hitters.csv").read_text(encoding="utf-8").replace("\n", ",").split(","))


def test_a_file_population_s_vocabulary_is_evaluation_only(tmp_path: Path) -> None:
    """The distinct items of a file are the users' own data: counted only under evaluation."""
    population = tmp_path / "users.txt"
    population.write_text("\n".join(["abc"] * 300 + ["abd"] * 200 + [f"w{chr(97 + i % 26)}x" for i in range(500)]) + "\n")
    args = ["run", "--set", 'population.source="file"', "--set", f'population.path="{population}"',
            "--set", "privacy.epsilon=8", "--set", "privacy.delta=1e-6", "--set", 'run.driver="fast"',
            "--set", "run.shards=1", "--quiet"]
    assert main([*args, "--set", "run.evaluation=false", "--output", str(tmp_path / "off")]) == 0
    assert main([*args, "--output", str(tmp_path / "on")]) == 0
    off = json.loads((tmp_path / "off" / "result.json").read_text(encoding="utf-8"))
    on = json.loads((tmp_path / "on" / "result.json").read_text(encoding="utf-8"))
    assert off["population"] == {"source": "file", "path": str(population), "users": 1000}
    assert on["evaluation"]["population"]["vocabulary"] == 28 and "encoding" in on["evaluation"]["population"]


def test_config_file_and_overrides(tmp_path: Path) -> None:
    config = tmp_path / "small.toml"
    config.write_text(
        '[population]\nsource = "zipf"\nusers = 20000\nvocabulary = 2000\nitem_length = 5\n'
        '[protocol]\nmax_length = 6\n[privacy]\nepsilon = 8\ndelta = 1e-6\n[run]\ndriver = "fast"\n',
        encoding="utf-8",
    )
    output = tmp_path / "out"
    assert main(["run", str(config), "--set", "run.seed=5", "--quiet", "--output", str(output)]) == 0
    result = json.loads((output / "result.json").read_text(encoding="utf-8"))
    assert result["seed"] == 5 and result["config"]["population"]["users"] == 20000


def test_plan_json_matches_the_reference_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "triehh", "--users", "1000000", "--epsilon", "4", "--delta", "1e-12",
                 "--max-rounds", "10", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["theta"], plan["batch_size"]) == (15, 21978)
    assert plan["epsilon"] <= 4 and plan["delta"] <= 1e-12


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("empty item", "line 2 is empty"),
        ("overlong item", "protocol.max_length = 6"),
        ("character outside the alphabet", "outside the 'lowercase' alphabet"),
        ("epsilon zero", "privacy.epsilon"),
        ("epsilon negative", "privacy.epsilon"),
        ("delta one", "privacy.delta"),
        ("delta zero", "privacy.delta"),
        ("population too small", "Need at least"),
        ("unknown key", "allowed keys"),
        ("unknown section", "allowed sections"),
        ("wrong type", "population.users: expected int"),
        ("bad choice", "allowed values"),
        ("invalid toml", "not valid TOML"),
    ],
)
def test_bad_input_fails_cleanly_without_results(
    tmp_path: Path, case: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def users_file(text: str) -> list[str]:
        name = f"users{len(list(tmp_path.iterdir()))}.txt"
        return ["--set", 'population.path="' + write(tmp_path, name, text) + '"']

    args = {
        "empty item": users_file("moon\n\nsun\n"),
        "overlong item": [*users_file("moon\nextraordinary\n"), "--set", 'protocol.overlong="error"'],
        "character outside the alphabet": users_file("moon\nMoon!\n"),
        "epsilon zero": ["--set", "privacy.epsilon=0"],
        "epsilon negative": ["--set", "privacy.epsilon=-1"],
        "delta one": ["--set", "privacy.delta=1"],
        "delta zero": ["--set", "privacy.delta=0"],
        "population too small": ["--set", "privacy.epsilon=1"],
        "unknown key": ["--set", "population.userz=5"],
        "unknown section": ["--set", "popul.users=5"],
        "wrong type": ["--set", 'population.users="many"'],
        "bad choice": ["--set", 'protocol.name="heavyhash"'],
        "invalid toml": [write(tmp_path, "bad.toml", "[population\nusers = 3")],
    }[case]
    base = ["--set", 'population.source="file"', "--set", 'run.driver="fast"', "--set", "protocol.max_length=6"]
    if "population.path" not in " ".join(args):
        base += users_file("moon\nsun\nmoon\n" * 400)
    output = tmp_path / "results"
    if case == "invalid toml":
        argv = ["run", args[0], "--quiet", "--output", str(output)]
    else:
        argv = ["run", *base, *args, "--quiet", "--output", str(output)]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not output.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".results")]


def test_console_script_exit_code(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "plan", "triehh", "--users", "10", "--epsilon", "1",
         "--delta", "1e-6", "--max-rounds", "5"],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 2
    assert "cannot meet" in completed.stderr


def test_ledger_composes_runs_and_refuses_one_over_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger.json"
    budget = ["--set", f'privacy.ledger="{ledger}"', "--set", "privacy.max_epsilon=12"]
    assert main(["run", *SMALL, *budget, "--output", str(tmp_path / "day1")]) == 0
    first = json.loads((tmp_path / "day1" / "result.json").read_text(encoding="utf-8"))
    assert first["privacy"]["composition"]["runs"] == 1
    recorded = ledger.read_bytes()
    # A second run at ε = 8 would bring the total above 12: refused before it starts.
    assert main(["run", *SMALL, *budget, "--output", str(tmp_path / "day2")]) == 2
    assert "privacy.max_epsilon" in capsys.readouterr().err
    assert ledger.read_bytes() == recorded
    assert not (tmp_path / "day2").exists()


@pytest.mark.parametrize("ledger", ["/proc/nope/L.json", "/sys/L.json", "FOLDER"])
def test_a_ledger_that_cannot_be_written_stops_the_run_before_it_starts(
    tmp_path: Path, ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = ledger.replace("FOLDER", str(tmp_path))
    assert main(["run", *SMALL, "--set", f'privacy.ledger="{ledger}"', "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: privacy.ledger '{ledger}': ") and len(error.strip().splitlines()) == 1, error
    assert not list(tmp_path.iterdir())


def test_a_budget_needs_a_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *SMALL, "--set", "privacy.max_epsilon=5", "--output", str(tmp_path / "x")]) == 2
    assert "privacy.max_epsilon: a budget needs privacy.ledger" in capsys.readouterr().err


def test_a_device_federation_is_not_simulated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out"
    assert main(["run", *SMALL, "--set", "run.federation=devices", "--output", str(output)]) == 2
    assert 'run.federation: "devices"' in capsys.readouterr().err
    assert not output.exists()


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The command stops with exit status 2 and one line, raised as an InputError (the only
    exception the command line reports as a user error), never a traceback."""
    args = build_parser().parse_args(argv)
    with pytest.raises(InputError) as error:
        args.func(args)
    capsys.readouterr()
    assert main(argv) == 2
    message = capsys.readouterr().err.strip()
    assert "Traceback" not in message and "\n" not in message and message.startswith("error: ")
    assert str(error.value) in message
    return message


LDP_RUN = ["--set", 'protocol.name="pem"', "--set", "protocol.max_length=4", "--set", "population.item_length=4"]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["run", *SMALL, "--set", "privacy.epsilon=1e-300"], "cannot meet ε = 1e-300"),
        (["run", *SMALL, "--set", "privacy.epsilon=5e-324"], "Need more than 1e308 users"),
        (["run", *SMALL, *LDP_RUN, "--set", "privacy.epsilon=1e308"], r"privacy.epsilon: pem .* so ε must be in \[1e-06, 50\]"),
        (["run", *SMALL, *LDP_RUN, "--set", "privacy.epsilon=1e-300"], r"privacy.epsilon: pem"),
        (["run", *SMALL, *LDP_RUN, "--set", 'protocol.name="treehist"', "--set", "privacy.epsilon=150"],
         r"privacy.epsilon: treehist .* so ε must be in \[2e-06, 100\]"),
        (["run", *SMALL, "--set", "privacy.delta=0.5"], r"privacy.delta: δ = 0.5 is not below 1/n = 1/20,000"),
        (["plan", "triehh", "--users", str(10**22), "--epsilon", "4", "--delta", "1e-12", "--max-rounds", "10"],
         r"population.users: must be an integer in 1..9,007,199,254,740,992, got 10000000000000000000000"),
        (["plan", "triehh", "--users", "1000000", "--epsilon", "1e-300", "--delta", "1e-12", "--max-rounds", "10"],
         "cannot meet ε = 1e-300"),
        (["plan", "triehh", "--users", "21", "--epsilon", "8", "--delta", "0.09", "--max-rounds", "5"],
         r"privacy.delta: δ = 0.09 is not below 1/n = 1/21"),
        (["plan", "pem", "--users", "100000", "--epsilon", "1e308"], r"privacy.epsilon: pem"),
        (["plan", "pem", "--users", "100000", "--epsilon", "1e-300"], r"privacy.epsilon: pem"),
        (["plan", "pem", "--users", str(10**22), "--epsilon", "2"], "population.users: must be an integer in"),
        (["plan", "pem", "--users", "100000", "--epsilon", "2", "--bits", "100000"], r"--bits: must be an integer in 1..1,024"),
        (["plan", "pem", "--users", "100000", "--epsilon", "2", "--distinct", "0"], r"--distinct: must be an integer in"),
        (["plan", "pem", "--users", "100000", "--epsilon", "2", "--distinct", "10"], r"--distinct: the assumed 10 distinct values are fewer than --top-k = 32"),
        (["oracles", "--epsilon", "1e308"], r"epsilon must be a number in \[1e-06, 50\]"),
        (["oracles", "--users", str(10**19)], r"users must be an integer \[1, 10000000\]"),
        (["audit", "ldp", "--oracle", "olh", "--epsilon", "1e-300"], r"epsilon must be a number in \[1e-06, 50\]"),
        (["audit", "triehh", "--users", "1000", "--epsilon", "1e308", "--delta", "1e-3", "--max-rounds", "3"],
         r"privacy.delta: δ = 0.001 is not below 1/n"),
    ],
)
def test_numeric_edge_cases_are_refused_with_exit_status_2(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ε = 1e308 overflowed, ε = 1e-300 divided by zero, n = 1e22 failed in scipy: each a traceback."""
    if argv[0] == "run":
        argv = [*argv, "--output", str(tmp_path / "out")]
    assert re.search(field, refused(argv, capsys))
    assert not (tmp_path / "out").exists()


def test_the_largest_epsilon_runs_at_the_sampling_limit_and_tiny_delta_is_never_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TrieHH needs no upper limit on ε: beyond ln(θ + 1) per round m stops at n/(θ + 1)."""
    assert main(["run", *SMALL, "--set", "privacy.epsilon=1e308", "--output", str(tmp_path / "out"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    params = result["privacy"]["parameters"]
    assert params["batch_size"] == 20_000 // (params["theta"] + 1)
    spent = -params["max_rounds"] * math.log1p(-params["theta"] * params["batch_size"] / 20_000)
    assert result["privacy"]["epsilon"] == pytest.approx(spent) and spent <= params["max_rounds"] * math.log(params["theta"] + 1)
    assert main(["plan", "triehh", "--users", "1000000000", "--epsilon", "8", "--delta", "5e-324",
                 "--max-rounds", "10", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["delta"] > 0 and plan["privacy"]["parameters"]["log_delta"] < math.log(5e-324)
