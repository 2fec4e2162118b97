"""Estimators of a population total from a subsample (Magnusson et al. 2019, 2020): the numerics of
``pl.loo_subsample``, on plain arrays.

Each estimator returns ``(total, subsampling_se, se)``: the estimate of ``sum_i y_i`` over all ``N``
observations, the standard error of that estimate due to subsampling alone, and the estimate of
``sqrt(N var(y_i))``, the usual standard error of elpd_loo (what a full PSIS-LOO would report).

- :func:`diff_srs`: the difference estimator under simple random sampling without replacement
  (Magnusson et al. 2020, Eq. 7-9; R ``loo``'s ``srs_diff_est``, ``arviz_stats``' ``diff_srs_estimator``);
- :func:`srs`: the plain SRS-WOR estimator ``N mean(y)`` (R ``loo``'s ``srs_est``);
- :func:`hansen_hurwitz`: the Hansen-Hurwitz estimator of sampling with replacement, with
  probabilities proportional to ``|approximation|`` (Magnusson et al. 2019, Eq. 5-6; R ``loo``'s
  ``whhest``, estimator ``"hh_pps"``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["diff_srs", "srs", "hansen_hurwitz", "pps_probabilities", "pps_sample"]


def diff_srs(y_sample, approx_sample, approx_all, n_total):
    """Difference estimator of ``sum_i y_i`` under SRS without replacement (Magnusson et al. 2020, Eq. 7-9).

    ``y_hat = sum_N approx + N mean_m(y - approx)``; subsampling variance ``N^2 (1 - m/N) var(e) / m``
    (Eq. 8); the variance of ``y`` over the population from Eq. 9 (the supplement's corrected sign, as R
    ``loo`` and ``arviz_stats``). Entries where ``y`` or its approximation is not finite are left out,
    as in ``arviz_stats``; with none left the estimate is NaN and both SEs infinite; with one, both SEs
    are infinite.

    Parameters
    ----------
    y_sample, approx_sample : array-like, shape (m,)
        The quantity (elpd_loo_i) and its approximation at the sampled observations.
    approx_all : array-like, shape (N,)
        The approximation at every observation.
    n_total : int
        ``N``.

    Returns
    -------
    tuple of float
        ``(total, subsampling_se, se)``.
    """
    y = np.asarray(y_sample, dtype=np.float64).ravel()
    a = np.asarray(approx_sample, dtype=np.float64).ravel()
    a_all = np.asarray(approx_all, dtype=np.float64).ravel()
    if y.size != a.size:
        raise ValueError(f"diff_srs: {y.size} sampled values but {a.size} approximations; they must match.")
    ok = np.isfinite(y) & np.isfinite(a)
    m = int(np.count_nonzero(ok))
    if m == 0:
        return float("nan"), float("inf"), float("inf")
    y, a = y[ok], a[ok]
    e = y - a
    N = float(n_total)
    t_approx = np.nansum(a_all)
    t_e = N * np.nanmean(e)
    total = t_approx + t_e
    if m < 2 or N <= 0:
        return float(total), float("inf"), float("inf")
    var_e = np.nanvar(e, ddof=1)
    if not np.isfinite(var_e):
        return float(total), float("inf"), float("inf")
    v_sub = N**2 * max(0.0, 1.0 - m / N) * var_e / m
    v_sub = float(np.nan_to_num(v_sub, nan=np.inf))
    sub_se = np.sqrt(v_sub) if np.isfinite(v_sub) else np.inf
    t_approx2 = np.nansum(a_all**2)
    t_eps = N * np.nanmean(y**2 - a**2)
    v_y = t_approx2 + t_eps - (1.0 / N) * (t_e**2 - v_sub + 2.0 * t_approx * total - t_approx**2)
    se = np.sqrt(max(0.0, v_y)) if np.isfinite(v_y) else np.inf
    return float(total), float(sub_se), float(se)


def srs(y_sample, n_total):
    """SRS-WOR estimator of ``sum_i y_i``: ``N mean(y)``, subsampling variance ``N^2 (1 - m/N) var(y) / m``
    and population variance ``N var(y)`` (R ``loo``'s ``srs_est``; ``arviz_stats``' ``srs_estimator``
    returns the variance where this returns its square root).

    Returns
    -------
    tuple of float
        ``(total, subsampling_se, se)``; both SEs infinite for ``m < 2``.
    """
    y = np.asarray(y_sample, dtype=np.float64).ravel()
    m, N = y.size, float(n_total)
    if m == 0:
        return float("nan"), float("inf"), float("inf")
    total = N * float(np.mean(y))
    if m < 2:
        return total, float("inf"), float("inf")
    var = float(np.var(y, ddof=1))
    return total, float(np.sqrt(N**2 * max(0.0, 1.0 - m / N) * var / m)), float(np.sqrt(N * var))


def hansen_hurwitz(y_sample, z_sample, counts, n_total):
    """Weighted Hansen-Hurwitz estimator of ``sum_i y_i`` for sampling with replacement with
    probabilities ``z`` (Magnusson et al. 2019, Eq. 5-6; R ``loo``'s ``whhest``).

    ``y_hat = sum_i m_i y_i / z_i / m`` with ``m = sum_i m_i``; subsampling variance
    ``sum_i m_i (y_i / z_i - y_hat)^2 / (m (m - 1))``; population variance
    ``sum_i m_i y_i^2 / z_i / m + v / N - y_hat^2 / N``. The population variance estimate can be
    negative for small subsamples: the SE is then NaN (R ``loo`` warns the same way).

    Parameters
    ----------
    y_sample : array-like, shape (k,)
        The quantity at the distinct sampled observations.
    z_sample : array-like, shape (k,)
        Their sampling probabilities (summing to 1 over all ``N``).
    counts : array-like of int, shape (k,)
        How many times each was drawn (``m_i``).
    n_total : int
        ``N``.
    """
    y = np.asarray(y_sample, dtype=np.float64).ravel()
    z = np.asarray(z_sample, dtype=np.float64).ravel()
    mi = np.asarray(counts, dtype=np.float64).ravel()
    m, N = float(np.sum(mi)), float(n_total)
    if m == 0:
        return float("nan"), float("inf"), float("inf")
    ratio = y / z
    total = float(np.sum(mi * ratio) / m)
    if m < 2:
        return total, float("inf"), float("inf")
    v_sub = float(np.sum(mi * (ratio - total) ** 2) / m / (m - 1))
    v_y = float(np.sum(mi * y**2 / z) / m + v_sub / N - total**2 / N)
    return total, float(np.sqrt(v_sub)), float(np.sqrt(v_y)) if v_y > 0 else float("nan")


def pps_probabilities(approx_all):
    """Sampling probabilities proportional to ``|approximation|`` (R ``loo``'s
    ``pps_elpd_loo_approximation_to_pis``)."""
    a = np.abs(np.asarray(approx_all, dtype=np.float64).ravel())
    total = np.sum(a)
    if not (np.isfinite(total) and total > 0):
        raise ValueError("the elpd approximation is zero everywhere or not finite: no probabilities proportional to "
                         "it exist for estimator='hh_pps'; use estimator='diff_srs'.")
    return a / total


def pps_sample(probabilities, m, rng):
    """``m`` draws with replacement with the given probabilities: ``(indices, counts)`` of the distinct
    observations drawn (sorted), as R ``loo``'s ``pps_sample``."""
    draws = rng.choice(probabilities.size, size=int(m), replace=True, p=probabilities)
    return np.unique(draws, return_counts=True)
