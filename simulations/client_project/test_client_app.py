"""Tests of client_app.py: ``pytest`` in this folder.

The first tests need numpy and flwr only: the contract's encodings and the
shapes of the replies.  The last needs fedhh, as the ServerApp's side has
it: over this project's run config (pyproject.toml) and population, it
drives fedhh's server with this client's answers, encoded and decoded as
Flower carries them, and finds what fedhh's own client finds (in this
process: no Flower processes).
"""

from __future__ import annotations

import collections
import json
import tomllib
from pathlib import Path
from typing import Any

import client_app as client
import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

HERE = Path(__file__).resolve().parent
SIMULATED_NODES = 2  # the SuperNodes of Flower's local simulation
WORDS = ["the", "the", "to", "tea", "a", "of", "the", "ox", "moonlit", "of"]


def run_config() -> dict[str, Any]:
    """pyproject.toml's run config as the ClientApp receives it: dotted keys."""
    with open(HERE / "pyproject.toml", "rb") as file:
        tables = tomllib.load(file)["tool"]["flwr"]["app"]["config"]

    def flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        items: dict[str, Any] = {}
        for key, value in table.items():
            items.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
        return items

    return flat(tables)


def with_words(tmp_path: Path, words: list[str]) -> dict[str, Any]:
    """The project's run config with a population file of ``words``, one user each."""
    path = tmp_path / "words.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return {**run_config(), "population.path": str(path)}


def test_the_nodes_split_the_population_as_the_server_admits_it(tmp_path: Path) -> None:
    config = with_words(tmp_path, WORDS)
    nodes = [client.Users({"partition-id": i, "num-partitions": 3}, config) for i in range(3)]
    assert [(node.first, node.count, node.population) for node in nodes] == [(0, 3, 10), (3, 3, 10), (6, 4, 10)]
    own = tmp_path / "node-1.txt"
    own.write_text("\n".join(WORDS[3:6]) + "\n", encoding="utf-8")
    alone = client.Users({"partition-id": 1, "num-partitions": 3, "population": 10, "data-file": str(own)}, config)
    assert (alone.first, alone.count) == (3, 3) and np.array_equal(alone.rows, nodes[1].rows)


def test_a_user_whose_item_the_deny_list_names_holds_nothing(tmp_path: Path) -> None:
    denied = tmp_path / "known.txt"
    denied.write_text("the\nof\n", encoding="utf-8")
    config = with_words(tmp_path, WORDS)
    before = client.Users({"partition-id": 0, "num-partitions": 1}, config)
    users = client.Users({"partition-id": 0, "num-partitions": 1}, {**config, "run.deny_list": str(denied)})
    empty, dropped = ((u.rows == client.PAD).all(axis=1) for u in (users, before))  # dropped: "moonlit", too long
    assert empty.tolist() == [word in ("the", "of") or was for word, was in zip(WORDS, dropped.tolist())]
    assert dropped.sum() == 1
    folder = tmp_path / "day-1"
    folder.mkdir()
    (folder / "result.json").write_text(
        json.dumps({"heavy_hitters": [{"item": "to"}], "deny_list": {"denied": ["the"]}}), encoding="utf-8"
    )
    assert client.read_deny_list(str(folder)) == {"the", "to"}


def test_items_become_the_contract_s_symbol_rows() -> None:
    """docs/messages.md, "Items as symbols": "moon", unit 2 -> [id("mo"), id("on"), EOS]."""
    codec = client.Codec(
        {
            "protocol.alphabet": "lowercase",
            "protocol.unit_size": 2,
            "protocol.max_length": 4,
            "protocol.overlong": "drop",
            "protocol.unknown_chars": "drop",
        }
    )
    radix = 27
    mo, on, a = 13 * radix + 15, 15 * radix + 14, 1 * radix + 0
    assert codec.rows(["moon", "a", "moonlit", "Moon"]).tolist() == [
        [mo, on, client.END],
        [a, client.END, client.PAD],
        [client.PAD] * 3,
        [client.PAD] * 3,
    ]


def test_triehh_votes_are_the_sampled_users_prefixes(tmp_path: Path) -> None:
    users = client.Users({"partition-id": 0, "num-partitions": 1}, with_words(tmp_path, WORDS[:8]))
    sampled = np.array([0, 1, 2, 3, 5, 6, 7])  # user 4 ("a") is not sampled
    scalars, arrays = client.triehh_reply(
        users, {"round": 1}, {"sampled": sampled, "parents": np.zeros((0, 0), dtype=np.int64)}
    )
    t, o, h, e = 20, 15, 8, 5
    assert scalars == {"round": 1, "sampled_users": 7, "responding_users": 7}
    assert dict(zip(map(tuple, arrays["prefixes"].tolist()), arrays["votes"].tolist())) == {(t,): 5, (o,): 2}
    scalars, arrays = client.triehh_reply(
        users, {"round": 2}, {"sampled": sampled, "parents": np.array([[t]], dtype=np.int64)}
    )
    assert dict(zip(map(tuple, arrays["prefixes"].tolist()), arrays["votes"].tolist())) == {
        (t, h): 3,
        (t, o): 1,
        (t, e): 1,
    }


