"""The default run as a Flower simulation: start-up and per-round cost, apart.

Target (issue: the Flower spine): the default job (wordfreq English,
1,000,000 users, TrieHH) over 8 virtual SuperNodes on Flower's Ray backend
in 60 s end to end on a 2-core machine.

Each repeat runs in a fresh Python process, as ``fedhh run`` would, so
imports, Ray's start and its shutdown are all counted.  Reported per repeat
(medians over repeats):

* ``end_to_end_s``: process start to exit;
* ``import_s``: importing fedhh, Flower and Ray;
* ``startup_s``: from the call to the first round: the server builds the
  experiment (``experiment_s``), then waits for the nodes, which start Ray
  actors and build their shards (``setup_s``);
* ``rounds``, ``rounds_s``, ``mean_round_s``, ``max_round_s``: the protocol
  rounds (one request to every node, 8 replies decoded and combined);
* ``finish_s``: true counts and metrics for the result document, writing
  it, stopping the actors and Ray.

It also times the wire codec alone on the largest messages of the run, to
show how much of a round is encoding rather than Flower's scheduling.

Usage::

    python benchmarks/bench_flower.py [--repeats 3] [--supernodes 8]
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
from typing import Any

STARTED = time.perf_counter()


def child(supernodes: int) -> dict[str, Any]:
    """One measured run in this (fresh) process."""
    from fedhh.config import load_config
    from simulations.flower import run_flower_simulation

    imported = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        called = time.perf_counter()
        document = run_flower_simulation(load_config(None, []), supernodes, output_dir=f"{scratch}/result")
        returned = time.perf_counter()
    timing = document["timing_s"]
    startup = timing["experiment_s"] + timing["setup_s"]
    return {
        "import_s": imported - STARTED,
        "call_s": returned - called,
        "startup_s": startup,
        "experiment_s": timing["experiment_s"],
        "setup_s": timing["setup_s"],
        "rounds": len(document["rounds"]),
        "rounds_s": timing["rounds_s"],
        "mean_round_s": timing["mean_round_s"],
        "max_round_s": timing["max_round_s"],
        "finish_s": (returned - called) - startup - timing["rounds_s"],
        "discovered": len(document["heavy_hitters"]),
        "metrics": {k: document["evaluation"]["metrics"][k] for k in ("precision", "f1", "ncr")},
    }


def codec_cost() -> dict[str, Any]:
    """Encode + decode time and wire size of each round's request and 1/8 response."""
    from fedhh.config import load_config
    from fedhh.experiment import Experiment
    from strategies.codec import codec_for

    experiment = Experiment(load_config(None, []))
    server = experiment.make_server()
    spec = experiment.spec
    shards = [experiment.build_shard(i, 8) for i in range(8)]
    largest: dict[str, Any] = {}
    while (request := server.next_request()) is not None:
        responses = [experiment.respond(request, shard, experiment.randomness) for shard in shards]
        for name, codec, message in (("request", codec_for(spec.request_type), request), ("response", codec_for(spec.response_type), responses[0])):
            started = time.perf_counter()
            for _ in range(20):
                record = codec.encode(message)
                codec.decode(record)
            seconds = (time.perf_counter() - started) / 20
            size = sum(len(a.data) for a in record["arrays"].values())
            if size >= largest.get(name, {}).get("array_bytes", -1):
                largest[name] = {"round": request.round, "array_bytes": size, "encode_decode_ms": 1e3 * seconds}
        server.absorb(type(responses[0]).combine(responses))
    return largest


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_gib, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "flwr": version("flwr"),
        "ray": version("ray"),
        "numpy": version("numpy"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--supernodes", type=int, default=8)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.supernodes)))
        return

    runs = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        output = subprocess.run(
            [sys.executable, __file__, "--child", "--supernodes", str(args.supernodes)],
            check=True,
            capture_output=True,
            text=True,
        )
        run = json.loads(output.stdout.strip().splitlines()[-1])
        run["end_to_end_s"] = time.perf_counter() - started
        runs.append(run)
    numeric = [key for key, value in runs[0].items() if isinstance(value, float)]
    figures = {
        "machine": machine(),
        "supernodes": args.supernodes,
        "repeats": args.repeats,
        "median": {key: round(statistics.median(run[key] for run in runs), 3) for key in numeric},
        "rounds": runs[0]["rounds"],
        "discovered": runs[0]["discovered"],
        "metrics": runs[0]["metrics"],
        "codec": codec_cost(),
        "runs": runs,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
