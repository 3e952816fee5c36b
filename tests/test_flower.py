"""The Flower transport: wire codecs, shard coverage, and transport invariance.

The invariance tests run real Flower simulations on real Ray (no mocks) and
compare them with the fast in-process driver: for one seed, the discovered
items and the round trace must be identical for any number of SuperNodes.
``FLWR_HOME`` points at a temporary folder (``conftest.py``).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.config import flatten_dict
from flwr.serverapp import ServerApp

from fedhh.config import AUTO_SHARDS, BASE_SCHEMA, DEFAULT_PROTOCOL, FedhhConfig, load_config
from fedhh.experiment import Experiment
from fedhh.privacy.ledger import Ledger
from fedhh.protocols import PROTOCOLS, get_protocol
from fedhh.protocols.registry import protocol_keys, protocol_names
from fedhh.protocols.triehh.messages import TrieHHRequest, TrieHHResponse
from simulations.fast import run_fast
from simulations.flower import run_flower_simulation
from strategies.client_app import shard_of
from strategies.codec import ARRAYS_RECORD, SCALARS_RECORD, TYPE_KEY, MessageCodec, MessageDecodeError, codec_for
from strategies.participation import PARTICIPATION_KEYS
from strategies.plugins import PROTOCOL_MODULE
from strategies.shards import SHARD_INFO_CODEC, ShardCoverageError, ShardInfo, admit

ROOT = Path(__file__).resolve().parents[1]
# Small enough for a Flower run in seconds, large enough for several rounds,
# a dozen discoveries, and two items per user (keyed Algorithm 3 choices).
SMALL = [
    "population.users=50000",
    "population.vocabulary=5000",
    "population.words_per_user=2",
    "privacy.epsilon=8.0",
    "run.seed=7",
]


@pytest.fixture(scope="module")
def small_config() -> FedhhConfig:
    return load_config(None, SMALL)


@pytest.fixture(scope="module")
def reference(small_config: FedhhConfig) -> dict[str, Any]:
    """Discovery and trace of the fast in-process driver (one shard)."""
    result = run_fast(Experiment(small_config), 1, backend="inprocess").result
    assert len(result.discoveries) >= 5 and len(result.trace) >= 3, "the reference run must be non-trivial"
    return {
        "items": sorted(d.item for d in result.discoveries),
        "support": {d.item: d.support for d in result.discoveries},
        "rounds": [record.to_dict() for record in result.trace],
        "stopped_because": result.stopped_because,
    }


def flower_view(document: dict[str, Any]) -> dict[str, Any]:
    """The protocol's view of a Flower result: participation (transport-level) set apart."""
    rounds = document["rounds"]
    assert all(line["nodes_answered"] == line["nodes_asked"] for line in rounds), "every node must have answered"
    return {
        "items": sorted(h["item"] for h in document["heavy_hitters"]),
        "support": {h["item"]: h["support"] for h in document["heavy_hitters"]},
        "rounds": [{k: v for k, v in line.items() if k not in PARTICIPATION_KEYS} for line in rounds],
        "stopped_because": document["stopped_because"],
    }


# -- transport invariance -----------------------------------------------------------


@pytest.mark.parametrize("supernodes", [1, 7])
def test_flower_simulation_matches_fast_driver(
    small_config: FedhhConfig, reference: dict[str, Any], supernodes: int, tmp_path: Path
) -> None:
    document = run_flower_simulation(small_config, supernodes, output_dir=tmp_path / "out")
    assert (tmp_path / "out" / "result.json").is_file()
    assert document["transport"] == "flower"
    assert document["config"]["run"]["shards"] == supernodes
    assert flower_view(document) == reference
    # the same costs as the fast driver reports: the bits a user sends, and the server's own time
    assert document["communication"] == Experiment(small_config).communication.to_dict()
    assert document["timing_s"]["server_s"] > 0


def test_impossible_privacy_target_fails_before_flower_starts(tmp_path: Path) -> None:
    import ray

    from fedhh.privacy.triehh import PrivacyTargetError

    config = load_config(None, ["population.users=100", "population.vocabulary=50"])
    ray_was_running = ray.is_initialized()
    with pytest.raises(PrivacyTargetError, match="Need at least 739 users"):
        run_flower_simulation(config, 2, output_dir=tmp_path / "out")
    assert ray.is_initialized() == ray_was_running, "Ray must not start for a run that is refused"
    assert not (tmp_path / "out").exists()


