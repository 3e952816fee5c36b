"""A real Flower deployment on this machine: one SuperLink, its SuperNodes, ``flwr run``.

This is the third transport, next to the simulation and the fast driver:
separate ``flower-superlink`` and ``flower-supernode`` processes talking
over HTTP on the loopback interface, exactly as they would across
machines, with the project's ServerApp and ClientApp loaded from its
Flower app bundle.  Tests use it to check that a deployment finds what a
simulation finds and survives nodes that crash or stall; people use it
(``python -m simulations.deployment``) to see a deployment run before
spreading it over machines (``docs/deployment.md``).

Every process is started in its own process group, so stopping it stops
what it spawned too (Flower's SuperNode, 1.41 and 1.42, starts a
``flower-superexec`` that starts one ``flwr-clientapp`` process per
message).

SuperNodes start fast by default (``docs/deployment.md``, "Time per
round"): each is Flower's SuperNode with its idle poll capped at
``idle_poll`` seconds (``simulations.supernode``; Flower's own waits 3 s)
and ``--isolation process``, served by one long-running ClientApp process
(``simulations.clientapp_process``) that the SuperNode starts in its
process group, so that crashing, pausing or stopping the node does the
same to it.
``LocalDeployment(..., idle_poll=None, clientapp_process=False)`` starts
Flower's ``flower-supernode`` as it comes.
:class:`LocalDeployment` is a context manager that stops everything it
started, also when the code using it fails.  Addresses are always
``127.0.0.1`` and the connection is insecure (no TLS): this is for one
machine only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from fedhh.config import FedhhConfig, Scalar, fixed_shards, parse_override
from fedhh.errors import InputError, one_line

from .interrupts import exit_status, interruptible
from .processes import descendants, processes
from .supernode import IDLE_POLL

LOOPBACK = "127.0.0.1"
CONNECTION = "local"  # the SuperLink connection's name in $FLWR_HOME/config.toml
PROJECT_ROOT = Path(__file__).resolve().parents[1]
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL
DEFAULT_SUPERNODES = 3  # python -m simulations.deployment without --supernodes or run.shards


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def config_arg(values: Mapping[str, Scalar]) -> str:
    """``key=value`` pairs as Flower's ``--run-config`` / ``--node-config`` read them (TOML values)."""
    parts = []
    for key, value in values.items():
        if isinstance(value, str) and '"' in value:
            raise InputError(f"{key}: Flower's config syntax cannot carry a double quote, got {value!r}")
        parts.append(f"{key}={json.dumps(value)}")
    return " ".join(parts)


@dataclass
class ManagedProcess:
    """A started process group, its log file, and signals for it.

    Flower's SuperLink starts its ``flower-superexec`` in a session of its
    own, so stopping a process also signals every descendant seen when
    the stop began, not only the group.
    """

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    family: set[int] = field(default_factory=set)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the whole group and to every descendant seen so far."""
        if self.process.poll() is None:
            self.family |= descendants(self.process.pid)
        for send, target in ((os.killpg, self.process.pid), *((os.kill, pid) for pid in sorted(self.family))):
            try:
                send(target, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> None:
        """Crash it: SIGKILL, no chance to say goodbye to the SuperLink."""
        self.signal(signal.SIGKILL)
        self.process.wait()

    def pause(self) -> None:
        """Freeze it (SIGSTOP): a straggler that holds its messages without answering."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def begin_stop(self) -> None:
        """Resume it if paused, and ask it to end (SIGTERM)."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)

    def finish_stop(self, deadline: float) -> None:
        """Wait for it until ``deadline`` (``time.monotonic``), then SIGKILL what is left; return once all is gone."""
        try:
            self.process.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            pass
        self.signal(signal.SIGKILL)  # what it spawned may outlive it
        self.process.wait()
        gone_by = time.monotonic() + STOP_GRACE
        while self.alive() and time.monotonic() < gone_by:
            time.sleep(0.05)  # orphans are reaped by init shortly after SIGKILL

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_GRACE` seconds."""
        self.begin_stop()
        self.finish_stop(time.monotonic() + STOP_GRACE)

    def alive(self) -> bool:
        """Whether a process of its group, or a known descendant, still runs (zombies are gone)."""
        return any(
            not entry.zombie and (entry.group == self.process.pid or entry.pid in self.family) for entry in processes()
        )

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(text.splitlines()[-lines:])


