"""Plain PSIS-LOO: on every observation before the search, and the whole answer without a model
(``pl.loo(data)``, as ``arviz_stats.loo``).

The Monte Carlo SE of ``elpd_i`` (:func:`plain_mcse`) is the delta-method SE of the self-normalized estimate
(:func:`psis_mcse`, R ``loo``'s formula up to its log-normal form), replaced by the spread of the separate chains'
estimates (:func:`chain_se_psis`) only where that spread is larger than the chains' own noise allows: beyond the
99% quantile of ``sqrt(chi2(C - 1) / (C - 1))`` times the delta-method SE for ``C`` chains
(:func:`combine_chain_se`). Taking the larger of the two everywhere reported an SE 15-21% above the true error on
re-drawn posteriors with mixing chains (``benchmarks/mcse_calibration.py``): with 4 chains the spread is an estimate
on 3 degrees of freedom, above the delta-method SE about half of the time by chance alone. Where a chain has not
mixed (one chain shifted), the spread is well beyond that level and the reported SE is the spread, as before.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import xarray as xr
from scipy.special import logsumexp
from scipy.stats import chi2

from ppl_loo.numerics.loo import psis_identity
from ppl_loo.numerics.psis import check_conventions, khat_threshold, psis_tail_length
from ppl_loo.workflow.loo.inputs import (
    MIN_DRAWS,
    check_finite,
    get_log_likelihood,
    r_eff_of,
    stack_draws,
    stan_labelled,
    with_stan_labels,
)
from ppl_loo.workflow.loo.messages import warn_plain
from ppl_loo.workflow.loo.result import LooResult

__all__ = ["ADAPT_K", "AUTO_SMALL_N", "AUTO_SMALL_K", "Plain", "plain_psis", "flag_observations", "plain_psis_loo",
           "logmeanexp", "psis_mcse", "chain_se_psis", "combine_chain_se", "plain_mcse", "CHAIN_SE_LEVEL",
           "stable_se", "stable_sum", "explain_k", "pointwise_reasons",
           "check_k_threshold", "check_reff", "psis_columns", "plain_log_likelihood", "plain_loo_checks",
           "posterior_chains", "plain_loo_result", "NON_FINITE_FIX", "relative_eff", "relative_eff_columns"]

#: plain PSIS is adapted from this k-hat on (its variance is infinite above 1/2)
ADAPT_K = 0.5
#: ``adapt="auto"`` examines data sets up to this size from a lower k-hat on (:data:`AUTO_SMALL_K`)
AUTO_SMALL_N = 100
#: ``adapt="auto"`` on at most :data:`AUTO_SMALL_N` observations examines every observation from this k-hat on (and
#: every influential one): below it plain PSIS agrees with exact LOO within its Monte Carlo error, and examining
#: every observation costs many times as much for no gain in accuracy (``docs/method.md``, section 2).
AUTO_SMALL_K = 0.3
#: the spread over chains raises the Monte Carlo SE of plain PSIS only beyond this quantile of its sampling
#: distribution under chains that agree (:func:`combine_chain_se`)
CHAIN_SE_LEVEL = 0.99
#: what to do about NaN or infinite values of a stored log-likelihood
NON_FINITE_FIX = "Recompute the log-likelihood; NaN/inf are not allowed."


class Plain(NamedTuple):
    """Plain PSIS-LOO of every observation (``n`` entries each; ``lw`` is ``(n, S)``)."""

    log_ratios: np.ndarray  # (n, S) log p(theta_s | y_-i) / q(theta_s) up to a constant
    elpd: np.ndarray
    k: np.ndarray
    lw: np.ndarray  # smoothed log weights
    mcse: np.ndarray
    n_eff: np.ndarray
    influence: np.ndarray  # posterior variance of log p(y_i | theta)


def psis_columns(ll, log_ratios, r_eff, n_chains, conventions="arviz"):
    """``(elpd, k, lw, mcse, n_eff)`` of plain PSIS for the columns of ``ll`` ``(S, m)`` with log ratios
    ``(m, S)``; one column's values do not depend on the others (the chunked path,
    :mod:`ppl_loo.workflow.loo.chunked`, gives the same numbers).

    ``r_eff``: one number, one per column ``(m,)``, or None: each column's own, :func:`relative_eff_columns` of
    ``ll`` (R ``loo``'s ``relative_eff``); ``conventions``: :func:`~ppl_loo.numerics.psis.psislw`'s.
    """
    if r_eff is None:  # a constant column has no ESS (NaN): its weights are uniform whatever the tail length
        with np.errstate(invalid="ignore", divide="ignore"):
            r_eff = relative_eff_columns(ll, n_chains)
        r_eff = np.where(np.isfinite(r_eff) & (r_eff > 0), r_eff, 1.0)
    elif np.ndim(r_eff):
        r_eff = np.asarray(r_eff, dtype=np.float64)
    elpd, k, lw = (np.asarray(a) for a in psis_identity(jnp.asarray(log_ratios), jnp.asarray(ll.T), r_eff,
                                                        conventions))
    mcse = plain_mcse(lw, ll, log_ratios, r_eff, n_chains)
    n_eff = r_eff / np.sum(np.exp(2 * lw), axis=1)
    return elpd, k, lw, mcse, n_eff


def relative_eff_columns(ll, n_chains):
    """R ``loo``'s ``relative_eff(exp(ll), chain_id)`` of the columns of ``ll`` ``(S, m)`` (chain-major draws):
    ``ess_mean(exp(ll[:, i])) / S`` per column, the split-chain ESS of the likelihood (``posterior::ess_mean``,
    ``arviz_stats``' ``ess(method="mean")``), computed on ``exp(ll - max)`` (the ESS does not depend on the scale,
    and the likelihood would overflow or underflow). ``(m,)``."""
    from arviz_stats.base import array_stats

    S, m = ll.shape
    if S % n_chains:
        raise ValueError(f"relative_eff: {S} draws do not split into {n_chains} chains of equal length")
    lik = np.exp(ll - np.max(ll, axis=0))
    ess = array_stats.ess(lik.T.reshape(m, n_chains, S // n_chains), chain_axis=-2, draw_axis=-1, method="mean")
    return np.asarray(ess, dtype=np.float64) / S


def relative_eff(data, var_name=None):
    """Relative efficiency of each observation's likelihood draws, as R ``loo``'s ``relative_eff``.

    R's workflow passes ``relative_eff(exp(log_lik), chain_id)`` to ``loo``: one ``r_eff`` per observation, the
    effective sample size of ``p(y_i | theta_s)`` over the draws (``posterior::ess_mean``, the split-chain ESS of the
    mean) divided by the number of draws ``S``. ``pl.loo(data, reff=pl.relative_eff(data))`` uses these values (and
    ``pl.loo(data, compute={"conventions": "R"})`` computes them itself); ``arviz_stats.loo`` and ``pl.loo``'s
    default use one value for every observation, the mean ESS of the posterior's parameters over ``S``.

    Parameters
    ----------
    data : DataTree
        With a ``log_likelihood`` group (draws over ``chain`` and ``draw``).
    var_name : str, optional
        The log-likelihood variable (needed when there are several).

    Returns
    -------
    xarray.DataArray
        ``r_eff`` over the observation dims of the log-likelihood variable (NaN where the likelihood is constant
        over the draws: its ESS is not defined).

    Raises
    ------
    ValueError
        No ``log_likelihood`` group, or non-finite log-likelihood values (the message names the variable).
    """
    da = plain_log_likelihood(data, var_name)
    ll = stack_draws(da)
    check_finite(ll, f"log_likelihood[{da.name!r}]", NON_FINITE_FIX)
    ref0 = da.isel(chain=0, draw=0, drop=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = relative_eff_columns(ll, int(da.sizes["chain"]))
    return xr.DataArray(values.reshape(ref0.shape), dims=ref0.dims, coords=ref0.coords, name="r_eff")


def plain_psis(draws) -> Plain:
    """:class:`Plain` of :class:`~ppl_loo.workflow.loo.draws.LooDraws` (Eq. 10 with the identity map;
    Eq. 13 for draws from an approximation)."""
    ll, r_eff = draws.ll, draws.r_eff
    log_ratios = (-ll + (np.asarray(draws.logp0) - np.asarray(draws.log_q0))[:, None]).T  # (n, S)
    elpd, k, lw, mcse, n_eff = psis_columns(ll, log_ratios, r_eff, draws.n_chains)
    return Plain(log_ratios, elpd, k, lw, mcse, n_eff, np.var(ll, axis=0, ddof=1))


def flag_observations(plain: Plain, n_draws, k_threshold, adapt="auto", influence_threshold=None, n_total=None):
    """The observations the adaptive search examines (a boolean mask).

    A k-hat below the threshold is necessary, not sufficient: plain PSIS is adapted (and checked)
    from k = 0.5 on, where its variance is already infinite, and wherever the log-likelihood varies
    so much over the posterior (influence above ``log(S / 100)`` by default) that the plain weights
    can miss the LOO posterior. ``adapt="auto"`` with at most :data:`AUTO_SMALL_N` observations
    (``n_total``, default the number of columns of ``plain``) examines them from k = 0.3 on
    (:data:`AUTO_SMALL_K`); ``adapt="all"`` examines every one.
    """
    if adapt not in ("auto", "all", "flagged"):
        raise ValueError(f"adapt={adapt!r}: use 'auto', 'all' or 'flagged'.")
    n = plain.k.shape[0] if n_total is None else int(n_total)
    if adapt == "all":
        return np.ones(plain.k.shape[0], bool)
    if influence_threshold is None:
        influence_threshold = math.log(max(n_draws / 100.0, 1.0 + 1e-9))
    k_from = AUTO_SMALL_K if adapt == "auto" and n <= AUTO_SMALL_N else ADAPT_K
    return (plain.k > min(k_from, k_threshold)) | (plain.influence > influence_threshold) | ~np.isfinite(plain.k)


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
    with np.errstate(divide="ignore", invalid="ignore"):  # est underflows: one draw holds all the weight
        out = np.sqrt(var) / est
    return np.where(np.isnan(out), np.inf, out)


def combine_chain_se(delta_se, chain_se, n_chains, level=CHAIN_SE_LEVEL):
    """The Monte Carlo SE from the delta-method SE and the spread over chains, ``(n,)``.

    The spread ``chain_se`` where it is beyond what chains that agree give by chance, else ``delta_se``: with ``C =
    n_chains`` chains that agree, ``chain_se**2 / delta_se**2`` is about ``chi2(C - 1) / (C - 1)``, and the spread
    counts from ``c`` times the delta-method SE on, ``c**2`` that distribution's ``level`` quantile (``c = 1.94``
    for 4 chains, 2.58 for 2, 1.62 for 8). Where it counts, the value is the spread itself (as the larger of the
    two would be): chains that have not mixed keep the whole of it. One chain: the delta-method SE.
    """
    delta_se = np.asarray(delta_se, dtype=np.float64)
    if n_chains < 2:
        return delta_se
    c = np.sqrt(chi2.ppf(level, n_chains - 1) / (n_chains - 1))
    chain_se = np.asarray(chain_se, dtype=np.float64)
    return np.where(chain_se > c * delta_se, chain_se, delta_se)


def plain_mcse(lw, ll, log_ratios, r_eff, n_chains):
    """The reported Monte Carlo SE of plain PSIS-LOO's ``elpd_i``, ``(n,)``: :func:`combine_chain_se` of the
    delta-method SE (:func:`psis_mcse` of the smoothed log weights ``lw`` ``(n, S)``) and the spread over chains
    (:func:`chain_se_psis` of the raw ``log_ratios`` ``(n, S)``); ``ll`` is ``(S, n)``."""
    return combine_chain_se(np.asarray(psis_mcse(lw, ll.T, r_eff)), chain_se_psis(log_ratios, ll, n_chains),
                            n_chains)


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


def stable_se(elpd_i):
    """``sqrt(n var(elpd_i))`` computed on scaled values, finite for any finite ``elpd_i`` (even near 1e308)."""
    x = np.asarray(elpd_i, dtype=np.float64).ravel()
    n = x.size
    if n < 2:
        return 0.0
    scale = float(np.max(np.abs(x)))
    if not np.isfinite(scale):
        return float("nan")
    if scale == 0.0:
        return 0.0
    return float(scale * np.sqrt(n) * np.std(x / scale, ddof=1))


def stable_sum(x):
    """``sum(x)`` of finite values, scaled so that partial sums do not overflow where the total does not."""
    x = np.asarray(x, dtype=np.float64).ravel()
    scale = float(np.max(np.abs(x))) if x.size else 0.0
    if scale == 0.0 or not np.isfinite(scale):
        return float(np.sum(x))
    return float(scale * np.sum(x / scale))


def explain_k(log_ratios, k):
    """Why k-hat is NaN or infinite for one observation's log ratios ``(S,)`` (a sentence)."""
    r = np.asarray(log_ratios, dtype=np.float64)
    _, counts = np.unique(r, return_counts=True)
    tie = counts.max() / r.size
    head = f"k-hat {k} could not be estimated"
    if tie >= 0.5:
        return (f"{head}: {100 * tie:.0f}% of the draws tie at the same log-likelihood (a saturated or clipped "
                "likelihood), so the tail of the importance ratios has no Pareto shape")
    top = np.sort(r)[::-1]
    m = max(5, min(r.size - 1, int(3 * np.sqrt(r.size))))
    if top[0] - top[m] > 700:
        return (f"{head}: the largest importance ratios differ by more than a factor exp(700) (a very heavy tail or "
                "a log-likelihood of very large magnitude): one draw carries nearly all the weight")
    return f"{head}: the largest importance ratios are not Pareto-like (ties or a degenerate tail)"