def test_nodes_of_another_population_are_refused(small_config: FedhhConfig, tmp_path: Path) -> None:
    """Server and nodes built from different populations: a clear error, not a wrong result."""
    import ray
    from flwr.simulation import run_simulation

    from strategies.client_app import make_client_app
    from strategies.server_app import OUTPUT_DIR, make_server_app

    server_config = {**small_config.with_overrides({"run.shards": 2}).to_flat(), OUTPUT_DIR: str(tmp_path / "out")}
    node_config = {**server_config, "population.users": 40000}
    started_ray = not ray.is_initialized()
    try:
        with pytest.raises(ShardCoverageError, match="population of 40000 users, the server 50000"):
            run_simulation(
                server_app=make_server_app(server_config),
                client_app=make_client_app(node_config),
                num_supernodes=2,
                backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
            )
    finally:
        if started_ray and ray.is_initialized():
            ray.shutdown()
    assert not (tmp_path / "out").exists(), "a refused run must leave no result behind"


@pytest.fixture
def local_superlink(tmp_path: Path) -> Iterator[str]:
    """A SuperLink in simulation mode on a free loopback port, owned (and stopped) by the test."""
    bin_dir = Path(sys.executable).parent
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # use this venv, install nothing
    }
    process = subprocess.Popen(
        [
            str(bin_dir / "flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
            "--host", "127.0.0.1", "--port", str(port), "--database", str(tmp_path / "state.db"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    home = Path(os.environ["FLWR_HOME"])
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{port}"\ninsecure = true\n',
        encoding="utf-8",
    )
    try:
        wait_until_healthy(port, process)
        yield "test"
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the SuperLink and the processes it spawned
        process.wait(timeout=30)


def wait_until_healthy(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    raise TimeoutError(f"flower-superlink did not answer on 127.0.0.1:{port} within {timeout:.0f} s")


def test_flwr_run_writes_the_same_result(local_superlink: str, reference: dict[str, Any], tmp_path: Path) -> None:
    """`flwr run .` with the pyproject's app tables runs the job and writes result.json."""
    output = tmp_path / "flwr-run"
    ledger = tmp_path / "ledger.json"
    overrides = " ".join(SMALL) + f" run.shards=3 output-dir='{output}' progress=false privacy.ledger='{ledger}'"
    completed = subprocess.run(
        [
            str(Path(sys.executable).parent / "flwr"), "run", ".", local_superlink, "--stream",
            "--federation-config", "num-supernodes=3 client-resources-num-cpus=1",
            "--run-config", overrides,
        ],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result_file = output / "result.json"
    assert result_file.is_file(), completed.stdout + completed.stderr
    document = json.loads(result_file.read_text(encoding="utf-8"))
    assert document["config"]["run"]["shards"] == 3
    assert flower_view(document) == reference
    # A bare `flwr run` is charged to the ledger too: by the ServerApp, once.
    (entry,) = Ledger(ledger).entries
    assert entry.run_id.startswith("flwr-run-flower-run-")
    assert document["privacy"]["composition"]["runs"] == 1


def test_fedhh_run_on_flower_charges_the_ledger_once(tmp_path: Path) -> None:
    """The ServerApp charges; the command line around it does not charge again."""
    from simulations.cli import main

    ledger = tmp_path / "ledger.json"
    settings = [*SMALL, "run.shards=2", 'run.driver="flower"', f'privacy.ledger="{ledger}"']
    output = tmp_path / "day-1"
    assert main(["run", *[f"--set={setting}" for setting in settings], "--quiet", "--output", str(output)]) == 0
    (entry,) = Ledger(ledger).entries
    assert entry.run_id.startswith("day-1@")
    document = json.loads((output / "result.json").read_text(encoding="utf-8"))
    assert document["transport"] == "flower" and document["privacy"]["composition"]["runs"] == 1


# -- the Flower app's configuration ------------------------------------------------


def test_pyproject_run_config_mirrors_the_fedhh_defaults() -> None:
    with open(ROOT / "pyproject.toml", "rb") as file:
        app = tomllib.load(file)["tool"]["flwr"]["app"]
    flat = flatten_dict(app["config"])
    # The schema of fedhh's own protocols, assembled from their specs (a protocol
    # registered by a test or a plugin brings its own defaults, not the app's).
    builtin = {**BASE_SCHEMA, "protocol": {**BASE_SCHEMA["protocol"], **protocol_keys(builtin_only=True)}}
    defaults = {f"{section}.{key}": spec.default for section, keys in builtin.items() for key, spec in keys.items()}
    defaults["protocol.name"] = DEFAULT_PROTOCOL
    defaults["run.shards"] = AUTO_SHARDS  # `flwr run .` runs on whatever federation it is given
    assert {key: value for key, value in flat.items() if "." in key} == defaults
    assert set(flat) - set(defaults) == {"output-dir", "overwrite", "progress", "run-id", PROTOCOL_MODULE}


def test_app_components_load() -> None:
    from simulations import flower_app
    from strategies import client_app

    assert isinstance(flower_app.app, ServerApp)
    assert isinstance(client_app.app, ClientApp)
    with open(ROOT / "pyproject.toml", "rb") as file:
        components = tomllib.load(file)["tool"]["flwr"]["app"]["components"]
    assert components == {"serverapp": "simulations.flower_app:app", "clientapp": "strategies.client_app:app"}


def test_layers_point_down() -> None:
    """simulations -> strategies -> fedhh: the Flower adapter imports nothing from the drivers above it."""
    offenders = []
    for path in sorted((ROOT / "strategies").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            offenders += [f"{path.relative_to(ROOT)} imports {name}" for name in names if name.split(".")[0] == "simulations"]
    assert offenders == []


def test_every_registered_protocol_has_flower_codecs() -> None:
    for spec in PROTOCOLS.values():  # the generic codec reads each class's own field declarations
        for message_type in (spec.request_type, spec.response_type):
            codec = codec_for(message_type)
            assert codec.message_type is message_type and codec.tag == message_type.__name__
            assert set(codec.arrays) | set(codec.scalar_types) == {f.name for f in dataclasses.fields(message_type)}


def test_unknown_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="protocol.name"):
        get_protocol("nope")


def test_node_config_without_partition_is_refused() -> None:
    assert shard_of({"partition-id": 2, "num-partitions": 7}) == (2, 7)
    with pytest.raises(ValueError, match="partition-id"):
        shard_of({})
    with pytest.raises(ValueError, match="partition-id"):
        shard_of({"partition-id": 7, "num-partitions": 7})


# -- codecs ----------------------------------------------------------------------------


def round_messages(config: FedhhConfig, rounds: int = 3) -> list[Any]:
    """Real requests and responses of the first rounds of every protocol."""
    experiment = Experiment(config)
    server = experiment.make_server()
    shard = experiment.build_shard(0, 1)
    messages: list[Any] = []
    for _ in range(rounds):
        request = server.next_request()
        if request is None:
            break
        response = experiment.respond(request, shard, experiment.randomness)
        server.absorb(response)
        messages += [request, response]
    return messages


def assert_same_message(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    for name, value in vars(a).items():
        other = getattr(b, name)
        if isinstance(value, np.ndarray):
            assert other.dtype == value.dtype and other.shape == value.shape
            np.testing.assert_array_equal(other, value)
        else:
            assert type(other) is type(value) and other == value


@pytest.mark.parametrize("protocol", sorted(protocol_names(builtin_only=True)))
def test_codecs_round_trip_every_message(protocol: str, small_config: FedhhConfig) -> None:
    config = small_config.with_overrides({"protocol.name": protocol})
    spec = get_protocol(protocol)
    messages = round_messages(config)
    assert {type(m) for m in messages} == {spec.request_type, spec.response_type}
    for message in messages:
        codec = codec_for(type(message))
        decoded = codec.decode(codec.encode(message))
        assert_same_message(decoded, message)


def test_shard_info_round_trips() -> None:
    info = ShardInfo(shard_index=3, num_shards=7, first_user=21428, users=7143, population=50000)
    assert SHARD_INFO_CODEC.decode(SHARD_INFO_CODEC.encode(info)) == info


@pytest.fixture(scope="module")
def triehh_round_3(small_config: FedhhConfig) -> tuple[Any, Any]:
    request, response = round_messages(small_config, rounds=3)[-2:]
    assert request.round == 3 and response.prefixes.shape[0] > 1
    return request, response


def tampered(record: RecordDict, *, arrays: dict[str, Any] | None = None, scalars: dict[str, Any] | None = None) -> RecordDict:
    """A copy of an encoded message with some entries replaced (``None`` removes one)."""
    array_items = dict(record[ARRAYS_RECORD].items())
    scalar_items = dict(record[SCALARS_RECORD].items())
    for name, value in (arrays or {}).items():
        if value is None:
            array_items.pop(name)
        else:
            array_items[name] = value if isinstance(value, Array) else Array(np.asarray(value))
    for name, value in (scalars or {}).items():
        if value is None:
            scalar_items.pop(name)
        else:
            scalar_items[name] = value
    return RecordDict({ARRAYS_RECORD: ArrayRecord(array_items), SCALARS_RECORD: ConfigRecord(scalar_items)})


def test_codec_rejects_wrong_record_names(triehh_round_3: tuple[Any, Any]) -> None:
    codec = codec_for(TrieHHResponse)
    good = codec.encode(triehh_round_3[1])
    renamed = RecordDict({"array": good[ARRAYS_RECORD], SCALARS_RECORD: good[SCALARS_RECORD]})
    with pytest.raises(MessageDecodeError, match=r"expected records \['arrays', 'scalars'\], got \['array', 'scalars'\]"):
        codec.decode(renamed)
    extra = RecordDict({**dict(good.items()), "extra": ConfigRecord({"x": 1})})
    with pytest.raises(MessageDecodeError, match="expected records"):
        codec.decode(extra)
    swapped = RecordDict({ARRAYS_RECORD: good[SCALARS_RECORD], SCALARS_RECORD: good[ARRAYS_RECORD]})
    with pytest.raises(MessageDecodeError, match="must be a ConfigRecord"):
        codec.decode(swapped)


def test_codec_rejects_another_message_type(triehh_round_3: tuple[Any, Any]) -> None:
    request_codec, response_codec = codec_for(TrieHHRequest), codec_for(TrieHHResponse)
    with pytest.raises(MessageDecodeError, match="expected a TrieHHRequest message, the record carries 'TrieHHResponse'"):
        request_codec.decode(response_codec.encode(triehh_round_3[1]))
    with pytest.raises(MessageDecodeError, match="carries None"):
        request_codec.decode(tampered(request_codec.encode(triehh_round_3[0]), scalars={TYPE_KEY: None}))


def test_codec_rejects_missing_and_unexpected_fields(triehh_round_3: tuple[Any, Any]) -> None:
    codec = codec_for(TrieHHResponse)
    good = codec.encode(triehh_round_3[1])
    with pytest.raises(MessageDecodeError, match=r"array fields missing \['votes'\]"):
        codec.decode(tampered(good, arrays={"votes": None}))
    with pytest.raises(MessageDecodeError, match=r"scalar fields missing \['sampled_users'\]"):
        codec.decode(tampered(good, scalars={"sampled_users": None}))
    with pytest.raises(MessageDecodeError, match=r"unexpected \['weights'\]"):
        codec.decode(tampered(good, arrays={"weights": np.zeros(3, np.int64)}))


def test_codec_rejects_negative_counts(triehh_round_3: tuple[Any, Any]) -> None:
    codec = codec_for(TrieHHResponse)
    request_codec = codec_for(TrieHHRequest)
    response = triehh_round_3[1]
    good = codec.encode(response)
    with pytest.raises(MessageDecodeError, match=r"TrieHHResponse.sampled_users: must be >= 0, got -1"):
        codec.decode(tampered(good, scalars={"sampled_users": -1}))
    negative_votes = response.votes.copy()
    negative_votes[0] = -5
    with pytest.raises(MessageDecodeError, match=r"TrieHHResponse.votes: values must be >= 0, found -5"):
        codec.decode(tampered(good, arrays={"votes": negative_votes}))
    with pytest.raises(MessageDecodeError, match=r"TrieHHRequest.round: must be >= 1, got 0"):
        request_codec.decode(tampered(request_codec.encode(triehh_round_3[0]), scalars={"round": 0}))
    bad = type(response)(**{**vars(response), "votes": negative_votes})
    with pytest.raises(MessageDecodeError, match="cannot encode TrieHHResponse.votes"):
        codec.encode(bad)  # a malformed message never leaves either


def test_codec_rejects_wrong_shapes(triehh_round_3: tuple[Any, Any]) -> None:
    codec = codec_for(TrieHHResponse)
    response = triehh_round_3[1]
    good = codec.encode(response)
    k = response.prefixes.shape[0]
    with pytest.raises(MessageDecodeError, match=rf"votes: axis 0 \(K\) must have length {k}, got shape \({k - 1},\)"):
        codec.decode(tampered(good, arrays={"votes": response.votes[:-1]}))
    with pytest.raises(MessageDecodeError, match=r"prefixes: axis 1 \(round\) must have length 3, got shape"):
        codec.decode(tampered(good, arrays={"prefixes": response.prefixes[:, :2]}))
    with pytest.raises(MessageDecodeError, match=r"votes: expected 1 dimension"):
        codec.decode(tampered(good, arrays={"votes": response.votes[:, None]}))
    request_codec = codec_for(TrieHHRequest)
    request = triehh_round_3[0]
    with pytest.raises(MessageDecodeError, match=r"parents: axis 1 \(round-1\) must have length 2"):
        request_codec.decode(tampered(request_codec.encode(request), arrays={"parents": request.parents[:, :1]}))


def test_codec_rejects_wrong_dtypes_and_scalar_types(triehh_round_3: tuple[Any, Any]) -> None:
    codec = codec_for(TrieHHResponse)
    response = triehh_round_3[1]
    good = codec.encode(response)
    with pytest.raises(MessageDecodeError, match="votes: expected dtype int64, got float64"):
        codec.decode(tampered(good, arrays={"votes": response.votes.astype(np.float64)}))
    with pytest.raises(MessageDecodeError, match="round: expected int, got float"):
        codec.decode(tampered(good, scalars={"round": 3.0}))
    with pytest.raises(MessageDecodeError, match="round: expected int, got bool"):
        codec.decode(tampered(good, scalars={"round": True}))
    lying = Array(dtype="int64", shape=(response.votes.size,), stype="numpy.ndarray", data=Array(response.votes.astype(np.int32)).data)
    with pytest.raises(MessageDecodeError, match="header says int64"):
        codec.decode(tampered(good, arrays={"votes": lying}))
    garbage = Array(dtype="int64", shape=(3,), stype="numpy.ndarray", data=b"not numpy")
    with pytest.raises(MessageDecodeError, match="cannot read the array"):
        codec.decode(tampered(good, arrays={"votes": garbage}))


def test_codec_declaration_must_match_the_dataclass() -> None:
    from dataclasses import dataclass

    from fedhh.protocols.messages import ArraySpec, array_field, scalar_field

    @dataclass(frozen=True)
    class Undeclared(TrieHHResponse):
        weights: np.ndarray = None  # type: ignore[assignment]  # an array without its wire declaration

    with pytest.raises(TypeError, match=r"Undeclared.weights: an array field needs array_field"):
        MessageCodec(Undeclared)

    @dataclass(frozen=True)
    class BadOffset(TrieHHResponse):
        label: str = scalar_field(minimum=0)  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"minimum given for 'label', which is not a numeric scalar"):
        MessageCodec(BadOffset)

    @dataclass(frozen=True)
    class Offsets(TrieHHResponse):
        rows: np.ndarray = array_field("int64", ("K", "label-1"))
        label: str = "x"

    with pytest.raises(TypeError, match=r"dimension 'label-1' offsets 'label', which is not an int field"):
        MessageCodec(Offsets)
    with pytest.raises(ValueError, match="shape dimension"):
        ArraySpec("int64", ("K*2",))


# -- shard coverage ------------------------------------------------------------------------


def shard_infos(n: int, count: int) -> dict[int, ShardInfo]:
    from fedhh.data.population import shard_bounds

    infos = {}
    for index in range(count):
        start, stop = shard_bounds(n, index, count)
        infos[100 + index] = ShardInfo(index, count, start, stop - start, n)
    return infos


def test_shard_coverage_orders_nodes_by_shard() -> None:
    infos = shard_infos(1000, 4)
    shuffled = {node: infos[node] for node in (102, 100, 103, 101)}
    federation = admit(shuffled, 1000, 4, "shards")
    assert federation.nodes == [100, 101, 102, 103]
    assert federation.missing_users == 0 and not federation.refused


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda i: i.pop(101), "3 node\\(s\\) answered but they split the users into 4 shards"),
        (lambda i: i.update({101: ShardInfo(0, 4, 0, 250, 1000)}), "nodes \\[100, 101\\] all claim shard 0"),
        (lambda i: i.update({101: ShardInfo(1, 4, 250, 250, 999)}), "population of 999 users"),
        (lambda i: i.update({101: ShardInfo(1, 4, 200, 250, 1000)}), "expected \\[250, 500\\)"),
        (lambda i: i.update({101: ShardInfo(1, 5, 250, 250, 1000)}), "disagree on the number of shards"),
        (lambda i: i.update({101: ShardInfo(9, 4, 250, 250, 1000)}), "outside 0..3"),
    ],
)
def test_shard_coverage_refuses_gaps_and_overlaps(change: Any, message: str) -> None:
    infos = shard_infos(1000, 4)
    change(infos)
    with pytest.raises(ShardCoverageError, match=message):
        admit(infos, 1000, 4, "shards")
