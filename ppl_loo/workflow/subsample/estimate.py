"""The pieces both paths of :func:`ppl_loo.loo_subsample` share: drawing or checking the subsample, the
approximation of every observation from a log-likelihood DataArray, the estimators, and the result."""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from ppl_loo.numerics import subsample as est
from ppl_loo.workflow.loo.inputs import SAMPLE_DIMS
from ppl_loo.workflow.subsample.result import SubsampleResult

__all__ = ["choose_observations", "lpd_of", "select_columns", "combine", "make_result"]


def choose_observations(observations, n, estimator, seed, approx_all=None):
    """``(indices, counts)``: the flat indices of the subsample (of ``n`` observations) and how often
    each was drawn.

    An int ``m`` draws ``m`` observations with ``numpy.random.default_rng(seed)``: without
    replacement (``rng.choice(n, m, replace=False)``, the draw of ``arviz_stats.loo_subsample``) or, for
    ``"hh_pps"``, with replacement and probabilities proportional to ``|approx_all|``. An array gives the
    indices (sorted, as ``arviz_stats``); repeats only for ``"hh_pps"``.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if isinstance(observations, (bool, np.bool_)):
        raise TypeError(f"observations={observations!r}: give the subsample size (an int) or an array of flat "
                        "observation indices.")
    if isinstance(observations, (int, np.integer)):
        m = int(observations)
        if estimator == "hh_pps":
            if m < 2:
                raise ValueError(f"observations={m}: estimator='hh_pps' needs at least 2 draws of observations.")
            return est.pps_sample(est.pps_probabilities(approx_all), m, rng)
        if not 1 <= m <= n:
            raise ValueError(f"observations={m}: the subsample size must be between 1 and {n}, the number of "
                             "observations (observations=n is full PSIS-LOO).")
        return np.asarray(rng.choice(n, size=m, replace=False), dtype=np.int64), np.ones(m, np.int64)
    return _check_indices(observations, n, estimator)


def _check_indices(observations, n, estimator):
    arr = np.asarray(observations)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError(f"observations: give an int (the subsample size) or a 1-d array of integer flat "
                        f"indices; got {type(observations).__name__} of dtype {arr.dtype} and shape {arr.shape}.")
    if arr.size == 0:
        raise ValueError("observations is empty: give at least one observation index (or an int subsample size).")
    bad = arr[(arr < 0) | (arr >= n)]
    if bad.size:
        raise ValueError(f"observations holds index(es) {bad[:5].tolist()} outside 0..{n - 1} (the data has {n} "
                         "observations, indexed flat in C order over the observation dims).")
    idx, counts = np.unique(arr.astype(np.int64), return_counts=True)
    if estimator != "hh_pps" and np.any(counts > 1):
        raise ValueError(f"observations repeats index(es) {idx[counts > 1][:5].tolist()}: estimator={estimator!r} "
                         "samples without replacement, so each observation may appear once. Drop the repeats, or "
                         "use estimator='hh_pps' (sampling with replacement).")
    return idx, counts


def lpd_of(da):
    """``log mean_s exp(ll[s, i])`` of a ``(chain, draw, *obs)`` DataArray, flat ``(n,)``; with xarray
    reductions, so that a dask-backed array is reduced chunk by chunk."""
    m = da.max(SAMPLE_DIMS)
    lpd = m + np.log(np.exp(da - m).mean(SAMPLE_DIMS))
    return np.asarray(lpd.values, dtype=np.float64).reshape(-1)


def select_columns(da, idx):
    """The ``(chain, draw, ...)`` DataArray of the flat observation indices ``idx`` of ``da`` (dims
    ``(chain, draw, obs_dim)`` for one observation dim, else ``(chain, draw, "__obs__")``)."""
    obs_dims = [d for d in da.dims if d not in SAMPLE_DIMS]
    if not obs_dims:
        return da.expand_dims("__obs__", axis=-1).isel(__obs__=np.asarray(idx))
    if len(obs_dims) == 1:
        return da.isel({obs_dims[0]: np.asarray(idx)})
    multi = np.unravel_index(np.asarray(idx), [da.sizes[d] for d in obs_dims])
    return da.isel({d: xr.DataArray(i, dims="__obs__") for d, i in zip(obs_dims, multi)})


def combine(estimator, elpd_sub, p_sub, approx_all, idx, counts, n):
    """``(elpd, subsampling_se, se, p)`` of the chosen estimator (p_loo by the SRS estimator for
    ``"diff_srs"`` and ``"srs"``, as ``arviz_stats`` and R ``loo``; by Hansen-Hurwitz for ``"hh_pps"``)."""
    if estimator == "diff_srs":
        elpd, sub_se, se = est.diff_srs(elpd_sub, approx_all[idx], approx_all, n)
        return elpd, sub_se, se, est.srs(p_sub, n)[0]
    if estimator == "srs":
        elpd, sub_se, se = est.srs(elpd_sub, n)
        return elpd, sub_se, se, est.srs(p_sub, n)[0]
    z = est.pps_probabilities(approx_all)[idx]
    elpd, sub_se, se = est.hansen_hurwitz(elpd_sub, z, counts, n)
    if np.isnan(se):
        warnings.warn(f"estimator='hh_pps': the estimate of the variance of elpd_loo is negative with "
                      f"{int(np.sum(counts))} draws of observations, so se is NaN; draw more observations.",
                      UserWarning, stacklevel=4)
    return elpd, sub_se, se, est.hansen_hurwitz(p_sub, z, counts, n)[0]


def make_result(ref0, idx, counts, approx_all, pointwise, summary):
    """The :class:`SubsampleResult`: ``pointwise`` (name -> values at the subsample, with their fill
    value elsewhere) spread over the observation dims of ``ref0``; ``summary``: the other fields."""
    n = int(np.prod(ref0.shape)) if ref0.ndim else 1

    def full(values, fill, name):
        values = np.asarray(values)
        arr = np.full(n, fill, dtype=values.dtype if values.dtype.kind in "bUO" else np.float64)
        arr[idx] = values
        return xr.DataArray(arr.reshape(ref0.shape), dims=ref0.dims, coords=ref0.coords, name=name)

    arrays = {name: full(values, fill, name) for name, (values, fill) in pointwise.items()}
    approx = xr.DataArray(np.asarray(approx_all).reshape(ref0.shape), dims=ref0.dims, coords=ref0.coords,
                          name="elpd_loo_approx")
    return SubsampleResult(n_data_points=n, scale="log", subsample_size=int(len(idx)),
                           loo_subsample_observations=np.asarray(idx), subsample_counts=np.asarray(counts),
                           elpd_loo_approx=approx, **arrays, **summary)
