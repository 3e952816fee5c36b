"""The protocol seam: a protocol defined and registered in this file alone runs through every driver.

``counting`` is the simplest protocol there is: in one round every user
sends the item it holds, the server adds the counts and publishes the items
held by at least ``MIN_COUNT`` users.  It carries no privacy guarantee and
says so.  Nothing outside this file knows it: its spec (name, builder,
vectorised ``respond``, messages with their wire declarations, reply check,
dropout note) is all the fast driver, the generic Flower strategy and
``fedhh run`` get; Flower's nodes, in other processes, learn it from the
run config's ``protocol-module``, which names this module.
"""

from __future__ import annotations

import argparse
import json
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedhh.config import BASE_SCHEMA, ConfigError, load_config, schema
from fedhh.data.items import ItemCodec
from fedhh.data.population import Shard
from fedhh.data.prefixes import sum_histograms
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import RandomnessSource
from fedhh.planning.commands import Option, PlanCommand
from fedhh.planning.sizing import SizeAnswer, Sizing
from fedhh.privacy.report import NO_GUARANTEE, PrivacyReport
from fedhh.protocols import (
    PROTOCOLS,
    Discovery,
    HeldUsers,
    InvalidReply,
    ProtocolResult,
    ProtocolSpec,
    Request,
    Response,
    RoundRecord,
    ServerProtocol,
    protocol_module,
    register_protocol,
)
from fedhh.protocols.common.item_choice import choose_items
from fedhh.protocols.messages import array_field
from fedhh.protocols.registry import protocol_keys
from simulations.fast import run_fast

ROOT = Path(__file__).resolve().parents[1]
MIN_COUNT = 50
CHOICE_PURPOSE = "counting.choice"
SMALL = ["population.users=20000", "population.vocabulary=2000", "run.seed=3", "run.shards=2"]


@dataclass(frozen=True)
class CountRequest(Request):
    """Send your item."""


@dataclass(frozen=True)
class CountResponse(Response):
    """How many users of a batch hold each item (a sparse, additive histogram)."""

    items: np.ndarray = array_field("int64", ("K", "L"), minimum=-1)  # item rows (PAD = -1 after the end)
    counts: np.ndarray = array_field("int64", ("K",), minimum=1)

    @classmethod
    def combine(cls, responses: Sequence[CountResponse]) -> CountResponse:
        items, counts = sum_histograms([(r.items, r.counts) for r in responses], responses[0].items.shape[1])
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            items=items,
            counts=counts,
        )


def respond(request: CountRequest, shard: Shard, randomness: RandomnessSource) -> CountResponse:
    """Every user of the shard sends (one of) its item(s): a bincount over the vocabulary."""
    users, chosen = choose_items(shard, np.arange(shard.n_users), randomness, CHOICE_PURPOSE, request.round)
    tally = np.bincount(chosen, minlength=shard.vocabulary.size)
    held = np.flatnonzero(tally)
    return CountResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=int(users.size),
        items=shard.vocabulary.rows[held].astype(np.int64),
        counts=tally[held].astype(np.int64),
    )


class CountingServer(ServerProtocol):
    """One round: add the counts, publish the items held by at least ``MIN_COUNT`` users."""

    def __init__(self, codec: ItemCodec, n_users: int) -> None:
        self.codec = codec
        self.n_users = n_users
        self.total: CountResponse | None = None
        self._trace: list[RoundRecord] = []

    def next_request(self) -> CountRequest | None:
        return CountRequest(round=1) if self.total is None else None

    def absorb(self, response: Response) -> None:
        assert isinstance(response, CountResponse)
        self.total = response
        self._trace.append(RoundRecord(1, {"users": response.responding_users, "items": int(response.counts.size)}))

    def result(self) -> ProtocolResult:
        assert self.total is not None
        kept = self.total.counts >= MIN_COUNT
        rows, counts = self.total.items[kept], self.total.counts[kept]
        found = [
            Discovery(item, tuple(row), support=int(count))
            for item, row, count in zip(self.codec.decode_rows(rows), rows.tolist(), counts.tolist())
        ]
        return ProtocolResult("counting", found, [], self.trace, self.privacy_report(), {"min_count": MIN_COUNT},
                              "one round")

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    @property
    def max_rounds(self) -> int:
        return 1

    def privacy_report(self) -> PrivacyReport:
        return PrivacyReport(f"{NO_GUARANTEE}: exact counts", math.inf, 1.0, "exact counts", "none", "none")


def check_counts(request: CountRequest, response: CountResponse, node: HeldUsers, server: ServerProtocol) -> None:
    """A node cannot count more users than it holds."""
    if response.sampled_users != node.users or int(response.counts.sum()) != response.responding_users:
        raise InvalidReply(f"CountResponse.counts: they add up to {int(response.counts.sum())} of {node.users} users")


