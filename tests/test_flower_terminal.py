"""What ``fedhh run`` on Flower shows on the terminal, and what goes into the run's log.

A status line from the start (building the population, starting Ray,
waiting for the SuperNodes), then the rounds' bar and the summary; Flower's
and Ray's logs, fedhh's round lines among them, go into ``run.log`` in the
results folder, and reach the terminal only with ``--verbose``.  The runs
are real (``fedhh run`` in a process of its own, Flower's simulation engine
on Ray), on a pseudo-terminal 80 columns wide as a user's would be.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from simulations.run_log import captured_output

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT = 600.0  # seconds; a run takes about 20 s here on a quiet machine
# Items of one letter, two shards: a run of two rounds.
TINY = [
    'population.source="zipf"', "population.users=4000", "population.vocabulary=10", "population.item_length=1",
    "protocol.max_length=1", "privacy.epsilon=6.0", "privacy.delta=1e-6", 'run.driver="flower"', "run.shards=2",
]
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LOG_LINES = ("INFO", "WARNING", "DEBUG", "DEPRECATED", "[round 1/2]", "Ray instance")  # Flower's, fedhh's, Ray's


def fedhh_run(output: Path, *options: str, terminal: bool) -> tuple[int, str, str]:
    """``fedhh run`` on the TINY job: (exit status, stdout, stderr); on a pseudo-terminal of 80
    columns (both streams in the first string) when ``terminal``."""
    command = [sys.executable, "-m", "simulations.cli", "run", *[f"--set={setting}" for setting in TINY],
               "--output", str(output), *options]
    environment = {**os.environ, "COLUMNS": "80"}
    if not terminal:
        completed = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True,
                                   timeout=RUN_TIMEOUT)
        return completed.returncode, completed.stdout, completed.stderr
    controller, user = pty.openpty()
    fcntl.ioctl(user, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen(command, cwd=ROOT, env=environment, stdin=user, stdout=user, stderr=user)
    os.close(user)
    drawn = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal's last user is gone
            break
        if not chunk:
            break
        drawn += chunk
    os.close(controller)
    return process.wait(RUN_TIMEOUT), drawn.decode("utf-8", errors="replace"), ""


def visible(drawn: str) -> str:
    """The text drawn on a terminal, without its control sequences, one line per redraw."""
    return ESCAPE.sub("", drawn).replace("\r", "\n")


def test_a_status_line_at_once_and_the_logs_in_the_results_folder(tmp_path: Path) -> None:
    status, drawn, _ = fedhh_run(tmp_path / "out", terminal=True)
    text = visible(drawn)
    assert status == 0, text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines[0].endswith("building the population"), lines[:3]  # the first thing drawn
    steps = ["building the population", "starting Ray", "starting Flower's simulation engine",
             "SuperNodes building their shards: 2 of 2 connected", "triehh on Flower round",
             "heavy hitters discovered"]
    where = [text.find(step) for step in steps]
    assert -1 not in where and where == sorted(where), dict(zip(steps, where, strict=True))
    shown = [marker for marker in LOG_LINES if marker in text]
    assert not shown, f"log lines reached the terminal: {shown}\n{text}"
    assert all(len(line) <= 80 for line in text.splitlines()), "every line fits the terminal"

    log = (tmp_path / "out" / "run.log").read_text(encoding="utf-8")
    assert "\x1b" not in log, "run.log is plain text: no colour codes"
    for line in ("WARNING flwr: DEPRECATED FEATURE", "INFO flwr.fedhh: SuperNodes building their shards: 2 of 2",
                 "INFO flwr.fedhh: [round 1/2]", "INFO flwr.fedhh: [round 2/2]", "result written to"):
        assert line in log, f"{line!r} not in run.log:\n{log}"
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        ".fedhh-results", "discovery.png", "heavy_hitters.csv", "result.json", "rounds.csv", "run.log"
    ]


def test_verbose_shows_the_logs_too(tmp_path: Path) -> None:
    status, stdout, stderr = fedhh_run(tmp_path / "out", "--verbose", "--json", terminal=False)
    assert status == 0, stderr
    for line in ("DEPRECATED FEATURE", "[round 1/2]", "SuperNodes building their shards: 2 of 2"):
        assert line in stderr, f"{line!r} not on the terminal:\n{stderr}"
    assert "building the population" not in stderr, "the log lines in place of the status line"
    assert stdout.lstrip().startswith("{"), "--json: the result alone on stdout"
    log = (tmp_path / "out" / "run.log").read_text(encoding="utf-8")
    assert "INFO flwr.fedhh: [round 1/2]" in log and "DEBUG flwr:" in log, log


CAPTURED = """
import os, subprocess, sys
from pathlib import Path
from simulations.run_log import captured_output

with captured_output(Path(sys.argv[1])) as terminal:
    print("python's stdout")
    print("python's stderr", file=sys.stderr)
    os.write(2, b"a write to descriptor 2\\n")
    subprocess.run(["sh", "-c", "echo a child on stdout; echo a child on stderr >&2"], check=True)
    os.write(2, b"\\x1b[36m(pid=4242)\\x1b[0m a worker's line, coloured as Ray colours it\\n")
    subprocess.run(["printf", "\\033[33m(raylet)\\033[0m \\033[1mbold\\033[0m from a child\\n"], check=True)
    terminal.write("the \\x1b[1mstatus\\x1b[0m line\\n")
    moved = Path(sys.argv[1]).parent / "committed"
    moved.mkdir()
    Path(sys.argv[1]).rename(moved / "run.log")  # a results folder committed during the run
    print("\\x1b[32mafter the move\\x1b[0m")
print("after the run")
print("after the run, on stderr", file=sys.stderr)
"""


def test_what_the_process_and_its_children_print_goes_into_the_log(tmp_path: Path) -> None:
    """Descriptors 1 and 2 go to the log: Python's streams, a library's own writes, a child process
    (Ray's raylet, a worker); the stream handed back still reaches the terminal, and both
    descriptors are put back afterwards.  The log is plain text, wherever the file has moved: its
    colour codes are taken out once the run ends, the terminal keeps its own."""
    log = tmp_path / "run.log"
    completed = subprocess.run([sys.executable, "-c", CAPTURED, str(log)], cwd=ROOT, capture_output=True, text=True,
                               timeout=60, check=True)
    assert (tmp_path / "committed" / "run.log").read_text(encoding="utf-8").splitlines() == [
        "python's stdout", "python's stderr", "a write to descriptor 2", "a child on stdout", "a child on stderr",
        "(pid=4242) a worker's line, coloured as Ray colours it", "(raylet) bold from a child", "after the move",
    ]
    assert completed.stdout == "after the run\n"
    assert completed.stderr == "the \x1b[1mstatus\x1b[0m line\nafter the run, on stderr\n"
