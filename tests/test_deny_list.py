"""Deny lists (``run.deny_list``): denied items are never contributed, chained runs compose in the ledger,
and a bad list is refused before anything is written."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedhh.config import FedhhConfig, load_config
from fedhh.data.deny_list import DenyList, DenyListError, read_deny_list
from fedhh.driving import drive
from fedhh.experiment import Experiment
from fedhh.privacy.ledger import Ledger
from fedhh.protocols import Request, Response
from fedhh.protocols.exact.messages import ItemsRequest, ItemWeights
from fedhh.protocols.triehh.messages import TrieHHResponse
from simulations.cli import main
from simulations.fast import run_fast
from strategies.client_app import node_data
from strategies.devices import DATA_FILE, USER_ID

from .helpers import flower_matches_fast, one_and_seven_shards, run_view
from .test_cli import SMALL

UNIT = 1 << 32  # a whole share of a user's items (fedhh.data.population.SHARE_BITS)
A = 1  # the symbol of "a" in the lowercase alphabet: "apple" is the only item starting with it


def users_csv(tmp_path: Path) -> Path:
    """100 users: 0-49 hold apple, 50-79 bee, 80-89 apple twice and cat once, 90-99 cat."""
    rows = ["user,item"]
    rows += [f"{u},apple" for u in range(50)]
    rows += [f"{u},bee" for u in range(50, 80)]
    rows += [f"{u},{item}" for u in range(80, 90) for item in ("apple", "apple", "cat")]
    rows += [f"{u},cat" for u in range(90, 100)]
    path = tmp_path / "users.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def deny_file(tmp_path: Path, text: str, name: str = "deny.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def file_overrides(tmp_path: Path, protocol: str, deny: str = "", *extra: str) -> list[str]:
    return [
        'population.source="file"', f'population.path="{users_csv(tmp_path)}"', f'protocol.name="{protocol}"',
        "protocol.max_length=6", 'run.driver="fast"', "privacy.epsilon=8", "privacy.delta=1e-3",
        f'run.deny_list="{deny}"', *extra,
    ]


def file_config(tmp_path: Path, protocol: str, deny: str = "", *extra: str) -> FedhhConfig:
    return load_config(None, file_overrides(tmp_path, protocol, deny, *extra))


def decoded(rows: np.ndarray) -> list[str]:
    return ["".join(chr(ord("a") + s - 1) for s in row if s > 0) for row in rows.tolist()]


def test_a_node_s_users_never_send_a_denied_item(tmp_path: Path) -> None:
    """The exact baseline's device side sends every item a user holds, in the clear: with apple denied,
    two Flower nodes' replies hold no apple, the users of 80-89 send cat as their whole share, and
    the users who held only apple send nothing."""
    deny = deny_file(tmp_path, "apple\n")
    run_config = file_config(tmp_path, "exact", str(deny), "protocol.top_k=3").to_flat()
    replies = [node_data(run_config, {"partition-id": i, "num-partitions": 2}).answer(ItemsRequest(round=1))
               for i in range(2)]
    total = ItemWeights.combine(replies)
    weights = dict(zip(decoded(total.items), total.weights.tolist(), strict=True))
    assert weights == {"bee": 30 * UNIT, "cat": 20 * UNIT}
    assert total.responding_users == 50 and total.sampled_users == 100
    # the same nodes without the list send apple: the check above can fail
    plain = file_config(tmp_path, "exact", "", "protocol.top_k=3").to_flat()
    reply = node_data(plain, {"partition-id": 0, "num-partitions": 1}).answer(ItemsRequest(round=1))
    assert "apple" in decoded(reply.items)


def test_a_device_leaves_out_denied_items(tmp_path: Path) -> None:
    """A device federation's node (one real user's data file) reads the list from the run config too."""
    deny = deny_file(tmp_path, "apple\n")
    run_config = {**file_config(tmp_path, "exact", str(deny)).to_flat(), "run.federation": "devices"}
    both = deny_file(tmp_path, "apple\napple\ncat\n", "both.txt")
    only = deny_file(tmp_path, "apple\n", "only.txt")
    reply = node_data(run_config, {USER_ID: 3, DATA_FILE: str(both)}).answer(ItemsRequest(round=1))
    assert decoded(reply.items) == ["cat"] and reply.weights.tolist() == [UNIT]
    reply = node_data(run_config, {USER_ID: 4, DATA_FILE: str(only)}).answer(ItemsRequest(round=1))
    assert reply.items.shape[0] == 0 and reply.responding_users == 0


def test_triehh_users_never_vote_for_a_denied_item(tmp_path: Path) -> None:
    """Every TrieHH reply of a whole run: no vote for a prefix of apple (the only item starting with
    "a"), while without the list the same run's first round does vote for "a"."""
    def first_symbols(deny: str) -> set[int]:
        experiment = Experiment(file_config(tmp_path, "triehh", deny, "privacy.epsilon=20", "privacy.delta=0.009"))
        shard = experiment.build_shard(0, 1)
        seen: set[int] = set()

        def answer(request: Request) -> list[Response]:
            reply = experiment.respond(request, shard, experiment.randomness)
            assert isinstance(reply, TrieHHResponse)
            seen.update(reply.prefixes[:, 0].tolist())
            return [reply]

        drive(experiment.make_server(), answer)
        return seen

    assert A in first_symbols("")
    assert A not in first_symbols(str(deny_file(tmp_path, "apple\n")))


