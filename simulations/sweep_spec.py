"""A sweep file: a base experiment, the grid of values to try, and its trials, all checked up front.

A sweep file is TOML: an optional ``base`` config, inline sections applied
over it, and a ``[sweep]`` table of axes (dotted keys with lists of values),
zipped groups (``[sweep.zip]``, ``[[sweep.zip]]``), ``trials``, ``items`` and
``redraw_population`` (the format: ``docs/sweeps.md``).  The grid is the
product of the axes and the zipped groups.  Every grid point is validated as
a whole config before anything runs, with an error naming the key and the
point, and passes the checks ``fedhh run`` makes before it starts
(:func:`check_points`); a sweep of more than :data:`DEFAULT_MAX_TRIALS`
trials, counted from its axes before any point is made, needs
``--max-trials``.

Point ``p``'s trial ``i`` runs with the seed derived from the point's
``run.seed`` and ``i``; its population is drawn once with the point's
``run.seed`` and shared by every trial of the point (and every point with
the same population), unless ``redraw_population = true`` gives each trial
its own (a flag that is part of each trial's key).  Sweeps run on the fast
driver in process (the transport changes no result), so the transport keys
are not swept.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.config import ConfigError, FedhhConfig, Scalar, build_config, file_kind, read_config_text, schema
from fedhh.data.sources import held_items_per_user, make_source, sampled_candidates
from fedhh.errors import InputError
from fedhh.experiment import item_codec
from fedhh.kernels.randomness import derive_key
from fedhh.privacy.triehh import PrivacyTargetError
from fedhh.protocols import get_protocol, protocol_module
from fedhh.resources import require_population_memory

DEFAULT_TRIALS = 1
DEFAULT_ITEMS = 500
DEFAULT_MAX_TRIALS = 100_000  # trials a sweep may run without --max-trials (grid points x trials per point)
RESERVED = ("trials", "items", "redraw_population", "zip")
# A sweep runs every trial on the fast driver in one process: these keys choose a
# transport (which changes no result) or charge a real deployment's privacy ledger.
FIXED_KEYS: dict[str, Scalar] = {"run.driver": "fast", "run.backend": "inprocess", "run.shards": 1}
NOT_SWEPT = (
    *FIXED_KEYS,
    "run.federation",
    "run.round_timeout",
    "run.connect_timeout",
    "run.secure_aggregation",
    "privacy.ledger",
    "privacy.max_epsilon",
    "run.deny_list",
)
TRIAL_SEED_PURPOSE = "sweep.trial"
# Config keys added after sweeps were first written: at their defaults they change no result, so
# they stay out of a trial's key there, and re-running an earlier sweep finds its trials again.
LATER_KEYS = (
    "population.concentration",
    "population.per_user",
    "population.exponential_rate",
    "run.cap_to_top_k",
    "protocol.noise",
    "run.simulation",
    "privacy.model",
    "run.deny_list",
    "protocol.level_noise",
    "protocol.users_per_level",
    "protocol.extension",
    "protocol.max_prefixes",
    "protocol.data_selection",
    "protocol.choose_from",
    "protocol.contributions",
    "protocol.count_threshold",
    "protocol.adaptive",
    "protocol.max_vector",
    "population.languages",
    "protocol.parties",
    "protocol.consensus",
    "protocol.consensus_z",
    "protocol.tree_encoding",
    "protocol.tree_oracle",
    "protocol.levels",
    "protocol.candidate_cap",
    "protocol.kept_per_level",
)


class SweepError(InputError):
    """A sweep file that cannot run; the message names the key (and the grid point)."""


@dataclass(frozen=True)
class Trial:
    """One run of a sweep: a full config (``run.seed`` is the trial's seed) and where it sits in the grid."""

    key: str  # hash of everything that fixes the result
    point: int  # grid point, 0-based
    index: int  # trial at that point, 0-based
    values: dict[str, Scalar]  # the swept keys at this point
    config: FedhhConfig
    population_seed: int
    items: int
    protocol_module: str = ""  # the module that registers its protocol, if not one of fedhh's own

    @property
    def seed(self) -> int:
        return int(self.config["run"]["seed"])

    @functools.cached_property
    def population_key(self) -> str:
        """Equal for trials that share a population: same section, codec and seed."""
        return _digest({"vocabulary": self.vocabulary_key, "users": self.config["population"]["users"]})

    @functools.cached_property
    def vocabulary_key(self) -> str:
        """Equal for trials whose populations differ at most in size (one encoded vocabulary)."""
        section = {key: value for key, value in self.config["population"].items() if key != "users"}
        return _digest(
            {"population": section, "codec": item_codec(self.config).describe(), "seed": self.population_seed}
        )


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file: the base config, its axes, and how many trials per point."""

    path: Path
    text: str
    base_path: Path | None
    base_text: str
    base: FedhhConfig
    axes: dict[str, list[Scalar]]
    zipped: list[dict[str, list[Scalar]]] = field(default_factory=list)
    trials: int = DEFAULT_TRIALS
    items: int = DEFAULT_ITEMS
    redraw_population: bool = False

    @property
    def point_count(self) -> int:
        """The grid points, counted from the axes' lengths (the grid itself is not made)."""
        return math.prod(len(values) for values in self.axes.values()) * math.prod(
            len(next(iter(group.values()))) for group in self.zipped
        )

    @property
    def trial_count(self) -> int:
        return self.point_count * self.trials

    @property
    def swept_keys(self) -> list[str]:
        """Every key that varies, in file order (the zipped ones last)."""
        return [*self.axes, *(key for group in self.zipped for key in group)]

    def points(self) -> list[dict[str, Scalar]]:
        """The grid: one mapping of swept key to value per point."""
        dimensions: list[list[dict[str, Scalar]]] = [
            [{key: value} for value in values] for key, values in self.axes.items()
        ]
        for group in self.zipped:
            length = len(next(iter(group.values())))
            dimensions.append([{key: values[i] for key, values in group.items()} for i in range(length)])
        return [
            {key: value for part in combination for key, value in part.items()}
            for combination in itertools.product(*dimensions)
        ]

    def expand(self) -> list[Trial]:
        """Every trial of the grid, each point validated as a full config."""
        points = self.points()
        trials: list[Trial] = []
        for point, values in enumerate(points):
            where = f"sweep point {point + 1} of {len(points)} ({_describe(values)})"
            try:
                config = self.base.with_overrides(values)
            except ConfigError as error:
                raise SweepError(f"{where}: {error}") from None
            point_seed = int(config["run"]["seed"])
            for index in range(self.trials):
                seed = trial_seed(point_seed, index)
                trial_config = config.with_overrides({**FIXED_KEYS, "run.seed": seed})
                population_seed = seed if self.redraw_population else point_seed
                identity: dict[str, Any] = {
                    "config": _identity(trial_config),
                    "population_seed": population_seed,
                    "items": self.items,
                }
                if self.redraw_population:  # absent when false: the keys of shared-population sweeps never change
                    identity["redraw_population"] = True
                trials.append(
                    Trial(
                        _digest(identity),
                        point,
                        index,
                        dict(values),
                        trial_config,
                        population_seed,
                        self.items,
                        protocol_module(str(trial_config["protocol"]["name"])),
                    )
                )
        _check_distinct(trials, points)
        return trials


def _identity(config: FedhhConfig) -> dict[str, dict[str, Scalar]]:
    """The config as a trial's key reads it: every key but those of :data:`LATER_KEYS` at their defaults."""
    sections = config.to_dict()
    known = schema()
    for dotted in LATER_KEYS:
        section, _, key = dotted.partition(".")
        if sections[section][key] == known[section][key].default:
            del sections[section][key]
    return sections


def trial_seed(seed: int, index: int) -> int:
    """The seed of trial ``index`` at a point whose ``run.seed`` is ``seed`` (53 bits: exact in any table)."""
    return int(derive_key(seed, TRIAL_SEED_PURPOSE, index) >> np.uint64(11))


def load_sweep(path: str | Path, max_trials: int = DEFAULT_MAX_TRIALS) -> SweepSpec:
    """Read and check a sweep file of at most ``max_trials`` trials, and each of its grid points
    (:func:`check_points`); every error is a :class:`SweepError` naming the key."""
    if max_trials < 1:
        raise SweepError(f"--max-trials: must be >= 1, got {max_trials}")
    file = Path(path)
    text = _read(file, "sweep file")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SweepError(f"sweep file {str(file)!r} is not valid TOML: {error}") from None
    sweep = raw.pop("sweep", None)
    if not isinstance(sweep, Mapping):
        raise SweepError(f"sweep file {str(file)!r}: needs a [sweep] table (dotted config keys -> lists, trials)")
    base_name = raw.pop("base", None)
    base_path: Path | None = None
    sections: dict[str, Any] = {}
    base_text = ""
    if base_name is not None:
        if not isinstance(base_name, str) or not base_name:
            raise SweepError(f"base: expected the path of a config file, got {base_name!r}")
        base_path = (file.parent / base_name).resolve()
        base_text = _read(base_path, "base")
        try:
            sections = tomllib.loads(base_text)
        except tomllib.TOMLDecodeError as error:
            raise SweepError(f"base: {str(base_path)!r} is not valid TOML: {error}") from None
    for section, values in raw.items():  # inline sections override the base, key by key
        if isinstance(values, Mapping) and isinstance(sections.get(section), Mapping):
            sections[section] = {**sections[section], **values}
        else:
            sections[section] = values
    try:
        base = build_config(sections)
    except ConfigError as error:
        raise SweepError(f"sweep base config: {error}") from None
    if base["privacy"]["ledger"]:
        raise SweepError("privacy.ledger: a sweep simulates its populations and charges no ledger; remove the key")
    if base["run"]["deny_list"]:
        raise SweepError(
            "run.deny_list: a sweep's trials are independent runs on one population, not a chain of runs that "
            "deny what the earlier ones found (simulations/deny_chain_study.py runs such chains); remove the key"
        )
    trials = _count(sweep.get("trials", DEFAULT_TRIALS), "sweep.trials")
    items = _count(sweep.get("items", DEFAULT_ITEMS), "sweep.items")
    redraw = sweep.get("redraw_population", False)
    if not isinstance(redraw, bool):
        raise SweepError(f"sweep.redraw_population: expected true or false, got {redraw!r}")
    axes = {key: _axis(key, values, max_trials) for key, values in sweep.items() if key not in RESERVED}
    zipped = [_zip_group(group, index, max_trials) for index, group in enumerate(_zip_groups(sweep.get("zip")))]
    seen = set(axes)
    for group in zipped:
        for key in group:
            if key in seen:
                raise SweepError(f"sweep: {key} is swept twice (in [sweep] and [sweep.zip], or in two zip groups)")
            seen.add(key)
    spec = SweepSpec(file.resolve(), text, base_path, base_text, base, axes, zipped, trials, items, redraw)
    if spec.trial_count > max_trials:
        raise SweepError(
            f"sweep: {spec.point_count:,} grid points x {trials:,} trials per point = {spec.trial_count:,} trials, "
            f"more than the {max_trials:,} a sweep may run; --max-trials N raises the cap"
        )
    check_points(spec.expand())  # validates every grid point now, before anything runs
    return spec


def _read(file: Path, what: str) -> str:
    try:
        return read_config_text(file, what)
    except ConfigError as error:
        raise SweepError(str(error)) from None


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SweepError(f"{name}: expected an integer >= 1, got {value!r}")
    return value


def _axis(key: str, values: Any, max_values: int) -> list[Scalar]:
    """One swept key's values, each checked alone against the schema (points are checked whole later)."""
    if "." not in key:
        raise SweepError(
            f"sweep.{key}: unknown key; allowed: {list(RESERVED)} or a dotted config key such as "
            '"privacy.epsilon" (quoted in TOML)'
        )
    if key in NOT_SWEPT:
        raise SweepError(
            f"sweep: {key} cannot be swept (sweeps run every trial on the fast driver in process, "
            f"and charge no ledger); not sweepable: {list(NOT_SWEPT)}"
        )
    if not isinstance(values, list):
        raise SweepError(f"sweep: {key}: expected a list of values, got {values!r}")
    if not values:
        raise SweepError(f"sweep: {key}: empty list; give at least one value")
    if len(values) > max_values:
        raise SweepError(
            f"sweep: {key}: {len(values):,} values, more than the {max_values:,} trials a sweep may run; "
            "--max-trials N raises the cap"
        )
    section, _, name = key.partition(".")
    known = schema()
    if section not in known:
        raise SweepError(f"sweep: {key}: unknown section {section!r}; allowed sections: {list(known)}")
    if name not in known[section]:
        raise SweepError(f"sweep: {key}: unknown key {name!r} in [{section}]; allowed keys: {list(known[section])}")
    checked: list[Scalar] = []
    seen: set[Scalar] = set()
    for value in values:
        try:  # the value alone; rules across keys are checked on each whole grid point
            normalised = known[section][name].validate(key, value)
        except ConfigError as error:
            raise SweepError(f"sweep: {key} = {value!r}: {error}") from None
        if normalised in seen:
            raise SweepError(f"sweep: {key}: value {value!r} appears twice")
        seen.add(normalised)
        checked.append(normalised)
    return checked


def _zip_groups(raw: Any) -> list[Mapping[str, Any]]:
    if raw is None:
        return []
    if isinstance(raw, Mapping):
        return [raw]
    if isinstance(raw, list) and all(isinstance(group, Mapping) for group in raw):
        return raw
    raise SweepError(f"sweep.zip: expected a table (or an array of tables) of equal-length lists, got {raw!r}")


def _zip_group(group: Mapping[str, Any], index: int, max_values: int) -> dict[str, list[Scalar]]:
    if not group:
        raise SweepError(f"sweep.zip (group {index + 1}): empty table")
    axes: dict[str, list[Scalar]] = {}
    for key, values in group.items():
        if isinstance(values, list) and 0 < len(values) <= max_values:
            # paired values may repeat (e.g. one oracle for two protocols): check each alone
            axes[key] = [_axis(key, [value], 1)[0] for value in values]
        else:
            axes[key] = _axis(key, values, max_values)
    lengths = {key: len(values) for key, values in axes.items()}
    if len(set(lengths.values())) > 1:
        raise SweepError(f"sweep.zip (group {index + 1}): lists must have one length, got {lengths}")
    return axes


def check_points(trials: Sequence[Trial]) -> None:
    """Refuse, before any trial runs, a grid point that ``fedhh run`` would refuse before it starts.

    Checked once per point (its trials share its population and target):

    * its population's path: it exists, and for ``source = "file"`` it is
      a regular file (``/dev/zero`` or a FIFO would be read without end);
      a population on disk is opened as a run opens it;
    * the memory its population needs (:mod:`fedhh.resources`) and, for a
      sampled population, the memory encoding its candidates takes
      (:meth:`fedhh.data.items.ItemCodec.require_memory_to_encode`), as a run
      checks them: a point of 10^12 users is refused with the numbers
      instead of failing in every trial;
    * its privacy target, solved as a run solves it: any error in the
      protocol's parameters is refused, and so is a target the protocol
      refuses at a δ not below 1/n, where (ε, δ)-DP means nothing.  A
      target the point's population is too small to meet is a finding of
      the study, not a mistake: its trials record the error, and the sweep
      exits with status 3.

    A file population's size is known only once it is read: its trials
    check its memory and target.
    """
    solved: set[str] = set()
    points = trials[-1].point + 1 if trials else 0
    for trial in trials:
        if trial.index:
            continue
        where = f"sweep point {trial.point + 1} of {points} ({_describe(trial.values)})"
        try:
            _check_point(trial.config, trial.population_seed, solved)
        except InputError as error:
            raise SweepError(f"{where}: {error}") from None


def _check_point(config: FedhhConfig, seed: int, solved: set[str]) -> None:
    population = config["population"]
    words = int(population["words_per_user"])
    if population["source"] in ("file", "dataset"):
        _check_population_path(str(population["path"]), str(population["source"]))
    if population["source"] == "file":
        return
    codec = item_codec(config)
    if population["source"] == "dataset":
        source = make_source(population, codec, seed)  # its manifest and vocabulary, as a run opens it
        source.require_memory(words)
        users = source.n_users
    else:
        users = int(population["users"])
        drawn_from = {
            key: value
            for key, value in population.items()
            if key not in ("users", "words_per_user", "concentration", "per_user")
        }
        vocabulary = _digest({"candidates": drawn_from, "codec": codec.describe(), "seed": seed})
        if vocabulary not in solved:  # one encoding check per vocabulary: drawing zipf's takes a while
            codec.require_memory_to_encode(sampled_candidates(population, codec, seed) or [])
            solved.add(vocabulary)
        require_population_memory(users, held_items_per_user(population, codec))
    target = _digest(
        {"protocol": config["protocol"], "privacy": config["privacy"], "users": users, "codec": codec.describe()}
    )
    if target in solved:
        return
    try:
        get_protocol(str(config["protocol"]["name"])).build_server(
            config["privacy"], users, codec, seed, protocol=config["protocol"]
        )
    except PrivacyTargetError:
        if float(config["privacy"]["delta"]) * users >= 1:
            raise
    solved.add(target)


def _check_population_path(path: str, source: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"population.path: {path!r} does not exist") from None
    except (OSError, ValueError) as error:
        raise InputError(
            f"population.path: cannot read {path!r} ({getattr(error, 'strerror', None) or error})"
        ) from None
    if source == "file" and not stat.S_ISREG(mode):
        raise InputError(f"population.path: {path!r} is {file_kind(mode)}, not a regular file")


def _check_distinct(trials: Sequence[Trial], points: Sequence[dict[str, Scalar]]) -> None:
    """Two points with the same config would be one experiment counted twice."""
    first: dict[str, Trial] = {}
    for trial in trials:
        other = first.setdefault(trial.key, trial)
        if other is not trial:
            raise SweepError(
                f"sweep: points {other.point + 1} ({_describe(points[other.point])}) and {trial.point + 1} "
                f"({_describe(points[trial.point])}) are the same experiment; make the values distinct"
            )


def _describe(values: Mapping[str, Scalar]) -> str:
    return ", ".join(f"{key} = {value!r}" for key, value in values.items()) or "the base config"


def _digest(document: Mapping[str, Any]) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:20]
