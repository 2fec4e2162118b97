"""Ratios of normalizing constants from two sets of draws: bridge sampling and stepping stones.

The exact LOO predictive density of observation ``i`` is a ratio of normalizing constants,

    p(y_i | y_-i) = Z_full / Z_-i = E_{p(theta | y_-i)}[ l_i(theta) ],   l_i = p(y_i | theta),

because the full-data posterior is the LOO posterior times ``l_i``. With draws of a refit without
``i`` (from ``p_-i``) *and* draws of the full-data fit (from ``p_full``), the optimal bridge
estimator of Meng & Wong (1996, Eq. 4.1 with the iterative scheme of their section 4.1) combines
both:

    r^(t+1) = [ 1/N_a sum_{theta ~ p_-i} l / (s_b l + s_a r^(t)) ]
              / [ 1/N_b sum_{theta ~ p_full} 1 / (s_b l + s_a r^(t)) ],
    s_a = N_a / (N_a + N_b),  s_b = N_b / (N_a + N_b).

Its two limits are the two one-sided estimators: the mean of ``l`` over the refit draws alone
(biased low, in log space, when ``l`` spans orders of magnitude over those draws: the draws that
dominate the mean are rare) and the harmonic mean of ``l`` over the full-data draws (plain
importance sampling, biased high when ``1 / l`` has a heavy tail). The bridge weights each set
where it is good, so it stays accurate when either one-sided estimator fails.

Only ``log l`` at both sets of draws is needed (the ratio of the two unnormalized densities), so the
whole computation is a few passes over two vectors. Everything is in log space.

The Monte Carlo error follows Fruhwirth-Schnatter (2004, Eq. 15) as in the ``bridgesampling``
R package (Gronau et al. 2017): the relative mean-squared error of ``r`` is

    RE^2 = V_a(f_a) / (N_a^eff E_a(f_a)^2) + V_b(f_b) / (N_b^eff E_b(f_b)^2),

with ``f_a = l / (s_b l + s_a r)`` over the refit draws, ``f_b = 1 / (s_b l + s_a r)`` over the
full-data draws and effective sample sizes for autocorrelated (MCMC) draws; the MCSE of ``log r``
is ``RE``.

:func:`stepping_stones` chains the same estimator over a ladder of tempered posteriors
``p_beta ~ p_-i * l^beta`` (``0 = beta_0 < ... < beta_K = 1``), for observations where the two end
points barely overlap.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from arviz_stats.base import array_stats  # the array layer of arviz_stats (no xarray)
from scipy.special import logsumexp

__all__ = ["RatioEstimate", "bridge_log_ratio", "stepping_stones", "log_mean_exp", "effective_size"]


class RatioEstimate(NamedTuple):
    """``log(Z_b / Z_a)`` and its Monte Carlo standard error."""

    log_ratio: float
    mcse: float
    iterations: int = 0


def log_mean_exp(x, axis=None):
    """``log(mean(exp(x)))`` without overflow."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size if axis is None else x.shape[axis]
    return logsumexp(x, axis=axis) - np.log(n)