def pointwise_reasons(k, k_threshold, log_ratios, elpd_i=None):
    """``(doubtful, reason)`` of plain PSIS per observation: k-hat above the threshold, NaN or ``+inf``
    (explained by :func:`explain_k`), or a non-finite ``elpd_i``. ``k = -inf`` (exactly uniform weights: a
    constant log-likelihood, whose LOO density is that constant) is not doubtful."""
    k = np.asarray(k, dtype=np.float64)
    reason = np.full(k.shape, "", dtype=object)
    high = np.isfinite(k) & (k > k_threshold)
    for i in np.flatnonzero(high):
        reason[i] = f"k-hat {k[i]:.2f} above {k_threshold:.2f}: plain importance sampling is unreliable"
    odd = np.isnan(k) | (k == np.inf)
    for i in np.flatnonzero(odd):
        reason[i] = explain_k(log_ratios[i], k[i])
    bad_elpd = np.zeros(k.shape, bool) if elpd_i is None else ~np.isfinite(np.asarray(elpd_i, dtype=np.float64))
    for i in np.flatnonzero(bad_elpd & ~odd & ~high):
        reason[i] = "elpd_i is not finite"
    return high | odd | bad_elpd, reason


def check_k_threshold(k_threshold):
    """``k_threshold`` as a float of at most 1 (``-inf`` allowed: adapt every observation), or a ValueError
    naming it."""
    if k_threshold is None:
        return None
    try:
        value = float(k_threshold)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(k_threshold, (bool, str)) or not value <= 1:
        raise ValueError(f"k_threshold={k_threshold!r}: use a number of at most 1 (a Pareto k-hat: 0.7 is the usual "
                         "limit, lower values adapt more observations) or None for the default "
                         "min(1 - 1/log10(S), 0.7).")
    return value


