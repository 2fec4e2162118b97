"""``ppl_loo.laplace``: the (optimal-subspace) Laplace approximation of Faller & Martin, DataTree out.

The mode by L-BFGS (:mod:`ppl_loo.numerics.laplace.map`), the curvature matrix-free in JAX
(:mod:`ppl_loo.numerics.laplace.precision`: the generalized Gauss-Newton / Fisher of the model's
output, or the Hessian of the log posterior; Stan's Hessian-vector products are finite differences
of its gradients, through the bridge's ``custom_jvp``), the subspace (:mod:`ppl_loo.numerics.laplace.subspace`)
and the full-rank Gaussian proposal built from them (:mod:`ppl_loo.numerics.gaussian`): the subspace
Gaussian plus an isotropic covariance on its complement, so that the draws can serve importance
sampling (``pl.loo`` reads the stored ``q``, Eq. 13, and adds the Laplace cavity proposal).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.protocol import ReluStructure
from ppl_loo.numerics import gaussian
from ppl_loo.numerics.laplace import precision as lprec
from ppl_loo.numerics.laplace.kfac import dense_forward, kfac, layer_taps, relu_net_layers
from ppl_loo.numerics.laplace.map import map_estimate
from ppl_loo.numerics.laplace.metrics import dead_fraction, jacobian_rank, relative_error, sigma_PX, trace_criterion
from ppl_loo.numerics.laplace.subspace import subspace_basis
from ppl_loo.numerics.laplace.swag import swag_diagonal
from ppl_loo.workflow.approx.approx_tree import (
    approximation_tree,
    check_draws,
    check_input_tree,
    fit_key,
    gaussian_draws,
    initial_point,
)
from ppl_loo.workflow.options import resolve_options

__all__ = ["laplace", "LaplaceOptions", "CURVATURES", "SUBSPACES", "DENSE_MAX"]

CURVATURES = ("ggn", "hessian", "fisher")
SUBSPACES = (None, "full", "optimal", "lowrank-diag", "lowrank-kfac", "subset-magnitude", "subset-diag", "subset-swag")
#: the largest dimension for which the full precision is formed and factorized densely (200 MB)
DENSE_MAX = 5000


@dataclass(frozen=True)
class LaplaceOptions:
    """How :func:`ppl_loo.laplace` finds the mode (L-BFGS, :func:`ppl_loo.numerics.laplace.map.map_estimate`).

    Parameters
    ----------
    steps : int
        The largest number of L-BFGS steps.
    tol : float
        Stop when the largest gradient component is below this.
    init : array, optional
        Starting point in the unconstrained space (default: small random values, since zero is a saddle point of a
        ReLU network).
    """

    steps: int = 2000
    tol: float = 1e-9
    init: Any = None


def _check_args(curvature, subspace, rank, draws):
    if curvature is not None and curvature not in CURVATURES:
        raise ValueError(f"curvature={curvature!r}: choose 'ggn', 'hessian' or 'fisher' (or None: 'ggn' where the "
                         "model declares an output, else 'hessian').")
    if subspace not in SUBSPACES:
        raise ValueError(f"subspace={subspace!r}: choose from {[s for s in SUBSPACES if s]} or None (the full "
                         "Laplace approximation).")
    if subspace not in (None, "full") and (rank is None or int(rank) < 1):
        raise ValueError(f"subspace={subspace!r} needs rank= (the subspace size s >= 1).")
    check_draws(draws)


def _curvature_of(pm, curvature):
    if curvature is None:
        return "ggn" if pm.output is not None else "hessian"
    if curvature in ("ggn", "fisher") and pm.output is None:
        raise ValueError(f"curvature={curvature!r} needs the model's per-observation output f (a GLM linear "
                         f"predictor or a network's logits); this {pm.kind} model declares none. Use "
                         "curvature='hessian' (the Hessian of the log posterior at the mode).")
    return curvature


def _loglik(pm):
    """``theta -> (n,)`` pointwise log-likelihood, differentiable: Stan's ``log_lik`` generated quantity is
    not (a host callback), its per-observation terms are (data deletion through the bridge)."""
    if pm.kind != "Stan":
        return pm.loglik
    idx = jnp.arange(pm.n_obs)
    return lambda th: jax.vmap(pm.loglik_i, in_axes=(None, 0))(th, idx)


def _prior_part(pm, prior_precision, theta_map):
    """The prior's precision: given (a number or one value per parameter), or the Hessian of
    ``-(log p(theta, y) - sum_i log p(y_i | theta))`` at the mode."""
    if prior_precision is not None:
        lam = np.broadcast_to(np.asarray(prior_precision, dtype=np.float64), (pm.dim,))
        if not (np.all(np.isfinite(lam)) and np.all(lam > 0)):
            raise ValueError("prior_precision must be positive and finite (a number or one value per parameter).")
        return jnp.asarray(lam)

    def neg_log_prior(th):
        return -(pm.logp(th) - jnp.sum(_loglik(pm)(th)))

    hp = lprec.hessian_precision(neg_log_prior, theta_map)
    probe = jax.random.normal(jax.random.key(0), (pm.dim,), dtype=theta_map.dtype)
    if bool(jnp.allclose(hp.mv(probe), hp.diag * probe, rtol=1e-8, atol=1e-10 * float(jnp.max(jnp.abs(hp.diag))))):
        return hp.diag  # a diagonal prior curvature (iid priors): the Woodbury path of the GGN applies
    return hp


def _precision(pm, curvature, theta_map, prior_precision):
    """The :class:`~ppl_loo.numerics.laplace.precision.Precision` at the mode (eq. 5-8)."""
    if curvature == "hessian":
        if prior_precision is None:
            return lprec.hessian_precision(lambda th: -pm.logp(th), theta_map)
        lam = _prior_part(pm, prior_precision, theta_map)
        loglik = _loglik(pm)
        return lprec.hessian_precision(lambda th: 0.5 * jnp.sum(lam * th * th) - jnp.sum(loglik(th)), theta_map)
    out = pm.output
    f = out.fn(theta_map)
    prior = _prior_part(pm, prior_precision, theta_map)
    if curvature == "fisher":  # eq. 8: V V^T from first derivatives only (= the GGN here, App. G)
        return _fisher_precision(lprec.fisher_factor(out.fn, theta_map, out.likelihood, out.sigma), prior)
    return lprec.ggn_precision(out.fn, theta_map, lprec.lik_hessian(f, out.likelihood, out.sigma), prior)


def _fisher_precision(V, prior):
    """``V V^T + prior`` as a :class:`~ppl_loo.numerics.laplace.precision.Precision` (eq. 8)."""
    if isinstance(prior, lprec.Precision):
        prior_mv, prior_diag, prior_d = prior.mv, prior.diag, None
    else:
        prior_d = jnp.broadcast_to(jnp.asarray(prior), (V.shape[0],))
        prior_mv, prior_diag = (lambda v: prior_d * v), prior_d
    return lprec.Precision(lambda v: V @ (V.T @ v) + prior_mv(v), jnp.sum(V**2, axis=1) + prior_diag, V.shape[0], V,
                           prior_d)


def _reference_jacobian(pm, theta_map, X_ref):
    """The Jacobian ``J_X`` of the outputs at ``X_ref`` (training inputs by default), or of the pointwise
    log-likelihood for a model without an output (the epistemic covariance of ``log p(y_i | theta)``)."""
    if pm.output is not None:
        fn = lambda th: pm.output.fn(th, X_ref).reshape(-1)  # noqa: E731
        where = "X_ref" if X_ref is not None else "training inputs"
    else:
        if X_ref is not None:
            raise ValueError("X_ref needs a model with an output f (a GLM or a network); this model has none, so the "
                             "reference functions are the pointwise log-likelihoods of its observations.")
        fn = _loglik(pm)
        where = "pointwise log-likelihood"
    return jax.jacrev(fn)(theta_map), where


def _orth(P):
    """An orthonormal basis of ``span(P)`` (QR, float64; notes A17), dropping numerically null columns."""
    Q, R = jnp.linalg.qr(P)
    r = jnp.abs(jnp.diag(R))
    keep = np.asarray(r > 1e-10 * jnp.max(r))
    return Q[:, keep]


def _subspace_q(theta_map, prec, Q):
    """``N(theta_map, Q M^-1 Q^T + c (I - Q Q^T))`` with ``M = Q^T Lambda Q`` (Lemma 1, restricted prior,
    notes A1) and ``c`` the inverse of the mean precision on the complement, ``(d - s) / (tr Lambda - tr M)``:
    exactly ``1 / lambda`` when the complement carries only an isotropic prior ``lambda``."""
    d, s = Q.shape
    LQ = jax.vmap(prec.mv, in_axes=1, out_axes=1)(Q)
    M = 0.5 * (Q.T @ LQ + (Q.T @ LQ).T)
    K = jnp.linalg.inv(M)
    c = 1.0 if s == d else float((d - s) / (jnp.sum(prec.diag) - jnp.trace(M)))
    if not c > 0:
        raise ValueError("the precision on the complement of the subspace is not positive: the curvature is not a "
                         "precision there (use curvature='ggn' or pass prior_precision=).")
    return gaussian.subspace_gaussian(theta_map, Q, K, c), M


def _full_q(theta_map, prec):
    """The full Laplace approximation ``N(theta_map, Lambda^-1)``: dense up to :data:`DENSE_MAX`
    parameters, else exact through the low-rank factor and an isotropic prior."""
    d = prec.dim
    if _isotropic_factor(prec):
        return _subspace_q(theta_map, prec, _orth(_dense_factor(prec.factor)))
    if d <= DENSE_MAX:
        return _subspace_q(theta_map, prec, jnp.eye(d))
    raise ValueError(f"the full Laplace approximation of {d} parameters needs a dense {d} x {d} precision; pass "
                     "subspace='optimal' (or another subspace) with rank=, or an isotropic prior_precision with "
                     "curvature='ggn' (exact through the low-rank Gauss-Newton factor).")


def _isotropic_factor(prec):
    """``Lambda = V V^T + lambda I`` with a known factor: the Laplace is exact on ``span(V)`` plus ``1 / lambda``."""
    return (prec.factor is not None and prec.prior is not None and np.ptp(np.asarray(prec.prior)) == 0
            and _dense_factor(prec.factor).shape[1] < prec.dim)


def _dense_factor(V):
    return V.mat(jnp.eye(V.shape[1])) if isinstance(V, lprec.FactorOperator) else V


def _psi_mat(prec):
    """``B -> Psi B`` with ``Psi = Lambda^-1`` (dense solve, or Woodbury on the low-rank factor)."""
    if prec.factor is not None and prec.prior is not None:
        return lprec.woodbury_covariance(prec.factor, prec.prior).psi_mat
    if prec.dim > DENSE_MAX:
        raise ValueError(f"Psi = Lambda^-1 of {prec.dim} parameters needs a dense factorization or a low-rank factor "
                         "with a diagonal prior; pass prior_precision= with curvature='ggn'.")
    L = jax.scipy.linalg.cho_factor(lprec.to_dense(prec), lower=True)
    return lambda B: jax.scipy.linalg.cho_solve(L, B)


def _subspace(pm, method, rank, theta_map, prec, J_ref, key):
    """The subspace basis ``P`` (``d x s``) of ``method`` (Theorem 1 and the practical schemes)."""
    extra = {}
    if method in ("lowrank-diag", "subset-diag"):
        extra["psi_approx"] = 1.0 / prec.diag
    elif method == "lowrank-kfac":
        extra["psi_approx"] = _kfac_of(pm, theta_map, prec)
    elif method == "subset-swag":  # SGD snapshots of the mean loss on minibatches (the prior enters as weight decay)
        extra["swag_var"] = swag_diagonal(lambda th, idx: -jnp.mean(pm.loglik(th)[idx]), theta_map,
                                          _minibatches(pm.n_obs, key))
    psi_mat = _psi_mat(prec) if method == "optimal" else None
    return subspace_basis(method, int(rank), theta_map=theta_map, J_ref=J_ref, psi_mat=psi_mat, precision=prec,
                          **extra)


def _minibatches(n, key, n_batches=10):
    """One epoch of SWAG's SGD: ``n_batches`` disjoint minibatches of observation indices (a random
    permutation; each epoch reuses it, as :func:`~ppl_loo.numerics.laplace.swag.swag_diagonal` expects).
    With the full batch there is no gradient noise and the snapshots only drift with the weight decay."""
    b = max(1, n // n_batches)
    perm = np.asarray(jax.random.permutation(key, n))[: b * (n // b)]
    return jnp.asarray(perm.reshape(n // b, b))


def _kfac_of(pm, theta_map, prec):
    """KFAC (notes A7) of a one-hidden-layer ReLU net with an isotropic prior."""
    st = pm.structure
    if not isinstance(st, ReluStructure) or prec.prior is None or np.ptp(np.asarray(prec.prior)) != 0:
        raise ValueError("subspace='lowrank-kfac' needs a network with dense layers (pl.models.ReluNet) and an "
                         "isotropic prior (pass prior_precision=); use 'lowrank-diag' or 'optimal' otherwise.")
    layers = relu_net_layers(st.hidden, st.X.shape[1], st.w1_index, st.w2_index, st.b2_index)
    forward = dense_forward(layers, jnp.asarray(st.X))
    L = lprec.lik_hessian_sqrt(pm.output.fn(theta_map), "bernoulli")
    return kfac(layers, layer_taps(forward, theta_map, L, layers), float(np.asarray(prec.prior)[0]), pm.dim)


def _diagnostics(q, M, J_ref, prec, where):
    """The ``laplace`` group's diagnostics at the reference functions ``X``: ``Tr Sigma_{P,X}`` and its
    Ky Fan bound (eq. 25), the relative error (eq. 20) where ``Sigma_X`` is computable, the share of dead
    parameters and the Jacobian's rank."""
    S_PX = sigma_PX(J_ref, q.basis, M)
    out = {"reference": where, "dead_fraction": float(dead_fraction(J_ref)), "jacobian_rank": int(jacobian_rank(J_ref))}
    try:
        S_X = J_ref @ _psi_mat(prec)(J_ref.T)
    except ValueError:
        S_X = None
    eigs = None if S_X is None else np.linalg.eigvalsh(np.asarray(0.5 * (S_X + S_X.T)))
    tc = trace_criterion(S_PX, eigs=eigs, s=q.basis.shape[1], sigma_x=S_X)
    out.update(trace=tc.trace, log_trace=tc.log_trace, trace_bound=float("nan") if tc.bound is None else tc.bound,
               trace_X=float("nan") if tc.trace_X is None else tc.trace_X,
               relative_error=relative_error(S_X, S_PX) if S_X is not None else float("nan"))
    return out


