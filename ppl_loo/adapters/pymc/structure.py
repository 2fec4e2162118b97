"""Structure of a PyMC model that the LOO engine can exploit (DESIGN.md, layer 2).

A Bernoulli observation whose logit is an affine function of a block of the unconstrained
parameters, ``mu = X theta[block] + offset`` (for example ``logit_p=b0 + pm.math.dot(X, b)`` or
``p=pm.math.sigmoid(...)``), is the generalized linear model of the notes, section 4: the
engine then uses the exact closed-form Jacobians of the gradient flows (rank one, Eq. 28), low-rank
displacements and a line evaluation through the linear predictor
(:class:`~ppl_loo.model.GLMStructure`). This module finds that structure in the PyTensor
graph and proves it:

- **affinity, symbolically**: the gradient of ``w . mu`` with respect to the value variables
  (PyTensor's symbolic gradient, ``w`` a free vector, after PyTensor's semantics-preserving
  ``canonicalize`` rewrites) must not depend on the value of any value variable (dependence through
  shapes only is allowed). A constant Jacobian means ``mu`` is affine.
  Operations whose symbolic gradient is zero although they are not affine (``floor``, ``round``,
  comparisons) are then caught by
- **a numeric check**: ``mu`` at random points equals ``X theta[block] + offset`` (relative
  ``1e-9``), and the model's log density equals the prior part plus the Bernoulli-logit
  log-likelihood of ``mu``.

The *prior part* (everything but the Bernoulli term: priors with their log-Jacobians, other
observed variables, Potentials) stays a PyMC graph. When its Hessian on the block does not depend on
the block (for example Gaussian priors on the coefficients, with any hyperparameters), it is a
quadratic along every line that moves only the block, and :func:`prior_line` evaluates it at any
number of steps from one extra evaluation; the same two-part proof (symbolic, then numeric on random
lines) decides this.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.adapters.pymc.graph import jaxify

__all__ = ["BernoulliGLM", "detect_bernoulli_glm", "value_ancestors", "prior_line", "prior_cache"]

#: largest block whose constant Hessian is formed (q x q) to test it for being diagonal
MAX_DENSE_HESSIAN = 4096


@dataclass(frozen=True)
class BernoulliGLM:
    """A Bernoulli-logit observation with logit ``X @ theta[block] + offset`` (flat observations).

    Attributes
    ----------
    X : numpy.ndarray, shape (n, q)
        Jacobian of the logit with respect to ``theta[block]`` (constant).
    offset : numpy.ndarray or None, shape (n,)
        The logit at ``theta[block] = 0`` (the parts of the logit that are data); None when zero.
    y : numpy.ndarray, shape (n,)
        The observations, float 0/1, flattened in C order.
    block : numpy.ndarray of int
        Indices of ``theta`` the logit depends on (whole value variables, in ``theta`` order).
    prior : callable
        ``prior(theta) -> scalar``: the log density without the Bernoulli term (log-Jacobians and
        Potentials included), one unconstrained draw.
    quadratic : bool
        The prior part is a quadratic along lines that move only ``block`` (proved as above).
    constant_hessian : bool
        Moreover its Hessian on the block does not depend on any parameter (for example fixed
        Gaussian priors on the coefficients).
    hessian_diag : numpy.ndarray or None, shape (q,)
        That constant Hessian when it is diagonal (independent priors on the block's coordinates;
        checked on the exact Hessian for blocks of up to ``MAX_DENSE_HESSIAN`` coordinates).
    """

    X: np.ndarray
    offset: object
    y: np.ndarray
    block: np.ndarray
    prior: object
    quadratic: bool
    constant_hessian: bool = False
    hessian_diag: object = None


# ----------------------------------------------------------------------------- graph inspection
def value_ancestors(outputs, targets) -> set:
    """The variables of ``targets`` whose *values* the graphs ``outputs`` depend on.

    Like :func:`pytensor.graph.traversal.ancestors`, but it does not follow the inputs that only
    give a shape: those of ``Shape``/``Shape_i`` and the first input of ``Second`` (``fill``,
    ``zeros_like``), which symbolic gradients of indexing and broadcasting create.
    """
    from pytensor.scalar.basic import Second
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.shape import Shape, Shape_i

    targets = set(targets)
    found, seen, stack = set(), set(), list(outputs)
    while stack:
        v = stack.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        if v in targets:
            found.add(v)
            continue
        node = v.owner
        if node is None or isinstance(node.op, (Shape, Shape_i)):
            continue
        inputs = node.inputs
        if isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, Second):
            inputs = inputs[1:]
        stack.extend(inputs)
    return found


def _gradient_free_of(expr, wrt, targets) -> bool:
    """True when ``d(w . expr)/d wrt`` (``w`` a free vector) does not depend on ``targets``' values."""
    import pytensor
    import pytensor.tensor as pt

    flat = pt.flatten(expr)
    w = pt.vector("w_probe", dtype=flat.dtype)
    try:
        grads = pytensor.grad(pt.sum(w * flat), list(wrt), disconnected_inputs="ignore",
                              return_disconnected="none")
    except Exception:  # noqa: BLE001 - an op without a gradient: not provably affine
        return False
    from pytensor.graph.rewriting.utils import rewrite_graph

    # canonicalized (semantics-preserving rewrites): x ** 0 -> 1, x * 0 -> 0, ...
    grads = [rewrite_graph(g, include=("canonicalize",)) for g in grads if g is not None]
    return not value_ancestors(grads, targets)


