"""Experiment configuration: TOML files, ``--set`` overrides, strict validation.

A config has four sections (``population``, ``protocol``, ``privacy``,
``run``).  Every key has a declared type and allowed range; unknown sections
or keys, wrong types and out-of-range values are refused with an error that
names the key and what it accepts, before any work starts.  The same dotted
keys (``population.users``) are used by ``--set`` on the command line and by
Flower's run config, so a run is described identically under every driver.
"""

from __future__ import annotations

import copy
import math
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .schema import ConfigError, Key, Scalar

MAX_CONFIG_BYTES = 1 << 20  # a config is a few hundred bytes; anything this large is not one

# Shards are the unit of transport: each costs a fixed time per round (a
# SuperNode's messages, an actor call).  Flower simulations are run with
# thousands of SuperNodes (2,048 measured, benchmarks/RESULTS.md); beyond
# the in-memory engine of Flower 1.41 and 1.42, which scans every message in flight
# for every node it polls, makes a round cost O(nodes^2): at 4,096 nodes
# about 4x the 2,048-node round, at 10^5 (a typo for users) hours.
MAX_SHARDS = 4096
DEFAULT_SHARDS = 8
# run.shards = "auto": a Flower federation's SuperNodes decide how many shards there are (each
# node's config names its shard); a driver that starts the shards itself starts DEFAULT_SHARDS.
AUTO_SHARDS = "auto"


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


# The sections and keys every run has.  ``[protocol]`` lists here what every
# protocol reads (the name and the public item codec); each protocol adds its
# own keys in its spec, and :func:`schema` assembles the whole.
BASE_SCHEMA: dict[str, dict[str, Key]] = {
    "population": {
        "source": Key(str, "wordfreq", "where users' items come from (exponential: [Wang19] §VI's geometric law; dataset: a folder written by fedhh population build)", ("wordfreq", "zipf", "exponential", "file", "dataset")),
        "users": Key(int, 1_000_000, "number of users n (wordfreq, zipf, exponential)", check=lambda v: v >= 1, constraint=">= 1"),
        "language": Key(str, "en", "wordfreq language code"),
        "vocabulary": Key(int, 100_000, "distinct candidate items (wordfreq: top words; zipf, exponential: random strings)", check=lambda v: v >= 1, constraint=">= 1"),
        "words_per_user": Key(int, 1, "items drawn per user (local frequencies; > 1 uses Algorithm 3)", check=lambda v: v >= 1, constraint=">= 1"),
        "concentration": Key(float, 0.0, "how alike a user's words are (sampled sources): each user draws from its own Dirichlet(α p) law around the population's p, so its next word repeats one of its own with probability j / (j + α); 0: independent draws (α = ∞)", check=lambda v: v == 0 or _positive(v), constraint="0 or a finite number > 0"),
        "per_user": Key(str, "all", "what each user keeps of its items: all, or only its most frequent (mode; ties at random, keyed by the seed and the user)", ("all", "mode")),
        "zipf_exponent": Key(float, 1.1, "Zipf exponent s of the synthetic source", check=_positive, constraint="> 0"),
        "exponential_rate": Key(float, 0.05, "rate λ of the exponential source: P(rank r) ∝ e^(-λ (r - 1)), a geometric law", check=_positive, constraint="a finite number > 0"),
        "item_length": Key(int, 8, "characters per synthetic item", check=lambda v: v >= 1, constraint=">= 1"),
        "path": Key(str, "", "file source: .txt (one item per line, one user per line), .csv or .parquet (columns user, item); dataset source: the folder written by fedhh population build"),
    },
    "protocol": {
        "max_length": Key(int, 10, "maximum item length in characters (bytes for the bytes alphabet)", check=lambda v: v >= 1, constraint=">= 1"),
        "unit_size": Key(int, 1, "characters per symbol", check=lambda v: 1 <= v <= 4, constraint="in 1..4"),
        "alphabet": Key(str, "lowercase", "public alphabet", ("lowercase", "ascii", "bytes")),
        "overlong": Key(str, "drop", "items longer than max_length", ("error", "drop", "truncate")),
        "unknown_chars": Key(str, "error", "items with characters outside the alphabet", ("error", "drop")),
    },
    "privacy": {
        "epsilon": Key(float, 4.0, "target ε", check=_positive, constraint="a finite number > 0"),
        "delta": Key(float, 1e-12, "target δ", check=lambda v: 0 < v < 1, constraint="in the open interval (0, 1)"),
        "ledger": Key(str, "", "privacy ledger (JSON) composing repeated runs on the same population; empty: none"),
        "max_epsilon": Key(float, 0.0, "cumulative ε budget of the ledger; 0: no budget",
                           check=lambda v: v == 0 or _positive(v), constraint="0 or a finite number > 0"),
    },
    "run": {
        "seed": Key(int, 0, "seed of every random choice in the simulation", check=lambda v: v >= 0, constraint=">= 0"),
        "driver": Key(str, "flower", "transport", ("flower", "fast")),
        "backend": Key(str, "auto", "fast driver backend (auto: Ray when RAY_ADDRESS names a cluster, else in-process)", ("auto", "inprocess", "ray")),
        "shards": Key(int, DEFAULT_SHARDS, "shards of users (Flower SuperNodes or Ray actors); \"auto\" (the default of `flwr run .`): one per SuperNode that connects, each holding the shard its node config names; where fedhh starts the shards itself (fedhh run, the fast driver), 8", check=lambda v: 1 <= v <= MAX_SHARDS, constraint=f"in 1..{MAX_SHARDS:,} (and at most the number of users)", special=(AUTO_SHARDS,)),
        "top_k": Key(int, 100, "K of the true top-K used by precision, F1 and NCR", check=lambda v: v >= 1, constraint=">= 1"),
        "cap_to_top_k": Key(bool, False, "report at most run.top_k discoveries, the protocol's best by its own estimated counts (TrieHH: votes), so that protocols reporting everything above a threshold compare at a fixed K; recorded in the result's cap_to_top_k"),
        "evaluation": Key(bool, True, "write the exact ground truth (true counts and ranks, metrics) into the result's evaluation section; false for real data, which no guarantee covers there"),
        "federation": Key(str, "shards", "what each Flower SuperNode holds: a shard of the configured population, or one device user's own data (devices: n = population.users)", ("shards", "devices")),
        "round_timeout": Key(float, 120.0, "seconds a Flower round waits for replies; a node without a valid reply by then is counted late and its users' answers are lost", check=_positive, constraint="a finite number > 0"),
        "connect_timeout": Key(float, 120.0, "seconds the Flower server waits for its SuperNodes before round 1", check=_positive, constraint="a finite number > 0"),
        "secure_aggregation": Key(bool, False, "sum each round's responses with Flower's SecAgg+ so the server sees only sums"),
    },
}


