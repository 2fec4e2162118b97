"""``pl.crps``, ``pl.scrps``, ``pl.loo_crps``, ``pl.loo_scrps``: R ``loo``'s (scaled) continuous ranked probability
scores of two sets of predictive draws.

R's estimator (``crps.R`` of R ``loo`` 2.10.1): with ``x`` and ``x2`` two independent sets of draws from the
predictive (``S x n``, e.g. two calls of ``posterior_predict``), ``E|X - y|`` is the mean of ``|x - y|`` and
``E|X - X'|`` the mean of ``|x - x2[shuffle]|``, ``x2``'s rows permuted (its draws come from the same parameters as
``x``'s), averaged over ``permutations`` shuffles. The LOO versions weigh ``|x - y|`` with the PSIS weights of
``-log_lik`` and ``|x - x2[shuffle]|`` with those of ``-log_lik - log_lik[shuffle]`` (the joint LOO ratio of the
pair of draws). ``CRPS = E|X - X'| / 2 - E|X - y|`` and ``SCRPS = -E|X - y| / E|X - X'| - log(E|X - X'|) / 2`` (Bolin
& Wallin 2023), larger is better; the SE is ``sd / sqrt(n)`` of the pointwise scores (sample SD).

:func:`ppl_loo.loo_score` computes the same scores from one set of draws (``arviz_stats``' estimator) with the weights
of an adaptive LOO result.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.psis import check_conventions, psislw
from ppl_loo.workflow.downstream.loo_expectations import draws_matrix

__all__ = ["crps", "scrps", "loo_crps", "loo_scrps"]

Score = namedtuple("Score", ["mean", "se", "pointwise"])


def crps(x, x2, y, *, permutations=1, random_seed=None):
    """CRPS of predictive draws, R ``loo``'s ``crps``: ``E|X - X'| / 2 - E|X - y|`` per observation.

    Parameters
    ----------
    x, x2 : array or DataArray
        Two independent sets of draws of the predictive, ``(S, n)`` (R's ``S x n`` matrices), ``(chain, draw,
        *obs)``, or ``(S,)`` for one observation.
    y : array
        The observed values, ``n`` of them (or one number with ``(S,)`` draws).
    permutations : int or array of int
        How many random shuffles of ``x2``'s rows ``E|X - X'|`` averages over (R's ``permutations``, default 1), or
        the shuffles themselves, ``(P, S)`` or ``(S,)``, 0-based row orders (``sample(1:S) - 1`` of R).
    random_seed : int or numpy.random.Generator, optional
        Seeds the shuffles.

    Returns
    -------
    namedtuple
        ``Score(mean, se, pointwise)``: the mean of the pointwise scores (R's ``estimates["Estimate"]``), its SE
        ``sd / sqrt(n)`` and the scores ``(n,)``.
    """
    return _score(x, x2, y, None, permutations, random_seed, 1.0, "arviz", scale=False)


def scrps(x, x2, y, *, permutations=1, random_seed=None):
    """Scaled CRPS of predictive draws, R ``loo``'s ``scrps``: ``-E|X - y| / E|X - X'| - log(E|X - X'|) / 2``.

    Parameters and return value as :func:`crps`.

    Parameters
    ----------
    x, x2 : array or DataArray
        Two independent sets of predictive draws, ``(S, n)`` or ``(chain, draw, *obs)`` or ``(S,)``.
    y : array
        The observed values.
    permutations : int or array of int
        The number of shuffles of ``x2``, or the shuffles ``(P, S)`` (0-based).
    random_seed : int or numpy.random.Generator, optional
        Seeds the shuffles.

    Returns
    -------
    namedtuple
        ``Score(mean, se, pointwise)``.
    """
    return _score(x, x2, y, None, permutations, random_seed, 1.0, "arviz", scale=True)


def loo_crps(x, x2, y, log_lik, *, permutations=1, reff=1.0, random_seed=None, conventions="arviz"):
    """LOO CRPS, R ``loo``'s ``loo_crps``: :func:`crps` with ``E|X - y|`` under the PSIS weights of ``-log_lik``
    and ``E|X - X'|`` under those of ``-log_lik - log_lik[shuffle]``.

    Parameters
    ----------
    x, x2 : array or DataArray
        Two independent sets of posterior predictive draws ``(S, n)`` or ``(chain, draw, *obs)``, at the draws of
        ``log_lik``.
    y : array
        The observed values ``(n,)``.
    log_lik : array or DataArray
        The pointwise log-likelihood at the same draws, the shape of ``x``.
    permutations : int or array of int
        The number of shuffles of ``x2`` (and ``log_lik``), or the shuffles ``(P, S)`` (0-based).
    reff : float or array, default 1.0
        The relative efficiency of the draws (R's ``r_eff``: one, or one per observation, e.g.
        ``pl.relative_eff(data)``); it sets the PSIS tail length.
    random_seed : int or numpy.random.Generator, optional
        Seeds the shuffles.
    conventions : {"arviz", "R"}
        The PSIS tail length's rounding (:func:`ppl_loo.numerics.psis.psislw`): ``"R"`` for R's numbers.

    Returns
    -------
    namedtuple
        ``Score(mean, se, pointwise)``.
    """
    return _score(x, x2, y, log_lik, permutations, random_seed, reff, conventions, scale=False)


def loo_scrps(x, x2, y, log_lik, *, permutations=1, reff=1.0, random_seed=None, conventions="arviz"):
    """LOO scaled CRPS, R ``loo``'s ``loo_scrps``: :func:`scrps` under the weights of :func:`loo_crps`.

    Parameters
    ----------
    x, x2 : array or DataArray
        Two independent sets of posterior predictive draws ``(S, n)`` or ``(chain, draw, *obs)``.
    y : array
        The observed values ``(n,)``.
    log_lik : array or DataArray
        The pointwise log-likelihood at the same draws.
    permutations : int or array of int
        The number of shuffles, or the shuffles ``(P, S)`` (0-based).
    reff : float or array, default 1.0
        The relative efficiency of the draws (R's ``r_eff``).
    random_seed : int or numpy.random.Generator, optional
        Seeds the shuffles.
    conventions : {"arviz", "R"}
        The PSIS tail length's rounding.

    Returns
    -------
    namedtuple
        ``Score(mean, se, pointwise)``.
    """
    return _score(x, x2, y, log_lik, permutations, random_seed, reff, conventions, scale=True)


@uses_x64
def _score(x, x2, y, log_lik, permutations, random_seed, reff, conventions, scale):
    check_conventions(conventions)
    one = np.ndim(x) == 1 and not hasattr(x, "dims")
    x = _matrix(x, "x", one)
    x2 = _matrix(x2, "x2", one)
    S, n = x.shape
    if x2.shape != x.shape:
        raise ValueError(f"x2 has shape {x2.shape} and x {x.shape}: give two sets of draws of the same shape.")
    y = np.asarray(getattr(y, "values", y), dtype=np.float64).ravel()
    if y.size != n:
        raise ValueError(f"y has {y.size} values but x has {n} observations (columns): give one observed value per "
                         "column of x.")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(x2)) and np.all(np.isfinite(y))):
        raise ValueError("x, x2 and y must be finite: remove or recompute the draws with NaN or infinite values.")
    shuffles = _shuffles(permutations, S, random_seed)
    if log_lik is None:
        exy = np.mean(np.abs(x - y), axis=0)
        exx = np.mean([np.mean(np.abs(x - x2[p]), axis=0) for p in shuffles], axis=0)
    else:
        ll = _matrix(log_lik, "log_lik", one)
        if ll.shape != x.shape:
            raise ValueError(f"log_lik has shape {ll.shape} and x {x.shape}: give the log-likelihood at the draws of "
                             "x, one column per observation.")
        if not np.all(np.isfinite(ll)):
            raise ValueError("log_lik has NaN or infinite entries: recompute the log-likelihood.")
        r_eff = np.asarray(getattr(reff, "values", reff), dtype=np.float64).ravel()
        if r_eff.size not in (1, n) or not np.all(np.isfinite(r_eff) & (r_eff > 0)):
            raise ValueError(f"reff={reff!r}: give the relative efficiency, one positive number or one per "
                             f"observation ({n}).")
        r_eff = float(r_eff[0]) if r_eff.size == 1 else r_eff
        w = np.exp(np.asarray(psislw(-ll.T, r_eff, conventions)[0]))
        exy = np.sum(w * np.abs(x - y).T, axis=1)
        exx = np.zeros(n)
        for p in shuffles:
            w2 = np.exp(np.asarray(psislw(-(ll + ll[p]).T, r_eff, conventions)[0]))
            exx += np.sum(w2 * np.abs(x - x2[p]).T, axis=1)
        exx /= len(shuffles)
    with np.errstate(divide="ignore", invalid="ignore"):
        pw = -exy / exx - 0.5 * np.log(exx) if scale else 0.5 * exx - exy
    se = float(np.std(pw, ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return Score(float(np.mean(pw)), se, pw)


def _matrix(arr, name, one):
    """``(S, n)`` of draws: one observation's ``(S,)`` as a column."""
    if one:
        a = np.asarray(arr, dtype=np.float64)
        if a.ndim != 1:
            raise ValueError(f"{name} has shape {a.shape}; with x of shape (S,) (one observation) give (S,) too.")
        return a[:, None]
    return draws_matrix(arr, name, None)[0]


def _shuffles(permutations, S, random_seed):
    """The row orders of ``x2``: ``permutations`` random ones, or those given ``(P, S)``."""
    if isinstance(permutations, (int, np.integer)) and not isinstance(permutations, (bool, np.bool_)):
        if permutations < 1:
            raise ValueError(f"permutations={permutations}: give the number of shuffles of x2 (at least 1) or the "
                             "shuffles themselves, an array (P, S) of row orders.")
        rng = random_seed if isinstance(random_seed, np.random.Generator) else np.random.default_rng(random_seed)
        return [rng.permutation(S) for _ in range(int(permutations))]
    p = np.atleast_2d(np.asarray(permutations))
    if p.dtype.kind not in "iu" or p.ndim != 2 or p.shape[1] != S or not all(
            np.array_equal(np.sort(row), np.arange(S)) for row in p):
        raise ValueError(f"permutations: give a whole number of shuffles, or the shuffles as an integer array (P, S) "
                         f"whose rows are permutations of 0..S-1 (S = {S} draws; R's sample(1:S) - 1).")
    return list(p)