@uses_x64
def laplace(data, model, *, curvature=None, subspace=None, rank=None, prior_precision=None, X_ref=None, draws=1000,
            random_seed=None, var_name=None, optimizer=None):
    """The Laplace approximation at the posterior mode, optionally on an (optimal) subspace.

    Parameters
    ----------
    data : xarray.DataTree or None
        Its groups are kept in the returned tree (it must not have a ``posterior`` group). ``None``: a
        new DataTree; the model carries the observed data either way.
    model : pymc.Model, StanModel, JaxModel, pl.models.*
        Any model :func:`ppl_loo.as_model` accepts.
    curvature : {"ggn", "hessian", "fisher"}, optional
        The precision at the mode: the generalized Gauss-Newton of the model's output plus the prior's
        Hessian (eq. 6-7; needs a declared output: a GLM's linear predictor or a network's logits), the
        Hessian of the log posterior (eq. 5), or the Fisher ``V V^T`` of eq. 8 (equal to the GGN for these
        likelihoods). Default: ``"ggn"`` where the model has an output, else ``"hessian"``.
    subspace : None or {"optimal", "lowrank-diag", "lowrank-kfac", "subset-magnitude", "subset-diag", "subset-swag"}
        None (or ``"full"``): the full Laplace approximation. Otherwise the subspace model of eq. 13 with
        ``rank`` columns: Theorem 1's optimum on the reference functions, the practical low-rank schemes of
        section 4.2, or parameter subsets (section 5).
    rank : int
        The subspace size ``s`` (capped at the Jacobian's numerical rank for the low-rank schemes).
    prior_precision : float or array, optional
        Replace the prior's curvature by ``lambda`` (the paper's ``N(0, lambda^-1 I)`` prior).
    X_ref : array, optional
        Reference inputs of the optimal subspace and the diagnostics (training inputs by default).
    draws : int
        Draws from the full-rank proposal ``q`` written as the ``posterior`` group.
    random_seed : int, numpy Generator or JAX key, optional
        Seeds the starting point of the optimization, SWAG's minibatches and the draws. None: a seed
        derived from the observed data, so that a rerun on the same input reproduces.
    var_name : str, optional
        The observed variable (models with several).
    optimizer : LaplaceOptions, dict or None
        The mode search: ``steps``, ``tol`` and ``init`` (:class:`~ppl_loo.LaplaceOptions`; None: its
        defaults).

    Returns
    -------
    xarray.DataTree
        ``posterior`` (draws from ``q``), ``log_likelihood``, ``observed_data``, and ``laplace``: the mode
        ``map``, the basis ``P`` (orthonormal, ``param x subspace``), ``M = P^T Lambda P``, the marginal
        ``sd`` of ``q``, ``log_q`` per draw, the trace criterion and relative error, the share of dead
        parameters, the Jacobian's rank, and in its attrs the optimizer's steps and convergence.
    """
    opt = resolve_options(LaplaceOptions, optimizer, "optimizer", "laplace")
    _check_args(curvature, subspace, rank, draws)
    data = check_input_tree(data, "laplace")
    t0 = time.perf_counter()
    pm = as_model(model, var_name=var_name, data=data)
    curvature = _curvature_of(pm, curvature)
    k_init, k_draw, k_swag = jax.random.split(fit_key(random_seed, pm), 3)
    theta0 = initial_point(opt.init, pm.dim, k_init, "laplace")
    mp = map_estimate(lambda th: -pm.logp(th), theta0, max_steps=int(opt.steps), tol=float(opt.tol))
    _check_mode(pm, mp)
    prec = _precision(pm, curvature, mp.theta, prior_precision)
    J_ref, where = _reference_jacobian(pm, mp.theta, X_ref)
    if subspace in (None, "full"):
        q, M = _full_q(mp.theta, prec)
    else:
        q, M = _subspace_q(mp.theta, prec, _orth(_subspace(pm, subspace, rank, mp.theta, prec, J_ref, k_swag)))
    theta, log_q = gaussian_draws(q, draws, pm.dim, k_draw)
    diag = _diagnostics(q, M, J_ref, prec, where)
    attrs = dict(curvature=curvature, subspace=str(subspace or "full"), rank=int(q.basis.shape[1]),
                 map_steps=int(mp.steps), map_converged=int(bool(mp.converged)), map_grad_norm=float(mp.grad_norm),
                 map_value=float(-mp.value), prior_precision=json.dumps(None if prior_precision is None else
                                                                         np.asarray(prior_precision).tolist()),
                 wall_time_s=time.perf_counter() - t0, random_seed=str(random_seed), **diag)
    group = _laplace_group(pm, mp, q, M, log_q, attrs)
    return approximation_tree(pm, data, theta, "laplace", group, "laplace")


