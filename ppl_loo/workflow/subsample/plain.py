"""``pl.loo_subsample(data)`` without a model: plain PSIS on the subsample from the ``log_likelihood``
group, the numbers of ``arviz_stats.loo_subsample`` (to 1e-8, ``tests/test_loo_subsample.py``)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.numerics.loo import psis_identity
from ppl_loo.numerics.psis import khat_threshold, psis_tail_length
from ppl_loo.workflow.loo.inputs import MIN_DRAWS, check_finite, get_log_likelihood, r_eff_of
from ppl_loo.workflow.loo.messages import warn_plain
from ppl_loo.workflow.loo.plain import logmeanexp, plain_mcse, pointwise_reasons
from ppl_loo.workflow.subsample.estimate import choose_observations, combine, lpd_of, make_result, select_columns

__all__ = ["plain_subsample", "sample_r_eff"]


def plain_subsample(data, observations, approximation, estimator, var_name, seed, reff, k_threshold):
    """Plain subsampled PSIS-LOO (``approximation="lpd"``; the arguments are checked by the caller)."""
    da = get_log_likelihood(data, var_name)
    if da is None:
        raise ValueError("`data` has no 'log_likelihood' group and no model was given: pass model=... (ppl_loo "
                         "evaluates the log-likelihood), or add the group with pm.compute_log_likelihood.")
    what = f"log_likelihood[{da.name!r}]"
    S = da.sizes["chain"] * da.sizes["draw"]
    if S < MIN_DRAWS:
        raise ValueError(f"{what} has {S} draws: PSIS needs at least {MIN_DRAWS} draws to fit the Pareto tail (use "
                         "hundreds). Sample more draws.")
    ref0 = da.isel(chain=0, draw=0, drop=True)
    n = int(ref0.size)
    approx_all = lpd_of(da)
    check_finite(approx_all, f"the lpd approximation from {what}", "Recompute the log-likelihood; NaN/inf are not "
                 "allowed.")
    idx, counts = choose_observations(observations, n, estimator, seed, approx_all)
    sub = select_columns(da, idx)
    ll = np.asarray(sub.values, dtype=np.float64).reshape(S, len(idx))
    check_finite(ll, f"{what} at the subsample", "Recompute the log-likelihood; NaN/inf are not allowed.")
    r_eff = sample_r_eff(data, S, reff, what)
    elpd_i, k, lw = (np.asarray(a) for a in psis_identity(jnp.asarray(-ll.T), jnp.asarray(ll.T), r_eff))
    n_chains = int(data["posterior"].sizes.get("chain", 1))
    mcse = plain_mcse(lw, ll, -ll.T, r_eff, n_chains)
    p_i = logmeanexp(ll) - elpd_i
    k_threshold = khat_threshold(S) if k_threshold is None else float(k_threshold)
    doubtful, reason = pointwise_reasons(k, k_threshold, -ll.T, elpd_i)
    if doubtful.any():
        full_k, full_d, full_r = np.full(n, np.nan), np.zeros(n, bool), np.full(n, "", dtype=object)
        full_k[idx], full_d[idx], full_r[idx] = k, doubtful, reason
        warn_plain(ref0.rename(da.name), full_k, full_d, full_r, k_threshold)
    elpd, sub_se, se, p = combine(estimator, elpd_i, p_i, approx_all, idx, counts, n)
    log_weights = xr.Dataset({da.name: sub.copy(data=lw.T.reshape(sub.shape))})
    pointwise = {"elpd_i": (elpd_i, np.nan), "pareto_k": (k, np.nan), "p_loo_i": (p_i, np.nan),
                 "pareto_k_psis": (k, np.nan), "mcse_elpd_i": (mcse, np.nan),
                 "transform": (np.where(doubtful, "failed", "psis"), ""), "doubtful": (doubtful, False),
                 "reason": (reason.astype(str), ""), "searched": (np.zeros(len(idx), bool), False)}
    summary = dict(elpd=elpd, se=se, subsampling_se=sub_se, p=p, n_samples=S, warning=bool(doubtful.any()),
                   good_k=k_threshold, log_weights=log_weights, estimator=estimator, approximation=approximation,
                   var_name=da.name)
    return make_result(ref0, idx, counts, approx_all, pointwise, summary)


def sample_r_eff(data, S, reff, what):
    """``reff`` or the posterior's (as ``arviz_stats``), checked to leave a Pareto tail of 5 draws."""
    r_eff = r_eff_of(data, S) if reff is None else float(reff)
    if not (np.isfinite(r_eff) and r_eff > 0):
        raise ValueError(f"the relative efficiency r_eff of the posterior draws is {r_eff} (the ESS could not be "
                         "computed). Pass reff=1.0 (or your estimate), or sample more draws per chain.")
    if psis_tail_length(S, r_eff) < 5:
        raise ValueError(f"{what}: {S} draws with reff={r_eff:.3g} leave fewer than 5 draws for the Pareto tail. "
                         "Sample more draws.")
    return r_eff
