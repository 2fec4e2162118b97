"""Plain PSIS-LOO: on every observation before the search, and the whole answer without a model
(``pl.loo(data)``, as ``arviz_stats.loo``)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import xarray as xr
from scipy.special import logsumexp

from ppl_loo.numerics.loo import psis_identity
from ppl_loo.numerics.psis import khat_threshold
from ppl_loo.workflow.inputs import check_finite, get_log_likelihood, r_eff_of, stack_draws
from ppl_loo.workflow.result import LooResult

__all__ = ["ADAPT_K", "ADAPT_ALL_N", "Plain", "plain_psis", "flag_observations", "plain_psis_loo", "logmeanexp",
           "psis_mcse", "chain_se_psis"]

#: plain PSIS is adapted from this k-hat on (its variance is infinite above 1/2)
ADAPT_K = 0.5
#: ``adapt="auto"`` examines every observation of data sets up to this size
ADAPT_ALL_N = 100


class Plain(NamedTuple):
    """Plain PSIS-LOO of every observation (``n`` entries each; ``lw`` is ``(n, S)``)."""

    log_ratios: np.ndarray  # (n, S) log p(theta_s | y_-i) / q(theta_s) up to a constant
    elpd: np.ndarray
    k: np.ndarray
    lw: np.ndarray  # smoothed log weights
    mcse: np.ndarray
    n_eff: np.ndarray
    influence: np.ndarray  # posterior variance of log p(y_i | theta)


def plain_psis(draws) -> Plain:
    """:class:`Plain` of :class:`~ppl_loo.workflow.draws.LooDraws` (Eq. 10 with the identity map;
    Eq. 13 for draws from an approximation)."""
    ll, r_eff = draws.ll, draws.r_eff
    log_ratios = (-ll + (np.asarray(draws.logp0) - np.asarray(draws.log_q0))[:, None]).T  # (n, S)
    elpd, k, lw = (np.asarray(a) for a in psis_identity(jnp.asarray(log_ratios), jnp.asarray(ll.T), r_eff))
    mcse = np.maximum(np.asarray(psis_mcse(lw, ll.T, r_eff)), chain_se_psis(log_ratios, ll, draws.n_chains))
    n_eff = r_eff / np.sum(np.exp(2 * lw), axis=1)
    return Plain(log_ratios, elpd, k, lw, mcse, n_eff, np.var(ll, axis=0, ddof=1))


def flag_observations(plain: Plain, n_draws, k_threshold, adapt="auto", influence_threshold=None):
    """The observations the adaptive search examines (a boolean mask).

    A k-hat below the threshold is necessary, not sufficient: plain PSIS is adapted (and checked)
    from k = 0.5 on, where its variance is already infinite, and wherever the log-likelihood varies
    so much over the posterior (influence above ``log(S / 100)`` by default) that the plain weights
    can miss the LOO posterior. ``adapt="all"`` (or ``"auto"`` with at most :data:`ADAPT_ALL_N`
    observations) examines every one.
    """
    if adapt not in ("auto", "all", "flagged"):
        raise ValueError(f"adapt={adapt!r}: use 'auto', 'all' or 'flagged'.")
    n = plain.k.shape[0]
    if adapt == "all" or (adapt == "auto" and n <= ADAPT_ALL_N):
        return np.ones(n, bool)
    if influence_threshold is None:
        influence_threshold = math.log(max(n_draws / 100.0, 1.0 + 1e-9))
    return (plain.k > min(ADAPT_K, k_threshold)) | (plain.influence > influence_threshold) | ~np.isfinite(plain.k)


def logmeanexp(ll):
    """``log mean_s exp(ll[s, i])`` for every column ``i`` (the in-sample ``lpd_i``)."""
    m = np.max(ll, axis=0)
    return m + np.log(np.mean(np.exp(ll - m), axis=0))


def psis_mcse(lw, ll, r_eff):
    """Delta-method Monte Carlo SE of self-normalized importance sampling of ``log E[l_i]``, ``(n,)``."""
    w = np.exp(lw)
    m = np.max(ll, axis=1, keepdims=True)
    lik = np.exp(ll - m)
    est = np.sum(w * lik, axis=1)
    var = np.sum(w**2 * (lik - est[:, None]) ** 2, axis=1) / r_eff
    return np.sqrt(var) / est


def chain_se_psis(log_ratios, ll, n_chains):
    """Standard error of plain importance sampling from the spread of its per-chain estimates, ``(n,)``.

    The delta-method MCSE sees the weights of these draws only; the spread over chains of the raw
    (unsmoothed) estimates also sees the Monte Carlo error of the draws themselves: a chain that
    visited the tail of ``1 / p(y_i | theta)`` and one that did not. 0 with one chain.
    """
    n, S = log_ratios.shape
    if n_chains < 2 or S % n_chains:
        return np.zeros(n)
    lr = log_ratios.reshape(n, n_chains, -1)
    per = logsumexp(lr + ll.T.reshape(n, n_chains, -1), axis=-1) - logsumexp(lr, axis=-1)
    sd = np.std(per, axis=1, ddof=1)
    return np.where(np.isfinite(sd), sd, 0.0) / np.sqrt(n_chains)


def plain_psis_loo(data, var_name, k_threshold):
    """``model=None``: plain PSIS-LOO from the log_likelihood group (as ``arviz_stats.loo``).

    Computed with the engine's own PSIS, not by calling ``arviz_stats.loo``: a doubtful observation of an
    adaptive result keeps exactly this plain value (to 1e-12, ``tests/test_engine_selection.py``), and
    arviz_stats' PSIS differs from it by about 1e-10 relative; the two agree to 1e-8
    (``tests/test_jax_settings.py``, ``tests/test_ovarian_benchmark.py``).
    """
    da = get_log_likelihood(data, var_name)
    if da is None:
        raise ValueError(
            "`data` has no 'log_likelihood' group and no model was given. Either pass model=... "
            "(ppl_loo computes the log-likelihood), or add it with pm.compute_log_likelihood."
        )
    ll = stack_draws(da)
    check_finite(ll, f"log_likelihood[{da.name!r}]", "Recompute the log-likelihood; NaN/inf are not allowed.")
    S, n = ll.shape
    r_eff = r_eff_of(data, S)
    elpd_i, k, lw = (np.asarray(a) for a in psis_identity(jnp.asarray(-ll.T), jnp.asarray(ll.T), r_eff))
    k_threshold = khat_threshold(S) if k_threshold is None else float(k_threshold)
    ref0 = da.isel(chain=0, draw=0, drop=True)

    def make(values, name):
        return xr.DataArray(np.asarray(values).reshape(ref0.shape), dims=ref0.dims, coords=ref0.coords, name=name)

    n_chains = int(data["posterior"].sizes.get("chain", 1)) if "posterior" in data.children else 1
    mcse = np.maximum(psis_mcse(lw, ll.T, r_eff), chain_se_psis(-ll.T, ll, n_chains))
    p_loo_i = logmeanexp(ll) - elpd_i
    return LooResult(
        elpd=float(elpd_i.sum()), se=float(np.sqrt(n * np.var(elpd_i, ddof=1))) if n > 1 else 0.0,
        p=float(p_loo_i.sum()), n_samples=S, n_data_points=n, scale="log", warning=bool(np.any(k > k_threshold)),
        good_k=k_threshold, elpd_i=make(elpd_i, "elpd_i"), pareto_k=make(k, "pareto_k"),
        p_loo_i=make(p_loo_i, "p_loo_i"), pareto_k_psis=make(k, "pareto_k_psis"),
        transform=make(np.where(k > k_threshold, "failed", "psis"), "transform"),
        hbar_used=make(np.full(n, np.nan), "hbar_used"), mcse_elpd_i=make(mcse, "mcse_elpd_i"),
        doubtful=make(k > k_threshold, "doubtful"), var_name=da.name,
    )