def effective_size(x):
    """Effective sample size of the mean of ``x`` with shape ``(chains, draws)`` or ``(draws,)``.

    ``arviz_stats``' rank-free ("mean") ESS, which accounts for autocorrelation within and
    disagreement between chains; ``N`` itself for independent draws shows as about ``N``.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    n = x.size
    if np.ptp(x) == 0 or x.shape[1] < 4:
        return float(n)
    ess = float(array_stats.ess(x, chain_axis=0, draw_axis=1, method="mean"))
    return float(np.clip(ess if np.isfinite(ess) else n, 1.0, n))


def _check(name, x):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim not in (1, 2) or x.size < 2:
        raise ValueError(f"{name} must have shape (draws,) or (chains, draws) with at least 2 draws; "
                         f"got shape {x.shape}.")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"{name} has NaN or +inf values; pass finite log-likelihoods (-inf is allowed).")
    return x


def bridge_log_ratio(log_l_a, log_l_b, *, tol=1e-10, max_iter=1000, ess=True) -> RatioEstimate:
    """``log(Z_b / Z_a)`` where ``p_b ~ p_a * l``, from draws of both (optimal bridge, Meng & Wong 1996).

    Parameters
    ----------
    log_l_a : array, shape (draws,) or (chains, draws)
        ``log l`` at draws from ``p_a`` (for LOO: ``log p(y_i | theta)`` at the refit draws).
    log_l_b : array, shape (draws,) or (chains, draws)
        ``log l`` at draws from ``p_b`` (for LOO: at the full-data draws).
    tol, max_iter : float, int
        Convergence of the fixed-point iteration on ``log r``.
    ess : bool
        Use effective sample sizes (autocorrelated draws) in the error; with 2-D input the
        chains are used for it.

    Returns
    -------
    RatioEstimate
        ``log_ratio`` (for LOO: ``elpd_i``), ``mcse`` of it, iterations used.
    """
    la = _check("log_l_a", log_l_a)
    lb = _check("log_l_b", log_l_b)
    a, b = la.ravel(), lb.ravel()
    na, nb = a.size, b.size
    log_sa, log_sb = np.log(na / (na + nb)), np.log(nb / (na + nb))
    # start from the geometric mean of the two one-sided estimates
    finite_b = b[np.isfinite(b)]
    log_r = 0.5 * (log_mean_exp(a) + (-log_mean_exp(-finite_b) if finite_b.size else log_mean_exp(a)))
    if not np.isfinite(log_r):
        log_r = float(np.max(a))
    it = 0
    for it in range(1, max_iter + 1):
        den_a = np.logaddexp(log_sb + a, log_sa + log_r)
        den_b = np.logaddexp(log_sb + b, log_sa + log_r)
        new = log_mean_exp(a - den_a) - log_mean_exp(-den_b)
        if abs(new - log_r) < tol:
            log_r = new
            break
        log_r = new
    den_a = np.logaddexp(log_sb + la, log_sa + log_r)
    den_b = np.logaddexp(log_sb + lb, log_sa + log_r)
    fa = np.exp(la - den_a - np.max(la - den_a))
    fb = np.exp(-den_b - np.max(-den_b))
    neff_a = effective_size(fa) if ess else float(fa.size)
    neff_b = effective_size(fb) if ess else float(fb.size)
    re2 = np.var(fa) / (neff_a * np.mean(fa) ** 2) + np.var(fb) / (neff_b * np.mean(fb) ** 2)
    return RatioEstimate(float(log_r), float(np.sqrt(re2)), it)


def mean_log_ratio(log_l_a, *, ess=True) -> RatioEstimate:
    """``log(Z_b / Z_a) = log E_{p_a}[l]`` from draws of ``p_a`` alone (for LOO: the mean of
    ``p(y_i | theta)`` over a refit's draws), for when no draws of ``p_b`` are at hand (the full-data
    draws came from an approximation, not from the posterior). MCSE by the delta method with the
    effective sample size of ``l``."""
    la = _check("log_l_a", log_l_a)
    f = np.exp(la - np.max(la))
    neff = effective_size(f) if ess else float(f.size)
    return RatioEstimate(float(log_mean_exp(la)), float(np.sqrt(np.var(f) / (neff * np.mean(f) ** 2))), 0)


def stepping_stones(log_l_rungs, betas, **kw) -> RatioEstimate:
    """``log(Z_1 / Z_0)`` for ``p_beta ~ p_0 * l^beta`` from draws at every rung of a ladder.

    Parameters
    ----------
    log_l_rungs : sequence of arrays
        ``log l`` at the draws of each rung ``p_{beta_k}``, one array per ``beta`` (``(draws,)`` or
        ``(chains, draws)``).
    betas : sequence of float
        Increasing, from 0 to 1.
    **kw
        Passed to :func:`bridge_log_ratio` (each pair of neighbouring rungs is bridged).

    Returns
    -------
    RatioEstimate
        The sum of the rung-to-rung log ratios; MCSE added in quadrature (independent fits).
    """
    betas = np.asarray(betas, dtype=np.float64)
    if betas.ndim != 1 or betas.size < 2 or betas[0] != 0.0 or betas[-1] != 1.0 or np.any(np.diff(betas) <= 0):
        raise ValueError(f"betas must increase from 0 to 1; got {betas}.")
    if len(log_l_rungs) != betas.size:
        raise ValueError(f"one array of log l per rung: {betas.size} rungs, {len(log_l_rungs)} arrays.")
    total, var, iters = 0.0, 0.0, 0
    for k in range(betas.size - 1):
        db = betas[k + 1] - betas[k]
        est = bridge_log_ratio(db * np.asarray(log_l_rungs[k]), db * np.asarray(log_l_rungs[k + 1]), **kw)
        total += est.log_ratio
        var += est.mcse**2
        iters += est.iterations
    return RatioEstimate(total, float(np.sqrt(var)), iters)
