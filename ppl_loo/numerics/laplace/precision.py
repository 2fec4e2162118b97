"""Posterior precisions of the Laplace approximation as matrix-free operators (Faller & Martin 2025).

The Laplace approximation (LA) of ``p(theta | D)`` at the MAP ``theta_hat`` is ``N(theta_hat, Psi)`` with
the *precision* ``Lambda = Psi^{-1}``. This module builds ``Lambda`` as a :class:`Precision`, a
NamedTuple of a matrix-vector product, its exact diagonal and, where known, a low-rank factor:

- :func:`ggn_precision`: the generalized Gauss-Newton precision (Eq. 6-7, unnormalized sum over the
  data, notes A3) ``Lambda = sum_i J_i^T H_i J_i + Lambda_prior``, with ``J_i`` the Jacobian of the
  outputs ``f(x_i)`` (logits or means) and ``H_i = -d^2/df^2 log p(y_i | f)`` (:func:`lik_hessian`);
- :func:`fisher_factor`: the factor ``V`` of Eq. (8) with ``V V^T = sum_i J_i^T H_i J_i`` built from
  first derivatives only (for the Gaussian and softmax likelihoods the Fisher *is* the GGN, App. G);
- :func:`hessian_precision`: the Hessian of a negative log posterior, by forward-over-reverse
  autodiff or by central differences of gradients (for a gradient that is not differentiable, such
  as Stan's through a host callback);
- :func:`to_dense`, :func:`solve` and :func:`woodbury_covariance` (the exact
  ``Psi = (V V^T + D)^{-1}`` for a diagonal prior ``D``, applied without forming ``Psi``: networks
  have ``d ~ 1e4-1e5`` parameters but few data rows ``m``).

Stacking convention (notes section 1): outputs ``f(X)`` are ``(n, C)`` arrays and Jacobians are stacked
sample-major, row ``i * C + c`` is ``d f_c(x_i) / d theta`` (Eq. 2). Every function is a pure JAX
function of arrays; use float64 (``jax_enable_x64``) for the precisions (notes A17).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_factor, cho_solve, solve_triangular

__all__ = [
    "LIKELIHOODS",
    "FactorOperator",
    "Precision",
    "Woodbury",
    "fisher_factor",
    "ggn_precision",
    "hessian_precision",
    "hessian_sqrt",
    "lik_hessian",
    "lik_hessian_sqrt",
    "output_jacobian",
    "solve",
    "to_dense",
    "woodbury_covariance",
]

LIKELIHOODS = ("gaussian", "categorical", "bernoulli")
DENSE_MAX = 3000  # solve(): dense Cholesky up to this dimension, conjugate gradients above


class Precision(NamedTuple):
    """A posterior precision ``Lambda`` (``d x d``) as an operator.

    Attributes
    ----------
    mv : callable
        ``v (d,) -> Lambda v (d,)``; pure and ``vmap``-able.
    diag : array (d,)
        The exact diagonal of ``Lambda``.
    dim : int
        ``d``.
    factor : array (d, m) or FactorOperator or None
        ``V`` with ``Lambda = V V^T + prior`` when known (the Fisher factor of Eq. 8), else None.
    prior : array (d,) or None
        The diagonal prior precision when the prior part is diagonal (``lambda * 1`` in the
        paper), else None.
    """

    mv: Callable
    diag: jnp.ndarray
    dim: int
    factor: object = None
    prior: jnp.ndarray | None = None


class FactorOperator(NamedTuple):
    """A factor ``V`` (``d x m``) given by its products instead of its entries.

    ``mat(U (m, k)) -> V U (d, k)``, ``rmat(B (d, k)) -> V^T B (m, k)``, ``gram = V^T V`` (``m x m``),
    ``shape = (d, m)``. Built for MLPs by :func:`ppl_loo.numerics.laplace.kfac.factor_operator`.
    """

    mat: Callable
    rmat: Callable
    gram: jnp.ndarray
    shape: tuple


class Woodbury(NamedTuple):
    """``Psi = (V V^T + D)^{-1}`` applied through the Woodbury identity (:func:`woodbury_covariance`).

    ``psi_mv(v (d,)) -> Psi v``, ``psi_mat(B (d, k)) -> Psi B``, ``diag() -> diag(Psi)`` (``O(d m^2)``),
    ``logdet`` = ``log det Psi``.
    """

    psi_mv: Callable
    psi_mat: Callable
    diag: Callable
    logdet: jnp.ndarray


# ----------------------------------------------------------------------------- likelihood curvature
def _check_likelihood(likelihood):
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"likelihood={likelihood!r} is not supported; pass one of {LIKELIHOODS}.")


def _as_outputs(f, likelihood):
    f = jnp.asarray(f)
    if likelihood == "bernoulli":
        f = f.reshape(f.shape[0], 1)
    if f.ndim != 2:
        raise ValueError(f"outputs f must have shape (n, C); got {f.shape}.")
    return f


def _sigma_vec(sigma, C):
    if sigma is None:
        raise ValueError("likelihood='gaussian' needs the noise standard deviation sigma (notes A4).")
    return jnp.broadcast_to(jnp.asarray(sigma, dtype=float), (C,))


def lik_hessian(f, likelihood, sigma=None):
    """The per-sample Hessians ``H_i = -d^2/df^2 log p(y_i | f)`` at the outputs ``f`` (Eq. 7).

    Parameters
    ----------
    f : array (n, C)
        Outputs at ``theta_hat``: means (``"gaussian"``), logits (``"categorical"``, softmax) or the
        single logit of ``"bernoulli"`` (shape ``(n,)`` or ``(n, 1)``).
    likelihood : {"gaussian", "categorical", "bernoulli"}
    sigma : float or array (C,), optional
        Gaussian noise standard deviation (required for ``"gaussian"``).

    Returns
    -------
    array (n, C, C)
        ``diag(sigma^-2)``, ``diag(phi) - phi phi^T`` with ``phi = softmax(f)``, or ``p (1 - p)``. None
        depends on ``y`` (App. G), so the GGN equals the Fisher.
    """
    _check_likelihood(likelihood)
    f = _as_outputs(f, likelihood)
    n, C = f.shape
    if likelihood == "gaussian":
        return jnp.broadcast_to(jnp.diag(_sigma_vec(sigma, C) ** -2.0), (n, C, C))
    if likelihood == "bernoulli":
        p = jax.nn.sigmoid(f)
        return (p * (1.0 - p))[:, :, None]
    phi = jax.nn.softmax(f, axis=-1)
    return jax.vmap(jnp.diag)(phi) - phi[:, :, None] * phi[:, None, :]


def lik_hessian_sqrt(f, likelihood, sigma=None):
    """``L_i`` (``(n, C, K)``) with ``L_i L_i^T = H_i``: the output weights of the Fisher factor (Eq. 8).

    ``"gaussian"``: ``diag(1/sigma)`` (``K = C``); ``"categorical"``: column ``c`` is
    ``2 d sqrt(phi_c) / df = sqrt(phi_c) (e_c - phi)`` (``K = C``); ``"bernoulli"``: the same for the two
    classes ``(1 - p, p)`` of the single logit, ``[-sqrt(1-p) p, sqrt(p) (1-p)]`` (``K = 2``).
    """
    _check_likelihood(likelihood)
    f = _as_outputs(f, likelihood)
    n, C = f.shape
    if likelihood == "gaussian":
        return jnp.broadcast_to(jnp.diag(1.0 / _sigma_vec(sigma, C)), (n, C, C))
    if likelihood == "bernoulli":
        p = jax.nn.sigmoid(f[:, 0])
        return jnp.stack([-jnp.sqrt(1.0 - p) * p, jnp.sqrt(p) * (1.0 - p)], axis=-1)[:, None, :]
    phi = jax.nn.softmax(f, axis=-1)
    eye = jnp.eye(C, dtype=phi.dtype)
    return jnp.sqrt(phi)[:, None, :] * (eye[None] - phi[:, :, None])


def hessian_sqrt(H, rank=None):
    """A square root ``L`` (``(n, C, K)``, ``L L^T = H``) of PSD blocks ``H`` (``(n, C, C)``) by ``eigh``.

    ``rank`` keeps the ``K = rank`` largest eigen-directions of every block (``C - 1`` is exact for
    the softmax Hessian, whose null vector is ``1``); negative eigenvalues are clipped to 0.
    """
    H = jnp.asarray(H)
    w, Q = jnp.linalg.eigh(0.5 * (H + jnp.swapaxes(H, -1, -2)))
    L = Q * jnp.sqrt(jnp.clip(w, 0.0, None))[:, None, :]
    return L[:, :, ::-1] if rank is None else L[:, :, ::-1][:, :, : int(rank)]


# ----------------------------------------------------------------------------- Jacobian rows
def _chunked_map(fn, xs, chunk):
    """``vmap(fn)(xs)`` in batches of ``chunk`` rows (padded, so that one program is compiled)."""
    n, chunk = xs.shape[0], max(1, int(chunk))
    if n <= chunk:
        return jax.vmap(fn)(xs)
    pad = (-n) % chunk
    xp = jnp.concatenate([xs, jnp.zeros((pad,) + xs.shape[1:], xs.dtype)]) if pad else xs
    return jax.lax.map(fn, xp, batch_size=chunk)[:n]


def _weighted_rows(output_fn, theta, L, chunk):
    """Rows ``(J_i^T L_i[:, k])^T`` for all ``(i, k)``, sample-major, shape ``(n K, d)`` (jit-compiled).

    One reverse pass of ``output_fn`` per row: ``O(n K)`` passes over the whole batch, i.e.
    ``O(n^2 K d)`` work for a network (use :mod:`ppl_loo.numerics.laplace.kfac` for MLPs).
    """

    def rows(th, LL):
        _, vjp = jax.vjp(output_fn, th)
        n, C, K = LL.shape

        def row(r):
            i, k = r // K, r % K
            u = jnp.zeros((n, C), LL.dtype).at[i].set(LL[i, :, k])
            return vjp(u)[0]

        return _chunked_map(row, jnp.arange(n * K), chunk)

    return jax.jit(rows)(theta, jnp.asarray(L))


def output_jacobian(output_fn, theta, *, chunk=256):
    """The stacked Jacobian ``J_X`` (Eq. 2) of ``output_fn(theta) -> (n, C)``, shape ``(n C, d)``.

    Computed as ``n C`` vector-Jacobian products in batches of ``chunk`` (cost noted in
    :func:`_weighted_rows`).
    """
    theta = jnp.asarray(theta)
    n, C = jax.eval_shape(output_fn, theta).shape
    eye = jnp.broadcast_to(jnp.eye(C, dtype=theta.dtype), (n, C, C))
    return _weighted_rows(output_fn, theta, eye, chunk)


def fisher_factor(output_fn, theta, likelihood, sigma=None, *, chunk=256):
    """The Fisher factor ``V`` of Eq. (8), shape ``(d, n K)``, with ``V V^T = sum_i J_i^T H_i J_i``.

    Column ``i K + k`` is ``J_i^T L_i[:, k]`` with ``L`` from :func:`lik_hessian_sqrt`: regression
    ``v_ic = grad f_c(x_i) / sigma``; classification ``v_ic = 2 grad sqrt(phi_c(f(x_i)))``
    (``K = C``; ``K = 2`` for ``"bernoulli"``). The prior is not included (add it as ``lambda I``).
    Cost: ``n K`` reverse passes of ``output_fn`` (see :func:`output_jacobian`).
    """
    theta = jnp.asarray(theta)
    L = lik_hessian_sqrt(output_fn(theta), likelihood, sigma)
    return _weighted_rows(output_fn, theta, L, chunk).T


# ----------------------------------------------------------------------------- precisions
def _prior_parts(prior_prec, d, dtype):
    """``(mv, diag, diagonal-or-None)`` of a scalar, a ``(d,)`` diagonal or a :class:`Precision`."""
    if isinstance(prior_prec, Precision):
        if prior_prec.dim != d:
            raise ValueError(f"prior precision has dimension {prior_prec.dim}; theta has {d}.")
        return prior_prec.mv, prior_prec.diag, None
    lam = jnp.asarray(prior_prec, dtype=dtype)
    if lam.ndim == 0:
        lam = jnp.full((d,), lam)
    if lam.shape != (d,):
        raise ValueError(f"prior_prec must be a scalar, a ({d},) diagonal or a Precision; got shape {lam.shape}.")
    return (lambda v: lam * v), lam, lam


def ggn_precision(output_fn, theta, lik_hess, prior_prec, *, chunk=256, keep_factor=None):
    """The GGN posterior precision ``sum_i J_i^T H_i J_i + Lambda_prior`` (Eq. 6-7, notes A3).

    Parameters
    ----------
    output_fn : callable
        ``theta (d,) -> f (n, C)``: the network outputs (logits or means) on the training inputs.
    theta : array (d,)
        The MAP ``theta_hat``.
    lik_hess : array (n, C, C)
        ``H_i = -d^2/df^2 log p(y_i | f)`` at ``f(theta_hat)`` (:func:`lik_hessian`); unnormalized sum.
    prior_prec : float, array (d,) or Precision
        The prior precision: ``lambda`` (``lambda I``), a diagonal, or any precision (e.g. a Hessian).
    chunk : int
        Rows per batch of vector-Jacobian products for the diagonal.
    keep_factor : bool, optional
        Store ``V = [J_i^T L_i]`` (``d x n K``, ``L_i L_i^T = H_i``) as ``factor``; default: when it
        has at most ``2e7`` entries.

    Returns
    -------
    Precision
        ``mv`` by one ``jvp`` and one ``vjp`` of ``output_fn`` (``J`` is never formed); ``diag``
        exact, from the ``n K`` rows ``L_i^T J_i`` (``n K`` reverse passes, see :func:`output_jacobian`).
    """
    theta = jnp.asarray(theta)
    d = theta.shape[0]
    H = jnp.asarray(lik_hess)
    prior_mv, prior_diag, prior_d = _prior_parts(prior_prec, d, theta.dtype)

    def mv(v):
        jv = jax.jvp(output_fn, (theta,), (v,))[1]
        return jax.vjp(output_fn, theta)[1](jnp.einsum("nij,nj->ni", H, jv))[0] + prior_mv(v)

    rows = _weighted_rows(output_fn, theta, hessian_sqrt(H), chunk)
    keep = rows.size <= 2e7 if keep_factor is None else bool(keep_factor)
    return Precision(mv, jnp.sum(rows**2, axis=0) + prior_diag, d, rows.T if keep else None, prior_d)


def hessian_precision(neg_logp, theta, hvp="autodiff", eps=None, *, grad_fn=None, chunk=256):
    """The Hessian of a negative log posterior as a :class:`Precision`.

    Parameters
    ----------
    neg_logp : callable
        ``theta (d,) -> scalar``, e.g. ``L_theta(D)`` of Eq. (4).
    theta : array (d,)
    hvp : {"autodiff", "fd"}
        ``"autodiff"``: ``Lambda v`` by ``jvp`` of ``grad`` (forward over reverse, one gradient's
        cost). ``"fd"``: central differences ``(g(theta + h v) - g(theta - h v)) / (2 h)`` of the
        gradient ``g`` with ``h = eps max(1, |theta|) / |v|``, for gradients that cannot be
        differentiated again (Stan through a host callback); error ``O(h^2)``.
    eps : float, optional
        Relative step for ``"fd"``; default ``machine_eps ** (1/3)`` (about ``6e-6`` in float64).
    grad_fn : callable, optional
        The gradient ``theta -> (d,)``; default ``jax.grad(neg_logp)``.
    chunk : int
        Products per batch for the diagonal.

    Returns
    -------
    Precision
        ``diag`` is exact up to the products' error but costs ``d`` products (``d`` gradient-sized
        passes, ``2 d`` gradients with ``"fd"``): fine for ``d`` up to a few thousand.
    """
    theta = jnp.asarray(theta)
    d = theta.shape[0]
    g = jax.grad(neg_logp) if grad_fn is None else grad_fn
    if hvp == "autodiff":
        def mv(v):
            return jax.jvp(g, (theta,), (v,))[1]
    elif hvp == "fd":
        rel = float(np.finfo(np.dtype(theta.dtype)).eps) ** (1.0 / 3.0) if eps is None else float(eps)
        scale = rel * jnp.maximum(1.0, jnp.linalg.norm(theta))

        def mv(v):
            nv = jnp.linalg.norm(v)
            h = scale / jnp.where(nv > 0, nv, 1.0)
            return jnp.where(nv > 0, (g(theta + h * v) - g(theta - h * v)) / (2.0 * h), 0.0)
    else:
        raise ValueError(f"hvp={hvp!r}; pass 'autodiff' or 'fd'.")
    diag = jax.jit(lambda e: _chunked_map(lambda x: jnp.vdot(x, mv(x)), e, chunk))(jnp.eye(d, dtype=theta.dtype))
    return Precision(mv, diag, d, None, None)


# ----------------------------------------------------------------------------- dense, solves
def to_dense(prec, *, chunk=256):
    """The dense ``Lambda`` (``d x d``): ``mv`` mapped over the identity, symmetrized."""
    eye = jnp.eye(prec.dim, dtype=jnp.asarray(prec.diag).dtype)
    cols = jax.jit(lambda e: _chunked_map(prec.mv, e, chunk))(eye)  # row j = Lambda e_j
    return 0.5 * (cols + cols.T)


def solve(prec, B, *, method="auto", tol=1e-10, maxiter=None):
    """``Psi B = Lambda^{-1} B`` for ``B`` of shape ``(d,)`` or ``(d, k)``.

    ``method``: ``"woodbury"`` (exact, needs ``factor`` and a diagonal ``prior``), ``"dense"``
    (Cholesky of :func:`to_dense`, ``O(d^3)``; the default for ``d <= 3000``) or ``"cg"`` (conjugate
    gradients on ``mv`` with a Jacobi preconditioner, one solve per column: *iterative*, accurate
    to ``tol`` relative residual, and only as fast as ``Lambda`` is well conditioned; the default
    above ``d = 3000`` when no factor is known). ``"auto"`` picks in that order.
    """
    B = jnp.asarray(B)
    vec = B.ndim == 1
    B2 = B[:, None] if vec else B
    if method == "auto":
        method = "woodbury" if (prec.factor is not None and prec.prior is not None) else (
            "dense" if prec.dim <= DENSE_MAX else "cg")
    if method == "woodbury":
        X = woodbury_covariance(prec.factor, prec.prior).psi_mat(B2)
    elif method == "dense":
        X = cho_solve(cho_factor(to_dense(prec), lower=True), B2)
    elif method == "cg":
        inv_diag = 1.0 / jnp.asarray(prec.diag)

        def one(b):
            return jax.scipy.sparse.linalg.cg(prec.mv, b, tol=tol, maxiter=maxiter, M=lambda r: inv_diag * r)[0]

        X = jax.jit(jax.vmap(one, in_axes=1, out_axes=1))(B2)
    else:
        raise ValueError(f"method={method!r}; pass 'auto', 'woodbury', 'dense' or 'cg'.")
    return X[:, 0] if vec else X


def woodbury_covariance(V, lam):
    """The exact ``Psi = (V V^T + D)^{-1}`` without forming it (Woodbury identity).

    ``Psi = D^{-1} - D^{-1} V K^{-1} V^T D^{-1}`` with ``K = I_m + V^T D^{-1} V``: ``O(d m^2 + m^3)``
    once, then ``O(d m k)`` per ``psi_mat`` of ``k`` columns. This is the GGN posterior covariance of
    Eq. (6-8) when ``V`` is the Fisher factor and ``D = lambda I``.

    Parameters
    ----------
    V : array (d, m) or FactorOperator
        The factor (a :class:`FactorOperator` needs a scalar ``lam``: its ``gram`` is ``V^T V``).
    lam : float or array (d,)
        The diagonal prior precision ``D`` (isotropic or diagonal).

    Returns
    -------
    Woodbury
    """
    op = isinstance(V, FactorOperator)
    d, m = V.shape
    D = jnp.asarray(lam, dtype=float)
    if op and D.ndim != 0 and not bool(jnp.all(D == D.reshape(-1)[0])):
        raise ValueError("woodbury_covariance of a FactorOperator needs an isotropic prior precision lam.")
    Dinv = jnp.broadcast_to(1.0 / D, (d,)) if D.ndim else jnp.full((d,), 1.0 / D)
    Vmat = V.mat if op else (lambda U: V @ U)
    Vt = V.rmat if op else (lambda B: V.T @ B)
    gram = V.gram * Dinv[0] if op else V.T @ (Dinv[:, None] * V)
    K = jnp.eye(m, dtype=gram.dtype) + 0.5 * (gram + gram.T)
    Lk = jnp.linalg.cholesky(K)

    def psi_mat(B):
        DB = Dinv[:, None] * B
        return DB - Dinv[:, None] * Vmat(cho_solve((Lk, True), Vt(DB)))

    def diag():
        if op:
            raise ValueError("diag() of a Woodbury covariance needs the factor V as an array.")
        W = solve_triangular(Lk, (Dinv[:, None] * V).T, lower=True)  # (m, d)
        return Dinv - jnp.sum(W**2, axis=0)

    logdet = jnp.sum(jnp.log(Dinv)) - 2.0 * jnp.sum(jnp.log(jnp.diag(Lk)))
    return Woodbury(lambda v: psi_mat(v[:, None])[:, 0], psi_mat, diag, logdet)

