"""A third party's ClientApp for fedhh's TrieHH, written from docs/messages.md alone.

It imports Flower, numpy and the standard library only: nothing of fedhh.
A node answers for the users listed in its own words file (one user per
line, the line is the user's word), which its node config names:

    flower-supernode ... --node-config \
        "partition-id=0 num-partitions=3 population=3000 words-file='/data/node-0.txt'"

``population`` is the number of users of the whole federation; the node
holds users ``partition-id * population // num-partitions`` up to (not
including) ``(partition-id + 1) * population // num-partitions``, in the
order of its file, which must hold exactly that many lines.

What it implements of the contract (version 1.0): the shard query, and
TrieHH rounds for the ``lowercase`` alphabet with one character per symbol
(``protocol.alphabet = "lowercase"``, ``protocol.unit_size = 1``), one word
per user.  A word longer than ``protocol.max_length`` or with a character
outside a-z never votes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

CONTRACT_MAJOR, CONTRACT_MINOR = 1, 0
ALPHABET = "abcdefghijklmnopqrstuvwxyz"  # symbol ids 1..26; 0 ends the word; -1 pads after it
END, PAD = 0, -1

LOGGER = logging.getLogger("third_party_client")
app = ClientApp()


# -- the envelope --------------------------------------------------------------------------


def read_message(content: RecordDict, expected_type: str) -> tuple[dict, dict]:
    """The scalars and arrays of a fedhh message, after checking its type and contract version."""
    scalars = dict(content["scalars"].items())
    message_type, version = scalars.pop("@type", None), scalars.pop("@version", None)
    if message_type != expected_type:
        raise ValueError(f"expected a {expected_type}, got {message_type!r}")
    major = str(version).partition(".")[0]
    if major != str(CONTRACT_MAJOR):
        raise ValueError(f"the server speaks contract version {version}; this client speaks {CONTRACT_MAJOR}.{CONTRACT_MINOR}")
    if "notice" in content:
        LOGGER.warning("the server refused a reply of this node: %s", content["notice"]["reason"])
    arrays = {name: array.numpy() for name, array in content["arrays"].items()}
    return scalars, arrays


def reply(message: Message, message_type: str, scalars: dict, arrays: dict[str, np.ndarray]) -> Message:
    header = {"@type": message_type, "@version": f"{CONTRACT_MAJOR}.{CONTRACT_MINOR}"}
    content = RecordDict(
        {
            "arrays": ArrayRecord({name: Array(np.ascontiguousarray(value)) for name, value in arrays.items()}),
            "scalars": ConfigRecord({**header, **scalars}),
        }
    )
    return Message(content, reply_to=message)


# -- this node's users ------------------------------------------------------------------------


class Users:
    """The node's users: their global ids and their words as symbol rows."""

    def __init__(self, node_config: dict, max_length: int) -> None:
        index, parts, population = (int(node_config[key]) for key in ("partition-id", "num-partitions", "population"))
        self.index, self.parts, self.population = index, parts, population
        self.first = index * population // parts
        self.count = (index + 1) * population // parts - self.first
        words = Path(str(node_config["words-file"])).read_text(encoding="utf-8").split("\n")
        if words and words[-1] == "":
            words.pop()
        words = [word.removesuffix("\r") for word in words]
        if len(words) != self.count:
            raise ValueError(f"the words file holds {len(words)} users, this node must hold {self.count}")
        self.rows = np.full((self.count, max_length + 1), PAD, dtype=np.int64)
        for user, word in enumerate(words):
            if len(word) <= max_length and all(char in ALPHABET for char in word):
                self.rows[user, : len(word)] = [ALPHABET.index(char) + 1 for char in word]
                self.rows[user, len(word)] = END

    def votes(self, sampled: np.ndarray, parents: np.ndarray, round_: int) -> tuple[np.ndarray, np.ndarray, int]:
        """TrieHH's votes of this node's sampled users: (distinct prefixes, votes, sampled users here)."""
        mine = sampled[(sampled >= self.first) & (sampled < self.first + self.count)] - self.first
        prefixes = self.rows[mine, :round_]
        voting = prefixes[:, -1] != PAD  # the word did not end before this symbol
        if round_ > 1:
            voting &= (prefixes[:, None, :-1] == parents[None, :, :]).all(axis=2).any(axis=1)
        if not voting.any():
            return np.zeros((0, round_), dtype=np.int64), np.zeros(0, dtype=np.int64), int(mine.size)
        rows, counts = np.unique(prefixes[voting], axis=0, return_counts=True)
        return rows.astype(np.int64), counts.astype(np.int64), int(mine.size)


def users_of(context: Context) -> Users:
    """The node's users, read once per process."""
    key = (tuple(sorted(context.node_config.items())), int(context.run_config["protocol.max_length"]))
    if key not in _USERS:
        _USERS[key] = Users(dict(context.node_config), key[1])
    return _USERS[key]


_USERS: dict[tuple, Users] = {}


# -- the two messages -------------------------------------------------------------------------


@app.query("shard")
def describe_shard(message: Message, context: Context) -> Message:
    read_message(message.content, "ShardQuery")
    users = users_of(context)
    return reply(
        message,
        "ShardInfo",
        {
            "shard_index": users.index,
            "num_shards": users.parts,
            "first_user": users.first,
            "users": users.count,
            "population": users.population,
        },
        {},
    )


@app.query("round")
def answer_round(message: Message, context: Context) -> Message:
    scalars, arrays = read_message(message.content, "TrieHHRequest")
    round_ = int(scalars["round"])
    prefixes, votes, sampled = users_of(context).votes(arrays["sampled"], arrays["parents"], round_)
    return reply(
        message,
        "TrieHHResponse",
        {"round": round_, "sampled_users": sampled, "responding_users": int(votes.sum())},
        {"prefixes": prefixes, "votes": votes},
    )
