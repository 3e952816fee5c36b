"""Every command that writes files follows one rule (:mod:`fedhh.results`), checked here against
every kind of folder it must never write.

A command's output is a new or empty folder, or one holding only what fedhh
wrote there; never the current folder, a parent of it, the home or the root
folder, a regular file, a path that cannot be made (``/proc/x``), a
symbolic link, nor a folder holding a symbolic link where fedhh would write.
Each refusal is exit status 2 with one line naming ``--output``, before any
work, and leaves every file as it was: no sentinel touched, nothing created
(not even a lock file) and nothing followed through a link.

The root folder is checked through the rule itself, never by running a
command on it: a stand-in folder is given the root's role.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fedhh import results
from fedhh.results import MARKER, OutputError, output_path
from simulations import deployment, sizing_figures
from simulations.cli import main

from .test_sweep import TINY

SMALL = [
    "--set", 'population.source="zipf"', "--set", "population.users=2000", "--set", "population.vocabulary=200",
    "--set", "population.item_length=3", "--set", "protocol.max_length=3", "--set", "privacy.epsilon=8",
    "--set", "privacy.delta=1e-4", "--set", 'run.driver="fast"', "--set", "run.shards=2",
]
SENTINEL = "keep-me.txt"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny sweep file and a folder where it ran (what ``fedhh report`` reads)."""
    folder = tmp_path_factory.mktemp("study")
    sweep = folder / "tiny.toml"
    sweep.write_text(TINY, encoding="utf-8")
    swept = folder / "swept"
    assert main(["sweep", str(sweep), "--output", str(swept), "--workers", "1", "--quiet"]) == 0
    return sweep, swept


Command = Callable[[str], int]


def commands(study: tuple[Path, Path]) -> dict[str, tuple[Command, dict[str, object]]]:
    """Each command that writes, run in this process on an output folder; and the marker of the folder
    it would replace or resume in (the name it writes first, its kind and state)."""
    sweep, swept = study
    return {
        "run": (lambda out: main(["run", *SMALL, "--quiet", "--output", out, "--overwrite"]),
                {"files": ["result.json"]}),
        "sweep": (lambda out: main(["sweep", str(sweep), "--output", out, "--workers", "1", "--quiet"]),
                  {"files": ["sweep.json"], "kind": "sweep", "state": "incremental"}),
        "report": (lambda out: main(["report", str(swept), "--output", out]),
                   {"files": ["summary.md"], "kind": "report"}),
        "population build": (lambda out: main(["population", "build", *SMALL, "--quiet", "--output", out,
                                               "--overwrite"]), {"files": ["population.json"]}),
        "deployment": (lambda out: deployment.main(["--supernodes", "2", *SMALL, "--output", out, "--overwrite"]),
                       {"files": ["result.json"]}),
        "sizing figures": (lambda out: sizing_figures.main(["--quick", "--output", out]),
                           {"files": ["sizing-figures.json"], "kind": "sizing figures"}),
    }


def tree(folder: Path) -> dict[str, str]:
    """Every entry below ``folder``, hidden ones too (path -> content; a link -> where it points;
    a folder -> "/")."""
    entries = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            entries[name] = f"-> {path.readlink()}"
        elif path.is_dir():
            entries[name] = "/"
        else:
            entries[name] = path.read_text(encoding="utf-8")
    return entries


def marker(files: list[str], kind: str | None = None, state: str = "complete") -> str:
    return json.dumps({"format": "fedhh-results-folder", "state": state, "files": files,
                       **({"kind": kind} if kind else {})})


TARGETS = ["current folder", "parent of the current folder", "home folder", "root folder", "foreign folder",
           "link inside", "link as the folder", "regular file", "/proc"]
MESSAGES = {
    "current folder": "is the current folder", "parent of the current folder": "is a parent of the current folder",
    "home folder": "is the home folder", "root folder": "is the root folder", "foreign folder": SENTINEL,
    "link inside": "did not write", "link as the folder": "is a symbolic link", "regular file": "is not a folder",
    "/proc": "cannot write in /proc",
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("command", ["run", "sweep", "report", "population build", "deployment", "sizing figures"])
def test_every_command_that_writes_refuses_every_folder_it_must_not_write(
    command: str, target: str, study: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run, marked = commands(study)[command]
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / SENTINEL).write_text("the user's data", encoding="utf-8")
    (workspace / "sub").mkdir()
    (tmp_path / "home").mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("not fedhh's", encoding="utf-8")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(workspace)
    output = {"current folder": ".", "parent of the current folder": "..", "home folder": str(tmp_path / "home"),
              "root folder": str(workspace), "foreign folder": str(workspace), "link inside": "fedhh-like",
              "link as the folder": "link", "regular file": SENTINEL, "/proc": "/proc/fedhh-x"}[target]
    if target == "parent of the current folder":
        monkeypatch.chdir(workspace / "sub")
    if target == "foreign folder":
        monkeypatch.chdir(tmp_path)
    if target == "root folder":  # the workspace plays the root folder: the rule itself is checked below
        protected = results._protected_role
        monkeypatch.setattr(results, "_protected_role", lambda path: "the root folder"
                            if path.resolve() == workspace.resolve() else protected(path))
        monkeypatch.chdir(tmp_path)
    if target == "link inside":  # a folder that looks like fedhh's, with a link where fedhh writes first
        (workspace / "fedhh-like").mkdir()
        (workspace / "fedhh-like" / MARKER).write_text(marker(**marked), encoding="utf-8")  # type: ignore[arg-type]
        (workspace / "fedhh-like" / marked["files"][0]).symlink_to(outside)  # type: ignore[index]
    if target == "link as the folder":
        (workspace / "elsewhere").mkdir()
        (workspace / "link").symlink_to(workspace / "elsewhere")
    before = tree(tmp_path)

    assert run(output) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --output:") and error.count("\n") == 1, error
    assert MESSAGES[target] in error, error
    assert tree(tmp_path) == before, "nothing created, changed or removed"


@pytest.mark.parametrize("field", ["--output", "output-dir"])
def test_the_root_folder_is_refused_by_the_rule_every_writer_follows(field: str) -> None:
    with pytest.raises(OutputError, match=f"^{field}: / is the root folder"):
        output_path("/", field)
    with pytest.raises(OutputError, match="is the root folder"):
        output_path("/..", field)