DEFAULT_PROTOCOL = "triehh"


def schema() -> dict[str, dict[str, Key]]:
    """Every section and key a config may hold: :data:`BASE_SCHEMA` with ``protocol.name``
    choosing among the registered protocols and each protocol's own keys.

    The protocols are imported on the first call, not when this module is
    (reading the command line needs no numerics).
    """
    from .protocols.registry import PROTOCOLS, protocol_keys

    names = tuple(PROTOCOLS)
    cached = _SCHEMA.get(names)
    if cached is None:
        protocol = {"name": Key(str, DEFAULT_PROTOCOL, "heavy-hitter protocol", names), **BASE_SCHEMA["protocol"]}
        clashes = sorted(set(protocol_keys()) & set(protocol))
        if clashes:
            raise ConfigError(f"protocol.{clashes[0]}: a protocol's spec declares a key every protocol has")
        cached = _SCHEMA[names] = {**BASE_SCHEMA, "protocol": {**protocol, **protocol_keys()}}
    return cached


_SCHEMA: dict[tuple[str, ...], dict[str, dict[str, Key]]] = {}  # by the registered names


@dataclass(frozen=True)
class FedhhConfig:
    """A validated configuration (every key present, every value checked)."""

    sections: dict[str, dict[str, Scalar]]

    def __getitem__(self, section: str) -> dict[str, Scalar]:
        return self.sections[section]

    def get(self, dotted: str) -> Scalar:
        section, key = _split(dotted)
        return self.sections[section][key]

    def to_dict(self) -> dict[str, dict[str, Scalar]]:
        return copy.deepcopy(self.sections)

    def to_flat(self) -> dict[str, Scalar]:
        return {f"{s}.{k}": v for s, keys in self.sections.items() for k, v in keys.items()}

    def with_overrides(self, overrides: Mapping[str, Scalar]) -> "FedhhConfig":
        merged = self.to_dict()
        for dotted, value in overrides.items():
            section, key = _split(dotted)
            merged[section][key] = value
        return build_config(merged)


