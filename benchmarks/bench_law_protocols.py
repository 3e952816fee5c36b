"""Law simulation of MCM, Bitstogram, SPM, RAPPOR, TAPS and the baselines: whole runs from 10^6 to 10^9 users.

Each protocol (those above by default; TrieHH, PEM and TreeHist on request) runs with its
defaults on the default population (wordfreq), fast driver, one shard in process,
``run.simulation = "law"`` at each ``--users``, and once with ``run.simulation = "users"`` at
the smallest (the reference, measured in the same run; ``--law-only`` leaves it out).  Each
point is run ``--repeats`` times (seeds 0, 1, ...) in a fresh process, the points in turn so
that all see the same load: medians of wall seconds and of the peak resident memory.  A law
run costs O(vocabulary) whatever the users, but for SPM's pairs round (O(users), see
docs/simulation.md) and Bitstogram's channels (about √n).  TAPS's parties split the one shard
(its users drawn from one law) by a multivariate hypergeometric draw.

``--reference PATH`` measures a change against the code before it: every run is made a second
time with ``PATH`` (another checkout of fedhh, its ``fedhh``, ``strategies`` and ``simulations``)
first on the Python path, each reference run right after the run it is compared with.

Usage::

    python benchmarks/bench_law_protocols.py [--users 1e6 1e9] [--repeats 3] [--protocols mcm spm ...]
        [--reference /path/to/other/checkout] [--law-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

PROTOCOLS = ("central", "exact", "mcm", "bitstogram", "rappor", "spm", "taps")
ON_REQUEST = ("triehh", "pem", "treehist")
SPM_MAX_USERS = 10**8  # SPM's pairs round grows with the users: larger points are left out

ONE_RUN = """
import json, resource, sys, time
from fedhh.config import load_config
from fedhh.experiment import Experiment
from simulations.fast import run_fast
protocol, users, simulation, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
start = time.perf_counter()
config = load_config(overrides=["run.driver=fast", f"population.users={users}", f"protocol.name={protocol}",
                                f"run.simulation={simulation}", f"run.seed={seed}"])
run_fast(Experiment(config), 1, "inprocess")
print(json.dumps({"wall": time.perf_counter() - start,
                  "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""


def one_run(protocol: str, users: int, simulation: str, seed: int, code: str | None = None) -> dict[str, float]:
    """Wall seconds and peak memory of one whole run, in a fresh process (imports included), of
    the installed fedhh or of the checkout at ``code``."""
    environment = dict(os.environ)
    if code is not None:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [code, environment.get("PYTHONPATH")]))
    # -P: not the working folder first on the path, which may be a checkout of fedhh itself
    done = subprocess.run([sys.executable, "-P", "-c", ONE_RUN, protocol, str(users), simulation, str(seed)],
                          capture_output=True, text=True, check=True, env=environment)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=float, nargs="+", default=[1e6, 1e9])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), choices=PROTOCOLS + ON_REQUEST)
    parser.add_argument("--reference", help="another checkout of fedhh, each run made again with it")
    parser.add_argument("--law-only", action="store_true", help="no users-path run at the smallest size")
    args = parser.parse_args()
    codes = ["this"] + (["reference"] if args.reference else [])
    sizes = sorted(int(users) for users in args.users)
    points = [] if args.law_only else [(protocol, sizes[0], "users") for protocol in args.protocols]
    points += [(protocol, users, "law") for protocol in args.protocols for users in sizes
               if protocol != "spm" or users <= SPM_MAX_USERS]
    runs: dict[tuple[str, int, str, str], list[dict[str, float]]] = {
        (*point, code): [] for point in points for code in codes
    }
    for seed in range(args.repeats):
        for point in points:
            for code in codes:
                runs[(*point, code)].append(one_run(*point, seed, args.reference if code == "reference" else None))
    print(f"medians of {args.repeats} whole runs; {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f} at the end")
    print("| protocol | users | simulation | code | wall s | peak GB |")
    print("|---|---:|---|---|---:|---:|")
    for (protocol, users, simulation, code), measured in runs.items():
        wall = statistics.median(run["wall"] for run in measured)
        peak = statistics.median(run["peak_gb"] for run in measured)
        print(f"| {protocol} | {users:.0e} | {simulation} | {code} | {wall:.2f} | {peak:.2f} |")


if __name__ == "__main__":
    main()
