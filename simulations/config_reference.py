"""The configuration reference, written out as Markdown.

``docs/configuration.md`` is this module's output (``python -m
simulations.config_reference > docs/configuration.md``), and a test
regenerates it, so the page cannot drift from the code: every key, its
type, default, allowed values and meaning come from the config schema
(:func:`fedhh.config.schema`), which protocol reads a ``[protocol]`` key
from the protocols' specs, and the list of shipped configs from the header
comments of the files in ``configs/``.  Only the protocols that ship with
fedhh are listed (a protocol registered by a plugin or a test brings its own
keys).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fedhh.config import BASE_SCHEMA, Key, Scalar, schema
from fedhh.protocols import PROTOCOLS
from fedhh.protocols.registry import protocol_names

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

_INTRODUCTION = """\
A run is described by a TOML file of four sections, `[population]` (who the users are and what they
hold), `[protocol]` (which heavy-hitter protocol, and how items are encoded), `[privacy]` (the target
and the ledger) and `[run]` (seed, driver, shards, evaluation). Every key is optional: a key left out
takes its default, and `fedhh run` with no file runs the defaults (the same as `configs/default.toml`).

```toml
[population]
users = 100_000

[protocol]
name = "pem"
oracle = "flh"

[privacy]
epsilon = 2.0
```

* **Overrides.** Every key can also be set on the command line as `--set section.key=value`
  (`fedhh run`, `fedhh population build`, `fedhh size --population`). The value is read as TOML, and
  as a plain string when it is not valid TOML, so `--set population.source=zipf` and
  `--set privacy.epsilon=2` both work; quote a string that would read as a number or a boolean:
  `--set 'population.path="2024"'`.
* **Flower.** The same dotted keys are Flower's run config: `[tool.flwr.app.config]` in
  `pyproject.toml` holds their defaults (as tables that Flower flattens to `population.users`, ...), but
  for `run.shards = "auto"`, so that `flwr run .` runs on whatever federation it is given, and
  `flwr run . --run-config "population.users=100000"` overrides them.
* **Sweeps.** A sweep file lists values of the same dotted keys ([Sweeps and reports](sweeps.md)).
* **Validation.** An unknown section or key, a value of the wrong type, or a value outside the allowed
  range stops the command before anything runs, with exit status 2 and one line naming the key and
  what it accepts. A config file must be a regular file of at most 1 MiB.
"""


def _literal(value: Scalar) -> str:
    """A value as it is written in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _allowed(key: Key) -> str:
    words = "".join(f', or `"{word}"`' for word in key.special)
    if key.choices is not None:
        return ", ".join(f"`{choice}`" for choice in key.choices) + words
    if key.constraint:
        return _cell(key.constraint) + words
    return ("any" if key.type is not bool else "`true`, `false`") + words


def _readers() -> dict[str, list[str]]:
    """For each protocol-specific key, the built-in protocols that declare it."""
    readers: dict[str, list[str]] = {}
    for name in protocol_names(builtin_only=True):
        for key in PROTOCOLS[name].keys:
            readers.setdefault(key, []).append(name)
    return readers


def _table(section: str, keys: dict[str, Key], readers: dict[str, list[str]] | None = None) -> list[str]:
    header = "| key | type | default | allowed | meaning |"
    rule = "|---|---|---|---|---|"
    if readers is not None:
        header = "| key | type | default | allowed | read by | meaning |"
        rule = "|---|---|---|---|---|---|"
    rows = [header, rule]
    for name, key in keys.items():
        cells = [f"`{section}.{name}`", key.type.__name__, f"`{_literal(key.default)}`", _allowed(key)]
        if readers is not None:
            cells.append(", ".join(f"`{reader}`" for reader in readers[name]) if name in readers else "every protocol")
        cells.append(_cell(key.help))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _builtin_schema() -> dict[str, dict[str, Key]]:
    """The schema of fedhh's own protocols (none that a plugin or a test registered)."""
    full = schema()
    builtin = set(protocol_names(builtin_only=True))
    readers = _readers()
    protocol = {
        name: key
        for name, key in full["protocol"].items()
        if name == "name" or name in BASE_SCHEMA["protocol"] or name in readers
    }
    name_key = protocol["name"]
    protocol["name"] = Key(
        name_key.type, name_key.default, name_key.help, tuple(c for c in name_key.choices or () if c in builtin)
    )
    return {**full, "protocol": protocol}


def _shipped_configs() -> list[str]:
    lines: list[str] = []
    for path in sorted(CONFIGS.glob("*.toml")):
        header: list[str] = []  # the first paragraph of the file's header comment
        for line in path.read_text(encoding="utf-8").splitlines():
            text = line.lstrip("#").strip()
            if not line.startswith("#") or not text:
                break
            header.append(text)
        description = " ".join(header)
        lines.append(f"* `configs/{path.name}`: {description}")
    return lines


_SECTIONS = {
    "population": "Who the users are and what they hold. [Populations](populations.md) describes the sources.",
    "protocol": (
        "Which protocol runs, and how items are encoded into symbols. The first keys are read by every "
        "protocol; the others by the protocols named in *read by* ([Protocols](protocols.md))."
    ),
    "privacy": (
        "The privacy target, and the ledger that composes repeated runs ([Privacy](privacy.md)): "
        "ε is central for TrieHH and per user (local) for the LDP protocols, whose δ is 0."
    ),
    "run": "How the run is carried out and evaluated. The transport never changes a result for a seed.",
}


def render() -> str:
    """The configuration reference as Markdown."""
    keys = _builtin_schema()
    parts = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m simulations.config_reference > docs/configuration.md`; "
        "tests/test_docs.py fails when this file and the code disagree. -->",
        "",
        _INTRODUCTION,
    ]
    readers = _readers()
    for section, section_keys in keys.items():
        parts += [f"## `[{section}]`", "", _SECTIONS[section], ""]
        parts += _table(section, section_keys, readers if section == "protocol" else None)
        parts.append("")
    parts += ["## Protocols", "", "The values of `protocol.name`:", "", "| name | protocol |", "|---|---|"]
    parts += [f"| `{name}` | {_cell(PROTOCOLS[name].summary)} |" for name in protocol_names(builtin_only=True)]
    parts += ["", "## Shipped configs", ""]
    parts += ["In `configs/` (the sweep files of the studies are in `configs/studies/`):", ""]
    parts += _shipped_configs()
    return "\n".join(parts).rstrip() + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
