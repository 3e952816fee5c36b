"""fedhh and pure-ldp 1.2.0 side by side at equal utility: RAPPOR, SFP and TreeHist on the same
users, both sides reporting their 10 best estimates.

    python benchmarks/bench_pure_ldp.py [--users 200000] [--runs 5] [--reference-runs 1]
        [--protocols rappor sfp treehist] [--oracle cms] [--profile] [--output results/bench_pure_ldp.json]

For each protocol one population of ``--users`` wordfreq users is drawn once
(fedhh's population, seed ``--seed``) and both codes run on exactly its
users, with the parameters below (as far as they map; differences stated):

* RAPPOR: the 2,000 most frequent words (``population.vocabulary``: the
  users' words and the candidate set, pure-ldp's domain, whose server builds
  a dense ``mC x d`` design matrix), m = 64 bits, h = 2 hashes, C = 32
  cohorts, ε = 4 (pure-ldp's ``f = 2 / (e^(ε/2h) + 1)``, exactly ε).
  fedhh: ``protocol.report = "top_k"``, ``protocol.top_k = 10``; pure-ldp:
  its LASSO-then-regression estimates of every candidate, the 10 best.
  Users whose word is longer than ``protocol.max_length`` hold none: fedhh
  counts them (they send an empty filter), pure-ldp has no empty value and
  skips them (each side's cost is divided by its own users).
* SFP: words of at most 6 letters (longer ones: users without a word, whose
  value is the empty word on both sides), 3 fragments of 2, ε = 8 (4 for
  the fragment, 4 for the word), a count-mean sketch of 16 rows of 1,024
  on both sides (``--oracle``: ``cms``, Apple's CMS, or ``hcms``), the 10
  best (fragment, hash) pairs per position (fedhh ``fragment_candidates``,
  pure-ldp's ``k``) and the 10 best words (fedhh ``words_reported`` with
  ``protocol.report = "top_k"``; pure-ldp: the 10 best word estimates of
  what it assembles).  Differences: fedhh's CMS randomises the one-hot row
  with OUE, pure-ldp's flips every bit with ``1 / (1 + e^(ε/2))``
  (symmetric); fedhh keeps an assembled word only if its own 8-bit hash is
  the hash its fragments carry, pure-ldp keeps every combination.
* TreeHist (the generic hierarchical form of [Cormode21] §5, which is what
  pure-ldp implements): values of 6 symbols (26 letters and an end symbol:
  fedhh's ``symbols`` encoding; pure-ldp gets each word padded to 6 with
  ``_``, a 27th letter, since its candidates never end before the full
  length), 3 levels of 2 symbols, ε = 8 (4 for the prefix, 4 for the
  word), the same sketch (16 x 1,024), the 10 best prefixes kept per level
  (fedhh ``selection = "top-k"``, ``candidates_per_step = 10``; pure-ldp
  ``k = 10``) and the 10 survivors of the last level estimated with
  everyone's word reports (``top_k = 10``; ``postprocess = "base"``, as
  pure-ldp's ``estimator_norm = 0``).  Differences: fedhh assigns each user
  a level by public randomness and keeps one sketch per level; pure-ldp
  draws the level per user and puts every level's prefixes (padded with
  ``*``) into one sketch, so each level's estimates also carry the other
  levels' reports as noise.  (pure-ldp's default oracle for TreeHist and
  SFP, OLH, loops over the whole domain, 27^6 values, for every report: it
  cannot run here.)

pure-ldp's reported strings are filtered of what is not a word (the empty
word; a letter after an end symbol), which fedhh's servers never report,
before its 10 best are taken: this can only raise its F1.

Utility: F1@10 of each side's 10 reported words against the users' true top
10 (fedhh: mean ± sd over ``--runs`` runs, each with its own seed for the
hash functions, the public randomness and the users' noise; pure-ldp over
``--reference-runs``); z is the difference over the pooled sd (pure-ldp's
taken as fedhh's when it has one run), undefined ("n/a") when every run of
both sides gave the same F1.  Cost per user: the whole protocol (every user's
report, the aggregation and the server's decoding) in one process, wall
and CPU seconds, median over the runs, divided by the users; the ratio is
pure-ldp's over fedhh's, measured in the same run.  ``--profile`` adds
cProfile's self-time ranking of one more fedhh run of each protocol.

pure-ldp 1.2.0 is written for numpy 1 (``np.zeros(None)``); its sketch
servers run with that one call mapped back, as in ``bench_rappor_sfp.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import platform
import pstats
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_rappor_sfp import TOP, _numpy1_zeros, f1, reference_rappor, true_top  # noqa: E402

from fedhh.config import load_config  # noqa: E402
from fedhh.data.population import Shard  # noqa: E402
from fedhh.driving import drive  # noqa: E402
from fedhh.experiment import Experiment  # noqa: E402
from fedhh.kernels.randomness import KeyedRandomness  # noqa: E402

PROTOCOLS = ("rappor", "sfp", "treehist")
WORD_LENGTH, FRAGMENT, ROWS, WIDTH = 6, 2, 16, 1024
END = "_"  # pure-ldp's end symbol for TreeHist (a letter of its alphabet)
LETTERS = "abcdefghijklmnopqrstuvwxyz"
# OpenBLAS's threads spin for up to about 0.1 s after a threaded call (scikit-learn's LASSO in pure-ldp's
# RAPPOR, an import of scipy.linalg): that CPU time lands in whatever is timed next, so each side's
# runs start after a pause
QUIET_S = 0.5


def overrides(protocol: str, oracle: str) -> list[str]:
    """fedhh's config for ``protocol`` (the module docstring's parameters)."""
    sketch = [f"protocol.max_length={WORD_LENGTH}", f"privacy.epsilon={8.0}"]
    return {
        "rappor": ['protocol.name="rappor"', "population.vocabulary=2000", "privacy.epsilon=4.0", "protocol.bloom_bits=64",
                   "protocol.bloom_hashes=2", "protocol.cohorts=32", 'protocol.report="top_k"', f"protocol.top_k={TOP}"],
        "sfp": ['protocol.name="sfp"', *sketch, f"protocol.fragment_length={FRAGMENT}", f'protocol.fragment_oracle="{oracle}"',
                f"protocol.fragment_sketch_rows={ROWS}", f"protocol.fragment_sketch_width={WIDTH}",
                f"protocol.fragment_candidates={TOP}", f"protocol.words_reported={TOP}", 'protocol.report="top_k"'],
        "treehist": ['protocol.name="treehist"', *sketch, 'protocol.encoding="symbols"', f'protocol.oracle="{oracle}"',
                     f"protocol.segment_length={FRAGMENT}", 'protocol.selection="top-k"', f"protocol.candidates_per_step={TOP}",
                     f"protocol.top_k={TOP}", 'protocol.postprocess="base"', f"protocol.sketch_rows={ROWS}",
                     f"protocol.sketch_width={WIDTH}"],
    }[protocol]


# ---------------------------------------------------------------- pure-ldp
def is_word(text: str) -> bool:
    """A non-empty string of letters followed only by end symbols (what an item can be)."""
    stem = text.rstrip(END + "*")
    return bool(stem) and all(letter in LETTERS for letter in stem)


def reference_sfp(words: list[str], seed: int, hadamard: bool) -> list[str]:
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer

    random.seed(seed)
    np.random.seed(seed)
    identity = lambda item: item  # noqa: E731 -- the sketches hash the strings themselves
    oracle = CMSServer(8.0, ROWS, WIDTH, is_hadamard=hadamard)
    server = SFPServer(8.0, FRAGMENT, WORD_LENGTH, alphabet=set(LETTERS), index_mapper=identity, fo_server=oracle)
    client = SFPClient(8.0, FRAGMENT, WORD_LENGTH, alphabet=set(LETTERS), index_mapper=identity,
                       fo_client=CMSClient(8.0, oracle.get_hash_funcs(), WIDTH, is_hadamard=hadamard))
    for word in words:
        server.aggregate(client.privatise(word))
    found, estimates = server.find_heavy_hitters(k=TOP)
    return ranked_words(found, estimates)


def reference_treehist(words: list[str], seed: int, hadamard: bool) -> list[str]:
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer

    random.seed(seed)
    np.random.seed(seed)
    identity = lambda item: item  # noqa: E731
    alphabet = set(LETTERS + END)
    server = TreeHistServer(8.0, WORD_LENGTH, FRAGMENT, alphabet=alphabet, index_mapper=identity,
                            fo_server=CMSServer(4.0, ROWS, WIDTH, is_hadamard=hadamard))
    # the server re-derives its sketches' hash functions (deterministic in pure-ldp): the client takes the server's
    hashes = server.fragment_estimator.get_hash_funcs()
    client = TreeHistClient(8.0, FRAGMENT, WORD_LENGTH, alphabet=alphabet, index_mapper=identity,
                            fo_client=CMSClient(4.0, hashes, WIDTH, is_hadamard=hadamard))
    for word in words:
        server.aggregate(client.privatise(word + END * (WORD_LENGTH - len(word))))
    found, estimates = server.find_heavy_hitters(k=TOP)
    return ranked_words(found, estimates)


def ranked_words(found: list[str], estimates: Any) -> list[str]:
    """The reported strings that are words, best estimate first, end symbols and padding removed."""
    order = np.argsort(-np.asarray(estimates, dtype=float), kind="stable").tolist()
    return [found[i].rstrip(END + "*") for i in order if is_word(found[i])][:TOP]


def reference_run(protocol: str, shard: Shard, words: list[str], seed: int, oracle: str) -> tuple[float, float, int, list[str]]:
    """(wall s, CPU s, users, its 10 best words) of one pure-ldp run on the shard's users."""
    wall, cpu = time.perf_counter(), time.process_time()
    if protocol == "rappor":
        users = shard.item_of_user[shard.item_of_user >= 0].tolist()  # pure-ldp: every user holds a candidate
        _, best = reference_rappor(users, shard.vocabulary.size, seed)
        found = [shard.vocabulary.items[i] for i in best]
    else:
        users = words  # every user: "" for one without a word of at most 6 letters
        found = (reference_sfp if protocol == "sfp" else reference_treehist)(users, seed, oracle == "hcms")
    return time.perf_counter() - wall, time.process_time() - cpu, len(users), found


