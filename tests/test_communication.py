"""Users' bits sent: each oracle's report size and each protocol's per-user total against values
derived by hand from their parameters; the server's time and the bits in a run's result."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.experiment import Experiment
from fedhh.oracles import make_oracle
from simulations.fast import run_fast

# ε = 2: OLH's g = round(e^2) + 1 = 8 buckets (3 bits); domain 1000 needs 10 bits.
ORACLE_BITS = [
    ("grr", {}, 10),                                        # one value of 1000
    ("sue", {}, 1000),                                      # one bit per value
    ("oue", {}, 1000),
    ("blh", {}, 64 + 1),                                    # seed + one-bit bucket
    ("olh", {}, 64 + 3),                                    # seed + bucket of 8
    ("flh", {}, 10 + 3),                                    # one of 1000 functions + bucket of 8
    ("flh", {"hash_functions": 16}, 4 + 3),
    ("hr", {}, 10),                                         # 4 blocks of 256 outputs: K = 1024
    ("hm", {}, 10 + 1),                                     # one of 1024 rows + its sign
    ("hm", {"coefficients": 3}, 3 * (10 + 1)),
    ("hashtogram", {"rows": 4, "width": 256}, 2 + 8 + 1),   # row, Hadamard index, bit
    ("count-mean", {"rows": 16, "width": 1024}, 4 + 13),    # row + FLH over the width
    ("count-sketch", {"rows": 16, "width": 1024}, 4 + 13),  # FLH over 2 x width: the same 13 bits
    ("cms", {"rows": 16, "width": 1024}, 4 + 1024),         # row + OUE's bit vector of the width
    ("hcms", {"rows": 16, "width": 1024}, 4 + 10 + 1),      # row + HM(1) over the width
    ("count-sketch-hadamard", {"rows": 15, "width": 1024}, 4 + 10 + 1),  # hash, Hadamard row, bit
]


@pytest.mark.parametrize(("name", "options", "bits"), ORACLE_BITS)
def test_each_oracle_declares_the_bits_of_its_report(name: str, options: dict, bits: int) -> None:
    assert make_oracle(name, epsilon=2.0, domain=1000, **options).report_bits() == bits


def test_report_fields_fit_the_declared_bits() -> None:
    """What the oracles actually draw fits the fields counted: FLH's function and bucket, the
    count sketch of Hadamard bits' hash, row and bit, the Hadamard response's index."""
    values = np.arange(1000, dtype=np.uint64)
    rng = np.random.default_rng(1)
    flh = make_oracle("flh", epsilon=2.0, domain=1000, hash_functions=16)
    reports = flh.randomize(values, rng)
    assert int(reports.functions.max()).bit_length() + int(reports.buckets.max()).bit_length() <= flh.report_bits()
    sketch = make_oracle("count-sketch-hadamard", epsilon=2.0, domain=1000, rows=15, width=1024)
    reports = sketch.randomize(values, rng)
    used = sum(int(field.max()).bit_length() for field in (reports.hashes, reports.rows, reports.negative))
    assert used == sketch.report_bits()  # 1000 users fill every field's range
    hr = make_oracle("hr", epsilon=2.0, domain=1000)
    assert int(hr.randomize(values, rng).indices.max()).bit_length() == hr.report_bits()


SMALL = [
    'population.source="zipf"', "population.users=20000", "population.vocabulary=500", "population.item_length=6",
    "protocol.max_length=6", "privacy.epsilon=4.0", "run.seed=3",
]
# lowercase letters with the end symbol: 27 symbol ids (5 bits); 6 letters are 30 bits.
ε4_OLH = 64 + 6  # g = round(e^4) + 1 = 56 buckets
ε2_OLH = 64 + 3  # g = 8
ε4_3_OLH = 64 + 3  # ε/3: g = round(e^(4/3)) + 1 = 5


def experiment(*settings: str) -> Experiment:
    return Experiment(load_config(None, [*SMALL, *settings]))


def test_triehh_user_sends_one_prefix_per_round_it_is_sampled_in() -> None:
    run = experiment('protocol.name="triehh"', "privacy.delta=1e-6")
    params = run.make_server().params
    assert params.max_rounds == 7  # 6 letters and the end symbol
    full = 5 * (1 + 2 + 3 + 4 + 5 + 6 + 7)
    assert run.communication.max_bits == full
    assert run.communication.expected_bits == pytest.approx(params.batch_size / 20000 * full)


def test_pem_user_sends_one_olh_report_with_its_group() -> None:
    run = experiment('protocol.name="pem"', 'protocol.oracle="olh"', "protocol.segment_length=10")
    assert run.make_server().params.levels == 3  # 10, 20, 30 bits: a group index of 2 bits
    assert run.communication.max_bits == 2 + ε4_OLH
    assert run.communication.expected_bits == pytest.approx(2 + ε4_OLH)


def test_taps_user_sends_one_olh_report_with_its_level() -> None:
    """30-bit values, 1,024 candidates a level: a first level of 10 bits, then 32 kept prefixes grow
    by at most 5 bits (32 x 2^5 = 1,024), so 1 + 20 / 5 = 5 levels, a level index of 3 bits, and one
    OLH report at ε = 4."""
    run = experiment('protocol.name="taps"')
    assert run.make_server().levels == 5
    assert (run.communication.max_bits, run.communication.expected_bits) == (3 + ε4_OLH, pytest.approx(3 + ε4_OLH))


def test_treehist_user_sends_a_level_report_and_a_full_value_report() -> None:
    run = experiment('protocol.name="treehist"', "protocol.sketch_rows=7", "protocol.sketch_width=128")
    assert run.make_server().params.levels == 30  # one bit a level: a level index of 5 bits
    level, final = 5 + (3 + 7 + 1), 3 + 7 + 1  # hash of 7, row of 128, bit
    assert (run.communication.max_bits, run.communication.expected_bits) == (level + final, pytest.approx(level + final))


def test_pem_with_grr_weighs_each_level_by_its_group() -> None:
    """GRR's report grows with the level's domain: the expectation is the shares' average."""
    run = experiment('protocol.name="pem"', 'protocol.oracle="grr"', "protocol.segment_length=8")
    server = run.make_server()
    params = server.params
    assert server.lengths.tolist() == [8, 16, 24, 30]  # the last level shorter: 30-bit values
    per_level = [2 + length for length in (8, 16, 24, 30)]  # group of 4, then GRR over the level's prefixes
    assert run.communication.max_bits == max(per_level)
    assert run.communication.expected_bits == pytest.approx(sum(s * b for s, b in zip(params.shares, per_level)))


