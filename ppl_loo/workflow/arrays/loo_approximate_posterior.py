"""``pl.loo_approximate_posterior``: R ``loo``'s ``loo_approximate_posterior``."""

from __future__ import annotations

import dataclasses

import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.psis import check_conventions, psis_tail_length
from ppl_loo.workflow.arrays.log_lik_array import log_lik_array
from ppl_loo.workflow.loo.inputs import MIN_DRAWS, stack_draws
from ppl_loo.workflow.loo.plain import check_k_threshold, logmeanexp, plain_loo_result, psis_columns

__all__ = ["loo_approximate_posterior"]


def _log_density(values, name, S):
    """``values`` as ``(S,)`` float64: one log density per draw, ``(S,)`` or ``(chain, draw)``, finite."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name}: give one log density per draw, (S,) or (chain, draw); got "
                        f"{type(values).__name__}.") from err
    if x.ndim not in (1, 2) or x.size != S:
        raise ValueError(f"{name} has shape {x.shape} and log_lik has {S} draws: give one log density per draw, (S,) "
                         "or (chain, draw) in the order of log_lik's draws.")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} has {int(np.sum(~np.isfinite(x)))} NaN or infinite value(s): the log densities at "
                         "the draws must be finite.")
    return x.ravel()


@uses_x64
def loo_approximate_posterior(log_lik, log_p, log_q, *, k_threshold=None, conventions="arviz"):
    """PSIS-LOO for draws from an approximation of the posterior, as R ``loo``'s ``loo_approximate_posterior``.

    The draws come from ``q`` (a Laplace or variational approximation), not from the posterior ``p``; the LOO
    importance ratios of observation ``i`` are ``-log_lik_i + log_p - log_q`` (Magnusson et al.
    2019), smoothed by PSIS with ``r_eff = 1`` (independent draws). With the model,
    ``pl.loo(data, model, log_q=...)`` computes ``log_p`` itself and adapts the proposals.

    Parameters
    ----------
    log_lik : numpy.ndarray, xarray.DataArray or DataTree
        The log-likelihood ``(chain, draw, *obs)`` or ``(draw, obs)`` at the draws of ``q`` (a DataTree: its
        ``log_likelihood`` group).
    log_p : array_like, (S,) or (chain, draw)
        The log density of the posterior at the draws, up to a constant (the log prior plus the log-likelihood of
        all the data).
    log_q : array_like, (S,) or (chain, draw)
        The log density of the approximation at the draws, up to a constant (R's ``log_g``).
    k_threshold : float, optional
        As :func:`ppl_loo.loo`'s; default ``min(1 - 1/log10(S), 0.7)``.
    conventions : {"arviz", "R"}, default "arviz"
        The Pareto tail length's rounding (:func:`ppl_loo.psis`).

    Returns
    -------
    LooResult
        As ``pl.loo(log_lik)``'s, with ``approx_posterior`` True and ``n_eff_i``.

    Raises
    ------
    ValueError
        ``log_p`` or ``log_q`` not one finite value per draw, non-finite log-likelihood values, too few draws.
    """
    conventions = check_conventions(conventions)
    k_threshold = check_k_threshold(k_threshold)
    da = log_lik_array(log_lik, "log_lik")
    ll = stack_draws(da)
    S = ll.shape[0]
    correction = _log_density(log_p, "log_p", S) - _log_density(log_q, "log_q", S)
    if S < MIN_DRAWS or psis_tail_length(S, 1.0, conventions) < 5:
        raise ValueError(f"log_lik has {S} draws: PSIS needs at least 5 draws in the Pareto tail (use hundreds).")
    log_ratios = (-ll + correction[:, None]).T
    elpd, k, _, mcse, n_eff = psis_columns(ll, log_ratios, 1.0, 1, conventions)
    res = plain_loo_result(da, k_threshold, S, elpd, k, mcse, logmeanexp(ll), log_ratios,
                           lambda: np.max(np.abs(ll)), n_eff=n_eff)
    return dataclasses.replace(res, approx_posterior=True)
