"""Frequency-oracle throughput at scale, side by side with the survey's reference code.

    /work/venv/bin/python benchmarks/bench_oracles.py [--users 1000000] [--domain 65536]
        [--epsilon 3] [--repeats 3] [--output results/bench_oracles.json] [--no-reference]

Part 1 (fedhh, full scale): one Zipf(1.1) population of ``--users`` users over
``--domain`` values; every oracle randomises and aggregates all users and
estimates every value as a candidate (65,536 candidates by default).  Medians
over ``--repeats`` fresh runs (OLH and BLH once: their decoding is
``users x candidates`` work); unary encodings and the CMS use the shard path
(Binomial counts), since ``users x d`` bits do not fit in memory.

Part 2 (reference): pure-ldp 1.2.0 ([Cormode21]'s code; ``pip install
"pure-ldp==1.2.0" "xxhash<2"`` plus the scikit-learn and statsmodels its
package import pulls in) runs OLH, FLH, OUE, HR and GRR on a random subsample
of the same population that it can finish, and fedhh runs the same subsample
``--subsample-runs`` times.  Reported per oracle:

* MSE agreement: pure-ldp's single-run MSE against the mean of fedhh's runs,
  as a z-score with fedhh's run-to-run spread as the yardstick (the same
  mechanism gives the same MSE distribution);
* per-user time, two ways, measured in the same process: the marginal cost of
  one user (privatise + aggregate), and end-to-end at full scale, where
  pure-ldp's time is its per-user cost times ``--users`` plus its one-off
  server costs (construction, estimation), both measured on the subsample.

Results go to ``--output`` as JSON and to stdout as Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.oracles import Histogram, make_oracle
from fedhh.oracles.experiment import zipf_counts


@dataclass(frozen=True)
class Case:
    label: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    shard_path: bool = False
    single_run: bool = False


def fedhh_cases(epsilon: float) -> list[Case]:
    optimal_t = math.ceil(math.log2(math.exp(epsilon) + 1))
    return [
        Case("GRR", "grr"),
        Case("SUE (shard path)", "sue", shard_path=True),
        Case("OUE (shard path)", "oue", shard_path=True),
        Case("BLH", "blh", single_run=True),
        Case("OLH", "olh", single_run=True),
        Case("FLH k'=1000", "flh", {"hash_functions": 1000}),
        Case("HR", "hr"),
        Case("HM t=1", "hm"),
        Case(f"HM t={optimal_t}", "hm", {"coefficients": optimal_t}),
        Case("CMS (OUE, 16x1024, shard path)", "cms", {"rows": 16, "width": 1024}, shard_path=True),
        Case("HCMS (HM, 16x1024)", "hcms", {"rows": 16, "width": 1024}),
    ]


def run_fedhh(case: Case, epsilon: float, values: np.ndarray, counts: np.ndarray, seed: int) -> dict[str, Any]:
    """One end-to-end run with a freshly built oracle (no cached hash tables)."""
    domain = counts.size
    oracle = make_oracle(case.name, epsilon=epsilon, domain=domain, **case.options)
    rng = np.random.default_rng(seed)
    candidates = np.arange(domain, dtype=np.uint64)
    start = time.perf_counter()
    if case.shard_path:
        statistics_ = oracle.randomize_aggregate(values, rng)
        randomized = aggregated = time.perf_counter()
    else:
        reports = oracle.randomize(values, rng)
        randomized = time.perf_counter()
        statistics_ = oracle.aggregate(reports)
        aggregated = time.perf_counter()
    estimates = oracle.estimate(statistics_, candidates)
    finished = time.perf_counter()
    variances = oracle.variance(candidates, Histogram.from_dense(counts))
    return {
        "randomize_s": randomized - start,
        "aggregate_s": aggregated - randomized,
        "estimate_s": finished - aggregated,
        "total_s": finished - start,
        "mse": float(np.mean((estimates - counts) ** 2)),
        "predicted_variance": float(np.mean(variances)),
    }


def median_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


# ---------------------------------------------------------------- reference
def reference_pipeline(kind: str, epsilon: float, domain: int, values: np.ndarray, seed: int) -> dict[str, Any]:
    """pure-ldp's client and server on ``values`` (items 0..d-1), timed stage by stage."""
    from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
    from pure_ldp.frequency_oracles.hadamard_response import HadamardResponseClient, HadamardResponseServer
    from pure_ldp.frequency_oracles.local_hashing import FastLHClient, FastLHServer, LHClient, LHServer
    from pure_ldp.frequency_oracles.unary_encoding import UEClient, UEServer

    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    identity = lambda item: item  # noqa: E731 -- pure-ldp's default maps item x to index x - 1
    start = time.perf_counter()
    if kind == "olh":
        server = LHServer(epsilon, domain, use_olh=True, index_mapper=identity)
        client = LHClient(epsilon, domain, use_olh=True, index_mapper=identity)
    elif kind == "flh":
        server = FastLHServer(epsilon, domain, 1000, use_olh=True, index_mapper=identity)
        client = FastLHClient(epsilon, domain, 1000, use_olh=True, index_mapper=identity)
    elif kind == "oue":
        server = UEServer(epsilon, domain, use_oue=True, index_mapper=identity)
        client = UEClient(epsilon, domain, use_oue=True, index_mapper=identity)
    elif kind == "hr":
        server = HadamardResponseServer(epsilon, domain, index_mapper=identity)
        client = HadamardResponseClient(epsilon, domain, server.get_hash_funcs(), index_mapper=identity)
    elif kind == "grr":
        server = DEServer(epsilon, domain, index_mapper=identity)
        client = DEClient(epsilon, domain, index_mapper=identity)
    else:
        raise ValueError(f"no reference implementation for {kind!r}")
    constructed = time.perf_counter()
    reports = [client.privatise(int(value)) for value in values]
    privatised = time.perf_counter()
    for report in reports:
        server.aggregate(report)
    aggregated = time.perf_counter()
    estimates = np.asarray(server.estimate_all(range(domain), suppress_warnings=True), dtype=np.float64)
    finished = time.perf_counter()
    return {
        "users": int(values.size),
        "setup_s": constructed - start,
        "privatise_s": privatised - constructed,
        "aggregate_s": aggregated - privatised,
        "estimate_s": finished - aggregated,
        "estimates": estimates,
    }