def test_a_run_publishes_the_next_items_and_names_its_list(tmp_path: Path) -> None:
    deny = deny_file(tmp_path, "apple\nzebra\n")
    experiment = Experiment(file_config(tmp_path, "exact", str(deny), "protocol.top_k=2", "run.top_k=2"))
    result = run_fast(experiment, 2, "inprocess")
    document = experiment.finish(result.result, {}, "fast", counts=result.counts)
    assert [hit["item"] for hit in document["heavy_hitters"]] == ["bee", "cat"]
    record = document["deny_list"]
    assert record["items"] == 2 and record["in_vocabulary"] == 1 and record["denied"] == ["apple", "zebra"]
    assert record["kind"] == "file" and len(record["sha256"]) == 64
    # the evaluation is against the population without the denied items: the next heavy hitters
    assert [row["item"] for row in document["evaluation"]["truth_top"]][:2] == ["bee", "cat"]
    assert document["evaluation"]["metrics"]["f1"] == 1.0
    plain = Experiment(file_config(tmp_path, "exact", "", "protocol.top_k=2"))
    assert [d.item for d in run_fast(plain, 1, "inprocess").result.discoveries] == ["apple", "bee"]


WORDS = ['population.users=200000', 'run.driver="fast"']


def test_a_default_run_never_finds_a_denied_word_and_any_shard_count_agrees(tmp_path: Path) -> None:
    """TrieHH on 200,000 wordfreq users: the most frequent words are found without the list; with them
    denied, none is, and 1 and 7 shards give the same run (the list is applied as users are built)."""
    head = ["the", "to", "and", "of", "a"]
    found = {item for item, _ in one_and_seven_shards(WORDS)}
    assert set(head) <= found
    deny = deny_file(tmp_path, "\n".join(head) + "\n")
    denied_run = {item for item, _ in one_and_seven_shards([*WORDS, f'run.deny_list="{deny}"'])}
    assert not set(head) & denied_run
    assert denied_run & (found - set(head))  # the rest of the head is still found


def test_flower_s_nodes_leave_out_the_denied_items_as_the_fast_driver_does(tmp_path: Path) -> None:
    """A Flower simulation of 2 SuperNodes, whose ClientApps build their shards from the run config:
    the same discoveries and counts as one fast shard, none of them denied."""
    deny = deny_file(tmp_path, "apple\n")
    settings = file_overrides(tmp_path, "exact", str(deny), "protocol.top_k=2", "run.shards=2")
    found, _ = flower_matches_fast([*settings, 'run.driver="flower"'], tmp_path / "out")
    assert found == {("bee", 30.0), ("cat", 20.0)}


def test_a_list_naming_no_held_item_changes_nothing(tmp_path: Path) -> None:
    deny = deny_file(tmp_path, "zzzzzzz\nqqqq\n")
    plain = run_fast(Experiment(load_config(None, WORDS)), 1, "inprocess").result
    listed = run_fast(Experiment(load_config(None, [*WORDS, f'run.deny_list="{deny}"'])), 1, "inprocess").result
    assert run_view(plain) == run_view(listed)


