"""``fedhh population build`` from a user's CSV: streamed (record batches) against reading it whole.

For each number of rows, a CSV of ``user,item`` rows (users in random
order, several rows each) is written once; then, each in a fresh process,
the streamed build (:mod:`fedhh.data.streamed_table`, the whole build: pass,
shards, vocabulary, manifest) and the whole-file reading that preceded it
(``FileSource``: parsing only, no shard written).  Reported per process:
wall time, peak RSS (``VmHWM``) and peak address space (``VmPeak``) beyond
what the imports took.

    python benchmarks/bench_streamed_build.py --rows 2e6 2e7 --whole-up-to 6e6
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv

WORDS = 5000

MEASURE = textwrap.dedent("""
    import json, sys, time
    from fedhh.config import build_config
    from fedhh.experiment import item_codec
    from fedhh.results import ResultsFolder
    from fedhh.data.sources import FileSource
    from simulations.population_build import build_population
    import pyarrow.csv, pyarrow.compute

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) / 1024

    how, path, output = sys.argv[1:4]
    config = build_config({"population": {"source": "file", "path": path}, "run": {"seed": 1}})
    base_vm, base_rss = status("VmSize:"), status("VmRSS:")
    started = time.perf_counter()
    if how == "streamed":
        with ResultsFolder.claim(output) as folder:
            users = build_population(config, folder, workers=1)["users"]
    else:
        users = FileSource(path, item_codec(config)).n_users
    print(json.dumps({"how": how, "users": users, "wall_s": time.perf_counter() - started,
                      "peak_rss_mib": status("VmHWM:"), "imports_rss_mib": base_rss,
                      "address_space_beyond_imports_mib": status("VmPeak:") - base_vm}))
""")


def write_csv(path: Path, rows: int, users: int) -> None:
    """``rows`` rows of ``users`` users in random order, Zipf(1.3) items over 5,000 words, written a
    million rows at a time."""
    rng = np.random.default_rng(0)
    names = pa.array([f"user{u}" for u in range(users)])
    words = pa.array(["w" + "".join(chr(97 + (x // 26**k) % 26) for k in range(3)) for x in range(WORDS)])
    with pyarrow.csv.CSVWriter(path, pa.schema([("user", pa.string()), ("item", pa.string())])) as writer:
        for start in range(0, rows, 1_000_000):
            size = min(1_000_000, rows - start)
            writer.write_table(pa.table({"user": names.take(pa.array(rng.integers(0, users, size))),
                                         "item": words.take(pa.array(rng.zipf(1.3, size) % WORDS))}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=float, nargs="+", default=[2e6, 2e7])
    parser.add_argument("--rows-per-user", type=int, default=100)
    parser.add_argument("--whole-up-to", type=float, default=6e6, help="largest file also read whole")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedhh-bench-stream-") as temp:
        for rows in map(int, args.rows):
            csv = Path(temp) / f"events-{rows}.csv"
            write_csv(csv, rows, max(rows // args.rows_per_user, 1))
            for how in ["streamed", *(["whole"] if rows <= args.whole_up_to else [])]:
                done = subprocess.run([sys.executable, "-c", MEASURE, how, str(csv), str(Path(temp) / f"{how}-{rows}")],
                                      capture_output=True, text=True, check=True)
                record = json.loads(done.stdout.splitlines()[-1])
                print(json.dumps({"rows": rows, "csv_mib": round(csv.stat().st_size / 2**20, 1), **record}), flush=True)


if __name__ == "__main__":
    main()
