"""Exact closed-form Jacobian determinants of the gradient-flow transformations.

Every gradient-flow transformation of a sigmoidal model (KL, Var and LL descent) has the form
``T(theta) = theta + h Q(theta)`` with ``Q = c(theta) grad mu_i(theta)`` for a scalar field ``c``.
Its Jacobian is therefore

.. math::

    J = I + \\alpha \\nabla\\nabla\\mu_i(\\theta) + \\nabla\\mu_i(\\theta)\\, u^\\top      (*)

with one scalar ``alpha`` and one vector ``u`` per draw (Chang et al. 2024 Eq. 32-33, Chang et al. v3 Eq. 26 with the
Hessian restored; Chang et al. 2024 S.34 for LL). The orientation (``J`` or ``J^T``) does not change the
determinant.

* KL / Var descent (``kappa = 1, 2``): ``Q = A grad(mu)``, ``grad A = A b`` with
  ``b = grad log pi(theta|D) + kappa (1 - 2y) grad(mu)``, so ``alpha = h A`` and ``u = h A b``
  (:func:`kl_var_coefficients`).
* LL descent: ``Q = -(y - sigmoid(mu)) grad(mu)``, so ``alpha = -h (y - sigmoid(mu))`` and
  ``u = h sigmoid(mu) (1 - sigmoid(mu)) grad(mu)`` (:func:`ll_coefficients`).

Two model classes have Hessians with known structure, which gives ``O(P)`` determinants per draw
without forming a ``P x P`` matrix:

* logistic regression (:func:`glm_logdet`): ``Hess(mu) = 0``, matrix-determinant lemma
  (Chang et al. v3 Eq. 28, Chang et al. 2024 Eq. 35-36);
* a one-hidden-layer ReLU network (:func:`relu_logdet`): ``Hess(mu)`` has eigenvalues
  ``+-|u_k|`` on a 2-dimensional subspace per active hidden unit and 0 elsewhere
  (Chang et al. v3 Eq. 29-32, Chang et al. 2024 Eq. 42-44 and S.2.1 / S.17-S.36).

All functions are pure ``jax.numpy``, broadcast over arbitrary leading axes (draws ``S``, a grid
of step sizes ``G``, ...) and can be wrapped in :func:`jax.jit`. They return
``(logabsdet, sign)`` with the convention of :func:`jax.numpy.linalg.slogdet`: a zero determinant
gives ``logabsdet = -inf`` and ``sign = 0``. A signed determinant ``<= 0`` means that ``T`` is not
locally invertible at that draw; the sign is returned so the caller can flag it (nothing raises).

Papers: "Chang et al. 2024" is Chang, Li, Xu, Yao, Porcino and Chow, "Gradient-flow adaptive importance
sampling for Bayesian leave one out cross-validation with application to sigmoidal classification models"
(arXiv:2402.08151, with its supplement: equations ``S.N``); "Chang et al. v3" is its revision, "Perturbative
partial moment matching and gradient-flow adaptive importance sampling transformations for Bayesian leave one
out cross-validation" (arXiv:2402.08151v3), whose numbering a bare "Eq. N" follows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "glm_logdet",
    "relu_logdet",
    "relu_mu",
    "relu_grad_mu",
    "relu_unit_terms",
    "relu_flatten",
    "relu_unflatten",
    "relu_param_dim",
    "kl_var_coefficients",
    "ll_coefficients",
]


def _slog(det):
    """``(log|det|, sign(det))`` of a real array, ``(-inf, 0)`` where ``det == 0``."""
    return jnp.log(jnp.abs(det)), jnp.sign(det)


# --------------------------------------------------------------------------------------------
# coefficients of (*) for the concrete transformations
# --------------------------------------------------------------------------------------------


def kl_var_coefficients(h, A, b):
    """Coefficients ``(alpha, u)`` of (*) for KL (``kappa = 1``) or Var (``kappa = 2``) descent.

    ``Q = A grad(mu)`` with ``A = (1 - 2y) pi(theta|D) exp(kappa mu (1 - 2y))`` (Chang et al. v3 Eq. 25)
    and ``grad A = A b`` where ``b = grad log pi(theta|D) + kappa (1 - 2y) grad(mu)``
    (Chang et al. 2024 Eq. 32-33). Then ``J = I + h A Hess(mu) + grad(mu) (h A b)^T``.

    Parameters
    ----------
    h : array_like, shape broadcastable with ``A``
        Step size(s), e.g. shape ``(G, 1)`` for a grid of step sizes against ``A`` of shape
        ``(S,)``. Only the product ``h A`` matters, so an unnormalized ``pi`` is fine as long as
        ``h`` was computed from the same unnormalized ``Q`` (notes section 3.3).
    A : array_like, shape ``(...)``
        The signed scalar prefactor of ``Q``.
    b : array_like, shape ``(..., P)``
        ``grad log A``.

    Returns
    -------
    alpha : jax.Array, shape ``broadcast(h, A)``
        ``h A``.
    u : jax.Array, shape ``broadcast(h, A) + (P,)``
        ``h A b``.
    """
    alpha = jnp.asarray(h) * jnp.asarray(A)
    return alpha, alpha[..., None] * jnp.asarray(b)


def ll_coefficients(h, mu, y, grad_mu):
    """Coefficients ``(alpha, u)`` of (*) for log-likelihood descent (Chang et al. 2024 S.34).

    ``T(theta) = theta - h grad log l_i = theta - h (y - sigmoid(mu)) grad(mu)``, hence
    ``J = I - h (y - sigmoid(mu)) Hess(mu) + grad(mu) (h sigmoid(mu)(1 - sigmoid(mu)) grad(mu))^T``.

    Parameters
    ----------
    h : array_like, shape broadcastable with ``mu``
        Step size(s).
    mu : array_like, shape ``(...)``
        Logit ``mu_i(theta)`` per draw.
    y : array_like
        The label ``y_i`` in ``{0, 1}`` (scalar or broadcastable with ``mu``).
    grad_mu : array_like, shape ``(..., P)``
        ``grad mu_i(theta)``.

    Returns
    -------
    alpha : jax.Array, shape ``broadcast(h, mu)``
        ``-h (y - sigmoid(mu))``.
    u : jax.Array, shape ``broadcast(h, mu) + (P,)``
        ``h sigmoid(mu) (1 - sigmoid(mu)) grad(mu)``.
    """
    h = jnp.asarray(h)
    mu = jnp.asarray(mu)
    sig = jax.nn.sigmoid(mu)
    alpha = -h * (jnp.asarray(y, dtype=mu.dtype) - sig)
    q = h * sig * (1.0 - sig)
    return alpha, q[..., None] * jnp.asarray(grad_mu)


# --------------------------------------------------------------------------------------------
# logistic regression
# --------------------------------------------------------------------------------------------


def glm_logdet(alpha, u, x):
    """Exact ``log|det J|`` and ``sign(det J)`` of (*) for a linear predictor (Chang et al. v3 Eq. 28).

    For ``mu = x . beta`` the Hessian vanishes and ``grad(mu) = x``, so ``J = I + x u^T`` and by
    the matrix-determinant lemma ``det J = 1 + u . x`` (Chang et al. v3 Eq. 28, Chang et al. 2024 Eq. 35-36). With
    ``u = h A b`` this is ``1 + h A x^T [grad log pi + kappa (1 - 2y) x]`` (KL/Var); with the
    LL coefficients it is ``1 + h sigmoid(mu)(1 - sigmoid(mu)) |x|^2 > 0``.

    Parameters
    ----------
    alpha : array_like or None
        Unused (the Hessian term is zero); accepted for a uniform signature with
        :func:`relu_logdet`.
    u : array_like, shape ``(..., q)``
        Rank-one coefficient vector of (*) restricted to the regression coefficients.
    x : array_like, shape ``(q,)`` or broadcastable to ``(..., q)``
        Design row of the observation, including the constant 1 of the intercept.

    Returns
    -------
    logabsdet : jax.Array, shape ``(...)``
        ``log|1 + u . x|`` (``-inf`` where it is 0).
    sign : jax.Array, shape ``(...)``
        ``sign(1 + u . x)``; ``<= 0`` flags a draw where ``T`` is not locally invertible.
    """
    del alpha
    det = 1.0 + jnp.sum(jnp.asarray(u) * jnp.asarray(x), axis=-1)
    return _slog(det)


# --------------------------------------------------------------------------------------------
# one-hidden-layer ReLU network
# --------------------------------------------------------------------------------------------


def relu_param_dim(H: int, p: int) -> int:
    """Dimension ``P = H p + H + 1`` of the flat ReLU parameter vector ``(vec W1, W2, b2)``."""
    return H * p + H + 1


def relu_flatten(W1, W2, b2):
    """Flatten ``(W1, W2, b2)`` into the parameter vector ``(vec(W1) row-major, W2, b2)``.

    Parameters
    ----------
    W1 : array_like, shape ``(..., H, p)``
    W2 : array_like, shape ``(..., H)``
    b2 : array_like, shape ``(...)``

    Returns
    -------
    theta : jax.Array, shape ``(..., H p + H + 1)``
        Unit 0's ``p`` first-layer weights first, then unit 1's, ..., then ``W2``, then ``b2``.
    """
    W1 = jnp.asarray(W1)
    W2 = jnp.asarray(W2)
    b2 = jnp.asarray(b2)
    lead = jnp.broadcast_shapes(W1.shape[:-2], W2.shape[:-1], b2.shape)
    H, p = W1.shape[-2:]
    W1 = jnp.broadcast_to(W1, lead + (H, p)).reshape(lead + (H * p,))
    W2 = jnp.broadcast_to(W2, lead + (H,))
    b2 = jnp.broadcast_to(b2, lead)[..., None]
    return jnp.concatenate([W1, W2, b2], axis=-1)


def relu_unflatten(theta, H: int, p: int):
    """Split a flat ReLU parameter vector into ``(W1, W2, b2)`` (inverse of :func:`relu_flatten`).

    Parameters
    ----------
    theta : array_like, shape ``(..., H p + H + 1)``
    H, p : int
        Number of hidden units and input dimension (including the constant-1 column).

    Returns
    -------
    W1 : jax.Array, shape ``(..., H, p)``
    W2 : jax.Array, shape ``(..., H)``
    b2 : jax.Array, shape ``(...)``
    """
    theta = jnp.asarray(theta)
    P = relu_param_dim(H, p)
    if theta.shape[-1] != P:
        raise ValueError(f"expected last axis of size H*p+H+1 = {P}, got {theta.shape[-1]}")
    lead = theta.shape[:-1]
    W1 = theta[..., : H * p].reshape(lead + (H, p))
    W2 = theta[..., H * p : H * p + H]
    b2 = theta[..., H * p + H]
    return W1, W2, b2


def _preactivation(W1, x):
    """``z_1 = W1 x`` with ``W1`` of shape ``(..., H, p)`` and ``x`` of shape ``(..., p)``."""
    return jnp.sum(jnp.asarray(W1) * jnp.asarray(x)[..., None, :], axis=-1)


def relu_mu(W1, W2, b2, x):
    """Logit of a one-hidden-layer ReLU net, ``mu = W2 . relu(W1 x) + b2`` (Chang et al. 2024 Ex. 4.1).

    Parameters
    ----------
    W1 : array_like, shape ``(..., H, p)``
        First-layer weights; ``x`` carries a constant 1 so the first-layer bias is a column.
    W2 : array_like, shape ``(..., H)``
        Second-layer weights.
    b2 : array_like, shape ``(...)``
        Output bias.
    x : array_like, shape ``(p,)`` or broadcastable to ``(..., p)``
        Input of the observation (with the constant-1 component).

    Returns
    -------
    mu : jax.Array, shape ``(...)``
    """
    z = _preactivation(W1, x)
    return jnp.sum(jnp.asarray(W2) * jnp.maximum(z, 0.0), axis=-1) + jnp.asarray(b2)


def relu_grad_mu(W1, W2, b2, x):
    """Closed-form ``grad(mu)`` of the ReLU net as a flat ``P``-vector (Chang et al. 2024 S.28-S.31).

    ``d mu / d b2 = 1`` (S.28), ``d mu / d (W2)_k = a((z_1)_k)`` (S.29) and
    ``d mu / d (W1)_{kj} = (W2)_k a'((z_1)_k) x_j`` (S.30-S.31), with ``a = ReLU`` and the
    convention ``a'(0) = 0``. Order: ``vec(W1)`` row-major (unit 0's ``p`` weights first),
    then ``W2`` (``H``), then ``b2``.

    Parameters
    ----------
    W1 : array_like, shape ``(..., H, p)``
    W2 : array_like, shape ``(..., H)``
    b2 : array_like, shape ``(...)``
        Only its shape is used (``grad`` w.r.t. ``b2`` is 1).
    x : array_like, shape ``(p,)`` or broadcastable to ``(..., p)``

    Returns
    -------
    grad_mu : jax.Array, shape ``(..., H p + H + 1)``
    """
    W1 = jnp.asarray(W1)
    W2 = jnp.asarray(W2)
    x = jnp.asarray(x)
    z = _preactivation(W1, x)  # (..., H)
    active = (z > 0).astype(z.dtype)
    a = jnp.where(z > 0, z, 0.0)
    gW1 = (W2 * active)[..., None] * x[..., None, :]  # (..., H, p)
    lead = jnp.broadcast_shapes(gW1.shape[:-2], a.shape[:-1], jnp.shape(b2))
    H, p = gW1.shape[-2:]
    gW1 = jnp.broadcast_to(gW1, lead + (H, p)).reshape(lead + (H * p,))
    a = jnp.broadcast_to(a, lead + (H,))
    return jnp.concatenate([gW1, a, jnp.ones(lead + (1,), dtype=a.dtype)], axis=-1)


def relu_unit_terms(alpha, u, W1, W2, x):
    """Per-hidden-unit factors of the ReLU determinant of (*) (Chang et al. 2024 S.2.1, notes section 4).

    In the orthonormal basis ``{n_k = u~_k/|u_k|, e_k}`` of the ``W1``-row-``k`` / ``(W2)_k``
    plane of an active unit ``k``, ``Hess(mu)`` is ``[[0, |u_k|], [|u_k|, 0]]`` (eigenvalues
    ``+-|u_k|``, eigenvectors ``v_k^{+-} = (n_k +- e_k)/sqrt 2``, Chang et al. 2024 Eq. 42-44, S.27) and
    ``M = I + alpha Hess(mu)`` restricted to it is ``[[1, alpha|u_k|], [alpha|u_k|, 1]]``.
    This returns

    * ``d_k = det M_k = (1 + alpha|u_k|)(1 - alpha|u_k|) = 1 - alpha^2 a'_k |x|^2``;
    * ``N_k = u_k^T adj(M_k) g_k`` for the plane components ``g_k, u_k`` of ``grad(mu)`` and
      ``u``, which expands to

      ``N_k = W2_k t_k + uW2_k a_k - alpha (a_k t_k + W2_k uW2_k a'_k |x|^2)``,
      ``t_k = a'_k (uW1_k . x)``, ``a_k = relu((z_1)_k)``.

    ``N_k / d_k = c_{k+} (v_k^+ . u)/(1 + alpha|u_k|) + c_{k-} (v_k^- . u)/(1 - alpha|u_k|)``
    with ``c_{k+-} = (W2_k |u_k| +- a_k)/sqrt 2`` (S.32-S.33) is the eigenbasis form of the
    notes; the polynomial form above needs no division by ``|u_k|`` or by ``d_k``, so inactive
    units (``a'_k = 0``: ``d_k = 1``, ``N_k = 0``) and singular ``M`` are exact, not 0/0.

    Parameters
    ----------
    alpha : array_like, shape ``(...)``
    u : array_like, shape ``(..., P)``
    W1 : array_like, shape ``(..., H, p)``
    W2 : array_like, shape ``(..., H)``
    x : array_like, shape ``(p,)`` or broadcastable to ``(..., p)``

    Returns
    -------
    d : jax.Array, shape ``(..., H)``
    N : jax.Array, shape ``(..., H)``
    u_b2 : jax.Array, shape ``(...)``
        The ``b2`` component of ``u`` (``grad(mu)`` has ``b2`` component 1 and ``M`` is the
        identity there).
    """
    alpha = jnp.asarray(alpha)
    u = jnp.asarray(u)
    W1 = jnp.asarray(W1)
    W2 = jnp.asarray(W2)
    x = jnp.asarray(x)
    H, p = W1.shape[-2:]
    P = relu_param_dim(H, p)
    if u.shape[-1] != P:
        raise ValueError(f"u has last axis {u.shape[-1]}, expected H*p+H+1 = {P} (H={H}, p={p})")
    uW1 = u[..., : H * p].reshape(u.shape[:-1] + (H, p))
    uW2 = u[..., H * p : H * p + H]
    u_b2 = u[..., P - 1]

    z = _preactivation(W1, x)  # (..., H)
    active = (z > 0).astype(z.dtype)  # a'(z), with a'(0) = 0
    a = jnp.where(z > 0, z, 0.0)  # a(z)
    rho2 = active * jnp.sum(x * x, axis=-1)[..., None]  # |u_k|^2 = a'_k |x|^2
    t = active * jnp.sum(uW1 * x[..., None, :], axis=-1)  # a'_k (uW1_k . x) = |u_k| (n_k . u)

    al = alpha[..., None]
    d = 1.0 - al * al * rho2
    N = W2 * t + uW2 * a - al * (a * t + W2 * uW2 * rho2)
    return d, N, u_b2


def _exclusive_prod(v):
    """``out_k = prod_{j != k} v_j`` along the last axis without division (prefix x suffix)."""
    ones = jnp.ones(v.shape[:-1] + (1,), dtype=v.dtype)
    pre = jnp.cumprod(jnp.concatenate([ones, v[..., :-1]], axis=-1), axis=-1)
    suf = jnp.flip(
        jnp.cumprod(jnp.flip(jnp.concatenate([v[..., 1:], ones], axis=-1), -1), axis=-1), -1
    )
    return pre * suf


def relu_logdet(alpha, u, W1, W2, x, u_scale=None):
    """Exact ``log|det J|`` and ``sign(det J)`` of (*) for a one-hidden-layer ReLU net.

    ``mu = W2 . relu(W1 x) + b2`` with parameters ordered ``(vec(W1) row-major, W2, b2)``.
    Write ``M = I + alpha Hess(mu)`` and ``g = grad(mu)``. ``Hess(mu)`` has eigenvalues
    ``+-|u_k|`` (``|u_k|^2 = a'_k |x|^2``) on one plane per active unit and 0 elsewhere
    (Chang et al. v3 Eq. 29-32, Chang et al. 2024 Eq. 42-44 / S.21-S.27) and ``g`` lies in the span of those planes and
    the ``b2`` axis (S.32-S.33). The adjugate form of the matrix-determinant lemma,
    ``det(M + g u^T) = det M + u^T adj(M) g`` (Chang et al. v3 Eq. 28 generalized; it equals
    ``det M (1 + u^T M^{-1} g)`` of Chang et al. 2024 S.35-S.36 when ``M`` is invertible), then gives

    .. math::

        \\det J = (1 + u_{b_2}) \\prod_k d_k + \\sum_k N_k \\prod_{j \\ne k} d_j

    with ``d_k, N_k`` from :func:`relu_unit_terms`. This covers the KL/Var formula of the notes
    (section 4, ``alpha = h A``, ``u = h A b``) and the LL formula Chang et al. 2024 S.36
    (``alpha = -h g``, ``u = h q grad(mu)``). Cost ``O(H p)`` per draw; no ``P x P`` matrix is
    formed. Each factor is rescaled by ``max(|d_k|, 1)`` before the products, so large ``H`` or
    ``alpha`` neither overflow nor lose the sign.

    Parameters
    ----------
    alpha : array_like, shape ``(...)``
        Hessian coefficient of (*) per draw (and per step size, with a grid axis).
    u : array_like, shape ``(..., P)`` with ``P = H p + H + 1``
        Rank-one coefficient vector of (*).
    W1 : array_like, shape ``(..., H, p)``
        First-layer weights of each draw (broadcast against the leading axes of ``alpha``/``u``,
        e.g. ``(S, H, p)`` against ``(G, S)``).
    W2 : array_like, shape ``(..., H)``
        Second-layer weights of each draw.
    x : array_like, shape ``(p,)`` or broadcastable to ``(..., p)``
        Input of the observation, with the constant-1 component of the first-layer bias.
    u_scale : array_like, shape ``(...)``, optional
        When given, the rank-one vector is ``u_scale * u``: ``u`` (e.g. ``(S, P)``) is reduced
        to per-unit terms *before* it meets the step-grid axis of ``u_scale`` (e.g. ``(G, S)``),
        so no ``(G, S, P)`` array is formed.

    Returns
    -------
    logabsdet : jax.Array, shape ``(...)``
        ``log|det J|`` (``-inf`` where ``det J == 0``).
    sign : jax.Array, shape ``(...)``
        ``sign(det J)``. Values ``<= 0`` mean ``T`` is not locally invertible at that draw
        (e.g. ``1 - alpha|u_k|`` crossed 0); flag them, the function never raises.

    Notes
    -----
    Inactive units (``(W1 x)_k <= 0``, ``a'(0) = 0``) have ``d_k = 1`` and ``N_k = 0``, i.e.
    they contribute a factor 1, with no 0/0 from the undefined eigenvectors.
    """
    d, N, u_b2 = relu_unit_terms(alpha, u, W1, W2, x)
    if u_scale is not None:  # N and u_b2 are linear in u
        u_scale = jnp.asarray(u_scale)
        N = N * u_scale[..., None]
        u_b2 = u_b2 * u_scale
    scale = jnp.maximum(jnp.abs(d), 1.0)
    ds = d / scale
    Ns = N / scale
    bracket = (1.0 + u_b2) * jnp.prod(ds, axis=-1) + jnp.sum(Ns * _exclusive_prod(ds), axis=-1)
    logabs, sign = _slog(bracket)
    return logabs + jnp.sum(jnp.log(scale), axis=-1), sign
