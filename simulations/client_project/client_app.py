"""A ClientApp for fedhh's ServerApp, written from fedhh's message contract (docs/messages.md, version 1.0).

It imports Flower, numpy and the standard library only: fedhh is needed
where the ServerApp runs, never on a node.  ``fedhh new-client`` wrote it;
it is yours to change.  Where your users' data lives is :func:`read_items`
and :class:`Users`; the rest is the contract.

What it answers:

* the shard query before round 1 (which users the node holds);
* TrieHH rounds (``protocol.name = "triehh"``), for every public alphabet
  and unit size;
* PEM level rounds (``protocol.name = "pem"``, ``protocol.collection =
  "interactive"``) with the ``olh``, ``blh`` or ``flh`` oracle and either
  encoding (``bits``, ``symbols``).

Anything else (another protocol, oracle or mode, another major version of
the contract) makes the handler raise: the server receives an error reply
with the reason, records it, and the run goes on without this node's users
for that round.

One item per user.  A node's users, in the order of their global ids:

* the node config names ``data-file``, the node's own users (one item per
  line, UTF-8), and ``population``, n, the number of users of the whole
  federation (the server's n: for a file population, its number of lines);
* otherwise the run config's ``population.path`` names the whole
  population's file (a Flower simulation, or a file every node reads), of
  which the node takes its share: a relative path is a file of this app
  bundle (``population.jsonl``), found in the folder Flower installed the
  bundle in, as fedhh's ServerApp finds it (``server_app.py``).

A ``.jsonl`` file holds a JSON string a line, the user's item (Flower's app
bundle carries ``.jsonl`` files, not ``.txt`` ones); any other file, one
item a line as it is.

Node ``partition-id`` of ``num-partitions`` holds users ``shard_bounds(n,
partition-id, num-partitions)``.  A user whose item the run's deny list
names (``run.deny_list``, :func:`read_deny_list`) holds nothing.  PEM reports draw from the operating
system's randomness, as a device's must; a node config ``report-seed`` (an
integer) makes them reproducible, for tests only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

CONTRACT_MAJOR, CONTRACT_MINOR = 1, 0
END, PAD = 0, -1  # the end-of-sequence symbol, and what fills a row after it
ALPHABETS = {  # docs/messages.md, "Items as symbols": a character's index is its 1-based position
    "lowercase": bytes(range(0x61, 0x7B)),
    "ascii": bytes(range(0x20, 0x7F)),
    "bytes": bytes(range(256)),  # the item's UTF-8 bytes, not its characters
}
# fedhh's defaults (docs/configuration.md): the ServerApp's value of a key the app bundle does not declare.
DEFAULTS: dict[str, Any] = {
    "protocol.alphabet": "lowercase",
    "protocol.unit_size": 1,
    "protocol.max_length": 10,
    "protocol.overlong": "drop",
    "protocol.unknown_chars": "error",
}
FLH_FUNCTIONS = 1000  # FLH's default number of public hash functions, which a PEM level uses
FLAT_CELLS_LIMIT = 1 << 20  # statistics of more cells travel as support counts instead

LOGGER = logging.getLogger("client_app")
app = ClientApp()


# -- the envelope -----------------------------------------------------------------------------


def read_message(content: RecordDict, expected_types: tuple[str, ...]) -> tuple[str, dict, dict]:
    """The type, scalars and arrays of a fedhh message, after checking its type and contract version."""
    scalars: dict[str, Any] = dict(content.config_records["scalars"].items())
    message_type, version = scalars.pop("@type", None), scalars.pop("@version", None)
    major = str(version).partition(".")[0]
    if major != str(CONTRACT_MAJOR):
        raise ValueError(
            f"the server speaks contract version {version!s}; this client speaks {CONTRACT_MAJOR}.{CONTRACT_MINOR}"
        )
    if message_type not in expected_types:
        raise ValueError(
            f"this client answers {', '.join(expected_types)}; got a {message_type!r} "
            "(another protocol: see docs/messages.md)"
        )
    if "notice" in content:
        LOGGER.warning("the server refused a reply of this node: %s", content.config_records["notice"]["reason"])
    arrays = {name: array.numpy() for name, array in content.array_records["arrays"].items()}
    return message_type, scalars, arrays


def record(message_type: str, scalars: dict, arrays: dict[str, np.ndarray]) -> RecordDict:
    """A fedhh message's content: its arrays, and its scalars under the type and this client's version."""
    header = {"@type": message_type, "@version": f"{CONTRACT_MAJOR}.{CONTRACT_MINOR}"}
    return RecordDict(
        {
            "arrays": ArrayRecord({name: Array(np.ascontiguousarray(value)) for name, value in arrays.items()}),
            "scalars": ConfigRecord({**header, **scalars}),
        }
    )


# -- this node's users ------------------------------------------------------------------------


def read_items(path: str) -> list[str]:
    """Users' items, one per line of a UTF-8 file, as fedhh reads a population: in a ``.jsonl`` file
    each line is a JSON string (the item), in any other the line is the item."""
    text = Path(path).read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if "" in lines:
        raise ValueError(f"{path}: line {lines.index('') + 1} is empty (one item per line)")
    if Path(path).suffix.lower() != ".jsonl":
        return lines
    items = json.loads("[" + ",".join(lines) + "]")  # one parse for the file, not one per user
    if len(items) != len(lines) or not all(isinstance(item, str) and item for item in items):
        raise ValueError(f"{path}: every line must be a non-empty JSON string, the user's item")
    return items


def bundled(path: str) -> Path:
    """``path``, relative to this app bundle's folder unless it is absolute."""
    return Path(__file__).resolve().parent / path


