"""Weighted moments of draws, used by the moment-matching and Newton proposals.

Pure array functions (no model): everything takes draws ``theta`` of shape ``(S, d)`` and
normalized log weights ``lw`` of shape ``(S,)``.
"""

import jax.numpy as jnp
from jax.scipy.special import logsumexp

__all__ = ["normalize_log_weights", "weighted_mean", "weighted_var_about", "mean_sd"]


def normalize_log_weights(lw):
    """Shift log weights so that they sum (in linear scale) to one along the last axis."""
    return lw - logsumexp(lw, axis=-1, keepdims=True)


def weighted_mean(theta, lw):
    """``sum_k w_k theta_k`` for normalized log weights ``lw``."""
    return jnp.exp(lw) @ theta


def weighted_var_about(theta, lw, center):
    """``sum_k w_k (theta_k - center)^2``, componentwise (Paananen's T2 centres at the mean)."""
    return jnp.exp(lw) @ jnp.square(theta - center)


def mean_sd(theta):
    """Sample mean and standard deviation (ddof=1) of the draws, componentwise."""
    return jnp.mean(theta, axis=0), jnp.std(theta, axis=0, ddof=1)
