"""Projective integral updates without Algorithm 3's safeguards (Duersch, Sections 4.1-4.3).

- :func:`projective_fixed_point`: the Gaussian mean-field fixed-point iteration of Section 4.2,
  ``mu <- mu - g / h``, ``sigma <- h^{-1/2}`` with ``h`` clamped at ``h_min``, computed with a
  large quadrature (a full Hadamard period, or tensor Gauss-Hermite for ``d <= 3``) and damped on
  ``log sigma`` (notes 7, feature 5). Undamped, the iteration can cycle: for ``L = theta^4 / 4``
  the exact map is ``sigma <- 1 / (sqrt(3) sigma)`` (notes T9).
- :func:`projective_loo`: the projective leave-one-out proposal (notes 7, feature 7, the project's
  extension): one projective update that removes case ``c`` from a fitted ``q``.
- :func:`spike_slab_update`: the Dirac-Gauss (spike-and-slab) mean-field update of Section 4.3
  (eq. 7) with the mixture moments used to place the quadrature nodes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ppl_loo.numerics.qnvb.approx import quadratic_approx, stein_approx
from ppl_loo.numerics.qnvb.quadrature import gauss_hermite_nodes, hadamard_period

__all__ = ["FixedPoint", "LooProposal", "SpikeSlab", "projective_fixed_point", "projective_loo", "spike_slab_update"]


class FixedPoint(NamedTuple):
    """Result of :func:`projective_fixed_point`: the last iterate and the path ``(iters, d)``."""

    mu: object
    sigma: object
    mu_path: object
    sigma_path: object


class LooProposal(NamedTuple):
    """``q_{-c} = N(mu, diag(sigma^2))`` and the case's projected gradient ``g`` and Hessian
    diagonal ``h`` of ``l_c = -log p(y_c | theta)`` under the full-data ``q``."""

    mu: object
    sigma: object
    g: object
    h: object


class SpikeSlab(NamedTuple):
    """Dirac-Gauss factor ``q(z) delta(theta) + q(not z) N(nu, tau^2)`` (eq. 7): slab mean ``nu``
    and sd ``tau``, zero-logit ``zeta = log(q(z) / q(not z))``, ``p_zero = q(z)``, and the mixture
    moments ``mu = q(not z) nu``, ``sigma^2 = q(z) q(not z) nu^2 + q(not z) tau^2`` (Section 4.3)."""

    nu: object
    tau: object
    zeta: object
    p_zero: object
    mu: object
    sigma: object


def _approx_fn(value_and_grad, d, n_pairs, quadrature, gh_order):
    if quadrature == "gauss_hermite":
        x, w = gauss_hermite_nodes(d, gh_order)
        return lambda mu, sigma: stein_approx(value_and_grad, mu, sigma, x, w)
    if quadrature != "hadamard":
        raise ValueError(f"quadrature={quadrature!r}: choose 'hadamard' or 'gauss_hermite'.")
    n = hadamard_period(d) if n_pairs is None else int(n_pairs)
    return lambda mu, sigma: quadratic_approx(value_and_grad, mu, sigma, 0, n)


def projective_fixed_point(value_and_grad, mu0, sigma0, *, n_pairs=None, damping: float = 0.5, iters: int = 200,
                           quadrature: str = "hadamard", gh_order: int = 30, h_min: float = 1e-12) -> FixedPoint:
    """Damped projective fixed-point iteration for a Gaussian mean-field ``q`` (Section 4.2).

    Each iteration projects the loss onto the Hermite basis at the current ``q``
    (``g = E_q[grad L]``, ``h = E_q[diag Hess L]``), then sets ``h_hat = max(h, h_min)``,
    ``mu <- mu - g / h_hat`` and
    ``log sigma <- damping log sigma + (1 - damping) (-log(h_hat) / 2)``. The fixed points are the
    stationarity conditions of the mean-field ELBO (Theorem 4.2). The quadrature is the same at
    every iteration (a fixed map): Hadamard pairs ``0 .. n_pairs - 1`` or Gauss-Hermite.

    Parameters
    ----------
    value_and_grad : callable
        ``theta (d,) -> (L, grad L)`` with ``L = -log p(D, theta)``.
    mu0, sigma0 : array, shape (d,)
    n_pairs : int, optional
        Hadamard pairs per iteration; default a full period ``2^ceil(log2 d)`` (every quadratic exact).
    damping : float in [0, 1)
        Weight of the old ``log sigma`` (0: undamped).
    iters : int
    quadrature : {"hadamard", "gauss_hermite"}
    gh_order : int
        Gauss-Hermite points per coordinate (tensor rule, ``d <= 3``).
    h_min : float

    Returns
    -------
    FixedPoint
    """
    mu0 = jnp.asarray(mu0)
    mu0 = mu0.astype(jnp.result_type(mu0.dtype, float))
    approx = _approx_fn(value_and_grad, mu0.shape[-1], n_pairs, quadrature, gh_order)

    def body(carry, _):
        mu, log_s = carry
        qa = approx(mu, jnp.exp(log_s))
        hh = jnp.maximum(qa.h, h_min)
        mu = mu - qa.g / hh
        log_s = damping * log_s + (1.0 - damping) * (-0.5 * jnp.log(hh))
        return (mu, log_s), (mu, jnp.exp(log_s))

    log_s0 = jnp.log(jnp.asarray(sigma0, dtype=mu0.dtype) * jnp.ones_like(mu0))
    (mu, log_s), (mu_path, sigma_path) = jax.lax.scan(body, (mu0, log_s0), None, length=int(iters))
    return FixedPoint(mu, jnp.exp(log_s), mu_path, sigma_path)


def projective_loo(loglik_c, mu, sigma, *, n_pairs: int = 2, q1=0, h_min: float = 1e-12) -> LooProposal:
    """Projective leave-one-out proposal: remove case ``c`` from a fitted ``q`` in one update.

    ``q = N(mu, diag(sigma^2))`` is taken as a fixed point for the full loss
    ``L = l_c + L_{-c}``: ``E_q[grad L] = 0`` and ``h = E_q[diag Hess L] = sigma^{-2}``. With
    ``g_c = E_q[grad l_c]`` and ``h_c = E_q[diag Hess l_c]`` from Algorithm 2 on
    ``l_c = -log p(y_c | theta)``, the loss without case ``c`` has ``E_q[grad L_{-c}] = -g_c``
    and ``E_q[diag Hess L_{-c}] = h - h_c``, so the projective update (Section 4.2) gives

        mu_{-c} = mu + g_c / (h - h_c),    sigma_{-c}^2 = 1 / max(h - h_c, h_min).

    Exact for a Gaussian likelihood and a Gaussian ``q`` (notes T8). Pure JAX: ``jit``- and
    ``vmap``-traceable, with ``loglik_c`` closing over a traced case index and ``q1`` traced.

    Parameters
    ----------
    loglik_c : callable
        ``theta (d,) -> log p(y_c | theta)`` (scalar).
    mu, sigma : array, shape (d,)
    n_pairs : int
        Hadamard pairs (static; ``2 n_pairs`` gradient evaluations).
    q1 : int (may be traced)
    h_min : float

    Returns
    -------
    LooProposal
        ``(mu_{-c}, sigma_{-c}, g_c, h_c)``.
    """
    mu = jnp.asarray(mu)
    sigma = jnp.asarray(sigma, dtype=mu.dtype)

    def loss_vg(theta):
        v, g = jax.value_and_grad(loglik_c)(theta)
        return -v, -g

    qa = quadratic_approx(loss_vg, mu, sigma, q1, n_pairs)
    prec = jnp.maximum(sigma ** -2 - qa.h, h_min)
    return LooProposal(mu + qa.g / prec, prec ** -0.5, qa.g, qa.h)


def spike_slab_update(g, h, mu_t, h_p, zeta_p) -> SpikeSlab:
    """Dirac-Gauss mean-field update (Section 4.3, eq. 7).

    With the likelihood part's projected gradient ``g`` and Hessian diagonal ``h`` at the expansion
    point ``mu_t`` (the mixture mean), a slab prior ``N(0, 1 / h_p)`` and prior zero-logit
    ``zeta_p = log(p(z) / p(not z))``::

        nu = (h mu_t - g) / (h_p + h),   tau^2 = 1 / (h_p + h),
        zeta = zeta_p + [log((h_p + h) / h_p) - (h_p + h) nu^2] / 2.

    For a Gaussian likelihood this is the exact spike-and-slab posterior for any ``mu_t`` (notes T10).
    The next quadrature uses the mixture moments ``mu``, ``sigma`` (not ``nu``, ``tau``).

    Returns
    -------
    SpikeSlab
    """
    g, h, mu_t = jnp.asarray(g), jnp.asarray(h), jnp.asarray(mu_t)
    prec = h_p + h
    nu = (h * mu_t - g) / prec
    zeta = zeta_p + 0.5 * (jnp.log(prec / h_p) - prec * nu * nu)
    p_zero = jax.nn.sigmoid(zeta)
    p_slab = jax.nn.sigmoid(-zeta)
    var = p_zero * p_slab * nu * nu + p_slab / prec
    return SpikeSlab(nu, prec ** -0.5, zeta, p_zero, p_slab * nu, jnp.sqrt(var))