def _check_mode(pm, mp):
    """Raise where the optimizer ran away (no mode: the log density grows without bound, as a centred
    hierarchical scale going to zero); warn where it stopped before the gradient criterion."""
    theta = np.asarray(mp.theta)
    far = int(np.argmax(np.abs(theta)))
    label = pm.layout.labels[far] if len(pm.layout.labels) == pm.dim else f"theta[{far}]"
    if not bool(jnp.isfinite(mp.value)) or (not bool(mp.converged) and (abs(theta[far]) > 50 or mp.grad_norm > 1e8)):
        raise ValueError(
            f"the log posterior has no mode in the unconstrained space: L-BFGS ran away along {label} (value "
            f"{theta[far]:.3g} after {int(mp.steps)} steps, log density {float(-mp.value):.4g} and growing, largest "
            "gradient component {:.3g}). A centred hierarchical scale going to zero (a funnel) does this; the Laplace "
            "approximation does not exist there. Use pl.qnvb, a non-centred parameterization, or fixed scales "
            "(prior_precision=).".format(float(mp.grad_norm)))
    if not bool(mp.converged):
        warnings.warn(f"pl.laplace: the optimizer stopped after {int(mp.steps)} steps with largest gradient "
                      f"component {float(mp.grad_norm):.3g} (not at the tolerance: a kink of a ReLU network, or "
                      "optimizer.steps); the approximation is centred there. The laplace group records it "
                      "(map_converged = 0).",
                      UserWarning, stacklevel=3)


