"""Model weights from pointwise LOO log predictive densities: stacking and pseudo-BMA (R ``loo``'s
``stacking_weights`` and ``pseudobma_weights``, Yao et al. 2018).

``lpd`` is the ``(n, K)`` matrix of ``log p(y_i | y_-i, M_k)``. Stacking maximizes ``sum_i log sum_k w_k exp(lpd_ik)``
over the simplex; the objective is concave, and this module returns its maximizer to round-off (SLSQP, then Newton
steps on the support with the KKT conditions checked), where R's ``constrOptim`` (a log barrier around BFGS) stops
about 1e-5 to 1e-4 from it. Pseudo-BMA weights are ``softmax(elpd_k)``; with the Bayesian bootstrap (pseudo-BMA+)
the mean over Dirichlet draws ``u`` of ``softmax(n u^T lpd)``.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

__all__ = ["stacking", "pseudobma", "dirichlet_draws"]


def _checked_lpd(lpd, caller):
    a = np.asarray(lpd, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"{caller}: lpd_point has shape {a.shape}; give the (n, K) matrix of pointwise elpd, one "
                         "column per model.")
    if a.shape[1] < 2:
        raise ValueError(f"{caller}: at least two models (columns of lpd_point) are required; got {a.shape[1]}.")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{caller}: lpd_point has NaN or infinite entries; every model's pointwise elpd must be "
                         "finite.")
    return a


def stacking(lpd):
    """Stacking weights ``(K,)`` of the pointwise LOO log densities ``lpd`` ``(n, K)`` (module docstring)."""
    a = _checked_lpd(lpd, "stacking_weights")
    n, K = a.shape
    e = np.exp(a - a.max(axis=1, keepdims=True))  # (n, K), rows rescaled: the maximizer does not change

    def f(w):
        return -np.sum(np.log(e @ w))

    def grad(w):
        return -(e / (e @ w)[:, None]).sum(axis=0)

    x0 = np.full(K, 1.0 / K)
    res = minimize(f, x0, jac=grad, method="SLSQP", bounds=[(0.0, 1.0)] * K,
                   constraints=[{"type": "eq", "fun": lambda w: np.sum(w) - 1.0, "jac": lambda w: np.ones(K)}],
                   options={"ftol": 1e-15, "maxiter": 1000})
    w = np.clip(res.x, 0.0, None)
    w /= w.sum()
    return _polish(e, w, n)


def _polish(e, w, n):
    """Newton steps on the support of ``w`` (the weights above 1e-9) for the maximizer of ``sum log(e w)`` on the
    simplex: the gradient ``sum_i e_ik / (e w)_i`` equals ``n`` on the support (and is at most ``n`` off it)."""
    for _ in range(50):
        s = np.flatnonzero(w > 1e-9)
        w[w <= 1e-9] = 0.0
        if s.size == 1:
            w[:] = 0.0
            w[s] = 1.0
            return w
        es = e[:, s]
        d = es @ w[s]
        g = (es / d[:, None]).sum(axis=0)  # gradient of the log score (to maximize)
        H = -(es / d[:, None]).T @ (es / d[:, None])
        # eliminate the last weight of the support: w_last = 1 - sum(others)
        Z = np.vstack([np.eye(s.size - 1), -np.ones(s.size - 1)])
        gr, Hr = Z.T @ g, Z.T @ H @ Z
        try:
            step = Z @ np.linalg.solve(Hr, -gr)
        except np.linalg.LinAlgError:
            break
        t = 1.0
        neg = step < 0
        if np.any(neg):
            t = min(1.0, float(np.min(-w[s][neg] / step[neg])) * 0.999)
        w_new = w.copy()
        w_new[s] = w[s] + t * step
        if np.sum(np.log(e @ w_new)) < np.sum(np.log(e @ w)) - 1e-12:
            break
        w = np.clip(w_new, 0.0, None)
        w /= w.sum()
        if np.max(np.abs(t * step)) < 1e-15:
            break
    return w


def dirichlet_draws(n, BB_n, alpha, random_seed):
    """``(BB_n, n)`` draws of ``Dirichlet(alpha, ..., alpha)`` (R ``loo``'s ``dirichlet_rng``: normalized gamma
    draws) from ``numpy.random.default_rng(random_seed)``."""
    rng = random_seed if isinstance(random_seed, np.random.Generator) else np.random.default_rng(random_seed)
    g = rng.gamma(alpha, size=(BB_n, n))
    return g / g.sum(axis=1, keepdims=True)


def pseudobma(lpd, BB=True, BB_n=1000, alpha=1.0, random_seed=None, dirichlet=None):
    """Pseudo-BMA weights ``(K,)`` of ``lpd`` ``(n, K)``: ``softmax(sum_i lpd_ik)``, or with ``BB`` the mean over
    Dirichlet draws ``u`` (``dirichlet`` ``(BB_n, n)``, else drawn) of ``softmax(n u^T lpd)``."""
    a = _checked_lpd(lpd, "pseudobma_weights")
    n = a.shape[0]
    if not BB:
        return softmax(a.sum(axis=0))
    if dirichlet is None:
        if isinstance(BB_n, (bool, np.bool_)) or not isinstance(BB_n, (int, np.integer)) or BB_n < 1:
            raise ValueError(f"BB_n={BB_n!r}: give the number of Bayesian bootstrap draws, a whole number >= 1.")
        if not (np.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha={alpha!r}: the Dirichlet concentration must be a positive number.")
        dirichlet = dirichlet_draws(n, int(BB_n), float(alpha), random_seed)
    u = np.asarray(dirichlet, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] != n:
        raise ValueError(f"dirichlet has shape {u.shape}; give Dirichlet draws (BB_n, n) with n = {n}, one weight per "
                         "observation in each row.")
    z = n * (u @ a)  # (BB_n, K)
    return np.mean(np.exp(z - logsumexp(z, axis=1, keepdims=True)), axis=0)
