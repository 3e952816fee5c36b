"""Law simulations of whole runs: 10^9 users in the test suite's budget, on every driver, and the refusals.

The rounds of a law run cost the same at 10^9 users as at 10^6 (no user is built: each shard
holds its item counts, drawn from the wordfreq law), so these runs take seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedhh.config import ConfigError, load_config
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from simulations.cli import main
from simulations.fast import run_fast

from .test_protocol_spec import SPEC as COUNTING  # a protocol whose spec declares no law sampler

BILLION = 1_000_000_000
TOP_WORDS = {"the", "of", "and", "to", "in", "a", "is", "that", "for", "it"}  # wordfreq's ten most frequent


def law_config(*overrides: str):  # noqa: ANN201
    return load_config(None, ["run.driver=fast", "run.simulation=law", f"population.users={BILLION}", *overrides])


@pytest.mark.parametrize("protocol", ["triehh", "pem"])
def test_a_billion_users_run_by_law_finds_the_top_words(protocol: str) -> None:
    experiment = Experiment(law_config(f"protocol.name={protocol}"))
    run = run_fast(experiment, 8, "inprocess")
    document = experiment.finish(run.result, run.timing, "fast/inprocess", counts=run.counts)
    assert document["n_users"] == BILLION and document["simulation"] == "law"
    found = {hit["item"] for hit in document["heavy_hitters"]}
    assert TOP_WORDS <= found
    assert document["evaluation"]["metrics"]["recall_at_k"]["10"] == 1.0
    assert run.counts.users == BILLION


def test_fedhh_run_records_the_simulation(tmp_path: Path) -> None:
    arguments = ["run", "--quiet", "--set", 'run.driver="fast"', "--set", "population.users=200000", "--set", "run.shards=2"]
    for simulation in ("users", "law"):
        output = tmp_path / simulation
        assert main([*arguments, "--set", f'run.simulation="{simulation}"', "--output", str(output)]) == 0
        assert json.loads((output / "result.json").read_text(encoding="utf-8"))["simulation"] == simulation


def test_a_protocol_without_a_law_sampler_refuses_law(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert COUNTING.law is None
    with pytest.raises(InputError, match="protocol 'counting' has no law sampler"):
        Experiment(law_config("protocol.name=counting", "population.users=1000"))
    code = main(["run", "--quiet", "--set", "protocol.name=counting", "--set", "run.simulation=law",
                 "--set", "population.users=1000", "--output", str(tmp_path / "out")])
    assert code == 2
    assert "run.simulation: protocol 'counting' has no law sampler" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("setting", ["run.federation=devices", "run.secure_aggregation=true"])
def test_law_refuses_what_it_cannot_simulate(setting: str) -> None:
    with pytest.raises(ConfigError, match="run.simulation"):
        load_config(None, ["run.simulation=law", setting])


def test_ray_actors_hold_a_billion_users_by_law() -> None:
    """Each Ray actor draws its shard's counts itself; the result is the in-process run's (the
    same keyed draws), whichever process holds a shard."""
    experiment = Experiment(law_config())
    on_ray = run_fast(experiment, 2, "ray")
    in_process = run_fast(Experiment(law_config()), 2, "inprocess")
    assert [d.item for d in on_ray.result.discoveries] == [d.item for d in in_process.result.discoveries]
    assert (on_ray.counts.holders == in_process.counts.holders).all() and on_ray.counts.users == BILLION


def test_flower_supernodes_hold_a_billion_users_by_law(tmp_path: Path) -> None:
    """The default driver: two SuperNodes each answer for half a billion users with the law
    sampler; the discovery is the fast driver's over the same two shards."""
    from simulations.flower import run_flower_simulation

    config = load_config(None, ["run.simulation=law", f"population.users={BILLION}", "run.shards=2"])
    document = run_flower_simulation(config, 2, output_dir=tmp_path / "out")
    assert document["simulation"] == "law" and document["transport"] == "flower"
    reference = run_fast(Experiment(config), 2, "inprocess").result
    assert {hit["item"] for hit in document["heavy_hitters"]} == {d.item for d in reference.discoveries}
    assert TOP_WORDS <= {hit["item"] for hit in document["heavy_hitters"]}


@pytest.mark.parametrize("protocol", ["pem", "treehist"])
def test_flower_accepts_the_levels_a_law_node_draws(protocol: str, tmp_path: Path) -> None:
    """A law node draws how its users split over the prefix search's levels, so a level round's
    reporters differ from the public partition's count; the server accepts any split (three nodes of
    10^6 users in all), and finds what the fast driver finds over the same three shards."""
    from simulations.flower import run_flower_simulation

    config = load_config(None, ["run.simulation=law", f'protocol.name="{protocol}"', "population.users=1000000",
                                "run.shards=3"])
    document = run_flower_simulation(config, 3, output_dir=tmp_path / "out")
    reference = run_fast(Experiment(config), 3, "inprocess").result
    found = [(hit["item"], hit["estimated_count"]) for hit in document["heavy_hitters"]]
    assert found and found == [(d.item, d.estimated_count) for d in reference.discoveries]


def test_simulation_is_a_sweep_axis_and_a_column(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        '[population]\nsource = "zipf"\nusers = 50000\nvocabulary = 300\nitem_length = 4\n'
        '[protocol]\nmax_length = 4\n[sweep]\ntrials = 2\n"run.simulation" = ["users", "law"]\n',
        encoding="utf-8",
    )
    assert main(["sweep", str(sweep), "--output", str(tmp_path / "out"), "--workers", "1", "--quiet"]) == 0
    rows = pq.read_table(tmp_path / "out" / "trials.parquet").to_pylist()
    assert sorted(row["simulation"] for row in rows) == ["law", "law", "users", "users"]
    assert all(row["error"] == "" and row["f1"] > 0 for row in rows)


def test_size_verify_uses_law_for_large_populations(capsys: pytest.CaptureFixture[str]) -> None:
    """An answer of tens of millions of users is checked by law simulation, and the output says so;
    a small one by drawing every user."""
    for frequency, simulation in ((1e-5, "law"), (0.01, "users")):
        assert main(["size", "triehh", "--frequency", str(frequency), "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-12", "--max-rounds", "6",
                     "--verify", "--trials", "3", "--json"]) == 0
        verification = json.loads(capsys.readouterr().out)["verification"]
        assert verification["simulation"] == simulation and verification["found"] >= 2
    assert main(["size", "triehh", "--frequency", "1e-5", "--discovery", "0.9", "--epsilon", "4", "--delta", "1e-12", "--max-rounds", "6", "--verify",
                 "--trials", "2"]) == 0
    assert "law simulation" in capsys.readouterr().out
