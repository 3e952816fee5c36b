"""Two phases of a decode, each against its reference on the same data in the same run.

    python benchmarks/bench_small_products.py [--repeats 9] [--burn]

* BLAS threads (:mod:`fedhh.kernels.blas`): RAPPOR's normal-equation solve (Cholesky
  factorisation, triangular inversion, two products; :func:`fedhh.protocols.rappor.server.solve_normal`'s
  arithmetic) of random ``(n, n)`` normal matrices, n = 100, 300, 600, 1,024, with
  the BLAS libraries' default threads and inside :func:`fedhh.kernels.blas.single_blas_thread`,
  alternated call by call with a pause after each; wall and CPU time per solve.  Run it
  on an idle machine and beside a CPU-bound process (``--burn``): the default threads
  then share a core with it.
* ``hash_expanded`` in place (:func:`fedhh.oracles.hashing.hash_expanded`): the 16 rows of
  a sketch's hash of 186,624 candidates (SFP's (fragment, hash) pairs of one position)
  into 1,024 buckets, against the previous formula ``((a x + b) >> 32) g >> 32`` written
  with new arrays at each step; the buckets are checked equal.

Scope: one phase each, not a whole run; medians of ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import scipy.linalg  # loaded before the limit, so that it covers scipy's own BLAS (fedhh.kernels.blas)

from fedhh.kernels.blas import single_blas_thread
from fedhh.oracles.hashing import expand_seeds, hash_expanded, mix_keys

SPIN_S = 0.2  # pause after each solve: OpenBLAS's threads spin for up to ~0.1 s after a threaded call


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """(wall s, CPU s) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def solve(normal: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    factor = scipy.linalg.cholesky(normal, lower=True)
    inverse, _ = scipy.linalg.lapack.dtrtri(factor, lower=1)
    return inverse.T @ (inverse @ rhs)


def single_threaded_solve(normal: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    with single_blas_thread():
        return solve(normal, rhs)


def previous_hash(multipliers: np.ndarray, offsets: np.ndarray, mixed: np.ndarray, g: int) -> np.ndarray:
    """``hash_expanded`` before it worked in place: a new array at each step."""
    with np.errstate(over="ignore"):
        z = multipliers * mixed + offsets
    return ((z >> np.uint64(32)) * np.uint64(g)) >> np.uint64(32)


def median_ms(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples) * 1e3, statistics.median(s[1] for s in samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--burn", action="store_true", help="run beside one CPU-bound process (started and stopped here)")
    args = parser.parse_args()
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.burn else None
    try:
        measure(args.repeats)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()


def measure(repeats: int) -> None:
    print(f"load average {os.getloadavg()[0]:.1f}")
    rng = np.random.default_rng(0)
    print("| n | default threads: ms wall (CPU) | one thread: ms wall (CPU) | wall ratio |")
    print("|---:|---:|---:|---:|")
    for n in (100, 300, 600, 1024):
        design = rng.standard_normal((2048, n))
        normal, rhs = design.T @ design, rng.standard_normal(n)
        np.testing.assert_allclose(solve(normal, rhs), single_threaded_solve(normal, rhs), rtol=1e-8)
        default, single = [], []
        for _ in range(repeats):  # alternated, so both see the same load
            default.append(timed(lambda: solve(normal, rhs)))
            time.sleep(SPIN_S)  # idle BLAS threads spin a while: not billed to the next call
            single.append(timed(lambda: single_threaded_solve(normal, rhs)))
            time.sleep(SPIN_S)
        (dw, dc), (sw, sc) = median_ms(default), median_ms(single)
        print(f"| {n} | {dw:.1f} ({dc:.1f}) | {sw:.1f} ({sc:.1f}) | {dw / sw:.1f}x |")
    multipliers, offsets = expand_seeds(np.arange(16, dtype=np.uint64))
    mixed = mix_keys(np.arange(186_624, dtype=np.uint64))[None, :]
    rows = multipliers[:, None], offsets[:, None]
    assert np.array_equal(previous_hash(*rows, mixed, 1024), hash_expanded(*rows, mixed, 1024))
    before, after = [], []
    for _ in range(repeats):
        before.append(timed(lambda: previous_hash(*rows, mixed, 1024)))
        after.append(timed(lambda: hash_expanded(*rows, mixed, 1024)))
    (bw, bc), (aw, ac) = median_ms(before), median_ms(after)
    print(f"\nhash_expanded, 16 x 186,624 keys into 1,024 buckets: previous {bw:.1f} ms ({bc:.1f} CPU), "
          f"now {aw:.1f} ms ({ac:.1f} CPU), {bw / aw:.1f}x; same buckets")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
