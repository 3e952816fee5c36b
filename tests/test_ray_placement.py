"""Shards of a population on disk run on the Ray nodes that hold their files (``simulations.placement``).

A real two-node cluster on this machine (``ray.cluster_utils.Cluster``, its
own temporary folder, torn down by the test through its own handles, which
checks that no process is left).  Each node declares, in the environment its
Ray processes start with (``FEDHH_POPULATIONS``), a folder of its own holding
a different half of the stored shards; the run names a third folder with
only the manifest and the vocabulary, so a shard can be read only where its
node holds it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedhh.config import build_config
from fedhh.experiment import Experiment
from fedhh.results import ResultsFolder
from simulations.cli import main
from simulations.fast import run_fast
from simulations.placement import HOLDINGS_VARIABLE
from simulations.population_build import build_population
from simulations.processes import descendant_identities
from simulations.sweep_trial import TIMING_COLUMNS

from .helpers import processes_left_behind

USERS, STORED_SHARDS = 24_000, 4


@dataclass
class Spread:
    """The population built whole, and its copies: each node's half, and the run's catalogue."""

    address: str
    full: Path
    catalogue: Path
    node_of_half: tuple[str, str]  # the node holding stored shards 0-1, the one holding 2-3
    other_full: Path  # a second population, held whole by the second node only
    other_catalogue: Path


def config_of(path: Path, shards: int, backend: str) -> object:
    return build_config({
        "population": {"source": "dataset", "path": str(path)},
        "run": {"driver": "fast", "backend": backend, "shards": shards, "seed": 11},
    })


def partial_copy(full: Path, target: Path, keep: set[int]) -> Path:
    """A copy of the population folder holding only the stored shards ``keep``."""
    shutil.copytree(full, target)
    for index in set(range(STORED_SHARDS)) - keep:
        (target / f"shard-{index:05d}.parquet").unlink()
    return target


@pytest.fixture(scope="module")
def spread() -> Iterator[Spread]:
    from ray.cluster_utils import Cluster

    temp = Path(tempfile.mkdtemp(prefix="fedhh-place-"))  # short: Ray's socket paths must fit in 107 bytes
    full, other_full = temp / "full", temp / "other-full"
    for folder, seed in ((full, 3), (other_full, 4)):
        with ResultsFolder.claim(folder) as output:
            build_population(build_config({"population": {"users": USERS, "vocabulary": 2000}, "run": {"seed": seed}}),
                             output, shards=STORED_SHARDS, workers=1)
    halves = partial_copy(full, temp / "a", {0, 1}), partial_copy(full, temp / "b", {2, 3})
    catalogue = partial_copy(full, temp / "catalogue", set())
    other_whole = partial_copy(other_full, temp / "other", set(range(STORED_SHARDS)))
    other_catalogue = partial_copy(other_full, temp / "other-catalogue", set())
    before = descendant_identities(os.getpid())
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "temp_dir": str(temp / "ray"), "include_dashboard": False,
        "env_vars": {HOLDINGS_VARIABLE: str(halves[0])},
    })
    try:
        second = cluster.add_node(num_cpus=1, env_vars={HOLDINGS_VARIABLE: f"{halves[1]}{os.pathsep}{other_whole}"})
        cluster.wait_for_nodes()
        yield Spread(cluster.address, full, catalogue, (cluster.head_node.node_id, second.node_id), other_full,
                     other_catalogue)
    finally:
        cluster.shutdown()
        left = processes_left_behind(before)
        shutil.rmtree(temp, ignore_errors=True)  # the folder this fixture made
        assert not left, f"the cluster left processes behind: {left}"


def discovery(config: object) -> tuple[dict, list[str]]:
    experiment = Experiment(config)
    run = run_fast(experiment, int(config["run"]["shards"]), config["run"]["backend"])
    document = experiment.finish(run.result, {}, "fast", counts=run.counts)
    return {key: document[key] for key in ("heavy_hitters", "rounds", "privacy")} | {
        "truth": document["evaluation"]["metrics"]}, run.nodes


def test_each_shard_runs_on_a_node_holding_it_with_the_single_process_result(
    spread: Spread, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local, no_nodes = discovery(config_of(spread.full, 4, "inprocess"))
    assert local["heavy_hitters"] and no_nodes == []
    monkeypatch.setenv("RAY_ADDRESS", spread.address)
    for shards in (4, 2):  # run shards of one stored shard, and of two held by the same node
        remote, nodes = discovery(config_of(spread.catalogue, shards, "ray"))
        assert not ray.is_initialized()
        assert remote == local, shards
        per_stored = USERS // STORED_SHARDS
        expected = [spread.node_of_half[(i * USERS // shards) // per_stored // 2] for i in range(shards)]
        assert nodes == expected, shards


def test_a_shard_no_node_holds_is_refused_before_the_charge(
    spread: Spread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three run shards: the middle one reads stored shards 1 and 2, which no node holds together."""
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ledger = tmp_path / "ledger.json"
    run = ["run", "--set", "run.driver=fast", "--set", "run.shards=3", "--set", "population.source=dataset",
           "--set", f"population.path={spread.catalogue}", "--set", f"privacy.ledger={ledger}", "--quiet",
           "--ray-address", spread.address, "--output", str(tmp_path / "run")]
    assert main(run) == 2
    error = capsys.readouterr().err
    assert "run shard 1 (users 8,000..15,999) reads stored shard(s) [1, 2]" in error
    assert "no node of the Ray cluster holds" in error
    assert not (tmp_path / "run").exists() and not ledger.exists()
    assert not ray.is_initialized()
    assert main([*run[:-1], str(tmp_path / "fits"), "--set", "run.shards=2"]) == 0  # the same run, placeable
    assert json.loads(ledger.read_text())  # charged once, by the run that ran


