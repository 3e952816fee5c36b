"""A third party's ClientApp (examples/third_party_client: Flower and numpy only, written from
docs/messages.md) against fedhh's ServerApp in a real deployment: SuperLink and SuperNodes on
loopback, the example's own Flower app bundle.  It must find what a simulation of the same users
finds, round for round."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np

from fedhh.config import load_config
from fedhh.experiment import Experiment
from fedhh.population import shard_bounds
from simulations.deployment import LocalDeployment
from simulations.fast import run_fast
from strategies.participation import PARTICIPATION_KEYS

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "third_party_client"
NODES = 3
USERS = 6000
WORDS = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
         "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not"]


def test_the_example_imports_only_flower_numpy_and_the_standard_library() -> None:
    tree = ast.parse((EXAMPLE / "device_client.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) == {"flwr", "numpy"}


def test_third_party_client_finds_what_the_simulation_finds(deployment: LocalDeployment, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    weights = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.1
    words = [WORDS[i] for i in rng.choice(len(WORDS), size=USERS, p=weights / weights.sum())]
    everyone = tmp_path / "everyone.txt"
    everyone.write_text("\n".join(words) + "\n", encoding="utf-8")
    for index in range(NODES):
        start, stop = shard_bounds(USERS, index, NODES)
        own = tmp_path / f"node-{index}.txt"
        own.write_text("\n".join(words[start:stop]) + "\n", encoding="utf-8")
        deployment.add_supernode(
            f"device-app-{index}",
            {"partition-id": index, "num-partitions": NODES, "population": USERS, "words-file": str(own)},
        )
    settings = {
        "population.source": "file",
        "population.path": str(everyone),
        "protocol.name": "triehh",
        "protocol.max_length": 4,
        "privacy.epsilon": 6.0,
        "privacy.delta": 1e-6,
        "run.seed": 4,
        "run.shards": NODES,
    }
    output = tmp_path / "out"
    outcome = deployment.run({**settings, "output-dir": str(output)}, app_dir=EXAMPLE, timeout=240.0)
    assert outcome.succeeded, f"{outcome.status}: {outcome.details}\n{outcome.output}\n{deployment.logs()}"
    document = json.loads((output / "result.json").read_text(encoding="utf-8"))

    config = load_config(None, [f"{key}={json.dumps(value)}" for key, value in settings.items()])
    simulated = run_fast(Experiment(config), NODES, backend="inprocess").result
    assert len(simulated.discoveries) >= 5, "the reference must find something"
    assert sorted(hit["item"] for hit in document["heavy_hitters"]) == sorted(d.item for d in simulated.discoveries)
    rounds = [{k: v for k, v in line.items() if k not in PARTICIPATION_KEYS} for line in document["rounds"]]
    assert rounds == [record.to_dict() for record in simulated.trace]
    assert all(line["rejected_shards"] == [] and line["failed_shards"] == [] for line in document["rounds"])
