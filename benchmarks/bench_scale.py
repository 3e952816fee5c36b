"""Scale benchmark: wall time, users per second and peak RSS of a whole ``fedhh run`` against n.

Each point is one fresh ``fedhh run`` process (fast driver, in-process
shards, default config otherwise: wordfreq English, one word a user,
ε = 4): its wall time from process start to exit and its peak resident
memory (``wait4``'s ``ru_maxrss``), so the figures are those a user sees,
imports, population, rounds, truth and result files included.  From
``--disk-from`` users on, the population is first built on disk with
``fedhh population build`` (timed apart, with its disk use) and the run
reads it (``population.source = "dataset"``); what the benchmark built is
deleted afterwards unless ``--keep``.

    python benchmarks/bench_scale.py --protocols triehh --sizes 1e5 1e6 1e7 1e8 --repeats 3
    python benchmarks/bench_scale.py --protocols pem treehist --sizes 1e5 1e6 1e7

writes ``--out`` (JSON, one record per run) and a log-log plot beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fedhh.results import remove_result_folder

SHARDS = 8


def timed(command: list[str]) -> dict[str, float]:
    """Run ``command``; its wall time and peak RSS (from the kernel's accounting of that process)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode() if process.stderr else ""
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{error[-3000:]}")
    return {"wall_s": wall, "peak_rss_gib": usage.ru_maxrss / 2**20}  # ru_maxrss is in KiB on Linux


def fedhh(*args: str) -> list[str]:
    return [sys.executable, "-m", "simulations.cli", *args]


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def measure(protocol: str, users: int, from_disk: bool, repeats: int, work: Path) -> list[dict[str, Any]]:
    base = ["--set", f"protocol.name={protocol}", "--set", "run.driver=fast", "--set", "run.backend=inprocess",
            "--set", f"run.shards={SHARDS}"]
    population = ["--set", f"population.users={users}"]
    record: dict[str, Any] = {"protocol": protocol, "users": users, "from_disk": from_disk}
    if from_disk:
        stored = work / f"population-{users}"
        build = timed(fedhh("population", "build", *population, "--output", str(stored), "--quiet"))
        record.update(build_s=build["wall_s"], build_peak_rss_gib=build["peak_rss_gib"],
                      disk_gib=folder_bytes(stored) / 2**30)
        population = ["--set", "population.source=dataset", "--set", f"population.path={stored}"]
    records = []
    for repeat in range(repeats):
        output = work / f"run-{protocol}-{users}-{repeat}"
        figures = timed(fedhh("run", *base, *population, "--output", str(output), "--quiet"))
        result = json.loads((output / "result.json").read_text())
        remove_result_folder(output)
        records.append({**record, **figures, "repeat": repeat, "users_per_s": users / figures["wall_s"],
                        "timing_s": result["timing_s"], "discovered": len(result["heavy_hitters"]),
                        "load_average": os.getloadavg()[0]})
        print(json.dumps(records[-1]), flush=True)
    return records


def plot(records: list[dict[str, Any]], path: Path) -> None:
    """Wall time, users per second and peak RSS against n (medians over repeats), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axis, rate_axis, memory_axis) = plt.subplots(1, 3, figsize=(15, 4.2))
    for protocol in sorted({r["protocol"] for r in records}):
        mine = [r for r in records if r["protocol"] == protocol]
        sizes = sorted({r["users"] for r in mine})
        median = {key: [statistics.median(r[key] for r in mine if r["users"] == n) for n in sizes]
                  for key in ("wall_s", "users_per_s", "peak_rss_gib")}
        line = time_axis.loglog(sizes, median["wall_s"], "o-", label=protocol)[0]
        rate_axis.loglog(sizes, median["users_per_s"], "o-", color=line.get_color(), label=protocol)
        memory_axis.loglog(sizes, median["peak_rss_gib"], "o-", color=line.get_color(), label=protocol)
        disk = [n for n in sizes if any(r["from_disk"] for r in mine if r["users"] == n)]
        for n in disk:
            run = median["wall_s"][sizes.index(n)]
            build = next(r["build_s"] for r in mine if r["users"] == n)
            time_axis.loglog([n], [run], "ks", fillstyle="none", markersize=10)
            time_axis.loglog([n], [run + build], "kx", markersize=9)
    lo, hi = min(r["users"] for r in records), max(r["users"] for r in records)
    reference = min(r["wall_s"] for r in records if r["users"] == lo)  # the fastest at the smallest n
    time_axis.loglog([lo, hi], [reference, reference * hi / lo], "k:", label="linear in n")
    time_axis.set(xlabel="users n", ylabel="wall time of fedhh run (s)",
                  title="time (square: from disk; x: with the one-time build)")
    rate_axis.set(xlabel="users n", ylabel="users per second", title="throughput")
    memory_axis.set(xlabel="users n", ylabel="peak RSS (GiB)", title="memory")
    for axis in (time_axis, rate_axis, memory_axis):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocols", nargs="+", default=["triehh"], choices=["triehh", "pem", "treehist"])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7, 1e8])
    parser.add_argument("--disk-from", type=float, default=1e8, help="build on disk and run from it from this n on")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", help="folder for built populations and runs (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep what was built")
    parser.add_argument("--out", default="benchmarks/scale.json")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from --out")
    args = parser.parse_args()
    out = Path(args.out)
    if args.plot_only:
        plot(json.loads(out.read_text()), out.with_suffix(".png"))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` removes what was built
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="fedhh-bench-scale-"))
    records: list[dict[str, Any]] = json.loads(out.read_text()) if out.exists() else []
    try:
        for protocol in args.protocols:
            for size in args.sizes:
                users = int(size)
                records = [r for r in records if (r["protocol"], r["users"]) != (protocol, users)]
                records += measure(protocol, users, users >= args.disk_from, args.repeats, work)
                out.write_text(json.dumps(records, indent=1) + "\n")
    finally:
        if not args.keep and not args.work:
            for built in work.glob("population-*"):
                remove_result_folder(built)
            work.rmdir()  # the temporary folder this run created, now empty
    plot(records, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
