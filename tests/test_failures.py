"""Failures survived: crashed and stalled SuperNodes, bad replies, killed Ray actors.

* a real deployment loses one SuperNode (SIGKILL) and stalls another
  (SIGSTOP past the round timeout): the run finishes, the stalled node is
  late for one round and answers again afterwards, and the trace names
  the lost shards;
* in a Flower simulation, nodes that send impossible or malformed replies,
  or whose ClientApp raises, are rejected (or counted failed) with a
  logged reason naming the field, and the round goes on with the others;
* in a Flower simulation whose nodes build their shards slowly (an
  overloaded machine), the run waits as long as shard answers keep
  arriving: it slows down rather than fails;
* in the fast driver, a killed Ray shard actor is restarted and the
  round's call retried: the result is the one of an undisturbed run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, Context, Message
from flwr.clientapp import ClientApp

from fedhh.config import FedhhConfig, load_config
from fedhh.data.population import shard_bounds
from fedhh.data.prefixes import rows_in
from fedhh.driving import drive
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols.triehh.messages import TrieHHRequest, TrieHHResponse
from fedhh.protocols.triehh.server import round_sample
from simulations.deployment import LocalDeployment
from simulations.fast import RayShards, run_fast
from simulations.ray_runtime import ray_runtime
from strategies.base import LOGGER
from strategies.client_app import make_client_app
from strategies.codec import ARRAYS_RECORD, codec_for

# Three rounds at most (items of two letters), two items per user.
SHORT = [
    'population.source="zipf"',
    "population.users=20000",
    "population.vocabulary=300",
    "population.item_length=2",
    "population.words_per_user=2",
    "protocol.max_length=2",
    "privacy.epsilon=6.0",
    "run.seed=3",
]


def sampled_in_shard(config: FedhhConfig, round_: int, shard: int, num_shards: int) -> int:
    """How many of round ``round_``'s sampled users shard ``shard`` holds (the sample depends on the seed only)."""
    experiment = Experiment(config)
    batch = experiment.make_server().result().params["batch_size"]
    sampled = round_sample(KeyedRandomness(experiment.seed), round_, experiment.n_users, batch)
    start, stop = shard_bounds(experiment.n_users, shard, num_shards)
    return int(np.count_nonzero((sampled >= start) & (sampled < stop)))


# -- a real deployment loses nodes ----------------------------------------------------------


def test_deployment_survives_a_crashed_and_a_stalled_supernode(deployment: LocalDeployment, tmp_path: Path) -> None:
    """After round 1, shard 1 stalls past the timeout and shard 2 crashes; shard 1 comes back in round 3."""
    timeout = 12.0
    config = load_config(None, [*SHORT, "run.shards=3", f"run.round_timeout={timeout}"])
    # The nodes are paused and killed when round 1's line reaches ``flwr run``'s log stream (0.5 s and
    # more after the fact); a node polling every 0.1 s may have answered round 2 by then.  Flower's own
    # 3 s idle poll keeps round 2 from them until the signals have arrived.
    deployment.idle_poll = 3.0
    nodes = [deployment.add_supernode(f"supernode-{i}", {"partition-id": i, "num-partitions": 3}) for i in range(3)]
    stalled, crashed = nodes[1], nodes[2]
    events: list[str] = []

    def on_line(line: str) -> None:
        finished = re.search(r"\[round (\d+)/", line)
        if finished and finished.group(1) == "1":
            stalled.pause()
            crashed.kill()
            events.append("shard 1 paused, shard 2 killed")
        elif finished and finished.group(1) == "2":
            stalled.resume()
            events.append("shard 1 resumed")

    output = tmp_path / "out"
    outcome = deployment.run({**config.to_flat(), "output-dir": str(output), "progress": False}, on_line=on_line)
    assert outcome.succeeded, f"{outcome.status}: {outcome.details}\n{outcome.output}{deployment.logs()}"
    assert events == ["shard 1 paused, shard 2 killed", "shard 1 resumed"], outcome.output
    document = json.loads((output / "result.json").read_text(encoding="utf-8"))

    first, second, third = document["rounds"]
    assert (first["nodes_answered"], first["late_shards"], first["lost_users"]) == (3, [], 0)
    assert (second["nodes_answered"], second["late_shards"]) == (1, [1, 2])
    assert second["sampled_users"] == sampled_in_shard(config, 2, 0, 3), "only shard 0's votes were absorbed"
    assert second["lost_users"] == 20000 - (shard_bounds(20000, 0, 3)[1])
    assert third["nodes_answered"] == 2, "the stalled node answers again once resumed"
    assert third["lost_shards"] == [2] and second["lost_shards"] == [1, 2]
    assert document["participation"]["lost_shards"] == [1, 2]
    assert document["participation"]["rounds_with_losses"] == 2
    assert document["stopped_because"] == "reached L = 3 rounds"
    planned = Experiment(config).privacy  # lost votes change neither the guarantee nor its report
    assert (document["privacy"]["epsilon"], document["privacy"]["delta"]) == (planned.epsilon, planned.delta)
    assert "late [1, 2]" in outcome.output, "the round log names the late shards"


