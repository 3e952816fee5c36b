"""Shared fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from simulations.deployment import LocalDeployment, ManagedProcess

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


@pytest.fixture(autouse=True)
def _flower_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower keeps federations in its home folder: never touch the real one."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path_factory.mktemp("flwr-home")))


@pytest.fixture(autouse=True, scope="session")
def _fedhh_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """fedhh's cache folder (``FEDHH_CACHE_DIR``, :mod:`fedhh.data.cache`) for the whole test run: never the
    real one."""
    previous = os.environ.get("FEDHH_CACHE_DIR")
    os.environ["FEDHH_CACHE_DIR"] = str(tmp_path_factory.mktemp("fedhh-cache"))
    yield
    if previous is None:
        os.environ.pop("FEDHH_CACHE_DIR", None)
    else:
        os.environ["FEDHH_CACHE_DIR"] = previous


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[LocalDeployment]:
    """A SuperLink on a free loopback port; every process is gone after the test."""
    started: list[ManagedProcess] = []
    try:
        with LocalDeployment(tmp_path / "deployment") as local:
            local.start_superlink()
            yield local
            started = list(local.processes)
    finally:
        assert not [process.name for process in started if process.alive()], "every process group must be stopped"
