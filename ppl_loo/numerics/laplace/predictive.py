"""The linearized Laplace predictive (Faller & Martin 2025, Eq. 9-12, 17-19).

Linearizing the network at ``theta_hat`` (Eq. 1) gives, for a Gaussian posterior with epistemic
covariance ``Sigma`` of the outputs:

- regression (Eq. 10/18): ``N(y | f_hat(x), Sigma_x + sigma^2 I_C)``;
- classification (Eq. 12, notes A10): the probit approximation per logit,
  ``softmax(kappa * f_hat)`` with ``kappa = 1 / sqrt(1 + (pi/8) diag Sigma_x)``, as
  ``log_softmax(kappa * f)`` (the authors' code); for a single Bernoulli logit
  ``p(y=1) = sigmoid(kappa f)``.

The paper uses no Monte Carlo (A18): these closed forms are the validated path. The per-sample
blocks of ``Sigma_{P,X}`` come from :func:`predictive_variance` without the ``n C x n C`` matrix.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

__all__ = ["Predictive", "linearized_predictive", "predictive_log_density", "predictive_variance"]


class Predictive(NamedTuple):
    """``likelihood``; ``mean`` (``(n, C)``, the outputs at ``theta_hat``); ``var``: for regression the
    predictive covariance ``(n, C, C)`` or variance ``(n, C)`` *including* ``sigma^2``, for
    classification the epistemic one passed in; ``log_probs``: class log-probabilities ``(n, C)``
    (``(n, 2)`` for ``"bernoulli"``: ``[log p(y=0), log p(y=1)]``), None for regression."""

    likelihood: str
    mean: jnp.ndarray
    var: jnp.ndarray
    log_probs: jnp.ndarray | None


def _diag_var(var, n, C):
    var = jnp.asarray(var)
    if var.ndim == 3:
        var = jnp.diagonal(var, axis1=1, axis2=2)
    return var.reshape(n, C)


def linearized_predictive(f_map, var, likelihood, sigma2=None):
    """The linearized predictive from the outputs ``f_map`` and their epistemic (co)variance.

    Parameters
    ----------
    f_map : array (n, C)
        Means (``"gaussian"``) or logits (``"categorical"``); ``(n,)`` or ``(n, 1)`` for ``"bernoulli"``.
    var : array (n, C) or (n, C, C)
        Per-sample epistemic variances or covariance blocks of ``Sigma_X`` / ``Sigma_{P,X}``
        (:func:`predictive_variance`).
    likelihood : {"gaussian", "categorical", "bernoulli"}
    sigma2 : float or array (C,), optional
        Noise variance ``sigma^2`` (regression; required there).

    Returns
    -------
    Predictive
    """
    f = jnp.asarray(f_map)
    if likelihood == "gaussian":
        if sigma2 is None:
            raise ValueError("likelihood='gaussian' needs sigma2, the noise variance (notes A4).")
        f = f.reshape(f.shape[0], -1)
        var = jnp.asarray(var)
        s2 = jnp.broadcast_to(jnp.asarray(sigma2, dtype=f.dtype), (f.shape[1],))
        return Predictive(likelihood, f, var + (jnp.diag(s2) if var.ndim == 3 else s2), None)
    if likelihood == "bernoulli":
        f = f.reshape(-1, 1)
        kappa = 1.0 / jnp.sqrt(1.0 + math.pi / 8.0 * _diag_var(var, f.shape[0], 1))
        z = (kappa * f)[:, 0]
        return Predictive(likelihood, f, jnp.asarray(var),
                          jnp.stack([jax.nn.log_sigmoid(-z), jax.nn.log_sigmoid(z)], -1))
    if likelihood == "categorical":
        kappa = 1.0 / jnp.sqrt(1.0 + math.pi / 8.0 * _diag_var(var, *f.shape))
        return Predictive(likelihood, f, jnp.asarray(var), jax.nn.log_softmax(kappa * f, axis=-1))
    raise ValueError(f"likelihood={likelihood!r}; pass 'gaussian', 'categorical' or 'bernoulli'.")


def predictive_log_density(pred, y):
    """``log p(y_i | x_i, D)`` (``(n,)``) under a :class:`Predictive`: the (multivariate) Gaussian for
    regression (full per-sample covariance when given, as the authors' NLL, App. F), the class
    log-probability for classification (``y`` integer labels; ``{0, 1}`` for ``"bernoulli"``)."""
    if pred.log_probs is not None:
        y = jnp.asarray(y).astype(jnp.int32).reshape(-1)
        return jnp.take_along_axis(pred.log_probs, y[:, None], axis=1)[:, 0]
    r = jnp.asarray(y, dtype=pred.mean.dtype).reshape(pred.mean.shape) - pred.mean
    C = r.shape[1]
    if pred.var.ndim == 2:
        return -0.5 * jnp.sum(r**2 / pred.var + jnp.log(2.0 * math.pi * pred.var), axis=1)
    L = jnp.linalg.cholesky(pred.var)
    z = jax.vmap(lambda Li, ri: solve_triangular(Li, ri, lower=True))(L, r)
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=1, axis2=2)), axis=1)
    return -0.5 * (jnp.sum(z**2, axis=1) + logdet + C * math.log(2.0 * math.pi))


def predictive_variance(J_X, P, M, *, n_outputs=None, diagonal=False, JP=None):
    """Per-sample blocks of ``Sigma_{P,X} = J_X P M^{-1} P^T J_X^T`` (Eq. 19) without the
    ``n C x n C`` matrix: ``O(n C s^2)`` instead of ``O(n^2 C^2 s)``.

    Parameters
    ----------
    J_X : array (n, C, d) or (n C, d)
        Stacked Jacobian (sample-major; give ``n_outputs=C`` with the 2-D form, default 1).
    P : array (d, s)
    M : array (s, s)
        ``P^T Psi^{-1} P`` (:func:`~ppl_loo.numerics.laplace.subspace.subspace_precision`).
    diagonal : bool
        Return only the variances ``(n, C)``.
    JP : array, optional
        ``J_X P`` if already known (same leading shape as ``J_X``); then ``J_X`` and ``P`` are unused.

    Returns
    -------
    array (n, C, C), or (n, C) with ``diagonal=True``.
    """
    JP = jnp.asarray(J_X) @ jnp.asarray(P) if JP is None else jnp.asarray(JP)
    if JP.ndim == 2:
        C = 1 if n_outputs is None else int(n_outputs)
        JP = JP.reshape(JP.shape[0] // C, C, JP.shape[1])
    L = jnp.linalg.cholesky(0.5 * (jnp.asarray(M) + jnp.asarray(M).T))
    W = jnp.einsum("ncs->nsc", solve_triangular(L, JP.reshape(-1, JP.shape[-1]).T, lower=True).T.reshape(JP.shape))
    if diagonal:
        return jnp.sum(W**2, axis=1)
    return jnp.einsum("nsc,nsd->ncd", W, W)
