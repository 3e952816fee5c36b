"""Fast-driver speed and memory against a bare numpy computation of the same rounds.

Targets (issue: TrieHH end to end):

* n = 1,000,000, default parameters: the rounds of a full discovery within
  3x the time of a bare numpy computation of the same rounds (sampling,
  bincount of the sampled users' item ids, prefix aggregation, trie check),
  measured in the same run; one-time costs (Ray start, shard placement)
  reported apart;
* building the population within 2 s;
* 10,000,000 users complete; time and peak RSS (target < 3 GiB), run in a
  fresh subprocess so the peak is its own.

Usage::

    python benchmarks/bench_fast.py [--repeats 5] [--skip-10m]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

from fedhh.config import load_config  # noqa: E402
from fedhh.experiment import Experiment  # noqa: E402
from fedhh.prefixes import rows_in  # noqa: E402
from fedhh.protocols.triehh import SAMPLE_PURPOSE  # noqa: E402
from simulations.fast import RayShards, run_fast  # noqa: E402
from simulations.ray_runtime import ray_runtime  # noqa: E402

FAST = ['run.driver="fast"']


def bare_numpy_rounds(experiment: Experiment, rounds: int) -> float:
    """The same rounds written as plain numpy over one whole population."""
    population = experiment.build_shard(0, 1)
    vocabulary = population.vocabulary
    server = experiment.make_server()
    params = server.params
    items = population.item_ids
    holds = np.diff(population.item_offsets) > 0
    item_of_user = np.full(population.n_users, -1, dtype=np.int64)
    item_of_user[holds] = items
    started = time.perf_counter()
    parents = np.zeros((0, 0), dtype=np.int64)
    for depth in range(1, rounds + 1):
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
    return time.perf_counter() - started


def measure_1m(repeats: int) -> dict:
    population_times = []
    for _ in range(repeats):
        started = time.perf_counter()
        experiment = Experiment(load_config(None, FAST))
        experiment.build_shard(0, 1)
        population_times.append(time.perf_counter() - started)
    figures: dict[str, object] = {"population_build_s": statistics.median(population_times)}
    for backend, shards in (("inprocess", 1), ("inprocess", 8), ("ray", 8)):
        rounds, setups, bares = [], [], []
        # One Ray for all repeats (run_fast alone would start and stop one each time).
        with ray_runtime(**RayShards.INIT_ARGS) if backend == "ray" else contextlib.nullcontext():
            runs = [run_fast(experiment, shards, backend) for _ in range(repeats)]
        for run in runs:
            rounds.append(run.timing["rounds_s"])
            setups.append(run.timing["setup_s"])
            bares.append(bare_numpy_rounds(experiment, len(run.result.trace)))
        figures[f"{backend}x{shards}"] = {
            "rounds_s_median": statistics.median(rounds),
            "bare_numpy_s_median": statistics.median(bares),
            "ratio_of_medians": statistics.median(rounds) / statistics.median(bares),
            "setup_s_median": statistics.median(setups),
            "rounds": len(run.result.trace),
            "discovered": len(run.result.discoveries),
        }
    return figures


def measure_10m_in_subprocess() -> dict:
    code = (
        "import json, resource, time, os\n"
        "os.environ.setdefault('RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO', '0')\n"
        "from fedhh.config import load_config\n"
        "from fedhh.experiment import Experiment\n"
        "from simulations.fast import run_fast\n"
        "t = time.perf_counter()\n"
        "e = Experiment(load_config(None, ['run.driver=\"fast\"', 'population.users=10000000']))\n"
        "run = run_fast(e, 8, 'inprocess')\n"
        "total = time.perf_counter() - t\n"
        "print(json.dumps({'total_s': total, **run.timing, 'rounds': len(run.result.trace),\n"
        "  'discovered': len(run.result.discoveries), 'batch_size': run.result.params['batch_size'],\n"
        "  'peak_rss_gib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))\n"
    )
    output = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-10m", action="store_true")
    args = parser.parse_args()
    figures = {"n_1m": measure_1m(args.repeats)}
    if not args.skip_10m:
        figures["n_10m_inprocess_8_shards"] = measure_10m_in_subprocess()
    figures["peak_rss_gib_this_process"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
