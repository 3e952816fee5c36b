"""The curator baseline's server: it adds noise to the summed histogram once and releases what passes τ."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...kernels.randomness import KeyedRandomness
from ...privacy.central import LAPLACE, NOISES, CentralParameters, solve_central
from ...privacy.report import PrivacyReport
from ...schema import ConfigSection, Key, PrivacySection
from ..base import Response
from ..common.item_baselines import ItemHistogramServer
from ..common.keys import TOP_K_KEY
from ..spec import Section
from .messages import ItemHistogram, ItemRequest

NAME = "central"

NOISE_PURPOSE = "central.noise"


def noisy_counts(counts: np.ndarray, params: CentralParameters, generator: np.random.Generator) -> np.ndarray:
    """``counts`` plus independent noise of the mechanism's law and scale, one draw per entry."""
    counts = np.asarray(counts, dtype=np.float64)
    if params.noise == LAPLACE:
        return counts + generator.laplace(0.0, params.scale, counts.size)
    return counts + generator.normal(0.0, params.scale, counts.size)


def released(noisy: np.ndarray, params: CentralParameters) -> np.ndarray:
    """Which noisy counts the mechanism releases: those above the threshold τ."""
    return noisy > params.threshold


class CentralServer(ItemHistogramServer):
    """One round: sum the users' items, add noise to each item's count, release the ``top_k`` largest
    noisy counts above τ (the full released set when fewer pass)."""

    name = NAME
    request_type = ItemRequest

    def __init__(self, params: CentralParameters, top_k: int, codec: ItemCodec, seed: int) -> None:
        super().__init__(codec)
        self.params = params
        self.top_k = top_k
        self.seed = seed
        self._randomness = KeyedRandomness(seed)

    def privacy_report(self) -> PrivacyReport:
        return self.params.report()

    def absorb(self, response: Response) -> None:
        if not isinstance(response, ItemHistogram):
            raise TypeError(f"central expects an ItemHistogram, got {type(response).__name__}")
        self.check_pending(response)
        # the histogram's rows come in one canonical order whatever the sharding, so the noise is too
        noisy = noisy_counts(response.counts, self.params, self._randomness.generator(NOISE_PURPOSE, 1))
        passed = np.flatnonzero(released(noisy, self.params))
        shown = passed[np.lexsort((passed, -noisy[passed]))][: self.top_k]
        self.publish(
            response.items[shown],
            noisy[shown],
            {"above_threshold": int(passed.size)},
            server_view={
                "users_counted": int(response.responding_users),
                "items_present": int(response.counts.size),
            },
        )

    def parameters(self) -> dict[str, Any]:
        return {
            "noise": self.params.noise,
            "scale": self.params.scale,
            "threshold": self.params.threshold,
            "top_k": self.top_k,
        }


@dataclass(frozen=True)
class CentralKeys(ConfigSection):
    """The curator baseline's own ``[protocol]`` keys."""

    noise: str = Key(
        str,
        LAPLACE,
        "central: noise added by the curator to each item's count (laplace: scale 1/ε; gaussian: σ at (ε, δ/2))",
        NOISES,
    ).field()
    top_k: int = TOP_K_KEY.field()


def build_central(
    privacy: PrivacySection, protocol: Section, n_users: int, codec: ItemCodec, seed: int
) -> CentralServer:
    """The curator's histogram from a config: scale and τ solved from the (ε, δ) target."""
    keys = CentralKeys.of(protocol)
    params = solve_central(n_users, privacy.epsilon, privacy.delta, keys.noise)
    return CentralServer(params, keys.top_k, codec, seed)
