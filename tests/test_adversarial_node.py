"""What a dishonest node can do against TrieHH's threshold (docs/deployment.md, "Trust").

The reply check (the spec's ``check_reply``) refuses every reply no honest
node could send: more votes than sampled users, a prefix that does not extend
the trie, a wrong count.  It cannot know which votes the node's users cast:

* a shard node answers for many users, so it can move all of its sampled
  users' votes onto one prefix and have an item no user holds published,
  with every reply accepted (a Flower simulation, end to end);
* with θ − 1 fake votes on a prefix, one honest user's vote decides whether
  the prefix is published: the outputs of two populations that differ in
  that one user are then told apart with certainty, so TrieHH's (ε, δ)
  bound no longer holds for that user (the real server and reply check);
* a device node, a shard of one user, is held to one vote per round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedhh.config import load_config
from fedhh.data.items import ItemCodec
from fedhh.experiment import Experiment, item_codec
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols import InvalidReply, get_protocol
from fedhh.protocols.spec import HeldUsers
from fedhh.protocols.triehh.messages import TrieHHRequest, TrieHHResponse
from fedhh.protocols.triehh.server import TrieHHServer
from strategies.client_app import make_client_app
from strategies.codec import codec_for
from strategies.shards import ShardInfo

TARGET = "zz"  # no user holds it, nor any item starting with "z"
SHARDS = 3
ADVERSARY = 0  # the shard of the dishonest node


def write_population(path: Path, victim: int | None = None, victim_item: str = TARGET) -> Path:
    """6,000 users in a fixed shuffled order: five frequent words and 45 rare ones, none starting
    with "z"; ``victim``, if given, holds ``victim_item`` instead of its word."""
    words = ["the"] * 1500 + ["and"] * 1000 + ["of"] * 800 + ["to"] * 600 + ["in"] * 400
    rare = [a + b + c for a in "xyb" for b in "bcdfg" for c in "hjk"]
    words += [rare[i % len(rare)] for i in range(1700)]
    words = [str(word) for word in np.random.default_rng(0).permutation(words)]  # every shard holds every word
    if victim is not None:
        words[victim] = victim_item
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def settings(population: Path) -> list[str]:
    return ['population.source="file"', f'population.path="{population}"', "protocol.max_length=3",
            "privacy.epsilon=6.0", "privacy.delta=1e-6", "run.seed=5"]


def target_row(codec: ItemCodec, item: str = TARGET) -> np.ndarray:
    """The item's symbol row, end symbol included (the prefix of round r is its first r symbols)."""
    return codec.encode([item]).rows[0]


# -- a shard node moves its users' votes, undetected -------------------------------------------


def dishonest_client_app(run_config: dict[str, Any], target: np.ndarray) -> ClientApp:
    """The real ClientApp, except that shard ADVERSARY casts all its sampled users' votes for the
    target's prefix whenever the prefix extends the trie (and answers honestly otherwise)."""
    honest = make_client_app(run_config)
    app = ClientApp()

    @app.query("shard")
    def describe_shard(message: Message, context: Context) -> Message:
        return honest(message, context)

    @app.query("round")
    def answer_round(message: Message, context: Context) -> Message:
        reply = honest(message, context)
        request = codec_for(TrieHHRequest).decode(message.content)
        prefix = target[: request.round]
        extends = request.round == 1 or any((parent == prefix[:-1]).all() for parent in request.parents)
        if context.node_config["partition-id"] != ADVERSARY or request.round > target.size or not extends:
            return reply
        sampled = int(request.sampled.size)
        forged = TrieHHResponse(round=request.round, sampled_users=sampled, responding_users=sampled,
                                prefixes=prefix[None, :].astype(np.int64), votes=np.array([sampled], dtype=np.int64))
        return Message(codec_for(TrieHHResponse).encode(forged), reply_to=message)

    return app


def test_a_shard_node_publishes_an_item_nobody_holds_undetected(tmp_path: Path) -> None:
    import ray
    from flwr.simulation import run_simulation

    from strategies.server_app import make_server_app

    config = load_config(None, [*settings(write_population(tmp_path / "words.txt")), f"run.shards={SHARDS}"])
    flat = {**config.to_flat(), "output-dir": str(tmp_path / "out"), "progress": False}
    started_ray = not ray.is_initialized()
    try:
        run_simulation(
            server_app=make_server_app(flat),
            client_app=dishonest_client_app(flat, target_row(item_codec(config))),
            num_supernodes=SHARDS,
            backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
        )
    finally:
        if started_ray and ray.is_initialized():
            ray.shutdown()
    document = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf-8"))
    found = {hit["item"] for hit in document["heavy_hitters"]}
    assert TARGET in found, f"the forged item must be published: {sorted(found)}"
    assert {"the", "and", "of", "to", "in"} <= found, "the honest nodes' votes still find the frequent words"
    (forged,) = [hit for hit in document["evaluation"]["heavy_hitters"] if hit["item"] == TARGET]
    assert forged["true_count"] == 0, "no user holds it"
    for line in document["rounds"]:  # every reply passed the check: nothing was rejected or lost
        assert line["rejected_shards"] == [] and line["lost_shards"] == [], line
        assert line["nodes_answered"] == SHARDS
    assert TARGET not in {d.item for d in _honest_discoveries(config)}