@pytest.mark.parametrize("oracle", ["olh", "flh"])
def test_pem_level_replies_count_each_asked_user_once(tmp_path: Path, oracle: str) -> None:
    users = client.Users({"partition-id": 0, "num-partitions": 1}, with_words(tmp_path, WORDS * 30))
    candidates = np.arange(64, dtype=np.uint64)
    asked = []
    for level in range(3):
        scalars = {
            "round": level + 1,
            "mode": "level",
            "level": level,
            "levels": 3,
            "encoding": "bits",
            "partition_seed": 7,
            "oracle": oracle,
            "epsilon": 2.0,
            "oracle_seed": 3,
        }
        arrays = {
            "lengths": np.array([5, 10, 15]),
            "level_bounds": np.array([0, 1 / 3, 2 / 3, 1]),
            "candidates": candidates,
        }
        reply, counts = client.pem_reply(users, scalars, arrays, np.random.default_rng(level))
        asked.append(reply["sampled_users"])
        assert reply["responding_users"] == reply["sampled_users"]
        assert counts["reporters"].tolist() == [reply["sampled_users"]]
        assert counts["report_rows"].shape == (0, 0) and counts["report_counts"].shape == (0,)
        if oracle == "flh":  # the flat table: 1000 functions x g = round(e^2) + 1 buckets, one report each
            assert counts["counts"].size == 1000 * 8 and counts["counts"].sum() == reply["sampled_users"]
        else:
            assert counts["counts"].size == candidates.size
    assert sum(asked) == users.count and min(asked) > 0


def test_a_request_of_another_major_version_is_refused() -> None:
    content = RecordDict(
        {"arrays": ArrayRecord({}), "scalars": ConfigRecord({"@type": "ShardQuery", "@version": "2.0"})}
    )
    with pytest.raises(ValueError, match=r"contract version 2\.0"):
        client.read_message(content, ("ShardQuery",))


def test_with_fedhh_s_server_the_client_finds_what_fedhh_s_own_client_finds() -> None:
    fedhh = pytest.importorskip("fedhh", reason="fedhh (the ServerApp's side) is not installed here")
    from fedhh.config import config_from_flat, with_fixed_shards
    from fedhh.driving import drive
    from fedhh.experiment import Experiment
    from strategies.codec import codec_for
    from strategies.shards import SHARD_INFO_CODEC, SHARD_QUERY_CODEC, ShardQuery, admit

    flat = run_config()
    flat["population.path"] = str(HERE / flat["population.path"])  # a file of this bundle, as the ServerApp reads it
    shards = SIMULATED_NODES  # run.shards = "auto": one shard per node, as the simulation's nodes hold them
    config = with_fixed_shards(config_from_flat(flat), shards)
    nodes = [client.Users({"partition-id": i, "num-partitions": shards}, flat) for i in range(shards)]
    experiment = Experiment(config)
    infos = {
        i: SHARD_INFO_CODEC.decode(client.shard_info(SHARD_QUERY_CODEC.encode(ShardQuery()), node))
        for i, node in enumerate(nodes)
    }
    admit(infos, experiment.n_users, shards, "shards")  # raises unless the nodes hold every user once
    draw = np.random.default_rng(0)
    reply_codec = codec_for(experiment.spec.response_type)

    def answer(request: Any) -> list[Any]:
        content = codec_for(type(request)).encode(request)
        return [reply_codec.decode(client.round_answer(content, node, lambda round_: draw)) for node in nodes]

    ours = drive(experiment.make_server(), answer)
    theirs = fedhh.run(config)
    found = sorted(d.item for d in ours.discoveries)
    if config.protocol.name == "triehh":  # no randomness on the device: the same votes, round for round
        assert found == sorted(hit["item"] for hit in theirs.heavy_hitters)
        assert [record.to_dict() for record in ours.trace] == theirs.document["rounds"]
    else:  # another draw of the reports: the clearly heavy words are found by both
        counts = collections.Counter(client.read_items(flat["population.path"]))
        top = [word for word, _ in counts.most_common(3)]
        assert set(top) <= set(found) and set(top) <= {hit["item"] for hit in theirs.heavy_hitters}
