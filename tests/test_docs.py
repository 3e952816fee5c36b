"""The documentation: generated pages current, the site builds strictly, the README's links and commands hold.

* ``docs/configuration.md`` is what the code generates today (the config
  schema and the protocols' specs), as ``docs/messages.md`` is
  (``tests/test_contract.py``);
* ``mkdocs build --strict`` passes: a broken link or anchor between pages, a
  link to a repository file that does not exist, a page missing from the
  navigation or an API reference to a name that does not exist fails it;
* the README's quick start is the two commands CI runs, and its links point
  to files that exist;
* every concrete ``fedhh`` command shown in the README and the docs parses,
  and the config of every ``fedhh run`` example (its file and ``--set`` keys)
  is valid.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from simulations.config_reference import render

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"


def test_the_configuration_page_is_what_the_code_generates() -> None:
    assert CONFIGURATION.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date: run `python -m simulations.config_reference > docs/configuration.md`"
    )


def test_the_configuration_page_lists_every_key_of_every_builtin_protocol() -> None:
    from fedhh.config import BASE_SCHEMA
    from fedhh.protocols import PROTOCOLS
    from fedhh.protocols.registry import protocol_module

    text = CONFIGURATION.read_text(encoding="utf-8")
    for section, keys in BASE_SCHEMA.items():
        for key in keys:
            assert f"| `{section}.{key}` |" in text, f"{section}.{key} is not documented"
    for name, spec in PROTOCOLS.items():
        if protocol_module(name):
            continue  # registered by a test or a plugin, not shipped
        assert f"| `{name}` |" in text, f"protocol {name!r} is not listed"
        for key in spec.keys:
            row = next(line for line in text.splitlines() if line.startswith(f"| `protocol.{key}` |"))
            assert f"`{name}`" in row, f"protocol.{key}: the page does not say that {name} reads it"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is part of the test extra")
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr[-4000:]}"
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()
    api = (tmp_path / "site" / "api" / "config" / "index.html").read_text(encoding="utf-8")
    assert "load_config" in api and ":func:" not in api


def test_the_readme_quick_start_is_what_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    quick_start = text[text.index("## Quick start") :]
    start = quick_start.index("```bash\n") + len("```bash\n")
    block = quick_start[start : quick_start.index("\n```", start)]
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == ['pip install -e ".[test]" && fedhh run', "pytest"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert 'pip install -e ".[test]"' in ci and "pytest" in ci


def test_the_readme_links_point_to_files_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "the README links to the documentation"
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"README links to {link!r}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), flags=re.MULTILINE)
            slugs = {re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-") for heading in headings}
            assert anchor in slugs, f"README links to {link!r}: no such heading in {path}"


def test_the_readme_is_a_front_door() -> None:
    """Detail belongs in docs/; the README stays short enough to read in a minute or two."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def example_commands() -> list[tuple[str, str]]:
    """The concrete ``fedhh`` command lines of the README's and the docs' code blocks: (file, line).

    Synopsis lines (``[--json]``, ``triehh|pem``, ``N``, ``CONFIG``, ...) and continued lines are left out.
    """
    placeholder = re.compile(r"\[|\||\.\.\.|\\$|(?<![\w.-])[A-Z][A-Z_]*(?:\.toml)?(?![\w:.-])")
    examples = []
    for path in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|console|sh)\n(.*?)```", text, flags=re.DOTALL):
            for line in block.splitlines():
                command = line.strip().removeprefix("$ ").split("  #")[0].strip()
                if command.startswith("fedhh ") and not placeholder.search(command):
                    examples.append((path.name, command))
    return examples


@pytest.mark.parametrize(("source", "command"), example_commands())
def test_example_commands_parse(source: str, command: str) -> None:
    from fedhh.config import load_config
    from simulations.cli import build_parser, named_command

    argv = shlex.split(command)[1:]
    try:
        args = build_parser(only=named_command(argv)).parse_args(argv)
    except SystemExit as exit:
        assert exit.code == 0, f"{source}: `{command}` does not parse"  # --version, --help
        return
    if argv[0] in ("run", "population"):
        config = args.config
        load_config(ROOT / config if config else None, args.set)  # raises, naming the key, if it is invalid


def test_the_examples_are_found() -> None:
    commands = [command for _, command in example_commands()]
    assert "fedhh run configs/pem-wordfreq.toml --set privacy.epsilon=2" in commands
    assert not [command for command in commands if "CONFIG" in command or "[" in command]
