"""PEM's optimizer under eq. (5) and under the order-statistics model, side by side.

    python benchmarks/bench_pem_plan.py [--repeats 3]

The optimizer runs when a PEM run leaves ``protocol.segment_length = 0`` and
in ``fedhh plan pem``; the order-statistics model costs more per design, so
this measures what it adds.  Each case builds a fresh utility model (the
oracle's variance fit included) and optimizes, alternating the two models,
``--repeats`` times; medians of wall seconds, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from fedhh.protocols.common.prefix_encoding import ValueSpace
from fedhh.protocols.prefix_search.pem_analysis import (
    EQUATION_5,
    ORDER_STATISTICS,
    UtilityModel,
    optimize_pem,
    zipf_frequencies,
)

CASES = (  # (n, ε, k, bits, oracle)
    (50_000, 2.0, 8, 64, "olh"),
    (1_000_000, 4.0, 32, 64, "olh"),
    (1_000_000, 4.0, 32, 64, "flh"),
)


def optimize_seconds(case: tuple[int, float, int, int, str], model: str) -> tuple[float, float]:
    n, epsilon, k, bits, oracle = case
    started = time.perf_counter()
    utility = UtilityModel(ValueSpace(bits, 2), n, epsilon, k, oracle, zipf_frequencies(1.0, 10_000), model=model)
    prediction = optimize_pem(utility)
    return time.perf_counter() - started, prediction.f1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print("| n, ε, k, m bits, oracle | eq. (5): s | F1 | order statistics: s | F1 | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in CASES:
        times: dict[str, list[float]] = {EQUATION_5: [], ORDER_STATISTICS: []}
        f1 = {}
        for _ in range(args.repeats):
            for model in (EQUATION_5, ORDER_STATISTICS):
                seconds, f1[model] = optimize_seconds(case, model)
                times[model].append(seconds)
        eq5, ours = statistics.median(times[EQUATION_5]), statistics.median(times[ORDER_STATISTICS])
        n, epsilon, k, bits, oracle = case
        print(f"| {n:,}, {epsilon:g}, {k}, {bits}, {oracle} | {eq5:.2f} | {f1[EQUATION_5]:.3f} | {ours:.2f} | "
              f"{f1[ORDER_STATISTICS]:.3f} | {ours / eq5:.1f}x |")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
