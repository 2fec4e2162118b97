"""Summaries of a quantity under importance weights: mean, variance, sd, quantiles, and the k-hat of the estimate.

The formulas are ``arviz_stats``' (1.x, ``loo_expectations``), so that with the plain PSIS weights the results
are identical to it: the variance carries the correction ``ESS / (ESS - 1)`` with ``ESS = 1 / sum w^2``, and the
quantile is the weighted form of the type-7 (linear) quantile with ``nw = (sum w)^2 / sum w^2`` points (for equal
weights, exactly ``numpy.quantile``'s default). The k-hat of an estimate (R ``loo``'s ``E_loo`` diagnostic) is the
larger of the right-tail k-hat of the ratios ``r = exp(lw - max lw)`` and the two-tailed k-hat of ``h r`` (``h`` the
quantity for the mean, its square for the variance and sd); for quantiles the ratios' alone.

Under R ``loo``'s conventions (``conventions="R"``, R ``loo`` 2.10.1's ``E_loo``) the quantile is R's ``.wquant``
(:func:`r_weighted_quantile`: the weighted CDF interpolated linearly between the sorted draws; R's ``quantile``
where every weight is equal) and the k-hats are ``posterior::pareto_khat``'s with the PSIS tail length of the weights
(:func:`r_pareto_khat`; ``h`` binary, constant or not finite: the ratios' alone). Mean, variance and sd are the same
numbers under both (``(E[x^2] - E[x]^2) / (1 - sum w^2)`` is the variance above).
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = ["KINDS", "weighted_summary", "weighted_quantile", "r_weighted_quantile", "function_khat", "r_pareto_khat"]

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


def r_weighted_quantile(x, weights, probs):
    """R ``loo``'s ``.wquant`` (``E_loo(type = "quantile")``): the quantiles ``(len(probs),)`` of ``x`` under
    ``weights`` (>= 0, normalized or not).

    Every weight equal: R's ``quantile`` (type 7, ``numpy.quantile``'s default). Otherwise, with the draws sorted and
    ``F_j`` the normalized cumulative weight up to the ``j``-th, the first ``j`` with ``F_j >= p`` gives ``x_(1)`` for
    ``j = 1`` and ``x_(j-1) + (x_(j) - x_(j-1)) (p - F_(j-1)) / (F_j - F_(j-1))`` otherwise.
    """
    x, w = np.asarray(x, dtype=float).ravel(), np.asarray(weights, dtype=float).ravel()
    probs = np.atleast_1d(np.asarray(probs, dtype=float))
    if np.all(w == w[0]):
        return np.quantile(x, probs)
    order = np.argsort(x, kind="stable")  # R's order(): stable
    xs, ws = x[order], np.cumsum(w[order])
    ws = ws / ws[-1]
    out = np.empty(probs.size)
    for j, p in enumerate(probs):
        wi = int(np.flatnonzero(ws >= p)[0])
        if wi == 0:
            out[j] = xs[0]
        else:
            w1, x1 = ws[wi - 1], xs[wi - 1]
            out[j] = x1 + (xs[wi] - x1) * (p - w1) / (ws[wi] - w1)
    return out


def weighted_summary(x, log_weights, kind, probs=None, conventions="arviz"):
    """``kind`` of ``x`` under the normalized ``exp(log_weights)``: a float (an array over ``probs`` for
    ``"quantile"``). ``-inf`` log weights carry no weight. ``conventions="R"``: the quantiles (and median) of R
    ``loo``'s ``E_loo`` (:func:`r_weighted_quantile`)."""
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
    if conventions == "R" and kind in ("median", "quantile"):
        q = r_weighted_quantile(x, w, 0.5 if kind == "median" else probs)
        return float(q[0]) if kind == "median" else q
    if kind == "median":
        return weighted_quantile(x, w, 0.5)
    if kind == "quantile":
        return np.array([weighted_quantile(x, w, p) for p in np.atleast_1d(probs)], dtype=float)
    raise ValueError(f"kind={kind!r}: use one of {KINDS}.")


def function_khat(x, log_weights, kind, conventions="arviz", tail_len=None):
    """The k-hat of the estimate ``kind`` of ``x`` under the weights (module docstring): NaN where no tail can be
    fitted. ``conventions="R"``: R ``loo``'s ``E_loo`` diagnostic, ``posterior::pareto_khat`` with ``tail_len`` draws
    in each tail (the PSIS tail length of the weights, required there)."""
    if conventions == "R":
        return _r_function_khat(x, log_weights, kind, tail_len)
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


