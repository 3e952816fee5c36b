"""Fast-driver speed and memory: TrieHH's rounds against a bare numpy floor, and the whole run.

Targets (issue 14, speed of the whole run):

* TrieHH's rounds within 2x of a bare numpy computation of the same rounds
  (sampling m of n without replacement, the sampled users' item ids, a
  bincount over the vocabulary's prefix ids, the trie check, the
  threshold), at n = 10^6 and 10^7, measured side by side in one process.
  The floor samples with the protocol's own sampler
  (``fedhh.kernels.sampling.uniform_subset``: O(m log m)); the floor of earlier
  results, which sampled with ``Generator.choice(n, m, replace=False)``
  (numpy's O(n) path at these rates), is reported next to it.  The
  in-process cases are timed again in this process's CPU seconds
  (``time.process_time``), rounds and floor alike (``inprocessxS_cpu``): on
  a shared machine other jobs inflate wall times far more than CPU times;
* the whole ``fedhh run --set run.driver="fast"`` process at 10^7 users
  (and at the default 10^6): at most 4 s and 0.6 GiB peak; reported with and
  without the import of ``simulations.cli``, with the share of the rounds.

Each whole run is a fresh process that imports ``simulations.cli`` and calls its
``main`` as the ``fedhh`` command does; its peak RSS is its own, and that of
the plot process it forks (:mod:`simulations.plot_process`) is reported
beside it.

Usage::

    python benchmarks/bench_fast.py [--repeats 5] [--users 1000000 10000000] [--ray] [--rounds-only] [--output FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

from fedhh.config import load_config  # noqa: E402
from fedhh.data.prefixes import rows_in  # noqa: E402
from fedhh.driving import InProcessShards, drive  # noqa: E402
from fedhh.experiment import Experiment  # noqa: E402
from fedhh.protocols.triehh.server import SAMPLE_PURPOSE, round_sample  # noqa: E402
from simulations.fast import RayShards, run_fast  # noqa: E402
from simulations.ray_runtime import ray_runtime  # noqa: E402

FAST = ['run.driver="fast"']

# A whole `fedhh` process: import the CLI, then run it; prints the import time.
WHOLE_RUN = """
import resource, sys, time
started = time.perf_counter()
import simulations.cli
imported = time.perf_counter()
code = simulations.cli.main(sys.argv[1:])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
plot_process_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
print("BENCH", imported - started, time.perf_counter() - imported, peak, plot_process_peak, flush=True)
sys.exit(code)
"""


def bare_numpy_rounds(experiment: Experiment, rounds: int, sampler: str,
                      clock: Callable[[], float] = time.perf_counter) -> float:
    """The same rounds written as plain numpy over one whole population.

    ``sampler``: ``"subset"`` draws each round's sample as the protocol does
    (the same users), ``"choice"`` with ``Generator.choice`` (the earlier floor).
    ``clock``: wall (``time.perf_counter``) or this process's CPU time
    (``time.process_time``, which other jobs on a shared machine disturb less).
    """
    population = experiment.build_shard(0, 1)
    vocabulary = population.vocabulary
    params = experiment.make_server().params
    items = population.item_ids
    holds = np.diff(population.item_offsets) > 0
    item_of_user = np.full(population.n_users, -1, dtype=np.int64)
    item_of_user[holds] = items
    vocabulary.prefixes.build_all()
    started = clock()
    parents = np.zeros((0, 0), dtype=np.int64)
    for depth in range(1, rounds + 1):
        if sampler == "subset":
            sampled = round_sample(experiment.randomness, depth, params.n_users, params.batch_size)
        else:
            generator = experiment.randomness.generator(SAMPLE_PURPOSE, depth)
            sampled = generator.choice(params.n_users, params.batch_size, replace=False)
        chosen = item_of_user[sampled]
        chosen = chosen[chosen >= 0]
        prefix_rows, item_to_prefix = vocabulary.prefixes.at(depth)
        votes = np.bincount(item_to_prefix[chosen][item_to_prefix[chosen] >= 0], minlength=prefix_rows.shape[0])
        voted = np.flatnonzero(votes)
        rows = prefix_rows[voted]
        if depth > 1:
            keep = rows_in(rows[:, :-1], parents)
            rows, counts = rows[keep], votes[voted][keep]
        else:
            counts = votes[voted]
        accepted = rows[counts >= params.theta]
        parents = accepted[accepted[:, -1] != 0]
    return clock() - started


def rounds_cpu_seconds(experiment: Experiment, holders: InProcessShards) -> float:
    """CPU seconds of this process for one run of the rounds over in-process shards."""
    server = experiment.make_server()
    started = time.process_time()
    drive(server, holders.answer)
    return time.process_time() - started


def rounds_against_floor(users: int, repeats: int, ray: bool) -> dict[str, Any]:
    """Medians of the fast driver's rounds and of the floors, alternated in one process."""
    experiment = Experiment(load_config(None, [*FAST, f"population.users={users}"]))
    figures: dict[str, Any] = {}
    cases = [("inprocess", 1), ("inprocess", 8)] + ([("ray", 8)] if ray else [])
    for backend, shards in cases:
        rounds, setups, floor, choice_floor = [], [], [], []
        # One Ray for all repeats (run_fast alone would start and stop one each time); each run is
        # followed by the floors, so that both see the same load.
        with ray_runtime(**RayShards.INIT_ARGS) if backend == "ray" else contextlib.nullcontext():
            for _ in range(repeats):
                run = run_fast(experiment, shards, backend)
                rounds.append(run.timing["rounds_s"])
                setups.append(run.timing["setup_s"])
                floor.append(bare_numpy_rounds(experiment, len(run.result.trace), "subset"))
                choice_floor.append(bare_numpy_rounds(experiment, len(run.result.trace), "choice"))
        if backend == "inprocess":  # the same rounds in CPU seconds, alternating with the floor
            holders = InProcessShards(experiment, shards)
            cpu, cpu_floor = [], []
            for _ in range(repeats):
                cpu.append(rounds_cpu_seconds(experiment, holders))
                cpu_floor.append(bare_numpy_rounds(experiment, len(run.result.trace), "subset", time.process_time))
            figures[f"{backend}x{shards}_cpu"] = {
                "rounds_s": statistics.median(cpu), "floor_s": statistics.median(cpu_floor),
                "ratio": statistics.median(cpu) / statistics.median(cpu_floor),
            }
        figures[f"{backend}x{shards}"] = {
            "rounds_s": statistics.median(rounds),
            "floor_s": statistics.median(floor),
            "ratio": statistics.median(rounds) / statistics.median(floor),
            "choice_floor_s": statistics.median(choice_floor),
            "setup_s": statistics.median(setups),
            "rounds": len(run.result.trace),
            "batch_size": run.result.params["batch_size"],
            "discovered": len(run.result.discoveries),
        }
    return figures


