"""The SuperNode of ``simulations.supernode``: Flower's, with its idle waits capped.

The deployment tests (``tests/test_deployment.py``, ``tests/test_failures.py``)
run every SuperNode this way, with its long-running ClientApp process, and
check that a deployment still finds what a simulation finds; here, without
any process, that the cap is what it says.
"""

from __future__ import annotations

import time

import flwr.supernode.start_client_internal as fleet_loop
import pytest

from simulations.supernode import CappedSleep, cap_idle_waits, main


def test_capped_sleep_cuts_flowers_three_seconds_and_keeps_the_rest_of_time() -> None:
    capped = CappedSleep(time, 0.05)
    started = time.monotonic()
    capped.sleep(3)  # the fleet loop's idle wait in Flower 1.41 and 1.42
    assert time.monotonic() - started < 1.0
    assert capped.monotonic() >= started and capped.time is time.time


def test_cap_applies_to_flowers_fleet_loop_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_loop, "time", fleet_loop.time)  # restored after the test
    cap_idle_waits(0.1)
    assert isinstance(fleet_loop.time, CappedSleep) and fleet_loop.time.limit == 0.1
    assert time.sleep is not fleet_loop.time.sleep, "the process's own time module is untouched"


@pytest.mark.parametrize("limit", [0.0, 0.001, 3.5, float("nan")])
def test_idle_poll_out_of_range_is_refused(limit: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_loop, "time", fleet_loop.time)
    with pytest.raises(ValueError, match=r"--idle-poll: must be in 0.01..3 seconds"):
        cap_idle_waits(limit)
    with pytest.raises(SystemExit, match=r"--idle-poll: must be in 0.01..3 seconds"):
        main(["--idle-poll", str(limit), "--insecure"])
    assert fleet_loop.time is time


def test_clientapp_process_refuses_another_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_loop, "time", fleet_loop.time)
    with pytest.raises(SystemExit, match="--clientapp-process sets --isolation process itself"):
        main(["--clientapp-process", "--isolation", "subprocess", "--insecure"])
