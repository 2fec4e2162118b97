"""Proper scoring rules of a posterior predictive: PVI estimators and held-out evaluation.

Pure JAX array functions, positively oriented unless said otherwise (higher is better), one value
per observation. The PVI estimators (Lai & Yao, Table 1 and Appendices A-B, with the errata of
the implementer's notes, section 7) take Monte Carlo quantities at draws ``theta_m ~ q_phi``
that are *differentiable* in the variational parameters through the reparameterization, so the
autodiff gradient of the estimate is the paper's gradient estimator:

- :func:`log_score_reparam`: estimator (a) of the log score (Eq. 5), ``log mean_m p(y_i|theta_m)``;
  consistent, biased low by O(1/M) (Prop. 2);
- :func:`rejection_weights`: the unbiased rejection-sampling estimator of Appendix B (Eq. 11),
  as per-draw weights of a score-function surrogate;
- :func:`crps_pairs`: the CRPS estimator of Table 1 / A.4 with the sign typo fixed
  (``sign(y_m - y_{m+M})``) and the ``1/2 E|Y - Y'|`` term per observation (erratum 1); exactly
  unbiased for independent pairs;
- :func:`quadratic_score`: the quadratic (Brier) score per observation,
  ``2 P_i(y_i) - sum_j P_i(j)^2`` (erratum 1), with the unbiased U-statistic for ``P_i(j)^2``
  (erratum 2) or the paper's plug-in.

Held-out evaluation of a finite set of draws (the predictive is the mixture over the draws):
:func:`log_score_eval`, :func:`crps_fair` (the fair CRPS estimator, sorted, O(K log K)),
:func:`energy_score_fair` (vector outcomes), :func:`quadratic_score_eval`, and the Gaussian
closed form :func:`crps_gaussian` for tests.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.scipy.stats import norm

__all__ = [
    "SCORES",
    "crps_fair",
    "crps_gaussian",
    "crps_pairs",
    "energy_score_fair",
    "log_score_eval",
    "log_score_reparam",
    "quadratic_score",
    "quadratic_score_eval",
    "rejection_weights",
]

SCORES = ("log", "crps", "quadratic")


def _l2(a):
    """L2 norm over the last axis, differentiable at zero (gradient 0 there, like ``|.|``)."""
    sq = jnp.sum(a**2, axis=-1)
    safe = jnp.where(sq > 0, sq, 1.0)
    return jnp.where(sq > 0, jnp.sqrt(safe), 0.0)


def log_score_reparam(ll):
    """Estimator (a) of the log score (Table 1): ``log (1/M) sum_m p(y_i | theta_m)``.

    Parameters
    ----------
    ll : array ``(M, n)``
        ``log p(y_i | theta_m)`` at ``M`` draws from ``q``.

    Returns
    -------
    array ``(n,)``
        Its autodiff gradient is the self-normalized estimator
        ``sum_m grad p(y_i|theta_m) / sum_m p(y_i|theta_m)`` (Prop. 2).
    """
    return logsumexp(ll, axis=0) - math.log(ll.shape[0])


def rejection_weights(ll, log_u, log_bound):
    """Per-draw weights of the rejection-sampling gradient (Appendix B, Eq. 11).

    Draw ``theta_m ~ q`` and ``t_m ~ U(0, 1)`` (shared by all observations); ``theta_m`` is
    accepted for observation ``i`` when ``t_m < p(y_i|theta_m) / C_i``. For an observation with
    ``k_i >= 1`` acceptances, ``g_i = (1/k_i) sum_{m accepted} grad_phi log q_phi(theta_m)`` is an
    unbiased estimate of ``grad_phi log q^Y(y_i)`` (Prop. 4). Summed over observations,
    ``sum_i g_i = grad_phi sum_m w_m log q_phi(theta_m)`` with ``theta_m`` held fixed and
    ``w_m = sum_i A_mi / k_i``: one weighted score-function gradient.

    Parameters
    ----------
    ll : array ``(M, n)``
        ``log p(y_i | theta_m)``.
    log_u : array ``(M,)``
        ``log t_m``.
    log_bound : array ``(n,)`` or scalar
        ``log C_i`` with ``p(y_i|theta) <= C_i`` for every ``theta``.

    Returns
    -------
    w : array ``(M,)``
        The weights (observations without an acceptance contribute nothing).
    accepted : bool array ``(n,)``
        Observations with at least one acceptance.
    violations : int
        Number of ``(m, i)`` with ``log p(y_i|theta_m) > log C_i``: a wrong bound.
    """
    log_bound = jnp.broadcast_to(jnp.asarray(log_bound, dtype=ll.dtype), ll.shape[1:])
    excess = ll - log_bound[None, :]
    acc = log_u[:, None] < excess
    k = jnp.sum(acc, axis=0)
    w = jnp.sum(jnp.where(acc, 1.0 / jnp.maximum(k, 1)[None, :], 0.0), axis=1)
    return w, k > 0, jnp.sum(excess > 1e-10)


def crps_pairs(y_sim, y, vector: bool = False):
    """CRPS estimator of Table 1 (Appendix A.4), per observation, positively oriented (``-CRPS``).

    ``-[ (1/2M) sum_{m<=2M} |y_m - y_i| - (1/2)(1/M) sum_{m<=M} |y_m - y_{m+M}| ]`` with
    ``y_m ~ p(. | theta_m, x_i)`` and ``theta_1 .. theta_{2M}`` independent draws from ``q``;
    pairs ``(m, m + M)`` must come from different draws. Unbiased for the CRPS and, through the
    reparameterized simulator, for its gradient (A.4).

    Parameters
    ----------
    y_sim : array ``(2M, n)`` or ``(2M, n, k)``
        Simulated outcomes, one per draw ``theta_m`` and observation.
    y : array ``(n,)`` or ``(n, k)``
        Observed outcomes.
    vector : bool
        Outcomes are vectors along the last axis: the energy score with the L2 norm.

    Returns
    -------
    array ``(n,)``
    """
    two_m = y_sim.shape[0]
    if two_m < 2 or two_m % 2:
        raise ValueError(f"crps_pairs needs an even number (>= 2) of simulated draws, got {two_m}.")
    half = two_m // 2
    dist = _l2 if vector else jnp.abs
    d_obs = jnp.mean(dist(y_sim - y[None]), axis=0)
    d_pair = jnp.mean(dist(y_sim[:half] - y_sim[half:]), axis=0)
    return -(d_obs - 0.5 * d_pair)


def quadratic_score(probs, y_index, unbiased: bool = True):
    """Quadratic score ``2 P_i(y_i) - sum_j P_i(j)^2`` per observation (Table 1, erratum 1).

    Parameters
    ----------
    probs : array ``(M, n, I)``
        ``f(theta_m, j; x_i) = Pr(Y_i = j | theta_m)`` at ``M`` draws.
    y_index : int array ``(n,)``
        Category index of each observation.
    unbiased : bool
        Estimate ``P_i(j)^2`` with the U-statistic
        ``[(sum_m f_mj)^2 - sum_m f_mj^2] / (M (M - 1))`` (unbiased, erratum 2); ``False`` gives
        the paper's plug-in ``(mean_m f_mj)^2``, biased upwards by ``Var / M``.

    Returns
    -------
    array ``(n,)``
    """
    M = probs.shape[0]
    P = jnp.mean(probs, axis=0)  # (n, I)
    p_obs = jnp.take_along_axis(P, jnp.asarray(y_index)[:, None], axis=1)[:, 0]
    if unbiased and M > 1:
        s = jnp.sum(probs, axis=0)
        sq = (s**2 - jnp.sum(probs**2, axis=0)) / (M * (M - 1))
        return 2.0 * p_obs - jnp.sum(sq, axis=-1)
    return 2.0 * p_obs - jnp.sum(P**2, axis=-1)


# ----------------------------------------------------------------------------- evaluation
def log_score_eval(ll):
    """Log predictive density of the draws' mixture, ``log mean_s p(y_i|theta_s)``: ``(S, n) -> (n,)``."""
    return logsumexp(ll, axis=0) - math.log(ll.shape[0])


