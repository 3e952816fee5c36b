"""Start-up of the default Flower simulation job, whole ``fedhh run`` processes, optionally under load.

Targets (issue 14, Flower start-up): the default job (TrieHH, 1,000,000
wordfreq users, 8 SuperNodes, Ray backend) at most 8 s end to end and at
most 3 s connecting its nodes (``timing_s.setup_s``: from the ServerApp's
start to every node having answered the shard query); and on an
overloaded machine it must slow down, not fail: ``--burn 16`` runs it next
to 16 CPU burners (busy Python processes started here and stopped by PID
afterwards, whatever happens), a load average of about 16 on top of
whatever else runs.

With ``--reference DIR`` (a checkout of an earlier commit, e.g. a temporary
``git worktree``) and ``--reference-python`` (an interpreter whose packages
run it), the same job runs from that tree too (first on ``PYTHONPATH``),
alternated with this tree's runs so that both see the same load; medians
are reported side by side with the load average around each run.

Usage::

    python benchmarks/bench_flower_startup.py [--repeats 5] [--burn 16] \\
        [--reference /tmp/flower-before --reference-python /work/venv/bin/python [--reference-repeats 1]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# the command line as the ``fedhh`` console script runs it (``simulations.cli.run``, which ends the
# process); in a reference checkout from before it existed, ``main`` (from fedhh.cli before it moved)
RUN = (
    "import sys\n"
    "try:\n    from simulations.cli import run\n"
    "except ImportError:\n"
    "    try:\n        from fedhh.cli import main\n"
    "    except ModuleNotFoundError:\n        from simulations.cli import main\n"
    "    sys.exit(main(sys.argv[1:]))\n"
    "run()"
)
BURNER = "while True: pass"


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


def one_run(python: str, tree: Path | None, settings: list[str], timeout: float) -> dict[str, Any]:
    """One whole ``fedhh run`` process; its wall time, exit status and the timing it recorded."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="bench-flower-") as scratch:
        env["FLWR_HOME"] = str(Path(scratch) / "flwr-home")
        output = Path(scratch) / "result"
        argv = [python, "-c", RUN, "run", "--quiet", "--output", str(output), *(f"--set={s}" for s in settings)]
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        try:
            completed = subprocess.run(argv, env=env, cwd=tree or Path.cwd(), capture_output=True, text=True,
                                       timeout=timeout)
            status, error = completed.returncode, completed.stderr.strip().splitlines()[-3:]
        except subprocess.TimeoutExpired:
            status, error = None, [f"timed out after {timeout:.0f} s"]
        wall = time.perf_counter() - started
        run: dict[str, Any] = {"end_to_end_s": wall, "status": status, "load": [load_before, os.getloadavg()[0]]}
        result_file = output / "result.json"
        if status == 0 and result_file.is_file():
            document = json.loads(result_file.read_text(encoding="utf-8"))
            timing = document["timing_s"]
            run.update(connect_s=timing["setup_s"], rounds_s=timing["rounds_s"], rounds=len(document["rounds"]),
                       discovered=[hit["item"] for hit in document["heavy_hitters"]])
        else:
            run["error"] = error
    return run


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    done = [run for run in runs if run["status"] == 0 and "connect_s" in run]
    median = {key: round(statistics.median(run[key] for run in done), 2) for key in ("end_to_end_s", "connect_s", "rounds_s")} if done else {}
    return {"completed": f"{len(done)}/{len(runs)}", "median": median,
            "load": [round(min(r["load"][0] for r in runs), 1), round(max(r["load"][1] for r in runs), 1)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--burn", type=int, default=0, help="CPU burner processes to run beside the job")
    parser.add_argument("--reference", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--reference-python", default=sys.executable)
    parser.add_argument("--reference-repeats", type=int, help="runs of the reference (default: --repeats)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is called failed")
    parser.add_argument("--set", action="append", default=[], dest="settings", help="a config override")
    args = parser.parse_args()

    trees: dict[str, tuple[str, Path | None]] = {"after": (sys.executable, None)}
    if args.reference is not None:
        trees = {"before": (args.reference_python, args.reference.resolve()), **trees}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with burners(args.burn):
        reference_repeats = args.repeats if args.reference_repeats is None else args.reference_repeats
        for repeat in range(args.repeats):
            for name, (python, tree) in trees.items():
                if name == "before" and repeat >= reference_repeats:
                    continue
                runs[name].append(one_run(python, tree, args.settings, args.timeout))
                print(name, json.dumps({k: v for k, v in runs[name][-1].items() if k != "discovered"}),
                      file=sys.stderr, flush=True)
    figures: dict[str, Any] = {"burners": args.burn, "repeats": args.repeats, "settings": args.settings,
                               **{name: summary(tree_runs) for name, tree_runs in runs.items()}}
    discoveries = {json.dumps(run["discovered"]) for tree_runs in runs.values() for run in tree_runs if "discovered" in run}
    figures["same_discoveries_in_every_completed_run"] = len(discoveries) <= 1
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
