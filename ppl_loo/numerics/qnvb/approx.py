"""Quadratic projection of a loss onto the mean-field Hermite basis (Duersch, Section 4.2, Algorithm 2).

For ``q = N(mu, diag(sigma^2))`` the projection of ``L`` onto ``{1, theta_i - mu_i,
(theta_i - mu_i)^2 - sigma_i^2}`` has the coefficients (eqs. 3-4, by the Stein identities)

    g_i = E_q[d_i L],    h_i = E_q[d_i^2 L] = E_q[(theta_i - mu_i) d_i L] / sigma_i^2,

so only first derivatives are needed, and the local model is
``L(theta) ~ l + (theta - mu)^T g + (theta - mu)^T diag(h) (theta - mu) / 2`` with
``l = E_q[L] - h^T sigma^2 / 2`` (the value at ``mu`` of the projected quadratic).

:func:`quadratic_approx` evaluates the expectations with antithetic Hadamard pairs (Algorithm 2,
with the two typos of the paper fixed: ``q`` for ``k`` on line 10, ``l <- l / (2 n_q) - h^T sigma^2 / 2``
on line 18); :func:`stein_approx` with any standardized nodes ``x`` (``theta = mu + sigma x``,
optional weights), which reduces to Algorithm 2 for antithetic pairs.

``value_and_grad(theta (d,)) -> (scalar, (d,))`` is evaluated at all nodes at once with ``vmap``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ppl_loo.numerics.qnvb.quadrature import hadamard_signs

__all__ = ["QuadApprox", "quadratic_approx", "stein_approx"]


class QuadApprox(NamedTuple):
    """A projected quadratic ``l + (theta - mu)^T g + (theta - mu)^T diag(h) (theta - mu) / 2``.

    Attributes
    ----------
    l : scalar
        Value of the quadratic at ``mu`` (``E_q[L] - h^T sigma^2 / 2``).
    g : array, shape (d,)
        ``E_q[grad L]``.
    h : array, shape (d,)
        ``E_q[diag Hessian L]`` (Stein form; may be negative).
    n_evals : int
        Loss-and-gradient evaluations used (``2 n_pairs``, or the number of nodes).
    """

    l: object
    g: object
    h: object
    n_evals: int


def quadratic_approx(value_and_grad, mu, sigma, q1, n_pairs: int) -> QuadApprox:
    """Algorithm 2: ``(l, g, h)`` from ``n_pairs`` antithetic Hadamard pairs starting at iterate ``q1``.

    ::

        for q = q1 .. q1 + n_pairs - 1:
            s = hadamard_signs(d, q)
            (l+, g+) = L(mu + sigma s);  (l-, g-) = L(mu - sigma s)
            l += l+ + l-;  g += g+ + g-;  h += (g+ - g-) s
        g /= 2 n_pairs;  h /= 2 n_pairs sigma;  l = l / (2 n_pairs) - h^T sigma^2 / 2

    Exactness (notes section 3): ``g`` is exact for any quadratic ``L`` after one pair; ``h`` and
    ``l`` for a quadratic whose Hessian couples only ``(2k, 2k+1)`` with ``n_pairs = 2`` and even
    ``q1``, and for a dense Hessian over a full aligned period.

    Parameters
    ----------
    value_and_grad : callable
        ``theta (d,) -> (L, grad L)``.
    mu, sigma : array, shape (d,)
    q1 : int (may be traced)
        First iterate index of the Hadamard sequence.
    n_pairs : int
        Number of antithetic pairs (static); ``2 n_pairs`` evaluations.

    Returns
    -------
    QuadApprox
    """
    mu = jnp.asarray(mu)
    sigma = jnp.asarray(sigma, dtype=mu.dtype)
    d = mu.shape[-1]
    n = int(n_pairs)
    s = jax.vmap(lambda q: hadamard_signs(d, q, mu.dtype))(jnp.asarray(q1) + jnp.arange(n))  # (n, d)
    nodes = jnp.concatenate([mu + s * sigma, mu - s * sigma], axis=0)  # (2n, d): plus block, minus block
    values, grads = jax.vmap(value_and_grad)(nodes)
    g = jnp.mean(grads, axis=0)
    h = jnp.sum((grads[:n] - grads[n:]) * s, axis=0) / (2 * n * sigma)
    l = jnp.mean(values) - 0.5 * jnp.sum(h * sigma * sigma)
    return QuadApprox(l, g, h, 2 * n)


def stein_approx(value_and_grad, mu, sigma, x, weights=None) -> QuadApprox:
    """``(l, g, h)`` from general standardized nodes ``x`` (MC, QMC-1, QMC-2, Gauss-Hermite, ...).

    ``theta_k = mu + sigma x_k``; with weights ``w_k`` (default ``1/n``):
    ``g = sum_k w_k grad L(theta_k)``, ``h_i = sum_k w_k d_i L(theta_k) x_ki / sigma_i`` and
    ``l = sum_k w_k L(theta_k) - h^T sigma^2 / 2`` (the Stein forms of eqs. 3-4; Algorithm 2 for
    antithetic pairs).

    Parameters
    ----------
    value_and_grad : callable
        ``theta (d,) -> (L, grad L)``.
    mu, sigma : array, shape (d,)
    x : array, shape (n, d)
        Standardized nodes.
    weights : array, shape (n,), optional
        Quadrature weights summing to 1 (default equal).

    Returns
    -------
    QuadApprox
    """
    mu = jnp.asarray(mu)
    sigma = jnp.asarray(sigma, dtype=mu.dtype)
    x = jnp.asarray(x, dtype=mu.dtype)
    n = x.shape[0]
    w = jnp.full((n,), 1.0 / n, dtype=mu.dtype) if weights is None else jnp.asarray(weights, dtype=mu.dtype)
    values, grads = jax.vmap(value_and_grad)(mu + sigma * x)
    g = w @ grads
    h = (w @ (grads * x)) / sigma
    l = w @ values - 0.5 * jnp.sum(h * sigma * sigma)
    return QuadApprox(l, g, h, n)
