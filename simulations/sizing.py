"""``fedhh size`` by simulation: the answer of an analysis checked by runs, and recall-based sizing.

* :func:`verify_item`: short runs of the real protocol (server state machine
  and client function, in process) on the population the analysis assumes --
  ``round(f n)`` users hold one item of the longest length whose first bit
  (or symbol) no other value shares, every other user holds nothing -- and
  the share of runs that report the item, with its Clopper-Pearson interval.
  Above :data:`LAW_FROM_USERS` users the runs are law simulations (each
  round's aggregate drawn from its exact law given the item counts,
  ``docs/simulation.md``), so any population size can be checked in
  seconds; up to it, every user's report is drawn.
* :func:`size_by_recall`: the population at which a population of a given
  shape (a config's ``[population]``, its protocol and privacy) reaches a
  recall@K, by bisection over ``log n`` with a few runs per point on the
  fast driver.  Every population size is run with the same seeds
  (``run.seed + trial``), so the comparison between sizes is not blurred by
  different random draws.  Recall from a few runs is not monotone in n
  (0.893 at 169,282 users, then 0.867 at 172,989), so the answer comes with
  an interval of population sizes: from the largest size tried whose runs
  all fall short of the target (its interval over the runs lies below it)
  to the smallest from which every size tried has all its runs at or above
  it, each searched further (by factors of :data:`INTERVAL_STEP`) when the
  bisection tried no such size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fedhh.config import FedhhConfig
from fedhh.data.counted import CountedShard, UserTypes
from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, SingleItemShard, Vocabulary
from fedhh.driving import drive
from fedhh.errors import InputError
from fedhh.experiment import Experiment, report_cap, reported_discoveries
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.metrics import recall_at_k
from fedhh.planning.sizing import PRECISION, check_share
from fedhh.privacy.triehh import PrivacyTargetError, solve_triehh
from fedhh.protocols import Request, Response, ServerProtocol, get_protocol
from fedhh.protocols.law import LAW, USERS
from fedhh.protocols.prefix_search.pem import PEMServer
from fedhh.protocols.prefix_search.reports import respond as prefix_respond
from fedhh.protocols.prefix_search.search import SearchParameters
from fedhh.protocols.prefix_search.treehist import TreeHistServer
from fedhh.protocols.triehh.client import respond as triehh_respond
from fedhh.protocols.triehh.server import TrieHHServer

from .fast import run_fast
from .sweep_intervals import METHODS, over_trials

MAX_SIMULATED_USERS = 50_000_000  # populations held in memory (recall-based sizing, a users-mode verification)
LAW_FROM_USERS = 1_000_000  # --verify draws each round by law above this many users
INTERVAL_STEP = 1.25  # the sizes tried beyond the bisection for the ends of the answer's interval
INTERVAL_TRIES = 6  # at most this many such sizes on each side
CONFIDENCE = 0.95
FIRST_CODE = {"lowercase": "z", "ascii": "~", "bytes": "é"}  # a first character whose code starts with a 1 bit

Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True)
class Verification:
    """Runs of the real protocol at ``users``: how often the item was reported."""

    users: int
    trials: int
    found: int
    rate: float
    interval: tuple[float, float]
    predicted: float
    seed: int
    simulation: str = USERS  # users: every report drawn; law: each round's aggregate from its law

    @property
    def consistent(self) -> bool:
        """The prediction lies inside the interval of the measured rate."""
        return self.interval[0] <= self.predicted <= self.interval[1]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "interval": list(self.interval), "consistent": self.consistent}


def clopper_pearson(found: int, trials: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion."""
    from scipy.stats import beta

    tail = (1 - confidence) / 2
    low = 0.0 if found == 0 else float(beta.ppf(tail, found, trials - found + 1))
    high = 1.0 if found == trials else float(beta.ppf(1 - tail, found + 1, trials - found))
    return low, high


