"""RAPPOR and SFP at scale, and side by side with the survey's reference code (pure-ldp 1.2.0).

    python benchmarks/bench_rappor_sfp.py [--users 1000000] [--repeats 2] [--subsample 20000]
        [--reference-runs 2] [--subsample-runs 10] [--output results/bench_rappor_sfp.json] [--no-reference]

Part 1 (fedhh, full scale).  Each protocol runs end to end (population,
protocol, result document) with its defaults (SFP also with HCMS) on the default population
(``--users`` wordfreq users, ε = 4), on the fast driver in process with the
default 8 shards, in a fresh subprocess; medians over ``--repeats``.  Target:
within 2 minutes each.

Part 2 (reference).  pure-ldp's RAPPOR and SFP run per user in Python, and
its RAPPOR server builds a dense ``mC x d`` design matrix, so neither can
take the default population at full scale.  Both codes therefore run the
same random subsample of ``--subsample`` users with the same parameters:

* RAPPOR: the 2,000 most frequent words as the candidate set (pure-ldp's
  domain), m = 64 bits, h = 2 hashes, C = 32 cohorts, ε = 4 (pure-ldp's ``f``
  set to give exactly ε, ``f = 2 / (e^(ε/2h) + 1)``);
* SFP: words of at most 6 letters (3 fragments of 2), ε = 8 (4 + 4), Apple's
  CMS (and, in a second comparison, HCMS) with 16 rows of 1024 on both
  sides, the 10 best fragments per position (pure-ldp's ``k``; fedhh's
  ``fragment_candidates``).

Utility: F1 of each run's 10 best-estimated reported words against the
subsample's true top 10 (fedhh: its reported words; pure-ldp: RAPPOR's 10 best
estimates over the candidates, SFP's 10 best assembled words), with fedhh's
run-to-run spread as the yardstick (z).  Per-user cost: pure-ldp's privatise +
aggregate + decode over the subsample; fedhh's whole run on the same
subsample, and its whole run at full scale from Part 1.

pure-ldp 1.2.0 was written for numpy 1, where ``np.zeros(None)`` made an
empty array; its sketch servers pass ``d = None``, which numpy 2 refuses, so
the reference runs with that one call mapped back (``_numpy1_zeros``).
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
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.config import load_config
from fedhh.driving import drive
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols.rappor.client import respond as rappor_respond
from fedhh.protocols.rappor.server import RapporParameters, RapporServer
from fedhh.protocols.sfp.client import respond as sfp_respond
from fedhh.protocols.sfp.server import SFPParameters, SFPServer
from simulations.fast import run_fast

PROTOCOLS = ("rappor", "sfp")
# full-scale cases: label -> (protocol, overrides of its defaults)
CASES: dict[str, tuple[str, list[str]]] = {
    "rappor": ("rappor", []),
    "sfp (CMS, its default)": ("sfp", []),
    "sfp (HCMS)": ("sfp", ['protocol.fragment_oracle="hcms"']),
}
TOP = 10
RAPPOR_SETTINGS = {"epsilon": 4.0, "bloom_bits": 64, "bloom_hashes": 2, "cohorts": 32, "vocabulary": 2000}
SFP_SETTINGS = {"epsilon": 8.0, "max_length": 6, "fragment_length": 2, "rows": 16, "width": 1024, "fragments": TOP}


# ---------------------------------------------------------------- part 1: one protocol in a subprocess
def run_case(protocol: str, overrides: list[str], users: int, seed: int) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    experiment = Experiment(load_config(None, [f'protocol.name="{protocol}"', f"population.users={users}",
                                               f"run.seed={seed}", 'run.driver="fast"', *overrides]))
    run = run_fast(experiment, int(experiment.config["run"]["shards"]), "inprocess")
    document = experiment.finish(run.result, run.timing, "fast/inprocess")
    metrics = document["evaluation"]["metrics"]
    return {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "rounds_s": run.timing["rounds_s"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "discovered": metrics["discovered"],
        "recall_at_10": metrics["recall_at_k"]["10"],
        "f1": metrics["f1"],
        "items": [hit["item"] for hit in document["heavy_hitters"]],
    }


def full_scale(label: str, args: argparse.Namespace) -> dict[str, Any]:
    protocol, overrides = CASES[label]
    runs = []
    for _ in range(args.repeats):
        child = subprocess.run(
            [sys.executable, __file__, "--case-json", json.dumps([protocol, overrides, args.users, args.seed])],
            check=True, capture_output=True, text=True,
        )
        runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
    summary = {key: statistics.median(run[key] for run in runs) for key in ("wall_s", "cpu_s", "rounds_s", "peak_rss_mib")}
    return {"protocol": label, **summary, "us_per_user": summary["wall_s"] / args.users * 1e6,
            "same_result_every_run": all(run["items"] == runs[0]["items"] for run in runs),
            **{key: runs[0][key] for key in ("discovered", "recall_at_10", "f1")}, "runs": runs}


# ---------------------------------------------------------------- part 2: the same subsample
def _numpy1_zeros() -> None:
    """pure-ldp's servers call ``np.zeros(None)`` (numpy 1: an empty array; numpy 2: an error)."""
    import pure_ldp.core._freq_oracle_server as module

    class Numpy1:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        @staticmethod
        def zeros(shape: Any, *rest: Any, **options: Any) -> np.ndarray:
            return np.zeros(() if shape is None else shape, *rest, **options)

    module.np = Numpy1()  # type: ignore[attr-defined]


