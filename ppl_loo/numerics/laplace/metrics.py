"""Comparison metrics of subspace Laplace approximations (Faller & Martin 2025, Section 3).

- :func:`sigma_X`: the full LA's epistemic predictive covariance ``Sigma_X = J_X Psi J_X^T`` (Eq. 11);
- :func:`sigma_PX`: the subspace one, ``Sigma_{P,X} = J_X P M^{-1} P^T J_X^T`` (Eq. 19);
- :func:`relative_error`: ``||Sigma_X - Sigma_{P,X}||_F / ||Sigma_X||_F`` (Eq. 20);
- :func:`trace_criterion`: ``Tr Sigma_{P,X}`` and its log (Eq. 25, natural log, A11) with the Ky Fan
  bound ``Tr Sigma_{P,X} <= sum_{k<=s} Lambda_k`` (notes fact (b); equality at ``P*``) and Lemma 2's
  ``Tr Sigma_{P,X} <= Tr Sigma_X``;
- :func:`optimal_error_curve`: the Eckart-Young optimum ``sqrt(sum_{k>s} Lambda_k^2 / sum_k Lambda_k^2)``
  for every ``s`` (Theorem 1, Eq. 22/24);
- :func:`dead_fraction` / :func:`dead_parameters` (App. E, A14) and :func:`jacobian_rank` (A9).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

__all__ = [
    "TraceCriterion",
    "dead_fraction",
    "dead_parameters",
    "jacobian_rank",
    "optimal_error_curve",
    "relative_error",
    "sigma_PX",
    "sigma_X",
    "trace_criterion",
]


class TraceCriterion(NamedTuple):
    """``trace = Tr Sigma_{P,X}``, ``log_trace`` (natural log; ``-inf`` at 0), ``bound`` (Ky Fan:
    the sum of the ``s`` largest eigenvalues of ``Sigma_X``, or None) and ``trace_X`` (``Tr Sigma_X``,
    or None)."""

    trace: float
    log_trace: float
    bound: float | None
    trace_X: float | None


def sigma_X(J_X, psi_mat):
    """``Sigma_X = J_X Psi J_X^T`` (Eq. 11), ``(n C, n C)``; ``psi_mat(B) = Psi B``."""
    J = jnp.asarray(J_X)
    S = J @ psi_mat(J.T)
    return 0.5 * (S + S.T)


def sigma_PX(J_X, P, M, *, JP=None):
    """``Sigma_{P,X} = (J_X P) M^{-1} (J_X P)^T`` (Eq. 19) by a Cholesky factor of ``M``.

    ``JP`` (``(n C, s)``) may be passed instead of ``J_X`` and ``P``.
    """
    JP = jnp.asarray(J_X) @ jnp.asarray(P) if JP is None else jnp.asarray(JP)
    L = jnp.linalg.cholesky(0.5 * (jnp.asarray(M) + jnp.asarray(M).T))
    W = solve_triangular(L, JP.T, lower=True)  # (s, nC)
    return W.T @ W


def relative_error(sigma_x, sigma_px):
    """``||Sigma_X - Sigma_{P,X}||_F / ||Sigma_X||_F`` (Eq. 20)."""
    sigma_x = jnp.asarray(sigma_x)
    return float(jnp.linalg.norm(sigma_x - jnp.asarray(sigma_px)) / jnp.linalg.norm(sigma_x))


def trace_criterion(sigma_px, *, eigs=None, s=None, sigma_x=None):
    """The trace criterion (Eq. 25): larger ``Tr Sigma_{P,X}`` is better (Lemma 2).

    Parameters
    ----------
    sigma_px : array (n C, n C)
    eigs : array, optional
        Eigenvalues of ``Sigma_X`` (any order); with ``s`` gives the Ky Fan bound.
    s : int, optional
        Subspace dimension for the bound.
    sigma_x : array, optional
        ``Sigma_X``, for ``trace_X`` (also the sum of ``eigs``).
    """
    tr = float(jnp.trace(jnp.asarray(sigma_px)))
    bound = None
    if eigs is not None and s is not None:
        bound = float(np.sum(np.sort(np.asarray(eigs, dtype=np.float64))[::-1][: int(s)]))
    tx = float(jnp.trace(jnp.asarray(sigma_x))) if sigma_x is not None else (
        float(np.sum(eigs)) if eigs is not None else None)
    return TraceCriterion(tr, float(np.log(tr)) if tr > 0 else -np.inf, bound, tx)


def optimal_error_curve(eigs):
    """The optimal relative error for ``s = 0, 1, ..., len(eigs)`` (Theorem 1):
    ``sqrt(sum_{k>s} Lambda_k^2 / sum_k Lambda_k^2)``, eigenvalues sorted in decreasing order."""
    w = np.sort(np.clip(np.asarray(eigs, dtype=np.float64), 0.0, None))[::-1]
    tail = np.concatenate([np.cumsum((w**2)[::-1])[::-1], [0.0]])
    return np.sqrt(tail / tail[0])


def dead_parameters(J, threshold=0.0):
    """Parameters insensitive to every input (A14): ``|J[:, j]| <= threshold`` on every row of the
    Jacobian of the outputs with respect to ``theta`` (not of the inputs). Boolean ``(d,)``."""
    return np.all(np.abs(np.asarray(J)) <= threshold, axis=0)


def dead_fraction(J, threshold=0.0):
    """The share of dead parameters (App. E, Table 6; :func:`dead_parameters`)."""
    return float(np.mean(dead_parameters(J, threshold)))


def jacobian_rank(J, tol=None, *, method="svd"):
    """The numerical rank of ``J`` (A9).

    ``method="svd"``: singular values above ``tol``, by default ``sigma_max max(J.shape) eps`` (the
    NumPy/PyTorch ``matrix_rank`` rule, as the authors' code) in ``J``'s precision. ``method="gram"``:
    eigenvalues of the smaller Gram matrix ``J J^T`` or ``J^T J`` above ``tol``, by default
    ``lambda_max max(J.shape) eps``, i.e. singular values above ``sigma_max sqrt(max(J.shape) eps)``: a
    coarser tolerance (the Gram squares the condition number), ``O(m^2 n)`` and BLAS-3, for large ``J``.
    """
    J = np.asarray(J)
    if J.size == 0:
        return 0
    eps = np.finfo(J.dtype if J.dtype.kind == "f" else np.float64).eps
    if method == "gram":
        G = J @ J.T if J.shape[0] <= J.shape[1] else J.T @ J
        w = np.linalg.eigvalsh(0.5 * (G + G.T))
        tol = w.max() * max(J.shape) * eps if tol is None else tol
        return int(np.sum(w > tol))
    if method != "svd":
        raise ValueError(f"method={method!r}; pass 'svd' or 'gram'.")
    sv = np.linalg.svd(J, compute_uv=False)
    if tol is None:
        tol = sv.max() * max(J.shape) * eps
    return int(np.sum(sv > tol))
