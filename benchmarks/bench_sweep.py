"""``fedhh sweep`` speed: a 100-trial TrieHH sweep, whole command, with 1 and 2 workers.

Target (issue 10): 5 population sizes up to 1,000,000 x 5 ε x 4 trials of
TrieHH on the embedded wordfreq population in under 5 minutes on a 2-core
machine; report trials per second, the share of the time spent building
populations (each built once), and how the wall time scales with
``--workers`` 1 and 2.  A second, smaller sweep of PEM runs (seconds per
trial rather than milliseconds) shows the scaling where the trials, not the
workers' start-up, dominate (``--scenario pem``).

Each repeat runs ``fedhh sweep`` as a fresh process (scope: the whole
command, process start to exit, imports included) into a new folder, the
worker counts interleaved so that both see the same machine load; the
figures are medians over repeats.  Population time is the trials' own
``population_s`` (drawing the users, their truth, and for the first
population of a worker process the encoded vocabulary and its prefix index),
summed over the workers.

Usage::

    python benchmarks/bench_sweep.py [--scenario triehh|pem] [--repeats 3] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

SCENARIOS = {
    "triehh": """
# 100 TrieHH trials: 5 population sizes x 5 ε x 4 trials (benchmarks/bench_sweep.py)
[population]
source = "wordfreq"
[privacy]
delta = 1e-12
[run]
top_k = 100
[sweep]
trials = 4
"population.users" = [10_000, 30_000, 100_000, 300_000, 1_000_000]
"privacy.epsilon" = [0.5, 1, 2, 4, 8]
""",
    "pem": """
# 12 PEM trials on 200,000 wordfreq users (benchmarks/bench_sweep.py --scenario pem)
[population]
source = "wordfreq"
users = 200_000
[protocol]
name = "pem"
oracle = "flh"
top_k = 16
candidates_per_step = 16
[run]
top_k = 16
[sweep]
trials = 6
items = 100
"privacy.epsilon" = [2, 4]
""",
}
TRIALS = {"triehh": 100, "pem": 12}


def run_once(sweep: Path, folder: Path, workers: int, expected: int) -> dict[str, float]:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "simulations.cli", "sweep", str(sweep), "--output", str(folder), "--workers", str(workers),
         "--quiet"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    rows = pq.read_table(folder / "trials.parquet").to_pylist()
    if len(rows) != expected or any(row["error"] for row in rows):
        raise RuntimeError(f"expected {expected} successful trials, got {len(rows)} "
                           f"({[r['error'] for r in rows if r['error']]})")
    population = sum(row["population_s"] for row in rows)
    trials = sum(row["wall_s"] for row in rows)
    return {
        "wall_s": wall,
        "trials_per_s": len(rows) / wall,
        "population_builds": sum(row["population_s"] > 0 for row in rows),
        "population_s": population,
        "trial_s": trials,
        "population_share": population / (population + trials),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="triehh")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    figures: dict[int, list[dict[str, float]]] = {workers: [] for workers in args.workers}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        sweep = Path(scratch) / "bench.toml"
        sweep.write_text(SCENARIOS[args.scenario], encoding="utf-8")
        for repeat in range(args.repeats):
            for workers in args.workers:
                figures[workers].append(
                    run_once(sweep, Path(scratch) / f"w{workers}-r{repeat}", workers, TRIALS[args.scenario]))
    summary: dict[str, object] = {
        "scenario": args.scenario,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "repeats": args.repeats,
    }
    for workers, runs in figures.items():
        summary[f"workers_{workers}"] = {
            key: statistics.median(run[key] for run in runs) for key in runs[0]
        } | {"wall_s_all": [round(run["wall_s"], 2) for run in runs]}
    if 1 in figures and 2 in figures:
        summary["speedup_2_over_1"] = (statistics.median(run["wall_s"] for run in figures[1])
                                       / statistics.median(run["wall_s"] for run in figures[2]))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