def check_reff(reff, vector=False):
    """``reff`` as a positive finite float, or None; ``vector=True`` (``pl.loo(data)`` without a model) also takes
    a 1-D array of positive finite values (one per observation; its length is checked against the log-likelihood
    by :func:`plain_loo_checks`)."""
    if reff is None:
        return None
    if vector and np.ndim(reff) > 0 and not isinstance(reff, str):
        try:
            values = np.asarray(getattr(reff, "values", reff), dtype=np.float64).ravel()
        except (TypeError, ValueError):
            values = np.array([np.nan])
        if not (values.size and np.all(np.isfinite(values)) and np.all(values > 0)):
            bad = values[~(np.isfinite(values) & (values > 0))][:3] if values.size else "none"
            raise ValueError(f"reff: one relative efficiency per observation must be positive and finite (got "
                             f"{bad}); pl.relative_eff(data) computes them (NaN for a constant log-likelihood: give "
                             "it any positive value, e.g. 1), or pass one number.")
        return values
    if np.ndim(reff) > 0 and not isinstance(reff, str):
        raise ValueError(f"reff has shape {np.shape(reff)}: one relative efficiency per observation applies to plain "
                         "PSIS-LOO without a model (pl.loo(data, reff=...), as R loo's r_eff); with a model give one "
                         "number, or None to compute it from the posterior.")
    try:
        value = float(reff)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(reff, bool) or not (np.isfinite(value) and value > 0):
        raise ValueError(f"reff={reff!r}: use a positive number (the relative efficiency ESS / S of the draws, as in "
                         "arviz_stats.loo), or None to compute it from the posterior.")
    return value