def whole_run(users: int, repeats: int) -> dict[str, Any]:
    """``fedhh run --set run.driver="fast"`` in fresh processes: wall, import, phases, peak RSS."""
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="fedhh-bench-") as scratch:
            output = Path(scratch) / "run"
            command = [sys.executable, "-c", WHOLE_RUN, "run", "--set", 'run.driver="fast"',
                       "--set", f"population.users={users}", "--output", str(output), "--quiet"]
            started = time.perf_counter()
            child = subprocess.run(command, check=True, capture_output=True, text=True)
            wall = time.perf_counter() - started
            line = next(line for line in child.stdout.splitlines() if line.startswith("BENCH"))
            import_s, main_s, peak_gib, child_peak_gib = (float(value) for value in line.split()[1:])
            timing = json.loads((output / "result.json").read_text(encoding="utf-8"))["timing_s"]
        runs.append({
            "wall_s": wall, "import_s": import_s, "without_import_s": wall - import_s, "main_s": main_s,
            **{f"{phase}": seconds for phase, seconds in timing.items()},
            "rounds_share": timing["rounds_s"] / wall,
            "peak_rss_gib": peak_gib,
            "plot_process_peak_rss_gib": child_peak_gib,
        })
    keys = [key for key in runs[0] if isinstance(runs[0][key], float)]
    return {"median": {key: statistics.median(run[key] for run in runs) for key in keys}, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--users", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--ray", action="store_true", help="also Ray with 8 actors (about 15 s of start-up each)")
    parser.add_argument("--rounds-only", action="store_true", help="only the rounds against the floor, no whole runs")
    parser.add_argument("--output", default="results/bench_fast.json")
    args = parser.parse_args()
    document: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                    "load_average_start": os.getloadavg()},
    }
    for users in args.users:
        if not args.rounds_only:
            document[f"whole_run_{users}"] = whole_run(users, args.repeats)
        document[f"rounds_{users}"] = rounds_against_floor(users, args.repeats, args.ray and users <= 1_000_000)
    document["machine"]["load_average_end"] = os.getloadavg()
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=2), encoding="utf-8")
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