COMPLETED = "finished:completed"
STARTED_RUN = re.compile(r"started run (\d+)")


@dataclass
class RunOutcome:
    """What ``flwr run --stream`` printed and how the run ended.

    ``flwr run --stream`` exits 0 even when the ServerApp fails, so the
    run's own status, as the SuperLink records it (``flwr ls``), is what
    says whether it succeeded: ``status`` is e.g. ``finished:completed`` or
    ``finished:failed`` (empty if the run never started), ``details`` the
    SuperLink's reason.
    """

    returncode: int
    lines: list[str]
    seconds: float
    run_id: int | None = None
    status: str = ""
    details: str = ""

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 and self.status == COMPLETED


@dataclass
class LocalDeployment:
    """A SuperLink and SuperNodes on loopback, with their Flower home in ``workdir``."""

    workdir: Path
    idle_poll: float | None = IDLE_POLL  # None: Flower's flower-supernode, idle for 3 s between polls
    clientapp_process: bool = True  # one long-running ClientApp process per node, or one per message
    processes: list[ManagedProcess] = field(default_factory=list)
    superlink_port: int | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home = self.workdir / "flwr-home"
        self.home.mkdir(exist_ok=True)
        bin_dir = Path(sys.executable).parent
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "FLWR_HOME": str(self.home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # use this environment, install nothing
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1",  # start each ClientApp without a 1 s delay
        }
        self._bin = bin_dir

    def __enter__(self) -> LocalDeployment:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    # -- processes ----------------------------------------------------------------

    def _start(self, name: str, command: list[str], cwd: Path | None = None) -> ManagedProcess:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as handle:
            process = subprocess.Popen(
                command, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
            )
        managed = ManagedProcess(name, process, log)
        self.processes.append(managed)
        return managed

    def start_superlink(self, timeout: float = 60.0) -> ManagedProcess:
        """Start the SuperLink on a free loopback port and name it in ``config.toml``."""
        if self.superlink_port is not None:
            raise RuntimeError("this deployment already has a SuperLink")
        port = self.superlink_port = free_port()
        superlink = self._start(
            "superlink",
            [
                # in-memory state: its SQLite alternative locks up under a few dozen SuperNodes
                str(self._bin / "flower-superlink"),
                "--insecure",
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
            ],
        )
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n'
            f'[superlink.{CONNECTION}]\naddress = "{LOOPBACK}:{port}"\ninsecure = true\n',
            encoding="utf-8",
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if superlink.process.poll() is not None:
                raise RuntimeError(
                    f"flower-superlink exited with code {superlink.process.returncode}\n{superlink.tail()}"
                )
            try:
                with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/health", timeout=1):
                    return superlink
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise TimeoutError(f"flower-superlink did not answer on {LOOPBACK}:{port} within {timeout:.0f} s")

    def add_supernode(self, name: str, node_config: Mapping[str, Scalar], cwd: Path | None = None) -> ManagedProcess:
        """Start a SuperNode with ``node_config`` (its shard, or a device's user and data), in the
        working folder ``cwd`` (default: this process's), where relative paths of the run config
        (``population.path``) are resolved on this node.

        With ``clientapp_process``, the SuperNode starts its long-running
        ClientApp process as a child, in its process group: signals for the
        node reach both.
        """
        if self.superlink_port is None:
            raise RuntimeError("start the SuperLink first")
        supernode = (
            [str(self._bin / "flower-supernode")]
            if self.idle_poll is None
            else [sys.executable, "-m", "simulations.supernode", "--idle-poll", str(self.idle_poll)]
        )
        if self.clientapp_process:
            if self.idle_poll is None:
                raise ValueError("clientapp_process needs simulations.supernode: set idle_poll (3.0 is Flower's own)")
            supernode.append("--clientapp-process")
        return self._start(
            name,
            [
                *supernode,
                "--insecure",
                "--superlink",
                f"{LOOPBACK}:{self.superlink_port}",
                "--port",
                str(free_port()),  # the node's own Runtime API, for its ClientApp processes
                "--node-config",
                config_arg(node_config),
            ],
            cwd,
        )

    def wait_for_supernodes(self, count: int, timeout: float = 120.0) -> None:
        """Return once the SuperLink lists ``count`` SuperNodes online (``flwr supernode list``)."""
        deadline = time.monotonic() + timeout
        online = 0
        while time.monotonic() < deadline:
            listed = subprocess.run(
                [str(self._bin / "flwr"), "supernode", "list", CONNECTION, "--format", "json"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if listed.returncode == 0:
                nodes = json.loads(listed.stdout).get("nodes", [])
                online = sum(1 for node in nodes if node.get("status") == "online")
                if online >= count:
                    return
            time.sleep(0.5)
        raise TimeoutError(f"{online} of {count} SuperNodes online after {timeout:.0f} s\n{self.logs()}")

    def stop(self) -> None:
        """Stop every process this deployment started, whatever state it is in.

        All groups get SIGTERM at once (SuperNodes take a few seconds to say
        goodbye), then whatever is left after :data:`STOP_GRACE` seconds gets
        SIGKILL.
        """
        processes, self.processes = self.processes, []
        for process in processes:
            process.begin_stop()
        deadline = time.monotonic() + STOP_GRACE
        for process in processes:
            process.finish_stop(deadline)

    def logs(self) -> str:
        """The end of every process's log, for a failure message."""
        return "\n".join(process.tail() for process in self.processes)

    # -- runs -----------------------------------------------------------------------

    def run(
        self,
        run_config: Mapping[str, Scalar],
        *,
        app_dir: Path = PROJECT_ROOT,
        timeout: float = 300.0,
        on_line: Callable[[str], None] | None = None,
    ) -> RunOutcome:
        """``flwr run APP local --stream`` with ``run_config``; ``on_line`` sees each output line.

        The run is stopped (and a :class:`TimeoutError` raised) if it has
        not ended after ``timeout`` seconds.
        """
        command = [
            str(self._bin / "flwr"),
            "run",
            str(app_dir),
            CONNECTION,
            "--stream",
            "--run-config",
            config_arg(run_config),
        ]
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            cwd=app_dir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        managed = ManagedProcess("flwr-run", process, self.workdir / "flwr-run.log")
        self.processes.append(managed)
        lines: list[str] = []
        try:
            assert process.stdout is not None
            for line in _lines_until(process.stdout, started + timeout):
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            try:  # the output has ended: the process is about to exit
                process.wait(timeout=max(started + timeout - time.monotonic(), STOP_GRACE))
            except subprocess.TimeoutExpired:
                raise TimeoutError(
                    f"flwr run did not finish within {timeout:.0f} s:\n" + "\n".join(lines[-40:])
                ) from None
        finally:
            managed.log.write_text("\n".join(lines) + "\n", encoding="utf-8")
            managed.stop()
            self.processes.remove(managed)
        outcome = RunOutcome(process.returncode, lines, time.monotonic() - started)
        found = next((match for line in lines if (match := STARTED_RUN.search(line))), None)
        if found is not None:
            outcome.run_id = int(found.group(1))
            outcome.status, outcome.details = self.run_status(outcome.run_id)
        return outcome

    def run_status(self, run_id: int, timeout: float = 30.0) -> tuple[str, str]:
        """(status, details) of a run as the SuperLink records it (``flwr ls``), once it has finished."""
        deadline = time.monotonic() + timeout
        status, details = "", ""
        while time.monotonic() < deadline:
            listed = subprocess.run(
                [str(self._bin / "flwr"), "ls", CONNECTION, "--run-id", str(run_id), "--format", "json"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if listed.returncode == 0:
                runs = json.loads(listed.stdout).get("runs", [])
                if runs:
                    status, details = str(runs[0].get("status", "")), str(runs[0].get("status-details", ""))
                    if status.startswith("finished"):
                        break
            time.sleep(0.5)
        return status, details


def _lines_until(stream: IO[bytes], deadline: float) -> Iterator[str]:
    """Lines of ``stream`` until it closes or ``deadline`` (``time.monotonic``) passes."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    buffer = b""
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            if not selector.select(timeout=min(remaining, 1.0)):
                continue
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                yield raw.decode("utf-8", errors="replace")
        if buffer:
            yield buffer.decode("utf-8", errors="replace")
    finally:
        selector.close()


def main(argv: list[str] | None = None) -> int:
    """Run one experiment on a SuperLink and N SuperNodes started here, then stop them all.

    The config, the results folder and the ledger's budget are checked
    before any process starts (exit status 2, one line).  The exit status
    is the run's own: 0 only if the SuperLink recorded it as completed and
    its result was written; 1 for a failed run; 130 or 143 if stopped by
    SIGINT or SIGTERM (every process is stopped either way).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--supernodes",
        type=int,
        help=f"SuperNodes, one shard each (default: run.shards if --set "
        f"gives it, else {DEFAULT_SUPERNODES}; both given must agree)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run-config override, e.g. population.users=100000 (repeatable)",
    )
    parser.add_argument("--output", help="results folder, new or empty (default: results/deployment-<time>)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output if it holds a previous fedhh result (and nothing else)",
    )
    args = parser.parse_args(argv)
    if args.supernodes is not None and args.supernodes < 1:
        parser.error("--supernodes must be >= 1")
    if args.overwrite and args.output is None:
        parser.error("--overwrite replaces the folder named by --output; give --output too")
    try:
        with interruptible():
            return _deploy(args)
    except InputError as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        print(f"interrupted ({str(interrupt) or 'SIGINT'}): every process was stopped", file=sys.stderr)
        return exit_status(interrupt)


def supernode_count(supernodes: int | None, overrides: list[str], config: FedhhConfig) -> int:
    """How many SuperNodes to start: one per shard, so ``--supernodes`` and ``run.shards`` are one number.

    Either may say it; said by both (``--supernodes`` and ``--set run.shards=``), they must agree,
    or the run is refused (:class:`InputError`) rather than one silently replacing the other.
    """
    shards = fixed_shards(config)  # None: "auto", one shard per SuperNode started
    shards_given = shards is not None and any(parse_override(text)[0] == "run.shards" for text in overrides)
    if supernodes is None:
        return shards if shards is not None and shards_given else DEFAULT_SUPERNODES
    if shards_given and shards != supernodes:
        raise InputError(
            f"--supernodes {supernodes} and run.shards = {shards} (--set) disagree: each SuperNode holds one "
            "shard; give one of them, or the same number to both"
        )
    return supernodes


def _deploy(args: argparse.Namespace) -> int:
    from fedhh.config import load_config
    from fedhh.experiment import Experiment
    from fedhh.privacy.charge import check_budget, run_label
    from fedhh.results import ResultsFolder
    from strategies.server_app import OUTPUT_DIR, OVERWRITE, PROGRESS, RUN_ID

    config = load_config(None, args.overrides)
    supernodes = supernode_count(args.supernodes, args.overrides, config)
    config = config.with_overrides({"run.shards": supernodes})
    if config["run"]["federation"] != "shards":
        raise InputError(
            'run.federation: this wrapper starts shard SuperNodes; a "devices" federation is '
            "started by hand, one SuperNode per device (see docs/deployment.md)"
        )
    if args.output is None:  # a fresh name now; the ServerApp claims the folder itself
        stamp = time.strftime("%Y%m%d-%H%M%S")
        probe = ResultsFolder.claim_new(Path("results") / f"deployment-{stamp}", field="--output")
    else:  # checked before the population is built
        probe = ResultsFolder.claim(args.output, overwrite=args.overwrite, field="--output")
    output = probe.path
    probe.release()
    experiment = Experiment(config)  # population, resources, shards, privacy target
    run_id = run_label(output.name)
    check_budget(config["privacy"], experiment.privacy, run_id)

    run_config: dict[str, Scalar] = {
        **config.to_flat(),
        OUTPUT_DIR: str(output),
        OVERWRITE: args.overwrite,
        RUN_ID: run_id,
        PROGRESS: False,
    }
    with (
        tempfile.TemporaryDirectory(prefix="fedhh-deployment-") as scratch,
        LocalDeployment(Path(scratch)) as deployment,
    ):
        deployment.start_superlink()
        for index in range(supernodes):
            deployment.add_supernode(f"supernode-{index}", {"partition-id": index, "num-partitions": supernodes})
        deployment.wait_for_supernodes(supernodes)
        outcome = deployment.run(run_config, on_line=print)
    if outcome.succeeded and (output / "result.json").is_file():
        print(f"run {outcome.run_id} completed after {outcome.seconds:.1f} s; results in {output}")
        return 0
    print(
        f"run {outcome.run_id} did not complete (status {outcome.status or 'unknown'}, flwr run exited with "
        f"{outcome.returncode}): {outcome.details or 'see the output above'}; no results written",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
