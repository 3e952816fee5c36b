"""The default TrieHH job over more and more Flower SuperNodes: start-up and time per round.

Issue 15, part 4: the same 1,000,000 wordfreq users split over 8, 64, 512
and 2,048 virtual SuperNodes (smaller shards) on Flower's Ray backend.
Each count runs in a fresh Python process (``run_flower_simulation``, as
``fedhh run --set run.shards=N`` does); recorded per count:

* ``connect_s``: the ServerApp's wait for its nodes (``timing_s.setup_s``:
  actors started, every node's shard query answered);
* ``mean_round_s`` and ``rounds_s``: the protocol rounds (one message per
  node that holds a sampled user, its reply decoded, checked and summed);
* ``end_to_end_s``: the whole process.

Beside it, what of that is fedhh's own, per node, timed in this process on
the same job: building the node's shard from the shared population source
(``shard_build_ms``), narrowing the round's request to the node
(``narrow_ms``) and encoding it plus decoding its reply (``codec_ms``) on
the largest round; these must cost O(the node's own users), i.e. fall as
the shards shrink.  The rest of a round is Flower's: its simulation engine
polls every node for new messages every 0.1 s, each poll scanning all the
messages in flight, and each message is a Ray actor call.

Writes ``benchmarks/flower_nodes.json`` and the log-log plot
``benchmarks/flower_nodes.png`` (``--output`` names another file); each
row records the Flower version it ran with.

Usage::

    python benchmarks/bench_flower_nodes.py [--nodes 8 64 512 2048] [--repeats 1]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def child(nodes: int) -> dict[str, Any]:
    """One measured run in this (fresh) process."""
    from fedhh.config import load_config
    from simulations.flower import run_flower_simulation

    config = load_config(None, [f"run.shards={nodes}"])
    document = run_flower_simulation(config)
    timing = document["timing_s"]
    return {
        "connect_s": timing["setup_s"],
        "rounds": len(document["rounds"]),
        "rounds_s": timing["rounds_s"],
        "mean_round_s": timing["mean_round_s"],
        "max_round_s": timing["max_round_s"],
        "discovered": [hit["item"] for hit in document["heavy_hitters"]],
    }


def ours_per_node(nodes: int) -> dict[str, float]:
    """Median over the nodes of fedhh's own per-node work, in milliseconds."""
    from fedhh.config import load_config
    from fedhh.experiment import Experiment
    from strategies.codec import codec_for
    from strategies.shards import ShardInfo

    experiment = Experiment(load_config(None, [f"run.shards={nodes}"]))
    spec = experiment.spec
    request_codec, response_codec = codec_for(spec.request_type), codec_for(spec.response_type)
    build_ms, shards = [], []
    for index in range(nodes):
        started = time.perf_counter()
        shards.append(experiment.build_shard(index, nodes))
        build_ms.append(1e3 * (time.perf_counter() - started))
    infos = [ShardInfo(i, nodes, s.first_user, s.n_users, experiment.n_users) for i, s in enumerate(shards)]
    server = experiment.make_server()
    largest: dict[str, float] = {}
    while (request := server.next_request()) is not None:
        narrow_ms, codec_ms, responses = [], [], []
        for info, shard in zip(infos, shards, strict=True):
            started = time.perf_counter()
            node_request = spec.narrow(request, info)
            narrowed = time.perf_counter()
            if node_request is None:
                continue
            narrow_ms.append(1e3 * (narrowed - started))
            response = experiment.respond(node_request, shard, experiment.randomness)
            started = time.perf_counter()
            request_codec.decode(request_codec.encode(node_request))
            response_codec.decode(response_codec.encode(response))
            codec_ms.append(1e3 * (time.perf_counter() - started))
            responses.append(response)
        if request.sampled.size >= largest.get("sampled", -1):
            largest = {"sampled": int(request.sampled.size), "narrow_ms": statistics.median(narrow_ms),
                       "codec_ms": statistics.median(codec_ms)}
        server.absorb(type(responses[0]).combine(responses))
    return {"shard_build_ms": statistics.median(build_ms), "narrow_ms": largest["narrow_ms"],
            "codec_ms": largest["codec_ms"]}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    from matplotlib.figure import Figure

    nodes = [row["nodes"] for row in rows]
    figure = Figure(figsize=(7, 4.2), dpi=120)
    axes = figure.add_subplot()
    axes.loglog(nodes, [row["connect_s"] for row in rows], "o-", label="start-up: nodes connected (s)")
    axes.loglog(nodes, [row["mean_round_s"] for row in rows], "s-", label="mean time per round (s)")
    for key, label in (("shard_build_ms", "ours: one node's shard build"), ("codec_ms", "ours: one node's codec")):
        axes.loglog(nodes, [row[key] / 1e3 for row in rows], ".--", label=f"{label} (s)")
    axes.set_xlabel("virtual SuperNodes (1,000,000 users split evenly)")
    axes.set_ylabel("seconds")
    axes.set_title("TrieHH on Flower's Ray backend, 2 cores", fontsize=10)
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(fontsize=8)
    figure.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64, 512, 2048])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=HERE / "flower_nodes.json")
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return

    rows = []
    for nodes in args.nodes:
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="bench-nodes-") as scratch:
                load = os.getloadavg()[0]
                started = time.perf_counter()
                completed = subprocess.run([sys.executable, __file__, "--child", str(nodes)], check=True,
                                           capture_output=True, text=True, env={**os.environ, "FLWR_HOME": scratch})
                run = json.loads(completed.stdout.strip().splitlines()[-1])
                run.update(end_to_end_s=time.perf_counter() - started, load=[load, os.getloadavg()[0]])
                runs.append(run)
        row = {"nodes": nodes, "flwr": importlib.metadata.version("flwr"), "repeats": len(runs),
               "rounds": runs[0]["rounds"],
               "load": [min(r["load"][0] for r in runs), max(r["load"][1] for r in runs)],
               **{key: statistics.median(r[key] for r in runs)
                  for key in ("end_to_end_s", "connect_s", "rounds_s", "mean_round_s", "max_round_s")},
               **ours_per_node(nodes), "discovered": len(runs[0]["discovered"]),
               "same_result_in_every_repeat": len({json.dumps(r["discovered"]) for r in runs}) == 1}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    args.output.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    plot(rows, args.output.with_suffix(".png"))
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