def plain_log_likelihood(data, var_name):
    """The log-likelihood DataArray of ``pl.loo(data)`` (no model), or a ValueError saying how to get one."""
    da = get_log_likelihood(data, var_name)
    if da is None:
        raise ValueError(
            "`data` has no 'log_likelihood' group and no model was given. Either pass model=... "
            "(ppl_loo computes the log-likelihood), or add it with pm.compute_log_likelihood."
        )
    return da


def plain_loo_checks(data, da, reff, conventions="arviz"):
    """The relative efficiency of plain PSIS-LOO on ``da`` (a number, one per observation, or None under R's
    conventions without ``reff``: each observation's :func:`relative_eff`, computed with its PSIS), or a ValueError
    naming what is missing (too few draws for the Pareto tail, an ESS that cannot be computed, a ``reff`` of the
    wrong length); reads no log-likelihood values."""
    what = f"log_likelihood[{da.name!r}]"
    S = int(da.sizes["chain"]) * int(da.sizes["draw"])
    if S < MIN_DRAWS:
        raise ValueError(f"{what} has {S} draws ({da.sizes['chain']} chain(s) x {da.sizes['draw']} draw(s)): PSIS "
                         f"needs at least {MIN_DRAWS} draws to fit the Pareto tail (use hundreds). Sample more draws.")
    conventions = check_conventions(conventions)
    r_eff = check_reff(reff, vector=True)
    if r_eff is None and conventions == "R":
        return None
    if r_eff is None:
        r_eff = r_eff_of(data, S)
        if not (np.isfinite(r_eff) and r_eff > 0):
            raise ValueError(f"the relative efficiency r_eff of the posterior draws is {r_eff} (the ESS could not be "
                             "computed: too few draws per chain or constant variables). Pass reff=1.0 (or your "
                             "estimate) to pl.loo, or sample more draws per chain.")
    if np.ndim(r_eff):
        n = int(np.prod([da.sizes[d] for d in da.dims if d not in ("chain", "draw")], dtype=np.int64))
        if r_eff.size != n:
            raise ValueError(f"reff has {r_eff.size} values and {what} has {n} observations: give one relative "
                             "efficiency per observation (pl.relative_eff(data)), in the order of its flattened "
                             "observation dims, or one number.")
    worst = float(np.max(r_eff))
    if psis_tail_length(S, worst, conventions) < 5:
        raise ValueError(f"{what}: {S} draws with reff={worst:.3g} leave fewer than 5 draws for the Pareto tail. "
                         "Sample more draws.")
    return r_eff


