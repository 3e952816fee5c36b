"""How the users of a sampled population draw their words: independently, or each around a law of its own.

A sampled population (wordfreq, Zipf, exponential) has a law ``p`` over its
candidates, and each user draws ``W = population.words_per_user`` words.
``population.concentration`` (``α``) says how alike a user's words are:

* ``α = 0`` (the default) stands for ``α = ∞``: every word is an
  independent draw from ``p``, so a user's count ``N_i`` of candidate ``i`` is
  Binomial(``W``, ``p_i``) and users differ only by chance;
* ``α > 0``: each user first draws a law of its own, ``q ~ Dirichlet(α p)``,
  centred on the population's (``E[q] = p``), then ``W`` independent words
  from ``q``.  The counts ``(N_i)`` of one user are then
  Dirichlet-multinomial(``W``, ``α p``): the smaller ``α``, the more a user
  repeats its own favourite words (``α → 0``: one word, ``W`` times).

Moments of one user's count of candidate ``i`` (``p = p_i``)::

    E[N_i]        = W p
    Var[N_i]      = W p (1 - p) (W + α) / (1 + α)           (α = ∞: W p (1 - p))
    P(N_i >= 1)   = 1 - prod_{j < W} (1 - α p / (α + j))    (α = ∞: 1 - (1 - p)^W)

so the population frequency of a word (the users' local shares ``N_i / W``
added up, [Zhu20]'s Algorithm 3 truth) has the same mean ``n p`` at every
``α``, while the share of users holding it, ``P(N_i >= 1)``, falls as ``α``
does, and so does the number of distinct words a user holds,
``sum_i P(N_i >= 1)`` (:func:`expected_distinct_items`).

A Dirichlet over the whole vocabulary for each user would be out of reach
(10^5 candidates times 10^6 users).  The draw uses the Pólya urn
(Blackwell-MacQueen) representation instead, which gives exactly the same
joint law of a user's words: word ``j`` (``j = 0, 1, ...``) repeats one of
the user's ``j`` earlier words, chosen uniformly, with probability
``j / (j + α)``, and is otherwise a fresh draw from ``p``.  Word ``j`` is one
step for every user at once (:func:`polya_urn_words`), so the cost is that of
the independent draw plus one uniform a word.  The fresh draws are the
independent population's own words (the same keyed uniforms), so the two
populations of one seed differ only where the urn repeats a word.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..kernels.randomness import UserRandom

URN_PURPOSE = "population.urn"  # the uniform that decides whether a user's next word repeats an earlier one


def polya_urn_words(
    fresh_words: Iterable[np.ndarray], words_per_user: int, urn: UserRandom, concentration: float
) -> np.ndarray:
    """Each user's ``words_per_user`` words (row ``j``: word ``j`` of every user of ``urn``), drawn
    from the Pólya urn of concentration ``α = concentration`` (> 0) whose base draws are
    ``fresh_words`` (one array a word index).

    Word ``j`` of a user is its fresh word ``j`` unless ``floor(u (j + α)) < j`` for the user's
    ``j``-th urn uniform ``u``, which happens with probability ``j / (j + α)`` and then names,
    uniformly, the earlier word it repeats.  Every fresh word is drawn whether it is used or not,
    so word ``j``'s fresh draw is the same at every ``α``.
    """
    if not concentration > 0:
        raise ValueError(f"the urn's concentration must be > 0, got {concentration}")
    words: np.ndarray | None = None
    for j, fresh in enumerate(fresh_words):
        if words is None:
            words = np.empty((words_per_user, fresh.size), dtype=fresh.dtype)
        words[j] = fresh
        if j:
            earlier = np.floor(urn.random() * (j + concentration)).astype(np.int64)
            repeats = np.flatnonzero(earlier < j)
            words[j, repeats] = words[earlier[repeats], repeats]
    if words is None:
        raise ValueError("a user draws at least one word")
    return words


def holding_probability(law: np.ndarray, words_per_user: int, concentration: float) -> np.ndarray:
    """``P(N_i >= 1)`` for every candidate ``i`` of ``law``: the chance that a user holds it (``α = 0``:
    independent draws)."""
    law = np.minimum(np.asarray(law, dtype=np.float64), 1.0)
    with np.errstate(divide="ignore"):  # a candidate of probability 1: log(0), held by every user
        if concentration == 0:
            return -np.expm1(words_per_user * np.log1p(-law))
        log_none = np.zeros_like(law)
        for j in range(words_per_user):
            log_none += np.log1p(-concentration * law / (concentration + j))
    return -np.expm1(log_none)


def expected_distinct_items(law: np.ndarray, words_per_user: int, concentration: float) -> float:
    """The expected number of distinct candidates a user holds: ``sum_i P(N_i >= 1)``."""
    return float(np.sum(holding_probability(law, words_per_user, concentration)))
