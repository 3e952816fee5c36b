"""PEM and TreeHist at scale, and PEM side by side with the survey's reference code.

    python benchmarks/bench_pem.py [--users 1000000] [--epsilon 4] [--top-k 32]
        [--repeats 3] [--subsample 3000] [--reference-runs 5] [--subsample-runs 40]
        [--output results/bench_pem.json] [--no-reference]

Part 1 (fedhh, full scale, ``--users`` users).  Each case runs end to end
(population, protocol, result document) on the fast driver, in-process, in
a fresh subprocess, so its peak RSS is its own; medians over ``--repeats``,
with 1 and with 8 shards run alternately (the issue's target: 8 shards, the
default, no slower than 1, within 10 %):

* 64-bit values: one of 100,000 random 8-byte strings with Zipf(1.1)
  popularity under ``protocol.encoding = "bits"``; PEM with FLH and the
  optimizer's γ, η and group split (query limit 2^20); TreeHist as [Bassily17]
  runs it (count sketch of Hadamard bits, one bit per level, threshold at the
  noise level), and TreeHist with FLH and 4-bit levels;
* the default population (wordfreq English, ``configs/pem-wordfreq.toml``:
  PEM with FLH);
* 3-letter words (one of 4,000 random lowercase 3-letter strings, Zipf(1.1):
  15-bit values): PEM with its default oracle, OLH, and with FLH.

Part 2 (reference): pure-ldp 1.2.0's PEM ([Cormode21]'s code) as it ships, with
OLH.  Its OLH server loops over the whole level domain for every report and
allocates one float per domain value, so it cannot hold 64-bit values (the
level of 40-bit prefixes alone needs 8 TiB); its largest workable values are
16 bits (2^16 per level, about 10-20 ms per user).  So both run the same
16-bit data -- a Zipf(1.1) population of random 2-byte strings, a random
subsample of ``--subsample`` users -- with the same parameters (γ = 4,
η = 6, |C_i| = k = 32, OLH, ε): pure-ldp ``--reference-runs`` times, fedhh
``--subsample-runs`` times.  Reported: per-user cost (pure-ldp: privatise +
aggregate + find, over the subsample; fedhh: end to end on the same
subsample, and end to end at full scale from Part 1, PEM with OLH on the
3-letter words) and F1 against the subsample's true top k, compared as a
z-score with fedhh's run-to-run spread as the yardstick.

Results go to ``--output`` as JSON and to stdout as Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.config import load_config
from fedhh.driving import drive
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols.common.prefix_encoding import PrefixEncoding
from fedhh.protocols.prefix_search.pem import PEMServer
from fedhh.protocols.prefix_search.reports import respond
from fedhh.protocols.prefix_search.search import SearchParameters, level_shares, uniform_segments
from simulations.fast import run_fast

BITS_64 = "64-bit values"
WORDFREQ = "wordfreq"
THREE_LETTERS = "3-letter words"
# label -> (population, config file or None, overrides)
FULL_CASES: dict[str, tuple[str, str | None, list[str]]] = {
    "PEM, FLH, optimizer's design": (BITS_64, None, ['protocol.name="pem"', 'protocol.oracle="flh"']),
    "TreeHist ([Bassily17]: sketch of Hadamard bits, 1 bit per level)": (BITS_64, None, ['protocol.name="treehist"']),
    "TreeHist, FLH, 4 bits per level": (
        BITS_64, None, ['protocol.name="treehist"', 'protocol.oracle="flh"', "protocol.segment_length=4"]
    ),
    "PEM, FLH, default population": (WORDFREQ, "configs/pem-wordfreq.toml", []),
    "PEM, OLH (its default), 3-letter words": (THREE_LETTERS, None, ['protocol.name="pem"']),
    "PEM, FLH, 3-letter words": (THREE_LETTERS, None, ['protocol.name="pem"', 'protocol.oracle="flh"']),
}
OLH_CASE = "PEM, OLH (its default), 3-letter words"
SHARD_COUNTS = (1, 8)
REFERENCE_START, REFERENCE_SEGMENT, REFERENCE_BITS = 4, 6, 16


def population(users: int, item_bytes: int, vocabulary: int, epsilon: float, top_k: int, seed: int) -> list[str]:
    """Config overrides of a Zipf(1.1) population of random ``item_bytes``-byte strings as bit values."""
    return [
        'population.source="zipf"', f"population.users={users}", f"population.vocabulary={vocabulary}",
        f"population.item_length={item_bytes}", "population.zipf_exponent=1.1", 'protocol.alphabet="bytes"',
        f"protocol.max_length={item_bytes}", 'protocol.encoding="bits"', f"privacy.epsilon={epsilon}",
        f"run.top_k={top_k}", f"protocol.top_k={top_k}", f"protocol.candidates_per_step={top_k}", f"run.seed={seed}",
        'run.driver="fast"',
    ]


def three_letter_words(users: int, seed: int) -> list[str]:
    """Config overrides of 4,000 random lowercase 3-letter strings with Zipf(1.1) popularity (15-bit values)."""
    return [
        'population.source="zipf"', f"population.users={users}", "population.vocabulary=4000",
        "population.item_length=3", "population.zipf_exponent=1.1", "protocol.max_length=3",
        f"run.seed={seed}", 'run.driver="fast"',
    ]


def case_config(label: str, args: argparse.Namespace) -> tuple[str | None, list[str]]:
    kind, path, overrides = FULL_CASES[label]
    if kind == BITS_64:
        return None, population(args.users, 8, 100_000, args.epsilon, args.top_k, args.seed) + overrides
    if kind == THREE_LETTERS:
        return None, three_letter_words(args.users, args.seed) + [f"privacy.epsilon={args.epsilon}"] + overrides
    return path, [f"population.users={args.users}", f"run.seed={args.seed}", *overrides]


# ---------------------------------------------------------------- part 1: one case in a subprocess
def run_case(path: str | None, overrides: list[str], shards: int) -> dict[str, Any]:
    """One end-to-end fast-driver run (this process), timed, with its peak RSS."""
    wall, cpu = time.perf_counter(), time.process_time()
    experiment = Experiment(load_config(path, overrides))
    run = run_fast(experiment, shards, "inprocess")
    document = experiment.finish(run.result, run.timing, "fast/inprocess", counts=run.counts)
    return {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "rounds_s": run.timing["rounds_s"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "f1": document["evaluation"]["metrics"]["f1"],
        "ncr": document["evaluation"]["metrics"]["ncr"],
        "discovered": document["evaluation"]["metrics"]["discovered"],
        "prefix_lengths": document["params"]["prefix_lengths"],
        "oracle": document["params"]["oracle"],
        "rounds": len(document["rounds"]),
    }


def full_scale(label: str, args: argparse.Namespace) -> dict[str, Any]:
    """The case with 1 and with 8 shards, alternating, each run in a fresh subprocess."""
    path, overrides = case_config(label, args)
    runs: dict[int, list[dict[str, Any]]] = {shards: [] for shards in SHARD_COUNTS}
    for _ in range(args.repeats):
        for shards in SHARD_COUNTS:
            child = subprocess.run(
                [sys.executable, __file__, "--case-json", json.dumps([path, overrides, shards])],
                check=True, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
            )
            runs[shards].append(json.loads(child.stdout.strip().splitlines()[-1]))
    by_shards = {}
    for shards, results in runs.items():
        summary = {key: statistics.median(run[key] for run in results) for key in ("wall_s", "cpu_s", "rounds_s", "peak_rss_mib")}
        by_shards[shards] = {**summary, "us_per_user": summary["wall_s"] / args.users * 1e6, "runs": results}
    first = runs[SHARD_COUNTS[0]][0]
    same = all(run["f1"] == first["f1"] and run["discovered"] == first["discovered"] for results in runs.values() for run in results)
    return {
        "case": label, "population": FULL_CASES[label][0], "shards": by_shards,
        "eight_over_one_wall": by_shards[8]["wall_s"] / by_shards[1]["wall_s"],
        "eight_over_one_rounds": by_shards[8]["rounds_s"] / by_shards[1]["rounds_s"],
        "same_result_every_run": same,
        **{key: first[key] for key in ("f1", "ncr", "discovered", "prefix_lengths", "oracle", "rounds")},
    }


# ---------------------------------------------------------------- part 2: the same 16-bit data
def reference_pem(bit_strings: list[str], epsilon: float, top_k: int, seed: int) -> dict[str, Any]:
    """pure-ldp's PEM (default OLH) on the subsample, timed stage by stage."""
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient
    from pure_ldp.heavy_hitters.prefix_extending import PEMServer as ReferenceServer

    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    start = time.perf_counter()
    server = ReferenceServer(epsilon, REFERENCE_START, REFERENCE_BITS, REFERENCE_SEGMENT)
    client = PEMClient(epsilon, REFERENCE_START, REFERENCE_BITS, REFERENCE_SEGMENT)
    constructed = time.perf_counter()
    for value in bit_strings:
        server.aggregate(client.privatise(value))
    collected = time.perf_counter()
    found, _ = server.find_heavy_hitters(k=top_k)
    finished = time.perf_counter()
    return {
        "setup_s": constructed - start,
        "collect_s": collected - constructed,
        "find_s": finished - collected,
        "total_s": finished - start,
        "found": list(found),
    }


