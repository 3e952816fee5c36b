"""Protocols defined outside fedhh: an installed plugin's entry point, or ``--protocol-module``.

A plugin is a distribution whose ``entry_points.txt`` names, in the
``fedhh.protocols`` group, a module that registers a protocol; the tests
install one into a temporary folder on the Python path (a ``.dist-info``
folder is all ``importlib.metadata`` reads).  The modules register copies
of the counting protocol of ``tests/test_protocol_spec.py`` under new
names; every test leaves the registry as it found it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedhh.errors import InputError
from fedhh.protocols import PROTOCOLS, protocol_module
from fedhh.protocols.registry import _MODULES, load_plugins
from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["population.users=20000", "population.vocabulary=2000", "run.seed=3", "run.shards=2", 'run.driver="fast"']
# a module that registers the counting protocol again under the name NAME
REGISTERS = (
    "import dataclasses\n"
    "from fedhh.protocols import register_protocol\n"
    "from tests.test_protocol_spec import SPEC\n"
    "SPEC = register_protocol(dataclasses.replace(SPEC, name={name!r}))\n"
)


@pytest.fixture(autouse=True)
def registry_restored() -> Iterator[None]:
    protocols, modules, imported = dict(PROTOCOLS), dict(_MODULES), set(sys.modules)
    yield
    PROTOCOLS.clear()
    PROTOCOLS.update(protocols)
    _MODULES.clear()
    _MODULES.update(modules)
    for name in set(sys.modules) - imported:
        if name.startswith(("counting_", "broken_")):
            del sys.modules[name]


def install_plugin(folder: Path, entry: str, module: str, source: str) -> None:
    """A distribution ``fedhh-test-plugin`` in ``folder``: ``module`` and an entry point ``entry = module``."""
    (folder / f"{module}.py").write_text(source, encoding="utf-8")
    info = folder / "fedhh_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fedhh-test-plugin\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[fedhh.protocols]\n{entry} = {module}\n", encoding="utf-8")


def test_an_installed_plugin_s_protocol_is_registered_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugin(tmp_path, "counting", "counting_plugin", REGISTERS.format(name="plugged"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "plugged" not in PROTOCOLS
    load_plugins()
    assert protocol_module("plugged") == "counting_plugin"  # what a Flower run's nodes import
    load_plugins()  # loading again registers nothing twice
    output = tmp_path / "out"
    settings = [f"--set={setting}" for setting in [*SMALL, 'protocol.name="plugged"']]
    assert main(["run", *settings, "--quiet", "--json", "--output", str(output)]) == 0
    assert json.loads(capsys.readouterr().out)["protocol"] == "counting"  # the counting server's result
    assert json.loads((output / "result.json").read_text(encoding="utf-8"))["config"]["protocol"]["name"] == "plugged"


def test_a_plugin_that_fails_is_named_in_a_one_line_error(tmp_path: Path) -> None:
    """Through the command line, in a process of its own: exit status 2 and the plugin's name, its
    distribution and the module's error, without a traceback."""
    install_plugin(tmp_path, "broken", "broken_plugin", "import numpy.no_such_module\n")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "run", "--set", 'run.driver="fast"'],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=300, check=False,
    )
    assert done.returncode == 2, done.stderr
    error = " ".join(done.stderr.split())
    assert "protocol plugin 'broken' (fedhh.protocols entry point, distribution fedhh-test-plugin 1.0)" in error
    assert "cannot import 'broken_plugin' (No module named 'numpy.no_such_module')" in error
    assert "Traceback" not in done.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(InputError, match=r"^protocol plugin 'broken' .*cannot import 'broken_plugin'"):
            load_plugins()  # and in code: an InputError naming the plugin
    finally:
        sys.path.remove(str(tmp_path))


def test_fedhh_run_imports_the_protocol_module_before_reading_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "counting_module.py").write_text(REGISTERS.format(name="named"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = [f"--set={setting}" for setting in [*SMALL, 'protocol.name="named"']]
    assert main(["run", *settings, "--quiet", "--output", str(tmp_path / "refused")]) == 2
    assert "protocol.name: got 'named'" in capsys.readouterr().err
    output = tmp_path / "out"
    assert main(["run", "--protocol-module", "counting_module", *settings, "--quiet", "--output", str(output)]) == 0
    assert protocol_module("named") == "counting_module"
    assert json.loads((output / "result.json").read_text(encoding="utf-8"))["config"]["protocol"]["name"] == "named"
    assert main(["run", "--protocol-module", "no_such_module", *settings, "--quiet"]) == 2
    assert "--protocol-module: cannot import 'no_such_module' (No module named 'no_such_module')" in " ".join(
        capsys.readouterr().err.split()
    )


def test_fedhh_sweep_imports_the_protocol_module_in_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two worker processes (spawned: they import only what a trial names) run the trials."""
    import pyarrow.parquet

    (tmp_path / "counting_swept.py").write_text(REGISTERS.format(name="swept"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        '[population]\nsource = "zipf"\nusers = 5000\nvocabulary = 500\nitem_length = 4\n'
        '[protocol]\nname = "swept"\nmax_length = 4\n[sweep]\ntrials = 2\n"run.seed" = [1, 2]\n',
        encoding="utf-8",
    )
    output = tmp_path / "out"
    argv = ["sweep", str(sweep), "--output", str(output), "--workers", "2", "--quiet"]
    assert main([*argv, "--protocol-module", "counting_swept"]) == 0
    trials = pyarrow.parquet.read_table(output / "trials.parquet").to_pylist()
    assert len(trials) == 4 and {row["error"] for row in trials} == {""}
    assert all(json.loads(row["config"])["protocol"]["name"] == "swept" for row in trials)
