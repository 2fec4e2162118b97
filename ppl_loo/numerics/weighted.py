"""Summaries of a quantity under importance weights: mean, variance, sd, quantiles, and the k-hat of the estimate.

The formulas are ``arviz_stats``' (1.x, ``loo_expectations``), so that with the plain PSIS weights the results
are identical to it: the variance carries the correction ``ESS / (ESS - 1)`` with ``ESS = 1 / sum w^2``, and the
quantile is the weighted form of the type-7 (linear) quantile with ``nw = (sum w)^2 / sum w^2`` points (for equal
weights, exactly ``numpy.quantile``'s default). The k-hat of an estimate (R ``loo``'s ``E_loo`` diagnostic) is the
larger of the right-tail k-hat of the ratios ``r = exp(lw - max lw)`` and the two-tailed k-hat of ``h r`` (``h`` the
quantity for the mean, its square for the variance and sd); for quantiles the ratios' alone.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = ["KINDS", "weighted_summary", "weighted_quantile", "function_khat"]

#: what :func:`weighted_summary` computes
KINDS = ("mean", "median", "var", "sd", "quantile")


def weighted_quantile(x, weights, prob):
    """The weighted type-7 quantile of ``x`` at ``prob`` (``weights`` >= 0, normalized or not).

    ``nw = (sum w)^2 / sum w^2`` (the effective number of points), ``h = (nw - 1) prob + 1``; each sorted point's
    weight in the estimate is the length of the overlap of its cumulative-weight interval (scaled by ``nw``) with
    ``[h - 1, h]``. Zero weights are dropped; NaN where no weight is left.
    """
    x, w = np.asarray(x, dtype=float).ravel(), np.asarray(weights, dtype=float).ravel()
    keep = w != 0
    x, w = x[keep], w[keep]
    if x.size == 0:
        return np.nan
    nw = w.sum() ** 2 / np.sum(w**2)
    order = np.argsort(x, kind="stable")
    xs, ws = x[order], w[order] / w.sum()
    cum = np.concatenate([[0.0], np.cumsum(ws)])
    h = np.clip((nw - 1.0) * float(prob) + 1.0, 1.0, nw)
    u = np.maximum((h - 1.0) / nw, np.minimum(h / nw, cum))
    v = u * nw - h + 1.0
    return float(np.sum(xs * np.diff(v)))


def weighted_summary(x, log_weights, kind, probs=None):
    """``kind`` of ``x`` under the normalized ``exp(log_weights)``: a float (an array over ``probs`` for
    ``"quantile"``). ``-inf`` log weights carry no weight."""
    x = np.asarray(x, dtype=float).ravel()
    lw = np.asarray(log_weights, dtype=float).ravel()
    w = np.exp(lw - logsumexp(lw))
    if kind == "mean":
        return float(np.sum(w * x))
    if kind in ("var", "sd"):
        keep = w > 0
        mean = float(np.sum(w[keep] * x[keep]))
        ess = 1.0 / np.sum(w**2)
        var = float(np.sum(w[keep] * (x[keep] - mean) ** 2)) * (ess / (ess - 1.0) if ess > 1 else 1.0)
        return float(np.sqrt(var)) if kind == "sd" else var
    if kind == "median":
        return weighted_quantile(x, w, 0.5)
    if kind == "quantile":
        return np.array([weighted_quantile(x, w, p) for p in np.atleast_1d(probs)], dtype=float)
    raise ValueError(f"kind={kind!r}: use one of {KINDS}.")


def function_khat(x, log_weights, kind):
    """The k-hat of the estimate ``kind`` of ``x`` under the weights (module docstring): NaN where no tail can be
    fitted."""
    from arviz_stats.base import array_stats  # arviz_stats' array layer (its .azstats accessor calls it)

    lw = np.asarray(log_weights, dtype=float).ravel()
    x = np.asarray(x, dtype=float).ravel()
    keep = np.isfinite(lw)
    lw, x = lw[keep], x[keep]
    r = np.exp(lw - np.max(lw))

    def khat(values, tail):
        try:
            return float(array_stats.pareto_khat(values, chain_axis=None, draw_axis=-1, tail=tail, log_weights=False))
        except ValueError:
            return np.nan

    k_r = khat(r, "right")
    if kind in ("quantile", "median"):
        return k_r
    h = x if kind == "mean" else x**2
    if np.any(~np.isfinite(h)) or np.unique(h).size <= 2:
        return k_r
    k_hr = khat(h * r, "both")
    if np.isnan(k_hr) and np.isnan(k_r):
        return np.nan
    return float(np.nanmax([k_hr, k_r]))
