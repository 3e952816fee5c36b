"""``fedhh new-client DIR --protocol P``: a Flower App project pairing a team's own ClientApp with fedhh's ServerApp.

* the project runs as it is: ``flwr run DIR --stream``, on a simulation
  SuperLink named as the default connection of an empty Flower home, finds
  the demo population's top words, for TrieHH and for PEM, into
  ``~/fedhh-results/<project name>``; and so it does after the folder is
  moved (copied, and the original removed): the run config names no
  folder of the machine it was written on;
* deployed as its README says (SuperNodes each given their own users'
  file), it finds what ``fedhh.run`` finds;
* its own tests pass (``pytest DIR``), and its ClientApp imports Flower,
  numpy and the standard library only;
* its ``pyproject.toml`` declares every run config key the ClientApp reads
  (a ClientApp sees declared keys only) and is a valid fedhh config;
* the folder is claimed as every fedhh output is: a folder holding anything
  else, or a client project written before, is refused (exit 2) untouched,
  and a refusal writes nothing.
"""

from __future__ import annotations

import ast
import collections
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fedhh
from fedhh.config import config_from_flat
from fedhh.data.population import shard_bounds
from simulations.cli import main
from simulations.deployment import LocalDeployment, free_port
from simulations.new_client import MAX_USERS, POPULATION_FILE, RESULTS_HOME
from strategies.participation import PARTICIPATION_KEYS

BIN = Path(sys.executable).parent
TOP = 5  # the demo population's most frequent words every run must find


def run_config(project: Path) -> dict[str, Any]:
    """The project's run config as Flower flattens it: dotted keys."""
    with open(project / "pyproject.toml", "rb") as file:
        tables = tomllib.load(file)["tool"]["flwr"]["app"]["config"]
    flat: dict[str, Any] = {}
    for key, value in tables.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": item for inner, item in value.items()})
        else:
            flat[key] = value
    return flat


def demo_population(project: Path) -> list[str]:
    """The users' items of the project's demo population (one JSON string a line)."""
    return [json.loads(line) for line in (project / POPULATION_FILE).read_text(encoding="utf-8").splitlines()]


def top_words(project: Path, k: int = TOP) -> list[str]:
    population = project / "population.txt"
    items = population.read_text(encoding="utf-8").splitlines() if population.exists() else demo_population(project)
    return [word for word, _ in collections.Counter(items).most_common(k)]


