"""``pl.stacking_weights``, ``pl.pseudobma_weights``, ``pl.loo_model_weights``: R ``loo``'s model weights from
pointwise LOO log predictive densities (the numbers: :mod:`ppl_loo.numerics.model_weights`, which ``pl.compare``'s
``weight`` column also uses)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.model_weights import pseudobma, stacking
from ppl_loo.numerics.psis import check_conventions
from ppl_loo.workflow.downstream.compare import named_results
from ppl_loo.workflow.loo.plain import psis_columns

__all__ = ["stacking_weights", "pseudobma_weights", "loo_model_weights", "METHODS"]

#: the methods of :func:`loo_model_weights` (R's names)
METHODS = ("stacking", "pseudobma")


def _lpd_matrix(lpd_point):
    """``(n, K)`` float64 and the model names (a DataFrame's columns, else ``model_0``, ``model_1``, ...)."""
    if isinstance(lpd_point, pd.DataFrame):
        return lpd_point.to_numpy(dtype=np.float64), [str(c) for c in lpd_point.columns]
    a = np.asarray(getattr(lpd_point, "values", lpd_point), dtype=np.float64)
    names = [f"model_{k}" for k in range(a.shape[1])] if a.ndim == 2 else []
    return a, names


def stacking_weights(lpd_point):
    """Stacking weights of models from their pointwise LOO log predictive densities (R ``loo``'s
    ``stacking_weights``, Yao et al. 2018): the weights ``w`` on the simplex maximizing ``sum_i log sum_k w_k
    exp(lpd_point[i, k])``.

    R maximizes with ``constrOptim`` (BFGS inside a log barrier), which stops 1e-5 to 1e-4 from the maximizer; this
    returns the maximizer to round-off (its KKT conditions hold to 1e-12), equal to R's with a tight ``reltol`` to
    the precision R reaches there (2e-7).

    Parameters
    ----------
    lpd_point : array (n, K) or pandas.DataFrame
        ``log p(y_i | y_-i, M_k)``, one column per model (e.g. the ``elpd_i`` of :func:`ppl_loo.loo` of each), at
        least two.

    Returns
    -------
    pandas.Series
        The ``K`` weights (summing to 1), named by the DataFrame's columns, else ``model_0``, ``model_1``, ...
    """
    a, names = _lpd_matrix(lpd_point)
    return pd.Series(stacking(a), index=names, name="weight")


def pseudobma_weights(lpd_point, BB=True, BB_n=1000, alpha=1.0, random_seed=None, *, dirichlet=None):
    """Pseudo-BMA weights (R ``loo``'s ``pseudobma_weights``): ``softmax(elpd_k)``, or with the Bayesian bootstrap
    (pseudo-BMA+, the default) the mean over ``BB_n`` Dirichlet(``alpha``) draws ``u`` of ``softmax(n u^T lpd)``.

    R draws ``u`` with R's random numbers, which numpy cannot reproduce; ``dirichlet=`` takes the draws themselves
    (R's ``loo:::dirichlet_rng(BB_n, rep(alpha, n))`` after the same ``set.seed`` gives R's numbers exactly).

    Parameters
    ----------
    lpd_point : array (n, K) or pandas.DataFrame
        Pointwise LOO log predictive densities, one column per model.
    BB : bool
        The Bayesian bootstrap (default True).
    BB_n : int
        Its number of draws (default 1000).
    alpha : float
        The Dirichlet concentration (default 1).
    random_seed : int or numpy.random.Generator, optional
        Seeds the Dirichlet draws.
    dirichlet : array (BB_n, n), optional
        The Dirichlet draws to use (``BB_n``, ``alpha`` and ``random_seed`` then do not apply).

    Returns
    -------
    pandas.Series
        The ``K`` weights, named as :func:`stacking_weights` names them.
    """
    a, names = _lpd_matrix(lpd_point)
    return pd.Series(pseudobma(a, BB=BB, BB_n=BB_n, alpha=alpha, random_seed=random_seed, dirichlet=dirichlet),
                     index=names, name="weight")


@uses_x64
def loo_model_weights(x, method="stacking", *, BB=True, BB_n=1000, alpha=1.0, random_seed=None, reff=1.0,
                      conventions="arviz"):
    """Model weights from LOO results or log-likelihood matrices (R ``loo``'s ``loo_model_weights``).

    Parameters
    ----------
    x : dict, list or array
        ``{name: result}`` or a list of results (each what :func:`ppl_loo.compare` accepts: a
        :class:`~ppl_loo.LooResult`, an ``arviz_stats`` ``ELPDData`` with pointwise values, a DataTree with a ``loo``
        group or its netCDF path; lists are named ``model_0``, ``model_1``, ...); or ``{name: log_lik}`` / a list of
        log-likelihood matrices ``(S, n)`` (R's list of matrices: plain PSIS-LOO of each, with ``reff`` and
        ``conventions``); or the ``(n, K)`` matrix of pointwise elpd itself.
    method : {"stacking", "pseudobma"}
        :func:`stacking_weights` (default) or :func:`pseudobma_weights`.
    BB, BB_n, alpha, random_seed
        For ``method="pseudobma"``: as :func:`pseudobma_weights`.
    reff : float, default 1.0
        For log-likelihood matrices: the relative efficiency of their draws (R's ``loo.matrix`` default 1).
    conventions : {"arviz", "R"}
        For log-likelihood matrices: the PSIS tail length's rounding (``"R"`` gives R's ``loo``).

    Returns
    -------
    pandas.Series
        One weight per model, named.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}: use 'stacking' or 'pseudobma' (R loo's names).")
    check_conventions(conventions)
    lpd = _pointwise(x, reff, conventions)
    if method == "stacking":
        return stacking_weights(lpd)
    return pseudobma_weights(lpd, BB=BB, BB_n=BB_n, alpha=alpha, random_seed=random_seed)


def _pointwise(x, reff, conventions):
    """The ``(n, K)`` DataFrame of pointwise elpd of what :func:`loo_model_weights` accepts."""
    items = x if isinstance(x, dict) else (dict(enumerate(x)) if isinstance(x, (list, tuple)) else None)
    if items is None:
        a, names = _lpd_matrix(x)
        if a.ndim != 2:
            raise ValueError(f"x has shape {a.shape}: give a dict or list of LOO results or of log-likelihood matrices "
                             "(S, n), or the (n, K) matrix of pointwise elpd.")
        return pd.DataFrame(a, columns=names)
    if len(items) < 2:
        raise ValueError(f"loo_model_weights needs at least two models; got {len(items)}.")
    arrays = [isinstance(v, np.ndarray) and not isinstance(v, xr.DataArray) for v in items.values()]
    if all(arrays):
        names = [str(k) if isinstance(x, dict) else f"model_{k}" for k in items]
        shapes = {np.shape(v) for v in items.values()}
        if len(shapes) != 1 or np.ndim(next(iter(items.values()))) != 2:
            raise ValueError(f"the log-likelihood matrices have shapes {sorted(shapes)}: give matrices (S, n) of the "
                             "same shape, draws by observations.")
        r_eff = float(reff)
        cols = {}
        for name, ll in zip(names, items.values()):
            ll = np.asarray(ll, dtype=np.float64)
            if not np.all(np.isfinite(ll)):
                raise ValueError(f"model {name!r}: the log-likelihood has NaN or infinite entries.")
            cols[name] = np.asarray(psis_columns(ll, -ll.T, r_eff, 1, conventions)[0])
        return pd.DataFrame(cols)
    if any(arrays):
        raise TypeError("x mixes arrays and results: give LOO results, or log-likelihood matrices (S, n), not both.")
    named, _ = named_results(x, plain=True)
    return pd.DataFrame({name: np.asarray(res.elpd_i.values, dtype=np.float64).ravel() for name, res in named.items()})
