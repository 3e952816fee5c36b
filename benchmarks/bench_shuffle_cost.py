"""What the shuffle-model (ε, δ) costs an LDP run: the amplification bound against the whole run.

    python benchmarks/bench_shuffle_cost.py [--repeats 3] [--users 10000 1000000 1000000000]
        [--protocols pem treehist rappor sfp] [--output results/bench_shuffle_cost.json]

Every ε-LDP run reports, beside its local ε, the central (ε, δ) its reports
would have once shuffled ([FMT21]'s numerical bound, ``fedhh.privacy.shuffle``).
Each case here is one ``fedhh.run`` of a protocol at its default settings (PEM
with OLH; TreeHist, RAPPOR and SFP as they are), on the default population
(wordfreq English) of ``n`` users, in a fresh process: its wall time, and the
wall time spent in the shuffle computation alone (``ShuffleSetting.apply``,
every call, timed around the real computation).  ``n = 10^9`` runs with
``run.simulation = "law"`` (each round's aggregate drawn from its exact law).

Two modes per case, alternating, in one cache folder of the benchmark's own
(``FEDHH_CACHE_DIR``, whose wordfreq entries every process reads):

* ``computed``: no shuffle entry in the cache folder (removed before each
  process), so the bound is computed, its libraries imported, cold, as every
  run did before the guarantees were kept;
* ``read back``: the entry a previous process kept is read back.

Medians over ``--repeats`` processes per mode; results go to ``--output`` as
JSON and to stdout as a Markdown table.  The whole-run time is the reference
the shuffle time is measured against, in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fedhh.privacy.shuffle import CACHE_KIND

LAW_FROM = 10**8  # users from which a case runs with run.simulation = "law"
PROTOCOLS = {  # the settings that differ from fedhh's defaults
    "pem": {"protocol.name": "pem", "protocol.oracle": "olh"},
    "treehist": {"protocol.name": "treehist"},
    "rappor": {"protocol.name": "rappor"},
    "sfp": {"protocol.name": "sfp"},
}
MODES = ("computed", "read back")

CASE = """
import json, sys, time
started = time.perf_counter()
import fedhh
from fedhh.config import config_from_flat
from fedhh.privacy.shuffle import ShuffleSetting

spent = []
apply = ShuffleSetting.apply

def timed(self, report):
    begun = time.perf_counter()
    try:
        return apply(self, report)
    finally:
        spent.append(time.perf_counter() - begun)

ShuffleSetting.apply = timed
config = config_from_flat(json.loads(sys.argv[1]))
begun = time.perf_counter()
result = fedhh.run(config)
run_s = time.perf_counter() - begun
print(json.dumps({"run_s": run_s, "shuffle_s": sum(spent), "calls": len(spent),
                  "process_s": time.perf_counter() - started, "shuffle": result.document["privacy"]["shuffle"],
                  "epsilon": result.document["privacy"]["epsilon"], "found": len(result.heavy_hitters)}))
"""


def settings(protocol: str, users: int) -> dict[str, Any]:
    flat: dict[str, Any] = {**PROTOCOLS[protocol], "population.users": users}
    if users >= LAW_FROM:
        flat["run.simulation"] = "law"
    return flat


def run_case(flat: dict[str, Any], cache_dir: Path) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-c", CASE, json.dumps(flat)],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
        env={**os.environ, "FEDHH_CACHE_DIR": str(cache_dir)},
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{flat}: exit {completed.returncode}\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def forget_guarantees(cache_dir: Path) -> None:
    """Remove the shuffle guarantees kept in the benchmark's own cache folder."""
    for entry in cache_dir.glob(f"{CACHE_KIND}-*.npz"):
        entry.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--users", type=int, nargs="+", default=[10**4, 10**6, 10**9])
    parser.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), choices=list(PROTOCOLS))
    parser.add_argument("--output", type=Path, default=Path("results/bench_shuffle_cost.json"))
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-shuffle-cache-") as folder:
        cache_dir = Path(folder)
        for users in args.users:
            for protocol in args.protocols:
                flat = settings(protocol, users)
                run_case(flat, cache_dir)  # warms the wordfreq entries (and keeps the guarantee)
                samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
                for _ in range(args.repeats):
                    forget_guarantees(cache_dir)
                    samples["computed"].append(run_case(flat, cache_dir))
                    samples["read back"].append(run_case(flat, cache_dir))
                for mode, taken in samples.items():
                    run_s = statistics.median(sample["run_s"] for sample in taken)
                    shuffle_s = statistics.median(sample["shuffle_s"] for sample in taken)
                    rows.append(
                        {
                            "protocol": protocol,
                            "users": users,
                            "mode": mode,
                            "settings": flat,
                            "repeats": args.repeats,
                            "run_s": run_s,
                            "shuffle_s": shuffle_s,
                            "share": shuffle_s / run_s,
                            "calls": taken[0]["calls"],
                            "shuffle": [sample["shuffle"] for sample in taken],
                            "samples": taken,
                        }
                    )
                    print(
                        f"{protocol} n={users:.0e} {mode}: run {run_s:.3f} s, shuffle {shuffle_s:.3f} s "
                        f"({shuffle_s / run_s:.1%})",
                        file=sys.stderr,
                        flush=True,
                    )
                reported = {json.dumps(sample["shuffle"]) for taken in samples.values() for sample in taken}
                assert len(reported) == 1, f"{protocol} n={users}: the guarantee differs between processes"
                write_output(args.output, rows)  # after every case: a stopped benchmark keeps what it measured

    print("\n| protocol | n | simulation | mode | run (s) | shuffle bound (s) | share | shuffled ε |")
    print("|---|---:|---|---|---:|---:|---:|---:|")
    for row in rows:
        epsilon = row["shuffle"][0].get("epsilon")
        print(
            f"| {row['protocol']} | {row['users']:.0e} | {row['settings'].get('run.simulation', 'users')} | "
            f"{row['mode']} | {row['run_s']:.3f} | {row['shuffle_s']:.3f} | {row['share']:.1%} | "
            f"{'n/a' if epsilon is None else f'{epsilon:.6g}'} |"
        )


def write_output(output: Path, rows: list[dict[str, Any]]) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load": os.getloadavg(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    output.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