@pytest.fixture
def simulation_superlink(tmp_path: Path) -> Iterator[Path]:
    """A SuperLink in simulation mode on a free loopback port, the default connection of the (empty,
    per-test) Flower home, as Flower's own local SuperLink is; owned and stopped by the test.  Its
    simulations start a Ray of their own (``RAY_ADDRESS=local``), never joining another one on this
    machine, as Ray otherwise does with the latest cluster started here.  It runs with a home folder of
    the test's (``HOME``), which it yields: the ServerApp's ``~``."""
    port = free_port()
    home_folder = tmp_path / "home"
    home_folder.mkdir()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "RAY_ADDRESS": "local", "HOME": str(home_folder)}
    home = Path(os.environ["FLWR_HOME"])
    assert list(home.iterdir()) == []
    process = subprocess.Popen(
        [str(BIN / "flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
         "--host", "127.0.0.1", "--port", str(port), "--database", str(tmp_path / "state.db")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\ninsecure = true\n',
        encoding="utf-8")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"flower-superlink exited with code {process.returncode}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "flower-superlink did not start within 60 s"
                time.sleep(0.2)
        yield home_folder
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the SuperLink and the processes it started
        process.wait(timeout=30)


def flwr_run(project: Path) -> str:
    """``flwr run PROJECT --stream`` on the default connection (the test's SuperLink); its output."""
    completed = subprocess.run(
        [str(BIN / "flwr"), "run", str(project), "--stream"],
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
             "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"},
        capture_output=True, text=True, timeout=400,
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log
    return log


@pytest.mark.parametrize(("protocol", "moved"), [("triehh", True), ("pem", False)])
def test_flwr_run_of_a_new_project_finds_the_top_words(
    simulation_superlink: Path, tmp_path: Path, protocol: str, moved: bool
) -> None:
    """Moved: written in one folder, copied to another and the original removed, as a project handed on."""
    written = tmp_path / "written" / f"my-{protocol}-client"
    assert main(["new-client", str(written), "--protocol", protocol]) == 0
    project = tmp_path / "elsewhere" / "our-client" if moved else written
    if moved:
        shutil.copytree(written, project)
        shutil.rmtree(written)
    log = flwr_run(project)
    result_file = simulation_superlink / RESULTS_HOME.removeprefix("~/") / f"my-{protocol}-client" / "result.json"
    assert result_file.is_file(), log
    assert written.exists() != moved  # nothing written where the project was
    document = json.loads(result_file.read_text(encoding="utf-8"))
    assert document["protocol"] == protocol and document["transport"] == "flower"
    found = [hit["item"] for hit in document["heavy_hitters"]]
    assert set(top_words(project)) <= set(found), (found, top_words(project))
    assert all(line["rejected_shards"] == [] and line["failed_shards"] == [] for line in document["rounds"])
    assert document["config"]["run"]["shards"] == 2 and document["participation"]["nodes"] == 2  # "auto"
    assert len(document["rounds"]) >= 2


def test_a_project_naming_absolute_paths_runs_as_before(simulation_superlink: Path, tmp_path: Path) -> None:
    """As earlier releases wrote projects: fedhh's ServerApp named by its module, and the population (a
    .txt file) and the results folder by absolute paths."""
    project = tmp_path / "old-client"
    assert main(["new-client", str(project), "--users", "20000"]) == 0
    population = project / "population.txt"
    population.write_text("\n".join(demo_population(project)) + "\n", encoding="utf-8")
    (project / POPULATION_FILE).unlink()
    (project / "server_app.py").unlink()
    text = (project / "pyproject.toml").read_text(encoding="utf-8")
    for old, new in [('serverapp = "server_app:app"', 'serverapp = "simulations.flower_app:app"'),
                     (f'path = "{POPULATION_FILE}"', f'path = "{population}"'),
                     (f'output-dir = "{RESULTS_HOME}/old-client"', f'output-dir = "{project / "results"}"')]:
        assert old in text
        text = text.replace(old, new)
    (project / "pyproject.toml").write_text(text, encoding="utf-8")
    log = flwr_run(project)
    result_file = project / "results" / "result.json"
    assert result_file.is_file(), log
    found = {hit["item"] for hit in json.loads(result_file.read_text(encoding="utf-8"))["heavy_hitters"]}
    assert set(top_words(project, 3)) <= found
    assert not (simulation_superlink / RESULTS_HOME.removeprefix("~/")).exists()


@pytest.mark.parametrize("protocol", ["triehh", "pem"])
def test_the_project_s_own_tests_pass(tmp_path: Path, protocol: str) -> None:
    """Among them, with fedhh installed: the client's answers drive fedhh's server to what fedhh's own
    client finds (TrieHH: the same rounds, vote for vote)."""
    project = tmp_path / "client"
    assert main(["new-client", str(project), "--protocol", protocol, "--users", "20000"]) == 0
    completed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)],
                               cwd=project, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert " passed" in completed.stdout and "skipped" not in completed.stdout


@pytest.mark.parametrize("protocol", ["triehh", "pem"])
def test_the_project_declares_what_its_client_reads_and_is_a_valid_fedhh_config(tmp_path: Path, protocol: str) -> None:
    project = tmp_path / "client"
    assert main(["new-client", str(project), "--protocol", protocol, "--users", "500"]) == 0
    assert {path.name for path in project.iterdir()} >= {"client_app.py", "server_app.py", "test_client_app.py",
                                                         "pyproject.toml", "README.md", POPULATION_FILE, ".gitignore"}
    tree = ast.parse((project / "client_app.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) == {"flwr", "numpy"}
    read = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"(protocol|population)\.[a-z_]+", node.value)}
    assert {"protocol.alphabet", "protocol.max_length", "population.path"} <= read
    flat = run_config(project)
    assert read <= set(flat), f"the ClientApp reads keys the bundle does not declare: {sorted(read - set(flat))}"
    config = config_from_flat({key: value for key, value in flat.items() if "." in key})
    assert config["protocol"]["name"] == protocol
    assert flat["population.path"] == POPULATION_FILE  # a file of the bundle: Flower bundles .jsonl files
    assert flat["output-dir"] == f"{RESULTS_HOME}/client"
    assert not [key for key, value in flat.items() if str(tmp_path) in str(value)]  # no folder of this machine
    assert flat["run.shards"] == "auto"  # one shard per SuperNode, however many the federation has
    assert len(demo_population(project)) == 500
    with open(project / "pyproject.toml", "rb") as file:
        components = tomllib.load(file)["tool"]["flwr"]["app"]["components"]
    assert components == {"serverapp": "server_app:app", "clientapp": "client_app:app"}
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "flwr run . --stream" in readme and "flower-supernode" in readme and str(tmp_path) not in readme


