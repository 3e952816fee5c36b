"""A Flower run that fails is reported as one: a non-zero exit with the ServerApp's error, in one
line; its traceback is in the run's log, which the results folder then holds alone.

The ServerApp fails for real: no node can answer its shard query within
``run.round_timeout`` = 0.1 ms, so the federation never starts.  The other
entry point that launches Flower, ``python -m simulations.deployment``
(``flwr run`` against a real SuperLink, which exits 0 for a failed run), is
checked the same way in ``tests/test_deployment_wrapper.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations.cli import main

# Items of one letter: the run would take two rounds.
TINY = [
    'population.source="zipf"', "population.users=4000", "population.vocabulary=10", "population.item_length=1",
    "protocol.max_length=1", "privacy.epsilon=6.0", "privacy.delta=1e-6", 'run.driver="flower"', "run.shards=1",
]


def test_fedhh_run_on_flower_exits_1_with_the_server_apps_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "run"
    settings = [*TINY, "run.round_timeout=0.0001"]
    assert main(["run", *[f"--set={setting}" for setting in settings], "--quiet", "--output", str(output)]) == 1
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.count("\n") == 1, f"one line:\n{printed.err}"
    error = " ".join(printed.err.split())
    assert "error: the Flower run failed in its ServerApp: shard query: node" in error, error
    assert "did not answer the shard query: no node answered for run.round_timeout = 0.0001 s; raise run.round_timeout" in error, error
    assert "Traceback" not in error and "internal error" not in error, "a failed federation is not a bug in fedhh"
    # no result; the run's log, with the traceback, is all the folder holds
    assert f"no results were written; the run's log, with the error's traceback: {output / 'run.log'}" in error, error
    assert sorted(path.name for path in output.iterdir()) == [".fedhh-results", "run.log"]
    log = (output / "run.log").read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in log and "strategies.errors.FederationError: shard query" in log, log
