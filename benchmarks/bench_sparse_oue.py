"""The sparse OUE path alone: the geometric-gap walk and its counting, in ns a set bit.

    python benchmarks/bench_sparse_oue.py [--users 1048576] [--call-users 131072] [--repeats 7]
        [--epsilon 4] [--domain 1024] [--groups 48] [--output results/bench_sparse_oue.json]

What SFP with CMS does per block of users at 10^6 users (``fedhh.protocols.sfp.respond``):
``UnaryEncoding.randomize_aggregate_groups`` on ``--call-users`` users a call (SFP's
``USERS_PER_BLOCK``), OUE rows of ``--domain`` bits at ε = ``--epsilon`` (q' = 0.018 at 4:
about 18.4 set bits a user), users spread over ``--groups`` groups (SFP's fragment sketch: 3
positions x 16 sketch rows; the word sketch has 16).  Timed, CPU and wall, median over
``--repeats`` passes over ``--users`` users (each pass under its own seed, the first pass
untimed to warm the scratch arrays):

* ``walk``: :func:`fedhh.kernels.sparse_bernoulli.grid_set_bits` consumed without counting;
* ``counts``: the whole grouped call (own bits, walk, counting, statistics).

ns a set bit divides by the set bits the walk yields in that pass.  Runs against whatever
``fedhh`` is imported: ``PYTHONPATH=/work/main`` times main's code with the same script.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import fedhh
from fedhh.kernels.randomness import RangeRandom, derive_key
from fedhh.kernels.sparse_bernoulli import grid_set_bits
from fedhh.oracles import make_oracle


def timed(function) -> tuple[float, float, object]:
    """(CPU s, wall s, result) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = function()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1 << 20)
    parser.add_argument("--call-users", type=int, default=1 << 17)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--domain", type=int, default=1024)
    parser.add_argument("--groups", type=int, default=48)
    parser.add_argument("--output", default="results/bench_sparse_oue.json")
    args = parser.parse_args()

    oracle = make_oracle("oue", epsilon=args.epsilon, domain=args.domain)
    population = np.random.default_rng(0)
    values = population.integers(0, args.domain, args.users).astype(np.uint64)
    groups = population.integers(0, args.groups, args.users)
    calls = [(first, min(args.call_users, args.users - first)) for first in range(0, args.users, args.call_users)]

    def walk(seed: int) -> int:
        key = derive_key(seed, "bench.walk", 1)
        return sum(positions.size for first, n in calls
                   for _, positions in grid_set_bits(RangeRandom(key, first, n), args.domain, oracle.q))

    def count(seed: int) -> int:
        key = derive_key(seed, "bench.counts", 1)
        total = 0
        for first, n in calls:
            stats = oracle.randomize_aggregate_groups(values[first : first + n], groups[first : first + n], args.groups,
                                                      RangeRandom(key, first, n))
            total += sum(int(s.counts.sum()) for s in stats)
        return total

    rows = {}
    for name, function in (("walk", walk), ("counts", count)):
        function(10_000)  # warm: scratch arrays, imports
        cpu, wall, bits = [], [], []
        for repeat in range(args.repeats):
            c, w, b = timed(lambda: function(repeat))
            cpu.append(c)
            wall.append(w)
            bits.append(b)
        mean_bits = statistics.mean(bits)
        rows[name] = {
            "cpu_ns_per_set_bit": 1e9 * statistics.median(cpu) / mean_bits,
            "wall_ns_per_set_bit": 1e9 * statistics.median(wall) / mean_bits,
            "cpu_ns_per_user": 1e9 * statistics.median(cpu) / args.users,
            "set_bits_per_user": mean_bits / args.users,
            "cpu_s": cpu,
            "wall_s": wall,
        }
        print(f"{name:7s} {rows[name]['cpu_ns_per_set_bit']:6.2f} ns a set bit CPU "
              f"({rows[name]['wall_ns_per_set_bit']:6.2f} wall), {rows[name]['cpu_ns_per_user']:7.1f} ns a user, "
              f"{mean_bits / args.users:.2f} set bits a user", flush=True)
    document = {
        "fedhh": os.path.dirname(fedhh.__file__),
        "arguments": vars(args),
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                    "load": os.getloadavg()},
        "results": rows,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
