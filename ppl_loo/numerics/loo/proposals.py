"""Building each transformation's :class:`~ppl_loo.numerics.transforms.Proposal` for one observation.

Moment matching (PMM1, PMM2 with Chang et al. v3 Eq. 15; MM1-MM3 of Paananen et al. 2021), the gradient flows
(:mod:`ppl_loo.numerics.loo.flows`) and the Newton step (this project). A proposal is a line
``theta + t delta`` through every draw with the log|det J| of every step ``t``.
"""


from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics.gaussian import MeanField, cov_mv
from ppl_loo.numerics.loo.config import split_name, steps_of
from ppl_loo.numerics.loo.context import SearchContext, line, loglik_i
from ppl_loo.numerics.loo.flows import gradient_proposal, per_draw
from ppl_loo.numerics.loo.memory import block_bytes_of, draw_block, draw_bytes, fits_dense, map_draws
from ppl_loo.numerics.loo.predictor import glm_offset, has_closed_form, is_glm
from ppl_loo.numerics.qnvb import projective_loo
from ppl_loo.numerics.transforms import (
    ObsContext,
    Proposal,
    diag_affine,
    gaussian_newton,
    mm3,
    newton,
    not_applicable,
    pmm1,
    pmm2,
)

__all__ = ["make_proposal", "base_proposal", "newton_proposal", "glm_newton_proposal", "cavity_proposal",
           "projective_proposal", "newton_fits", "hessian_at", "NEWTON_MATRICES", "MM3_MATRICES"]


def glm_newton_proposal(sc: SearchContext, i, ctx: ObsContext, steps) -> Proposal:
    """The Newton step of a Bernoulli-logit GLM: its curvature is rank one along the design row."""
    struct = sc.model.structure
    y = jnp.asarray(struct.y, dtype=sc.theta.dtype)[i]
    x = jnp.asarray(struct.X, dtype=sc.theta.dtype)[i]
    mu = sc.stats.theta_b @ x + glm_offset(struct, i, sc.theta.dtype)
    sig = jax.nn.sigmoid(mu)
    g_bar = jnp.mean(y - sig) * x
    nx = jnp.linalg.norm(x)
    V = (x / nx)[:, None]
    D = jnp.atleast_1d(-jnp.mean(sig * (1 - sig)) * nx**2)
    return newton(ctx, steps, g_bar, V, D)


def newton_proposal(sc: SearchContext, i, ctx: ObsContext, steps) -> Proposal:
    """The Newton step: expected gradient of ``log l_i`` and its Hessian at the posterior mean."""
    struct = sc.model.structure
    if is_glm(struct) and has_closed_form(struct):
        return glm_newton_proposal(sc, i, ctx, steps)
    if not newton_fits(sc):
        return not_applicable(ctx, steps)
    ll_i = partial(loglik_i, sc)
    grad_ll = per_draw(sc, jax.grad(ll_i), i)[:, sc.bidx]
    g_bar = jnp.mean(grad_ll, axis=0)
    mean_full = jnp.mean(sc.theta, axis=0)
    H = hessian_at(sc, ll_i, mean_full, i)[jnp.ix_(sc.block, sc.block)]
    D, V = jnp.linalg.eigh(0.5 * (H + H.T))
    return newton(ctx, steps, g_bar, V, D)


#: float64 ``(d_b, d_b)`` matrices the Newton step of one observation holds (the Hessian, its and
#: the Woodbury eigendecompositions, the map), and MM3's (covariances, Cholesky factors, the map)
NEWTON_MATRICES = 16
MM3_MATRICES = 8


def newton_fits(sc: SearchContext):
    """Whether the Newton step's ``(d_b, d_b)`` work of one observation fits (and ``d_b`` is at most
    ``cfg.newton_max_dim`` where one is set): never a Hessian per draw, one at the posterior mean."""
    d_b, cap = sc.block.shape[0], sc.cfg.newton_max_dim
    return (cap is None or d_b <= cap) and fits_dense(d_b, NEWTON_MATRICES, block_bytes_of(sc.cfg))


def hessian_at(sc: SearchContext, f, m, i):
    """``jax.hessian(f)(m, i)``; where its forward-mode tangents (``d`` copies of the gradient's
    graph) exceed ``cfg.block_bytes``, column by column in blocks (Hessian-vector products)."""
    d = m.shape[0]
    dtype = m.dtype
    col = jax.ShapeDtypeStruct((d,), dtype)
    per_col = draw_bytes(lambda v, x, j: jax.jvp(lambda y: jax.grad(f)(y, j), (x,), (v,))[1], col, col,
                         jax.ShapeDtypeStruct((), np.int32))
    block = draw_block(d, per_col, block_bytes_of(sc.cfg))
    if block == 0:
        return jax.hessian(f)(m, i)
    cols = map_draws(lambda v: jax.jvp(lambda y: jax.grad(f)(y, i), (m,), (v,))[1], (jnp.eye(d, dtype=dtype),), block)
    return cols.T  # row j of the map is column j of the Hessian


