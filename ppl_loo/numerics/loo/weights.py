"""Importance weights of a proposal over its steps, and their Pareto smoothing.

Plain transformed IS (Eq. 10, or Eq. 13 for draws from an approximation) gives ``S`` weighted
points, the images ``phi``; the deterministic mixture ``q = (p + T#p) / 2`` (this project) gives
``2S``, the draws and their images. Every candidate of one pooled length is smoothed in one
batched PSIS call (:func:`scores`).
"""


from functools import partial

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ppl_loo.numerics.loo.context import SearchContext, embed, line
from ppl_loo.numerics.psis import psislw
from ppl_loo.numerics.transforms import Proposal, dense

__all__ = ["raw_weights", "mixture_log_weights", "finite_or_neg_inf", "scores", "psis_identity"]


def finite_or_neg_inf(z):
    """``z`` with every non-finite entry (NaN, +-inf) set to ``-inf``: a log weight of zero."""
    return jnp.where(jnp.isfinite(z), z, -jnp.inf)


def psis_identity(log_ratios, ll, r_eff, conventions="arviz"):
    """Plain PSIS-LOO of a batch: ``(elpd_i, k, lw)`` for log ratios and log-lik of shape ``(n, S)``; ``r_eff`` one
    value or one per row, ``conventions`` :func:`~ppl_loo.numerics.psis.psislw`'s."""
    lw, k = psislw(log_ratios, r_eff, conventions)
    return logsumexp(lw + ll, axis=-1), k, lw


def scores(log_w, ll_pool, r_eff):
    """PSIS of the weights and of the elpd numerator ``w * l_i`` (Vehtari et al. 2024, sec. 2.3),
    for all candidates of one length in one batched call. Returns ``(lw, k_w, k_num, elpd)``."""
    C = log_w.shape[0]
    lw_all, k_all = psislw(jnp.concatenate([log_w, log_w + ll_pool], axis=0), r_eff)
    lw, k_w, k_num = lw_all[:C], k_all[:C], k_all[C:]
    elpd = logsumexp(lw + ll_pool, axis=-1)
    return lw, k_w, k_num, elpd


def raw_weights(sc: SearchContext, prop: Proposal, steps, i, ll0, mixture, lines=None):
    """Log weights and log-likelihoods of one proposal over its steps, before smoothing.

    Plain transformed IS (Eq. 10/13) gives ``S`` weighted points (the images ``phi``); the
    deterministic mixture ``q = (p + T#p) / 2`` gives ``2S`` (the draws and their images).

    Parameters
    ----------
    sc : SearchContext
    prop : Proposal
        The map's line ``theta + t delta`` and its log|det J| per step.
    steps : jax.Array, shape ``(T,)``
    i : int or jax.Array
    ll0 : jax.Array, shape ``(S,)``
        ``log l_i`` at the draws.
    mixture : bool
        Static: weight the deterministic mixture (``2S`` points) instead of the images (``S``).
    lines : tuple, optional
        The model along the proposal's lines, ``(lp, ll_phi)`` of shape ``(T, S)``, where already
        evaluated (shared between a transformation and its ``_mix`` variant).

    Returns
    -------
    log_w, ll_pool : jax.Array, shape ``(T, L)``
        Raw log weights (``-inf`` where not finite) and ``log l_i`` at the points, ``L = S`` or ``2S``.
    applicable : jax.Array, shape ``(T,)``
    n_bad : jax.Array, shape ``(T,)``
        Draws at which the map is not invertible (signed det <= 0).
    """
    S = sc.theta.shape[0]
    T = steps.shape[0]
    L = 2 * S if mixture else S
    if prop.applicable is False:  # statically impossible: never evaluated, k = inf
        return jnp.full((T, L), -jnp.inf), jnp.zeros((T, L)), jnp.zeros((T,), bool), jnp.zeros((T,), jnp.int64)
    lp, ll_phi = line(sc, prop.delta, steps, i) if lines is None else lines  # (T, S)
    if not mixture:
        log_w = prop.logdet + lp - ll_phi - sc.log_q0[None, :]
        ll_pool = ll_phi
    else:
        log_w, ll_pool = mixture_log_weights(sc, prop, steps, i, ll0, lp, ll_phi)
    log_w = finite_or_neg_inf(log_w)
    n_bad = jnp.sum(~prop.ok, axis=-1)
    applicable = jnp.broadcast_to(jnp.asarray(prop.applicable), (T,))
    return log_w, ll_pool, applicable, n_bad


def _lp_at_inverse(t, sc, prop, i):
    """``log p~`` at ``T_t^-1(theta) = theta + back`` of every draw."""
    one = jnp.ones((1,), dtype=sc.theta.dtype)
    return line(sc, prop.inverse(t), one, i)[0][0]


def _log_q_along(sc: SearchContext, prop: Proposal, steps):
    """``log q`` at the inverse images and at the images of the draws, ``(T, S)`` each."""
    theta = sc.theta
    lq = jax.vmap(sc.log_q_fn)
    lq_inv = jax.lax.map(lambda t: lq(theta + dense(embed(sc, prop.inverse(t)), theta)), steps)
    lq_phi = jax.vmap(lambda t: lq(theta + t * dense(embed(sc, prop.delta), theta)))(steps)
    return lq_inv, lq_phi


def mixture_log_weights(sc: SearchContext, prop: Proposal, steps, i, ll0, lp, ll_phi):
    """Pooled log weights and log-likelihoods ``(T, 2S)`` of the deterministic mixture ``(q + T#q) / 2``."""
    # this project: the draws of p estimate the numerator E_p-i[l_i] well, the images of
    # the normalizer; the mixture weights are bounded where either component is good.
    T, S = steps.shape[0], sc.theta.shape[0]
    if sc.posterior_draws:  # q = p: its log density along the lines is already known
        lq_inv = jax.lax.map(partial(_lp_at_inverse, sc=sc, prop=prop, i=i), steps)  # (T, S)
        lq_phi = lp
    else:
        lq_inv, lq_phi = _log_q_along(sc, prop, steps)
    log_q0 = sc.log_q0
    log_qmix_phi = jnp.logaddexp(lq_phi, log_q0[None, :] - prop.logdet)
    log_qmix_th = jnp.logaddexp(log_q0[None, :], lq_inv - prop.logdet)
    log_w = jnp.concatenate([(sc.logp0 - ll0)[None, :] - log_qmix_th, lp - ll_phi - log_qmix_phi], axis=1)
    ll_pool = jnp.concatenate([jnp.broadcast_to(ll0, (T, S)), ll_phi], axis=1)
    return log_w, ll_pool
