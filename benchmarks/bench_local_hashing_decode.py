"""Local-hashing decodes, compiled against numpy on the same data in the same run, and what
loading the compiled code costs a process.

    python benchmarks/bench_local_hashing_decode.py [--repeats 5]

* OLH supports (:func:`fedhh.oracles.hashing.count_supports`): one PEM level's decode in one
  shard at 10^6 users and 8 shards (31,250 reports against 131,072 candidates, ε = 4: g =
  56), and a few-candidate shape (10^6 reports against 20 candidates), with ``FEDHH_NUMBA=1``
  and ``=0`` alternated call by call; CPU nanoseconds per (report, candidate) pair (CPU time
  of every thread), wall seconds, and the counts checked equal.
* FLH supports (:meth:`fedhh.oracles.fast_local_hashing.FastLocalHashing.support`): 1,000
  functions, g = 56, against 131,072 candidates: CPU nanoseconds per (function, candidate)
  hash.
* Loading: a fresh interpreter imports :mod:`fedhh.oracles.compiled_hashing` and makes its
  first decode, with an empty ``NUMBA_CACHE_DIR`` (compiles) and then with the cache it
  wrote (loads); wall seconds of the import and of that first call, medians of the repeats.

Scope: one decode each, not a whole run; medians of ``--repeats`` calls.
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
from collections.abc import Callable

import numpy as np

from fedhh.oracles.fast_local_hashing import FastLocalHashing, FastLocalHashStatistics
from fedhh.oracles.numba_setting import NUMBA_VARIABLE
from fedhh.oracles.hashing import count_supports

FIRST_DECODE = """
import json, time
started = time.perf_counter()
import numpy as np
from fedhh.oracles import compiled_hashing
imported = time.perf_counter()
words = np.arange(1, 100, dtype=np.uint32)
compiled_hashing.count_local_hash_supports(words, words, words, words[:9])
print(json.dumps({"import_s": imported - started, "first_call_s": time.perf_counter() - imported}))
"""


def timed(call: Callable[[], object]) -> tuple[float, float, object]:
    """(wall s, CPU s of every thread, result) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def compare(name: str, evaluations: int, decode: Callable[[], np.ndarray], repeats: int) -> None:
    """``decode`` compiled and in numpy, alternated; medians, and the results checked equal."""
    figures: dict[str, list[tuple[float, float]]] = {"1": [], "0": []}
    results = {}
    for _ in range(repeats):
        for setting in ("1", "0"):
            os.environ[NUMBA_VARIABLE] = setting
            wall, cpu, results[setting] = timed(decode)
            figures[setting].append((wall, cpu))
    assert np.array_equal(results["1"], results["0"]), name
    medians = {setting: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
               for setting, runs in figures.items()}
    compiled, numpy_path = medians["1"], medians["0"]
    print(f"| {name} | {numpy_path[1] / evaluations * 1e9:.3f} | {compiled[1] / evaluations * 1e9:.3f} | "
          f"{numpy_path[1] / compiled[1]:.1f}x | {numpy_path[0]:.3f} | {compiled[0]:.3f} |", flush=True)


def first_decodes(repeats: int) -> None:
    """A fresh process's import and first call, compiling (empty cache) and loading (cached)."""
    runs: dict[str, list[dict[str, float]]] = {"compiled (empty cache)": [], "loaded (cached)": []}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            environment = {**os.environ, "NUMBA_CACHE_DIR": cache}
            for kind in runs:
                finished = subprocess.run([sys.executable, "-c", FIRST_DECODE], env=environment,
                                          capture_output=True, text=True, check=True)
                runs[kind].append(json.loads(finished.stdout))
    for kind, figures in runs.items():
        imported = statistics.median(f["import_s"] for f in figures)
        first = statistics.median(f["first_call_s"] for f in figures)
        print(f"| {kind} | {imported:.2f} | {first:.2f} | {imported + first:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    generator = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.1f}, cores {len(os.sched_getaffinity(0))}")
    print("| decode | numpy CPU ns | compiled CPU ns | ratio | numpy wall s | compiled wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for reports, candidates in ((31_250, 131_072), (1_000_000, 20)):
        seeds = generator.integers(0, 2**64 - 1, reports, dtype=np.uint64, endpoint=True)
        buckets = generator.integers(0, 56, reports)
        keys = generator.integers(0, 2**64 - 1, candidates, dtype=np.uint64, endpoint=True)
        compare(f"OLH, {reports:,} reports x {candidates:,} candidates, per pair", reports * candidates,
                lambda: count_supports(seeds, buckets, 56, keys), args.repeats)
    oracle = FastLocalHashing(4.0, 1 << 64, hash_functions=1000, seed=1)
    statistics_ = FastLocalHashStatistics(generator.integers(0, 1000, (1000, oracle.g)), 10**6)
    keys = generator.integers(0, 2**64 - 1, 131_072, dtype=np.uint64, endpoint=True)
    compare(f"FLH, 1,000 functions x 131,072 candidates (g = {oracle.g}), per hash", 1000 * keys.size,
            lambda: oracle.support(statistics_, keys).counts, args.repeats)
    print()
    print("| a fresh process's first decode | import s | first call s | total s |")
    print("|---|---:|---:|---:|")
    first_decodes(args.repeats)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