def planted_item(codec: ItemCodec) -> str:
    """An item of the codec's full length that shares no first bit or symbol with the empty value."""
    first = FIRST_CODE[codec.alphabet.name]
    if codec.alphabet.byte_level:
        pairs, odd = divmod(codec.max_length, len(first.encode()))
        return first * pairs + "z" * odd
    return first * codec.max_length


def planted_population(codec: ItemCodec, users: int, holders: int) -> tuple[Shard, str]:
    """``holders`` of ``users`` hold the planted item; the others hold nothing."""
    if users > MAX_SIMULATED_USERS:
        raise InputError(f"--verify: {users:,} users is more than the {MAX_SIMULATED_USERS:,} simulated in memory")
    item = planted_item(codec)
    vocabulary, ids = Vocabulary.encode([item], codec)
    held = np.full(users, -1, dtype=np.int32)  # 4 bytes a user (SingleItemShard)
    held[:holders] = ids[0]
    return SingleItemShard(vocabulary, 0, held), item


def planted_counts(codec: ItemCodec, users: int, holders: int) -> tuple[CountedShard, str]:
    """:func:`planted_population` as a law simulation holds it: its item counts."""
    item = planted_item(codec)
    vocabulary, _ = Vocabulary.encode([item], codec)
    return CountedShard(vocabulary, 0, users, np.array([holders], dtype=np.int64), UserTypes.none(), users), item


def verify_item(
    protocol: str,
    users: int,
    frequency: float,
    predicted: float,
    trials: int,
    seed: int = 0,
    search: SearchParameters | None = None,
    privacy: tuple[float, float, int] | None = None,
    progress: Progress | None = None,
    codec: ItemCodec | None = None,
    make_server: Callable[[int], ServerProtocol] | None = None,
    plant: Callable[[int, str, bool], Sequence[Shard] | Sequence[CountedShard]] | None = None,
) -> Verification:
    """How often ``trials`` runs report the planted item of share ``frequency`` among ``users``.

    ``search`` gives PEM's or TreeHist's parameters (bit values); ``privacy``
    TrieHH's (ε, δ, L), whose item has ``L - 1`` characters; any other
    protocol's sizing gives its item ``codec`` and ``make_server`` (its server
    for a seed), and the registered protocol's ``respond`` answers; and
    ``plant``, where the item's holders matter (TAPS's parties): ``plant(holders,
    item, by_law)`` gives the population's shards (of users, or of counts by
    law) in place of the holders being the first users.  Above
    :data:`LAW_FROM_USERS` users the runs are law simulations.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise InputError(f"--trials: must be an integer >= 1, got {trials!r}")
    respond: Callable[..., Response]
    server: Callable[[int], ServerProtocol]
    if make_server is not None and codec is not None:
        respond, server = get_protocol(protocol).respond, make_server
    elif protocol == "triehh":
        if privacy is None:
            raise ValueError("verify_item: TrieHH needs its privacy target (ε, δ, L)")
        epsilon, delta, max_rounds = privacy
        if max_rounds < 2:
            raise InputError(
                f"--max-rounds: --verify needs an item of at least one character, so L >= 2, got {max_rounds}"
            )
        triehh_codec = ItemCodec(get_alphabet("lowercase"), 1, max_rounds - 1)
        params = solve_triehh(users, epsilon, delta, max_rounds)

        def triehh_server(run_seed: int) -> ServerProtocol:
            return TrieHHServer(params, triehh_codec, run_seed)

        codec, server, respond = triehh_codec, triehh_server, triehh_respond
    else:
        if search is None:
            raise ValueError(f"verify_item: {protocol} needs its search parameters")
        from fedhh.protocols.prefix_search.item_discovery import bits_codec

        bits = bits_codec(int(sum(search.segment_lengths) + search.start_length))
        server_class = PEMServer if protocol == "pem" else TreeHistServer

        def prefix_server(run_seed: int) -> ServerProtocol:
            return server_class(search, bits, run_seed)

        codec, server, respond = bits, prefix_server, prefix_respond
    holders = int(round(frequency * users))
    by_law = users > LAW_FROM_USERS
    if not by_law and users > MAX_SIMULATED_USERS:
        raise InputError(f"--verify: {users:,} users is more than the {MAX_SIMULATED_USERS:,} simulated in memory")
    shards: Sequence[Shard] | Sequence[CountedShard]
    if plant is not None:
        item = planted_item(codec)
        shards = plant(holders, item, by_law)
    elif by_law:
        counted, item = planted_counts(codec, users, holders)
        shards = [counted]
    else:
        shard, item = planted_population(codec, users, holders)
        shards = [shard]
    if by_law:
        law = get_protocol(protocol).law
        if law is None:
            raise ValueError(f"verify_item: {protocol} has no law sampler")
        reply: Callable[..., Response] = law
    else:
        reply = respond  # each protocol's respond takes its own request

    def answer(request: Request, randomness: KeyedRandomness) -> list[Response]:
        return [reply(request, held, randomness) for held in shards]

    found = 0
    for trial in range(trials):
        run_seed = seed + trial
        randomness = KeyedRandomness(run_seed)
        run = server(run_seed)
        if by_law:
            run.simulate_by_law()
        result = drive(run, lambda request: answer(request, randomness))  # noqa: B023 (called at once)
        found += any(discovery.item == item for discovery in result.discoveries)
        if progress is not None:
            progress(trial + 1, trials)
    return Verification(
        users, trials, found, found / trials, clopper_pearson(found, trials), predicted, seed, LAW if by_law else USERS
    )


# -- recall-based sizing ------------------------------------------------------------------------------


@dataclass
class RecallSize:
    """The population a config's population shape needs to reach recall@K, its interval, and every size tried."""

    protocol: str
    users: int
    top_k: int
    target: float
    recall: float
    below_users: int | None
    below_recall: float | None
    trials: int
    seeds: list[int]
    definition: str
    interval: tuple[int | None, int | None] = (None, None)  # (surely short below it, surely enough from it)
    interval_method: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "interval": list(self.interval), "interval_definition": INTERVAL_DEFINITION}