# -- bad replies are rejected ------------------------------------------------------------------


def rogue_client_app(run_config: dict[str, Any]) -> ClientApp:
    """The real ClientApp, except that shards 1-3 misbehave in rounds 2 and 3."""
    honest = make_client_app(run_config)
    rogue = ClientApp()

    @rogue.query("shard")
    def describe_shard(message: Message, context: Context) -> Message:
        return honest(message, context)

    @rogue.query("round")
    def answer_round(message: Message, context: Context) -> Message:
        shard = context.node_config["partition-id"]
        request = codec_for(TrieHHRequest).decode(message.content)
        if (request.round, shard) == (3, 2):
            raise RuntimeError("shard 2 crashed while answering")
        reply = honest(message, context)
        response = codec_for(TrieHHResponse).decode(reply.content)
        content = codec_for(TrieHHResponse).encode(response)
        if (request.round, shard) == (2, 1):  # more votes than sampled users
            extra = response.sampled_users - response.responding_users + 1
            votes = response.votes.copy()
            votes[0] += extra
            content = codec_for(TrieHHResponse).encode(
                TrieHHResponse(**{**vars(response), "votes": votes, "responding_users": response.responding_users + extra})
            )
        elif (request.round, shard) == (2, 2):  # a vote for a prefix that does not extend the trie
            foreign = next(
                np.array([[a, b]]) for a in range(1, 27) for b in range(1, 27)
                if not rows_in(np.array([[a]]), request.parents)[0]
            )
            prefixes = np.concatenate([foreign, response.prefixes])
            votes = np.concatenate([[1], response.votes])
            content = codec_for(TrieHHResponse).encode(
                TrieHHResponse(**{**vars(response), "prefixes": prefixes, "votes": votes, "responding_users": response.responding_users + 1})
            )
        elif (request.round, shard) == (2, 3):  # wrong record names
            content["array"] = content.pop(ARRAYS_RECORD)
        elif (request.round, shard) == (3, 1):  # a negative count, bypassing the encoder's checks
            votes = response.votes.copy()
            votes[0] = -1
            content[ARRAYS_RECORD]["votes"] = Array(votes)
        elif (request.round, shard) == (3, 3):  # oversized: far more rows than sampled users
            rows = np.tile(response.prefixes, (200, 1))
            content[ARRAYS_RECORD]["prefixes"] = Array(rows)
            content[ARRAYS_RECORD]["votes"] = Array(np.ones(rows.shape[0], dtype=np.int64))
        return Message(content, reply_to=message)

    return rogue


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_bad_replies_are_rejected_and_the_round_goes_on(tmp_path: Path) -> None:
    import ray
    from flwr.simulation import run_simulation

    from strategies.server_app import make_server_app

    config = load_config(None, [*SHORT, "run.shards=4"])
    flat = {**config.to_flat(), "output-dir": str(tmp_path / "out"), "progress": False}
    captured = Captured()
    LOGGER.addHandler(captured)
    started_ray = not ray.is_initialized()
    try:
        run_simulation(
            server_app=make_server_app(flat),
            client_app=rogue_client_app(flat),
            num_supernodes=4,
            backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
        )
    finally:
        LOGGER.removeHandler(captured)
        if started_ray and ray.is_initialized():
            ray.shutdown()
    document = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf-8"))
    first, second, third = document["rounds"]
    assert (first["nodes_answered"], first["rejected_shards"]) == (4, [])
    assert (second["nodes_answered"], second["rejected_shards"], second["failed_shards"]) == (1, [1, 2, 3], [])
    assert second["sampled_users"] == sampled_in_shard(config, 2, 0, 4), "only shard 0's votes were absorbed"
    assert (third["nodes_answered"], third["rejected_shards"], third["failed_shards"]) == (1, [1, 3], [2])
    assert document["participation"]["lost_shards"] == [1, 2, 3]
    reasons = "\n".join(captured.messages)
    for expected in (
        r"round 2: rejected the reply of shard 1 .*TrieHHResponse.responding_users: \d+ > \d+ sampled users",
        r"round 2: rejected the reply of shard 2 .*1 voted prefix\(es\) do not extend the trie's depth-1 prefixes",
        r"round 2: rejected the reply of shard 3 .*expected records \['arrays', 'scalars'\], got \['array', 'scalars'\]",
        r"round 3: rejected the reply of shard 1 .*TrieHHResponse.votes: values must be >= 0, found -1",
        r"round 3: shard 2 \(node \d+\) failed: .*shard 2 crashed while answering",
        r"round 3: rejected the reply of shard 3 .*oversized: \d+ bytes of arrays, an honest reply has at most \d+",
    ):
        assert re.search(expected, reasons), f"no warning matching {expected!r} in:\n{reasons}"