REFERENCE_CASES = {
    # kind: (full-scale fedhh row, fedhh case on the subsample, subsample size pure-ldp finishes in ~10 s)
    "olh": ("OLH", Case("OLH", "olh"), 400),
    "flh": ("FLH k'=1000", Case("FLH k'=1000", "flh", {"hash_functions": 1000}), 20_000),
    "oue": ("OUE (shard path)", Case("OUE", "oue", shard_path=True), 2_000),
    "hr": ("HR", Case("HR", "hr"), 100_000),
    "grr": ("GRR", Case("GRR", "grr"), 100_000),
}


def compare_with_reference(
    kind: str, epsilon: float, population: np.ndarray, domain: int, full: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    _, case, size = REFERENCE_CASES[kind]
    size = max(2, int(size * args.reference_scale))
    subsample = np.random.default_rng([args.seed, 99]).choice(population, size=size, replace=False)
    counts = np.bincount(subsample.astype(np.intp), minlength=domain)
    reference = reference_pipeline(kind, epsilon, domain, subsample, args.seed)
    reference_mse = float(np.mean((reference.pop("estimates") - counts) ** 2))
    runs = [run_fedhh(case, epsilon, subsample, counts, seed=[args.seed, 7, run]) for run in range(args.subsample_runs)]
    ours_mse = [run["mse"] for run in runs]
    spread = statistics.stdev(ours_mse)
    z = (reference_mse - statistics.fmean(ours_mse)) / (spread * math.sqrt(1 + 1 / len(runs)))
    ref_marginal = (reference["privatise_s"] + reference["aggregate_s"]) / size
    ref_fixed = reference["setup_s"] + reference["estimate_s"]
    ours_marginal = (full["randomize_s"] + full["aggregate_s"]) / args.users
    ref_full = ref_marginal * args.users + ref_fixed
    row = {
        "oracle": case.label,
        "reference_users": size,
        "reference_mse": reference_mse,
        "fedhh_mse_mean": statistics.fmean(ours_mse),
        "fedhh_mse_sd": spread,
        "predicted_variance": runs[0]["predicted_variance"],
        "mse_z": z,
        "reference": reference,
        "reference_marginal_us_per_user": ref_marginal * 1e6,
        "fedhh_marginal_us_per_user": ours_marginal * 1e6,
        "marginal_ratio": ref_marginal / ours_marginal,
        "reference_end_to_end_s_at_full_scale": ref_full,
        "fedhh_end_to_end_s_at_full_scale": full["total_s"],
        "end_to_end_ratio": ref_full / full["total_s"],
        "fedhh_subsample_us_per_user": statistics.median(run["total_s"] for run in runs) / size * 1e6,
    }
    if kind == "oue":  # fedhh's per-user bit rows on the same subsample, for transparency
        bit_path = Case("OUE bits", "oue")
        bits = [run_fedhh(bit_path, epsilon, subsample, counts, seed=[args.seed, 8, r]) for r in range(3)]
        row["fedhh_bit_path_us_per_user"] = statistics.median(run["total_s"] for run in bits) / size * 1e6
    return row


# ---------------------------------------------------------------- report
def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"fedhh, {result['users']:,} users, {result['domain']:,} candidates, ε = {result['epsilon']}, "
        f"Zipf({result['zipf']}), medians of {result['repeats']} runs (OLH/BLH: 1):",
        "",
        f"| oracle | randomise+aggregate users/s | estimate {result['domain']:,} candidates (s) | end-to-end (s) "
        "| MSE / predicted |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in result["fedhh"]:
        users_per_s = result["users"] / (row["randomize_s"] + row["aggregate_s"])
        lines.append(
            f"| {row['oracle']} | {users_per_s:,.0f} | {row['estimate_s']:.3f} | {row['total_s']:.2f} "
            f"| {row['mse'] / row['predicted_variance']:.3f} |"
        )
    if result["reference"]:
        lines += [
            "",
            "Side by side with pure-ldp 1.2.0 (same population, same ε; pure-ldp on a subsample):",
            "",
            "| oracle | pure-ldp users | MSE pure-ldp | MSE fedhh (mean ± sd) | z "
            "| per-user µs, end to end: pure-ldp | fedhh | ratio "
            "| per-user µs, privatise + aggregate: pure-ldp | fedhh | ratio |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        users = result["users"]
        for row in result["reference"]:
            lines.append(
                f"| {row['oracle']} | {row['reference_users']:,} | {row['reference_mse']:,.1f} "
                f"| {row['fedhh_mse_mean']:,.1f} ± {row['fedhh_mse_sd']:,.1f} | {row['mse_z']:+.2f} "
                f"| {row['reference_end_to_end_s_at_full_scale'] / users * 1e6:,.2f} "
                f"| {row['fedhh_end_to_end_s_at_full_scale'] / users * 1e6:.4f} | {row['end_to_end_ratio']:,.0f}x "
                f"| {row['reference_marginal_us_per_user']:,.2f} | {row['fedhh_marginal_us_per_user']:.4f} "
                f"| {row['marginal_ratio']:,.0f}x |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain", type=int, default=65_536)
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--subsample-runs", type=int, default=10)
    parser.add_argument("--reference-scale", type=float, default=1.0, help="scale pure-ldp's subsample sizes")
    parser.add_argument("--no-reference", action="store_true", help="skip pure-ldp")
    parser.add_argument("--output", default="results/bench_oracles.json")
    args = parser.parse_args(argv)

    counts = zipf_counts(args.domain, args.users, args.zipf, np.random.default_rng([args.seed, 0]))
    population = np.repeat(np.arange(args.domain, dtype=np.uint64), counts)
    population = np.random.default_rng([args.seed, 1]).permutation(population)
    result: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "users": args.users,
        "domain": args.domain,
        "epsilon": args.epsilon,
        "zipf": args.zipf,
        "repeats": args.repeats,
        "fedhh": [],
        "reference": [],
    }
    full_by_kind = {}
    for case in fedhh_cases(args.epsilon):
        repeats = 1 if case.single_run else args.repeats
        runs = [run_fedhh(case, args.epsilon, population, counts, seed=[args.seed, 2, r]) for r in range(repeats)]
        row = {"oracle": case.label, **median_runs(runs)}
        result["fedhh"].append(row)
        full_by_kind[case.label] = row
        print(f"fedhh {case.label}: {row['total_s']:.2f} s end to end", file=sys.stderr, flush=True)
    if not args.no_reference:
        for kind, (full_label, _, _) in REFERENCE_CASES.items():
            row = compare_with_reference(kind, args.epsilon, population, args.domain, full_by_kind[full_label], args)
            result["reference"].append(row)
            print(f"pure-ldp {kind}: done", file=sys.stderr, flush=True)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2, default=float))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
