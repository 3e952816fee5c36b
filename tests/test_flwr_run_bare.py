"""A bare ``flwr run .``, the first command a Flower user types, runs the default job.

No federation config, no run config: Flower 1.41 and 1.42 start a local
SuperLink in simulation mode with their default federation (2 simulated
SuperNodes), and the app's ``run.shards = "auto"`` runs the default job (TrieHH
on 10^6 wordfreq users) on those two nodes.  The Flower home is fresh and
empty, as on a new machine.

``flwr run`` leaves its local SuperLink running (detached, in a session of
its own); this test stops it, and every process it started, by PID.  The
local SuperLink's ports are Flower's environment variables
(``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT``, ``FLWR_LOCAL_CONTROL_API_PORT``),
set to free ports: on the default ones, ``flwr run`` would submit the run to
whichever SuperLink another user left listening there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulations.deployment import free_port
from simulations.processes import descendant_identities, stop_leftovers

ROOT = Path(__file__).resolve().parents[1]
APP_FILES = ("pyproject.toml", "README.md", "fedhh", "strategies", "simulations")  # what `flwr run .` bundles
RUN_TIMEOUT = 600.0  # seconds; the default job takes about 20 s here on a quiet machine
STOP_GRACE = 10.0


class LocalFlower:
    """``flwr`` in an app folder, with its own Flower home and local SuperLink ports."""

    def __init__(self, app: Path, home: Path) -> None:
        self.app = app
        self.home = home
        bin_dir = Path(sys.executable).parent
        self.flwr = str(bin_dir / "flwr")
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "FLWR_HOME": str(home),
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
            "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # this environment, nothing installed per run
        }
        self.seen: dict[int, int] = {}  # every process of the local SuperLink's family seen: PID -> start time

    def command(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [self.flwr, *args], cwd=self.app, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        self.watch()
        return completed

    def submit(self, *args: str) -> int:
        """``flwr run . ARGS``: the run's id (the command returns once the run is submitted)."""
        completed = self.command("run", ".", *args)
        assert completed.returncode == 0, completed.stdout + completed.stderr
        words = completed.stdout.split()
        return int(words[words.index("run") + 1])  # "Successfully started run 1234"

    def outcome(self, run_id: int) -> tuple[str, str]:
        """(status, details) of a run once it has finished, as ``flwr ls`` reports it."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            listed = self.command("ls", "--run-id", str(run_id), "--format", "json")
            if listed.returncode == 0:
                (run,) = json.loads(listed.stdout)["runs"]
                if str(run["status"]).startswith("finished"):
                    return str(run["status"]), str(run.get("status-details", ""))
            time.sleep(2.0)
        raise TimeoutError(f"run {run_id} did not finish within {RUN_TIMEOUT:.0f} s:\n{self.log()}")

    def superlink(self) -> int | None:
        """The PID of the local SuperLink this Flower home started (its command line names its log file)."""
        marker = str(self.home / "local-superlink" / "superlink.log").encode()
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if marker in cmdline.read_bytes():
                    return int(cmdline.parent.name)
            except OSError:
                continue
        return None

    def watch(self) -> None:
        """Record the local SuperLink and every process below it now (Ray's, the apps'), to stop them later."""
        pid = self.superlink()
        if pid is not None:
            self.seen.update(_identity(pid))
            self.seen.update(descendant_identities(pid))

    def stop(self) -> list[int]:
        """Stop every process of the local SuperLink's family seen; the PIDs that were still running."""
        self.watch()
        return stop_leftovers(self.seen, STOP_GRACE)

    def log(self) -> str:
        log = self.home / "local-superlink" / "superlink.log"
        return log.read_text(encoding="utf-8", errors="replace")[-4000:] if log.exists() else "(no SuperLink log)"


def _identity(pid: int) -> dict[int, int]:
    """PID -> start time of one process (empty if it has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return {}
    return {pid: int(fields[19])}


@pytest.fixture
def flower(tmp_path: Path) -> Iterator[LocalFlower]:
    """The project's app files in a folder of their own (its results/ is the test's), a fresh Flower home."""
    app = tmp_path / "app"
    app.mkdir()
    for name in APP_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, app / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, app / name)
    home = tmp_path / "flwr-home"
    home.mkdir()
    local = LocalFlower(app, home)
    try:
        yield local
    finally:
        local.stop()
        assert local.superlink() is None, "the local SuperLink must be stopped"


def test_bare_flwr_run_runs_the_default_job(flower: LocalFlower) -> None:
    assert not any(flower.home.iterdir()), "the Flower home must start empty"
    started = time.monotonic()
    run_id = flower.submit()
    status, details = flower.outcome(run_id)
    seconds = time.monotonic() - started
    assert status == "finished:completed", f"{status}: {details}\n{flower.log()}"
    document = json.loads((flower.app / "results" / "flower" / "result.json").read_text(encoding="utf-8"))
    # the default job, on Flower's default federation: two SuperNodes, one shard each
    assert document["n_users"] == 1_000_000 and document["protocol"] == "triehh"
    assert document["config"]["run"]["shards"] == 2 and document["participation"]["nodes"] == 2
    found = [hit["item"] for hit in document["heavy_hitters"]]
    assert {"the", "to", "and", "of", "a", "in", "i", "is", "that", "for"} <= set(found[:12]), found[:20]
    assert document["evaluation"]["metrics"]["recall_at_k"]["10"] == 1.0
    print(f"bare `flwr run .`: run completed {seconds:.1f} s after the command")

    # A federation that cannot run the job stops at once with the fix (flwr itself exits 0).
    run_id = flower.submit("--run-config", f"run.shards=8 output-dir='{flower.app / 'results' / 'eight'}'")
    status, details = flower.outcome(run_id)
    assert status == "finished:failed", details
    assert 'run.shards = 8 but SuperNode' in details and 'set run.shards="auto"' in details, details
    assert "num-supernodes=8" in details, details
