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

What it implements of the contract (version 1.0): the shard query; TrieHH
rounds for the ``lowercase`` alphabet with one character per symbol
(``protocol.alphabet = "lowercase"``, ``protocol.unit_size = 1``); and PEM
level rounds with the OLH or the FLH oracle and the ``bits`` encoding
(``protocol.oracle = "olh"`` or ``"flh"``, ``protocol.encoding = "bits"``,
``protocol.collection = "interactive"``) for values of at most 64 bits
(``protocol.max_length`` at most 12).  One word per user; a word longer than
``protocol.max_length`` or with a character outside a-z never votes (TrieHH)
and reports the empty value (PEM).

PEM reports draw from the operating system's randomness, as a device's
must; a node config ``report-seed`` (an integer) makes them reproducible,
for tests only.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
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


# -- PEM: which users report at a level, their values, and OLH ------------------------------

MASK64 = (1 << 64) - 1
CHAR_BITS = len(ALPHABET).bit_length()  # 5: a character's 1-based index, MSB first; 0 pads


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 words (docs/messages.md, "Public randomness")."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def user_levels(partition_seed: int, level_bounds: np.ndarray, user_ids: np.ndarray) -> np.ndarray:
    """The level each global user id reports at: a public uniform draw keyed by the partition seed."""
    with np.errstate(over="ignore"):
        words = splitmix64(splitmix64(user_ids.astype(np.uint64) ^ np.uint64(partition_seed)))
    uniform = (words >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    levels = np.searchsorted(level_bounds, uniform, side="right") - 1
    return np.clip(levels, 0, level_bounds.size - 2)


def value_bits(rows: np.ndarray, max_length: int) -> np.ndarray:
    """Each user's word as ``max_length * 5`` bits (the empty value, all zeros, for no word)."""
    codes = np.where(rows[:, :max_length] > 0, rows[:, :max_length], 0)
    shifts = np.arange(CHAR_BITS - 1, -1, -1)
    return ((codes[:, :, None] >> shifts) & 1).reshape(rows.shape[0], -1)


def prefix_values(bits: np.ndarray, length: int) -> np.ndarray:
    """The integer value of each user's first ``length`` bits: the oracle key of its prefix."""
    if length > 64:
        raise ValueError(f"prefixes of {length} bits need fedhh's 64-bit prefix hash, which this client lacks")
    weights = np.left_shift(np.uint64(1), np.arange(length - 1, -1, -1, dtype=np.uint64))
    return (bits[:, :length].astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)


def olh_hash(seeds: np.ndarray, values: np.ndarray, g: int) -> np.ndarray:
    """A hash family [0, 2^64) -> [0, g): ours, not fedhh's (each report's supports are counted here)."""
    with np.errstate(over="ignore"):
        mixed = splitmix64(splitmix64(values) ^ seeds[:, None])
    return ((mixed >> np.uint64(32)) * np.uint64(g)) >> np.uint64(32)


def olh_supports(values: np.ndarray, candidates: np.ndarray, epsilon: float, draw: np.random.Generator) -> np.ndarray:
    """OLH: each user hashes its value into g = round(e^ε) + 1 buckets with a fresh function and keeps the
    bucket with probability e^ε / (e^ε + g - 1), else reports another one uniformly; the reply is how
    many reports support each candidate (hash to the reported bucket)."""
    g = max(2, int(round(math.exp(epsilon))) + 1)
    keep = math.exp(epsilon) / (math.exp(epsilon) + g - 1)
    seeds = draw.integers(0, 1 << 64, size=values.size, dtype=np.uint64)
    true_bucket = olh_hash(seeds, values[:, None], g)[:, 0]
    other = (true_bucket + draw.integers(1, g, size=values.size).astype(np.uint64)) % np.uint64(g)
    reported = np.where(draw.random(values.size) < keep, true_bucket, other)
    counts = np.zeros(candidates.size, dtype=np.int64)
    for start in range(0, values.size, 256):  # 256 users x candidates hashes at a time
        block = slice(start, start + 256)
        counts += (olh_hash(seeds[block], candidates[None, :], g) == reported[block, None]).sum(axis=0)
    return counts


FLH_FUNCTIONS = 1000  # FLH's default number of public hash functions, which a PEM level uses
FLAT_CELLS_LIMIT = 1 << 20  # statistics of more cells travel as support counts instead


def purpose_key(purpose: str) -> np.uint64:
    """The 8-byte BLAKE2b digest of a purpose name, little-endian (docs/messages.md, "Definitions")."""
    return np.uint64(int.from_bytes(hashlib.blake2b(purpose.encode("utf-8"), digest_size=8).digest(), "little"))


def flh_functions(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The (odd multiplier, offset) of FLH's public functions 0..count-1 under the request's oracle seed."""
    base = splitmix64(np.uint64(seed % (1 << 64)) ^ purpose_key("fedhh.oracles.flh.functions"))
    with np.errstate(over="ignore"):
        seeds = splitmix64(base + np.arange(count, dtype=np.uint64))
    return splitmix64(seeds) | np.uint64(1), splitmix64(seeds ^ np.uint64(0xD1B54A32D192ED03))


def hash64(multipliers: np.ndarray, offsets: np.ndarray, values: np.ndarray, g: int) -> np.ndarray:
    """fedhh's 64-bit hash family: ``((a * splitmix64(v) + b) >> 32) * g >> 32``."""
    with np.errstate(over="ignore"):
        z = multipliers * splitmix64(values) + offsets
    return ((z >> np.uint64(32)) * np.uint64(g)) >> np.uint64(32)


def flh_counts(values: np.ndarray, candidates: np.ndarray, epsilon: float, seed: int,
               draw: np.random.Generator) -> np.ndarray:
    """FLH: each user picks one of the public functions uniformly, hashes its value into g buckets and
    keeps the bucket with probability e^ε / (e^ε + g - 1), else reports another one uniformly.  The
    reply is the table ``cells[j g + y]`` of how many reports said (j, y) when it has at most 2^20
    cells, else each candidate's support count."""
    g = max(2, int(round(math.exp(epsilon))) + 1)
    keep = math.exp(epsilon) / (math.exp(epsilon) + g - 1)
    multipliers, offsets = flh_functions(seed, FLH_FUNCTIONS)
    functions = draw.integers(0, FLH_FUNCTIONS, size=values.size)
    true_bucket = hash64(multipliers[functions], offsets[functions], values, g)
    other = (true_bucket + draw.integers(1, g, size=values.size).astype(np.uint64)) % np.uint64(g)
    reported = np.where(draw.random(values.size) < keep, true_bucket, other).astype(np.int64)
    if FLH_FUNCTIONS * g <= FLAT_CELLS_LIMIT:
        return np.bincount(functions * g + reported, minlength=FLH_FUNCTIONS * g).astype(np.int64)
    hashed = hash64(multipliers[functions][:, None], offsets[functions][:, None], candidates[None, :], g)
    return (hashed == reported[:, None].astype(np.uint64)).sum(axis=0).astype(np.int64)


def pem_reply(users: Users, scalars: dict, arrays: dict[str, np.ndarray], max_length: int,
              draw: np.random.Generator) -> tuple[dict, dict[str, np.ndarray]]:
    """This node's reply to a PEM level round: its level members' OLH support counts of the candidates,
    or their FLH table."""
    if scalars["mode"] != "level" or scalars["oracle"] not in ("olh", "flh") or scalars["encoding"] != "bits":
        raise ValueError(
            f"this client answers PEM level rounds with oracle olh or flh and encoding bits, got mode "
            f"{scalars['mode']!r}, oracle {scalars['oracle']!r}, encoding {scalars['encoding']!r}"
        )
    level = int(scalars["level"])
    ids = np.arange(users.first, users.first + users.count)
    members = np.flatnonzero(user_levels(int(scalars["partition_seed"]), arrays["level_bounds"], ids) == level)
    values = prefix_values(value_bits(users.rows[members], max_length), int(arrays["lengths"][level]))
    if scalars["oracle"] == "olh":
        counts = olh_supports(values, arrays["candidates"], float(scalars["epsilon"]), draw)
    else:
        counts = flh_counts(values, arrays["candidates"], float(scalars["epsilon"]), int(scalars["oracle_seed"]), draw)
    asked = int(members.size)
    return (
        {"round": int(scalars["round"]), "sampled_users": asked, "responding_users": asked},
        {
            "counts": counts,
            "reporters": np.array([asked], dtype=np.int64),
            "report_rows": np.zeros((0, 0), dtype=np.uint64),
            "report_counts": np.zeros(0, dtype=np.int64),
        },
    )


def report_randomness(context: Context, round_: int) -> np.random.Generator:
    """The OS's randomness, or (tests only) a generator keyed by the node config's report-seed and the round."""
    seed = context.node_config.get("report-seed")
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    return np.random.default_rng([int(seed), int(context.node_config["partition-id"]), round_])


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
    kind = message.content["scalars"].get("@type")
    if kind == "PrefixRequest":
        scalars, arrays = read_message(message.content, "PrefixRequest")
        max_length = int(context.run_config["protocol.max_length"])
        draw = report_randomness(context, int(scalars["round"]))
        answer = pem_reply(users_of(context), scalars, arrays, max_length, draw)
        return reply(message, "PrefixResponse", *answer)
    scalars, arrays = read_message(message.content, "TrieHHRequest")
    round_ = int(scalars["round"])
    prefixes, votes, sampled = users_of(context).votes(arrays["sampled"], arrays["parents"], round_)
    return reply(
        message,
        "TrieHHResponse",
        {"round": round_, "sampled_users": sampled, "responding_users": int(votes.sum())},
        {"prefixes": prefixes, "votes": votes},
    )
