"""A real two-node Ray cluster on this machine: the fast driver, the Flower simulation and ``fedhh sweep`` join it unchanged.

The cluster (``ray.cluster_utils.Cluster``: a head node and a second node,
each a raylet with its own object store, in a temporary folder of its own)
is started and torn down by the test through its own handles; every
process it started is gone afterwards.  Nothing here stops processes by
name or machine-wide.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from simulations.cli import main
from simulations.processes import descendant_identities
from simulations.sweep_trial import TIMING_COLUMNS

from .helpers import processes_left_behind

SMALL = ["--set", "run.driver=fast", "--set", "population.users=30000", "--set", "population.vocabulary=3000",
         "--set", "run.shards=4", "--set", "run.seed=5", "--quiet"]
SWEEP = """
[population]
users = 20_000
vocabulary = 2000
[sweep]
trials = 1
"privacy.epsilon" = [4, 8]
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """Two Ray nodes of one CPU each; yields the head's address, then stops every process it started."""
    from ray.cluster_utils import Cluster

    before = descendant_identities(os.getpid())
    temp = tempfile.mkdtemp(prefix="fedhh-ray-")  # short: Ray's socket paths must fit in 107 bytes
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "temp_dir": temp,
                                                             "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()
        left = processes_left_behind(before)
        shutil.rmtree(temp, ignore_errors=True)  # the folder this fixture made
        assert not left, f"the cluster left processes behind: {left}"


def test_a_run_naming_no_cluster_does_not_join_one_that_ray_start_recorded(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's own discovery reports the fixture's cluster as the last one ``ray start`` recorded on
    this machine (what another user's ``ray start`` leaves in /tmp/ray); a run that names no
    cluster still starts a Ray of its own."""
    import ray
    import ray._private.services as services

    from simulations.ray_runtime import ray_runtime

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: cluster)
    assert services.get_ray_address_from_environment(None, None) == cluster, "Ray would join it"
    with ray_runtime(num_cpus=1):
        assert ray.get_runtime_context().gcs_address != cluster
    assert not ray.is_initialized()


def test_fast_driver_on_a_two_node_cluster_gives_the_single_process_result(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["run", *SMALL, "--set", "run.backend=inprocess", "--output", str(tmp_path / "local")]) == 0
    assert main(["run", *SMALL, "--ray-address", cluster, "--output", str(tmp_path / "cluster")]) == 0
    assert not ray.is_initialized()  # the run disconnected; the cluster is still the fixture's
    assert "RAY_ADDRESS" not in os.environ  # --ray-address named the cluster for that run only
    local, remote = (json.loads((tmp_path / name / "result.json").read_text()) for name in ("local", "cluster"))
    assert remote["transport"] == "fast/ray" and local["transport"] == "fast/inprocess"
    for key in ("heavy_hitters", "rounds", "evaluation", "privacy"):
        assert remote[key] == local[key], key
    assert local["heavy_hitters"]


def test_flower_simulation_on_a_two_node_cluster_gives_the_single_process_result(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fedhh run --ray-address`` with the Flower driver: one ClientApp actor on each of the
    cluster's two nodes (sized by the cluster's CPUs, not this machine's), the same discovery."""
    import ray

    flower = [*SMALL, "--set", "run.driver=flower"]
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["run", *SMALL, "--set", "run.backend=inprocess", "--output", str(tmp_path / "local")]) == 0
    assert main(["run", *flower, "--ray-address", cluster, "--output", str(tmp_path / "cluster")]) == 0
    assert not ray.is_initialized() and "RAY_ADDRESS" not in os.environ
    local, remote = (json.loads((tmp_path / name / "result.json").read_text()) for name in ("local", "cluster"))
    assert remote["transport"] == "flower" and remote["participation"]["lost_shards"] == []
    for key in ("heavy_hitters", "evaluation"):
        assert remote[key] == local[key], key
    assert local["heavy_hitters"]


def test_sweep_on_a_two_node_cluster_gives_the_single_process_tables(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = tmp_path / "tiny.toml"
    sweep.write_text(SWEEP)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["sweep", str(sweep), "--output", str(tmp_path / "local"), "--workers", "1", "--quiet"]) == 0
    monkeypatch.setenv("RAY_ADDRESS", cluster)  # the sweep's default address
    assert main(["sweep", str(sweep), "--output", str(tmp_path / "cluster"), "--quiet"]) == 0

    def rows(folder: str) -> list[dict]:
        table = pq.read_table(tmp_path / folder / "trials.parquet").to_pylist()
        return sorted(({k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in table),
                      key=lambda row: row["trial_key"])

    assert rows("cluster") == rows("local") and len(rows("local")) == 2


@pytest.mark.parametrize("how", ["variable", "option"])
def test_ray_address_auto_is_refused(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``auto`` would join whatever cluster Ray finds on the machine: refused before anything runs."""
    sweep = tmp_path / "tiny.toml"
    sweep.write_text(SWEEP)
    if how == "variable":
        monkeypatch.setenv("RAY_ADDRESS", "auto")
        run, sweep_args = ["run", *SMALL], ["sweep", str(sweep), "--quiet"]
    else:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        run, sweep_args = ["run", *SMALL, "--ray-address", "auto"], ["sweep", str(sweep), "--ray-address", " AUTO", "--quiet"]
    assert main([*run, "--output", str(tmp_path / "run")]) == 2
    assert "'auto' lets Ray join any cluster" in capsys.readouterr().err
    assert main([*sweep_args, "--output", str(tmp_path / "sweep")]) == 2
    assert "'auto' lets Ray join any cluster" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()


def test_a_cluster_that_does_not_answer_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stale RAY_ADDRESS (a cluster stopped since) would keep ray.init waiting for minutes."""
    import socket

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    started = time.monotonic()
    assert main(["run", *SMALL, "--ray-address", address, "--output", str(tmp_path / "run")]) == 2
    assert f"no Ray cluster answers at {address}" in capsys.readouterr().err
    assert time.monotonic() - started < 30 and not (tmp_path / "run").exists()
