"""Configs: defaults, overrides, flat (Flower) form, shipped files, strict validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhh.config import ConfigError, build_config, config_from_flat, load_config, parse_override

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.toml"))


def test_defaults_are_the_documented_default_run() -> None:
    config = load_config()
    assert config.get("population.source") == "wordfreq"
    assert config.get("population.users") == 1_000_000
    assert config.get("protocol.name") == "triehh"
    assert config.get("protocol.max_length") == 10
    assert (config.get("privacy.epsilon"), config.get("privacy.delta")) == (4.0, 1e-12)
    assert config.get("run.driver") == "flower"


def test_the_shipped_default_config_equals_the_built_in_defaults() -> None:
    assert load_config(Path(__file__).parent.parent / "configs" / "default.toml") == load_config()


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_is_valid(path: Path) -> None:
    load_config(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("run.seed=3", 3), ("privacy.delta=1e-9", 1e-9), ("run.driver=fast", "fast"),
     ('run.driver="fast"', "fast"), ("population.path=/tmp/a b.txt", "/tmp/a b.txt")],
)
def test_override_values_are_read_as_toml_then_as_text(text: str, expected: object) -> None:
    assert parse_override(text)[1] == expected


def test_integers_are_accepted_for_floats_but_not_the_reverse() -> None:
    assert load_config(None, ["privacy.epsilon=2"]).get("privacy.epsilon") == 2.0
    with pytest.raises(ConfigError, match="run.seed: expected int, got float"):
        load_config(None, ["run.seed=1.5"])
    with pytest.raises(ConfigError, match="run.shards: expected int or 'auto', got bool"):
        load_config(None, ["run.shards=true"])


def test_run_shards_is_a_number_or_auto() -> None:
    from fedhh.config import DEFAULT_SHARDS, fixed_shards, with_fixed_shards

    auto = load_config(None, ['run.shards="auto"'])
    assert auto.get("run.shards") == "auto" and fixed_shards(auto) is None
    assert with_fixed_shards(auto).get("run.shards") == DEFAULT_SHARDS
    assert fixed_shards(load_config(None, ["run.shards=3"])) == 3
    with pytest.raises(ConfigError, match="run.shards: expected int or 'auto', got str 'many'"):
        load_config(None, ['run.shards="many"'])


def test_flat_form_round_trips_and_ignores_foreign_keys() -> None:
    config = load_config(None, ["population.users=1234", "run.seed=9"])
    flat = {**config.to_flat(), "fedhh-output-dir": "/tmp/x"}
    assert config_from_flat(flat) == config


@pytest.mark.parametrize(
    ("raw", "message"),
    [({"population": {"users": 0}}, "population.users: got 0; must be >= 1"),
     ({"protocol": {"unit_size": 5}}, "protocol.unit_size: got 5; must be in 1..4"),
     ({"privacy": {"delta": 1.5}}, "privacy.delta"),
     ({"privacy": {"epsilon": float("inf")}}, "privacy.epsilon"),
     ({"population": {"source": "file"}}, "population.path: required"),
     ({"run": 3}, "[run] must be a table"),
     ({"extra": {}}, "unknown section [extra]")],
)
def test_invalid_values_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        build_config(raw)
    assert message in str(error.value)


def test_override_without_equals_sign() -> None:
    with pytest.raises(ConfigError, match="expected section.key=value"):
        parse_override("run.seed")
