"""A third party's ClientApp (examples/third_party_client: Flower and numpy only, written from
docs/messages.md) against fedhh's ServerApp in a real deployment: SuperLink and SuperNodes on
loopback, the example's own Flower app bundle.

* TrieHH has no randomness on the device (one word per user): the deployment must find what a
  simulation of the same users finds, round for round;
* PEM with OLH (the client's own hash family) and with FLH (fedhh's public functions, from the
  document): the client draws its own reports, so the run is another draw of the same protocol:
  it must find the same items as the simulation (the population leaves a gap of over 20 standard
  deviations between the k-th and the (k+1)-th value), with estimated counts within 6 standard
  deviations of the simulation's."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.data.population import shard_bounds
from fedhh.experiment import Experiment
from fedhh.oracles import Histogram, make_oracle
from fedhh.protocols import ProtocolResult
from simulations.deployment import LocalDeployment
from simulations.fast import run_fast
from strategies.participation import PARTICIPATION_KEYS

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "third_party_client"
NODES = 3
USERS = 6000
WORDS = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
         "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not"]


def write_population(tmp_path: Path, words: list[str], deployment: LocalDeployment, **node_config: int) -> Path:
    """Everyone's words in one file (the server's evaluation), each node's own users in its file."""
    everyone = tmp_path / "everyone.txt"
    everyone.write_text("\n".join(words) + "\n", encoding="utf-8")
    for index in range(NODES):
        start, stop = shard_bounds(len(words), index, NODES)
        own = tmp_path / f"node-{index}.txt"
        own.write_text("\n".join(words[start:stop]) + "\n", encoding="utf-8")
        deployment.add_supernode(
            f"device-app-{index}",
            {"partition-id": index, "num-partitions": NODES, "population": len(words), "words-file": str(own),
             **node_config},
        )
    return everyone


def run_both(deployment: LocalDeployment, settings: dict, output: Path) -> tuple[dict, ProtocolResult]:
    outcome = deployment.run({**settings, "output-dir": str(output)}, app_dir=EXAMPLE, timeout=240.0)
    assert outcome.succeeded, f"{outcome.status}: {outcome.details}\n{outcome.output}\n{deployment.logs()}"
    document = json.loads((output / "result.json").read_text(encoding="utf-8"))
    config = load_config(None, [f"{key}={json.dumps(value)}" for key, value in settings.items()])
    return document, run_fast(Experiment(config), NODES, backend="inprocess").result


def test_the_example_imports_only_flower_numpy_and_the_standard_library() -> None:
    tree = ast.parse((EXAMPLE / "device_client.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) == {"flwr", "numpy"}


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("third_party_device_client", EXAMPLE / "device_client.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("epsilon", [3.0, 8.0])
def test_the_example_s_flh_counts_decode_to_unbiased_estimates(epsilon: float) -> None:
    """The example's FLH reply, decoded by fedhh's FLH oracle as a table (ε = 3: 1000 x 21 cells) or
    read as support counts (ε = 8: 1000 x 2982 cells, more than a table may hold), estimates every
    candidate within 5 standard deviations (fedhh's FLH variance, hash choice included).  The table
    is where the example's hashing must be fedhh's; support counts the node counts with its own."""
    example = load_example()
    values = np.repeat(np.array([3, 1 << 40, 12345, 99], dtype=np.uint64), [3000, 2000, 1000, 500])
    candidates = np.array([3, 1 << 40, 12345, 99, 7, 1 << 63], dtype=np.uint64)
    oracle = make_oracle("flh", epsilon=epsilon, domain=1 << 64, seed=77)
    counts = example.flh_counts(values, candidates, epsilon, 77, np.random.default_rng(5))
    if oracle.flat_size() is not None:
        support = oracle.support(oracle.from_flat(counts, np.array([values.size])), candidates)
    else:
        support = oracle.restore_support(counts, np.array([values.size]))
    truth = Histogram.of(values)
    error = oracle.estimate_support(support) - truth.lookup(candidates)
    assert np.all(np.abs(error) <= 5 * np.sqrt(oracle.variance(candidates, truth))), error


def test_third_party_client_finds_what_the_simulation_finds(deployment: LocalDeployment, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    weights = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.1
    words = [WORDS[i] for i in rng.choice(len(WORDS), size=USERS, p=weights / weights.sum())]
    everyone = write_population(tmp_path, words, deployment)
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
    document, simulated = run_both(deployment, settings, tmp_path / "out")
    assert len(simulated.discoveries) >= 5, "the reference must find something"
    assert sorted(hit["item"] for hit in document["heavy_hitters"]) == sorted(d.item for d in simulated.discoveries)
    rounds = [{k: v for k, v in line.items() if k not in PARTICIPATION_KEYS} for line in document["rounds"]]
    assert rounds == [record.to_dict() for record in simulated.trace]
    assert all(line["rejected_shards"] == [] and line["failed_shards"] == [] for line in document["rounds"])


@pytest.mark.parametrize("oracle", ["olh", "flh"])
def test_third_party_pem_client_finds_what_the_simulation_finds(
    deployment: LocalDeployment, tmp_path: Path, oracle: str
) -> None:
    heavy, light = WORDS[:8], WORDS[8:]
    rng = np.random.default_rng(12)
    share = np.r_[np.full(len(heavy), 0.8 / len(heavy)), np.full(len(light), 0.2 / len(light))]
    words = [WORDS[i] for i in rng.choice(len(WORDS), size=USERS, p=share)]
    everyone = write_population(tmp_path, words, deployment, **{"report-seed": 7})
    epsilon = 6.0
    settings = {
        "population.source": "file",
        "population.path": str(everyone),
        "protocol.name": "pem",
        "protocol.oracle": oracle,
        "protocol.encoding": "bits",
        "protocol.max_length": 4,
        "protocol.start_length": 5,
        "protocol.segment_length": 5,
        "protocol.top_k": len(heavy),
        "privacy.epsilon": epsilon,
        "run.seed": 4,
        "run.shards": NODES,
    }
    document, simulated = run_both(deployment, settings, tmp_path / "out")
    assert sorted(d.item for d in simulated.discoveries) == sorted(heavy), "the reference must find the heavy words"
    assert sorted(hit["item"] for hit in document["heavy_hitters"]) == sorted(heavy)
    assert all(line["rejected_shards"] == [] and line["failed_shards"] == [] for line in document["rounds"])

    # OLH's estimate of a count from the last level's n_g reports, scaled to the population: variance per
    # report at most (q(1-q) + (p-q)(1-p-q)) / (p-q)^2 (the value's share f at most 1).  FLH adds
    # sum_u c_u (c_u - 1) / ((g - 1) k') over the reports' values (fedhh.oracles.fast_local_hashing),
    # at most sum_u c_u^2 / ((g - 1) k') with c_u = share_u x n_g.
    g = round(math.exp(epsilon)) + 1
    p, q = math.exp(epsilon) / (math.exp(epsilon) + g - 1), 1 / g
    reports = document["rounds"][-1]["users"]
    variance = reports * (q * (1 - q) + (p - q) * (1 - p - q)) / (p - q) ** 2
    if oracle == "flh":
        variance += float(np.sum((share * reports) ** 2)) / ((g - 1) * 1000)
    sigma = math.sqrt(variance) * USERS / reports
    simulated_counts = {d.item: d.estimated_count for d in simulated.discoveries}
    for hit in document["heavy_hitters"]:
        assert abs(hit["estimated_count"] - simulated_counts[hit["item"]]) <= 6 * math.sqrt(2) * sigma, hit
