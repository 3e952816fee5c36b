"""The command line: a small end-to-end run, the plan command, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedhh.cli import main
from fedhh.results import MARKER, marked_files

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
    for key in ("protocol", "seed", "n_users", "config", "heavy_hitters", "metrics", "privacy",
                "params", "rounds", "timing_s"):
        assert key in result
    assert result["protocol"] == "triehh" and result["n_users"] == 20000
    assert set(result["metrics"]) >= {"recall_at_k", "precision", "f1", "ncr"}
    assert set(result["privacy"]) >= {"epsilon", "delta", "model"}
    assert set(result["params"]) >= {"theta", "batch_size", "max_length"}
    assert result["privacy"]["epsilon"] <= 8.0
    assert result["heavy_hitters"] and {"item", "true_rank", "true_count"} <= set(result["heavy_hitters"][0])
    assert len(result["rounds"]) >= 2
    found = {hit["item"] for hit in result["heavy_hitters"]}
    assert {t["item"] for t in result["truth_top"] if t["discovered"]} == found & {t["item"] for t in result["truth_top"]}
    written = {"result.json", "heavy_hitters.csv", "rounds.csv", "discovery.png"}
    assert {p.name for p in output.iterdir()} == written | {MARKER}
    assert marked_files(output) == sorted(written)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging or lock left


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
        [sys.executable, "-m", "fedhh.cli", "plan", "triehh", "--users", "10", "--epsilon", "1",
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


def test_a_budget_needs_a_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *SMALL, "--set", "privacy.max_epsilon=5", "--output", str(tmp_path / "x")]) == 2
    assert "privacy.max_epsilon: a budget needs privacy.ledger" in capsys.readouterr().err


def test_a_device_federation_is_not_simulated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out"
    assert main(["run", *SMALL, "--set", "run.federation=devices", "--output", str(output)]) == 2
    assert 'run.federation: "devices"' in capsys.readouterr().err
    assert not output.exists()