# ---------------------------------------------------------------- fedhh
def fedhh_run(experiment: Experiment, shard: Shard, seed: int) -> tuple[float, float, list[str]]:
    """(wall s, CPU s, reported words) of one fedhh run on the shard (every user), seeded ``seed``."""
    wall, cpu = time.perf_counter(), time.process_time()
    server = experiment.spec.build_server(experiment.config["privacy"], shard.n_users, experiment.codec, seed,
                                          protocol=experiment.config["protocol"])
    server.offer_vocabulary(experiment.source.vocabulary)
    randomness = KeyedRandomness(seed)
    result = drive(server, lambda request: [experiment.respond(request, shard, randomness)])
    return time.perf_counter() - wall, time.process_time() - cpu, [d.item for d in result.discoveries]


def profile(run: Callable[[], Any], lines: int = 14) -> list[dict[str, Any]]:
    """cProfile's functions with the most self time in one call of ``run``."""
    profiler = cProfile.Profile()
    profiler.runcall(run)
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = sum(entry[2] for entry in stats.stats.values())  # type: ignore[attr-defined]
    ranked = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:lines]  # type: ignore[attr-defined]
    return [{"function": f"{Path(file).name}:{line}({name})", "self_s": entry[2], "cumulative_s": entry[3],
             "calls": entry[1], "self_share": entry[2] / total} for (file, line, name), entry in ranked]