def _sigmoid_input(p):
    """``eta`` when ``p = sigmoid(eta)`` (``logit_p=``, ``pm.math.sigmoid``/``invlogit``), else None."""
    from pytensor.scalar.math import Sigmoid
    from pytensor.tensor.elemwise import Elemwise

    node = p.owner
    if node is not None and isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, Sigmoid):
        return node.inputs[0]
    return None


# ----------------------------------------------------------------------------- detection
def detect_bernoulli_glm(adapter, model, obs_rv, *, n_checks: int = 4, seed: int = 0):
    """Find and prove a Bernoulli-logit linear predictor of ``obs_rv``; ``(BernoulliGLM, "")`` or
    ``(None, reason)``.

    Parameters
    ----------
    adapter : PyMCModel
        Provides the layout of ``theta`` (``split``, ``slices``, ``value_vars``), ``logp`` and
        ``observed``.
    model : pymc.Model
    obs_rv : TensorVariable
        The observed variable LOO uses.
    n_checks : int
        Random points (and random lines) of the numeric checks.
    seed : int
        Seed of those points (the result does not depend on it unless the structure is absent).
    """
    import pytensor.tensor as pt

    y, eta_v, deps, reason = _affine_logit(adapter, model, obs_rv)
    if reason:
        return None, reason
    value_vars = list(adapter.value_vars)
    block = np.concatenate([np.arange(adapter.slices[v.name].start, adapter.slices[v.name].stop)
                            for v in value_vars if v in deps])
    eta_of = partial(_first_output, jaxify(value_vars, [pt.flatten(eta_v)]), adapter.split)
    X, offset = _logit_jacobian(eta_of, adapter.dim, block)
    if X.shape != (y.size, block.size) or not (np.isfinite(X).all() and np.isfinite(offset).all()):
        return None, "the logit's Jacobian is not finite"

    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n_checks, adapter.dim)) * np.array([1.0, 3.0] * n_checks)[:n_checks, None]
    pts = jnp.asarray(points)
    mu = np.asarray(jax.jit(jax.vmap(eta_of))(pts))
    lin = points[:, block] @ X.T + offset
    if not np.allclose(mu, lin, rtol=1e-9, atol=1e-9 * (1.0 + np.abs(lin).max())):
        return None, "the logit is not affine at random points (a piecewise-constant operation?)"

    prior_graph = _prior_part_graph(model, obs_rv)
    prior = partial(_first_output, jaxify(value_vars, [prior_graph]), adapter.split)
    if not _density_splits(adapter.logp, prior, eta_of, y, pts):
        return None, "the log density is not the prior part plus the Bernoulli-logit log-likelihood"

    quadratic, constant = _prior_is_quadratic(prior, prior_graph, value_vars, deps, block, pts, rng)
    h_diag = None
    if constant and block.size <= MAX_DENSE_HESSIAN:
        h_diag = _constant_hessian_diagonal(prior, block, pts[0])
    off = None if not np.any(offset != 0) else offset
    return BernoulliGLM(X, off, y, block, prior, quadratic, constant, h_diag), ""


def _first_output(fn, split, theta):
    """The first output of a jaxified graph ``fn`` of the value variables at one draw ``theta``."""
    return fn(*split(theta))[0]


def _affine_logit(adapter, model, obs_rv):
    """``(y, logit graph, value variables it depends on, "")``, or ``(.., reason)`` where the observation is
    not Bernoulli with a logit that is symbolically affine in the unconstrained parameters."""
    import pytensor.tensor as pt

    none = (None, None, None)
    if type(obs_rv.owner.op).__name__ != "BernoulliRV":
        return (*none, "the observed variable is not Bernoulli")
    if adapter.observed is None:
        return (*none, "the observed values are not known")
    y = np.asarray(adapter.observed, dtype=np.float64).reshape(-1)
    if not np.isin(y, (0.0, 1.0)).all():
        return (*none, "the observed values are not all 0 or 1")
    eta = _sigmoid_input(obs_rv.owner.inputs[-1])
    if eta is None:
        return (*none, "the Bernoulli probability is not sigmoid(logit)")
    value_vars = list(adapter.value_vars)
    eta_v = model.replace_rvs_by_values([eta])[0]
    eta_v = pt.broadcast_to(eta_v, tuple(adapter.observed.shape))
    deps = value_ancestors([eta_v], value_vars)
    if not deps:
        return (*none, "the logit does not depend on any parameter")
    if not _gradient_free_of(eta_v, [v for v in value_vars if v in deps], value_vars):
        return (*none, "the logit is not affine in the unconstrained parameters")
    return y, eta_v, deps, ""