def crps_fair(samples, y):
    """Fair CRPS estimator per observation (negatively oriented: lower is better).

    ``(1/K) sum_k |x_k - y| - 1/(2 K (K - 1)) sum_{k != l} |x_k - x_l|`` (notes, erratum 9),
    unbiased for the CRPS of the distribution the ``K`` draws come from. The pair sum is computed
    from the sorted draws, ``sum_{k != l} |x_k - x_l| = 2 sum_k (2k - K - 1) x_(k)``.

    Parameters
    ----------
    samples : array ``(K, n)``
        Predictive draws (one per posterior draw) for each observation.
    y : array ``(n,)``

    Returns
    -------
    array ``(n,)``
    """
    samples = jnp.asarray(samples)
    K = samples.shape[0]
    if K < 2:
        raise ValueError(f"the fair CRPS needs at least 2 predictive draws, got {K}.")
    term1 = jnp.mean(jnp.abs(samples - jnp.asarray(y)[None]), axis=0)
    xs = jnp.sort(samples, axis=0)
    coef = (2.0 * jnp.arange(1, K + 1) - K - 1.0)[:, None]
    pair = jnp.sum(coef * xs, axis=0) / (K * (K - 1))
    return term1 - pair


def energy_score_fair(samples, y):
    """Fair energy score (CRPS with the L2 norm, ``beta = 1``) for vector outcomes; lower is better.

    ``samples`` ``(K, n, k)``, ``y`` ``(n, k)``; ``O(K^2)`` per observation.
    """
    samples = jnp.asarray(samples)
    K = samples.shape[0]
    if K < 2:
        raise ValueError(f"the fair energy score needs at least 2 predictive draws, got {K}.")
    term1 = jnp.mean(_l2(samples - jnp.asarray(y)[None]), axis=0)

    def pair_one(x):  # x (K, k)
        return jnp.sum(_l2(x[:, None, :] - x[None, :, :])) / (2 * K * (K - 1))

    pair = jax.lax.map(pair_one, jnp.moveaxis(samples, 1, 0))
    return term1 - pair


def quadratic_score_eval(probs, y_index):
    """Quadratic score of the draws' mixture ``P_i(j) = mean_s f(theta_s, j)``: ``(S, n, I) -> (n,)``.

    Higher is better; a forecast of ``p = 1/2`` on a binary outcome scores ``1/2``.
    """
    return quadratic_score(probs, y_index, unbiased=False)


def crps_gaussian(mu, sigma, y):
    """Closed-form CRPS of ``N(mu, sigma^2)`` at ``y`` (Gneiting & Raftery 2007); lower is better."""
    z = (y - mu) / sigma
    return sigma * (z * (2.0 * norm.cdf(z) - 1.0) + 2.0 * norm.pdf(z) - 1.0 / math.sqrt(math.pi))
