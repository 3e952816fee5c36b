"""Random configs and sweep files: every outcome is a result or one line of refusal, never a traceback.

Hypothesis writes TOML files from random sections, keys, types, sizes and
Unicode text, over a small valid base (so that what is valid runs in a
moment), and runs ``fedhh run`` and ``fedhh sweep`` on them in this
process.  The property: exit status 0, or 2 with exactly one line on
stderr that starts with ``error:``; for a sweep also 3 (some trials
failed, said in one line); never a traceback, and every example ends
within a time bound (a hang, such as a grid that is materialised before it
is counted, fails it).

The examples are derandomized (the same on every run, so the test cannot
be flaky) and few.  Keys that set how long a valid run takes stay within
small values (users, vocabulary, item lengths, words per user; no Flower or
Ray transport): their extremes are refused by the memory checks, which
are tested with their numbers elsewhere.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedhh.config import schema
from simulations.cli import main

EXAMPLES = 25
SECONDS = 60  # per example: a bound on hangs, not a speed target (the machine is shared)
BASE = {
    "population": {"source": "zipf", "users": 2000, "vocabulary": 200, "item_length": 3},
    "protocol": {"max_length": 3},
    "privacy": {"epsilon": 8.0, "delta": 1e-4},
    "run": {"driver": "fast", "backend": "inprocess", "shards": 1, "top_k": 10},
}
# What a valid value of these keys costs grows with it: small values only, and no transport but in-process.
SIZES = ("population.users", "population.vocabulary", "population.item_length", "population.words_per_user",
         "protocol.max_length", "protocol.unit_size", "run.shards")
CHOSEN = {
    "run.driver": ["fast", "Fast", "", "flwr"],
    "run.backend": ["inprocess", "auto", "", "rayy"],
    "population.source": ["zipf", "wordfreq", "file", "dataset", "", "ZIPF"],
    "population.path": ["", "missing.csv", "/dev/zero", ".", "/proc/self/status", "population.txt"],
    "protocol.name": ["triehh", "pem", "treehist", "bitstogram", "spm", "mcm", "rappor", "sfp", "", "TrieHH"],
    "run.federation": ["shards", "devices", ""],
}
KNOWN = [f"{section}.{key}" for section, keys in schema().items() for key in keys]

text = st.text(max_size=12)
scalars = st.one_of(
    st.booleans(), st.integers(-3, 300), st.sampled_from([0, 10**12, 2**63, 2**64, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, 5e-324, -0.0, 1e-12, 0.5]), text,
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=3),
                      max_leaves=6)
small = st.one_of(st.integers(-3, 300), st.booleans(), st.floats(allow_nan=True, allow_infinity=True), text)


def plausible(dotted: str) -> st.SearchStrategy[Any]:
    """Values of a known key's own type, in a modest range (most of them valid)."""
    section, key = dotted.split(".", 1)
    declared = schema()[section][key]
    if declared.choices:
        return st.sampled_from(declared.choices)
    if declared.type is bool:
        return st.booleans()
    if declared.type is int:
        return st.integers(0, 40)
    if declared.type is float:
        return st.floats(1e-9, 16)
    return text


@st.composite
def entries(draw: st.DrawFn) -> tuple[str, str, Any]:
    """One (section, key, value): a known key or random text, with a value of its type or of any."""
    if draw(st.booleans()):
        dotted = draw(st.sampled_from(KNOWN))
        section, key = dotted.split(".", 1)
    else:
        section = draw(st.sampled_from([*schema(), "sweep"]) | text)
        key = draw(text)
        dotted = f"{section}.{key}"
    if dotted in CHOSEN:
        value = draw(st.sampled_from(CHOSEN[dotted]) | small)
    elif dotted in SIZES:
        value = draw(small)
    elif dotted in KNOWN and draw(st.booleans()):
        value = draw(plausible(dotted))
    else:
        value = draw(values)
    return section, key, value


@st.composite
def configs(draw: st.DrawFn, most: int = 4) -> dict[str, Any]:
    """The small base with a few random entries over it (a whole section replaced now and then)."""
    config: dict[str, Any] = {section: dict(keys) for section, keys in BASE.items()}
    for section, key, value in draw(st.lists(entries(), max_size=most)):
        table = config.setdefault(section, {})
        if isinstance(table, dict):
            table[key] = value
    if draw(st.integers(0, 9)) == 5:  # [run] stays: without it the default transport is Flower
        config[draw(st.sampled_from(["population", "protocol", "privacy"]))] = draw(values)
    return config