def _logit_jacobian(eta_of, dim, block):
    """``(X, offset)``: the Jacobian of the flat logit on ``theta[block]`` and the logit at ``theta = 0``."""
    zero = jnp.zeros(dim)
    offset = np.asarray(eta_of(zero), dtype=np.float64)
    X = np.asarray(jax.jit(jax.jacfwd(lambda tb: eta_of(zero.at[block].set(tb))))(jnp.zeros(block.size)),
                   dtype=np.float64)
    return X, offset


def _prior_part_graph(model, obs_rv):
    """The PyTensor graph of every term of the model's log density but ``obs_rv``'s (log-Jacobians,
    other observed variables and Potentials included), summed."""
    import pytensor.tensor as pt

    others = [rv for rv in model.free_RVs] + [o for o in model.observed_RVs if o is not obs_rv]
    terms = model.logp(vars=others + list(model.potentials), jacobian=True, sum=False)
    return pt.sum([pt.sum(t) for t in terms]) if terms else pt.constant(0.0)


def _density_splits(logp, prior, eta_of, y, pts) -> bool:
    """The model's log density equals the prior part plus the Bernoulli-logit log-likelihood at ``pts``."""
    sign = jnp.asarray(2.0 * y - 1.0)
    lp_model = np.asarray(jax.jit(jax.vmap(logp))(pts))
    lp_parts = np.asarray(jax.jit(jax.vmap(lambda th: prior(th) + jnp.sum(-jax.nn.softplus(-sign * eta_of(th)))))(pts))
    ok = np.isfinite(lp_model)
    return bool(ok.sum() >= 2 and np.allclose(lp_parts[ok], lp_model[ok], rtol=1e-9, atol=1e-8))


def _constant_hessian_diagonal(prior, block, point):
    """The prior part's Hessian on the block (constant, proved before), formed exactly at ``point``,
    when it is diagonal; else None."""
    H = np.asarray(jax.jit(jax.jacfwd(jax.grad(lambda tb: prior(point.at[block].set(tb)))))(point[block]))
    diag = np.diag(H).copy()
    if np.all(np.isfinite(diag)) and np.count_nonzero(H - np.diag(diag)) == 0:
        return diag
    return None


def _prior_is_quadratic(prior, prior_graph, value_vars, deps, block, pts, rng):
    """``(quadratic, constant_hessian)`` of the prior part on the block.

    Quadratic: its Hessian on the block is free of the block's values (symbolic) and it is a
    quadratic along random block lines (numeric). Constant Hessian: the Hessian is free of every
    value variable (symbolic) and Hessian-vector products agree at random points (numeric).
    """
    import pytensor
    import pytensor.tensor as pt

    wrt = [v for v in value_vars if v in deps]
    try:
        grads = pytensor.grad(prior_graph, wrt, disconnected_inputs="ignore", return_disconnected="zero")
    except Exception:  # noqa: BLE001
        return False, False
    flat = pt.concatenate([pt.flatten(g) for g in grads])
    if not _gradient_free_of(flat, wrt, wrt):
        return False, False
    d = pts.shape[1]
    dirs = np.zeros((pts.shape[0], d))
    dirs[:, block] = rng.normal(size=(pts.shape[0], block.size))
    dirs = jnp.asarray(dirs)
    ts = jnp.asarray([0.0, 1.0, -1.0, 2.5])
    vals = np.asarray(jax.jit(jax.vmap(lambda t: jax.vmap(prior)(pts + t * dirs)))(ts))  # (4, P)
    if not np.isfinite(vals).all():
        return False, False
    f0, f1, fm1, f25 = vals
    a1 = 0.5 * (f1 - fm1)
    a2 = 0.5 * (f1 + fm1) - f0
    pred = f0 + 2.5 * a1 + 6.25 * a2
    if not np.allclose(pred, f25, rtol=1e-9, atol=1e-8 * (1.0 + np.abs(vals).max())):
        return False, False
    if not _gradient_free_of(flat, wrt, value_vars):
        return True, False
    hv = np.asarray(jax.jit(jax.vmap(lambda x: jax.jvp(jax.grad(prior), (x,), (dirs[0],))[1]))(pts))  # (P, d)
    const = np.allclose(hv, hv[:1], rtol=1e-9, atol=1e-9 * (1.0 + np.abs(hv).max()))
    return True, bool(const)