def _cavity_curvature(sc: SearchContext, i, m):
    """``(V, D)`` with ``V diag(D) V^T`` the curvature of ``log l_i`` at ``m`` on the block: the
    Bernoulli-logit GLM's rank one, the Gauss-Newton rank one of a model with a Bernoulli output,
    else the Hessian (where :func:`newton_fits`); None where none applies."""
    struct, out = sc.model.structure, sc.model.output
    if is_glm(struct) and has_closed_form(struct):
        x = jnp.asarray(struct.X, dtype=m.dtype)[i]
        s = jax.nn.sigmoid(m[sc.bidx] @ x + glm_offset(struct, i, m.dtype))
        u, w = x, s * (1.0 - s)
    elif out is not None and out.likelihood == "bernoulli":
        f_i, J = jax.value_and_grad(lambda th: out.fn(th)[i, 0])(m)
        s = jax.nn.sigmoid(f_i)
        u, w = J[sc.bidx], s * (1.0 - s)
    elif newton_fits(sc):
        H = hessian_at(sc, partial(loglik_i, sc), m, i)[jnp.ix_(sc.block, sc.block)]
        D, V = jnp.linalg.eigh(0.5 * (H + H.T))
        return V, D
    else:
        return None
    nu = jnp.maximum(jnp.linalg.norm(u), 1e-300)
    return (u / nu)[:, None], jnp.atleast_1d(-w * nu**2)


def _on_block(sc: SearchContext, v):
    """``v`` on the block (``(d_b,)`` or ``(d_b, q)``) embedded into the full vector with zeros."""
    d = sc.theta.shape[1]
    return jnp.zeros((d,) + v.shape[1:], v.dtype).at[sc.block].set(v)


def cavity_proposal(sc: SearchContext, i, ctx: ObsContext, steps) -> Proposal:
    """The Laplace cavity: remove observation ``i`` from the precision of the Gaussian ``q`` the draws
    come from and take the Newton step from its mean (Faller & Martin's approximation, notes T5).

    With ``H_i`` the curvature of ``log l_i`` at the mean ``m`` of ``q = N(m, Sigma)`` and ``g_i`` its
    gradient there, the LOO Gaussian is ``N(m - Sigma_-i g_i, Sigma_-i)`` with
    ``Sigma_-i = (Sigma^-1 + H_i)^-1``; :func:`~ppl_loo.numerics.transforms.gaussian_newton` maps the
    draws of ``q`` onto it exactly (exact LOO for a linear-Gaussian model). Not applicable to MCMC draws.
    """
    g = sc.gauss
    if g is None:
        return not_applicable(ctx, steps)
    m = g.mean
    curv = _cavity_curvature(sc, i, m)
    if curv is None:
        return not_applicable(ctx, steps)
    V, D = curv
    grad = jax.grad(partial(loglik_i, sc))(m, i)[sc.bidx]
    U = cov_mv(g, _on_block(sc, V))[sc.bidx]
    sigma_g = cov_mv(g, _on_block(sc, grad))[sc.bidx]
    return gaussian_newton(sc.stats.theta_b - m[sc.bidx], steps, grad, V, D, U, sigma_g)


def projective_proposal(sc: SearchContext, i, ctx: ObsContext, steps) -> Proposal:
    """The projective LOO update of a mean-field ``q`` (QNVB notes, section 7, feature 7): the
    expected gradient and Hessian diagonal of ``log l_i`` under ``q`` (Hadamard quadrature,
    Algorithm 2) removed from ``q``'s precision; the draws are mapped componentwise onto
    ``N(mu_-i, sigma_-i^2)``. Not applicable to MCMC draws or a non-diagonal ``q``."""
    g = sc.gauss
    if not isinstance(g, MeanField):
        return not_applicable(ctx, steps)
    upd = projective_loo(lambda th: loglik_i(sc, th, i), g.mean, g.sd)
    b = sc.bidx
    slope = upd.sigma[b] / g.sd[b] - 1.0
    shift = (upd.mu[b] - g.mean[b]) - slope * g.mean[b]
    return diag_affine(steps, sc.theta.shape[0], shift, slope)


def base_proposal(sc: SearchContext, name, i, ll0, ctx: ObsContext, steps) -> Proposal:
    """The proposal of a transformation name without its ``_mix`` suffix."""
    if name in ("pmm1", "mm1"):
        prop = pmm1(ctx, steps)
    elif name in ("pmm2", "mm2"):
        prop = pmm2(ctx, steps)
    elif name == "mm3":
        prop = mm3(ctx, steps) if fits_dense(sc.block.shape[0], MM3_MATRICES, block_bytes_of(sc.cfg)) else (
            not_applicable(ctx, steps))
    elif name in ("kl", "var", "ll"):
        prop = gradient_proposal(sc, name, i, ll0, steps)
    elif name == "newton":
        prop = newton_proposal(sc, i, ctx, steps)
    elif name == "cavity":
        prop = cavity_proposal(sc, i, ctx, steps)
    elif name == "projective":
        prop = projective_proposal(sc, i, ctx, steps)
    else:  # pragma: no cover - validated by the caller
        raise ValueError(name)
    return prop


def make_proposal(sc: SearchContext, full_name, i, ll0, ctx: ObsContext, steps, memo=None):
    """The proposal of ``full_name``; ``memo`` shares it, and the model along its lines, between a
    transformation and its mixture (``pmm1`` and ``pmm1_mix``: the same map over the same steps),
    so that each is traced, compiled and evaluated once. Returns ``(prop, mixture, lines)``."""
    name, mixture = split_name(full_name)
    key = (name, steps_of(full_name, sc.cfg.hbar))
    if memo is not None and key in memo:
        prop, lines = memo[key]
    else:
        prop = base_proposal(sc, name, i, ll0, ctx, steps)
        lines = None
        if memo is not None:
            lines = line(sc, prop.delta, steps, i) if prop.applicable is not False else None
            memo[key] = (prop, lines)
    if mixture and not sc.posterior_draws and sc.log_q_fn is None:
        prop = prop._replace(applicable=False)
    return prop, mixture, lines
