"""``python -m simulations.deployment`` and the ServerApp's own ledger.

* the wrapper checks the config, the results folder and the ledger's
  budget before it starts any process (exit status 2);
* it propagates the run's own status: a run the SuperLink records as
  failed exits 1, whatever ``flwr run --stream`` exits with;
* the ServerApp charges ``privacy.ledger`` itself, once, before round 1,
  so a deployment (or a bare ``flwr run``) is charged and held to
  ``privacy.max_epsilon`` as ``fedhh run`` is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Context, RecordDict

import simulations.deployment as deployment_module
from fedhh.config import load_config
from fedhh.errors import InputError
from fedhh.privacy.ledger import BudgetExceededError, Ledger
from simulations.deployment import main as deploy
from strategies.server_app import run_on_grid

# Items of one letter: two rounds (a SuperNode of Flower 1.41 or 1.42 starts a process per message, seconds each here).
TINY = [
    'population.source="zipf"', "population.users=4000", "population.vocabulary=10", "population.item_length=1",
    "protocol.max_length=1", "privacy.epsilon=6.0", "privacy.delta=1e-6",
]


def overrides(*settings: str) -> list[str]:
    return [argument for setting in (*TINY, *settings) for argument in ("--set", setting)]


class NoProcesses:
    """Stands in for LocalDeployment where the wrapper must refuse before starting anything."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the wrapper started processes for a run it should have refused")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["population.users=0"], "population.users: got 0; must be >= 1"),
        (["population.users=50"], "Need at least"),
        (["privacy.max_epsilon=1"], "privacy.max_epsilon: a budget needs privacy.ledger"),
        (["privacy.max_epsilon=1", "privacy.ledger=\"LEDGER\""], "privacy.max_epsilon: run 'out@"),
    ],
)
def test_the_wrapper_refuses_before_starting_processes(
    tmp_path: Path, settings: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(deployment_module, "LocalDeployment", NoProcesses)
    ledger = tmp_path / "ledger.json"
    settings = [setting.replace("LEDGER", str(ledger)) for setting in settings]
    assert deploy(["--supernodes", "2", "--output", str(tmp_path / "out"), *overrides(*settings)]) == 2
    assert message in capsys.readouterr().err
    assert not ledger.exists() and not (tmp_path / "out").exists()


def test_supernodes_and_run_shards_given_apart_are_refused_before_starting_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(deployment_module, "LocalDeployment", NoProcesses)
    assert deploy(["--supernodes", "3", "--output", str(tmp_path / "out"), *overrides("run.shards=5")]) == 2
    error = capsys.readouterr().err
    assert "--supernodes 3 and run.shards = 5 (--set) disagree" in error, error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("supernodes", "settings", "started"),
    [
        (None, [], deployment_module.DEFAULT_SUPERNODES),
        (4, [], 4),
        (None, ["run.shards=5"], 5),
        (6, ["run.shards=6"], 6),
    ],
)
def test_one_supernode_per_shard_whichever_option_names_the_count(
    supernodes: int | None, settings: list[str], started: int
) -> None:
    sets = [*TINY, *settings]
    assert deployment_module.supernode_count(supernodes, sets, load_config(None, sets)) == started


def test_the_wrapper_charges_the_ledger_once_and_enforces_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger.json"
    budget = ["privacy.ledger=\"" + str(ledger) + "\"", "privacy.max_epsilon=8"]
    assert deploy(["--supernodes", "1", "--output", str(tmp_path / "day-1"), *overrides(*budget)]) == 0
    entries = Ledger(ledger).entries
    assert [entry.run_id.split("@")[0] for entry in entries] == ["day-1"], "charged once, by the ServerApp"
    result = json.loads((tmp_path / "day-1" / "result.json").read_text(encoding="utf-8"))
    assert result["privacy"]["composition"]["runs"] == 1
    assert result["privacy"]["epsilon"] == pytest.approx(entries[0].report.epsilon)

    # A second run (ε = 4.76 each) would bring the total to 9.5, above 8: refused before any process starts.
    recorded = ledger.read_bytes()
    monkeypatch.setattr(deployment_module, "LocalDeployment", NoProcesses)
    capsys.readouterr()
    assert deploy(["--supernodes", "1", "--output", str(tmp_path / "day-2"), *overrides(*budget)]) == 2
    assert "privacy.max_epsilon" in capsys.readouterr().err
    assert ledger.read_bytes() == recorded and not (tmp_path / "day-2").exists()


def test_a_failed_run_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No node can answer within 0.1 ms: the ServerApp fails, and so does the wrapper, with the
    ServerApp's error (``flwr run --stream`` itself exits 0)."""
    output = tmp_path / "out"
    assert deploy(["--supernodes", "1", "--output", str(output), *overrides("run.round_timeout=0.0001")]) == 1
    error = capsys.readouterr().err
    assert "did not complete (status finished:failed" in error and "no results written" in error
    assert "ServerApp failed with exception: shard query:" in error, "the ServerApp's own error is reported"
    assert "shard query: node" in error and "did not answer the shard query: no node answered" in error, error
    assert not output.exists()


def test_the_server_app_refuses_a_run_over_budget_before_round_1(tmp_path: Path) -> None:
    """Whoever started it (a bare ``flwr run`` checks nothing first), the ServerApp charges and enforces."""
    ledger = tmp_path / "ledger.json"
    config = load_config(None, [*TINY, "run.shards=1", f'privacy.ledger="{ledger}"', "privacy.max_epsilon=1"])
    run_config = {**config.to_flat(), "output-dir": str(tmp_path / "out"), "progress": False}
    context = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    with pytest.raises(BudgetExceededError, match=r"run 'out-flower-run-7' refused before it starts"):
        run_on_grid(grid=None, run_config=run_config, context=context)  # type: ignore[arg-type]
    assert not ledger.exists(), "nothing charged"
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("ledger.json")] == [], "no results left"


def test_a_device_federation_without_a_candidate_dictionary_is_refused_before_the_charge(tmp_path: Path) -> None:
    """RAPPOR decodes against candidates; a device federation's server holds no population to take them
    from, so a run naming no ``protocol.candidates`` file is refused before the ledger is charged."""
    ledger = tmp_path / "ledger.json"
    rappor = ['protocol.name="rappor"', "population.users=2000", 'run.federation="devices"', f'privacy.ledger="{ledger}"']
    config = load_config(None, [*TINY, *rappor])
    run_config = {**config.to_flat(), "output-dir": str(tmp_path / "out"), "progress": False}
    context = Context(run_id=8, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    with pytest.raises(InputError, match=r"protocol\.candidates: no population vocabulary here"):
        run_on_grid(grid=None, run_config=run_config, context=context)  # type: ignore[arg-type]
    assert not ledger.exists(), "nothing charged"
    assert [p.name for p in tmp_path.iterdir()] == [], "no results left"
