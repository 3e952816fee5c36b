"""Law simulation (``run.simulation = "law"``): whole runs at 10^6 to 10^9 users, and a 100-trial sweep.

Targets:

* TrieHH on the default population (wordfreq), 10^9 users, law: the whole
  ``fedhh run`` in at most 5 s and 1 GiB; PEM (OLH, its default) at 10^9 in
  at most 10 s;
* a round at 10^9 users costs at most twice a round at 10^6 (the shards'
  and the server's time per round, from ``result.json``'s ``timing_s``);
* a 100-trial PEM sweep at 10^7 users, law, in at most 3 minutes with
  ``--workers 2`` on 2 cores.

References measured in the same run: the users path where it is feasible
(TrieHH at 10^8 users in memory, PEM at 10^6; and, with ``--reference``, one
PEM trial at 10^7 users, which a users sweep would repeat 100 times).

``--scenario round`` isolates the population size: the requests of one law
run at 10^6 users (one shard) are answered by the protocol's law sampler on
the counts of 10^6 users and on those of 10^9 (the same vocabulary, the
same candidates; TrieHH's sample size m that of each population), in
process, each round timed over repeats after a warm-up (so a split kept
between rounds is not counted); a whole run's rounds at 10^9 cost more
than at 10^6 also because more is found (TrieHH's trie; PEM's candidates
are fixed), which this leaves out.

``--scenario runs`` times whole ``fedhh run`` processes (scope: process start
to exit, imports and writing the results included; fast driver in process,
its default 8 shards), the jobs interleaved in every repeat so that all see
the same machine load; CPU time and peak RSS are the process's own
(``wait4``).  ``--scenario sweep`` times a whole ``fedhh sweep``.  Figures
are medians over repeats.

Usage::

    python benchmarks/bench_law.py --scenario runs [--repeats 3]
    python benchmarks/bench_law.py --scenario round [--repeats 5]
    python benchmarks/bench_law.py --scenario sweep [--repeats 1] [--reference]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

BILLION = 1_000_000_000
# name -> (protocol, simulation, users)
RUNS: dict[str, tuple[str, str, int]] = {
    "triehh law 10^9": ("triehh", "law", BILLION),
    "triehh law 10^6": ("triehh", "law", 1_000_000),
    "triehh users 10^8": ("triehh", "users", 100_000_000),
    "pem law 10^9": ("pem", "law", BILLION),
    "pem law 10^6": ("pem", "law", 1_000_000),
    "pem users 10^6": ("pem", "users", 1_000_000),
}
ROUND_RATIOS = (("triehh law 10^9", "triehh law 10^6"), ("pem law 10^9", "pem law 10^6"))
TARGETS = {"triehh law 10^9": (5.0, 1024.0), "pem law 10^9": (10.0, None)}  # wall s, peak MiB
SWEEP = """
# 100 PEM trials at 10^7 wordfreq users, law simulation (benchmarks/bench_law.py --scenario sweep)
[population]
source = "wordfreq"
users = 10_000_000
[protocol]
name = "pem"
[run]
simulation = "law"
[sweep]
trials = 25
"privacy.epsilon" = [1, 2, 4, 8]
"""
SWEEP_TRIALS = 100
SWEEP_TARGET_S = 180.0


def timed(command: list[str]) -> dict[str, float]:
    """Wall, CPU (user + system) seconds and peak RSS (MiB) of one process run to its end."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {process.stderr.read().decode() if process.stderr else ''}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024}


