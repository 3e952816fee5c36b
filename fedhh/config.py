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
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .schema import (
    AUTO_SHARDS,
    DEFAULT_PROTOCOL,
    DEFAULT_SHARDS,
    ConfigError,
    ConfigSection,
    Key,
    PopulationSection,
    PrivacySection,
    ProtocolSection,
    RunSection,
    Scalar,
    party_languages,
)
from .schema import MAX_SHARDS as MAX_SHARDS  # the shards a run may have, re-exported here

MAX_CONFIG_BYTES = 1 << 20  # a config is a few hundred bytes; anything this large is not one

# The sections and keys every run has (their typed sections are declared in fedhh.schema); each
# protocol adds its own ``[protocol]`` keys in its spec, and :func:`schema` assembles the whole.
SECTIONS: dict[str, type[ConfigSection]] = {
    "population": PopulationSection,
    "protocol": ProtocolSection,
    "privacy": PrivacySection,
    "run": RunSection,
}
BASE_SCHEMA: dict[str, dict[str, Key]] = {name: section.keys() for name, section in SECTIONS.items()}


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
    """A validated configuration (every key present, every value checked): each section as a mapping
    (``config["privacy"]["epsilon"]``, as written in result.json and Flower's run config) or typed
    (``config.privacy.epsilon``)."""

    sections: dict[str, dict[str, Scalar]]

    def __getitem__(self, section: str) -> dict[str, Scalar]:
        return self.sections[section]

    @property
    def population(self) -> PopulationSection:
        return PopulationSection.of(self.sections["population"])

    @property
    def protocol(self) -> ProtocolSection:
        """The keys every protocol reads (a protocol's own: its keys' section of ``config["protocol"]``)."""
        return ProtocolSection.of(self.sections["protocol"])

    @property
    def privacy(self) -> PrivacySection:
        return PrivacySection.of(self.sections["privacy"])

    @property
    def run(self) -> RunSection:
        return RunSection.of(self.sections["run"])

    def get(self, dotted: str) -> Scalar:
        section, key = _split(dotted)
        return self.sections[section][key]

    def to_dict(self) -> dict[str, dict[str, Scalar]]:
        return copy.deepcopy(self.sections)

    def to_flat(self) -> dict[str, Scalar]:
        return {f"{s}.{k}": v for s, keys in self.sections.items() for k, v in keys.items()}

    def with_overrides(self, overrides: Mapping[str, Scalar]) -> FedhhConfig:
        merged = self.to_dict()
        for dotted, value in overrides.items():
            section, key = _split(dotted)
            merged[section][key] = value
        return build_config(merged)


def fixed_shards(config: FedhhConfig) -> int | None:
    """``run.shards`` as a number, or ``None`` for ``"auto"`` (the federation's SuperNodes decide)."""
    shards = config.run.shards
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
        raise ConfigError(f"{dotted}: unknown key {key!r} in [{section}]; allowed keys: {list(known[section])}")
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
    if sections["run"]["simulation"] == "law" and sections["run"]["federation"] == "devices":
        raise ConfigError(
            'run.simulation: "law" simulates shards of a population; a devices federation runs '
            'real devices (use "users")'
        )
    if sections["run"]["simulation"] == "law" and sections["run"]["secure_aggregation"]:
        raise ConfigError(
            'run.simulation: "law" draws each shard\'s sum, not device reports to mask; '
            'set run.secure_aggregation = false or run.simulation = "users"'
        )
    if sections["population"]["source"] in ("file", "dataset") and not sections["population"]["path"]:
        raise ConfigError(f'population.path: required when population.source = "{sections["population"]["source"]}"')
    if sections["population"]["concentration"] and sections["population"]["source"] in ("file", "dataset"):
        raise ConfigError(
            "population.concentration: only users drawn from a law (wordfreq, zipf, exponential) "
            "have one; a file's or a dataset's users hold what they hold (use 0)"
        )
    _check_languages(sections)
    _check_party_shards(sections)
    return FedhhConfig(sections)


def _check_languages(sections: dict[str, dict[str, Any]]) -> None:
    """``population.languages``: distinct codes of a wordfreq population, as many as a protocol's parties."""
    population = sections["population"]
    if not population["languages"]:
        return
    languages = party_languages(population["languages"])
    if population["source"] != "wordfreq":
        raise ConfigError(
            f"population.languages: only a wordfreq population has languages, not "
            f'population.source = "{population["source"]}" (use "")'
        )
    if len(languages) < 2 or len(set(languages)) != len(languages) or not all(languages):
        raise ConfigError(
            f"population.languages: got {population['languages']!r}; allowed: two or more distinct "
            'wordfreq language codes, comma-separated ("en,fr,de,es")'
        )
    from .protocols.registry import PROTOCOLS

    spec = PROTOCOLS.get(sections["protocol"]["name"])
    parties = sections["protocol"].get("parties") if spec is not None and "parties" in spec.keys else None
    if parties is not None and parties != len(languages):
        raise ConfigError(
            f"population.languages: {len(languages)} languages but protocol.parties = {parties}; "
            "each party is one language"
        )


def _check_party_shards(sections: dict[str, dict[str, Any]]) -> None:
    """A law run of a protocol with parties (``protocol.parties``) over a population whose users are
    not drawn from one law (``population.languages``, a file, a dataset) needs shards within parties:
    its law sampler splits a shard across parties as exchangeable users (:mod:`fedhh.protocols.taps.law`)."""
    run, population = sections["run"], sections["population"]
    if run["simulation"] != "law" or not (population["languages"] or population["source"] in ("file", "dataset")):
        return
    from .protocols.registry import PROTOCOLS

    spec = PROTOCOLS.get(sections["protocol"]["name"])
    parties = sections["protocol"].get("parties") if spec is not None and "parties" in spec.keys else None
    if parties is None or (run["shards"] != AUTO_SHARDS and int(run["shards"]) % parties == 0):
        return
    what = "population.languages" if population["languages"] else f'population.source = "{population["source"]}"'
    raise ConfigError(
        f"run.shards: got {run['shards']!r}; a law simulation of {what} needs shards within parties: "
        f"a multiple of protocol.parties = {parties} (its parties' users are not drawn from one law)"
    )


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
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    )
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