def plan_counting(n_users: int) -> dict[str, int]:
    """``fedhh plan counting``'s answer: the most items a run can publish."""
    return {"n_users": n_users, "most_items": n_users // MIN_COUNT}


# ``fedhh plan counting --users N``: prints :func:`plan_counting`'s answer as JSON.
PLAN_COMMAND = PlanCommand("the most items a counting run can publish", (Option("--users", type=int, required=True),),
                           lambda args: plan_counting(args.users))


def size_counting(args: argparse.Namespace, on_step: object) -> SizeAnswer:
    """Exact counts find an item of share f exactly when ``round(f n) >= MIN_COUNT``."""
    users = math.ceil((MIN_COUNT - 0.5) / args.frequency)
    while round(args.frequency * (users - 1)) >= MIN_COUNT:
        users -= 1
    return SizeAnswer("counting", users, args.frequency, args.discovery, 1.0, users - 1, 0.0,
                      "smallest n holding MIN_COUNT holders", {"min_count": MIN_COUNT})


SIZING = Sizing("Counting", 1, (), size_counting, lambda args, answer: {})


SPEC = register_protocol(
    ProtocolSpec(
        name="counting",
        summary="exact item counts, for tests of the protocol seam (no privacy)",
        build=lambda privacy, protocol, n_users, codec, seed: CountingServer(codec, n_users),
        respond=respond,
        request_type=CountRequest,
        response_type=CountResponse,
        dropout_privacy="none to keep: the protocol has no guarantee",
        check_reply=check_counts,
        planner=plan_counting,
        plan_command=PLAN_COMMAND,
        sizing=SIZING,
    )
)


def truth_above(experiment: Experiment) -> dict[str, int]:
    """The items the protocol must publish: exact holder counts of the whole population."""
    truth = experiment.truth()
    return {item: int(count) for item, count in zip(truth.items, truth.holders.tolist()) if count >= MIN_COUNT}


def test_the_spec_alone_makes_a_protocol_selectable() -> None:
    assert PROTOCOLS["counting"] is SPEC and protocol_module("counting") == __name__
    config = load_config(None, [*SMALL, 'protocol.name="counting"'])
    assert schema()["protocol"]["name"].choices[-1] == "counting"
    assert Experiment(config).spec is SPEC
    with pytest.raises(ValueError, match="already registered"):
        register_protocol(SPEC)
    with pytest.raises(ConfigError, match=r"protocol.name: got 'nope'; allowed values: \[.*'counting'\]"):
        load_config(None, ['protocol.name="nope"'])


def test_the_spec_names_the_planner_and_the_budget_split() -> None:
    """The planner is found through the spec alone; an LDP protocol's budget split is its spec's, and
    a protocol without one (no LDP reports) has none to split."""
    from fedhh.protocols import plan, split_budget

    assert plan("counting", n_users=1000) == {"n_users": 1000, "most_items": 1000 // MIN_COUNT}
    assert SPEC.budget is None and PROTOCOLS["treehist"].budget is not None
    with pytest.raises(ValueError, match=r"no LDP budget split for 'counting'; allowed: \[.*'pem'.*'treehist'.*\]"):
        split_budget("counting", 1.0)
    for name, spec in PROTOCOLS.items():  # a planner and a sizing are optional; a spec holds what it names
        assert spec.planner is None or callable(spec.planner), name
        assert spec.sizing is None or spec.sizing.title, name
    assert all(PROTOCOLS[name].sizing for name in ("triehh", "pem", "treehist"))


def test_fedhh_plan_finds_the_protocol_s_plan_command_through_its_spec(capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.cli import main

    assert main(["plan", "counting", "--users", "1000"]) == 0
    assert json.loads(capsys.readouterr().out) == {"n_users": 1000, "most_items": 1000 // MIN_COUNT}
    for name, spec in PROTOCOLS.items():  # every built-in protocol with a planner has its command
        assert (spec.planner is None) == (spec.plan_command is None), name


def test_fedhh_size_finds_the_protocol_s_sizing_through_its_spec(capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.cli import main

    assert main(["size", "counting", "--frequency", "0.01", "--discovery", "0.9", "--epsilon", "1", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["protocol"], answer["users"], answer["below_users"]) == ("counting", 4950, 4949)
    assert round(0.01 * answer["users"]) == MIN_COUNT > round(0.01 * answer["below_users"])


def test_registered_protocol_runs_through_the_fast_driver_and_fedhh_run_on_flower(tmp_path: Path) -> None:
    from simulations.cli import main

    experiment = Experiment(load_config(None, [*SMALL, 'protocol.name="counting"', 'run.driver="fast"']))
    fast = run_fast(experiment, 2, backend="inprocess").result
    expected = truth_above(experiment)  # single-item users: every user sends its one item
    assert {d.item: d.support for d in fast.discoveries} == expected and len(expected) >= 10

    output = tmp_path / "counting"
    settings = [*SMALL, 'protocol.name="counting"', 'run.driver="flower"']
    assert main(["run", *[f"--set={s}" for s in settings], "--quiet", "--output", str(output)]) == 0
    document = json.loads((output / "result.json").read_text(encoding="utf-8"))
    assert document["transport"] == "flower" and document["protocol"] == "counting"
    assert {hit["item"]: hit["support"] for hit in document["heavy_hitters"]} == expected
    assert document["participation"]["privacy"] == SPEC.dropout_privacy
    assert document["rounds"][0]["nodes_answered"] == 2  # both nodes' replies passed the spec's check


def test_config_schema_pyproject_defaults_and_specs_agree() -> None:
    """The [protocol] keys are the common ones plus each registered spec's own, and the Flower
    app's defaults in pyproject.toml are the schema of fedhh's own protocols, key for key."""
    keys = schema()["protocol"]
    assert list(keys) == ["name", *BASE_SCHEMA["protocol"], *protocol_keys()]
    for spec in PROTOCOLS.values():
        assert all(keys[key] == declared for key, declared in spec.keys.items())
    assert set(keys["name"].choices) == set(PROTOCOLS)
    with open(ROOT / "pyproject.toml", "rb") as file:
        app_protocol = tomllib.load(file)["tool"]["flwr"]["app"]["config"]["protocol"]
    builtin = ["name", *BASE_SCHEMA["protocol"], *protocol_keys(builtin_only=True)]
    assert app_protocol == {key: keys[key].default for key in builtin}