def fedhh_run(protocol: str, simulation: str, users: int, output: Path) -> dict[str, float]:
    """One whole ``fedhh run``, and what its ``result.json`` says of its rounds."""
    command = [sys.executable, "-m", "simulations.cli", "run", "--quiet", "--overwrite", "--output", str(output),
               "--set", f"protocol.name={protocol}", "--set", f"run.simulation={simulation}",
               "--set", f"population.users={users}", "--set", "run.driver=fast", "--set", "run.backend=inprocess"]
    figures = timed(command)
    result = json.loads((output / "result.json").read_text(encoding="utf-8"))
    rounds = len(result["rounds"])
    timing = result["timing_s"]
    return figures | {
        "rounds": rounds,
        "round_s": timing["rounds_s"] / rounds,
        "shards_per_round_s": timing["shards_s"] / rounds,
        "total_s": timing["total_s"],
        "recall_at_10": result["evaluation"]["metrics"]["recall_at_k"]["10"],
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def machine() -> dict[str, object]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    return {"cpu": model, "cpus": os.cpu_count(), "load_average_before": os.getloadavg(),
            "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def scenario_runs(repeats: int, scratch: Path) -> dict[str, object]:
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in RUNS}
    for job in RUNS.values():  # a warm-up of each (numba's cache, the vocabulary's), not counted
        fedhh_run(*job, scratch / "warm-up")
    for repeat in range(repeats):
        for name, job in RUNS.items():
            figures[name].append(fedhh_run(*job, scratch / f"{repeat}"))
    medians = {name: median_of(runs) | {"wall_s_all": [round(run["wall_s"], 2) for run in runs]}
               for name, runs in figures.items()}
    ratios = {f"{big} / {small}, per round": {
        "round_s": medians[big]["round_s"] / medians[small]["round_s"],
        "shards_per_round_s": medians[big]["shards_per_round_s"] / medians[small]["shards_per_round_s"],
        "rounds": (medians[big]["rounds"], medians[small]["rounds"]),
    } for big, small in ROUND_RATIOS}
    targets = {name: {"wall_s": (medians[name]["wall_s"], wall), "peak_mib": (medians[name]["peak_mib"], mib),
                      "met": medians[name]["wall_s"] <= wall and (mib is None or medians[name]["peak_mib"] <= mib)}
               for name, (wall, mib) in TARGETS.items()}
    return {"medians": medians, "round_ratios": ratios, "targets": targets}


def scenario_round(repeats: int) -> dict[str, object]:
    from fedhh.config import load_config
    from fedhh.data.counted import counted_users
    from fedhh.experiment import Experiment

    summary: dict[str, object] = {}
    for protocol in ("triehh", "pem"):
        def experiment(users: int, name: str = protocol) -> Experiment:
            overrides = ["run.driver=fast", "run.simulation=law", "run.shards=1", f"protocol.name={name}",
                         f"population.users={users}"]
            return Experiment(load_config(None, overrides))

        small = experiment(1_000_000)
        held = {"10^6": small.counted_shard(0, 1)}
        large = experiment(BILLION)
        held["10^9"] = counted_users(large.source, 0, BILLION, large.seed)
        server, requests = small.make_server(), []
        while (request := server.next_request()) is not None:
            requests.append(request)
            server.absorb(small.answer(request, held["10^6"]))
        asked = {"10^6": requests, "10^9": requests}
        first = large.make_server().next_request()
        if hasattr(first, "sample_size"):  # TrieHH: each population's own sample size m
            asked["10^9"] = [dataclasses.replace(request, sample_size=first.sample_size) for request in requests]
        seconds: dict[str, list[float]] = {}
        for name, counts in held.items():
            requests = asked[name]
            for request in requests:  # warm-up: the splits a law sampler keeps between rounds
                small.answer(request, counts)
            per_round = []
            for request in requests:
                times = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    small.answer(request, counts)
                    times.append(time.perf_counter() - started)
                per_round.append(statistics.median(times))
            seconds[name] = per_round
        summary[protocol] = {
            "rounds": len(requests),
            "round_s_10^6": statistics.mean(seconds["10^6"]),
            "round_s_10^9": statistics.mean(seconds["10^9"]),
            "ratio": sum(seconds["10^9"]) / sum(seconds["10^6"]),
            "worst_round_ratio": max(b / a for a, b in zip(seconds["10^6"], seconds["10^9"], strict=True)),
        }
    return summary


def scenario_sweep(repeats: int, scratch: Path, reference: bool) -> dict[str, object]:
    spec = scratch / "pem-law.toml"
    spec.write_text(SWEEP, encoding="utf-8")
    runs = []
    for repeat in range(repeats):
        folder = scratch / f"sweep-{repeat}"
        figures = timed([sys.executable, "-m", "simulations.cli", "sweep", str(spec), "--output", str(folder),
                         "--workers", "2", "--quiet"])
        rows = pq.read_table(folder / "trials.parquet").to_pylist()
        if len(rows) != SWEEP_TRIALS or any(row["error"] for row in rows):
            raise RuntimeError(f"expected {SWEEP_TRIALS} successful trials, got {len(rows)}")
        runs.append({"wall_s": figures["wall_s"], "trial_wall_s": statistics.median(row["wall_s"] for row in rows),
                     "f1": statistics.median(row["f1"] for row in rows)})
    summary: dict[str, object] = {"sweep": median_of(runs) | {"wall_s_all": [round(r["wall_s"], 1) for r in runs]}}
    summary["target_met"] = statistics.median(run["wall_s"] for run in runs) <= SWEEP_TARGET_S
    if reference:
        users = fedhh_run("pem", "users", 10_000_000, scratch / "users-10^7")
        summary["users_trial_10^7"] = users
        summary["users_sweep_estimate_s"] = users["wall_s"] * SWEEP_TRIALS / 2
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("runs", "round", "sweep"), default="runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference", action="store_true", help="sweep: also one users-path PEM trial at 10^7")
    args = parser.parse_args()
    summary = machine()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        if args.scenario == "runs":
            summary |= scenario_runs(args.repeats, scratch)
        elif args.scenario == "round":
            summary |= scenario_round(args.repeats)
        else:
            summary |= scenario_sweep(args.repeats, scratch, args.reference)
    summary["load_average_after"] = os.getloadavg()
    print(json.dumps(summary, indent=2, default=float))


if __name__ == "__main__":
    main()
