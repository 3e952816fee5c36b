"""What a protocol that ships with fedhh needs, checked for every registered built-in one.

The spec (``fedhh/protocols/spec.py``) says what every protocol must and may
declare; a built-in protocol also needs what users, device implementers and
the project's own tests rely on.  :func:`gaps` lists, in one sentence each,
what a built-in protocol still lacks, so a new protocol's author reads its
to-do list in the failure (``docs/extending.md`` walks through adding one).
Optional parts stay optional: a planner, a sizing, a budget rule and
contract prose beyond the messages are not required; a planner and its
``fedhh plan`` command go together.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedhh.data.population import Shard
from fedhh.kernels.randomness import RandomnessSource
from fedhh.protocols import PROTOCOLS, ProtocolSpec, Request, Response, ServerProtocol
from fedhh.protocols.registry import protocol_names
from fedhh.schema import Key
from strategies.contract import field_comments

ROOT = Path(__file__).resolve().parents[1]
FLOWER_RUNNERS = ("run_flower_simulation", "flower_matches_fast")


def read(relative: str) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


def selects(text: str, name: str) -> bool:
    """Whether a test module's source selects protocol ``name`` (``protocol.name="NAME"``)."""
    return f'protocol.name="{name}"' in text or f'protocol.name=\\"{name}\\"' in text


def gaps(spec: ProtocolSpec) -> list[str]:
    """What built-in protocol ``spec`` lacks, one sentence each (nothing: it is complete)."""
    from tests.test_deployment import DEPLOYED

    name = spec.name
    found: list[str] = []
    if not spec.summary.strip() or "\n" in spec.summary:
        found.append("ProtocolSpec.summary: one line for help texts and error messages")
    if not spec.dropout_privacy.strip():
        found.append("ProtocolSpec.dropout_privacy: why its privacy report holds when asked users do not answer")

    # configuration: the Flower app's defaults and the generated reference
    with open(ROOT / "pyproject.toml", "rb") as file:
        app = tomllib.load(file)["tool"]["flwr"]["app"]["config"]["protocol"]
    for key, declared in spec.keys.items():
        if app.get(key) != declared.default:
            found.append(
                f"pyproject.toml [tool.flwr.app.config.protocol]: `{key} = {declared.default!r}` (its default; "
                f"it holds {app.get(key)!r})"
            )
    rows = read("docs/configuration.md").splitlines()
    listed = any(row.startswith(f"| `{name}` |") for row in rows) and all(
        f"`{name}`" in row for key in spec.keys for row in rows if row.startswith(f"| `protocol.{key}` |")
    )
    if not listed:
        found.append("docs/configuration.md: regenerate it (python -m simulations.config_reference)")
    if f"| `{name}` |" not in read("docs/protocols.md"):
        found.append("docs/protocols.md: a row in the table of protocols and a section saying what it does")

    # the message contract, for device implementers
    if not (spec.respond.__doc__ or "").strip():
        found.append("respond: a docstring (the message contract quotes it to device implementers)")
    for message_type in (spec.request_type, spec.response_type):
        described = {"round", *field_comments(message_type)}
        for field in dataclasses.fields(message_type):
            if field.name not in described:
                found.append(f"{message_type.__name__}.{field.name}: a comment where it is declared (the contract's)")
    if f"### `{name}`" not in read("docs/messages.md"):
        found.append("docs/messages.md: regenerate it (python -m strategies.contract > docs/messages.md)")

    # what its users send, and what secure aggregation can sum
    if spec.communication is None:
        found.append("ProtocolSpec.communication: the bits one user sends over a run (its package's wire.py)")
    if not selects(read("tests/test_communication.py"), name):
        found.append("tests/test_communication.py: a test of its bits on the wire against a value derived by hand")
    if spec.dense is None and not spec.no_dense_reason.strip():
        found.append("ProtocolSpec.dense: a fixed-length layout for secure aggregation, or no_dense_reason: why not")

    # tools: optional, but a planner comes with its command
    if (spec.planner is None) != (spec.plan_command is None):
        found.append("ProtocolSpec.planner and plan_command: both (fedhh plan NAME) or neither")

    # tests of its own, and on Flower
    modules = {path.name: path.read_text(encoding="utf-8") for path in sorted((ROOT / "tests").glob("test_*.py"))}
    own = [text for module, text in modules.items() if module != "test_communication.py" and selects(text, name)]
    if not own:
        found.append(
            f"tests/test_{name}.py: its tests, selecting it by protocol.name=\"{name}\" (estimates against "
            "theory; one shard, several and Flower agree)"
        )
    on_flower = name in DEPLOYED or any(any(runner in text for runner in FLOWER_RUNNERS) for text in own)
    if not on_flower:
        found.append(
            "a test that runs it on Flower: tests.helpers.flower_matches_fast or run_flower_simulation with "
            f'protocol.name="{name}", or a short config in DEPLOYED (tests/test_deployment.py)'
        )
    return found


def test_every_builtin_protocol_has_what_a_builtin_protocol_needs() -> None:
    builtin = protocol_names(builtin_only=True)
    assert len(builtin) >= 8
    missing = [f"{name}: {gap}" for name in builtin for gap in gaps(PROTOCOLS[name])]
    assert not missing, "built-in protocols lack:\n" + "\n".join(missing)


@dataclass(frozen=True)
class BareRequest(Request):
    pass


@dataclass(frozen=True)
class BareResponse(Response):
    counts: int = 0

    @classmethod
    def combine(cls, responses: Sequence[BareResponse]) -> BareResponse:
        return responses[0]


def bare_respond(request: BareRequest, shard: Shard, randomness: RandomnessSource) -> BareResponse:
    return BareResponse(round=request.round, sampled_users=shard.n_users, responding_users=0)


def never_built(*config: object) -> ServerProtocol:
    raise AssertionError("the checklist builds no server")


def test_the_checklist_names_what_a_new_protocol_still_lacks() -> None:
    """A spec with only what every protocol must declare, not registered: the checklist names each
    built-in requirement it misses, and none of the optional parts."""
    bare = ProtocolSpec[BareRequest, BareResponse, ServerProtocol](
        name="bare",
        summary="a protocol with only what the spec requires",
        build=never_built,
        respond=bare_respond,
        request_type=BareRequest,
        response_type=BareResponse,
        dropout_privacy="nothing to keep",
        keys={"bare_rows": Key(int, 3, "rows")},
    )
    expected = [
        "pyproject.toml [tool.flwr.app.config.protocol]: `bare_rows = 3`",
        "docs/configuration.md: regenerate it",
        "docs/protocols.md:",
        "respond: a docstring",
        "BareResponse.counts: a comment",
        "docs/messages.md: regenerate it",
        "ProtocolSpec.communication:",
        "tests/test_communication.py:",
        "ProtocolSpec.dense:",
        "tests/test_bare.py:",
        "a test that runs it on Flower",
    ]
    found = gaps(bare)
    for start in expected:
        assert sum(gap.startswith(start) for gap in found) == 1, f"{start!r} not named once in {found}"
    assert len(found) == len(expected), found  # nothing optional (planner, sizing, budget, contract prose)
