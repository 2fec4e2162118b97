"""Mixture importance sampling for LOO (Silva & Zanella 2023), on arrays.

Draws ``theta_s`` from the mixture of all LOO posteriors,

    q_mix(theta) ∝ p(theta | y) * sum_j 1 / p(y_j | theta),

give every ``elpd_i`` with finite variance (their Theorem 1): with ``l_s = logsumexp_j(-log p(y_j | theta_s))``,
the posterior's weights are ``a_s = exp(-l_s)`` and observation ``i``'s LOO weights are
``b_is = exp(-log p(y_i | theta_s) - l_s)``, so that

    elpd_i = log p(y_i | y_-i) = logsumexp_s(-l_s) - logsumexp_s(-log p(y_i | theta_s) - l_s).

Both weights are bounded (``b_is <= 1`` and ``a_s <= min_j p(y_j | theta_s)``), the reason the estimator has
finite variance where plain PSIS (draws from the posterior) has none. The same estimator as
``arviz_stats.loo(mixture=True)`` (``tests/test_mixture.py`` checks the identity); here with its Monte Carlo SE,
from the delta method for the ratio of the two means and the effective sample size of the MCMC draws
(``arviz_stats``' ``ess``, so the autocorrelation within and the disagreement between the chains count).

Bounded is not light-tailed at a finite sample size: where one observation's ``1 / p(y_j | theta)`` dominates the
mixture (a gross outlier), the mixture draws sit near the posterior without it, and the weights that map them back
to the full posterior (``a_s``) and to every other observation's LOO posterior (``b_is``) have a long right tail
over the draws there are: the means ``A`` and ``B_i`` are then usually too small, every estimate off by several
delta-method SEs. The Pareto k-hat of the weights each estimate uses (the larger of ``a``'s and ``b_i``'s,
:func:`ppl_loo.numerics.psis.psislw`) says so, as it does for PSIS; above :data:`HEAVY_TAIL_K` (the weights'
variance is infinite in the fitted tail) the delta method's covariance of ``A`` and ``B_i``, estimated from those
draws, is not trusted: the SE is at least the sum of the two means' relative SEs (the bound without it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from arviz_stats.base import array_stats
from scipy.special import logsumexp

from ppl_loo.jax_settings import x64
from ppl_loo.numerics.psis import psislw

__all__ = ["MixtureEstimate", "mixture_log_weights", "mixture_linearization", "mixture_loo", "weights_khat",
           "HEAVY_TAIL_K"]

#: above this Pareto k-hat of its weights an estimate's SE does not rely on the delta method's covariance of the two
#: means (the fitted tail has no finite variance)
HEAVY_TAIL_K = 0.5
#: at most this many log weights (draws x columns) per call of the k-hat fit
_KHAT_VALUES = 2**23


class MixtureEstimate(NamedTuple):
    """Per observation: ``elpd`` (the mixture-IS estimate), ``mcse`` (its Monte Carlo SE), ``ess`` (the MCMC
    effective sample size of the ratio's linearization) and ``ess_loo`` (the importance-sampling effective sample
    size ``(sum b)^2 / sum b^2`` of its LOO weights), ``khat`` (the Pareto k-hat of the weights it uses: the larger
    of its LOO weights' and the posterior's); ``ess_posterior`` and ``khat_posterior``: those of the posterior's
    weights ``a_s`` (how well the mixture draws cover the posterior itself). The delta method cannot see a
    normalizer estimated from a handful of draws: where one observation's LOO posterior dominates the mixture (a
    gross outlier), the posterior's weights can have an ESS of 2 of 4,000 draws and every estimate is off by nats
    with a small SE (``tests/test_mixture.py``); the importance-sampling ESSs and the k-hats are the diagnostics for
    that."""

    elpd: np.ndarray
    mcse: np.ndarray
    ess: np.ndarray
    ess_posterior: float
    ess_loo: np.ndarray = None
    khat: np.ndarray = None
    khat_posterior: float = float("nan")


def mixture_log_weights(ll):
    """``l_s = logsumexp_j(-ll_sj)`` of the log-likelihood ``ll`` ``(S, n)`` at mixture draws: ``-l_s`` is the
    log weight of the posterior, ``-ll_si - l_s`` that of observation ``i``'s LOO posterior."""
    ll = np.asarray(ll, dtype=np.float64)
    if ll.ndim != 2:
        raise ValueError(f"the log-likelihood at the mixture draws must have shape (draws, observations); got "
                         f"{ll.shape}.")
    return logsumexp(-ll, axis=1)