def posterior_chains(data):
    """The number of chains of the posterior (1 without a posterior group)."""
    return int(data["posterior"].sizes.get("chain", 1)) if "posterior" in data.children else 1


def plain_psis_loo(data, var_name, k_threshold, reff=None, conventions="arviz"):
    """``model=None``: plain PSIS-LOO from the log_likelihood group (as ``arviz_stats.loo``).

    Computed with the engine's own PSIS, not by calling ``arviz_stats.loo``: a doubtful observation of an
    adaptive result keeps exactly this plain value (to 1e-12, ``tests/test_engine_selection.py``), and
    arviz_stats' PSIS differs from it by about 1e-10 relative; the two agree to 1e-8
    (``tests/test_jax_settings.py``, ``tests/test_ovarian_benchmark.py``).

    ``reff``: the relative efficiency (``arviz_stats.loo``'s ``reff``), or one per observation (R ``loo``'s
    ``r_eff``); None computes it from the posterior's mean ESS, or with ``conventions="R"`` per observation from
    the log-likelihood (:func:`relative_eff`). ``conventions``: the tail length's rounding
    (:func:`~ppl_loo.numerics.psis.psislw`). Observations with k-hat above ``k_threshold``, NaN or ``+inf`` are
    ``doubtful`` with a ``reason`` and a warning; a constant log-likelihood has k-hat ``-inf`` and its exact LOO
    density. The whole ``(S, n)`` array is loaded: :func:`ppl_loo.workflow.loo.chunked.psis_loo` reads a dask-backed
    one in chunks of observations, with the same numbers.
    """
    da = plain_log_likelihood(data, var_name)
    what = f"log_likelihood[{da.name!r}]"
    ll = stack_draws(da)
    check_finite(ll, what, NON_FINITE_FIX)
    r_eff = plain_loo_checks(data, da, reff, conventions)
    elpd_i, k, _, mcse, n_eff = psis_columns(ll, -ll.T, r_eff, posterior_chains(data), conventions)
    return plain_loo_result(da, k_threshold, ll.shape[0], elpd_i, k, mcse, logmeanexp(ll), -ll.T,
                            lambda: np.max(np.abs(ll)), stan=stan_labelled(data), n_eff=n_eff,
                            conventions=conventions)


