"""One SIGINT or SIGTERM stops a Flower-driver ``fedhh run`` cleanly.

A real ``fedhh run`` (Flower simulation on Ray, small population) runs as a
subprocess in a session of its own; at a phase of the run (Flower's engine
starting, round 2 starting, the rounds over while the engine stops), it
sends one signal to its own PID.  Within 10 s it must exit with 130 (SIGINT)
or 143 (SIGTERM), every process it started (Ray's GCS, raylet, agents and
workers) must be gone, and it must leave no partial result, staging or lock
file, and no temporary folder: either nothing, or (the signal came after the
last round) the complete result, and its message says which.

A signal that lands while ``ray.init`` constructs Ray's core worker (the
driver's C++ side, which runs some Python as it starts) used to cut that
construction short, leaving the C++ core worker running with nothing to
shut it down; the process then crashed at exit (a segmentation fault a few
seconds after the signal).  Here the run sends the signal to itself once
its main thread is inside that construction.

A signal that lands while Flower's engine shuts Ray down used to cut that
shutdown short, leaving Ray's driver half torn down, and the process then
died at its next Ray call (exit status 1, or a segmentation fault) instead
of exiting 130.  Where the signal lands is made exact here: the run's
result writer, which runs while the engine stops, sends it once the main
thread is inside Ray's core-worker shutdown.

The unit tests below check :func:`simulations.interrupts.stop_deferred` with
signals sent to this process.
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

from simulations.interrupts import Interrupted, exit_status, interruptible, stop_deferred, stop_handlers, stop_requested
from fedhh.results import marked_files
from simulations.processes import descendant_identities, still_running

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 10.0  # seconds from the signal to the exit, and to the last of its processes
RUN = [
    "run", "--set", 'population.source="zipf"', "--set", "population.users=20000", "--set", "population.vocabulary=2000",
    "--set", "population.item_length=8", "--set", "protocol.max_length=8", "--set", "privacy.epsilon=8",
    "--set", "run.shards=2", "--set", 'run.driver="flower"',
]
# The run's status lines (its log goes to run.log in the results folder)
STARTING = "SuperNodes"  # the server's first, while Flower's engine starts its actors
FINISHED = "writing the results"  # the last round is over: the result is being written while Flower's engine stops


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


def signalled_run(
    argv: list[str], scratch: Path, when: str, signum: int, send: bool = True
) -> tuple[int, float, str, dict[int, int]]:
    """Start ``python argv`` in a session of its own, send ``signum`` to it once it prints ``when`` (unless
    ``send`` is false: the run signals itself, then prints ``when``); its exit status, the seconds from
    ``when`` to its exit, its output, and every process seen below it."""
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        before, started = wait_for_line(process, when, timeout=240)
        assert started, "the run must have started Ray's processes"
        if send:
            os.kill(process.pid, signum)
        signalled = time.monotonic()
        rest, _ = process.communicate(timeout=DEADLINE + 5)
        exited = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    while still_running(started) and time.monotonic() < signalled + DEADLINE:
        time.sleep(0.1)
    return process.returncode, exited, before + rest.decode(errors="replace"), started


# `fedhh run` on Flower, which sends itself the signal at a point of the run and goes on from there only
# once its stop handler has run, so the signal always lands in that phase (the phases of RUN last a second
# or two: a signal sent from outside once the run says where it is may come after the phase, or after
# the run, on a loaded machine).  The point: the status line holding a text (argv[2]), or, for
# ROUND_2, round 2 starting.  Prints "signalled" on the terminal (the run's own output goes to run.log).
SIGNAL_AT = """
import os, signal, sys, time
from simulations.cli import run
from simulations.interrupts import stop_requested
from simulations.progress import StatusLine
from strategies.base import PlainAggregation

signum, point = signal.Signals[sys.argv.pop(1)], sys.argv.pop(1)
terminal = os.dup(sys.stdout.fileno())
show, plain_round = StatusLine.__call__, PlainAggregation.run_round
sent = []

def signal_here():
    if sent:
        return
    sent.append(True)
    os.kill(os.getpid(), signum)
    os.write(terminal, b"signalled\\n")
    deadline = time.monotonic() + 60
    while not stop_requested():
        if time.monotonic() > deadline:
            os.write(terminal, b"the stop handler did not run within 60 s\\n")
            os._exit(3)
        time.sleep(0.001)

def status(self, text):
    show(self, text)
    if point in text:
        signal_here()

def run_round(self, strategy, server_round, grid):
    if point == "round 2" and server_round == 2:
        signal_here()
    return plain_round(self, strategy, server_round, grid)