def _laplace_group(pm, mp, q, M, log_q, attrs):
    S, s = log_q.shape[0], q.basis.shape[1]
    coords = {"param": list(pm.layout.labels) or [f"theta[{j}]" for j in range(pm.dim)],
              "subspace": np.arange(s), "subspace_b": np.arange(s), "chain": [0], "draw": np.arange(S)}
    ds = xr.Dataset({
        "map": (("param",), np.asarray(mp.theta)), "sd": (("param",), np.asarray(gaussian.marginal_sd(q))),
        "P": (("param", "subspace"), np.asarray(q.basis)), "M": (("subspace", "subspace_b"), np.asarray(M)),
        "log_q": (("chain", "draw"), log_q.reshape(1, S)),
        "q_mean": (("param",), np.asarray(q.mean)), "q_basis": (("param", "subspace"), np.asarray(q.basis)),
        "q_chol": (("subspace", "subspace_b"), np.asarray(q.chol)), "q_c": ((), float(q.c)),
    }, coords=coords)
    ds.attrs.update(attrs)
    ds.attrs.update(method="laplace", posterior_group="posterior", model_kind=pm.kind, var_name=pm.var_name,
                    n_obs=int(pm.n_obs), dim=int(pm.dim), complement_variance=float(q.c), space="unconstrained")
    return ds