def compare_with_reference(args: argparse.Namespace) -> dict[str, Any]:
    size = args.subsample
    config = load_config(None, population(args.users, 2, 4_000, args.epsilon, args.top_k, args.seed))
    experiment = Experiment(config)
    shard = experiment.build_shard(0, max(1, args.users // size))  # users [0, size): a random subsample
    encoding = PrefixEncoding("bits", experiment.codec)
    units = encoding.units(shard.vocabulary)
    bits = ["".join(map(str, row)) for row in units]
    held = shard.item_ids[shard.item_offsets[:-1]]
    holders = np.bincount(held, minlength=shard.vocabulary.size)
    order = np.lexsort((np.arange(holders.size), -holders))[: args.top_k]
    truth = {bits[i] for i in order if holders[i] > 0}

    def f1(found: set[str]) -> float:
        hits = len(found & truth)
        return 0.0 if hits == 0 else 2 * hits / (len(found) + len(truth))

    user_bits = [bits[i] for i in held.tolist()]
    references = [reference_pem(user_bits, args.epsilon, args.top_k, args.seed + run) for run in range(args.reference_runs)]
    segments = uniform_segments(REFERENCE_BITS, REFERENCE_START, REFERENCE_SEGMENT)
    params = SearchParameters("pem", shard.n_users, args.epsilon, "bits", REFERENCE_START, segments,
                              level_shares(len(segments)), "olh", args.top_k, args.top_k, "top-k")
    ours_f1, ours_s = [], []
    for run in range(args.subsample_runs):
        started = time.perf_counter()
        server = PEMServer(params, experiment.codec, args.seed + 1000 + run)
        randomness = KeyedRandomness(args.seed + 1000 + run)
        result = drive(server, lambda request: [respond(request, shard, randomness)])
        ours_s.append(time.perf_counter() - started)
        ours_f1.append(f1({"".join(map(str, d.symbols)) for d in result.discoveries}))
    reference_f1 = [f1(set(run.pop("found"))) for run in references]
    spread = statistics.stdev(ours_f1)
    z = (statistics.fmean(ours_f1) - statistics.fmean(reference_f1)) / (
        spread * math.sqrt(1 / len(ours_f1) + 1 / len(reference_f1))
    )
    reference_us = statistics.median(run["total_s"] for run in references) / size * 1e6
    ours_us = statistics.median(ours_s) / size * 1e6
    return {
        "subsample_users": size,
        "parameters": {"bits": REFERENCE_BITS, "start_length": REFERENCE_START, "segment_length": REFERENCE_SEGMENT,
                       "k": args.top_k, "oracle": "olh", "epsilon": args.epsilon},
        "reference_runs": references,
        "reference_f1": reference_f1,
        "fedhh_f1_mean": statistics.fmean(ours_f1),
        "fedhh_f1_sd": spread,
        "f1_z_fedhh_minus_reference": z,
        "reference_us_per_user": reference_us,
        "fedhh_subsample_us_per_user": ours_us,
        "subsample_ratio": reference_us / ours_us,
    }


# ---------------------------------------------------------------- report
def markdown(document: dict[str, Any]) -> str:
    lines = [
        f"| n = {document['users']:,}, ε = {document['epsilon']:g}, k = {document['top_k']} "
        f"(median of {document['repeats']}) | population | wall s, 1 shard | wall s, 8 shards | 8 / 1 | "
        "rounds s, 1 / 8 shards | CPU s (8) | µs/user (8) | peak RSS MiB (8) | F1 | NCR | levels | same result |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in document["full_scale"]:
        one, eight = row["shards"][1], row["shards"][8]
        lines.append(
            f"| {row['case']} | {row['population']} | {one['wall_s']:.2f} | {eight['wall_s']:.2f} | "
            f"{row['eight_over_one_wall']:.2f} | {one['rounds_s']:.2f} / {eight['rounds_s']:.2f} | {eight['cpu_s']:.2f} | "
            f"{eight['us_per_user']:.1f} | {eight['peak_rss_mib']:.0f} | {row['f1']:.3f} | {row['ncr']:.3f} | "
            f"{len(row['prefix_lengths'])} | {'yes' if row['same_result_every_run'] else 'NO'} |"
        )
    reference = document.get("reference")
    if reference:
        olh = next(row for row in document["full_scale"] if row["case"] == OLH_CASE)["shards"][8]
        lines += [
            "",
            f"| same 16-bit data, {reference['subsample_users']:,} users, γ = 4, η = 6, k = {document['top_k']}, OLH "
            "| µs/user | F1 | runs |",
            "|---|---|---|---|",
            f"| pure-ldp 1.2.0 PEM | {reference['reference_us_per_user']:,.0f} | "
            f"{statistics.fmean(reference['reference_f1']):.3f} | {len(reference['reference_f1'])} |",
            f"| fedhh PEM, same subsample | {reference['fedhh_subsample_us_per_user']:,.1f} | "
            f"{reference['fedhh_f1_mean']:.3f} ± {reference['fedhh_f1_sd']:.3f} | {document['subsample_runs']} |",
            "",
            f"* per-user cost, same subsample: **{reference['subsample_ratio']:,.0f}x** lower; against fedhh's "
            f"PEM with OLH on {document['users']:,} users holding 3-letter words ({olh['us_per_user']:.2f} µs/user, "
            f"whole run): **{reference['reference_us_per_user'] / olh['us_per_user']:,.0f}x** lower",
            f"* F1: fedhh minus pure-ldp, z = {reference['f1_z_fedhh_minus_reference']:+.2f} "
            "(fedhh's run-to-run spread as yardstick)",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--top-k", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--subsample", type=int, default=3000)
    parser.add_argument("--reference-runs", type=int, default=5)
    parser.add_argument("--subsample-runs", type=int, default=40)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--output", default="results/bench_pem.json")
    parser.add_argument("--cases", nargs="+", choices=list(FULL_CASES), default=list(FULL_CASES), metavar="CASE",
                        help="full-scale cases to run (default: all)")
    parser.add_argument("--case-json", help=argparse.SUPPRESS)  # internal: one full-scale case
    args = parser.parse_args()
    if args.case_json:
        print(json.dumps(run_case(*json.loads(args.case_json))))
        return
    document: dict[str, Any] = {
        "users": args.users, "epsilon": args.epsilon, "top_k": args.top_k, "repeats": args.repeats,
        "subsample_runs": args.subsample_runs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                    "load_average": os.getloadavg()},
        "full_scale": [full_scale(label, args) for label in args.cases],
    }
    if not args.no_reference and OLH_CASE in args.cases:
        document["reference"] = compare_with_reference(args)
    document["machine"]["load_average_end"] = os.getloadavg()
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=2, default=float), encoding="utf-8")
    print(markdown(document))


if __name__ == "__main__":
    main()
