"""Start-up of the ``fedhh`` command: ``fedhh --help`` and the default fast run, whole processes.

Targets (issue 14, speed of the whole run): ``fedhh --help`` under 0.5 s and
``fedhh run --set run.driver="fast"`` on the default job (TrieHH, 1,000,000
wordfreq users) at most 1.5 s, wall clock of the whole process as a user
types it (the ``fedhh`` console script of this environment).

With ``--reference DIR`` (a checkout of an earlier commit, e.g. a temporary
``git worktree``), the same commands run from that tree too (first on
``PYTHONPATH``, same interpreter and packages), alternated with the current
tree's runs so that both see the same load; the medians are reported side
by side.  Peak RSS is the ``fedhh`` process's own and, separately, that of
its largest child (the plot process).  The CPU seconds of each run (user
and system, of the process and the plot process) are reported too: on a
shared machine other jobs inflate the wall time, far less the CPU time.

fedhh's cache folder (``FEDHH_CACHE_DIR``, :mod:`fedhh.data.cache`: wordfreq's
filtered list) is a fresh temporary folder for each tree, filled by that
tree's first (warm-up) run, whose time is reported as the cold-cache run;
the medians are of runs with the cache filled, as every run after a
user's first.  A reference tree without the cache ignores the variable.

Compiled modules are kept in a temporary ``PYTHONPYCACHEPREFIX`` folder
(filled by the warm-up runs), as an installed fedhh has its bytecode, even
where the environment sets ``PYTHONDONTWRITEBYTECODE`` (this machine's
does: every process would then compile fedhh's 60-odd modules anew, about
0.1 s); ``--no-bytecode-cache`` keeps the environment's setting.

Usage::

    python benchmarks/bench_startup.py [--repeats 7] [--reference /tmp/fedhh-before] [--no-bytecode-cache] [--output FILE]
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
import tempfile
import time
from pathlib import Path
from typing import Any

FEDHH = Path(sys.executable).parent / "fedhh"
# The fedhh console script, with the peak RSS of the process and of its largest child on stderr.
MEASURED = """
import resource, sys
from simulations.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as stop:
    status = stop.code
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
print("BENCH", own, child, file=sys.stderr, flush=True)
sys.exit(status)
"""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def environment(tree: Path | None, cache: Path, bytecode: Path | None) -> dict[str, str]:
    """The variables of a measured process: the tree first on ``PYTHONPATH``, fedhh's cache folder,
    and with ``bytecode`` compiled modules kept there (``PYTHONPYCACHEPREFIX``) whatever
    ``PYTHONDONTWRITEBYTECODE`` says."""
    env = {**os.environ, "FEDHH_CACHE_DIR": str(cache)}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    if bytecode is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    return env


def timed(argv: list[str], env: dict[str, str], measure_memory: bool) -> dict[str, float]:
    """Wall seconds of one ``fedhh`` process (and its peak RSS in GiB when ``measure_memory``)."""
    command = [sys.executable, "-c", MEASURED, *argv] if measure_memory else [str(FEDHH), *argv]
    with tempfile.TemporaryDirectory(prefix="fedhh-bench-") as cwd:  # `-c` puts the working folder first on sys.path
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        child = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=True)
        figures = {"wall_s": time.perf_counter() - started}
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the process and the plot process it waited for
        figures["cpu_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if measure_memory:
        line = next(line for line in child.stderr.splitlines() if line.startswith("BENCH"))
        own, largest_child = (float(value) for value in line.split()[1:])
        figures.update(peak_rss_gib=own, child_peak_rss_gib=largest_child)
    return figures


def default_run(env: dict[str, str], measure_memory: bool = False) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="fedhh-bench-") as scratch:
        return timed(["run", "--set", 'run.driver="fast"', "--quiet", "--output", str(Path(scratch) / "run")],
                     env, measure_memory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--reference", type=Path, help="checkout of an earlier commit, measured alternately")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="keep the environment's PYTHONDONTWRITEBYTECODE (if set, every process compiles "
                             "fedhh's modules anew)")
    parser.add_argument("--output", default="results/bench_startup.json")
    args = parser.parse_args()
    trees: dict[str, Path | None] = {"current": None}
    if args.reference is not None:
        trees["reference"] = args.reference.resolve()
    document: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
                    "load_average_start": os.getloadavg()},
        "command": " ".join(sys.argv),
        "scope": "whole fedhh process (wall clock of the console script)",
        "bytecode": "as the environment says" if args.no_bytecode_cache else "cached (PYTHONPYCACHEPREFIX)",
    }
    with tempfile.TemporaryDirectory(prefix="fedhh-bench-caches-") as caches:
        scratch = Path(caches)
        bytecode = None if args.no_bytecode_cache else scratch / "bytecode"
        envs = {name: environment(tree, scratch / name, bytecode) for name, tree in trees.items()}
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        for name, tree in trees.items():  # warm the file cache and the bytecode, then fill fedhh's cache
            timed(["--help"], envs[name], False)
            default_run(environment(tree, scratch / f"{name}-warm-up", bytecode))
            samples[name]["cold_cache_run_s"] = [default_run(envs[name])["wall_s"]]
        for _ in range(args.repeats):
            for name in trees:
                figures = {"help_s": timed(["--help"], envs[name], False)["wall_s"]}
                run = default_run(envs[name])
                figures["default_run_s"] = run["wall_s"]
                figures["default_run_cpu_s"] = run["cpu_s"]
                figures["load_1min"] = os.getloadavg()[0]  # right after the run
                for key, value in figures.items():
                    samples[name].setdefault(key, []).append(value)
        for name in trees:  # memory once each: the wrapper adds nothing to the time but a little
            samples[name].update({key: [value] for key, value in default_run(envs[name], True).items()
                                  if key not in ("wall_s", "cpu_s")})
    document["machine"]["load_average_end"] = os.getloadavg()
    document["median"] = {name: {key: statistics.median(values) for key, values in figures.items()}
                          for name, figures in samples.items()}
    document["runs"] = samples
    if args.reference is not None:
        document["speedup"] = {key: document["median"]["reference"][key] / document["median"]["current"][key]
                               for key in ("help_s", "default_run_s", "default_run_cpu_s")}
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=2), encoding="utf-8")
    print(json.dumps({key: document[key] for key in document if key != "runs"}, indent=2))


if __name__ == "__main__":
    main()
