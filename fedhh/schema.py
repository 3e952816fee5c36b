"""The config schema: one key (:class:`Key`), typed sections of keys, and the sections every run has.

A config section is declared once, as a frozen dataclass whose fields are
its keys (:class:`ConfigSection`): each field's :class:`Key` gives its type,
default and constraint, from which :func:`fedhh.config.schema` assembles
what a config may hold and how each value is checked, and a validated
section is read back as an instance of the class, with its values typed
(``config.privacy.epsilon`` is a float).  A protocol declares its own
``[protocol]`` keys the same way in its package, so this module sits under
both the protocols and the config that reads their keys.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Self

from .errors import InputError

Scalar = bool | int | float | str
KEY = "fedhh.key"  # field metadata key of a section field's Key


class ConfigError(InputError):
    """A malformed or out-of-range configuration value."""


@dataclass(frozen=True)
class Key:
    """The declared type, default and constraint of one config key."""

    type: type
    default: Scalar
    help: str
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], bool] | None = None
    constraint: str = ""
    special: tuple[str, ...] = ()  # words accepted besides values of ``type``, e.g. ``"auto"``

    def validate(self, name: str, value: Any) -> Scalar:
        if isinstance(value, str) and value in self.special:
            return value
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            words = "".join(f" or {word!r}" for word in self.special)
            raise ConfigError(f"{name}: expected {self.type.__name__}{words}, got {type(value).__name__} {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{name}: got {value!r}; allowed values: {list(self.choices)}")
        if self.check is not None and not self.check(value):
            raise ConfigError(f"{name}: got {value!r}; must be {self.constraint}")
        return typing.cast(Scalar, value)

    def field(self) -> Any:
        """This key as a field of a :class:`ConfigSection` (its default, and the key in its metadata)."""
        return dataclasses.field(default=self.default, metadata={KEY: self})


@dataclass(frozen=True)
class ConfigSection:
    """A typed view of config keys: a frozen dataclass whose fields declared with ``Key(...).field()``
    are keys of the schema (other fields, such as a protocol's ``n_users``, are given by the code that
    reads the section)."""

    @classmethod
    def keys(cls) -> dict[str, Key]:
        """The keys this class declares, in the order of its fields.  A field's type is its key's, or for
        a key with choices, the ``Literal`` of its choices; a key with special words is its type or the
        ``Literal`` of those words (``int | Literal["auto"]``)."""
        hints = typing.get_type_hints(cls)
        keys: dict[str, Key] = {}
        for field in dataclasses.fields(cls):
            if KEY in field.metadata:
                key, hint = field.metadata[KEY], hints[field.name]
                declared = key.type | Literal[key.special] if key.special else key.type
                if hint != declared and (typing.get_origin(hint), typing.get_args(hint)) != (Literal, key.choices):
                    raise TypeError(f"{cls.__name__}.{field.name}: declared {hint!r}, its key {key.type!r}")
                keys[field.name] = key
        return keys

    @classmethod
    def of(cls, section: Mapping[str, Any], **given: Any) -> Self:
        """The fields of a validated ``section`` (a mapping holding at least this class's keys, such as
        ``config["protocol"]``), with the others ``given``."""
        read = {
            field.name: section[field.name]
            for field in dataclasses.fields(cls)
            if field.name not in given and (KEY in field.metadata or field.name in section)
        }
        return cls(**read, **given)

    def values(self) -> dict[str, Any]:
        """The keys' values by name (the fields ``given`` to :meth:`of` left out)."""
        return {name: getattr(self, name) for name in self.keys()}


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


# Shards are the unit of transport: each costs a fixed time per round (a
# SuperNode's messages, an actor call).  Flower simulations run with
# thousands of SuperNodes (benchmarks/RESULTS.md, bench_flower_nodes.py);
# beyond that the in-memory engine of Flower 1.41 and 1.42, which scans every
# message in flight for every node it polls, makes a round cost O(nodes^2): at 10^5
# nodes (a typo for users) a round would take hours.
MAX_SHARDS = 4096
DEFAULT_SHARDS = 8
# run.shards = "auto": a Flower federation's SuperNodes decide how many shards there are (each
# node's config names its shard); a driver that starts the shards itself starts DEFAULT_SHARDS.
AUTO_SHARDS = "auto"
DEFAULT_PROTOCOL = "triehh"