# -- the fast driver's Ray actors ------------------------------------------------------------------


SLOW_SHARD_S = 4.0  # each node's shard query, one actor for all: replies at t0 + 4, + 8, + 12 s
ANSWER_TIMEOUT_S = 10.0  # run.round_timeout: longer than any gap between two replies, shorter than them all


def slow_start_client_app(run_config: dict[str, Any]) -> ClientApp:
    """The real ClientApp, except that building a shard takes SLOW_SHARD_S longer (a loaded machine)."""
    honest = make_client_app(run_config)
    slow = ClientApp()

    @slow.query("shard")
    def describe_shard(message: Message, context: Context) -> Message:
        time.sleep(SLOW_SHARD_S)
        return honest(message, context)

    @slow.query("round")
    def answer_round(message: Message, context: Context) -> Message:
        return honest(message, context)

    return slow


def test_a_slow_start_up_slows_the_run_down_rather_than_failing_it(tmp_path: Path) -> None:
    """Three nodes on one actor answer the shard query 4 s apart, 12 s in all, with
    run.round_timeout = 10 s: a fixed deadline would fail the run; the wait goes on
    while replies keep coming, and the result is the undisturbed run's."""
    from flwr.simulation import run_simulation

    from strategies.server_app import make_server_app

    config = load_config(None, [*SHORT, "run.shards=3", f"run.round_timeout={ANSWER_TIMEOUT_S}"])
    flat = {**config.to_flat(), "output-dir": str(tmp_path / "out"), "progress": False}
    with ray_runtime(num_cpus=1):  # started before the ServerApp, whose clock then starts with the actor
        run_simulation(
            server_app=make_server_app(flat),
            client_app=slow_start_client_app(flat),
            num_supernodes=3,
            backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
        )
    document = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf-8"))
    assert document["timing_s"]["setup_s"] > ANSWER_TIMEOUT_S, "the shard answers took longer than the timeout"
    assert document["participation"]["lost_shards"] == []
    fast = run_fast(Experiment(config), 3, "inprocess")
    assert sorted(hit["item"] for hit in document["heavy_hitters"]) == sorted(d.item for d in fast.result.discoveries)


def wait_until_gone(pid: int, timeout_s: float = 60.0) -> None:
    """Block until process ``pid`` has exited (gone, or a zombie awaiting its parent)."""
    deadline = time.monotonic() + timeout_s
    status = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        try:
            state = status.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs {timeout_s:.0f} s after ray.kill")


def test_killed_ray_shard_actor_is_restarted_and_the_result_unchanged() -> None:
    import ray

    config = load_config(None, SHORT)
    experiment = Experiment(config)
    undisturbed = run_fast(experiment, 1, backend="inprocess").result
    with ray_runtime(**RayShards.INIT_ARGS):
        holders = RayShards(config, 3)
        try:
            victim = holders.actors[1]
            pid = lambda actor: ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))  # noqa: E731
            before = pid(victim)

            def kill_after_round_1(server: Any) -> None:
                # ray.kill only asks the cluster to stop the actor; the remaining rounds
                # could finish on the old process before it acts.  Waiting for that
                # process to be gone makes round 2 meet the dead actor every time.
                if len(server.trace) == 1:
                    ray.kill(victim, no_restart=False)
                    wait_until_gone(before)

            result = drive(experiment.make_server(), holders.answer, kill_after_round_1)
            assert pid(victim) != before, "the killed actor must have been restarted in a new process"
        finally:
            holders.close()
    assert [d.item for d in result.discoveries] == [d.item for d in undisturbed.discoveries]
    assert [r.to_dict() for r in result.trace] == [r.to_dict() for r in undisturbed.trace]
    assert len(result.trace) == 3
