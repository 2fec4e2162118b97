"""Gaussian approximations of a posterior in the unconstrained space, as importance-sampling proposals.

Two forms, both full rank so that they can serve as the proposal ``q`` of Eq. 13 (the weights of
LOO from an approximation):

- :class:`SubspaceGaussian`: ``N(m, Sigma)`` with ``Sigma = Q K Q^T + c (I - Q Q^T)``: a Gaussian
  ``K`` on the span of the orthonormal ``Q`` (``d x s``) and an isotropic variance ``c`` on its
  orthogonal complement. It holds the full Laplace approximation (``s = d``), the exact Laplace of
  a network whose precision is a low-rank GGN plus an isotropic prior (``Q`` spans the Jacobian
  rows, ``c = 1 / lambda``), and the subspace Laplace of Faller & Martin (``Q`` the orthonormalized
  ``P``, ``K = (Q^T Lambda Q)^-1``, Lemma 1 with the restricted prior of notes A1) completed on the
  complement (notes, section 5, feature 5 (ii)).
- :class:`MeanField`: ``N(mu, diag(sigma^2))`` (QNVB, ADVI).

Everything is pure JAX; ``log_q`` is per draw (vmap it), ``sample`` is batched.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["SubspaceGaussian", "MeanField", "log_q", "sample", "cov_mv", "marginal_sd", "subspace_gaussian"]

_LOG_2PI = 1.8378770664093453


class SubspaceGaussian(NamedTuple):
    """``N(mean, Q K Q^T + c (I - Q Q^T))`` with ``K = chol chol^T``."""

    mean: jnp.ndarray  # (d,)
    basis: jnp.ndarray  # (d, s) orthonormal columns Q
    chol: jnp.ndarray  # (s, s) lower Cholesky factor of K
    c: jnp.ndarray  # () variance on the complement of span(Q) (unused when s = d)


class MeanField(NamedTuple):
    """``N(mean, diag(sd^2))``."""

    mean: jnp.ndarray  # (d,)
    sd: jnp.ndarray  # (d,)


def subspace_gaussian(mean, basis, K, c):
    """A :class:`SubspaceGaussian` from the covariance ``K`` on ``span(basis)`` (Cholesky checked)."""
    K = 0.5 * (K + K.T)
    L = jnp.linalg.cholesky(K)
    if not bool(jnp.all(jnp.isfinite(L))):
        raise ValueError("the covariance of the approximation on its subspace is not positive definite: the "
                         "curvature at the mode is not a precision (try curvature='ggn' or a prior_precision).")
    return SubspaceGaussian(jnp.asarray(mean), jnp.asarray(basis), L, jnp.asarray(c, dtype=L.dtype))


def _complement_dim(g: SubspaceGaussian):
    return g.basis.shape[0] - g.basis.shape[1]


def log_q(g, theta):
    """``log q(theta)`` (normalized) of one draw ``theta`` (``(d,)``)."""
    d = theta.shape[-1]
    z = theta - g.mean
    if isinstance(g, MeanField):
        return -0.5 * (jnp.sum(jnp.square(z / g.sd)) + d * _LOG_2PI) - jnp.sum(jnp.log(g.sd))
    a = g.basis.T @ z
    u = jax.scipy.linalg.solve_triangular(g.chol, a, lower=True)
    quad = jnp.sum(jnp.square(u))
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diag(g.chol)))
    k = _complement_dim(g)
    if k > 0:
        r = z - g.basis @ a
        quad = quad + jnp.sum(jnp.square(r)) / g.c
        logdet = logdet + k * jnp.log(g.c)
    return -0.5 * (quad + logdet + d * _LOG_2PI)


def sample(g, eps):
    """Draws ``(S, d)`` from ``q`` given standard normal ``eps`` ``(S, d)``."""
    if isinstance(g, MeanField):
        return g.mean + eps * g.sd
    z1 = eps @ g.basis  # (S, s): the coordinates of eps on span(Q), standard normal
    inside = (z1 @ g.chol.T) @ g.basis.T
    if _complement_dim(g) == 0:
        return g.mean + inside
    return g.mean + inside + jnp.sqrt(g.c) * (eps - z1 @ g.basis.T)


def cov_mv(g, v):
    """``Sigma v`` for ``v`` of shape ``(d,)`` or ``(d, k)``."""
    if isinstance(g, MeanField):
        sd2 = jnp.square(g.sd)
        return sd2 * v if v.ndim == 1 else sd2[:, None] * v
    a = g.basis.T @ v
    inside = g.basis @ (g.chol @ (g.chol.T @ a))
    if _complement_dim(g) == 0:
        return inside
    return inside + g.c * (v - g.basis @ a)


def marginal_sd(g):
    """The marginal standard deviations ``sqrt(diag Sigma)`` (``(d,)``)."""
    if isinstance(g, MeanField):
        return g.sd
    B = g.basis @ g.chol  # (d, s)
    var = jnp.sum(jnp.square(B), axis=1)
    if _complement_dim(g) > 0:
        var = var + g.c * (1.0 - jnp.sum(jnp.square(g.basis), axis=1))
    return jnp.sqrt(var)
