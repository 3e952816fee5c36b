"""The message contract between fedhh's ServerApp and any ClientApp, written out as Markdown.

``docs/messages.md`` is this module's output (``python -m strategies.contract
> docs/messages.md``), and a test regenerates it, so the document cannot
drift from the code: the envelope comes from :mod:`strategies.codec` and
:mod:`strategies.shards`, every field table from the message dataclasses of
the registered protocols (their wire declarations, ``fedhh.protocols.messages``,
and the comment on each field's line), what users do from each protocol's
``respond`` docstring, what each protocol adds for device implementers (its
spec's :class:`fedhh.protocols.ContractText`: definitions, sections such as
the item and value encodings, notes on oracle rounds), and every registered
oracle's device side (hashing,
randomizer, statistics) from the ``device_spec`` its class declares
(:mod:`fedhh.oracles.device_spec`).  The prose of those declarations is
checked by devices written from it: ``tests/test_oracle_device_spec.py`` and
``tests/test_protocol_device_sides.py``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from fedhh.oracles import device_spec
from fedhh.oracles.base import FLAT_CELLS_LIMIT
from fedhh.oracles.registry import ORACLE_BUILDERS, make_oracle
from fedhh.protocols import PROTOCOLS, ContractText
from fedhh.protocols.messages import message_layout
from fedhh.protocols.registry import protocol_module

from .codec import (
    ARRAYS_RECORD,
    CONTRACT_VERSION,
    NOTICE_RECORD,
    REASON_KEY,
    SCALARS_RECORD,
    TYPE_KEY,
    VERSION_KEY,
    version_text,
)
from .shards import ROUND_MESSAGE, SHARD_INFO_MESSAGE, ShardInfo, ShardQuery

_FIELD_COMMENT = re.compile(r"^\s+(?P<name>[A-Za-z_]\w*)\s*:[^#]*#\s*(?P<comment>.+?)\s*$")
_COMMENT_LINE = re.compile(r"^\s+#\s*(?P<comment>.+?)\s*$")
# Fields every request or reply has, declared on the core's base classes without a comment of their own.
_ENVELOPE_FIELDS = {"round": "the protocol round the message belongs to (1, 2, ...)"}


def field_comments(message_type: type) -> dict[str, str]:
    """Each field's comment in the source of the class that declares it (its own line, or the lines above)."""
    comments: dict[str, str] = {}
    for cls in reversed(message_type.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        try:
            lines = inspect.getsource(cls).splitlines()
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for line in lines:
            if match := _COMMENT_LINE.match(line):
                above.append(match["comment"])
                continue
            if match := _FIELD_COMMENT.match(line):
                comments[match["name"]] = match["comment"]
            elif (name := re.match(r"^\s+(?P<name>[A-Za-z_]\w*)\s*:", line)) and above:
                comments[name["name"]] = " ".join(above)
            above = []
    return comments


def field_table(message_type: type) -> str:
    """A Markdown table of a message's fields: record, name, type, shape, smallest value, meaning."""
    layout = message_layout(message_type)
    comments = {**_ENVELOPE_FIELDS, **field_comments(message_type)}
    rows = ["| record | field | type | shape | at least | meaning |", "|---|---|---|---|---|---|"]
    hints = typing.get_type_hints(message_type)
    for field in dataclasses.fields(message_type):
        name = field.name
        if name in layout.arrays:
            spec = layout.arrays[name]
            shape = "(" + ", ".join(str(dim) for dim in spec.shape) + ("," if len(spec.shape) == 1 else "") + ")"
            minimum = "" if spec.minimum is None else str(spec.minimum)
            rows.append(
                f"| `{ARRAYS_RECORD}` | `{name}` | {spec.dtype} | `{shape}` | {minimum} | "
                f"{_cell(comments.get(name, ''))} |"
            )
        else:
            kind = hints[name].__name__
            minimum = str(layout.minimums[name]) if name in layout.minimums else ""
            rows.append(
                f"| `{SCALARS_RECORD}` | `{name}` | {kind} | scalar | {minimum} | {_cell(comments.get(name, ''))} |"
            )
    if len(rows) == 2:
        return "No fields: the message is its envelope alone."
    return "\n".join(rows)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _message_section(title: str, message_type: type) -> str:
    doc = inspect.cleandoc(message_type.__doc__ or "").split("\n\n")[0].replace("\n", " ")
    tag = message_layout(message_type).tag
    return (
        f'#### {title}: `{message_type.__name__}`\n\n{doc} Its `"{TYPE_KEY}"` is `"{tag}"`.\n\n'
        f"{field_table(message_type)}\n"
    )


def _indented_quote(text: str) -> str:
    return "\n".join(f"> {line}".rstrip() for line in text.splitlines())


def _docstring(module: object) -> str:
    return inspect.cleandoc(getattr(module, "__doc__", "") or "")


def _report_fields(reports: object) -> list[str]:
    """Table rows ``| field | dtype | shape per user |`` of a report object, in the order of its columns."""
    rows = []
    for field in dataclasses.fields(reports):  # type: ignore[arg-type]
        value = getattr(reports, field.name)
        if dataclasses.is_dataclass(value):
            rows.append(f"| `{field.name}` | the inner oracle's report fields, in their order | |")
            continue
        array = np.asarray(value)
        shape = "`()`" if array.ndim == 1 else "`(w,)`, `w` as the report says"
        rows.append(f"| `{field.name}` | {array.dtype} | {shape} |")
    return rows


def _options(name: str) -> str:
    parameters = inspect.signature(ORACLE_BUILDERS[name]).parameters.values()
    options = [f"`{p.name}` = `{p.default!r}`" for p in parameters if p.name not in ("epsilon", "domain")]
    return ", ".join(options) or "none"


def _sketch_kind(oracle: typing.Any) -> str:
    inner = getattr(oracle, "inner", None)
    if inner is None:
        return ""
    signed = "signed (count sketch)" if oracle.signed else "unsigned"
    return f"; inner `{inner.name}`, {signed}, server estimator `{oracle.estimator}`"


def _declaring_class(cls: type) -> type:
    """The class whose body declares the device spec ``cls`` uses (shared by e.g. OLH and BLH)."""
    return next(klass for klass in cls.__mro__ if "device_spec" in vars(klass))


def contract_texts() -> list[ContractText]:
    """What fedhh's own protocols add to the contract, each text once (a family shares one), in
    registration order; a protocol registered from outside fedhh documents itself."""
    texts: list[ContractText] = []
    for name, spec in PROTOCOLS.items():
        if spec.contract is not None and not protocol_module(name) and all(spec.contract is not t for t in texts):
            texts.append(spec.contract)
    return texts


def _once(parts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(parts))


def definitions_section(texts: Sequence[ContractText]) -> list[str]:
    """The functions the protocols' and oracles' device sides are written with, and what the
    protocols add to them."""
    added = "".join(f" {sentence}" for sentence in _once(s for text in texts for s in text.definitions))
    return [
        "## Definitions",
        "",
        "The device sides below are written with these (`fedhh.oracles.device_spec`). Arithmetic is on "
        "unsigned 64-bit integers (`mod 2^64`) unless stated otherwise; `E = e^ε`." + added,
        "",
        device_spec.DEFINITIONS,
        "",
    ]


def oracle_sections(texts: Sequence[ContractText]) -> list[str]:
    """Every registered oracle's device side: its names and options, its report's fields (from a
    report it makes), and its declared :class:`fedhh.oracles.device_spec.DeviceSpec`; the
    protocols' notes on how they send oracle statistics join the introduction."""
    notes = "".join(f"; {note}" for note in _once(n for text in texts for n in text.oracle_notes))
    by_spec: dict[type, list[str]] = defaultdict(list)
    examples: dict[str, object] = {}
    for name in sorted(ORACLE_BUILDERS):
        oracle = make_oracle(name, epsilon=2.0, domain=64)
        by_spec[_declaring_class(type(oracle))].append(name)
        examples[name] = oracle
    parts = [
        "## LDP oracles: what a device computes",
        "",
        "A node answers an oracle round with the sum over its reporting users of the oracle's *flat "
        f"statistics* when the oracle has a flat form of at most `FLAT_CELLS_LIMIT` = {FLAT_CELLS_LIMIT} "
        "cells (`counts` = the cells, `reporters` = the report counts), else with the *support counts* of "
        f"the request's candidates (`counts`, flat in row-major order, and `reporters`){notes}. Both are sums over "
        "reports, so a node adds up its users'; the server adds up the nodes'. Definitions are above; "
        "`v` is the user's value (an "
        "integer key in `[0, d)`), `n` the number of reports, `C` the number of candidates. A report's "
        "fields, in the order below (a field of shape `(w,)` gives `w` columns), are also the columns that "
        "mode `collect` sends, each as uint64.",
        "",
    ]
    for cls, names in by_spec.items():
        spec: device_spec.DeviceSpec = cls.device_spec  # type: ignore[attr-defined]
        example = examples[names[0]]
        summary = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        parts += [f"### {', '.join(f'`{name}`' for name in names)} (`{cls.__name__}`)", "", summary, ""]
        parts += [f"* `{name}`: options {_options(name)}{_sketch_kind(examples[name])}" for name in names]
        report = example.randomize(np.arange(3, dtype=np.uint64), np.random.default_rng(0))  # type: ignore[attr-defined]
        parts += [
            "",
            f"**Parameters.** {spec.parameters}",
            "",
            f"**Report** (per user). {spec.randomizer}",
            "",
            "| field | dtype | shape per user |",
            "|---|---|---|",
            *_report_fields(report),
            "",
            f"**Flat statistics.** {spec.statistics}",
            "",
            f"**Support counts.** {spec.support}",
            "",
        ]
    return parts


def render() -> str:
    """The whole contract as Markdown."""
    version = version_text()
    texts = contract_texts()
    parts = [
        f"# The fedhh message contract, version {version}",
        "",
        "<!-- Generated by `python -m strategies.contract > docs/messages.md`; "
        "tests/test_contract.py fails when this file and the code disagree. -->",
        "",
        "What a ClientApp must receive and send to take part in a fedhh run, "
        "whatever it is written with: fedhh's own ClientApp (`strategies.client_app`), "
        "or a device's own Flower app that imports neither fedhh nor its numpy code. "
        "Every table below is generated from the message classes the server decodes with.",
        "",
        "## Your ClientApp beside fedhh's ServerApp",
        "",
        "A ClientApp of your own runs with fedhh's ServerApp as one Flower App: a project whose "
        '`pyproject.toml` names `serverapp = "simulations.flower_app:app"` (fedhh, installed where the '
        'SuperLink runs) and `clientapp = "your_module:app"` (your code, in the app bundle: the nodes '
        "need Flower and whatever your code imports) under `[tool.flwr.app.components]`. Its "
        "`[tool.flwr.app.config]` lists the fedhh config keys of the run (`docs/configuration.md`), as "
        "tables (`[tool.flwr.app.config.protocol]`) or dotted keys: Flower refuses a `--run-config` "
        "override of a key the bundle does not declare, and a ClientApp sees the declared keys only, "
        "so list every key your client reads (the item codec's `protocol.alphabet`, `protocol.unit_size`, "
        "`protocol.max_length`, `protocol.overlong`, `protocol.unknown_chars`; `population.path` if your "
        "nodes read the population's file). The ServerApp takes fedhh's default for every key not "
        "listed. A file the run reads travels in the app bundle only as a `.py`, `.toml`, `.md`, `.json`, "
        "`.jsonl`, `.yaml` or `.yml` file (Flower bundles no other), installed in a folder of Flower's "
        "where the ServerApp and each node run: name fedhh's ServerApp from a module of the bundle, "
        "`app = bundled_app(Path(__file__).resolve().parent)` (`simulations.flower_app`), and a relative "
        "`population.path` is a file of the bundle, as your ClientApp finds it beside its own "
        "`__file__`. `fedhh new-client DIR --protocol triehh` (or `pem`) writes such a project, with a "
        "ClientApp written from this document (Flower and numpy only), its tests, a README and a demo "
        "population in the bundle (`population.jsonl`): it runs as it is with `flwr run DIR`, from "
        "wherever the folder is moved, and is then yours to change (`docs/deployment.md`).",
        "",
        "## Envelope",
        "",
        "Messages are Flower messages (`flwr.app.Message`). Their `message_type`:",
        "",
        f"* `{SHARD_INFO_MESSAGE}`: once, before round 1. The server asks every node which users it holds "
        f"(request `{ShardQuery.__name__}`, reply `{ShardInfo.__name__}`).",
        f"* `{ROUND_MESSAGE}`: once per round and node. The request and reply classes are the protocol's "
        "(below); `group_id` is the round number and the message's TTL the round timeout, after which a "
        "reply is not waited for.",
        "* `train` (only with `run.secure_aggregation = true`): Flower's SecAgg+ stages around the same "
        "round request, whose reply is the protocol's dense vector, masked.",
        "",
        "The content (`RecordDict`) of every request and reply holds exactly two records, plus one optional:",
        "",
        f'* `"{ARRAYS_RECORD}"`: an `ArrayRecord`, one `Array` (numpy serialisation) per array field;',
        f'* `"{SCALARS_RECORD}"`: a `ConfigRecord`, one entry per scalar field (Python `int`, `float`, '
        f'`str` or `bool`, exactly as typed), plus `"{TYPE_KEY}"`: the message class name and '
        f'`"{VERSION_KEY}"`: the contract version its sender speaks, `"MAJOR.MINOR"`;',
        f'* `"{NOTICE_RECORD}"` (requests only, optional): a `ConfigRecord` whose `"{REASON_KEY}"` tells the '
        "node why the server refused its previous reply.",
        "",
        "Shapes name their axes: a number is a fixed length, a scalar field's name (with an offset, "
        "`round-1`) is that field's value, and any other name is a free length that must be the same in "
        'every array of the message naming it. "At least" is the smallest allowed element or value '
        "(ids, symbols and counts are never negative).",
        "",
        "## Versions and compatibility",
        "",
        f"This is version **{version}**. Every request carries the version the server speaks, every reply "
        "the version its client speaks. The rule:",
        "",
        "* a **minor** version may only add fields; a receiver of an older minor ignores the fields it does "
        "not know, so a newer minor's additions are optional by construction;",
        "* anything else (a field removed, renamed, retyped, reshaped, or given a new meaning) is a new "
        "**major** version.",
        "",
        f"So the server decodes a reply of major version {CONTRACT_VERSION[0]} strictly (every declared field, "
        "no unknown field) unless its minor is newer than the server's, in which case unknown fields are "
        "ignored; a reply of another major version, or with no version, is refused. A refused reply "
        "(another version, a malformed or impossible one) is dropped from its round, the run goes on, "
        f"the round's line of the trace names the shard under `rejected_shards` and the reason under "
        f'`refusals`, and the node\'s next request carries the reason in its `"{NOTICE_RECORD}"` record. '
        "A client that cannot decode a request (another major version) answers with a Flower error reply "
        "whose reason says so; the server counts the node failed for that round and records the reason.",
        "",
        "## Before round 1",
        "",
        _message_section("Request", ShardQuery),
        _message_section("Reply", ShardInfo),
        "Users have global ids `0..n-1`. `shard_bounds(n, i, k)`, the users of shard `i` of `k`, are "
        "`[floor(i n / k), floor((i + 1) n / k))` (`fedhh.data.population.shard_bounds`): shard 0 of 3 "
        "over 10 users holds users 0..2, shard 1 users 3..5, shard 2 users 6..9. A node answers with "
        "`shard_index` = `i`, `num_shards` = `k`, `first_user` and `users` from `shard_bounds(n, i, k)`, "
        "and `population` = `n`; under Flower `i` and `k` are its node config's `partition-id` and "
        '`num-partitions`, and `k` is `run.shards` (a device, `run.federation = "devices"`, is shard '
        "`u` of `n` for its user id `u`). The server admits the nodes only if they split `0..n-1` exactly "
        "so, each user held once.",
        "",
        '`n` is the server\'s: with `population.source = "file"` (or `"dataset"`) the number of users '
        "of the file (`population.path`; a `.txt` file has one user a line), whatever "
        "`population.users` says (it is not read); with a generated source (`wordfreq`, `zipf`, "
        '`exponential`) and with `run.federation = "devices"`, `population.users`. A node that holds '
        "its own users' data (not the population's file) must be told `n` (in its node config) and hold "
        "exactly the users of its shard, in the order of their ids, one item each as the population's "
        "file lists them.",
        "",
        *definitions_section(texts),
        "## Protocols",
        "",
    ]
    for name, spec in PROTOCOLS.items():
        if protocol_module(name):
            continue  # a protocol registered from outside fedhh documents itself
        parts += [
            f"### `{name}`",
            "",
            spec.summary,
            "",
            _message_section("Request", spec.request_type),
            _message_section("Reply", spec.response_type),
            "How users answer (`respond`, vectorised over a shard):",
            "",
            _indented_quote(inspect.cleandoc(spec.respond.__doc__ or "")),
            "",
        ]
    for text in texts:
        for title, body in text.sections() if text.sections is not None else []:
            parts += [f"## {title}", "", body, ""]
    parts += oracle_sections(texts)
    return "\n".join(parts).rstrip() + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