StatusLine.__call__, PlainAggregation.run_round = status, run_round
run()
"""
ROUND_2 = "round 2"  # as round 2 starts: rounds are left


@pytest.mark.parametrize(
    ("signum", "status", "when"),
    [(signal.SIGINT, 130, ROUND_2), (signal.SIGTERM, 143, STARTING), (signal.SIGINT, 130, FINISHED)],
)
def test_one_signal_stops_a_flower_run_and_everything_it_started(
    tmp_path: Path, short_tmpdir: Path, signum: int, status: int, when: str
) -> None:
    scratch = short_tmpdir
    output = tmp_path / "results" / "run"
    code, exited, transcript, started = signalled_run(
        ["-c", SIGNAL_AT, signal.Signals(signum).name, when, *RUN, "--output", str(output)],
        scratch, "signalled", signum, send=False,
    )
    assert code == status, transcript
    assert exited <= DEADLINE, f"exited {exited:.1f} s after the signal"
    assert f"interrupted ({signal.Signals(signum).name})" in transcript
    assert "Traceback" not in transcript and "Fatal Python error" not in transcript, transcript
    assert not still_running(started), f"processes left running: {still_running(started)}"
    leftovers = [p.name for p in scratch.iterdir() if p.name.startswith("fedhh-")]
    assert leftovers == [], "no temporary folder of fedhh's"
    if when == FINISHED:  # the rounds were over: the result is written whole, and the message says where
        said = " ".join(transcript.split())
        assert f"stopped; the result was written to {output}" in said and "before the stop" in said, transcript
        assert marked_files(output) is not None and (output / "result.json").is_file()
        assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["run"], "no staging or lock file"
    else:
        assert "stopped; no results were written" in transcript
        assert not output.exists(), "no partial result"
        assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir()), "no staging or lock file"


# `fedhh run` on Flower, which sends itself the signal once its main thread is inside the construction of
# Ray's core worker (in ray.init's connect), and prints "signalled" on the terminal (its own output
# goes to run.log by then).
SIGNAL_IN_RAY_INIT = """
import linecache, os, signal, sys, threading, time
from simulations.cli import run

signum = signal.Signals[sys.argv.pop(1)]
terminal = os.dup(sys.stdout.fileno())
main = threading.main_thread().ident