def fixed_shards(config: FedhhConfig) -> int | None:
    """``run.shards`` as a number, or ``None`` for ``"auto"`` (the federation's SuperNodes decide)."""
    shards = config["run"]["shards"]
    return None if shards == AUTO_SHARDS else int(shards)


def with_fixed_shards(config: FedhhConfig, default: int = DEFAULT_SHARDS) -> FedhhConfig:
    """``config`` with ``run.shards = "auto"`` replaced by ``default``: for a driver that starts the
    shards itself (the fast driver's actors, the virtual SuperNodes of ``fedhh run``)."""
    return config if fixed_shards(config) is not None else config.with_overrides({"run.shards": default})


def _split(dotted: str) -> tuple[str, str]:
    section, _, key = dotted.partition(".")
    known = schema()
    if section not in known:
        raise ConfigError(f"{dotted}: unknown section {section!r}; allowed sections: {list(known)}")
    if key not in known[section]:
        raise ConfigError(
            f"{dotted}: unknown key {key!r} in [{section}]; allowed keys: {list(known[section])}"
        )
    return section, key


def build_config(raw: Mapping[str, Any]) -> FedhhConfig:
    """Validate a nested mapping (missing keys take their defaults)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config must be a table of sections, got {type(raw).__name__}")
    known = schema()
    sections = {s: {k: key.default for k, key in keys.items()} for s, keys in known.items()}
    for section, values in raw.items():
        if section not in known:
            raise ConfigError(f"unknown section [{section}]; allowed sections: {list(known)}")
        if not isinstance(values, Mapping):
            raise ConfigError(f"[{section}] must be a table of keys, got {values!r}")
        for key, value in values.items():
            _split(f"{section}.{key}")
            sections[section][key] = known[section][key].validate(f"{section}.{key}", value)
    if sections["privacy"]["max_epsilon"] and not sections["privacy"]["ledger"]:
        raise ConfigError("privacy.max_epsilon: a budget needs privacy.ledger (the file that remembers past runs)")
    if sections["population"]["source"] in ("file", "dataset") and not sections["population"]["path"]:
        raise ConfigError(f"population.path: required when population.source = \"{sections['population']['source']}\"")
    if sections["population"]["concentration"] and sections["population"]["source"] in ("file", "dataset"):
        raise ConfigError("population.concentration: only users drawn from a law (wordfreq, zipf, exponential) "
                          "have one; a file's or a dataset's users hold what they hold (use 0)")
    return FedhhConfig(sections)


def parse_override(text: str) -> tuple[str, Scalar]:
    """Parse ``section.key=value``; the value is read as TOML, else as a string."""
    dotted, sep, value_text = text.partition("=")
    if not sep:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    dotted = dotted.strip()
    _split(dotted)
    try:
        value = tomllib.loads(f"value = {value_text.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = value_text.strip()
    return dotted, value


def read_config_text(path: str | Path, what: str = "config file") -> str:
    """The text of a config file (``what`` names it in messages: a sweep file, a sweep's base):
    a regular file of at most :data:`MAX_CONFIG_BYTES`.

    The file is opened without blocking and checked before anything is
    read, so a folder, a device such as ``/dev/zero`` or a FIFO is refused
    at once instead of being read without end or waited on.
    """
    name = repr(str(path))
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{what} {name} does not exist") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL in the name
        raise ConfigError(f"{what} {name} cannot be opened ({getattr(error, 'strerror', None) or error})") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{what} {name} is {file_kind(mode)}, not a regular file")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {name} is larger than {MAX_CONFIG_BYTES:,} bytes; a fedhh config is a few lines")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{what} {name} is not valid TOML: {error}") from None


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages: ``a folder``, ``a character device``, ..."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
    return next((kind for test, kind in kinds if test(mode)), "a special file")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> FedhhConfig:
    """Read a TOML config (or the defaults) and apply ``section.key=value`` overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        text = read_config_text(path)
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"config file {str(path)!r} is not valid TOML: {error}") from None
    config = build_config(raw)
    parsed = dict(parse_override(text) for text in overrides or [])
    return config.with_overrides(parsed) if parsed else config


def config_from_flat(flat: Mapping[str, Any]) -> FedhhConfig:
    """Build from dotted keys (Flower's run config); keys of other apps are ignored."""
    nested: dict[str, dict[str, Any]] = {}
    for dotted, value in flat.items():
        section, _, key = dotted.partition(".")
        if section in BASE_SCHEMA:
            _split(dotted)
            nested.setdefault(section, {})[key] = value
    return build_config(nested)