def plain_loo_result(da, k_threshold, S, elpd_i, k, mcse, lpd, log_ratios, max_abs, stan=False, n_eff=None,
                     conventions=None):
    """The :class:`LooResult` of plain PSIS-LOO from its pointwise values over the observations of ``da``.

    ``lpd``: ``log mean_s p(y_i | theta_s)`` per observation; ``log_ratios[i]``: the ``(S,)`` log ratios of
    observation ``i`` (read only to explain a NaN or infinite k-hat); ``max_abs()``: the largest magnitude
    of the log-likelihood (read only for the overflow message); ``stan``: label observations as Stan does
    (:func:`~ppl_loo.workflow.loo.inputs.obs_labels`); ``n_eff``: the PSIS effective sample size per observation
    (``r_eff / sum w^2``, R's ``n_eff``), kept as ``n_eff_i`` where given; ``conventions``: those of its PSIS,
    recorded on the result (``pl.loo_expectations`` recomputes the weights with them).
    """
    what = f"log_likelihood[{da.name!r}]"
    n = k.shape[0]
    k_threshold = khat_threshold(S) if k_threshold is None else float(k_threshold)
    ref0 = da.isel(chain=0, draw=0, drop=True)

    def make(values, name):
        return xr.DataArray(np.asarray(values).reshape(ref0.shape), dims=ref0.dims, coords=ref0.coords, name=name)

    p_loo_i = lpd - elpd_i
    doubtful, reason = pointwise_reasons(k, k_threshold, log_ratios, elpd_i)
    elpd, se = stable_sum(elpd_i), stable_se(elpd_i)
    if not (np.isfinite(elpd) and np.isfinite(se)):
        raise ValueError(f"{what} holds values up to {max_abs():.3g} in magnitude: the sum or the standard "
                         "error of elpd_loo overflows float64. Check the units of the log-likelihood.")
    if doubtful.any():
        warn_plain(with_stan_labels(ref0.rename(da.name), stan), k, doubtful, reason, k_threshold)
    return LooResult(
        elpd=elpd, se=se,
        p=stable_sum(p_loo_i), n_samples=S, n_data_points=n, scale="log", warning=bool(doubtful.any()),
        good_k=k_threshold, elpd_i=make(elpd_i, "elpd_i"), pareto_k=make(k, "pareto_k"),
        p_loo_i=make(p_loo_i, "p_loo_i"), pareto_k_psis=make(k, "pareto_k_psis"),
        transform=make(np.where(doubtful, "failed", "psis"), "transform"),
        hbar_used=make(np.full(n, np.nan), "hbar_used"), mcse_elpd_i=make(mcse, "mcse_elpd_i"),
        doubtful=make(doubtful, "doubtful"), reason=make(reason.astype(str), "reason"), var_name=da.name,
        stan_labels=bool(stan), n_eff_i=None if n_eff is None else make(n_eff, "n_eff_i"),
        conventions=conventions,
    )
