"""A Ray that fedhh starts: without its autoscaler monitor, working, and gone afterwards."""

from __future__ import annotations

import os

import pytest

from simulations.processes import descendant_identities, still_running
from simulations.ray_runtime import ray_runtime


def test_a_ray_started_here_runs_without_its_monitor_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray._private import ray_constants, worker

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    earlier = descendant_identities(os.getpid())  # processes of earlier tests are not Ray's
    with ray_runtime(num_cpus=1, logging_level="ERROR", log_to_driver=False, configure_logging=False):
        node = worker._global_node
        monitors = node.all_processes[ray_constants.PROCESS_TYPE_MONITOR]
        assert monitors and all(info.process.poll() is not None for info in monitors)  # stopped
        assert all(info.process.poll() is None for info in node.all_processes[ray_constants.PROCESS_TYPE_RAYLET])
        assert ray.get(ray.put(list(range(10)))) == list(range(10))
        started = {pid: since for pid, since in descendant_identities(os.getpid()).items() if pid not in earlier}
        assert started
    assert not ray.is_initialized()
    assert still_running(started) == []