def test_a_sweep_runs_where_its_population_is_held_whole(
    spread: Spread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep's trial reads the whole population: it runs on the node holding all of it (the second
    node, for the second population: the folder the sweep names holds no shard), and a population
    no node holds whole is refused before the sweep's folder is made."""
    import pyarrow.parquet as pq

    def sweep(name: str, folder: Path, *args: str) -> int:
        spec = tmp_path / f"{name}.toml"
        spec.write_text(f'[population]\nsource = "dataset"\npath = "{folder}"\n[sweep]\ntrials = 1\n'
                        '"privacy.epsilon" = [4, 8]\n')
        return main(["sweep", str(spec), "--output", str(tmp_path / name), "--quiet", *args])

    def rows(name: str) -> list[dict]:
        table = pq.read_table(tmp_path / name / "trials.parquet").to_pylist()
        ignored = ("trial_key", "config", *TIMING_COLUMNS)  # the key and config name the folder
        return sorted(({k: v for k, v in row.items() if k not in ignored} for row in table),
                      key=lambda row: row["privacy.epsilon"])

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert sweep("local", spread.other_full, "--workers", "1") == 0
    assert sweep("cluster", spread.other_catalogue, "--ray-address", spread.address) == 0
    assert rows("cluster") == rows("local") and len(rows("local")) == 2 and not any(r["error"] for r in rows("local"))
    named = {json.loads(row["config"])["population"]["path"] for row in pq.read_table(tmp_path / "cluster" / "trials.parquet").to_pylist()}
    assert named == {str(spread.other_catalogue)}  # the trials as the sweep gave them
    capsys.readouterr()
    assert sweep("refused", spread.catalogue, "--ray-address", spread.address) == 2
    assert "run shard 0 (users 0..23,999) reads stored shard(s) [0, 1, 2, 3]" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_placement_rules_without_a_cluster() -> None:
    """What each node holds -> where each run shard goes (``place_shards`` alone)."""
    from fedhh.errors import InputError
    from simulations.placement import Holding, place_shards

    cpus = {"a": 2.0, "b": 1.0}
    firsts, users = [0, 100, 200, 300], 400
    shared = [Holding(node, "/pop", frozenset(range(4))) for node in cpus]
    assert place_shards(shared, cpus, "/pop", firsts, users, 8) is None  # a shared file system: unconstrained
    both = [Holding("a", "/a", frozenset({0, 1, 2, 3})), Holding("b", "/b", frozenset({2, 3}))]
    placed = place_shards(both, cpus, "/pop", firsts, users, 4)
    assert [(p.node_id, p.folder) for p in placed] == [("a", "/a"), ("a", "/a"), ("b", "/b"), ("a", "/a")]
    assert [p.cpus for p in placed] == [2 / 3, 2 / 3, 1.0, 2 / 3]  # a's 2 CPUs shared by its 3 actors
    with pytest.raises(InputError, match=r"run shard 1 \(users 133..265\) reads stored shard\(s\) \[1, 2\]"):
        place_shards([Holding("a", "/a", frozenset({0, 1})), Holding("b", "/b", frozenset({2, 3}))], cpus, "/pop",
                     firsts, users, 3)
