"""Shared fixtures."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


@pytest.fixture(autouse=True)
def _flower_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower keeps federations in its home folder: never touch the real one."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path_factory.mktemp("flwr-home")))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
