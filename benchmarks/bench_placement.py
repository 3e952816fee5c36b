"""What placing shards on the nodes that hold them costs (``simulations.placement``).

Starts a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``,
its own temporary folder, shut down at the end), each node declaring a
folder of its own with half of a population's stored shards, and times
:func:`simulations.placement.dataset_placement` (one probe task pinned to
each node, then the assignment) and a whole fast-driver run from the
population, placed, against the same run from a folder every node holds
(nothing to place).

    python benchmarks/bench_placement.py --users 1000000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from fedhh.config import build_config
from fedhh.experiment import Experiment
from fedhh.results import ResultsFolder
from simulations.fast import run_fast
from simulations.placement import HOLDINGS_VARIABLE, dataset_placement
from simulations.population_build import build_population
from simulations.ray_runtime import ray_runtime

STORED = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from ray.cluster_utils import Cluster

    with tempfile.TemporaryDirectory(prefix="fedhh-bp-", ignore_cleanup_errors=True) as scratch:
        temp = Path(scratch)
        full = temp / "full"
        with ResultsFolder.claim(full) as output:
            build_population(build_config({"population": {"users": args.users}, "run": {"seed": 1}}), output,
                             shards=STORED, workers=1)
        halves = []
        for name, keep in (("a", {0, 1}), ("b", {2, 3})):
            shutil.copytree(full, temp / name)
            for index in set(range(STORED)) - keep:
                (temp / name / f"shard-{index:05d}.parquet").unlink()
            halves.append(temp / name)
        catalogue = temp / "catalogue"
        shutil.copytree(halves[0], catalogue)
        for index in (0, 1):
            (catalogue / f"shard-{index:05d}.parquet").unlink()
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "temp_dir": str(temp / "ray"), "include_dashboard": False,
            "env_vars": {HOLDINGS_VARIABLE: str(halves[0])}})
        try:
            cluster.add_node(num_cpus=1, env_vars={HOLDINGS_VARIABLE: str(halves[1])})
            cluster.wait_for_nodes()
            os.environ["RAY_ADDRESS"] = cluster.address

            def config(folder: Path) -> object:
                return build_config({"population": {"source": "dataset", "path": str(folder)},
                                     "run": {"driver": "fast", "backend": "ray", "shards": STORED, "seed": 1}})

            probes, placed, shared = [], [], []
            with ray_runtime():
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    assert dataset_placement(config(catalogue), STORED) is not None
                    probes.append(time.perf_counter() - started)
            for _ in range(args.repeats):
                for folder, times in ((catalogue, placed), (full, shared)):
                    experiment = Experiment(config(folder))
                    started = time.perf_counter()
                    run_fast(experiment, STORED, "ray")
                    times.append(time.perf_counter() - started)
            print(json.dumps({"users": args.users, "repeats": args.repeats,
                              "placement_s_median": statistics.median(probes),
                              "run_placed_s_median": statistics.median(placed),
                              "run_shared_folder_s_median": statistics.median(shared),
                              "placement_s": probes, "run_placed_s": placed, "run_shared_folder_s": shared}))
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main()