def test_chained_runs_deny_what_came_before_and_compose_in_the_ledger(tmp_path: Path) -> None:
    """Three days, each denying the previous day's results folder: day 3 denies what days 1 and 2
    found, each ledger entry names its list's source, and the chain's (ε, δ) is the composition of
    its runs' that dp-accounting computes here independently."""
    ledger = tmp_path / "ledger.json"
    charged = ["--set", f'privacy.ledger="{ledger}"']
    days = [tmp_path / f"day{i}" for i in (1, 2, 3)]
    assert main(["run", *SMALL, *charged, "--output", str(days[0])]) == 0
    for previous, day in itertools.pairwise(days):
        assert main(["run", *SMALL, *charged, "--set", f'run.deny_list="{previous}"', "--output", str(day)]) == 0
    results = [json.loads((day / "result.json").read_text(encoding="utf-8")) for day in days]
    found = [{hit["item"] for hit in result["heavy_hitters"]} for result in results]
    assert found[0] and not found[0] & found[1] and not (found[0] | found[1]) & found[2]
    assert set(results[2]["deny_list"]["denied"]) == found[0] | found[1]
    entries = Ledger(ledger).entries
    assert entries[0].deny_list is None
    for entry, result, previous in zip(entries[1:], results[1:], results[:-1], strict=True):
        assert entry.run_id == result["run_id"] and entry.previous_run_id == previous["run_id"]
        assert entry.deny_list is not None and entry.deny_list["kind"] == "result"
        assert entry.deny_list["sha256"] == result["deny_list"]["sha256"]
    chain = Ledger(ledger).chain(results[2]["run_id"])
    assert [entry.run_id for entry in chain] == [result["run_id"] for result in results]
    assert [entry.run_id for entry in Ledger(ledger).chain(results[1]["run_id"])] == [r["run_id"] for r in results[:2]]

    from dp_accounting.pld import common, privacy_loss_distribution

    guarantees = [(r["privacy"]["epsilon"], r["privacy"]["delta"]) for r in results]
    composed = None
    for epsilon, delta in guarantees:
        pld = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(epsilon, delta))
        composed = pld if composed is None else composed.compose(pld)
    assert composed is not None
    total_delta = 2 * math.fsum(delta for _, delta in guarantees)
    independent = composed.get_epsilon_for_delta(total_delta)
    summary = Ledger(ledger).chain_summary(results[2]["run_id"])
    assert summary.runs == 3 and summary.delta == pytest.approx(total_delta)
    assert summary.pld_epsilon == pytest.approx(independent, abs=3 * 1e-4)  # 3 runs x the PLD grid step
    assert summary.epsilon <= math.fsum(epsilon for epsilon, _ in guarantees) + 1e-9
    assert results[2]["privacy"]["composition"]["pld_epsilon"] == pytest.approx(summary.pld_epsilon)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "does not exist"),
        ("folder without a result", "is a folder without a result.json"),
        ("not utf-8", "is not UTF-8 text"),
        ("empty line", "line 2 is empty"),
        ("over-long line", "line 1 has 12 characters, more than any item can (protocol.max_length = 6)"),
        ("no item", "lists no item"),
        ("denies everything", "denies every one of the population's"),
        ("not a result", "is not a fedhh result"),
    ],
)
def test_a_bad_deny_list_is_refused_before_anything_is_written(
    tmp_path: Path, case: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    users = deny_file(tmp_path, "moon\nsun\nmoon\n" * 400, "users.txt")
    folder = tmp_path / "folder"
    folder.mkdir()
    if case == "not a result":
        (folder / "result.json").write_text('{"heavy_hitters": [1]}', encoding="utf-8")
    texts = {"empty line": "moon\n\nsun\n", "over-long line": "xtraordinary\n", "no item": "",
             "denies everything": "sun\nmoon\nstar\n"}
    deny = {"missing": tmp_path / "nope.txt", "folder without a result": tmp_path, "not a result": folder}.get(case)
    if deny is None:
        deny = tmp_path / "deny.txt"
        if case == "not utf-8":
            deny.write_bytes("sol\nmañana\n".encode("latin-1"))
        else:
            deny.write_text(texts[case], encoding="utf-8")
    ledger, output = tmp_path / "ledger.json", tmp_path / "results"
    argv = ["run", "--set", 'population.source="file"', "--set", f'population.path="{users}"',
            "--set", 'run.driver="fast"', "--set", "protocol.max_length=6", "--set", f'privacy.ledger="{ledger}"',
            "--set", f'run.deny_list="{deny}"', "--quiet", "--output", str(output)]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "run.deny_list" in error and "allowed values" in error
    assert message in error
    assert not output.exists() and not ledger.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".results")]


def test_the_reader_keeps_items_once_in_their_order(tmp_path: Path) -> None:
    from fedhh.experiment import item_codec

    codec = item_codec(load_config(None, []))
    deny = read_deny_list(str(deny_file(tmp_path, "sun\r\nmoon\nsun\n")), codec)
    assert isinstance(deny, DenyList) and deny.items == ("sun", "moon") and deny.kind == "file"
    assert read_deny_list("", codec) is None
    with pytest.raises(DenyListError, match=r"run\.deny_list"):
        read_deny_list(str(tmp_path / "absent"), codec)


