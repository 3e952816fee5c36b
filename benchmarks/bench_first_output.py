"""How soon ``fedhh run`` on Flower shows something, on a terminal 80 columns wide.

Each repeat starts a whole ``fedhh run`` process (``python -m
simulations.cli run``) on a pseudo-terminal and records, from the moment it
is started, the seconds until the first byte drawn (the status line), until
the server's wait for its SuperNodes shows (where the run's first output
was before the status line: the strategy's first log line comes just before
that wait), until the rounds' bar, and until the process ends.  Medians
over the repeats, with the load average before and after.

Usage::

    python benchmarks/bench_first_output.py [--repeats 5] [--users 1000000] [--output FILE.json]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKS = {"first output": "", "SuperNodes shown": "SuperNodes", "rounds' bar": "on Flower"}


def one_run(users: int, output: Path) -> dict[str, float]:
    """Seconds from the start of one ``fedhh run`` to each mark, and to its end."""
    controller, user = pty.openpty()
    fcntl.ioctl(user, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    command = [sys.executable, "-m", "simulations.cli", "run", "--set", f"population.users={users}",
               "--output", str(output)]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, stdin=user, stdout=user, stderr=user)
    os.close(user)
    drawn, seen = b"", {}
    while True:
        ready, _, _ = select.select([controller], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the process and its children closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
        now = time.monotonic() - started
        for name, mark in MARKS.items():
            if name not in seen and mark.encode() in drawn:
                seen[name] = now
    os.close(controller)
    if process.wait() != 0:
        raise RuntimeError(f"fedhh run failed:\n{drawn.decode(errors='replace')[-2000:]}")
    return {**seen, "exit": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory(prefix="fedhh-first-output-") as scratch:
        for repeat in range(args.repeats):
            runs.append(one_run(args.users, Path(scratch) / f"run-{repeat}"))
            print(json.dumps(runs[-1]), flush=True)
    medians = {name: statistics.median(run[name] for run in runs) for name in [*MARKS, "exit"]}
    summary = {"users": args.users, "repeats": args.repeats, "load_before": load_before,
               "load_after": os.getloadavg()[0], "median_s": medians, "runs": runs}
    print(json.dumps(summary, indent=2))
    if args.output is not None:
        args.output.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
