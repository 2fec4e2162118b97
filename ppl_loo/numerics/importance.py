"""Importance weights beside PSIS, as R ``loo``'s ``tis``, ``sis`` and ``psis_n_eff``: truncated (TIS) and plain (SIS)
importance sampling, the effective sample size of normalized weights, and the normalizing constant of PSIS's smoothed
weights (``norm_const_log``). NumPy arrays with the draws on the last axis, batched over leading axes."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = ["tis_log_weights", "normalize_log_weights", "is_n_eff", "psis_norm_const_log"]


def tis_log_weights(log_ratios):
    """Truncated importance sampling (Ionides 2008): ``min(r_s, log mean exp(r) + log(S) / 2)``, unnormalized, as
    R ``loo``'s ``do_tis_i``; ``log_ratios`` ``(..., S)``."""
    r = np.asarray(log_ratios, dtype=np.float64)
    S = r.shape[-1]
    cut = logsumexp(r, axis=-1, keepdims=True) - np.log(S) + 0.5 * np.log(S)
    return np.minimum(r, cut)


def normalize_log_weights(log_weights):
    """``log_weights - logsumexp(log_weights)`` over the last axis (the weights sum to 1)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    return lw - logsumexp(lw, axis=-1, keepdims=True)


def is_n_eff(log_weights, r_eff=1.0):
    """Effective sample size of normalized log weights ``(..., S)``: ``r_eff / sum_s w_s^2`` (R ``loo``'s
    ``psis_n_eff``; ``r_eff`` one value or one per row)."""
    w2 = np.exp(2.0 * np.asarray(log_weights, dtype=np.float64))
    return np.asarray(r_eff, dtype=np.float64) / np.sum(w2, axis=-1)


def psis_norm_const_log(log_ratios, log_weights):
    """``log sum_s`` of PSIS's smoothed weights on the scale of the raw ratios (R ``loo``'s ``norm_const_log``), from
    the raw log ratios and the normalized smoothed log weights ``(..., S)``: the smallest ratio is never in the
    Pareto tail, so its raw and normalized values differ by exactly that constant."""
    r = np.asarray(log_ratios, dtype=np.float64)
    lw = np.asarray(log_weights, dtype=np.float64)
    j = np.argmin(np.where(np.isfinite(r), r, np.inf), axis=-1)[..., None]  # a draw of weight 0 says nothing
    return np.take_along_axis(r, j, axis=-1)[..., 0] - np.take_along_axis(lw, j, axis=-1)[..., 0]