@st.composite
def sweep_files(draw: st.DrawFn) -> dict[str, Any]:
    """A config with a [sweep] table: random axes (known keys or not), trials, items and zip groups."""
    document = draw(configs(most=1))
    sweep: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        section, key, value = draw(entries())
        if draw(st.integers(0, 3)) != 2:  # mostly a list of values
            value = draw(st.lists(st.just(value) if draw(st.booleans()) else small, max_size=4))
        sweep[key if draw(st.integers(0, 4)) == 2 else f"{section}.{key}"] = value
    if draw(st.booleans()):
        sweep["trials"] = draw(st.one_of(st.integers(-1, 3), st.sampled_from([10**12, 2**63]), values))
    if draw(st.booleans()):
        sweep["items"] = draw(st.one_of(st.integers(-1, 60), values))
    if draw(st.integers(0, 3)) == 2:
        sweep["zip"] = draw(st.dictionaries(st.sampled_from(KNOWN) | text, st.lists(small, max_size=3), max_size=2)
                            | values)
    if draw(st.integers(0, 9)) != 5:  # now and then no [sweep] table at all
        document["sweep"] = sweep
    if draw(st.integers(0, 5)) == 3:
        document["base"] = draw(st.sampled_from(["/dev/zero", "missing.toml", ".", ""]) | text)
    return document


def toml(document: dict[str, Any]) -> str:
    """``document`` as TOML: top-level scalars first, then one table per section (nested ones inline)."""
    lines = [f"{_key(key)} = {_value(value)}" for key, value in document.items() if not isinstance(value, dict)]
    for section, table in document.items():
        if isinstance(table, dict):
            lines.append(f"[{_key(section)}]")
            lines += [f"{_key(key)} = {_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return _string(key)


def _string(text: str) -> str:
    escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08X}" for c in text)
    return f'"{escaped}"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{_key(key)} = {_value(item)}" for key, item in value.items()) + "}"


def outcome(arguments: list[str], text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    """Run ``fedhh`` on a file holding ``text`` in a fresh folder; its status, stderr and seconds."""
    with tempfile.TemporaryDirectory(prefix="fedhh-random-") as folder, contextlib.chdir(folder):
        Path("population.txt").write_text("the\nthe\nof\n", encoding="utf-8")
        Path("input.toml").write_text(text, encoding="utf-8")
        capsys.readouterr()
        started = time.perf_counter()
        status = main([arguments[0], "input.toml", *arguments[1:]])
        seconds = time.perf_counter() - started
        return status, capsys.readouterr().err, seconds


def check(status: int, error: str, seconds: float, allowed: set[int], text: str) -> None:
    where = f"\n--- input ---\n{text}--- stderr ---\n{error}"
    assert "Traceback" not in error and "internal error" not in error, where
    assert status in allowed, f"exit status {status}{where}"
    if status == 2:
        assert error.startswith("error: ") and error.count("\n") == 1, f"not one line{where}"
    assert seconds < SECONDS, f"{seconds:.0f} s{where}"


RANDOM = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@RANDOM
@given(document=configs())
@example(document={**BASE, "population": {**BASE["population"], "users\n2": 3}})  # a newline in a key
def test_a_random_config_runs_or_is_refused_in_one_line(document: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    text = toml(document)
    status, error, seconds = outcome(["run", "--output", "out", "--quiet"], text, capsys)
    check(status, error, seconds, {0, 2}, text)


@RANDOM
@given(document=sweep_files())
@example(document={**BASE, "sweep": {"\u0085y\n": [0, False], "protocol.fragment_sketch_width": ["\x0c", 0]}})
@example(document={**BASE, "sweep": {"trials": 10**12, "privacy.epsilon": [1.0, 2.0]}})
def test_a_random_sweep_file_runs_or_is_refused_in_one_line(
    document: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    text = toml(document)
    status, error, seconds = outcome(["sweep", "--output", "out", "--workers", "1", "--quiet", "--max-trials", "6"],
                                     text, capsys)
    check(status, error, seconds, {0, 2, 3}, text)
    if status == 3:
        assert "trials failed: their errors are in the error column" in error
