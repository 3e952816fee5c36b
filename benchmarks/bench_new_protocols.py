"""Issue 12's protocols at 1,000,000 users on the default population, beside TreeHist and PEM.

    python benchmarks/bench_new_protocols.py [--users 1000000] [--epsilon 4] [--repeats 3]
        [--protocols bitstogram spm mcm] [--output results/bench_new_protocols.json]

Each case runs end to end on the fast driver, in-process, 8 shards (the
default), in a fresh subprocess so that its peak RSS is its own: the default
population (wordfreq English, one word per user), the protocol with its
default keys, ε = ``--epsilon``.  Reported per case: medians over
``--repeats`` of wall time (population, setup, rounds), the rounds alone,
peak RSS, and the utility of the (identical) runs: F1 and NCR against the
true top 32 (the protocols report k = 32 at most), recall@10.  TreeHist and
PEM run in the same session as the yardstick: the load of a shared machine
moves every figure of one run alike.

The issue's target: each new protocol within 2 minutes at 1,000,000 users.
Results go to ``--output`` as JSON and to stdout as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REFERENCES = ("treehist", "pem")
TOP_K = 32


def run_case(protocol: str, users: int, epsilon: float) -> dict[str, Any]:
    """One run in this process: timings, utility, peak RSS."""
    from fedhh.config import load_config
    from fedhh.experiment import Experiment
    from fedhh.metrics import utility_metrics
    from simulations.fast import run_fast

    started = time.perf_counter()
    config = load_config(None, [
        f'protocol.name="{protocol}"', f"population.users={users}", f"privacy.epsilon={epsilon}",
        'run.driver="fast"', 'run.backend="inprocess"', f"run.top_k={TOP_K}",
    ])
    experiment = Experiment(config)
    experiment.truth  # noqa: B018  (the population is built here, as fedhh run does before the rounds)
    population_s = time.perf_counter() - started
    run = run_fast(experiment, int(config["run"]["shards"]), "inprocess")
    total_s = time.perf_counter() - started
    found = {d.item for d in run.result.discoveries}
    metrics = utility_metrics(found, experiment.truth, TOP_K)
    return {
        "protocol": protocol,
        "population_s": population_s,
        "setup_s": run.timing.get("setup_s"),
        "rounds_s": run.timing.get("rounds_s"),
        "total_s": total_s,
        "rounds": len(run.result.trace),
        "found": sorted(found),
        "f1": metrics["f1"],
        "ncr": metrics["ncr"],
        "recall_at_10": metrics["recall_at_k"]["10"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def in_subprocess(protocol: str, users: int, epsilon: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--case", protocol, "--users", str(users), "--epsilon", str(epsilon)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--protocols", nargs="+", default=["bitstogram", "spm", "mcm"])
    parser.add_argument("--output", type=Path, default=Path("results/bench_new_protocols.json"))
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.users, args.epsilon)))
        return 0
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in (*args.protocols, *REFERENCES)}
    for _ in range(args.repeats):  # cases alternate, so load drifts hit them alike
        for protocol in runs:
            runs[protocol].append(in_subprocess(protocol, args.users, args.epsilon))
    load_after = os.getloadavg()
    rows = []
    for protocol, cases in runs.items():
        rows.append({
            "protocol": protocol,
            "total_s": statistics.median(c["total_s"] for c in cases),
            "rounds_s": statistics.median(c["rounds_s"] for c in cases),
            "population_s": statistics.median(c["population_s"] for c in cases),
            "peak_rss_mib": statistics.median(c["peak_rss_mib"] for c in cases),
            "rounds": cases[0]["rounds"],
            "f1": cases[0]["f1"],
            "ncr": cases[0]["ncr"],
            "recall_at_10": cases[0]["recall_at_10"],
            "found": len(cases[0]["found"]),
            "same_result": all(c["found"] == cases[0]["found"] for c in cases),
            "runs": cases,
        })
    document = {
        "users": args.users, "epsilon": args.epsilon, "repeats": args.repeats, "shards": 8,
        "load_before": load_before, "load_after": load_after,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2), encoding="utf-8")
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; medians of {args.repeats}\n")
    print(f"| n = {args.users:,}, ε = {args.epsilon:g}, 8 shards | wall s | rounds s | population s | peak RSS MiB | rounds | found | recall@10 | F1@{TOP_K} | NCR@{TOP_K} | same result |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['protocol']} | {row['total_s']:.2f} | {row['rounds_s']:.2f} | {row['population_s']:.2f} | "
              f"{row['peak_rss_mib']:.0f} | {row['rounds']} | {row['found']} | {row['recall_at_10']:.2f} | {row['f1']:.3f} | {row['ncr']:.3f} | "
              f"{'yes' if row['same_result'] else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
