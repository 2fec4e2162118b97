"""Subspace Laplace approximations: the basis ``P`` and the subspace precision (Faller & Martin 2025).

The subspace model (Eq. 13) is ``theta = theta_hat + P mu`` with ``P`` of shape ``(d, s)``. With the
*restricted* prior ``p~(mu) ~ p(theta_hat + P mu)`` (notes A1) the subspace LA is exactly
``N(0, M^{-1})`` with ``M = P^T Psi^{-1} P`` (Lemma 1, Eq. 16), and the linearized predictive has the
epistemic covariance ``Sigma_{P,X} = J_X P M^{-1} P^T J_X^T`` (Eq. 19). ``Sigma_{P,X}`` depends only on
``span(P)`` (notes section 2, fact (c)), so every basis is QR-orthonormalized in float64 (A17).

Methods of :func:`subspace_basis` (Section 5):

- ``"optimal"``: Theorem 1, ``P* = Psi J_X^T U_s`` with ``U_s`` the top-``s`` eigenvectors of
  ``Sigma_X = J_X Psi J_X^T`` (Eq. 23); an oracle: it needs the exact ``Psi`` and the inputs ``X``;
- ``"lowrank-diag"`` / ``"lowrank-kfac"``: the practical scheme of Section 4.2 (Eq. 26):
  ``P = Psi_approx J_{X'}^T U_s`` with ``U_s`` from ``J_{X'} Psi_approx J_{X'}^T``, ``Psi_approx`` the
  diagonal or KFAC LA built on the full training set, ``X'`` a subset of the training inputs;
- ``"subset-magnitude"``, ``"subset-diag"``, ``"subset-swag"``: ``P = (e_{j_1}, ..., e_{j_s})`` for the
  ``s`` largest scores ``|theta_hat_j|``, diagonal-LA variance, or SWAG variance (ties: lower index
  first, ``torch.topk``-like, A16);
- ``"full"``: ``P = I_d`` (the full LA; ``d x d``, so only for small ``d``).

Columns are ordered by importance so that ``P[:, :k]`` is the basis of size ``k`` (nested truncation,
as the authors' code). The low-rank methods cap ``s`` at the numerical rank of ``J_X`` (A9; beyond it a
column of ``P*`` is ``Psi J^T u = 0``): the returned ``P`` then has fewer columns, and
``return_info=True`` reports it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ppl_loo.numerics.laplace.metrics import jacobian_rank
from ppl_loo.numerics.laplace.precision import FactorOperator

__all__ = [
    "METHODS",
    "SubspaceInfo",
    "subset_scores",
    "subspace_basis",
    "subspace_mode_shift",
    "subspace_precision",
]

METHODS = ("optimal", "lowrank-diag", "lowrank-kfac", "subset-magnitude", "subset-diag", "subset-swag", "full")


class SubspaceInfo(NamedTuple):
    """What :func:`subspace_basis` did: ``s_requested``, ``s`` (columns returned), ``rank`` (numerical
    rank of ``J_ref`` for the low-rank methods, else None), ``capped`` (``s < s_requested``), ``eigvals``
    (descending spectrum of ``J_ref Psi J_ref^T`` or ``J_ref Psi_approx J_ref^T``; None for subsets) and
    ``scores`` (the subset scores; None otherwise)."""

    method: str
    s_requested: int
    s: int
    rank: int | None
    capped: bool
    eigvals: np.ndarray | None
    scores: np.ndarray | None


def _orthonormalize(P):
    """Orthonormal columns with the same nested spans, in float64 (notes A17).

    CholeskyQR2 on the column-equilibrated ``P`` (two passes of ``P <- P chol(P^T P)^{-T}``; BLAS-3,
    several times faster than Householder QR for tall ``d x s`` bases); if that fails, shifted
    CholeskyQR3 (Fukaya et al. 2020: a first pass with ``P^T P + shift I``,
    ``shift = 11 (d s + s (s + 1)) eps ||P||_F^2``, which exists for condition numbers up to about
    ``1/eps``); Householder QR when a Cholesky factor still fails or the result is not orthonormal to
    ``1e-10``. Every transform is
    upper triangular, so ``span(P[:, :k])`` is kept for every ``k``.
    """
    P = np.asarray(P, dtype=np.float64)
    d, k = P.shape
    norms = np.linalg.norm(P, axis=0)
    Q = P / np.where(norms > 0, norms, 1.0)
    shift = 11.0 * (d * k + k * (k + 1)) * np.finfo(np.float64).eps * k  # ||Q||_F^2 = k
    for shifts in ((0.0, 0.0), (shift, 0.0, 0.0)):  # CholeskyQR2, then shifted CholeskyQR3
        X = Q
        try:
            for extra in shifts:
                L = np.linalg.cholesky(X.T @ X + extra * np.eye(k))
                X = scipy.linalg.solve_triangular(L, X.T, lower=True).T
        except np.linalg.LinAlgError:
            continue
        if np.abs(X.T @ X - np.eye(k)).max() < 1e-10:
            return jnp.asarray(X)
    return jnp.asarray(np.linalg.qr(P)[0])


def _psi_approx_mat(method, psi_approx, precision):
    """``B -> Psi_approx B`` for the low-rank methods."""
    if method == "lowrank-kfac":
        if psi_approx is None or not hasattr(psi_approx, "psi_mat"):
            raise ValueError("method='lowrank-kfac' needs psi_approx=<KFAC> (ppl_loo.numerics.laplace.kfac.kfac).")
        return psi_approx.psi_mat
    if psi_approx is None:
        if precision is None:
            raise ValueError("method='lowrank-diag' needs psi_approx=<(d,) variances> or precision=<Precision>.")
        var = 1.0 / jnp.asarray(precision.diag)
    elif hasattr(psi_approx, "psi_mat"):
        return psi_approx.psi_mat
    else:
        var = jnp.asarray(psi_approx)
    return lambda B: var[:, None] * B


def _lowrank(J_ref, psi_mat_fn, s, rank, psi_jt=None):
    """``P = Psi J^T U_s`` from the top eigenvectors of ``J Psi J^T`` (Eq. 23 / 26), ``s <= rank``."""
    J = jnp.asarray(J_ref)
    PJt = jnp.asarray(psi_mat_fn(J.T) if psi_jt is None else psi_jt)  # (d, nC)
    S = J @ PJt
    w, U = np.linalg.eigh(np.asarray(0.5 * (S + S.T), dtype=np.float64))
    w, U = w[::-1], U[:, ::-1]
    positive = int(np.sum(w > w[0] * len(w) * np.finfo(np.float64).eps)) if len(w) else 0
    k = min(int(s), int(rank), positive)
    P = np.asarray(PJt, dtype=np.float64) @ U[:, :k]
    return _orthonormalize(P), w


def subset_scores(method, *, theta_map=None, precision=None, psi_approx=None, swag_var=None):
    """The score of every parameter for a subset method (largest first is chosen):
    ``|theta_hat|``, the diagonal-LA variance ``1 / diag(Lambda)`` (``psi_approx`` as ``(d,)``
    variances, else ``precision.diag``) or the SWAG variance."""
    if method == "subset-magnitude":
        if theta_map is None:
            raise ValueError("method='subset-magnitude' needs theta_map.")
        return np.abs(np.asarray(theta_map, dtype=np.float64))
    if method == "subset-diag":
        if psi_approx is not None and not hasattr(psi_approx, "psi_mat"):
            return np.asarray(psi_approx, dtype=np.float64)
        if precision is None:
            raise ValueError("method='subset-diag' needs psi_approx=<(d,) diagonal-LA variances> or precision=.")
        return 1.0 / np.asarray(precision.diag, dtype=np.float64)
    if method == "subset-swag":
        if swag_var is None:
            raise ValueError("method='subset-swag' needs swag_var (ppl_loo.numerics.laplace.swag.swag_diagonal).")
        return np.asarray(swag_var, dtype=np.float64)
    raise ValueError(f"{method!r} is not a subset method.")


def _dim(theta_map, J_ref, precision, psi_approx, swag_var):
    for x in (theta_map, swag_var):
        if x is not None:
            return int(np.shape(x)[0])
    if J_ref is not None:
        return int(np.shape(J_ref)[1])
    if precision is not None:
        return int(precision.dim)
    return int(psi_approx.dim if hasattr(psi_approx, "dim") else np.shape(psi_approx)[0])


def subspace_basis(method, s, *, theta_map=None, J_ref=None, psi_mat=None, precision=None, psi_approx=None,
                   swag_var=None, rank=None, psi_jt=None, return_info=False):
    """The subspace basis ``P`` (``(d, s)``, orthonormal columns, most important first).

    Parameters
    ----------
    method : str
        One of :data:`METHODS` (module docstring).
    s : int
        Requested subspace dimension.
    theta_map : array (d,)
        ``theta_hat`` (``"subset-magnitude"``; also gives ``d``).
    J_ref : array (n C, d)
        The stacked Jacobian (Eq. 2) on the inputs the low-rank methods use: the evaluation inputs
        ``X`` for ``"optimal"``, a subset ``X'`` of the training inputs for the practical ones.
    psi_mat : callable
        ``B (d, k) -> Psi B`` with the exact covariance (``"optimal"``; e.g.
        :func:`~ppl_loo.numerics.laplace.precision.woodbury_covariance` ``.psi_mat``).
    precision : Precision, optional
        Its diagonal gives the diagonal LA when ``psi_approx`` is not given.
    psi_approx : array (d,) or KFAC
        The approximate covariance: diagonal variances (``"lowrank-diag"``, ``"subset-diag"``) or an
        object with ``psi_mat`` (``"lowrank-kfac"``).
    swag_var : array (d,)
        Diagonal SWAG variances (``"subset-swag"``).
    rank : int, optional
        The numerical rank of ``J_ref`` if already known (else computed by SVD, A9).
    psi_jt : array (d, n C), optional
        ``Psi J_ref^T`` (``"optimal"``) or ``Psi_approx J_ref^T`` if already computed (it is also what
        ``Sigma_X`` needs), to save the products.
    return_info : bool
        Also return a :class:`SubspaceInfo`.

    Returns
    -------
    P : array (d, s') with ``s' = min(s, rank)`` for the low-rank methods, ``d`` for ``"full"``;
    ``(P, info)`` with ``return_info=True``.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}; pass one of {METHODS}.")
    s = int(s)
    d = _dim(theta_map, J_ref, precision, psi_approx, swag_var)
    eig = scores = r = None
    if method == "full":
        P = jnp.eye(d)
    elif method.startswith("subset-"):
        scores = subset_scores(method, theta_map=theta_map, precision=precision, psi_approx=psi_approx,
                               swag_var=swag_var)
        idx = np.argsort(-scores, kind="stable")[: min(s, d)]
        P = np.zeros((d, idx.shape[0]))
        P[idx, np.arange(idx.shape[0])] = 1.0
        P = jnp.asarray(P)
    else:
        if J_ref is None:
            raise ValueError(f"method={method!r} needs J_ref, the stacked Jacobian on the reference inputs.")
        if method == "optimal" and psi_mat is None and psi_jt is None:
            raise ValueError("method='optimal' needs psi_mat, the exact covariance product B -> Psi B.")
        fn = psi_mat if method == "optimal" else (
            None if psi_jt is not None else _psi_approx_mat(method, psi_approx, precision))
        r = jacobian_rank(J_ref) if rank is None else int(rank)
        P, eig = _lowrank(J_ref, fn, s, r, psi_jt)
    info = SubspaceInfo(method, s, int(P.shape[1]), r, int(P.shape[1]) < min(s, d), eig, scores)
    return (P, info) if return_info else P