def subsample(overrides: list[str], size: int, users: int, seed: int) -> tuple[Experiment, Any]:
    """Users ``[0, size)`` of the population: a random subsample (users are drawn independently)."""
    experiment = Experiment(load_config(None, [f"population.users={users}", f"run.seed={seed}", *overrides]))
    return experiment, experiment.build_shard(0, max(1, users // size))


def true_top(shard: Any) -> tuple[list[str], set[str]]:
    """Each user's word ("" for none) and the subsample's true top 10."""
    items = shard.item_of_user
    holders = np.bincount(items[items >= 0], minlength=shard.vocabulary.size)
    order = np.lexsort((np.arange(holders.size), -holders))[:TOP]
    words = [shard.vocabulary.items[i] if i >= 0 else "" for i in items.tolist()]
    return words, {shard.vocabulary.items[i] for i in order}


def f1(found: list[str], truth: set[str]) -> float:
    hits = len(set(found[:TOP]) & truth)
    return 0.0 if hits == 0 else 2 * hits / (len(set(found[:TOP])) + len(truth))


def reference_rappor(items: list[int], candidates: int, seed: int) -> tuple[float, list[int]]:
    from pure_ldp.frequency_oracles.rappor import RAPPORClient, RAPPORServer

    random.seed(seed)
    np.random.seed(seed)
    s = RAPPOR_SETTINGS
    f = 2 / (math.exp(s["epsilon"] / (2 * s["bloom_hashes"])) + 1)
    started = time.perf_counter()
    identity = lambda item: item  # noqa: E731 -- pure-ldp's default maps item x to index x - 1
    server = RAPPORServer(f, s["bloom_bits"], s["bloom_hashes"], candidates, num_of_cohorts=s["cohorts"],
                          index_mapper=identity)
    client = RAPPORClient(f, s["bloom_bits"], server.get_hash_funcs(), num_of_cohorts=s["cohorts"], index_mapper=identity)
    for item in items:
        server.aggregate(client.privatise(item))
    try:
        estimates = np.array([server.estimate(i, suppress_warnings=True) for i in range(candidates)])
    except ValueError:  # its LASSO (alpha 0.8) kept no candidate, and the regression after it has no column
        return time.perf_counter() - started, []
    return time.perf_counter() - started, np.argsort(-estimates, kind="stable")[:TOP].tolist()


def compare_rappor(args: argparse.Namespace) -> dict[str, Any]:
    s = RAPPOR_SETTINGS
    experiment, shard = subsample([f"population.vocabulary={s['vocabulary']}", 'protocol.name="rappor"'],
                                  args.subsample, args.users, args.seed)
    words, truth = true_top(shard)
    holders = shard.item_of_user[shard.item_of_user >= 0].tolist()  # pure-ldp: every user holds a candidate
    reference = [reference_rappor(holders, shard.vocabulary.size, args.seed + run) for run in range(args.reference_runs)]
    ours_s, ours_f1 = [], []
    for run in range(args.subsample_runs):
        started = time.perf_counter()
        params = RapporParameters(shard.n_users, s["epsilon"], s["bloom_bits"], s["bloom_hashes"], s["cohorts"], "")
        server = RapporServer(params, experiment.codec, args.seed + 1000 + run)
        server.offer_vocabulary(shard.vocabulary)
        randomness = KeyedRandomness(args.seed + 1000 + run)
        result = drive(server, lambda request: [rappor_respond(request, shard, randomness)])
        ours_s.append(time.perf_counter() - started)
        ours_f1.append(f1([d.item for d in result.discoveries], truth))
    reference_f1 = [f1([shard.vocabulary.items[i] for i in found], truth) for _, found in reference]
    return summarize("rappor", args, len(holders), shard.n_users, [t for t, _ in reference], reference_f1, ours_s, ours_f1)


def reference_sfp(words: list[str], seed: int, hadamard: bool) -> tuple[float, list[str]]:
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.apple_sfp import SFPClient
    from pure_ldp.heavy_hitters.apple_sfp import SFPServer as ReferenceServer

    random.seed(seed)
    np.random.seed(seed)
    s = SFP_SETTINGS
    alphabet = set("abcdefghijklmnopqrstuvwxyz")
    started = time.perf_counter()
    oracle = CMSServer(s["epsilon"], s["rows"], s["width"], is_hadamard=hadamard)
    identity = lambda item: item  # noqa: E731 -- the sketches hash the strings themselves
    server = ReferenceServer(s["epsilon"], s["fragment_length"], s["max_length"], alphabet=alphabet,
                             index_mapper=identity, fo_server=oracle)
    client = SFPClient(s["epsilon"], s["fragment_length"], s["max_length"], alphabet=alphabet, index_mapper=identity,
                       fo_client=CMSClient(s["epsilon"], oracle.get_hash_funcs(), s["width"], is_hadamard=hadamard))
    for word in words:
        server.aggregate(client.privatise(word))
    found, estimates = server.find_heavy_hitters(k=s["fragments"])
    order = np.argsort(-np.asarray(estimates, dtype=float), kind="stable")[:TOP]
    return time.perf_counter() - started, [found[i].rstrip("*") for i in order.tolist()]


def compare_sfp(args: argparse.Namespace, oracle: str) -> dict[str, Any]:
    s = SFP_SETTINGS
    experiment, shard = subsample([f"protocol.max_length={s['max_length']}", 'protocol.name="sfp"'],
                                  args.subsample, args.users, args.seed)
    words, truth = true_top(shard)
    held = [word for word in words if word]  # pure-ldp: users whose word has at most 6 letters
    reference = [reference_sfp(held, args.seed + run, oracle == "hcms") for run in range(args.reference_runs)]
    ours_s, ours_f1 = [], []
    for run in range(args.subsample_runs):
        started = time.perf_counter()
        params = SFPParameters(shard.n_users, s["epsilon"], s["fragment_length"], 0.5, True, s["fragments"], TOP, oracle,
                               s["rows"], s["width"])
        server = SFPServer(params, experiment.codec, args.seed + 1000 + run)
        randomness = KeyedRandomness(args.seed + 1000 + run)
        result = drive(server, lambda request: [sfp_respond(request, shard, randomness)])
        ours_s.append(time.perf_counter() - started)
        ours_f1.append(f1([d.item for d in result.discoveries], truth))
    reference_f1 = [f1(found, truth) for _, found in reference]
    label = "sfp (CMS, its default)" if oracle == "cms" else "sfp (HCMS)"
    return summarize(label, args, len(held), shard.n_users, [t for t, _ in reference], reference_f1, ours_s, ours_f1)


def summarize(protocol: str, args: argparse.Namespace, reference_users: int, users: int, reference_s: list[float],
              reference_f1: list[float], ours_s: list[float], ours_f1: list[float]) -> dict[str, Any]:
    spread = statistics.stdev(ours_f1) or 1e-9
    z = (statistics.fmean(ours_f1) - statistics.fmean(reference_f1)) / (
        spread * math.sqrt(1 / len(ours_f1) + 1 / len(reference_f1)))
    reference_us = statistics.median(reference_s) / reference_users * 1e6
    ours_us = statistics.median(ours_s) / users * 1e6
    return {"protocol": protocol, "subsample_users": users, "reference_users": reference_users,
            "settings": RAPPOR_SETTINGS if protocol == "rappor" else {**SFP_SETTINGS, "oracle": protocol},
            "reference_s": reference_s, "reference_f1": reference_f1, "fedhh_s": ours_s, "fedhh_f1": ours_f1,
            "fedhh_f1_mean": statistics.fmean(ours_f1), "fedhh_f1_sd": statistics.stdev(ours_f1),
            "f1_z_fedhh_minus_reference": z, "reference_us_per_user": reference_us,
            "fedhh_subsample_us_per_user": ours_us, "subsample_ratio": reference_us / ours_us}


# ---------------------------------------------------------------- report
def markdown(document: dict[str, Any]) -> str:
    lines = [
        f"| default population, n = {document['users']:,}, ε = 4, defaults (median of {document['repeats']}) | wall s "
        "| rounds s | CPU s | µs/user | peak RSS MiB | discovered | recall@10 | F1 (K = 100) | same result |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in document["full_scale"]:
        lines.append(
            f"| {row['protocol']} | {row['wall_s']:.1f} | {row['rounds_s']:.1f} | {row['cpu_s']:.1f} | "
            f"{row['us_per_user']:.1f} | {row['peak_rss_mib']:.0f} | {row['discovered']} | {row['recall_at_10']:.2f} | "
            f"{row['f1']:.3f} | {'yes' if row['same_result_every_run'] else 'NO'} |"
        )
    if document.get("reference"):
        full = {row["protocol"]: row for row in document["full_scale"]}
        lines += ["", "| same subsample | users | µs/user pure-ldp | µs/user fedhh | ratio | µs/user fedhh at full scale "
                  "| ratio | F1@10 pure-ldp | F1@10 fedhh (mean ± sd) | z |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in document["reference"]:
            at_scale = full[row["protocol"]]["us_per_user"] if row["protocol"] in full else float("nan")
            lines.append(
                f"| {row['protocol']} | {row['subsample_users']:,} | {row['reference_us_per_user']:,.0f} | "
                f"{row['fedhh_subsample_us_per_user']:,.1f} | **{row['subsample_ratio']:,.0f}x** | {at_scale:.1f} | "
                f"**{row['reference_us_per_user'] / at_scale:,.0f}x** | {statistics.fmean(row['reference_f1']):.3f} | "
                f"{row['fedhh_f1_mean']:.3f} ± {row['fedhh_f1_sd']:.3f} | {row['f1_z_fedhh_minus_reference']:+.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--subsample", type=int, default=20_000)
    parser.add_argument("--reference-runs", type=int, default=2)
    parser.add_argument("--subsample-runs", type=int, default=10)
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--output", default="results/bench_rappor_sfp.json")
    parser.add_argument("--case-json", help=argparse.SUPPRESS)  # internal: one full-scale run
    args = parser.parse_args()
    if args.case_json:
        print(json.dumps(run_case(*json.loads(args.case_json))))
        return
    document: dict[str, Any] = {
        "users": args.users, "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                    "load_average": os.getloadavg()},
        "full_scale": [full_scale(label, args) for label, (protocol, _) in CASES.items() if protocol in args.protocols],
    }
    if not args.no_reference:
        _numpy1_zeros()
        warnings.filterwarnings("ignore")  # pure-ldp's small-sample and convergence warnings
        document["reference"] = (
            ([compare_rappor(args)] if "rappor" in args.protocols else [])
            + ([compare_sfp(args, oracle) for oracle in ("cms", "hcms")] if "sfp" in args.protocols else [])
        )
    document["machine"]["load_average_end"] = os.getloadavg()
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=2, default=float), encoding="utf-8")
    print(markdown(document))


if __name__ == "__main__":
    main()