def test_the_chain_study_runs_both_arms_at_equal_budget(tmp_path: Path) -> None:
    """``simulations.deny_chain_study`` on a small population: both arms run the same configs (the same
    per-run guarantee, so the same composed total), and with the list no run finds again what an earlier
    run of its chain found."""
    from simulations.deny_chain_study import main as study

    small = [value for value in SMALL[1::2] if value.startswith(("population", "protocol", "privacy"))]
    argv = [arg for value in small for arg in ("--set", value)]
    assert study([*argv, "--trials", "2", "--runs", "3", "--top-k", "20", "--output", str(tmp_path / "s")]) == 0
    result = json.loads((tmp_path / "s" / "study.json").read_text(encoding="utf-8"))
    assert (tmp_path / "s" / "cumulative-discovery.png").is_file()
    rows = result["rows"]
    assert len(rows) == 2 * 2 * 3 and len({(row["epsilon"], row["delta"]) for row in rows}) == 1
    assert result["total_guarantee_each_arm"]["runs"] == 3
    for row in rows:
        if row["arm"] == "with deny list":
            assert row["new"] == row["found"]
    assert sum(row["new"] < row["found"] for row in rows if row["arm"] == "without deny list")


def test_a_sweep_refuses_a_deny_list(tmp_path: Path) -> None:
    """A sweep's trials share one population and are independent runs: a deny list, in the base or as
    an axis, is refused with the key named (and a sweep without one keeps its trial keys: LATER_KEYS)."""
    from simulations.sweep_spec import SweepError, load_sweep

    deny = deny_file(tmp_path, "the\n")
    base = tmp_path / "base.toml"
    base.write_text(f'[run]\ndeny_list = "{deny}"\n[sweep]\n"privacy.epsilon" = [1, 2]\n', encoding="utf-8")
    with pytest.raises(SweepError, match=r"^run\.deny_list: a sweep"):
        load_sweep(base)
    axis = tmp_path / "axis.toml"
    axis.write_text(f'[sweep]\n"run.deny_list" = ["{deny}"]\n', encoding="utf-8")
    with pytest.raises(SweepError, match=r"run\.deny_list cannot be swept"):
        load_sweep(axis)


def test_denied_items_go_before_a_user_keeps_its_most_frequent(tmp_path: Path) -> None:
    """With population.per_user = "mode", users 80-89 (apple twice, cat once) keep cat once apple is denied."""
    deny = deny_file(tmp_path, "apple\n")
    experiment = Experiment(file_config(tmp_path, "exact", str(deny), "protocol.top_k=3", 'population.per_user="mode"'))
    counts = experiment.build_shard(0, 1).counts()
    holders = dict(zip(experiment.source.vocabulary.items, counts.holders.tolist(), strict=True))
    assert holders == {"apple": 0, "bee": 30, "cat": 20}


def test_a_law_simulation_counts_the_users_the_list_leaves(tmp_path: Path) -> None:
    """run.simulation = "law" on wordfreq: the shards' counts hold no denied word (their mass is users
    holding nothing, drawn from the law without building a user), and the run never finds one."""
    head = ["the", "to", "and", "of", "a"]
    deny = deny_file(tmp_path, "\n".join(head) + "\n")
    overrides = [*WORDS, 'run.simulation="law"']
    plain = Experiment(load_config(None, overrides))
    listed = Experiment(load_config(None, [*overrides, f'run.deny_list="{deny}"']))
    ids = [listed.source.vocabulary.items.index(word) for word in head]
    law, plain_law = listed.source.item_law(), plain.source.item_law()  # type: ignore[attr-defined]
    assert law is not None and plain_law is not None and not law[1:][ids].any()
    assert law[0] == pytest.approx(plain_law[0] + plain_law[1:][ids].sum()) and law.sum() == pytest.approx(1)
    before, after = plain.counted_shard(0, 2), listed.counted_shard(0, 2)
    assert after.n_users == before.n_users and not after.holders[ids].any()
    share = before.holders[ids].sum() / before.n_users
    assert share > 0.1  # the head is a good part of the users, so leaving it out is seen below
    nothing = after.n_users - after.holders.sum()
    expected = before.n_users * share + (before.n_users - before.holders.sum())
    assert abs(nothing - expected) < 6 * math.sqrt(before.n_users * share)  # the multinomial's spread
    found = {d.item for d in run_fast(listed, 2, "inprocess").result.discoveries}
    assert found and not found & set(head)