def read_deny_list(path: str) -> frozenset[str]:
    """The items ``run.deny_list`` names (docs/messages.md, "Definitions"; none when it is empty): a
    UTF-8 file of one item a line, or a fedhh results folder, whose ``result.json`` lists what that
    run denied (``deny_list.denied``) and discovered (``heavy_hitters``)."""
    if not path:
        return frozenset()
    target = Path(path)
    if target.is_dir():
        document = json.loads((target / "result.json").read_text(encoding="utf-8"))
        found = [hit["item"] for hit in document["heavy_hitters"]]
        return frozenset([*document.get("deny_list", {}).get("denied", []), *found])
    return frozenset(target.read_text(encoding="utf-8").splitlines())


def shard_bounds(n_users: int, index: int, parts: int) -> tuple[int, int]:
    """The global user ids ``[start, stop)`` of shard ``index`` of ``parts`` (docs/messages.md)."""
    return index * n_users // parts, (index + 1) * n_users // parts


class Codec:
    """Items as symbol rows over the run's public alphabet (docs/messages.md, "Items as symbols")."""

    def __init__(self, run_config: dict[str, Any]) -> None:
        setting = {key: run_config.get(key, default) for key, default in DEFAULTS.items()}
        self.name = str(setting["protocol.alphabet"])
        if self.name not in ALPHABETS:
            raise ValueError(f"protocol.alphabet: {self.name!r}; this client knows {sorted(ALPHABETS)}")
        self.characters = ALPHABETS[self.name]
        self.byte_level = self.name == "bytes"
        self.unit_size = int(setting["protocol.unit_size"])
        self.max_length = int(setting["protocol.max_length"])
        self.overlong = str(setting["protocol.overlong"])
        self.unknown_chars = str(setting["protocol.unknown_chars"])
        self.radix = len(self.characters) + 1  # index 0: no character
        self.max_symbols = -(-self.max_length // self.unit_size)

    def indices(self, item: str) -> list[int] | None:
        """The 1-based alphabet index of each character, kept under the run's policies (``None``: dropped)."""
        codes = item.encode("utf-8") if self.byte_level else [ord(char) for char in item]
        if any(code > 0xFF or code not in self.characters for code in codes):
            if self.unknown_chars == "error":
                raise ValueError(f"item {item!r} has characters outside the {self.name!r} alphabet")
            return None
        if len(codes) > self.max_length:
            if self.overlong == "error":
                raise ValueError(f"item {item!r} is longer than protocol.max_length = {self.max_length}")
            if self.overlong == "drop":
                return None
            codes = codes[: self.max_length]
        return [self.characters.index(code) + 1 for code in codes]

    def rows(self, items: list[str]) -> np.ndarray:
        """One row of ``max_symbols + 1`` symbols per item: its symbols, the end symbol, padding
        (a dropped item: padding only, a user who holds nothing)."""
        rows = np.full((len(items), self.max_symbols + 1), PAD, dtype=np.int64)
        for user, item in enumerate(items):
            indices = self.indices(item)
            if indices is None:
                continue
            symbols = [
                sum(
                    index * self.radix ** (self.unit_size - 1 - place)
                    for place, index in enumerate(indices[start : start + self.unit_size])
                )
                for start in range(0, len(indices), self.unit_size)
            ]
            rows[user, : len(symbols)] = symbols
            rows[user, len(symbols)] = END
        return rows


class Users:
    """This node's users: the global id of its first, how many, the population n, their symbol rows."""

    def __init__(self, node_config: dict[str, Any], run_config: dict[str, Any]) -> None:
        self.index, self.parts = int(node_config["partition-id"]), int(node_config["num-partitions"])
        if "data-file" in node_config:
            items = read_items(str(node_config["data-file"]))
            if "population" not in node_config:
                raise ValueError("node config: data-file needs population, the federation's number of users")
            self.population = int(node_config["population"])
            self.first, stop = shard_bounds(self.population, self.index, self.parts)
            if len(items) != stop - self.first:
                raise ValueError(
                    f"{node_config['data-file']}: holds {len(items)} users, this node must hold "
                    f"{stop - self.first} (users {self.first}..{stop - 1} of {self.population})"
                )
        else:
            path = str(run_config.get("population.path", ""))
            if not path or run_config.get("population.source", "file") != "file":
                raise ValueError(
                    "give the node a data-file (node config), or the run a population.path with "
                    'population.source = "file" (run config)'
                )
            everyone = read_items(str(bundled(path)))
            self.population = len(everyone)
            self.first, stop = shard_bounds(self.population, self.index, self.parts)
            items = everyone[self.first : stop]
        self.count = len(items)
        self.codec = Codec(run_config)
        self.rows = self.codec.rows(items)
        denied = read_deny_list(str(run_config.get("run.deny_list", "")))
        self.rows[[user for user, item in enumerate(items) if item in denied]] = PAD  # they hold nothing

    @property
    def ids(self) -> np.ndarray:
        return np.arange(self.first, self.first + self.count, dtype=np.int64)


_USERS: dict[tuple, Users] = {}


def users_of(context: Context) -> Users:
    """The node's users, read once per process."""
    key = (tuple(sorted(context.node_config.items())), tuple(sorted(context.run_config.items())))
    if key not in _USERS:
        _USERS[key] = Users(dict(context.node_config), dict(context.run_config))
    return _USERS[key]


# -- public functions (docs/messages.md, "Definitions") -------------------------------------


def splitmix64(x: Any) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def purpose_key(purpose: str) -> np.uint64:
    return np.uint64(int.from_bytes(hashlib.blake2b(purpose.encode("utf-8"), digest_size=8).digest(), "little"))


def public_uniform(seed: int, user_ids: np.ndarray) -> np.ndarray:
    words = splitmix64(splitmix64(user_ids.astype(np.uint64) ^ np.uint64(seed % (1 << 64))))
    return (words >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def key_rows(units: np.ndarray) -> np.ndarray:
    """The 64-bit key of each row of units (a prefix too long to key by its value)."""
    state = np.full(
        units.shape[0], splitmix64(purpose_key("fedhh.oracles.row-key") ^ np.uint64(units.shape[1])), dtype=np.uint64
    )
    words = units.astype(np.int64).view(np.uint64)
    for column in range(units.shape[1]):
        state = splitmix64(state ^ words[:, column])
    return state


def hash64(multipliers: np.ndarray, offsets: np.ndarray, values: np.ndarray, g: int) -> np.ndarray:
    """fedhh's 64-bit hash family: ``((a * splitmix64(v) + b) >> 32) * g >> 32``."""
    with np.errstate(over="ignore"):
        z = multipliers * splitmix64(values) + offsets
    return ((z >> np.uint64(32)) * np.uint64(g)) >> np.uint64(32)


def seed_pair(seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (odd multiplier, offset) a 64-bit seed names."""
    return splitmix64(seeds) | np.uint64(1), splitmix64(seeds ^ np.uint64(0xD1B54A32D192ED03))


# -- TrieHH ---------------------------------------------------------------------------------


def triehh_reply(users: Users, scalars: dict, arrays: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """The votes of this node's sampled users for the depth-``round`` prefixes that extend the trie."""
    round_ = int(scalars["round"])
    sampled, parents = arrays["sampled"], arrays["parents"]
    mine = sampled[(sampled >= users.first) & (sampled < users.first + users.count)] - users.first
    prefixes = users.rows[mine, :round_]
    voting = prefixes[:, -1] != PAD  # the item did not end before this symbol
    if round_ > 1:
        voting &= (prefixes[:, None, :-1] == parents[None, :, :]).all(axis=2).any(axis=1)
    rows, votes = np.unique(prefixes[voting], axis=0, return_counts=True)
    return (
        {"round": round_, "sampled_users": int(mine.size), "responding_users": int(votes.sum())},
        {"prefixes": rows.reshape(-1, round_).astype(np.int64), "votes": votes.astype(np.int64)},
    )


# -- PEM ------------------------------------------------------------------------------------


def value_units(users: Users, encoding: str) -> tuple[np.ndarray, int]:
    """Each user's value as units, and the units' base (docs/messages.md, "Values as bits or symbols"):
    ``bits``, each character's code (``lowercase``/``ascii``: its index; ``bytes``: the byte) in fixed
    width, most significant bit first; ``symbols``, the symbols with 0 after the end.  A user without
    an item has the empty value, all units 0."""
    codec = users.codec
    symbols = np.where(users.rows[:, : codec.max_symbols] > 0, users.rows[:, : codec.max_symbols], 0)
    if encoding == "symbols":
        return symbols, codec.radix**codec.unit_size
    powers = codec.radix ** np.arange(codec.unit_size - 1, -1, -1, dtype=np.int64)
    indices = ((symbols[:, :, None] // powers) % codec.radix).reshape(users.count, -1)[:, : codec.max_length]
    codes = np.maximum(indices - 1, 0) if codec.byte_level else indices
    width = 8 if codec.byte_level else len(codec.characters).bit_length()
    shifts = np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((codes[:, :, None] >> shifts) & 1).reshape(users.count, -1), 2


def prefix_keys(units: np.ndarray, base: int, length: int) -> np.ndarray:
    """The oracle key of each ``length``-unit prefix: its base-``base`` value if it fits 64 bits, else key_rows."""
    if base**length > 1 << 64:
        return key_rows(units[:, :length])
    keys = np.zeros(units.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in range(length):
            keys = keys * np.uint64(base) + units[:, column].astype(np.uint64)
    return keys


def randomised_bucket(true_bucket: np.ndarray, g: int, epsilon: float, draw: np.random.Generator) -> np.ndarray:
    """The true bucket with probability e^ε / (e^ε + g - 1), else one of the g - 1 others uniformly."""
    keep = math.exp(epsilon) / (math.exp(epsilon) + g - 1)
    other = (true_bucket + draw.integers(1, g, size=true_bucket.size).astype(np.uint64)) % np.uint64(g)
    return np.where(draw.random(true_bucket.size) < keep, true_bucket, other).astype(np.uint64)


def olh_supports(
    keys: np.ndarray, candidates: np.ndarray, g: int, epsilon: float, draw: np.random.Generator
) -> np.ndarray:
    """OLH (or BLH, g = 2): each user hashes its key into g buckets with a function of its own, drawn
    fresh (this node counts the supports, so the hash family is its choice) and randomises the bucket;
    the reply is how many reports support each candidate (hash to the reported bucket)."""
    multipliers, offsets = seed_pair(draw.integers(0, 1 << 64, size=keys.size, dtype=np.uint64))
    reported = randomised_bucket(hash64(multipliers, offsets, keys, g), g, epsilon, draw)
    counts = np.zeros(candidates.size, dtype=np.int64)
    for start in range(0, keys.size, 256):  # 256 reports x candidates hashes at a time
        block = slice(start, start + 256)
        hashed = hash64(multipliers[block, None], offsets[block, None], candidates[None, :], g)
        counts += (hashed == reported[block, None]).sum(axis=0)
    return counts


def flh_counts(
    keys: np.ndarray, candidates: np.ndarray, epsilon: float, seed: int, draw: np.random.Generator
) -> np.ndarray:
    """FLH: each user picks one of fedhh's 1000 public functions (named by the request's oracle_seed),
    hashes its key into g buckets and randomises the bucket.  The reply is the table ``cells[j g + y]``
    of how many reports said (j, y) when it has at most 2^20 cells, else each candidate's support."""
    g = max(2, round(math.exp(epsilon)) + 1)
    base = splitmix64(np.uint64(seed % (1 << 64)) ^ purpose_key("fedhh.oracles.flh.functions"))
    with np.errstate(over="ignore"):
        multipliers, offsets = seed_pair(splitmix64(base + np.arange(FLH_FUNCTIONS, dtype=np.uint64)))
    functions = draw.integers(0, FLH_FUNCTIONS, size=keys.size)
    reported = randomised_bucket(hash64(multipliers[functions], offsets[functions], keys, g), g, epsilon, draw)
    if FLH_FUNCTIONS * g <= FLAT_CELLS_LIMIT:
        return np.bincount(functions * g + reported.astype(np.int64), minlength=FLH_FUNCTIONS * g).astype(np.int64)
    hashed = hash64(multipliers[functions][:, None], offsets[functions][:, None], candidates[None, :], g)
    return (hashed == reported[:, None]).sum(axis=0).astype(np.int64)


def pem_reply(
    users: Users, scalars: dict, arrays: dict[str, np.ndarray], draw: np.random.Generator
) -> tuple[dict, dict]:
    """This node's answer to a PEM level round: its users of the asked level report their prefix's key
    through the oracle; the reply sums their reports."""
    oracle, mode = scalars["oracle"], scalars["mode"]
    if mode != "level" or oracle not in ("olh", "blh", "flh"):
        raise ValueError(
            f"this client answers PEM level rounds with oracle olh, blh or flh; got mode {mode!r}, "
            f'oracle {oracle!r} (set protocol.oracle, protocol.collection = "interactive")'
        )
    level, bounds = int(scalars["level"]), arrays["level_bounds"]
    levels = np.clip(
        np.searchsorted(bounds, public_uniform(int(scalars["partition_seed"]), users.ids), side="right") - 1,
        0,
        bounds.size - 2,
    )
    members = np.flatnonzero(levels == level)
    units, base = value_units(users, str(scalars["encoding"]))
    keys = prefix_keys(units[members], base, int(arrays["lengths"][level]))
    epsilon, candidates = float(scalars["epsilon"]), arrays["candidates"]
    if oracle == "flh":
        counts = flh_counts(keys, candidates, epsilon, int(scalars["oracle_seed"]), draw)
    else:
        g = 2 if oracle == "blh" else max(2, round(math.exp(epsilon)) + 1)
        counts = olh_supports(keys, candidates, g, epsilon, draw)
    asked = int(members.size)
    return (
        {"round": int(scalars["round"]), "sampled_users": asked, "responding_users": asked},
        {
            "counts": counts,
            "reporters": np.array([asked], dtype=np.int64),
            "report_rows": np.zeros((0, 0), dtype=np.uint64),  # outside a one-shot collection: empty, (0, 0)
            "report_counts": np.zeros(0, dtype=np.int64),
        },
    )


def report_randomness(context: Context, round_: int) -> np.random.Generator:
    """The OS's randomness, or (tests only) a generator keyed by the node config's report-seed and the round."""
    seed = context.node_config.get("report-seed")
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    return np.random.default_rng([int(seed), int(context.node_config["partition-id"]), round_])


# -- the two messages ---------------------------------------------------------------------------


def shard_info(content: RecordDict, users: Users) -> RecordDict:
    """The answer to the shard query: which users the node holds."""
    read_message(content, ("ShardQuery",))
    return record(
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


def round_answer(content: RecordDict, users: Users, draw: Callable[[int], np.random.Generator]) -> RecordDict:
    """The answer to a round's request; ``draw(round)`` gives the round's randomness (PEM's reports)."""
    message_type, scalars, arrays = read_message(content, ("TrieHHRequest", "PrefixRequest"))
    if message_type == "TrieHHRequest":
        return record("TrieHHResponse", *triehh_reply(users, scalars, arrays))
    return record("PrefixResponse", *pem_reply(users, scalars, arrays, draw(int(scalars["round"]))))


@app.query("shard")
def describe_shard(message: Message, context: Context) -> Message:
    return Message(shard_info(message.content, users_of(context)), reply_to=message)


@app.query("round")
def answer_round(message: Message, context: Context) -> Message:
    draw = functools.partial(report_randomness, context)
    return Message(round_answer(message.content, users_of(context), draw), reply_to=message)