# ----------------------------------------------------------------------------- line evaluation
def prior_cache(glm: BernoulliGLM, theta, block):
    """Per-run quantities of the prior part at the draws ``theta`` (``(S, d)``), for :func:`prior_line`:
    ``(f0, g0, h, tb2, g0tb)`` = prior ``(S,)``, its gradient on the block ``(S, q)`` (quadratic
    priors), and for a constant diagonal Hessian ``h`` (``(q,)``) the per-draw products
    ``theta_b^2`` and ``g0 * theta_b`` that evaluate diagonal affine lines without forming them.
    """
    f0, grad = jax.vmap(jax.value_and_grad(glm.prior))(theta)
    if not glm.quadratic:
        return f0, None, None, None, None
    g0 = grad[:, block]
    if glm.hessian_diag is None:
        return f0, g0, None, None, None
    tb = theta[:, block]
    return f0, g0, jnp.asarray(glm.hessian_diag), tb * tb, g0 * tb


def prior_line(glm: BernoulliGLM, pcache, theta, delta, ts, block):
    """The prior part at ``theta + t delta`` for every ``t``: shape ``(T, S)``.

    ``pcache`` is :func:`prior_cache` of the draws; ``delta`` is an ``(S, d)`` array, a ``LowRank``
    or a ``DiagAffine`` displacement (:mod:`ppl_loo.numerics.transforms`) that is zero outside
    ``block`` (a slice or index array), as the engine's maps are. For a quadratic prior
    (``glm.quadratic``), ``f(t) = f0 + t f1 + t^2 f2`` with ``f1 = g0 . delta_b``, and

    - for a constant diagonal Hessian ``h``: ``f2 = 1/2 sum_j h_j delta_bj^2``, in ``O(S q)`` for
      every displacement type, a diagonal affine one (``delta_b = shift + slope theta_b``) from the
      per-run products of :func:`prior_cache` (as the closed-form model's Gaussian prior);
    - for a constant Hessian ``H`` and ``delta = coef @ basis`` of rank ``r``:
      ``f2 = 1/2 coef (basis H basis^T) coef`` from ``r`` Hessian-vector products;
    - otherwise ``f2 = f(1) - f0 - f1``: one evaluation at ``theta + delta`` serves every step.

    A prior that is not quadratic is evaluated at every step.
    """
    f0, g0, h, tb2, g0tb = pcache
    ts = jnp.asarray(ts)
    t = ts[:, None]
    f = jax.vmap(glm.prior)

    def quad(f1, f2):
        return f0[None] + t * f1[None] + t * t * f2[None]

    def dense(delta):
        return delta.dense(theta) if hasattr(delta, "dense") else jnp.broadcast_to(delta, theta.shape)

    if not glm.quadratic:
        full = dense(delta)
        return jax.vmap(lambda s: f(theta + s * full))(ts)
    if h is not None:  # constant diagonal Hessian
        if hasattr(delta, "slope"):  # DiagAffine
            sh, sl = delta.shift[block], delta.slope[block]
            f1 = g0 @ sh + g0tb @ sl
            f2 = 0.5 * (jnp.sum(h * sh * sh) + 2.0 * (theta[:, block] @ (h * sh * sl)) + tb2 @ (h * sl * sl))
        elif hasattr(delta, "coef"):  # LowRank
            coef, basis_b = delta.coef, delta.basis[:, block]
            f1 = jnp.sum(coef * (g0 @ basis_b.T), axis=1)
            f2 = 0.5 * jnp.einsum("sr,ru,su->s", coef, (basis_b * h) @ basis_b.T, coef)
        else:
            db = jnp.broadcast_to(delta, theta.shape)[:, block]
            f1 = jnp.sum(g0 * db, axis=1)
            f2 = 0.5 * ((db * db) @ h)
        return quad(f1, f2)
    if hasattr(delta, "coef") and glm.constant_hessian:  # LowRank
        coef, basis = delta.coef, delta.basis
        basis_b = basis[:, block]
        f1 = jnp.sum(coef * (g0 @ basis_b.T), axis=1)
        hv = jax.vmap(lambda v: jax.jvp(jax.grad(glm.prior), (theta[0],), (v,))[1])(basis)  # (r, d)
        f2 = 0.5 * jnp.einsum("sr,ru,su->s", coef, hv[:, block] @ basis_b.T, coef)
        return quad(f1, f2)
    full = dense(delta)
    if ts.shape[0] > 2:
        f1 = jnp.sum(g0 * full[:, block], axis=1)
        return quad(f1, f(theta + full) - f0 - f1)
    return jax.vmap(lambda s: f(theta + s * full))(ts)
