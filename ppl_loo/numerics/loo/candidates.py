"""The table of candidates of one observation: every transformation at every step, scored.

Each requested transformation is built (:mod:`ppl_loo.numerics.loo.proposals`), evaluated at every
step of its grid on all draws at once, and weighted (Eq. 10, or Eq. 13 for draws from an
approximation; the deterministic mixture for ``*_mix`` and ``mm_iter``). The candidates are
pooled by the number of weighted points (``S`` or ``2S``) and each pool is Pareto-smoothed in one
batched call; the table comes back in the order of :func:`~ppl_loo.numerics.loo.config.candidate_labels`.
"""


from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics.loo.checks import log_mean_ratio
from ppl_loo.numerics.loo.config import steps_of
from ppl_loo.numerics.loo.context import SearchContext, obs_context
from ppl_loo.numerics.loo.mm_iter import mm_iter_candidates
from ppl_loo.numerics.loo.proposals import make_proposal
from ppl_loo.numerics.loo.weights import raw_weights, scores

__all__ = ["CandidateTable", "raw_candidates", "score_pool", "candidate_table"]


class CandidateTable(NamedTuple):
    """Per-candidate arrays of one observation before the checks (leading axis: candidates ``C``)."""

    k_w: jnp.ndarray  # (C,) k-hat of the weights
    k_num: jnp.ndarray  # (C,) k-hat of the elpd numerator w * l_i
    elpd: jnp.ndarray  # (C,)
    applicable: jnp.ndarray  # (C,)
    n_bad: jnp.ndarray  # (C,) draws with signed det <= 0
    lw: jnp.ndarray  # (C, 2S) smoothed log weights over [draws, images]
    ll_pool: jnp.ndarray  # (C, 2S) log-likelihood of i at [draws, images]
    ratio_max: jnp.ndarray  # (C,) max over points of log p(x | D) / q(x)
    n_points: jnp.ndarray  # (C,) number of weighted points (S or 2S)
    lmr: jnp.ndarray  # (C,) log mean ratio
    se_lmr: jnp.ndarray  # (C,) its SE
    log_w: jnp.ndarray  # (C, 2S) raw log weights over [draws, images]


def raw_candidates(sc: SearchContext, i, ll0):
    """Raw weights of every transformation, pooled by length.

    Returns ``pools`` (``{False: [...], True: [...]}``, mixtures under ``True``; each item
    ``(log_w, ll_pool, applicable, n_bad)`` of one transformation), ``order`` (``(mixture, position
    in its pool, number of steps)`` per transformation of ``cfg.transforms``) and ``is_mixture``
    per candidate.
    """
    ctx = obs_context(sc, ll0)
    memo = {}
    pools = {False: [], True: []}  # candidates by pooled length (S or 2S)
    order = []
    is_mixture = []
    for full_name in sc.cfg.transforms:
        steps = jnp.asarray(steps_of(full_name, sc.cfg.hbar), dtype=sc.theta.dtype)
        if full_name == "mm_iter":
            mixture = True
            pools[True].append(mm_iter_candidates(sc, i, ll0, steps))
        else:
            prop, mixture, lines = make_proposal(sc, full_name, i, ll0, ctx, steps, memo)
            pools[mixture].append(raw_weights(sc, prop, steps, i, ll0, mixture, lines))
        order.append((mixture, len(pools[mixture]) - 1, steps.shape[0]))
        is_mixture += [mixture] * steps.shape[0]
    return pools, order, is_mixture


def score_pool(sc: SearchContext, items, mixture) -> CandidateTable:
    """Smooth and score one pool of candidates; plain ones are padded to the layout ``[draws, images]``."""
    S = sc.theta.shape[0]
    log_w, ll_pool, applicable, n_bad = (jnp.concatenate(z, axis=0) for z in zip(*items))
    # log p(x | D) / q(x) at every point: the LOO weight times l_i (mean 1 under q)
    log_r = jnp.where(jnp.isfinite(log_w), log_w + ll_pool, -jnp.inf)
    ratio_max = jnp.max(log_r, axis=-1)
    lmr, se_lmr = log_mean_ratio(log_r, sc.cfg.r_eff)
    n_pts = jnp.full(ratio_max.shape, float(log_w.shape[-1]), dtype=log_w.dtype)
    lw, k_w, k_num, elpd = scores(log_w, ll_pool, sc.cfg.r_eff)
    if not mixture:  # pad to the pooled layout [draws, images]: draws carry no weight
        C = lw.shape[0]
        lw = jnp.concatenate([jnp.full((C, S), -jnp.inf), lw], axis=1)
        log_w = jnp.concatenate([jnp.full((C, S), -jnp.inf), log_w], axis=1)
        ll_pool = jnp.concatenate([jnp.zeros((C, S)), ll_pool], axis=1)
    return CandidateTable(k_w, k_num, elpd, applicable, n_bad, lw, ll_pool, ratio_max, n_pts, lmr, se_lmr, log_w)


def candidate_table(sc: SearchContext, i, ll0):
    """The :class:`CandidateTable` of observation ``i`` in the order of ``cfg.transforms``, and
    ``is_mixture`` per candidate."""
    pools, order, is_mixture = raw_candidates(sc, i, ll0)
    scored = {}
    for mixture, items in pools.items():
        if not items:
            continue
        offsets = np.cumsum([0] + [it[0].shape[0] for it in items])
        scored[mixture] = (offsets, score_pool(sc, items, mixture))
    parts = []
    for mixture, j, T in order:
        offsets, table = scored[mixture]
        parts.append(CandidateTable(*(a[offsets[j]:offsets[j] + T] for a in table)))
    return CandidateTable(*(jnp.concatenate(z, axis=0) for z in zip(*parts))), is_mixture