RECALL_DEFINITION = (
    "smallest population found by bisection over log n (to 1%) whose mean recall@K over the trials "
    "(the same seeds at every size) reaches the target; the largest size tried below it does not"
)
INTERVAL_DEFINITION = (
    "from the largest size tried whose recall interval over the trials lies wholly below the target, to the "
    "smallest size from which every size tried has its interval wholly at or above it (null: not found within "
    f"{INTERVAL_TRIES} sizes a factor {INTERVAL_STEP:g} apart beyond the bisection); between them the runs do not "
    "settle whether the target is reached"
)


def recall_of(config: FedhhConfig, users: int, top_k: int, seeds: Sequence[int]) -> list[float]:
    """Recall@K of runs of ``config`` at ``users`` users, one per seed (0 where the privacy
    target cannot be met at that size), of the discoveries each run reports (``run.cap_to_top_k``)."""
    recalls = []
    for seed in seeds:
        sized = config.with_overrides({"population.users": users, "run.seed": seed})
        try:
            experiment = Experiment(sized)
        except PrivacyTargetError:
            return [0.0] * len(seeds)
        run = run_fast(experiment, 1, "inprocess")
        reported = reported_discoveries(run.result.discoveries, report_cap(sized))
        recalls.append(recall_at_k({d.item for d in reported}, experiment.truth(run.counts), top_k))
    return recalls