def test_sfp_user_sends_a_fragment_with_its_position_and_its_word() -> None:
    run = experiment('protocol.name="sfp"', 'protocol.fragment_oracle="hcms"', "protocol.fragment_sketch_rows=8",
                     "protocol.fragment_sketch_width=64")
    fragment = 2 + 3 + 6 + 1  # position of 3, row of 8, HM(1): index of 64 and a bit
    word = 3 + 6 + 1
    assert run.communication.max_bits == fragment + word
    no_word = experiment('protocol.name="sfp"', "protocol.word_pass=false", "protocol.fragment_sketch_rows=16",
                         "protocol.fragment_sketch_width=1024")
    assert no_word.communication.max_bits == 2 + 4 + 1024  # CMS: position, row, OUE over the width


def test_bitstogram_user_sends_a_pair_with_its_position_and_its_value() -> None:
    run = experiment('protocol.name="bitstogram"', "protocol.buckets=64", "protocol.hashtogram_rows=4")
    pair = 5 + (0 + 7 + 1)  # position of 30; one row, index of 2 x 64 pairs, bit
    value = 2 + 6 + 1  # row of 4, index of 64, bit
    assert run.communication.max_bits == pair + value
    assert run.communication.expected_bits == pair + value


def test_mcm_user_sends_two_olh_reports_at_half_the_budget() -> None:
    run = experiment('protocol.name="mcm"', "protocol.channels=100")
    assert run.communication.max_bits == (5 + ε2_OLH) + ε2_OLH


def test_spm_user_sends_its_pair_and_three_olh_reports_at_a_third() -> None:
    run = experiment('protocol.name="spm"', "protocol.segment_bits=10")
    assert run.communication.max_bits == 2 + 3 * ε4_3_OLH  # 3 segments: one of 3 pairs


def test_rappor_user_sends_its_filter_and_cohort() -> None:
    run = experiment('protocol.name="rappor"', "protocol.bloom_bits=128", "protocol.cohorts=8")
    assert run.communication.max_bits == 128 + 3


def test_baselines_send_their_items_in_the_clear() -> None:
    """central: one item of L = 7 symbols (6 letters and the end) of 5 bits; exact: each item held with
    its 32-bit share."""
    central = experiment('protocol.name="central"', "privacy.delta=1e-6").communication
    assert central.max_bits == central.expected_bits == 7 * 5
    exact = experiment('protocol.name="exact"').communication
    assert exact.max_bits == 7 * 5 + 32 and "per item" in exact.note


def test_aggregate_trie_user_sends_its_candidates_in_each_level_it_is_sampled_in() -> None:
    """L = 7 symbols in extensions of 2: levels to depths 2, 4, 6, 7; one candidate of 5-bit symbols
    each (two with contributions = 2), sent with probability q = 2000 / 20000 per level."""
    run = experiment('protocol.name="aggregate-trie"', "privacy.delta=1e-6", "protocol.users_per_level=2000")
    full = 5 * (2 + 4 + 6 + 7)
    assert run.communication.max_bits == full
    assert run.communication.expected_bits == pytest.approx(0.1 * full)
    several = experiment('protocol.name="aggregate-trie"', "privacy.delta=1e-6", 'protocol.data_selection="several"',
                         "protocol.contributions=2").communication
    assert several.max_bits == several.expected_bits == 2 * full


@pytest.mark.parametrize("name", ["triehh", "mcm"])
def test_a_run_reports_its_bits_and_its_server_time(name: str) -> None:
    run = experiment(f'protocol.name="{name}"', "privacy.delta=1e-6")
    fast = run_fast(run, 2, "inprocess")
    document = run.finish(fast.result, fast.timing, "fast/inprocess", counts=fast.counts)
    assert document["communication"] == run.communication.to_dict()
    assert document["communication"]["user_bits_max"] == run.communication.max_bits > 0
    timing = document["timing_s"]
    assert 0 < timing["server_s"] and 0 < timing["shards_s"]
    assert timing["server_s"] + timing["shards_s"] <= timing["rounds_s"]