# ---------------------------------------------------------------- one protocol
@dataclass
class Side:
    wall_s: list[float]
    cpu_s: list[float]
    f1: list[float]
    users: int

    def per_user_us(self, times: list[float]) -> float:
        return statistics.median(times) / self.users * 1e6


def compare(protocol: str, args: argparse.Namespace) -> dict[str, Any]:
    experiment = Experiment(load_config(None, [f"population.users={args.users}", f"run.seed={args.seed}",
                                               'run.driver="fast"', "run.shards=1", *overrides(protocol, args.oracle)]))
    shard = experiment.build_shard(0, 1)
    words, truth = true_top(shard)
    load_start = os.getloadavg()
    reference = Side([], [], [], 0)
    time.sleep(QUIET_S)
    for run in range(args.reference_runs):
        wall, cpu, users, found = reference_run(protocol, shard, words, args.seed + run, args.oracle)
        reference.wall_s.append(wall)
        reference.cpu_s.append(cpu)
        reference.f1.append(f1(found, truth))
        reference.users = users
        print(f"  {protocol} pure-ldp run {run}: {wall:.1f} s wall, {cpu:.1f} s CPU, F1@10 {reference.f1[-1]:.2f}",
              file=sys.stderr, flush=True)
    ours = Side([], [], [], shard.n_users)
    time.sleep(QUIET_S)  # let the other side's BLAS threads stop spinning before fedhh's clock starts
    for run in range(args.runs):
        wall, cpu, found = fedhh_run(experiment, shard, args.seed + 1000 + run)
        ours.wall_s.append(wall)
        ours.cpu_s.append(cpu)
        ours.f1.append(f1(found, truth))
        print(f"  {protocol} fedhh run {run}: {wall:.2f} s wall, {cpu:.2f} s CPU, F1@10 {ours.f1[-1]:.2f} "
              f"({len(found)} reported)", file=sys.stderr, flush=True)
    spread = statistics.stdev(ours.f1) if len(ours.f1) > 1 else 0.0
    reference_spread = statistics.stdev(reference.f1) if len(reference.f1) > 1 else spread
    pooled = math.sqrt((spread**2 + reference_spread**2) / 2)
    difference = statistics.fmean(ours.f1) - statistics.fmean(reference.f1)
    # no spread on either side (every run the same F1): the difference has no noise scale, z is undefined
    z = difference / (pooled * math.sqrt(1 / len(ours.f1) + 1 / len(reference.f1))) if pooled > 0 else None
    row: dict[str, Any] = {
        "protocol": protocol, "oracle": args.oracle if protocol != "rappor" else "SUE on Bloom bits",
        "fedhh_config": overrides(protocol, args.oracle), "users": shard.n_users, "reference_users": reference.users,
        "true_top": sorted(truth), "load_start": load_start, "load_end": os.getloadavg(),
        "reference": vars(reference), "fedhh": vars(ours),
        "reference_wall_us": reference.per_user_us(reference.wall_s), "reference_cpu_us": reference.per_user_us(reference.cpu_s),
        "fedhh_wall_us": ours.per_user_us(ours.wall_s), "fedhh_cpu_us": ours.per_user_us(ours.cpu_s),
        "fedhh_f1_mean": statistics.fmean(ours.f1), "fedhh_f1_sd": spread, "reference_f1_mean": statistics.fmean(reference.f1),
        "f1_z_fedhh_minus_reference": z,
    }
    row["wall_ratio"] = row["reference_wall_us"] / row["fedhh_wall_us"]
    row["cpu_ratio"] = row["reference_cpu_us"] / row["fedhh_cpu_us"]
    if args.profile:
        row["fedhh_profile"] = profile(lambda: fedhh_run(experiment, shard, args.seed + 999))
    return row


