"""Round latency of a real Flower deployment on loopback (issue 13, part 5).

A SuperLink and N SuperNodes as separate processes (``LocalDeployment``),
TrieHH on a small population, ``flwr run``: the figure is the median of
the ServerApp's own per-round times (from pushing a round's requests to
the last reply, the ``(x.xx s)`` of each ``[round i/L]`` log line), plus
the run's start-up (the ServerApp started to round 1: nodes found, shards
built), the whole ``flwr run``, and the CPU seconds of every process of
the deployment (SuperLink, SuperNodes, their ClientApps, ``flwr``).
Each SuperNode setup is measured in the same invocation, alternated
run by run, so that all see the same load:

* ``flower``: Flower's ``flower-supernode`` as it comes (idle poll 3 s,
  one ``flwr-clientapp`` process per message);
* ``clientapp-process``: ``--isolation process`` served by one long-running
  ClientApp process (``simulations.clientapp_process``), Flower's 3 s idle poll;
* ``fast`` (the default of ``LocalDeployment``): that, and the SuperNode's
  idle poll capped at 0.1 s (``simulations.supernode``).

Every result must be the same discovery (checked).  ``uptime`` is recorded
before and after each run: the machine is shared.

Usage::

    python benchmarks/bench_deployment.py [--supernodes 3 10] [--users 20000] [--repeats 2]
        [--setups flower clientapp-process fast] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedhh.config import load_config  # noqa: E402
from simulations.deployment import LocalDeployment  # noqa: E402

SETUPS: dict[str, dict[str, Any]] = {
    "flower": {"idle_poll": None, "clientapp_process": False},
    "clientapp-process": {"idle_poll": 3.0, "clientapp_process": True},
    "fast": {"idle_poll": 0.1, "clientapp_process": True},
}
ROUND_LINE = re.compile(r"\[round (\d+)/\d+\].*\(([\d.]+) s\)")


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average: ")[-1]


def children_cpu() -> float:
    """CPU seconds (user + system) of the ended child processes and the descendants they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(setup: str, supernodes: int, users: int, max_length: int, folder: Path) -> dict[str, Any]:
    """Start a deployment with ``setup``'s SuperNodes, run TrieHH once, stop everything; the timings."""
    config = load_config(None, [f"population.users={users}", f"protocol.max_length={max_length}",
                                f"run.shards={supernodes}"])
    output = folder / "out"
    run_config = {**config.to_flat(), "output-dir": str(output), "progress": False}
    load_before = load()
    cpu_before = children_cpu()
    started = time.monotonic()
    with LocalDeployment(folder / "deployment", **SETUPS[setup]) as deployment:
        deployment.start_superlink()
        for index in range(supernodes):
            deployment.add_supernode(f"supernode-{index}", {"partition-id": index, "num-partitions": supernodes})
        deployment.wait_for_supernodes(supernodes)
        online_s = time.monotonic() - started
        outcome = deployment.run(run_config, timeout=900)
        if not outcome.succeeded:
            raise RuntimeError(f"{setup}: {outcome.status} {outcome.details}\n{outcome.output}\n{deployment.logs()}")
    document = json.loads((output / "result.json").read_text(encoding="utf-8"))
    rounds = [float(match.group(2)) for line in outcome.lines if (match := ROUND_LINE.search(line))]
    return {
        "setup": setup,
        "supernodes": supernodes,
        "round_s": rounds,
        "median_round_s": statistics.median(rounds),
        "startup_s": document["timing_s"]["experiment_s"] + document["timing_s"]["setup_s"],
        "run_s": outcome.seconds,
        "nodes_online_s": online_s,
        "cpu_s": children_cpu() - cpu_before,
        "items": sorted(hit["item"] for hit in document["heavy_hitters"]),
        "load_before": load_before,
        "load_after": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supernodes", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--max-length", type=int, default=4, help="protocol.max_length: rounds of TrieHH")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--setups", nargs="+", choices=sorted(SETUPS), default=list(SETUPS))
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fedhh-bench-deployment-") as scratch:
        for supernodes in args.supernodes:
            for repeat in range(args.repeats):
                for setup in args.setups:  # alternated: each setup sees the same load
                    run = one_run(setup, supernodes, args.users, args.max_length,
                                  Path(scratch) / f"{setup}-{supernodes}-{repeat}")
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    summary = []
    for supernodes in args.supernodes:
        for setup in args.setups:
            mine = [run for run in runs if run["setup"] == setup and run["supernodes"] == supernodes]
            summary.append({
                "setup": setup, "supernodes": supernodes, "runs": len(mine),
                "median_round_s": statistics.median(r for run in mine for r in run["round_s"]),
                "median_startup_s": statistics.median(run["startup_s"] for run in mine),
                "median_run_s": statistics.median(run["run_s"] for run in mine),
                "median_cpu_s": statistics.median(run["cpu_s"] for run in mine),
            })
        items = {json.dumps(run["items"]) for run in runs if run["supernodes"] == supernodes}
        if len(items) != 1:
            raise AssertionError(f"{supernodes} SuperNodes: the setups found different items: {items}")
    print(f"\n{platform.node()}, {os.cpu_count()} cores, {args.users} users, TrieHH max_length {args.max_length}")
    print(f"{'setup':<18} {'nodes':>5} {'runs':>4} {'median round s':>15} {'start-up s':>11} {'run s':>7} {'CPU s':>7}")
    for row in summary:
        print(f"{row['setup']:<18} {row['supernodes']:>5} {row['runs']:>4} {row['median_round_s']:>15.2f} "
              f"{row['median_startup_s']:>11.2f} {row['median_run_s']:>7.1f} {row['median_cpu_s']:>7.1f}")
    if args.output is not None:
        args.output.write_text(json.dumps({"runs": runs, "summary": summary}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