def _r_function_khat(x, log_ratios, kind, tail_len):
    """R ``loo``'s ``.E_loo_khat_i``: the right-tail k-hat of ``r = exp(lr - max lr)`` and, unless ``h`` (``x``,
    ``x^2`` for the variance and sd, none for quantiles) is constant, binary or not finite, the larger of it and the
    two-tailed k-hat of ``h r``."""
    if tail_len is None:
        raise ValueError("conventions='R' needs tail_len, the PSIS tail length of the weights.")
    lr = np.asarray(log_ratios, dtype=float).ravel()
    r = np.exp(lr - np.max(lr))
    k_r = r_pareto_khat(r, "right", tail_len)
    if kind in ("quantile", "median"):
        return k_r
    x = np.asarray(x, dtype=float).ravel()
    h = x if kind == "mean" else x**2
    if (not np.all(np.isfinite(h))) or _is_constant(h) or np.unique(h).size == 2:
        return k_r
    k_hr = r_pareto_khat(h * r, "both", tail_len)
    if np.isnan(k_hr) and np.isnan(k_r):
        return np.nan
    return float(np.nanmax([k_hr, k_r]))


def _is_constant(x, tol=np.finfo(float).eps):
    return abs(np.max(x) - np.min(x)) < tol


def r_pareto_khat(x, tail, ndraws_tail):
    """``posterior::pareto_khat(x, tail = tail, ndraws_tail = ndraws_tail)`` (``posterior`` 1.7.1): the generalized
    Pareto shape of the ``ndraws_tail`` largest draws (``"left"``: of ``-x``; ``"both"``: the larger of the two) over
    the next one, with the Zhang & Stephens estimate and its weakly informative prior (:func:`_r_gpdfit`). NaN where
    ``x`` is not finite or constant, the tail is constant, or ``ndraws_tail`` is not below the number of draws; a tail
    length below 5 is raised to 5, and above half the draws for ``"both"`` lowered to half (as ``posterior``)."""
    x = np.asarray(x, dtype=float).ravel()
    if not np.all(np.isfinite(x)) or _is_constant(x):
        return np.nan
    m = max(int(ndraws_tail), 5)
    if m >= x.size:
        return np.nan
    if tail == "both":
        m = min(m, x.size // 2)
        ks = [_r_tail_khat(-x, m), _r_tail_khat(x, m)]
        return np.nan if all(np.isnan(ks)) else float(np.nanmax(ks))
    return _r_tail_khat(-x if tail == "left" else x, m)


def _r_tail_khat(x, m):
    """``posterior``'s ``ps_tail`` k-hat of the right tail of ``x`` (``m`` draws)."""
    xs = np.sort(x, kind="stable")
    tail = xs[x.size - m:]
    if _is_constant(tail):
        return np.nan
    cutoff = xs[x.size - m - 1]
    if cutoff == tail[0]:
        cutoff = cutoff - np.finfo(float).eps
    return _r_gpdfit(tail - cutoff)


def _r_gpdfit(x):
    """``posterior::gpdfit`` of the sorted exceedances ``x`` (``wip = TRUE``, 30 + sqrt(n) grid points, prior 3):
    the shape k-hat, NaN where the first quartile is not above the minimum, ``inf`` where the estimate is NaN."""
    n = x.size
    m = 30 + int(np.floor(np.sqrt(n)))
    xstar = x[int(np.floor(n / 4 + 0.5)) - 1]
    if not xstar > x[0]:
        return np.nan
    jj = np.arange(1, m + 1)
    theta = 1 / x[-1] + (1 - np.sqrt(m / (jj - 0.5))) / 3 / xstar
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.mean(np.log1p(-np.outer(theta, x)), axis=1)
        l_theta = n * (np.log(-theta / k) - k - 1)
        w_theta = np.exp(l_theta - logsumexp(l_theta))
        theta_hat = np.sum(theta * w_theta)
        k_hat = np.mean(np.log1p(-theta_hat * x))
    k_hat = (k_hat * n + 0.5 * 10) / (n + 10)
    return np.inf if np.isnan(k_hat) else float(k_hat)