def in_core_worker_construction():
    frame = sys._current_frames().get(main)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "connect" and code.co_filename.endswith(os.path.join("ray", "_private", "worker.py")):
            return "ray._raylet.CoreWorker(" in linecache.getline(code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return False

def signal_there():
    deadline = time.monotonic() + 120
    while not in_core_worker_construction():
        if time.monotonic() > deadline:
            os.write(terminal, b"the main thread never reached the construction of Ray's core worker\\n")
            os._exit(3)
        time.sleep(0.0002)
    os.kill(os.getpid(), signum)
    os.write(terminal, b"signalled\\n")

threading.Thread(target=signal_there, daemon=True).start()
run()
"""


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_ray_init_constructs_its_core_worker_waits_for_it(
    tmp_path: Path, short_tmpdir: Path, signum: int, status: int
) -> None:
    output = tmp_path / "results" / "run"
    code, exited, transcript, started = signalled_run(
        ["-c", SIGNAL_IN_RAY_INIT, signal.Signals(signum).name, *RUN, "--output", str(output)],
        short_tmpdir, "signalled", signum, send=False,
    )
    assert code == status, transcript
    assert exited <= DEADLINE, f"exited {exited:.1f} s after the signal"
    assert f"interrupted ({signal.Signals(signum).name}): stopped; no results were written" in transcript
    assert "Fatal Python error" not in transcript and "Traceback" not in transcript, transcript
    assert not still_running(started), f"processes left running: {still_running(started)}"
    assert not output.exists(), "no partial result"


# A Flower run whose result writer sends the signal once the main thread is inside Ray's core-worker
# shutdown, which Flower's engine runs when it stops (the writer runs meanwhile).  Prints "signalled"
# when it has sent it.  After the interruption it says whether Ray's driver was shut down completely
# (ray.shutdown deletes its core worker last; cut short, it leaves it, shut down or not underneath),
# releases what the run left (its frames hold Ray object references: a driver left half shut down ends
# the process at the first one, with status 1) and exits as fedhh does.
SIGNAL_IN_RAY_SHUTDOWN = """
import gc, linecache, os, signal, sys, threading, time
import ray
from fedhh.config import load_config
from simulations.interrupts import exit_status, interruptible
from simulations.flower import run_flower_simulation
from simulations.ray_runtime import ray_runtime, run_init_args

signum = signal.Signals[sys.argv[1]]
main = threading.main_thread().ident

def in_core_worker_shutdown():
    frame = sys._current_frames().get(main)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "shutdown" and code.co_filename.endswith(os.path.join("ray", "_private", "worker.py")):
            return "shutdown_driver" in linecache.getline(code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return False

def write(document):
    deadline = time.monotonic() + 120
    while not in_core_worker_shutdown():
        if time.monotonic() > deadline:
            print("the main thread never reached Ray's core-worker shutdown", flush=True)
            os._exit(3)
        time.sleep(0.0005)
    os.kill(os.getpid(), signum)
    print("signalled", flush=True)

settings = sys.argv[2:]
status = 0
try:
    with interruptible(), ray_runtime(**run_init_args()):
        run_flower_simulation(load_config(None, settings), write=write)
except KeyboardInterrupt as stop:
    status = exit_status(stop)
    print(f"interrupted ({stop})", flush=True)
if not hasattr(ray._private.worker.global_worker, "core_worker"):
    print("Ray's driver was shut down completely", flush=True)
gc.collect()
print("released", flush=True)
sys.exit(status)
"""


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_flowers_engine_shuts_ray_down_waits_for_the_shutdown(
    short_tmpdir: Path, signum: int, status: int
) -> None:
    settings = [argument for argument in RUN[1:] if argument != "--set"]
    code, exited, transcript, started = signalled_run(
        ["-c", SIGNAL_IN_RAY_SHUTDOWN, signal.Signals(signum).name, *settings], short_tmpdir, "signalled", signum
    )
    assert code == status, transcript
    assert exited <= DEADLINE, f"exited {exited:.1f} s after the signal"
    assert f"interrupted ({signal.Signals(signum).name})" in transcript, transcript
    assert "Ray's driver was shut down completely" in transcript, transcript
    assert "released" in transcript and "Fatal Python error" not in transcript, transcript
    assert not still_running(started), f"processes left running: {still_running(started)}"


# -- stop_deferred, with signals sent to this process -----------------------------------------------


def deliver(signum: int) -> None:
    """Send ``signum`` to this process and let its handler run (it runs between two bytecodes of the main
    thread)."""
    os.kill(os.getpid(), signum)
    for _ in range(100):
        time.sleep(0.001)


def test_a_deferred_signal_asks_the_block_to_stop_and_is_raised_when_it_ends() -> None:
    asked, reached = [], []
    with pytest.raises(Interrupted) as raised, interruptible(), stop_deferred(lambda: asked.append(True)):
        deliver(signal.SIGTERM)
        assert asked == [True] and stop_requested(), "on_stop runs at once, the block goes on"
        reached.append(True)
    assert reached == [True]
    assert raised.value.signum == signal.SIGTERM and exit_status(raised.value) == 143


def test_a_deferred_signal_replaces_the_error_the_early_stop_caused() -> None:
    with pytest.raises(Interrupted) as raised, interruptible(), stop_deferred():
        deliver(signal.SIGINT)
        raise RuntimeError("the work ended early because it was asked to stop")
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert exit_status(raised.value) == 130


def test_nested_deferrals_raise_when_the_outermost_ends() -> None:
    order = []
    with pytest.raises(Interrupted), interruptible():
        with stop_deferred(lambda: order.append("outer asked")):
            with stop_deferred(lambda: order.append("inner asked")):
                deliver(signal.SIGINT)
            order.append("inner ended")
    assert order == ["inner asked", "outer asked", "inner ended"]


def test_later_signals_are_noted_and_only_the_first_is_raised(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Interrupted) as raised, interruptible(), stop_deferred():
        deliver(signal.SIGINT)
        deliver(signal.SIGTERM)
    assert raised.value.signum == signal.SIGINT
    assert "SIGTERM received; still stopping" in capsys.readouterr().err


class SignalledWhileDropped:
    """An object whose ``__del__`` receives the signal: Python drops an exception raised there."""

    def __del__(self) -> None:
        deliver(signal.SIGINT)


def test_a_stop_raised_where_python_drops_exceptions_is_raised_again(capsys: pytest.CaptureFixture[str]) -> None:
    reached = []
    with pytest.raises(Interrupted) as raised, interruptible():
        SignalledWhileDropped()  # deleted at once: the handler runs inside __del__
        reached.append(True)
        for _ in range(2000):  # the signal comes again within RESEND_DELAY
            time.sleep(0.001)
    assert reached == [True] and raised.value.signum == signal.SIGINT
    assert "Exception ignored" not in capsys.readouterr().err


def test_without_a_signal_the_block_runs_as_it_is_and_the_handlers_come_back() -> None:
    saved = stop_handlers()
    with stop_deferred():  # outside interruptible(): it installs its own handlers for the block
        assert signal.getsignal(signal.SIGINT) is not saved[signal.SIGINT]
    assert stop_handlers() == saved and not stop_requested()