def _honest_discoveries(config: Any) -> list[Any]:
    from simulations.fast import run_fast

    return run_fast(Experiment(config), SHARDS, "inprocess").result.discoveries


# -- θ − 1 fake votes: one honest user decides --------------------------------------------------


def first_round(population: Path, forged_votes: int, target: str) -> set[str]:
    """Round 1 of TrieHH over SHARDS nodes, the ADVERSARY node moving ``forged_votes`` of its users'
    votes onto the target's first letter; the letters the trie holds after it (what is published)."""
    config = load_config(None, [*settings(population), f"run.shards={SHARDS}"])
    experiment = Experiment(config)
    spec = get_protocol("triehh")
    server = experiment.make_server()
    assert isinstance(server, TrieHHServer)
    request = server.next_request()
    codec = codec_for(TrieHHResponse)
    replies = []
    for index in range(SHARDS):
        shard = experiment.build_shard(index, SHARDS)
        node = ShardInfo(index, SHARDS, shard.first_user, shard.n_users, experiment.n_users)
        asked = spec.narrow(request, node)
        assert asked is not None
        reply = spec.respond(asked, shard, KeyedRandomness(experiment.seed))
        if index == ADVERSARY and forged_votes:
            reply = forge(reply, asked, target_row(experiment.codec, target)[:1], forged_votes)
        reply = codec.decode(codec.encode(reply))  # as the server receives it
        spec.check_reply(asked, reply, node, server)  # accepted: an honest node could have sent it
        replies.append(reply)
    server.absorb(TrieHHResponse.combine(replies))
    return set(server.frequent_prefixes())  # after round 1: the trie's letters


def forge(reply: TrieHHResponse, asked: TrieHHRequest, prefix: np.ndarray, votes: int) -> TrieHHResponse:
    """The node's reply with ``votes`` votes for ``prefix``, taken from its users' most voted prefix
    where every sampled user voted: the total stays the node's sampled users, as the check requires."""
    moved = reply.votes.copy()
    moved[np.argmax(moved)] -= max(votes - (int(asked.sampled.size) - reply.responding_users), 0)
    keep = moved > 0
    prefixes = np.concatenate([reply.prefixes[keep], prefix[None, :]])
    counts = np.concatenate([moved[keep], [votes]])
    return TrieHHResponse(round=reply.round, sampled_users=reply.sampled_users,
                          responding_users=int(counts.sum()), prefixes=prefixes, votes=counts)


def test_with_theta_minus_one_fake_votes_one_users_vote_decides(tmp_path: Path) -> None:
    probe = Experiment(load_config(None, settings(write_population(tmp_path / "probe.txt"))))
    server = probe.make_server()
    theta = server.result().params["theta"]
    sampled = server.next_request().sampled
    adversary_end = probe.build_shard(ADVERSARY, SHARDS).n_users
    victim = int(sampled[sampled >= adversary_end][0])  # a sampled user of an honest node
    holds = write_population(tmp_path / "holds.txt", victim, "zoo")  # the victim's item starts with "z"
    lacks = write_population(tmp_path / "lacks.txt")  # the same users, the victim holding its own word

    assert "z" not in first_round(holds, 0, "zoo"), "one vote alone stays below the threshold θ"
    assert "z" not in first_round(lacks, theta - 1, "zoo"), "θ - 1 fake votes alone stay below it"
    assert "z" in first_round(holds, theta - 1, "zoo"), "θ - 1 fake votes and the victim's vote reach it"


# -- a device node is held to one vote ------------------------------------------------------


@pytest.mark.parametrize(
    ("votes", "message"),
    [([2], r"responding_users: 2 > 1 sampled users"), ([1, 1], r"responding_users: 2 > 1 sampled users")],
)
def test_a_device_node_is_held_to_one_vote(votes: list[int], message: str) -> None:
    config = load_config(None, ["protocol.max_length=3", "privacy.epsilon=6.0", "privacy.delta=1e-6"])
    spec = get_protocol("triehh")
    server = spec.build_server(config["privacy"], 6000, item_codec(config), 5, protocol=config["protocol"])
    request = server.next_request()
    user = int(request.sampled[0])
    device: HeldUsers = ShardInfo(user, 6000, user, 1, 6000)
    asked = spec.narrow(request, device)
    assert asked is not None and asked.sampled.tolist() == [user]
    letters = np.array([[index + 1] for index in range(len(votes))], dtype=np.int64)
    reply = TrieHHResponse(round=1, sampled_users=1, responding_users=sum(votes), prefixes=letters,
                           votes=np.array(votes, dtype=np.int64))
    with pytest.raises(InvalidReply, match=message):
        spec.check_reply(asked, reply, device, server)