def size_by_recall(
    config: FedhhConfig,
    top_k: int,
    recall: float,
    trials: int,
    on_step: Callable[[int, float], None] | None = None,
) -> RecallSize:
    """The population at which runs of ``config`` reach ``recall`` at ``top_k`` (see :data:`RECALL_DEFINITION`),
    with the interval of sizes the runs leave open (:data:`INTERVAL_DEFINITION`)."""
    check_share(recall, "--recall", upper_open=False)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(f"--top-k: must be an integer >= 1, got {top_k!r}")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise InputError(f"--trials: must be an integer >= 1, got {trials!r}")
    protocol = str(config["protocol"]["name"])
    if protocol != "triehh" and "top_k" in config["protocol"] and top_k > int(config["protocol"]["top_k"]):
        raise InputError(
            f"--top-k: {protocol} reports protocol.top_k = {config['protocol']['top_k']} values, so recall at "
            f"K = {top_k} is capped below 1; raise protocol.top_k (--set protocol.top_k={top_k})"
        )
    if config["population"]["source"] == "file":
        raise InputError("--population: a file population has a fixed size; use a wordfreq or zipf population")
    seeds = [int(config["run"]["seed"]) + trial for trial in range(trials)]
    measured: dict[int, list[float]] = {}

    def mean(users: int) -> float:
        if users not in measured:
            measured[users] = recall_of(config, users, top_k, seeds)
            if on_step is not None:
                on_step(users, float(np.mean(measured[users])))
        return float(np.mean(measured[users]))

    def reaches(users: int) -> bool:
        return mean(users) >= recall

    start = int(config["population"]["users"])
    low, high = (max(start // 2, 1), start) if reaches(start) else (start, start * 2)
    while low < high and reaches(low):
        low, high = max(low // 2, 1), low
    while not reaches(high):
        if high * 2 > MAX_SIMULATED_USERS:
            raise InputError(
                f"--recall: recall@{top_k} = {recall:g} not reached with up to {high:,} simulated users "
                f"(measured {mean(high):.3f}); ask for a lower recall or a smaller --top-k"
            )
        low, high = high, high * 2
    while high - low > max(1, PRECISION * low):
        middle = min(max(int(round(math.sqrt(max(low, 1) * high))), low + 1), high - 1)
        low, high = (low, middle) if reaches(middle) else (middle, high)
    below = max((users for users in measured if users < high), default=None)
    interval = _answer_interval(measured, mean, high, recall)
    steps = []
    for users in sorted(measured):
        bounds = over_trials(np.array(measured[users])[:, None])
        steps.append(
            {
                "users": users,
                "recall": mean(users),
                "low": float(bounds.low[0]),
                "high": float(bounds.high[0]),
                "runs": measured[users],
            }
        )
    method = str(over_trials(np.zeros((trials, 1))).method[0])
    return RecallSize(
        protocol,
        high,
        top_k,
        recall,
        mean(high),
        below,
        None if below is None else mean(below),
        trials,
        seeds,
        RECALL_DEFINITION,
        interval,
        METHODS[method],
        steps,
    )


def _answer_interval(
    measured: dict[int, list[float]], mean: Callable[[int], float], answer: int, target: float
) -> tuple[int | None, int | None]:
    """(the largest size tried surely short of ``target``, the smallest from which every size tried surely
    reaches it), trying sizes a factor :data:`INTERVAL_STEP` beyond those tried where none is yet."""

    def bounds(users: int) -> tuple[float, float]:
        mean(users)  # runs the size if it was not tried
        interval = over_trials(np.array(measured[users])[:, None])
        return float(interval.low[0]), float(interval.high[0])

    def short() -> list[int]:
        return [users for users in measured if users <= answer and bounds(users)[1] < target]

    def enough_from() -> int | None:
        sizes = sorted(measured)
        first = None
        for users in reversed(sizes):
            if bounds(users)[0] < target:
                break
            first = users
        return first

    tries = 0
    while not short() and tries < INTERVAL_TRIES and min(measured) > 1:
        mean(max(int(min(measured) / INTERVAL_STEP), 1))
        tries += 1
    tries = 0
    while enough_from() is None and tries < INTERVAL_TRIES and max(measured) * INTERVAL_STEP <= MAX_SIMULATED_USERS:
        mean(int(math.ceil(max(measured) * INTERVAL_STEP)))
        tries += 1
    below = short()
    return (max(below) if below else None), enough_from()