# The sections every run has.  ``[protocol]`` declares here what every
# protocol reads (the name and the public item codec); each protocol adds its
# own keys in its spec, and :func:`fedhh.config.schema` assembles the whole.


@dataclass(frozen=True)
class PopulationSection(ConfigSection):
    """``[population]``: who the users are and which items they hold."""

    source: str = Key(
        str,
        "wordfreq",
        "where users' items come from (exponential: [Wang19] §VI's geometric law; dataset: a folder written by "
        "fedhh population build)",
        ("wordfreq", "zipf", "exponential", "file", "dataset"),
    ).field()
    users: int = Key(
        int, 1_000_000, "number of users n (wordfreq, zipf, exponential)", check=lambda v: v >= 1, constraint=">= 1"
    ).field()
    language: str = Key(str, "en", "wordfreq language code").field()
    languages: str = Key(
        str,
        "",
        'wordfreq: languages as parties, comma-separated ("en,fr,de,es"): party p\'s users are '
        "[⌊p n/P⌋, ⌊(p+1) n/P⌋) and draw from language p's words over the union of the languages' vocabularies "
        "(TAPS); empty: every user draws from population.language",
    ).field()
    vocabulary: int = Key(
        int,
        100_000,
        "distinct candidate items (wordfreq: top words; zipf, exponential: random strings)",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    words_per_user: int = Key(
        int,
        1,
        "items drawn per user (local frequencies; > 1 uses Algorithm 3)",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    concentration: float = Key(
        float,
        0.0,
        "how alike a user's words are (sampled sources): each user draws from its own Dirichlet(α p) law around "
        "the population's p, so its next word repeats one of its own with probability j / (j + α); 0: "
        "independent draws (α = ∞)",
        check=lambda v: v == 0 or _positive(v),
        constraint="0 or a finite number > 0",
    ).field()
    per_user: str = Key(
        str,
        "all",
        "what each user keeps of its items: all, or only its most frequent (mode; ties at random, keyed by the "
        "seed and the user)",
        ("all", "mode"),
    ).field()
    zipf_exponent: float = Key(
        float, 1.1, "Zipf exponent s of the synthetic source", check=_positive, constraint="> 0"
    ).field()
    exponential_rate: float = Key(
        float,
        0.05,
        "rate λ of the exponential source: P(rank r) ∝ e^(-λ (r - 1)), a geometric law",
        check=_positive,
        constraint="a finite number > 0",
    ).field()
    item_length: int = Key(int, 8, "characters per synthetic item", check=lambda v: v >= 1, constraint=">= 1").field()
    path: str = Key(
        str,
        "",
        "file source: .txt (one item per line, one user per line), .jsonl (the same, each line a JSON string), "
        ".csv or .parquet (columns user, item); "
        "dataset source: the folder written by fedhh population build",
    ).field()


@dataclass(frozen=True)
class ProtocolSection(ConfigSection):
    """``[protocol]``: the protocol's name and the public item codec every protocol reads (a protocol's
    own keys are its spec's)."""

    name: str = DEFAULT_PROTOCOL  # one of the registered protocols (fedhh.config.schema() declares its key)
    max_length: int = Key(
        int,
        10,
        "maximum item length in characters (bytes for the bytes alphabet)",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    unit_size: int = Key(int, 1, "characters per symbol", check=lambda v: 1 <= v <= 4, constraint="in 1..4").field()
    alphabet: str = Key(str, "lowercase", "public alphabet", ("lowercase", "ascii", "bytes")).field()
    overlong: Literal["error", "drop", "truncate"] = Key(
        str, "drop", "items longer than max_length", ("error", "drop", "truncate")
    ).field()
    unknown_chars: Literal["error", "drop"] = Key(
        str, "error", "items with characters outside the alphabet", ("error", "drop")
    ).field()


@dataclass(frozen=True)
class PrivacySection(ConfigSection):
    """``[privacy]``: the privacy target and the ledger that composes repeated runs."""

    epsilon: float = Key(float, 4.0, "target ε", check=_positive, constraint="a finite number > 0").field()
    delta: float = Key(
        float, 1e-12, "target δ", check=lambda v: 0 < v < 1, constraint="in the open interval (0, 1)"
    ).field()
    model: str = Key(
        str,
        "local",
        "where privacy.epsilon holds for the ε-LDP protocols: local (each user's ε-LDP reports) or shuffle "
        "(the central ε at privacy.delta of the reports after an anonymising shuffle; the local ε is solved "
        "from it)",
        ("local", "shuffle"),
    ).field()
    ledger: str = Key(
        str, "", "privacy ledger (JSON) composing repeated runs on the same population; empty: none"
    ).field()
    max_epsilon: float = Key(
        float,
        0.0,
        "cumulative ε budget of the ledger; 0: no budget",
        check=lambda v: v == 0 or _positive(v),
        constraint="0 or a finite number > 0",
    ).field()


@dataclass(frozen=True)
class RunSection(ConfigSection):
    """``[run]``: the seed, the driver and its transport, and what the result evaluates."""

    seed: int = Key(
        int, 0, "seed of every random choice in the simulation", check=lambda v: v >= 0, constraint=">= 0"
    ).field()
    driver: str = Key(str, "flower", "transport", ("flower", "fast")).field()
    backend: str = Key(
        str,
        "auto",
        "fast driver backend (auto: Ray when RAY_ADDRESS names a cluster, else in-process)",
        ("auto", "inprocess", "ray"),
    ).field()
    shards: int | Literal["auto"] = Key(
        int,
        DEFAULT_SHARDS,
        'shards of users (Flower SuperNodes or Ray actors); "auto" (the default of `flwr run .`): one per '
        "SuperNode that connects, each holding the shard its node config names; where fedhh starts the shards "
        "itself (fedhh run, the fast driver), 8",
        check=lambda v: 1 <= v <= MAX_SHARDS,
        constraint=f"in 1..{MAX_SHARDS:,} (and at most the number of users)",
        special=(AUTO_SHARDS,),
    ).field()
    top_k: int = Key(
        int, 100, "K of the true top-K used by precision, F1 and NCR", check=lambda v: v >= 1, constraint=">= 1"
    ).field()
    cap_to_top_k: bool = Key(
        bool,
        False,
        "report at most run.top_k discoveries, the protocol's best by its own estimated counts (TrieHH: votes), "
        "so that protocols reporting everything above a threshold compare at a fixed K; recorded in the "
        "result's cap_to_top_k",
    ).field()
    evaluation: bool = Key(
        bool,
        True,
        "write the exact ground truth (true counts and ranks, metrics) into the result's evaluation section; "
        "false for real data, which no guarantee covers there",
    ).field()
    federation: str = Key(
        str,
        "shards",
        "what each Flower SuperNode holds: a shard of the configured population, or one device user's own data "
        "(devices: n = population.users)",
        ("shards", "devices"),
    ).field()
    round_timeout: float = Key(
        float,
        120.0,
        "seconds a Flower round waits for replies; a node without a valid reply by then is counted late and its "
        "users' answers are lost",
        check=_positive,
        constraint="a finite number > 0",
    ).field()
    connect_timeout: float = Key(
        float,
        120.0,
        "seconds the Flower server waits for its SuperNodes before round 1",
        check=_positive,
        constraint="a finite number > 0",
    ).field()
    secure_aggregation: bool = Key(
        bool, False, "sum each round's responses with Flower's SecAgg+ so the server sees only sums"
    ).field()
    simulation: str = Key(
        str,
        "users",
        "users: every user's report drawn, as devices would (the reference); law: each round's aggregate drawn "
        "from its exact law given the shards' item counts, at a cost independent of the number of users "
        "(docs/simulation.md)",
        ("users", "law"),
    ).field()
    deny_list: str = Key(
        str,
        "",
        "items already known, left out of every user's items so the budget goes to the next ones: a UTF-8 text "
        "file (one item a line) or a previous run's results folder (what it denied and discovered); a user left "
        "with nothing takes the protocol's no-item path; empty: none (docs/deny-lists.md)",
    ).field()


def party_languages(text: str) -> list[str]:
    """The languages of ``population.languages`` in party order (``"en, fr"`` -> ``["en", "fr"]``)."""
    return [language.strip() for language in text.split(",")]