def test_the_largest_demo_population_fits_in_flower_s_app_bundle(tmp_path: Path) -> None:
    """Flower bundles the project as ``flwr run`` does: the population with it, under its 10 MB cap."""
    from flwr.cli.build import build_fab_from_disk

    project = tmp_path / "client"
    assert main(["new-client", str(project), "--users", str(MAX_USERS)]) == 0
    with zipfile.ZipFile(io.BytesIO(build_fab_from_disk(project))) as bundle:
        names = set(bundle.namelist())
        assert {"client_app.py", "server_app.py", POPULATION_FILE, "pyproject.toml"} <= names
        assert len(bundle.read(POPULATION_FILE).splitlines()) == MAX_USERS


@pytest.mark.parametrize(("argv", "message"), [
    (["--protocol", "nothing"], "--protocol: unknown protocol 'nothing'"),
    (["--protocol", "treehist"], "--protocol: treehist is a fedhh protocol without a client template"),
    (["--users", "0"], "--users: got 0; allowed: 1.."),
    (["--users", "1000001"], "--users: got 1000001; allowed: 1..1,000,000 (the demo population travels in the app"),
])
def test_bad_arguments_exit_2_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                                message: str) -> None:
    assert main(["new-client", str(tmp_path / "client"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_holding_anything_else_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "client_app.py").write_text("# my own client\n", encoding="utf-8")
    assert main(["new-client", str(mine)]) == 2
    assert "DIR:" in capsys.readouterr().err
    assert [path.name for path in mine.iterdir()] == ["client_app.py"]
    assert (mine / "client_app.py").read_text(encoding="utf-8") == "# my own client\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["new-client", str(empty), "--users", "100"]) == 0
    assert (empty / "client_app.py").is_file()


def test_a_project_written_before_is_never_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "client"
    assert main(["new-client", str(project), "--users", "100"]) == 0
    client = project / "client_app.py"
    client.write_text(client.read_text(encoding="utf-8") + "# our change\n", encoding="utf-8")
    before = {path.name: path.read_bytes() for path in project.iterdir()}
    capsys.readouterr()
    assert main(["new-client", str(project), "--protocol", "pem", "--users", "100"]) == 2
    assert "holds a client project fedhh wrote" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in project.iterdir()} == before


def test_deployed_with_each_node_s_own_users_the_project_finds_what_fedhh_finds(
    deployment: LocalDeployment, tmp_path: Path
) -> None:
    """The README's deployment: a SuperLink, three SuperNodes each given its own users' file
    (``data-file``, ``population`` = n) and ``--run-config`` overrides; TrieHH draws nothing on the device, so
    the run finds what ``fedhh.run`` finds over the same population, round for round."""
    project = tmp_path / "client"
    assert main(["new-client", str(project), "--protocol", "triehh", "--users", "6000"]) == 0
    lines = demo_population(project)
    for index in range(3):
        start, stop = shard_bounds(len(lines), index, 3)
        own = tmp_path / f"node-{index}.txt"
        own.write_text("\n".join(lines[start:stop]) + "\n", encoding="utf-8")
        deployment.add_supernode(f"node-{index}", {"partition-id": index, "num-partitions": 3,
                                                   "population": len(lines), "data-file": str(own)})
    settings = {"privacy.epsilon": 8.0}  # a key the project declares: --run-config may set it
    results = tmp_path / "results"
    outcome = deployment.run({**settings, "output-dir": str(results)}, app_dir=project, timeout=300.0)
    assert outcome.succeeded, f"{outcome.status}: {outcome.details}\n{outcome.output}\n{deployment.logs()}"
    document = json.loads((results / "result.json").read_text(encoding="utf-8"))
    flat = {key: value for key, value in run_config(project).items() if "." in key}
    flat["population.path"] = str(project / flat["population.path"])  # the server reads the bundle's file
    reference = fedhh.run(config_from_flat({**flat, **settings, "run.shards": 3}))
    assert len(reference.heavy_hitters) >= 3 and document["heavy_hitters"] == reference.heavy_hitters
    rounds = [{k: v for k, v in line.items() if k not in PARTICIPATION_KEYS} for line in document["rounds"]]
    assert rounds == reference.document["rounds"]