def _ess_columns(f, n_chains):
    """Effective sample size of the mean of every column of ``f`` ``(S, m)`` (chain-major draws)."""
    S, m = f.shape
    if n_chains < 1 or S % n_chains or S // n_chains < 4:
        return np.full(m, float(S))
    x = f.reshape(n_chains, S // n_chains, m)
    const = np.ptp(x.reshape(S, m), axis=0) == 0
    ess = np.asarray(array_stats.ess(x, chain_axis=0, draw_axis=1, method="mean"), dtype=np.float64).reshape(m)
    ess = np.where(np.isfinite(ess) & ~const, ess, S)
    return np.clip(ess, 1.0, S)


def mixture_loo(ll, n_chains=1):
    """Mixture-IS LOO estimates of every observation from the log-likelihood at mixture draws.

    Parameters
    ----------
    ll : array (S, n)
        ``log p(y_i | theta_s)`` at draws of ``q_mix``, chain-major (all draws of chain 0 first).
    n_chains : int
        Chains the draws come from (for the effective sample size).

    Returns
    -------
    MixtureEstimate
        ``elpd`` as in the module docstring. ``mcse``: with ``A = mean(a)``, ``B_i = mean(b_i)``, the
        linearization ``f_is = a_s / A - b_is / B_i`` of ``log A - log B_i`` gives
        ``sd(f_i) / sqrt(ESS(f_i))``; the reported SE is the larger of that and the standard error of the
        per-chain estimates (the adaptive search's ``se`` the same way): the delta method alone was 1.3 times too
        small over repeated runs on the outlier regression of ``tests/linear_models.py``, where the posterior's
        weights ``a_s`` have an ESS of a few hundred of 4,000 draws.
    """
    ll = np.asarray(ll, dtype=np.float64)
    log_a, log_A, log_B, f = _terms(ll)
    ess = _ess_columns(f, int(n_chains))
    mcse = np.maximum(np.std(f, axis=0, ddof=1) / np.sqrt(ess), _chain_se(ll, int(n_chains)))
    log_b = -ll + log_a[:, None]
    k_a = float(weights_khat(log_a[:, None])[0])
    k_b = weights_khat(log_b)
    khat = np.fmax(k_a, np.where(np.isneginf(k_b), np.nan, k_b))
    heavy = ~(khat <= HEAVY_TAIL_K)  # NaN (no tail could be fitted) counts as heavy
    if np.any(heavy):  # the bound without the covariance: sd(log A - log B_i) <= sd(log A) + sd(log B_i)
        a = np.exp(log_a - log_A)[:, None]
        b = np.exp(log_b[:, heavy] - log_B[None, heavy])
        se_a = np.std(a, axis=0, ddof=1) / np.sqrt(_ess_columns(a, int(n_chains)))
        se_b = np.std(b, axis=0, ddof=1) / np.sqrt(_ess_columns(b, int(n_chains)))
        mcse[heavy] = np.maximum(mcse[heavy], se_a + se_b)
    return MixtureEstimate(log_A - log_B, mcse, ess, _is_ess(log_a[:, None])[0], _is_ess(log_b), khat, k_a)


def weights_khat(log_w):
    """The Pareto k-hat of the right tail of every column of the log weights ``log_w`` ``(S, m)``
    (:func:`ppl_loo.numerics.psis.psislw`'s, tail length ``3 sqrt(S)``): ``-inf`` for weights without a tail (all
    equal), NaN where too few draws to fit one."""
    log_w = np.asarray(log_w, dtype=np.float64)
    S, m = log_w.shape
    block = max(1, min(m, _KHAT_VALUES // max(S, 1)))  # columns per call: bounded memory, one compilation per shape
    out = np.empty(m)
    try:
        with x64():
            for start in range(0, m, block):
                out[start:start + block] = np.asarray(psislw(log_w[:, start:start + block].T)[1], dtype=np.float64)
    except ValueError:  # fewer than 5 draws in the tail
        return np.full(m, np.nan)
    return out


def mixture_linearization(ll):
    """``f_is = a_s / A - b_is / B_i`` ``(S, n)``: the linearization of ``log A - log B_i`` whose mean gives the
    estimate's Monte Carlo error (and, per chain, its R-hat)."""
    return _terms(np.asarray(ll, dtype=np.float64))[3]


def _terms(ll):
    """``log a`` ``(S,)``, ``log A``, ``log B`` ``(n,)`` and the linearization ``f`` ``(S, n)``."""
    l_s = mixture_log_weights(ll)
    if not np.all(np.isfinite(l_s)):
        bad = int(np.sum(~np.isfinite(l_s)))
        raise ValueError(f"the log-likelihood at {bad} mixture draw(s) is not finite for some observation (NaN, or "
                         "-inf where an observation is impossible): the mixture weights need every p(y_j | theta) > 0.")
    S = ll.shape[0]
    log_a = -l_s
    log_b = -ll - l_s[:, None]
    log_A = logsumexp(log_a) - np.log(S)
    log_B = logsumexp(log_b, axis=0) - np.log(S)
    f = np.exp(log_a - log_A)[:, None] - np.exp(log_b - log_B[None, :])
    return log_a, log_A, log_B, f


def _chain_se(ll, n_chains):
    """Standard error of the mean of the per-chain estimates (0 with fewer than 2 chains of 10 draws)."""
    S, n = ll.shape
    if n_chains < 2 or S % n_chains or S // n_chains < 10:
        return np.zeros(n)
    per_chain = np.stack([_terms(part)[2] for part in np.split(ll, n_chains)])  # log B per chain
    log_A = np.stack([_terms(part)[1] for part in np.split(ll, n_chains)])
    elpd_c = log_A[:, None] - per_chain
    return np.std(elpd_c, axis=0, ddof=1) / np.sqrt(n_chains)


def _is_ess(log_w):
    """Importance-sampling effective sample size ``(sum w)^2 / sum w^2`` of every column of ``log_w`` ``(S, m)``."""
    w = np.exp(log_w - np.max(log_w, axis=0, keepdims=True))
    return np.sum(w, axis=0) ** 2 / np.sum(w * w, axis=0)
