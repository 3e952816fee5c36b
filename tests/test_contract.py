"""The versioned message contract: what a reply of another version gets, and the document of it.

* the codec stamps every message with the contract version; a reply of a
  newer minor version with a field this side does not know is accepted
  (the field ignored), the same extra field at this minor is refused, and
  another major version (or none) is refused with both versions named;
* in a Flower simulation, a node replying in an unknown major version is
  dropped from that round with the reason in the trace, and receives the
  reason with its next request; a node replying in a newer minor with an
  extra field takes part as if it spoke this version;
* ``docs/messages.md`` is what the code generates today.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from fedhh.config import load_config
from fedhh.experiment import Experiment
from fedhh.protocols.triehh.messages import TrieHHResponse
from simulations.fast import run_fast
from strategies.client_app import make_client_app
from strategies.codec import (
    ARRAYS_RECORD,
    CONTRACT_VERSION,
    SCALARS_RECORD,
    VERSION_KEY,
    MessageDecodeError,
    VersionMismatch,
    attach_notice,
    codec_for,
    notice_of,
)
from strategies.contract import render

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "messages.md"
CODEC = codec_for(TrieHHResponse)
RESPONSE = TrieHHResponse(
    round=2, sampled_users=5, responding_users=3,
    prefixes=np.array([[1, 2], [3, 4]], dtype=np.int64), votes=np.array([2, 1], dtype=np.int64),
)
THIS_MINOR = f"{CONTRACT_VERSION[0]}.{CONTRACT_VERSION[1]}"
NEWER_MINOR = f"{CONTRACT_VERSION[0]}.{CONTRACT_VERSION[1] + 1}"
OTHER_MAJOR = f"{CONTRACT_VERSION[0] + 1}.0"


def restamped(content: RecordDict, version: str | None, *, extra_field: bool = False) -> RecordDict:
    """A copy of an encoded message with another version (``None``: none) and, optionally, an added
    scalar and array field that no version of this side declares."""
    scalars = {key: value for key, value in content[SCALARS_RECORD].items() if key != VERSION_KEY}
    if version is not None:
        scalars[VERSION_KEY] = version
    arrays = dict(content[ARRAYS_RECORD].items())
    if extra_field:
        scalars["confidence"] = 0.5
        arrays["padding"] = Array(np.zeros(3, dtype=np.int64))
    return RecordDict({ARRAYS_RECORD: ArrayRecord(arrays), SCALARS_RECORD: ConfigRecord(scalars)})


def same(a: TrieHHResponse, b: TrieHHResponse) -> bool:
    return (a.round, a.sampled_users, a.responding_users) == (b.round, b.sampled_users, b.responding_users) and (
        np.array_equal(a.prefixes, b.prefixes) and np.array_equal(a.votes, b.votes)
    )


def test_every_message_carries_the_contract_version() -> None:
    assert CODEC.encode(RESPONSE)[SCALARS_RECORD][VERSION_KEY] == THIS_MINOR
    assert same(CODEC.decode(CODEC.encode(RESPONSE)), RESPONSE)


def test_a_newer_minor_version_with_an_extra_field_is_accepted() -> None:
    content = restamped(CODEC.encode(RESPONSE), NEWER_MINOR, extra_field=True)
    assert same(CODEC.decode(content), RESPONSE)


def test_an_extra_field_at_this_minor_version_is_refused() -> None:
    with pytest.raises(MessageDecodeError, match=r"unexpected \['confidence'\]"):
        CODEC.decode(restamped(CODEC.encode(RESPONSE), THIS_MINOR, extra_field=True))


def test_a_newer_minor_version_must_still_send_every_declared_field() -> None:
    content = restamped(CODEC.encode(RESPONSE), NEWER_MINOR)
    del content[ARRAYS_RECORD]["votes"]
    with pytest.raises(MessageDecodeError, match=r"array fields missing \['votes'\]"):
        CODEC.decode(content)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (OTHER_MAJOR, rf"speaks contract version {OTHER_MAJOR}, this side {THIS_MINOR}"),
        ("0.9", rf"speaks contract version 0.9, this side {THIS_MINOR}"),
        (None, rf"carries no contract version \(this side speaks {THIS_MINOR}\)"),
        ("one", r"carries contract version 'one'; expected \"MAJOR.MINOR\""),
    ],
)
def test_another_major_version_is_refused_naming_both(version: str | None, message: str) -> None:
    with pytest.raises(VersionMismatch, match=message):
        CODEC.decode(restamped(CODEC.encode(RESPONSE), version))


def test_a_notice_travels_beside_the_message() -> None:
    noticed = attach_notice(CODEC.encode(RESPONSE), "round 1: refused")
    assert notice_of(noticed) == "round 1: refused"
    assert notice_of(CODEC.encode(RESPONSE)) is None
    assert same(CODEC.decode(noticed), RESPONSE), "a notice does not disturb decoding"


def test_the_document_is_what_the_code_generates() -> None:
    assert DOCUMENT.read_text(encoding="utf-8") == render(), (
        "docs/messages.md is out of date: run `python -m strategies.contract > docs/messages.md`"
    )


def test_the_document_lists_every_field_of_every_builtin_message() -> None:
    from fedhh.protocols import PROTOCOLS
    from fedhh.protocols.messages import message_layout
    from fedhh.protocols.registry import protocol_module

    text = DOCUMENT.read_text(encoding="utf-8")
    for name, spec in PROTOCOLS.items():
        if protocol_module(name):
            continue
        for message_type in (spec.request_type, spec.response_type):
            assert f"`{message_type.__name__}`" in text
            layout = message_layout(message_type)
            for field in (*layout.scalars, *layout.arrays):
                assert f"| `{field}` |" in text, f"{message_type.__name__}.{field} is not documented"


def test_the_document_states_each_message_s_type_tag_and_defines_what_it_names() -> None:
    """A client written from the document alone needs every ``"@type"`` value, ``shard_bounds``
    (with a worked example the code agrees with), how n relates to a file population, and how a
    ClientApp is paired with the ServerApp."""
    from fedhh.data.population import shard_bounds
    from fedhh.protocols import PROTOCOLS
    from fedhh.protocols.messages import message_layout
    from fedhh.protocols.registry import protocol_module
    from strategies.shards import ShardInfo, ShardQuery

    text = DOCUMENT.read_text(encoding="utf-8")
    types = [ShardQuery, ShardInfo, *(t for name, spec in PROTOCOLS.items() if not protocol_module(name)
                                      for t in (spec.request_type, spec.response_type))]
    for message_type in types:
        assert f'Its `"@type"` is `"{message_layout(message_type).tag}"`.' in text, message_type.__name__
    assert "the users of shard `i` of `k`, are `[floor(i n / k), floor((i + 1) n / k))`" in text
    assert [shard_bounds(10, i, 3) for i in range(3)] == [(0, 3), (3, 6), (6, 10)]
    assert "shard 0 of 3 over 10 users holds users 0..2, shard 1 users 3..5, shard 2 users 6..9" in text
    assert "whatever `population.users` says (it is not read)" in text
    assert 'serverapp = "simulations.flower_app:app"' in text and "fedhh new-client DIR" in text
    assert "mode collect: the distinct report rows, first column the level; other modes: empty, shape (0, 0)" in text


# -- in a Flower simulation ----------------------------------------------------------------------

SHORT = [
    'population.source="zipf"',
    "population.users=20000",
    "population.vocabulary=300",
    "population.item_length=2",
    "protocol.max_length=2",
    "privacy.epsilon=6.0",
    "run.seed=5",
    "run.shards=3",
]


def speaking(notices: Path):
    """A Flower mod: shard 0 replies in another major version in round 1, shard 1 always in a newer
    minor with an extra field; every notice a node receives is appended to ``notices``."""

    def mod(message: Message, context: Context, call_next: Any) -> Message:
        shard = context.node_config["partition-id"]
        if message.metadata.message_type == "query.round" and (notice := notice_of(message.content)) is not None:
            with open(notices, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"shard": shard, "notice": notice}) + "\n")
        reply = call_next(message, context)
        if message.metadata.message_type != "query.round" or reply.has_error():
            return reply
        round_ = int(message.content[SCALARS_RECORD]["round"])
        if (shard, round_) == (0, 1):
            return Message(restamped(reply.content, OTHER_MAJOR), reply_to=message)
        if shard == 1:
            return Message(restamped(reply.content, NEWER_MINOR, extra_field=True), reply_to=message)
        return reply

    return mod


def test_flower_run_refuses_another_major_version_and_tells_the_node(tmp_path: Path) -> None:
    import ray
    from flwr.simulation import run_simulation

    from strategies.server_app import make_server_app

    config = load_config(None, SHORT)
    flat = {**config.to_flat(), "output-dir": str(tmp_path / "out"), "progress": False}
    notices = tmp_path / "notices.jsonl"
    started_ray = not ray.is_initialized()
    try:
        run_simulation(
            server_app=make_server_app(flat),
            client_app=make_client_app(flat, mods=[speaking(notices)]),
            num_supernodes=3,
            backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
        )
    finally:
        if started_ray and ray.is_initialized():
            ray.shutdown()
    document = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf-8"))
    first, second, *_ = document["rounds"]
    assert (first["nodes_answered"], first["rejected_shards"]) == (2, [0])
    assert len(first["refusals"]) == 1 and first["refusals"][0].startswith("shard 0: ")
    assert f"speaks contract version {OTHER_MAJOR}" in first["refusals"][0]
    assert (second["nodes_answered"], second["rejected_shards"], second["refusals"]) == (3, [], [])
    assert all(line["rejected_shards"] in ([], [0]) for line in document["rounds"]), "shard 1 is never refused"
    received = [json.loads(line) for line in notices.read_text(encoding="utf-8").splitlines()]
    assert [entry["shard"] for entry in received] == [0], "only shard 0 is told, once, with its next request"
    assert received[0]["notice"].startswith("round 1: the server refused your reply")
    assert f"speaks contract version {OTHER_MAJOR}" in received[0]["notice"]

    # Shard 1's newer-minor replies counted as if it spoke this version: from round 2 on, with every
    # shard answering, the rounds are the fast driver's (round 1 lacks shard 0 there).
    fast = run_fast(Experiment(config), 3, backend="inprocess").result
    for line, record in zip(document["rounds"][1:], fast.trace[1:]):
        assert line["round"] == record.round and line["sampled_users"] == record.values["sampled_users"]