def ratio(value: float) -> str:
    return f"{value:.1f}x" if value < 10 else f"{value:,.0f}x"


def z_text(z: float | None) -> str:
    return "n/a" if z is None else f"{z:+.1f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| protocol | users | µs/user pure-ldp wall (CPU) | µs/user fedhh wall (CPU) | ratio wall (CPU) "
             "| F1@10 pure-ldp | F1@10 fedhh (mean ± sd) | z | load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        lines.append(
            f"| {row['protocol']} ({row['oracle']}) | {row['users']:,} | {row['reference_wall_us']:,.0f} "
            f"({row['reference_cpu_us']:,.0f}) | {row['fedhh_wall_us']:,.1f} ({row['fedhh_cpu_us']:,.1f}) | "
            f"**{ratio(row['wall_ratio'])}** ({ratio(row['cpu_ratio'])}) | {row['reference_f1_mean']:.2f} | "
            f"{row['fedhh_f1_mean']:.2f} ± {row['fedhh_f1_sd']:.2f} | {z_text(row['f1_z_fedhh_minus_reference'])} | "
            f"{row['load_start'][0]:.1f}-{row['load_end'][0]:.1f} |"
        )
    for row in rows:
        if "fedhh_profile" in row:
            lines += ["", f"fedhh {row['protocol']}: self time by function (one run)", ""]
            lines += [f"    {p['self_share']:5.1%} {p['self_s']:7.2f} s  {p['calls']:>8}  {p['function']}"
                      for p in row["fedhh_profile"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=5, help="fedhh runs per protocol (the F1 spread)")
    parser.add_argument("--reference-runs", type=int, default=1, help="pure-ldp runs per protocol")
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    parser.add_argument("--oracle", choices=("cms", "hcms"), default="cms", help="SFP's and TreeHist's sketch")
    parser.add_argument("--profile", action="store_true", help="profile one more fedhh run of each protocol")
    parser.add_argument("--output", default="results/bench_pure_ldp.json")
    args = parser.parse_args()
    _numpy1_zeros()
    warnings.filterwarnings("ignore")  # pure-ldp's convergence warnings
    import pure_ldp.frequency_oracles.apple_cms  # noqa: F401 -- imported before any timing
    import pure_ldp.frequency_oracles.rappor  # noqa: F401
    import pure_ldp.heavy_hitters.apple_sfp  # noqa: F401
    import pure_ldp.heavy_hitters.treehistogram  # noqa: F401

    # fedhh's servers import scipy's linear algebra lazily: imported here too, not in a timed run (its
    # import also wakes OpenBLAS's threads, which then spin for ~50 ms of CPU into the next runs)
    import scipy.linalg  # noqa: F401
    import scipy.sparse  # noqa: F401

    document: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                    "load_average": os.getloadavg()},
        "rows": [compare(protocol, args) for protocol in args.protocols],
    }
    document["machine"]["load_average_end"] = os.getloadavg()
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=2, default=float), encoding="utf-8")
    print(markdown(document["rows"]))


if __name__ == "__main__":
    main()
