"""Building users with words of their own, and each user's most frequent word, against independent words.

Builds a wordfreq population of ``--users`` users drawing ``--words`` words each (the whole
population in one shard, as a sweep does) with independent words (the reference, what fedhh
drew before ``population.concentration`` existed), with Dirichlet users (the Pólya urn,
:mod:`fedhh.data.user_words`) at a few concentrations, and reduced to each user's most frequent
word (``population.per_user = "mode"``, :mod:`fedhh.data.per_user`).  The kinds are run in turn,
``--repeats`` rounds, each round starting one kind later, so that all see the same load; medians
of wall and CPU seconds (user and system), and the entries the built population holds.

Usage::

    python benchmarks/bench_users.py [--users 1000000] [--words 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from fedhh.config import build_config
from fedhh.data.sources import make_source
from fedhh.experiment import item_codec

KINDS = {
    "independent (reference)": {"concentration": 0.0, "per_user": "all"},
    "Dirichlet, α = 20": {"concentration": 20.0, "per_user": "all"},
    "Dirichlet, α = 1": {"concentration": 1.0, "per_user": "all"},
    "most frequent word, independent": {"concentration": 0.0, "per_user": "mode"},
    "most frequent word, α = 20": {"concentration": 20.0, "per_user": "mode"},
}


def build_once(users: int, words: int, settings: dict[str, object]) -> tuple[float, float, int]:
    """Wall and CPU seconds of one build of the whole population, and the entries it holds."""
    config = build_config({"population": {"users": users, "words_per_user": words, **settings}})
    source = make_source(config["population"], item_codec(config), seed=0)  # vocabulary from the cache
    wall, cpu = time.perf_counter(), time.process_time()
    shard = source.build_all()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, int(shard.item_ids.size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float, int]]] = {kind: [] for kind in KINDS}
    build_once(10_000, args.words, KINDS["independent (reference)"])  # warm-up: caches, imports
    kinds = list(KINDS)
    for round_ in range(args.repeats):  # the order rotates: no kind always follows the same one
        for kind in kinds[round_ % len(kinds):] + kinds[:round_ % len(kinds)]:
            runs[kind].append(build_once(args.users, args.words, KINDS[kind]))
    print(f"{args.users:,} wordfreq users x {args.words} words, medians of {args.repeats}; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end")
    reference = statistics.median(cpu for _, cpu, _ in runs["independent (reference)"])
    print("| users | wall s | CPU s | CPU / reference | entries held |")
    print("|---|---:|---:|---:|---:|")
    for kind, measured in runs.items():
        wall = statistics.median(w for w, _, _ in measured)
        cpu = statistics.median(c for _, c, _ in measured)
        print(f"| {kind} | {wall:.2f} | {cpu:.2f} | {cpu / reference:.2f} | {measured[0][2]:,} |")


if __name__ == "__main__":
    main()
