"""``fedhh new-client DIR``: a Flower App project pairing a team's own ClientApp with fedhh's ServerApp.

The project runs as it is (``flwr run DIR``, a local simulation on a demo
population) and is then the team's to change:

* ``client_app.py``, the ClientApp: Flower and numpy only, written from the
  message contract (``docs/messages.md``); the same file for every
  protocol it answers (:mod:`simulations.client_project`);
* ``test_client_app.py``, its tests (``pytest DIR``): the contract's
  encodings and replies, and, where fedhh is installed, the client's
  answers driving fedhh's server to what fedhh's own client finds;
* ``server_app.py``: fedhh's ServerApp, named from a module of the bundle
  so that it finds the bundle's files (:func:`simulations.flower_app.bundled_app`);
* ``pyproject.toml``: that ServerApp and this ClientApp as the app's
  components, and the run config keys the run sets, the ClientApp reads,
  or ``flwr run --run-config`` may override (Flower refuses an override of
  a key the bundle does not declare, and a ClientApp sees declared keys
  only);
* ``README.md``: how to run, test and deploy it;
* ``population.jsonl``: a demo population (real English words with
  wordfreq's frequencies, one user per line as a JSON string), which the
  server reads (n, and the truth of the evaluation) and each simulated node
  its share of;
* ``.gitignore``: Python's caches, which ``flwr run`` must not pack.

The run config names no folder of the machine it was written on: the
population is a file of the app bundle (Flower installs the bundle where
the ServerApp and each node run, and carries ``.jsonl`` files, not
``.txt`` ones), and the results go to ``~/fedhh-results/<project name>``
in the home folder of whoever runs the ServerApp (the folder ``flwr run``
was given is not known where the ServerApp runs).  So the project runs as
well after it is moved or copied, or handed to someone else.

The folder is claimed as every output of fedhh is (:mod:`fedhh.results`): a
new or empty folder, never one holding anything else, and never replaced
(not even a project fedhh wrote, which its team may have edited since).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from fedhh.errors import InputError

TEMPLATE = Path(__file__).resolve().parent / "client_project"
CLIENT_FILES = ("client_app.py", "server_app.py", "test_client_app.py")  # copied as they are
KIND = "client project"  # what the folder's marker says it holds
POPULATION_FILE = "population.jsonl"
RESULTS_HOME = "~/fedhh-results"  # the results folder is RESULTS_HOME/<project name> where the ServerApp runs
DEMO_USERS = 100_000
MAX_USERS = 1_000_000  # about 7.5 bytes a user: Flower stores the bundle uncompressed and refuses one over 10 MB
DEMO_VOCABULARY = 100_000  # the wordfreq words the demo users draw from
DEMO_SEED = 0

# What the generated project sets, per protocol it answers: the [protocol] keys and the privacy target.
# Every [protocol] key the ClientApp reads is declared (client_app.DEFAULTS); the others let
# `flwr run --run-config` change what the server plans.
SHARED_PROTOCOL = {
    "alphabet": "lowercase",
    "unit_size": 1,
    "max_length": 6,
    "overlong": "drop",
    "unknown_chars": "error",
}
SETTINGS: dict[str, dict[str, dict[str, object]]] = {
    "triehh": {
        "protocol": {"name": "triehh", **SHARED_PROTOCOL},
        "privacy": {"epsilon": 4.0, "delta": 1e-6},
    },
    "pem": {
        "protocol": {
            "name": "pem",
            **SHARED_PROTOCOL,
            "oracle": "flh",
            "encoding": "bits",
            "collection": "interactive",
            "top_k": 8,
            "start_length": 0,
            "segment_length": 0,
        },
        "privacy": {"epsilon": 4.0, "delta": 1e-6},
    },
}
COMMENTS = {  # the line comment of a key in the generated pyproject.toml
    "alphabet": "the public codec: client_app.py reads these five keys",
    "oracle": "flh (a node's cost grows with its users only), olh or blh (with the candidates too)",
    "encoding": "bits or symbols",
    "collection": "level rounds: client_app.py answers no one-shot collection",
    "start_length": "0: fedhh's planner chooses",
    "delta": "TrieHH's δ (the LDP protocols are pure ε)",
    "deny_list": "items already known, left out (a file or a results folder): client_app.py reads it",
}


def add_new_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", help="the project's folder, new or empty")
    parser.add_argument(
        "--protocol",
        default="triehh",
        metavar="NAME",
        help=f"the protocol the project runs: {', '.join(SETTINGS)} (default: triehh)",
    )
    parser.add_argument(
        "--users", type=int, default=DEMO_USERS, help=f"users of the demo population (default: {DEMO_USERS:,})"
    )
    parser.set_defaults(func=_new_client)


def _new_client(args: argparse.Namespace) -> int:
    from rich.console import Console

    project = write_project(args.dir, args.protocol, args.users)
    Console().print(
        f"[bold]client project[/] {project} ({args.protocol}, {args.users:,} demo users): client_app.py, "
        f"server_app.py, test_client_app.py, pyproject.toml, README.md, {POPULATION_FILE}.\nRun it with fedhh's "
        f"ServerApp (a local simulation): FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 flwr run {project} "
        f"--stream\nResults: {results_folder(project_name(project))}\nTest the client: pytest {project}",
        highlight=False,
        soft_wrap=True,
    )
    return 0


def write_project(folder: str | Path, protocol: str, users: int = DEMO_USERS) -> Path:
    """Write the project for ``protocol`` with a demo population of ``users`` into ``folder`` (new or
    empty); its path.  Refusals are :class:`InputError`, before anything is written."""
    from fedhh.protocols import PROTOCOLS
    from fedhh.results import OutputError, OutputTakenError, ResultsFolder, read_marker

    if protocol not in SETTINGS:
        known = (
            f"{protocol} is a fedhh protocol without a client template"
            if protocol in PROTOCOLS
            else (f"unknown protocol {protocol!r}")
        )
        raise InputError(
            f"--protocol: {known}; new-client writes clients for {', '.join(SETTINGS)} (every "
            "protocol's device side is specified in docs/messages.md)"
        )
    if not 1 <= users <= MAX_USERS:
        raise InputError(
            f"--users: got {users}; allowed: 1..{MAX_USERS:,} (the demo population travels in the app bundle, "
            "which Flower caps at 10 MB)"
        )
    try:
        claim = ResultsFolder.claim(folder, field="DIR", kind=KIND)
    except OutputTakenError:
        marker = read_marker(Path(folder))
        if marker is not None and marker.get("kind") == KIND:
            raise OutputError(
                f"DIR: {Path(folder).resolve()} holds a client project fedhh wrote, perhaps changed "
                "since; fedhh never replaces it: choose a new or empty folder"
            ) from None
        raise
    with claim:
        path = claim.path
        name = project_name(path)
        texts = {
            "pyproject.toml": pyproject_text(name, protocol),
            "README.md": readme_text(name, protocol, users),
            ".gitignore": "__pycache__/\n",
            **{file: (TEMPLATE / file).read_text(encoding="utf-8") for file in CLIENT_FILES},
        }
        items = demo_items(users)
        quoted = {item: json.dumps(item, ensure_ascii=False) for item in set(items)}  # a JSON string per word
        lines = [quoted[item] for item in items]

        def write_files(staging: Path) -> None:
            for file, text in texts.items():
                (staging / file).write_text(text, encoding="utf-8")
            (staging / POPULATION_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")

        claim.commit(None, [write_files])
    return path


def demo_items(users: int, seed: int = DEMO_SEED) -> list[str]:
    """``users`` words drawn with wordfreq's English frequencies among its most frequent lowercase
    words (some longer than ``protocol.max_length``: a run drops these, as it drops a device's)."""
    import numpy as np

    from fedhh.data.sources import wordfreq_candidates

    words, frequencies = wordfreq_candidates("en", DEMO_VOCABULARY, "lowercase")
    drawn = np.random.default_rng(seed).choice(len(words), size=users, p=frequencies / frequencies.sum())
    return [words[i] for i in drawn.tolist()]


def results_folder(name: str) -> str:
    """The results folder of project ``name``, where its ServerApp runs (``~``: that user's home)."""
    return f"{RESULTS_HOME}/{name}"


def project_name(path: Path) -> str:
    """A Python project name from the folder's name (lowercase letters, digits and hyphens)."""
    name = re.sub(r"[^a-z0-9]+", "-", path.name.lower()).strip("-")
    return name if name[:1].isalpha() else f"fedhh-client-{name}".rstrip("-")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _table(name: str, values: dict[str, object]) -> list[str]:
    lines = [f"[tool.flwr.app.config.{name}]"]
    for key, value in values.items():
        comment = f"  # {COMMENTS[key]}" if key in COMMENTS else ""
        lines.append(f"{key} = {_toml_value(value)}{comment}")
    return [*lines, ""]


def pyproject_text(name: str, protocol: str) -> str:
    settings = SETTINGS[protocol]
    lines = [
        "# A Flower App: your own ClientApp (client_app.py, Flower and numpy only) with fedhh's ServerApp.",
        "# Written by `fedhh new-client`; README.md says how to run, test and deploy it.",
        "[build-system]",
        'requires = ["hatchling"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        f"name = {_toml_value(name)}",
        'version = "1.0.0"',
        f"description = \"A ClientApp for fedhh's {protocol} written from fedhh's message contract\"",
        'license = "Apache-2.0"',
        'dependencies = ["flwr[simulation]>=1.41,<1.43", "numpy>=1.26"]',
        "",
        "[tool.hatch.build.targets.wheel]",
        'packages = ["."]',
        "",
        "[tool.flwr.app]",
        'publisher = "my-team"',
        "",
        "[tool.flwr.app.components]",
        'serverapp = "server_app:app"  # fedhh\'s, in this bundle: fedhh is installed where the SuperLink runs',
        'clientapp = "client_app:app"  # yours, in this bundle: the nodes need flwr and numpy only',
        "",
        "# The run config: fedhh's config keys (docs/configuration.md in fedhh) that this run sets.  Flower",
        "# refuses `flwr run --run-config` overrides of keys not listed here, and a ClientApp sees only the",
        "# keys listed; fedhh's ServerApp takes its default for every other key.",
        "[tool.flwr.app.config]",
        f"output-dir = {_toml_value(results_folder(name))}  # the results folder, where the ServerApp runs "
        "(~: that user's home)",
        "overwrite = true  # replace the previous result there (fedhh replaces only files it wrote)",
        "progress = false",
        "",
        *_table("population", {"source": "file", "path": POPULATION_FILE}),
        *_table("protocol", settings["protocol"]),
        *_table("privacy", settings["privacy"]),
        *_table(
            "run",
            {"seed": 0, "shards": "auto", "federation": "shards", "evaluation": True, "top_k": 10, "deny_list": ""},
        ),
    ]
    text = "\n".join(lines)
    return text.replace(
        "[tool.flwr.app.config.population]\n",
        "# Every user's item, one per line: the server reads n (and the truth, run.evaluation) from it, and a\n"
        "# node without a data-file of its own (a simulated one) its share of the users (README.md).  A relative\n"
        "# path is a file of the app bundle, which carries .jsonl files and not .txt ones; or an absolute path.\n"
        "[tool.flwr.app.config.population]\n",
    ).replace(
        "[tool.flwr.app.config.run]\n",
        '# run.shards = "auto": one shard per SuperNode that connects, each holding the users its node config\n'
        '# names (Flower\'s local simulation starts 2; --federation-config "num-supernodes=4" starts 4).\n'
        "[tool.flwr.app.config.run]\n",
    )


def readme_text(name: str, protocol: str, users: int) -> str:
    settings = SETTINGS[protocol]
    privacy = settings["privacy"]
    target = f"ε = {privacy['epsilon']:g}" + (f", δ = {privacy['delta']:g}" if protocol == "triehh" else "")
    return f"""# A ClientApp for fedhh's {protocol}

Written by `fedhh new-client`: your own Flower `ClientApp` (`client_app.py`,
Flower and numpy only) paired with fedhh's `ServerApp`, which discovers the
heavy hitters of the users' words with {protocol} at {target} ({users:,}
demo users). The ClientApp follows fedhh's message contract, version 1.0
(`docs/messages.md` in fedhh's repository); change it as your devices need.

| file | what it is |
|---|---|
| `client_app.py` | the ClientApp: which users a node holds (`read_items`, `Users`), their votes or reports |
| `server_app.py` | fedhh's ServerApp, named from this bundle so that it finds the bundle's files |
| `test_client_app.py` | its tests: the contract's encodings and replies; with fedhh installed, \
the same discovery as fedhh's own client |
| `pyproject.toml` | the Flower App: fedhh's ServerApp, this ClientApp, the run config |
| `{POPULATION_FILE}` | the demo population: one user per line (a JSON string), real English words with \
wordfreq's frequencies |

Nothing here names the folder it was written in: move it, copy it or hand it on, and it
runs as it is.

## Run it

fedhh is installed where the ServerApp runs (`pip install fedhh`, or `pip install -e` of
fedhh's repository); the nodes need only `flwr` and `numpy`. In a local simulation both run
in this environment. From this folder:

```bash
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1   # use this environment, no `uv sync` per run
flwr run . --stream
pytest .
```

`flwr run` runs the rounds on Flower's local simulation (2 SuperNodes, each holding half
of `{POPULATION_FILE}`), and fedhh's ServerApp writes `result.json`, `heavy_hitters.csv`
and `rounds.csv` to `{results_folder(name)}`: `~` is the home folder of whoever runs the
ServerApp (in a local simulation, you), since the folder `flwr run` was given is not known
where the ServerApp runs. Each run replaces the files the previous one wrote there (and
only those: a folder holding anything else is refused). Another folder, absolute or under
`~`: `--run-config "output-dir='~/fedhh-results/{name}-eps2'"`. With no federation named, `flwr run`
starts a local SuperLink in the background and leaves it running: stop it by its PID
(`pgrep -u "$USER" -f -- "${{FLWR_HOME:-$HOME/.flwr}}/local-superlink/superlink.log"`,
then `kill PID`), never by a name pattern.

Change the run with `--run-config` (only the keys `pyproject.toml` lists; fedhh's
defaults hold for the others), e.g. another population file or a privacy target; the
users are split into one shard per SuperNode (`run.shards = "auto"`), however many the
federation has:

```bash
flwr run . --stream --federation-config "num-supernodes=4" \\
  --run-config "population.path='/data/everyone.txt' privacy.epsilon=2.0"
```

A relative `population.path` is a file of the app bundle: Flower installs the bundle where
the ServerApp and each node run and reads it from there, and the bundle carries `.py`,
`.toml`, `.md`, `.json`, `.jsonl`, `.yaml` and `.yml` files only. A population of your own
either travels in this folder as a `.jsonl` (one JSON string a line, the user's item; Flower
refuses a bundle over 10 MB) or is named by an absolute path, as above (`.txt`, `.jsonl`, or
fedhh's `.csv` and `.parquet` on the server; `client_app.py` reads `.txt` and `.jsonl`).

## Your users' data

A node's users are, in the order of their global ids:

* its node config's `data-file` (its own users, one item per line, UTF-8), with
  `population`, the federation's number of users n; or, without a `data-file`,
* its share of the run config's `population.path`, the whole population's file (what a
  simulation's nodes do; a relative path is a file of the bundle).

Node `partition-id` of `num-partitions` holds the global users `[p n / k, (p + 1) n / k)`
(integer division, `shard_bounds` in the contract), and says so before round 1; the server
admits the nodes only if they hold every user exactly once. With `population.source =
"file"` the server's n is the number of lines of `population.path` (`population.users` is
not read); each node's `population` must be that n.

## Deploy it

On the server's machine (fedhh installed), the SuperLink:

```bash
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
flower-superlink --insecure --host 127.0.0.1 --port 9093
```

On each node (flwr and numpy; this folder's `client_app.py` travels in the app bundle), a
SuperNode naming its users (`--port` is the node's own API: two nodes on one machine need
two ports):

```bash
flower-supernode --insecure --superlink 127.0.0.1:9093 --port 9094 \\
  --node-config "partition-id=0 num-partitions=2 population={users} data-file='/data/node-0.txt'"
flower-supernode --insecure --superlink 127.0.0.1:9093 --port 9095 \\
  --node-config "partition-id=1 num-partitions=2 population={users} data-file='/data/node-1.txt'"
```

Name the SuperLink in Flower's home (`$FLWR_HOME/config.toml`, default `~/.flwr/config.toml`):

```toml
[superlink.my-deployment]
address = "127.0.0.1:9093"
insecure = true
```

and submit the run from this folder (one shard per SuperNode that connects; the server
reads `population.path` for n and the evaluation, `run.evaluation = false` keeps the truth
out of the result):

```bash
flwr run . my-deployment --stream
```

fedhh's deployment guide (`docs/deployment.md` in fedhh's repository) covers timeouts,
lost nodes, secure aggregation and what each side sees.

## What the client checks and implements

Every reply carries `"@version": "1.0"`; a request of another major version, another
protocol, oracle or mode makes the handler raise, so the server records the reason and the
run goes on without the node for that round. A request that tells the node its previous
reply was refused (its `"notice"` record) is logged.

It answers TrieHH rounds (one item per user; a user with several items draws one per round
with the keyed randomness of fedhh, which this client does not have) and PEM level rounds
with the `olh`, `blh` or `flh` oracle, either encoding, reporting through the operating
system's randomness (`report-seed` in the node config makes the reports reproducible, for
tests only). The other protocols' and oracles' device sides are in the contract.
"""
