"""Stopping a Flower-driver ``fedhh run`` with one signal, many times, at every phase, under load.

The target: one SIGINT stops the run with exit status 130 (one SIGTERM:
143) within 10 s, at any load, and no process the run started survives.
Each trial starts a whole ``fedhh run`` process (the console script's
``simulations.cli.run``) in a session of its own, waits for a phase of the
run, waits a random extra moment, sends one signal to its PID alone, and
records the exit status, the seconds from the signal to the exit and to the
end of the last process it started, and (for an unexpected status) the end
of its output: ``PYTHONFAULTHANDLER`` is set, so a crash prints every
thread's stack.  With ``--cores DIR`` a trial that did not end as expected
leaves its core file (if it crashed) and the driver's Ray logs in
``DIR/trial-<n>/`` (``gdb python core`` reads the core).

Phases (what the run prints, or the time since it started):

* ``startup``: 0-3.5 s after fedhh's stop handlers are in place (``/proc``
  shows SIGTERM caught): imports, ``ray.init``.  Before that the
  interpreter itself is starting, and a signal is Python's own (a
  ``KeyboardInterrupt`` while ``site`` is imported is a fatal error, exit 1);
* ``connecting``: the ServerApp waits for its SuperNodes (Flower's engine starts its actors);
* ``admitted``: every node answered its shard query, round 1 starts;
* ``rounds``: after the first round line;
* ``writing``: the protocol finished, the results folder is being written while Flower's engine stops.

``--burn K`` runs K CPU burners (busy Python processes started here and
stopped by PID afterwards, whatever happens) beside the trials.

Usage::

    python benchmarks/bench_interrupts.py --trials 40 --burn 12 [--signal SIGINT] [--job small|default] \\
        [--phases startup connecting admitted rounds writing] [--cores /tmp/cores] [--output FILE.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulations.processes import descendant_identities, still_running  # noqa: E402

DEADLINE = 10.0  # seconds from the signal to the exit
BURNER = "while True: pass"
RUN = "from simulations.cli import run; run()"
SMALL = [
    'population.source="zipf"', "population.users=20000", "population.vocabulary=2000", "population.item_length=8",
    "protocol.max_length=8", "privacy.epsilon=8", "run.shards=2",
]
JOBS = {"small": SMALL, "default": []}
MARKERS = {
    "connecting": "waiting for SuperNodes",
    "admitted": "node(s) admitted",
    "rounds": "[round 1/",
    "writing": "writing the results",
}
PHASES = ["startup", *MARKERS]
EXPECTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


@contextlib.contextmanager
def burners(count: int) -> Iterator[list[int]]:
    """``count`` busy processes for the length of the block, stopped by PID however it ends."""
    processes = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(count)]
    try:
        if processes:
            time.sleep(5.0)  # let the load average start to climb
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (its ``SigCgt`` mask in ``/proc``)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (signum - 1) & 1)


def _core_limit(cores: bool) -> None:
    if cores:
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def trial(job: list[str], phase: str, signum: int, jitter: float, scratch: Path, cores: bool,
          timeout: float) -> dict[str, Any]:
    """One run stopped by one signal at ``phase`` (plus up to ``jitter`` seconds)."""
    env = {**os.environ, "TMPDIR": str(scratch), "FLWR_HOME": str(scratch / "flwr-home"), "PYTHONUNBUFFERED": "1",
           "PYTHONFAULTHANDLER": "1", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", RUN, "run", "--output", str(scratch / "result"), "--set", 'run.driver="flower"',
            *(f"--set={setting}" for setting in job)]
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, preexec_fn=lambda: _core_limit(cores))
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    output, seen = b"", {}
    wait_until = None
    marker = MARKERS.get(phase, "").encode()
    signalled = None
    try:
        while True:
            seen.update(descendant_identities(process.pid))
            if signalled is None:
                now = time.monotonic()
                if wait_until is None and marker and marker in output:
                    wait_until = now + random.uniform(0.0, jitter)
                if wait_until is None and phase == "startup" and catches(process.pid, signal.SIGTERM):
                    wait_until = now + random.uniform(0.0, 3.5)
                if wait_until is not None and now >= wait_until:
                    os.kill(process.pid, signum)
                    signalled = time.monotonic()
                elif now - started > timeout:
                    raise TimeoutError(f"no {phase!r} within {timeout:.0f} s")
            if signalled is not None and time.monotonic() - signalled > 60:
                break  # stuck: killed below, recorded as such
            if selector.select(timeout=0.05):
                chunk = os.read(process.stdout.fileno(), 65536)
                output += chunk
                if not chunk:  # the output ended: the process is ending
                    selector.unregister(process.stdout)
            if not selector.get_map() and process.poll() is not None:
                break
        exited = time.monotonic()
    finally:
        selector.close()
        stuck = process.poll() is None
        if stuck:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    status = process.returncode if not stuck else None
    after = signalled if signalled is not None else started
    while still_running(seen) and time.monotonic() < after + 2 * DEADLINE:
        time.sleep(0.1)
    left = still_running(seen)
    gone = time.monotonic()
    for pid in left:  # never leave them behind, whatever the run did
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    text = output.decode(errors="replace")
    return {
        "phase": phase, "signal": signal.Signals(signum).name, "status": status, "stuck": stuck,
        "completed_before_signal": signalled is None,
        "exit_s": None if signalled is None or stuck else round(exited - signalled, 3),
        "all_gone_s": None if left else round(gone - after, 3), "left_running": len(left),
        "processes_seen": len(seen), "load": round(os.getloadavg()[0], 1),
        "result_written": (scratch / "result" / "result.json").exists(),
        "tail": "" if status == EXPECTED[signum] else text[-6000:],
    }


def keep(scratch: Path, kept: Path) -> None:
    """A failed trial's core file and the driver's Ray logs (its core worker's log says why it exited)."""
    kept.mkdir(parents=True, exist_ok=True)
    for core in scratch.glob("core*"):
        shutil.move(core, kept / core.name)
    for log in scratch.glob("ray/session_*/logs/*driver*"):
        shutil.copy(log, kept / log.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--burn", type=int, default=0, help="CPU burner processes to run beside the trials")
    parser.add_argument("--signal", default="SIGINT", choices=["SIGINT", "SIGTERM"])
    parser.add_argument("--job", default="small", choices=sorted(JOBS))
    parser.add_argument("--phases", nargs="+", default=PHASES, choices=PHASES)
    parser.add_argument("--jitter", type=float, default=1.0, help="seconds after the phase's marker, at most")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to reach a phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cores", type=Path, help="keep the core file of a crashed run here")
    parser.add_argument("--output", type=Path, help="every trial as JSON")
    args = parser.parse_args()
    random.seed(args.seed)
    signum = signal.Signals[args.signal]
    trials = []
    with burners(args.burn):
        for index in range(args.trials):
            phase = args.phases[index % len(args.phases)]
            # The trial's own temporary folder (short: Ray's socket paths), removed with everything in it.
            with tempfile.TemporaryDirectory(prefix="fedhh-int-", dir="/tmp", ignore_cleanup_errors=True) as folder:
                scratch = Path(folder)
                row = None
                try:
                    row = trial(
                        JOBS[args.job], phase, signum, args.jitter, scratch, args.cores is not None, args.timeout
                    )
                except TimeoutError as error:
                    row = {"phase": phase, "signal": args.signal, "status": None, "error": str(error)}
                finally:
                    if args.cores is not None and (row is None or row.get("status") != EXPECTED[signum]):
                        keep(scratch, args.cores / f"trial-{index}")
            row["trial"] = index
            trials.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
            if row.get("tail"):
                print(row["tail"][-3000:], file=sys.stderr, flush=True)
    stopped = [t for t in trials if t.get("exit_s") is not None]
    summary = {
        "trials": len(trials), "burners": args.burn, "signal": args.signal, "job": args.job,
        "statuses": {str(s): sum(1 for t in trials if t.get("status") == s) for s in {t.get("status") for t in trials}},
        "expected_status": sum(1 for t in trials if t.get("status") == EXPECTED[signum]),
        "completed_before_signal": sum(1 for t in trials if t.get("completed_before_signal")),
        "max_exit_s": max((t["exit_s"] for t in stopped), default=None),
        "median_exit_s": statistics.median(t["exit_s"] for t in stopped) if stopped else None,
        "over_deadline": sum(1 for t in stopped if t["exit_s"] > DEADLINE),
        "left_running": sum(t.get("left_running", 0) for t in trials),
        "load": [min(t.get("load", 0) for t in trials), max(t.get("load", 0) for t in trials)],
    }
    print(json.dumps(summary, indent=1))
    if args.output is not None:
        args.output.write_text(json.dumps({"summary": summary, "trials": trials}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