def subspace_precision(P, precision):
    """``M = P^T Lambda P`` (Lemma 1, Eq. 16), the subspace precision under the restricted prior (A1).

    With a Fisher factor ``V`` and a diagonal prior ``D`` in ``precision`` this is
    ``(V^T P)^T (V^T P) + P^T D P`` (Eq. 8, computed without ``d x d`` matrices); otherwise
    ``P^T [Lambda p_1, ..., Lambda p_s]`` by ``s`` products.
    """
    P = jnp.asarray(P)
    V, D = precision.factor, precision.prior
    if V is not None and D is not None:
        W = V.rmat(P) if isinstance(V, FactorOperator) else jnp.asarray(V).T @ P
        M = W.T @ W + P.T @ (jnp.asarray(D)[:, None] * P)
    else:
        M = P.T @ jax.vmap(precision.mv, in_axes=1, out_axes=1)(P)
    return 0.5 * (M + M.T)


def subspace_mode_shift(P, M, lam, theta_map):
    """The subspace posterior mode under the paper's prior (14), ``N(0, (lambda P^T P)^{-1})``:
    ``mu_hat = M^{-1} P^T (lambda theta_hat)`` (notes A1, test T6).

    Under the restricted prior ``p(theta_hat + P mu)`` the mode is exactly 0; this shift is what
    Lemma 1's "mean 0" neglects. ``lam`` may be a scalar or a ``(d,)`` diagonal prior precision.
    Exact for a linear-Gaussian model; first Newton step otherwise.
    """
    P = jnp.asarray(P)
    rhs = P.T @ (jnp.asarray(lam) * jnp.asarray(theta_map))
    return jnp.linalg.solve(jnp.asarray(M), rhs)
