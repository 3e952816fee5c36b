"""One SIGINT or SIGTERM stops a Flower-driver ``fedhh run`` cleanly.

A real ``fedhh run`` (Flower simulation on Ray, small population) runs as a
subprocess in a session of its own; once its SuperNodes are admitted (or,
for SIGTERM, while Flower's engine is still starting), one signal goes to
its PID alone.  Within 10 s it must exit with 130 (SIGINT)
or 143 (SIGTERM), every process it started (Ray's GCS, raylet, agents and
workers) must be gone, and it must leave no results folder, staging or
lock file, and no temporary folder.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulations.processes import descendant_identities, still_running

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 10.0  # seconds from the signal to the exit, and to the last of its processes
RUN = [
    "run", "--set", 'population.source="zipf"', "--set", "population.users=20000", "--set", "population.vocabulary=2000",
    "--set", "population.item_length=8", "--set", "protocol.max_length=8", "--set", "privacy.epsilon=8",
    "--set", "run.shards=2", "--set", 'run.driver="flower"',
]
ADMITTED = "node(s) admitted"  # the server's log line just before round 1
STARTING = "one shard of users each"  # the server's first line, while Flower's engine starts its actors


@pytest.fixture
def short_tmpdir() -> Iterator[Path]:
    """A TMPDIR for the run: short, since Ray puts its sockets there (107 bytes at most for their paths)."""
    folder = Path(tempfile.mkdtemp(prefix="fedhh-test-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)  # Ray's session logs


def wait_for_line(process: subprocess.Popen[bytes], marker: str, timeout: float) -> tuple[str, dict[int, int]]:
    """The output until ``marker`` appears, and every process seen below ``process`` meanwhile."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    output, seen = b"", {}
    deadline = time.monotonic() + timeout
    while marker.encode() not in output:
        assert time.monotonic() < deadline, f"no {marker!r} within {timeout:.0f} s:\n{output.decode(errors='replace')}"
        assert process.poll() is None, f"the run ended early:\n{output.decode(errors='replace')}"
        seen.update(descendant_identities(process.pid))
        if selector.select(timeout=0.2):
            output += os.read(process.stdout.fileno(), 65536)
    seen.update(descendant_identities(process.pid))
    selector.close()
    return output.decode(errors="replace"), seen


@pytest.mark.parametrize(
    ("signum", "status", "when"), [(signal.SIGINT, 130, ADMITTED), (signal.SIGTERM, 143, STARTING)]
)
def test_one_signal_stops_a_flower_run_and_everything_it_started(
    tmp_path: Path, short_tmpdir: Path, signum: int, status: int, when: str
) -> None:
    scratch = short_tmpdir
    output = tmp_path / "results" / "run"
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "simulations.cli", *RUN, "--output", str(output)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        before, started = wait_for_line(process, when, timeout=240)
        assert started, "the run must have started Ray's processes"
        os.kill(process.pid, signum)
        signalled = time.monotonic()
        rest, _ = process.communicate(timeout=DEADLINE + 5)
        exited = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    transcript = before + rest.decode(errors="replace")
    assert process.returncode == status, transcript
    assert exited <= DEADLINE, f"exited {exited:.1f} s after the signal"
    assert f"interrupted ({signal.Signals(signum).name})" in transcript
    assert "Traceback" not in transcript, transcript
    while still_running(started) and time.monotonic() < signalled + DEADLINE:
        time.sleep(0.1)
    assert not still_running(started), f"processes left running: {still_running(started)}"
    assert not output.exists(), "no partial result"
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir()), "no staging or lock file"
    leftovers = [p.name for p in scratch.iterdir() if p.name.startswith("fedhh-")]
    assert leftovers == [], "no temporary folder of fedhh's"
