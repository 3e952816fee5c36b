"""Real Flower deployments: SuperLink and SuperNodes as separate processes over loopback HTTP.

* a federation of three shard SuperNodes finds what a simulation of the
  same seed and shards finds, round for round, for the protocols of
  :data:`DEPLOYED` (every built-in protocol runs on Flower in a test of its
  own: ``tests/test_protocol_checklist.py``);
* a federation of device SuperNodes (one real user's data file each,
  secure randomness) finds what a simulation of the same users finds;
* SecAgg+ sums a round's responses so that the server sees only sums.

Every process is started by ``simulations.deployment.LocalDeployment`` in
its own process group and stopped by the fixture, also when a test fails;
the fixture then checks that none is left.  Every address is 127.0.0.1.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
from flwr.serverapp import Grid, ServerApp

from fedhh.config import FedhhConfig, load_config
from fedhh.experiment import Experiment, item_codec
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols import ProtocolResult
from fedhh.protocols.registry import protocol_names
from fedhh.protocols.common.sampled_rounds import sampled_in_node
from fedhh.protocols.triehh.nodes import TrieHHDense
from fedhh.protocols.triehh.server import round_sample
from simulations.deployment import LocalDeployment
from simulations.fast import run_fast
from strategies.devices import device_of, device_shard
from strategies.participation import PARTICIPATION_KEYS
from strategies.shards import SHARD_INFO_CODEC, ShardInfo, admit

# Short items (at most L = 4 rounds), two per user (keyed Algorithm 3 choices):
# a few seconds per round with three SuperNodes on two cores.
SHARDED = [
    'population.source="zipf"',
    "population.users=20000",
    "population.vocabulary=2000",
    "population.item_length=3",
    "population.words_per_user=2",
    "protocol.max_length=3",
    "privacy.epsilon=6.0",
    "run.seed=3",
]
SUPERNODES = 3
# PEM: 15-bit values (3 letters) in a 3-bit start and three 4-bit segments: 3 rounds.
PEM_SHARDED = [
    'population.source="zipf"',
    "population.users=20000",
    "population.vocabulary=300",
    "population.item_length=3",
    "protocol.max_length=3",
    "protocol.start_length=3",
    "protocol.segment_length=4",
    "protocol.top_k=8",
    "privacy.epsilon=6.0",
    "run.seed=3",
]
# SPM: the same 15-bit values in three 5-bit segments (3 segment pairs): 3 rounds.
SPM_SHARDED = [
    'population.source="zipf"',
    "population.users=20000",
    "population.vocabulary=300",
    "population.item_length=3",
    "protocol.max_length=3",
    "protocol.segment_bits=5",
    "protocol.top_k=8",
    "privacy.epsilon=6.0",
    "run.seed=3",
]
# protocol -> a few short rounds.  A protocol's deployment runs the generic strategy, ClientApp and codec
# that its Flower simulation test runs; a few protocols of several rounds are deployed here, and every
# built-in protocol runs on Flower in a test (tests/test_protocol_checklist.py checks both).
DEPLOYED: dict[str, list[str]] = {"triehh": SHARDED, "pem": PEM_SHARDED, "spm": SPM_SHARDED}

# 32 enrolled users: the smallest population for which TrieHH's (ε, δ) solver
# finds m >= θ with δ below 1/n (θ = 5, m = 5 for L = 3 rounds).  Only the
# devices of the users the server samples (and two others) are online, as in
# a real fleet.
DEVICE_USERS = 32
DEVICE_BATCH = 5
DEVICE_PRIVACY = ["protocol.max_length=2", "privacy.epsilon=4.8", "privacy.delta=0.02", "run.seed=6"]


def protocol_view(document: dict[str, Any]) -> dict[str, Any]:
    """Discovery and trace of a result document, participation set apart."""
    return {
        "items": sorted(hit["item"] for hit in document["heavy_hitters"]),
        "support": {hit["item"]: (hit.get("support"), hit.get("estimated_count")) for hit in document["heavy_hitters"]},
        "rounds": [{k: v for k, v in line.items() if k not in PARTICIPATION_KEYS} for line in document["rounds"]],
        "stopped_because": document["stopped_because"],
    }


def fast_view(result: ProtocolResult) -> dict[str, Any]:
    return {
        "items": sorted(d.item for d in result.discoveries),
        "support": {d.item: (d.support, d.estimated_count) for d in result.discoveries},
        "rounds": [record.to_dict() for record in result.trace],
        "stopped_because": result.stopped_because,
    }


def run_config(config: FedhhConfig, output: Path, **extra: Any) -> dict[str, Any]:
    return {**config.to_flat(), "output-dir": str(output), "progress": False, **extra}


def run_deployed(deployment: LocalDeployment, config: dict[str, Any], timeout: float = 240.0) -> dict[str, Any]:
    outcome = deployment.run(config, timeout=timeout)
    assert outcome.succeeded, f"{outcome.status}: {outcome.details}\n{outcome.output}\n{deployment.logs()}"
    result = Path(config["output-dir"]) / "result.json"
    assert result.is_file(), outcome.output + "\n" + deployment.logs()
    return json.loads(result.read_text(encoding="utf-8"))


# -- a federation of shards ---------------------------------------------------------


def test_every_deployment_config_names_a_builtin_protocol() -> None:
    assert DEPLOYED and set(DEPLOYED) <= set(protocol_names(builtin_only=True))


@pytest.mark.parametrize("protocol", sorted(DEPLOYED))
def test_deployment_matches_simulation(protocol: str, deployment: LocalDeployment, tmp_path: Path) -> None:
    config = load_config(None, [*DEPLOYED[protocol], f'protocol.name="{protocol}"', f"run.shards={SUPERNODES}"])
    for index in range(SUPERNODES):
        deployment.add_supernode(f"supernode-{index}", {"partition-id": index, "num-partitions": SUPERNODES})
    document = run_deployed(deployment, run_config(config, tmp_path / "out"))

    simulated = run_fast(Experiment(config), SUPERNODES, backend="inprocess").result
    assert len(simulated.discoveries) >= 5 and len(simulated.trace) >= 3, "the reference must be non-trivial"
    assert protocol_view(document) == fast_view(simulated)
    assert document["transport"] == "flower"
    for line in document["rounds"]:
        assert (line["nodes_asked"], line["nodes_answered"], line["lost_users"]) == (SUPERNODES, SUPERNODES, 0)
    assert document["participation"]["lost_shards"] == []


def write_words(path: Path) -> Path:
    """6,000 users' words: five frequent ones, and 45 rare ones (at most 3 letters: 4 rounds)."""
    words = ["the"] * 1500 + ["and"] * 1000 + ["of"] * 800 + ["to"] * 600 + ["in"] * 400
    rare = [a + b + c for a in "xyz" for b in "bcdfg" for c in "hjk"]
    words += [rare[i % len(rare)] for i in range(1700)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def test_a_server_without_evaluation_reads_none_of_the_users_data(deployment: LocalDeployment, tmp_path: Path) -> None:
    """run.evaluation = false: the population file exists only where the nodes run (a path relative
    to their working folders); the server, which cannot read it, runs the job with n from the nodes
    and records no population.  With run.evaluation the server needs the file, and refuses."""
    data = Path("node-data") / "words.txt"
    assert not data.exists(), "the server's working folder must not hold the nodes' data"
    for index in range(SUPERNODES):
        write_words(tmp_path / f"node-{index}" / data)
        deployment.add_supernode(
            f"supernode-{index}", {"partition-id": index, "num-partitions": SUPERNODES}, cwd=tmp_path / f"node-{index}"
        )
    deployment.wait_for_supernodes(SUPERNODES)
    settings = ['population.source="file"', f'population.path="{data}"', "protocol.max_length=3",
                "privacy.epsilon=6.0", "privacy.delta=1e-6", 'run.shards="auto"', "run.seed=5"]
    config = load_config(None, [*settings, "run.evaluation=false"])
    document = run_deployed(deployment, run_config(config, tmp_path / "out"))

    simulated = run_fast(Experiment(load_config(None, [*settings[:1], f'population.path="{write_words(tmp_path / data)}"',
                                                       *settings[2:]])), SUPERNODES, backend="inprocess").result
    assert sorted(d.item for d in simulated.discoveries) == ["and", "in", "of", "the", "to"]
    assert protocol_view(document) == fast_view(simulated)
    assert document["n_users"] == 6000 and document["config"]["run"]["shards"] == SUPERNODES
    assert "population" not in document and "evaluation" not in document, sorted(document)
    assert document["transport"] == "flower" and document["participation"]["lost_shards"] == []

    evaluated = deployment.run(run_config(load_config(None, settings), tmp_path / "evaluated"), timeout=120)
    assert evaluated.status == "finished:failed" and "is not a file" in evaluated.details, evaluated.details
    assert not (tmp_path / "evaluated").exists()


# -- a federation of devices -----------------------------------------------------------


def sampled_users(config: FedhhConfig, rounds: int) -> set[int]:
    """Every user the server will sample in the first ``rounds`` rounds (drawn from the seed alone)."""
    randomness = KeyedRandomness(int(config["run"]["seed"]))
    params = Experiment(config).make_server().result().params
    return {
        int(user)
        for r in range(1, rounds + 1)
        for user in round_sample(randomness, r, DEVICE_USERS, params["batch_size"])
    }


def write_devices(folder: Path, holders_of_ab: set[int]) -> tuple[Path, list[Path]]:
    """The population as one file, and each user's own data file (the first "ab" holder: CSV, "ab" twice)."""
    folder.mkdir()
    items = ["ab" if user in holders_of_ab else ("cd", "a", "b")[user % 3] for user in range(DEVICE_USERS)]
    population = folder / "population.txt"
    population.write_text("\n".join(items) + "\n", encoding="utf-8")
    files = []
    for user, item in enumerate(items):
        if user == min(holders_of_ab):  # a local frequency of 2: the device draws its choice from the OS
            path = folder / f"user-{user}.csv"
            path.write_text(f"user,item\nme,{item}\nme,{item}\n", encoding="utf-8")
        else:
            path = folder / f"user-{user}.txt"
            path.write_text(item + "\n", encoding="utf-8")
        files.append(path)
    return population, files


def test_device_federation_matches_simulation(deployment: LocalDeployment, tmp_path: Path) -> None:
    """A fleet of device SuperNodes, most users offline: the sample reaches the right devices."""
    population_config = [*DEVICE_PRIVACY, 'population.source="file"']
    probe = tmp_path / "probe.txt"
    probe.write_text("\n".join(["ab"] * DEVICE_USERS) + "\n", encoding="utf-8")
    sampled = sampled_users(load_config(None, [*population_config, f'population.path="{probe}"']), rounds=3)
    population, files = write_devices(tmp_path / "data", sampled)
    never_sampled = sorted(set(range(DEVICE_USERS)) - sampled)[:2]
    online = sorted(sampled | set(never_sampled))
    for user in online:
        deployment.add_supernode(f"device-{user}", {"user-id": user, "data-file": str(files[user])})
    deployment.wait_for_supernodes(len(online))
    devices = load_config(
        None, [*DEVICE_PRIVACY, f"population.users={DEVICE_USERS}", 'run.federation="devices"', "run.connect_timeout=3"]
    )
    document = run_deployed(deployment, run_config(devices, tmp_path / "out"))

    simulation = load_config(None, [*population_config, f'population.path="{population}"'])
    simulated = run_fast(Experiment(simulation), DEVICE_USERS, backend="inprocess").result
    assert [d.item for d in simulated.discoveries] == ["ab"] and len(simulated.trace) == 3
    assert protocol_view(document) == fast_view(simulated)
    assert document["transport"] == "flower/devices" and document["n_users"] == DEVICE_USERS
    assert "evaluation" not in document, "a device federation's server knows no true counts"
    for line in document["rounds"]:  # only the sampled devices are asked, and all of them answer
        assert line["nodes_asked"] == line["nodes_answered"] == line["sampled_users"] == DEVICE_BATCH
    summary = document["participation"]
    assert (summary["nodes"], summary["users_without_node"]) == (len(online), DEVICE_USERS - len(online))


def test_device_node_reads_one_users_data(tmp_path: Path) -> None:
    from fedhh.kernels.randomness import SecureRandomness
    from strategies.client_app import node_data

    _, files = write_devices(tmp_path / "data", {3, 5})
    config = load_config(None, [*DEVICE_PRIVACY, "population.users=24", 'run.federation="devices"'])
    node = node_data(config.to_flat(), {"user-id": 3, "data-file": str(files[3])})
    assert node.info == ShardInfo(shard_index=3, num_shards=24, first_user=3, users=1, population=24)
    assert isinstance(node.randomness, SecureRandomness)
    assert (node.shard.n_users, node.shard.item_counts.tolist()) == (1, [2])
    seventh = device_shard(7, str(files[7]), item_codec(config))
    assert seventh.first_user == 7 and seventh.vocabulary.items == ["a"]


@pytest.mark.parametrize(
    ("node_config", "message"),
    [
        ({}, r"node config lacks \['user-id', 'data-file'\]"),
        ({"user-id": 24, "data-file": "x.txt"}, r"user-id: must be an integer in 0..23 \(population.users = 24\), got 24"),
        ({"user-id": -1, "data-file": "x.txt"}, r"user-id: must be an integer in 0..23"),
        ({"user-id": "3", "data-file": "x.txt"}, r"user-id: must be an integer"),
        ({"user-id": 3, "data-file": ""}, r"data-file: must name the user's data file"),
    ],
)
def test_device_node_config_is_checked(node_config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        device_of(node_config, 24)


def test_device_data_file_errors_name_the_node_key(tmp_path: Path) -> None:
    codec = item_codec(load_config(None, []))
    two_users = tmp_path / "two.csv"
    two_users.write_text("user,item\na,ab\nb,cd\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"data-file '.*two.csv': it holds 2 users; a device holds one user's items"):
        device_shard(0, str(two_users), codec)
    with pytest.raises(ValueError, match=r"data-file '.*missing.txt': population.path: '.*' is not a file"):
        device_shard(0, str(tmp_path / "missing.txt"), codec)
    bad = tmp_path / "bad.txt"
    bad.write_text("ab\nA!\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"data-file '.*bad.txt': item 'A!' .* outside the 'lowercase' alphabet"):
        device_shard(0, str(bad), codec)


def test_device_federation_admits_partial_fleets_and_leaves_out_impostors() -> None:
    n = 10
    infos = {100 + u: ShardInfo(u, n, u, 1, n) for u in (0, 2, 3, 7)}
    infos[200] = ShardInfo(3, n, 3, 1, n)  # claims user 3 too
    infos[201] = ShardInfo(12, n, 12, 1, n)  # not enrolled
    federation = admit(infos, n, n, "devices")
    assert federation.nodes == [100, 102, 107]
    assert federation.missing_users == 7
    assert sorted(federation.refused) == [103, 200, 201]
    assert "all claim shard 3" in federation.refused[200] and "outside 0..9" in federation.refused[201]


# -- secure aggregation --------------------------------------------------------------------


class RecordingGrid(Grid):
    """The ServerApp's grid, recording every reply the server receives."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid
        self.replies: list[Message] = []

    def set_run(self, run: Any) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Any:
        return self._grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Any:
        return self._grid.get_node_ids()

    def push_messages(self, messages: Any) -> Any:
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Any) -> Any:
        replies = list(self._grid.pull_messages(message_ids))
        self.replies.extend(replies)
        return replies

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> Any:
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        self.replies.extend(replies)
        return replies


def test_secure_aggregation_server_sees_only_sums(tmp_path: Path) -> None:
    """SecAgg+ on Flower's simulation engine: the same discovery, and no plaintext response on the wire."""
    import ray
    from flwr.simulation import run_simulation

    from strategies.client_app import make_client_app
    from strategies.server_app import run_on_grid

    config = load_config(None, [*SHARDED, f"run.shards={SUPERNODES}", "run.secure_aggregation=true"])
    flat = run_config(config, tmp_path / "out")
    grids: list[RecordingGrid] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        grids.append(RecordingGrid(grid))
        run_on_grid(grids[0], flat, context)

    started_ray = not ray.is_initialized()
    try:
        run_simulation(
            server_app=server_app,
            client_app=make_client_app(flat),
            num_supernodes=SUPERNODES,
            backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
        )
    finally:
        if started_ray and ray.is_initialized():
            ray.shutdown()
    document = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf-8"))
    experiment = Experiment(config)
    simulated = run_fast(experiment, SUPERNODES, backend="inprocess").result
    assert protocol_view(document) == fast_view(simulated)

    # What each node would have sent in the clear, per round: its dense vector.
    replies = grids[0].replies
    shard_of = {
        reply.metadata.src_node_id: SHARD_INFO_CODEC.decode(reply.content).shard_index
        for reply in replies
        if reply.metadata.message_type == "query.shard"
    }
    assert sorted(shard_of.values()) == list(range(SUPERNODES))
    assert not [r for r in replies if r.metadata.message_type == "query.round"], "no plain round may run"
    plaintext = plaintext_vectors(experiment, len(document["rounds"]))
    masked = [r for r in replies if r.metadata.message_type == "train" and Key.MASKED_PARAMETERS in r.content.config_records.get(RECORD_KEY_CONFIGS, {})]
    assert len(masked) == SUPERNODES * len(document["rounds"])
    for reply in replies:
        if reply.metadata.message_type == "train":
            for record in reply.content.array_records.values():
                assert isinstance(record, ArrayRecord) and len(record) == 0, "the mod must clear the plaintext arrays"
    for reply in masked:
        _, sent = (bytes_to_ndarray(b) for b in reply.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS])
        vector = plaintext[int(reply.metadata.group_id) - 1][shard_of[reply.metadata.src_node_id]]
        assert sent.shape == vector.shape and vector.max() <= 20000
        assert np.mean(sent == vector) < 0.01 and np.median(sent) > 2**28, "masks must hide every entry"
    dense_sum = [sum(vectors) for vectors in plaintext]
    assert [int(v[0]) for v in dense_sum] == [line["sampled_users"] for line in document["rounds"]]


def plaintext_vectors(experiment: Experiment, rounds: int) -> list[list[np.ndarray]]:
    """Per round, each shard's dense response vector (as the fast driver computes it)."""
    server = experiment.make_server()
    shards = [experiment.build_shard(i, SUPERNODES) for i in range(SUPERNODES)]
    dense = TrieHHDense(experiment.codec)
    vectors = []
    for _ in range(rounds):
        request = server.next_request()
        assert request is not None
        responses = [experiment.respond(request, shard, experiment.randomness) for shard in shards]
        asked = [
            replace(
                request,
                sampled=sampled_in_node(request.sampled, ShardInfo(i, SUPERNODES, s.first_user, s.n_users, s.n_users)),
            )
            for i, s in enumerate(shards)
        ]
        vectors.append([dense.encode(*pair) for pair in zip(asked, responses)])
        server.absorb(type(responses[0]).combine(responses))
    return vectors
