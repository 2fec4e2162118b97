"""Gradient-flow proposals: KL descent (Eq. 18), variance descent (Eq. 19), log-likelihood descent.

Each map is ``T(theta) = theta + t c Q(theta)`` with the step rule of Eq. 21. Its Jacobian
determinant is exact in closed form for a declared Bernoulli-logit structure (the GLM's matrix-
determinant lemma, Chang et al. v3 Eq. 28; the ReLU net's eigen-structure, Chang et al. v3 Eq. 29-32), and otherwise
taken from the autodiff Jacobian of ``Q``: exactly (``slogdet``) on small blocks, to first order
(Eq. 22) on large ones.
"""


from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics import structured
from ppl_loo.numerics.loo.context import SearchContext, loglik_i, obs_context
from ppl_loo.numerics.loo.memory import block_bytes_of, draw_block, draw_bytes, fits_one_draw, map_draws
from ppl_loo.numerics.loo.predictor import has_closed_form, is_glm, linear_predictor, relu_blocks
from ppl_loo.numerics.transforms import (
    LowRank,
    Proposal,
    gradient_direction,
    logdet_exact,
    logdet_first_order,
    not_applicable,
    step_scale,
)

__all__ = ["gradient_proposal", "closed_form_flow", "autodiff_flow", "closed_form_logdet", "flow_coefficients",
           "flow_displacement", "jacobian_draw_fn", "jacobian_bytes", "uses_exact", "per_draw", "flow_by_cost"]


def gradient_proposal(sc: SearchContext, kind, i, ll0, steps) -> Proposal:
    """The ``kind`` (``"kl"``, ``"var"`` or ``"ll"``) gradient flow of observation ``i`` over ``steps``."""
    if has_closed_form(sc.model.structure):
        return closed_form_flow(sc, kind, i, steps)
    return autodiff_flow(sc, kind, i, ll0, steps)


def flow_coefficients(kind, tc, y, mu, A):
    """``(alpha, s)`` of the closed-form Jacobian ``J = I + alpha Hess(mu) + grad(mu) u^T``.

    The rank-one vector is ``u = s b`` (KL/Var, ``b = grad log A``) or ``u = s grad(mu)`` (LL);
    ``s`` is read off :func:`~ppl_loo.numerics.structured.kl_var_coefficients` and
    :func:`~ppl_loo.numerics.structured.ll_coefficients` applied to a unit vector, so that the
    per-draw vector meets the step axis only inside the determinant (no ``(T, S, d)`` array).
    ``tc`` is the step times the step scale, shape ``(T, 1)``; ``alpha`` and ``s`` are ``(T, S)``.
    """
    unit = jnp.ones((1,), dtype=tc.dtype)
    if kind == "ll":
        alpha, u = structured.ll_coefficients(tc, mu, y, unit)
    else:
        alpha, u = structured.kl_var_coefficients(tc, A, unit)
    return alpha, u[..., 0]


def closed_form_logdet(sc: SearchContext, kind, i, y, mu, gmu, log_abs_a, sign_a, c, steps):
    """Exact log|det J| for Q = A grad(mu) (KL/Var) or the LL map (notes section 4).

    ``J = I + alpha Hess(mu) + grad(mu) (s u)^T`` with a per-draw vector ``u`` and a scalar
    ``s`` per (step, draw), so no (T, S, d) array is formed.
    """
    struct = sc.model.structure
    tc = steps[:, None] * c  # (T, 1)
    if kind == "ll":
        u_base = gmu
        A = None
    else:
        kappa = 1.0 if kind == "kl" else 2.0
        A = sign_a * jnp.exp(log_abs_a)  # (S,)
        u_base = sc.stats.grad_logp0_b + kappa * (1.0 - 2.0 * y) * gmu  # b of the notes
    alpha, u_scale = flow_coefficients(kind, tc, y, mu, A)
    x = jnp.asarray(struct.X)[i]
    if is_glm(struct):  # Chang et al. v3 Eq. 28: det J = 1 + u . x
        logdet, sign = structured.glm_logdet(alpha, u_scale[..., None] * (u_base @ x)[None, :, None],
                                             jnp.ones((1,), dtype=sc.theta.dtype))
    else:  # Chang et al. v3 Eq. 29-32
        W1, W2, _ = relu_blocks(sc.theta, struct)
        logdet, sign = structured.relu_logdet(alpha, u_base, W1, W2, x, u_scale=u_scale)
    return logdet, sign > 0


def closed_form_flow(sc: SearchContext, kind, i, steps) -> Proposal:
    """The flow of a Bernoulli-logit structure: ``Q`` along ``grad(mu)``, closed-form determinant."""
    struct = sc.model.structure
    S = sc.theta.shape[0]
    y = jnp.asarray(struct.y, dtype=sc.theta.dtype)[i]
    mu, gmu = linear_predictor(sc, i)
    if kind == "ll":
        log_a, sign_a = jnp.zeros(S), -jnp.ones(S)
        v = (y - jax.nn.sigmoid(mu))[:, None] * gmu
    else:
        kappa = 1.0 if kind == "kl" else 2.0
        log_a = sc.logp0 + kappa * mu * (1.0 - 2.0 * y)
        log_a = log_a - jnp.max(log_a)
        sign_a = jnp.full((S,), 1.0 - 2.0 * y)
        v = gmu
    log_c = step_scale(log_a, v, sc.stats.sd_b)
    c = jnp.exp(log_c)
    if is_glm(struct):  # every draw moves along the design row: rank one
        scal = c * sign_a * jnp.exp(log_a)
        if kind == "ll":
            scal = scal * (y - jax.nn.sigmoid(mu))
        delta = LowRank(scal[:, None], jnp.asarray(struct.X, dtype=sc.theta.dtype)[i][None, :])
    else:
        delta = (c * sign_a * jnp.exp(log_a))[:, None] * v
    logdet, ok = closed_form_logdet(sc, kind, i, y, mu, gmu, log_a, sign_a, c, steps)
    return Proposal(delta, logdet, ok, jnp.asarray(True))


def flow_displacement(th_b, th_full, sc: SearchContext, kind, i, c, C):
    """``c Q(theta)`` of one draw on the block (the function whose Jacobian is taken)."""
    model = sc.model
    th = th_full.at[sc.block].set(th_b)
    lp = model.logp(th)
    ll, g = jax.value_and_grad(partial(loglik_i, sc))(th, i)
    g = g[sc.block]
    if kind == "kl":
        return -c * jnp.exp(lp - ll - C) * g
    if kind == "ll":
        return -c * g
    if model.has_var_target:
        lt, glt = jax.value_and_grad(model.log_var_target)(th, i)
        gg = glt[sc.block] - g
        return c * jnp.exp(lp + 2.0 * (lt - ll) - C) * gg
    return -c * jnp.exp(lp - 2.0 * ll - C) * g


def per_draw(sc: SearchContext, f, i):
    """``f(theta_s, i)`` of every draw (``jax.vmap``), in blocks of draws where they do not all fit
    ``cfg.block_bytes`` (a gradient of the model's graph per draw: ``(S, graph)`` temporaries)."""
    theta = sc.theta
    S, d = theta.shape
    block = draw_block(S, draw_bytes(f, _one(d, theta.dtype), jax.ShapeDtypeStruct((), np.int32)),
                       block_bytes_of(sc.cfg))
    if block == 0:
        return jax.vmap(f, in_axes=(0, None))(theta, i)
    return map_draws(lambda th: f(th, i), (theta,), block)


def _one(d, dtype):
    return jax.ShapeDtypeStruct((d,), dtype)


def jacobian_draw_fn(sc: SearchContext, kind, steps, exact):
    """``one(th_b, th, i, c, C)``: the Jacobian determinant of the flow at one draw: ``(log|det|,
    sign)`` over ``steps`` (exact) or the trace of the Jacobian of ``c Q`` (first order, Eq. 22)."""
    d_b = sc.block.shape[0]

    def one(th_b, th, i, c, C):
        jac = jax.jacfwd(partial(flow_displacement, sc=sc, kind=kind, i=i, c=c, C=C))(th_b, th)
        if not exact:
            return jnp.trace(jac)
        sign, logdet = jax.vmap(lambda t: jnp.linalg.slogdet(jnp.eye(d_b) + t * jac))(steps)
        return logdet, sign

    return one


def jacobian_bytes(sc: SearchContext, kind, steps, exact):
    """Estimated bytes of one draw's Jacobian determinant (:func:`jacobian_draw_fn`)."""
    d, dtype = sc.theta.shape[1], sc.theta.dtype
    scalar = jax.ShapeDtypeStruct((), dtype)
    return draw_bytes(jacobian_draw_fn(sc, kind, steps, exact), _one(sc.block.shape[0], dtype), _one(d, dtype),
                      jax.ShapeDtypeStruct((), np.int32), scalar, scalar)


def uses_exact(sc: SearchContext):
    """Exact autodiff log|det| (``jacobian="exact"``, or ``"auto"`` on blocks up to ``exact_max_dim``)."""
    cfg = sc.cfg
    return cfg.jacobian == "exact" or (cfg.jacobian == "auto" and sc.block.shape[0] <= cfg.exact_max_dim)


def flow_by_cost(sc: SearchContext):
    """Whether ``jacobian="auto"`` computes the autodiff flows: their Jacobian takes ``d_b`` forward-mode
    passes through the model per draw (about ``d_b / 25`` times the rest of the search), so only on
    blocks up to ``cfg.flow_max_dim``; ``"exact"`` and ``"first_order"`` compute them at any size."""
    cfg = sc.cfg
    return cfg.jacobian != "auto" or cfg.flow_max_dim is None or sc.block.shape[0] <= cfg.flow_max_dim


def autodiff_flow(sc: SearchContext, kind, i, ll0, steps) -> Proposal:
    """The flow of any JAX model: ``Q`` from autodiff, log|det J| exact or first order (Eq. 22).

    The per-draw Jacobians are formed in blocks of draws within ``cfg.block_bytes``
    (:mod:`ppl_loo.numerics.loo.memory`); the flow is not applicable where one draw's does not fit,
    or where :func:`flow_by_cost` leaves it out.
    """
    model, theta = sc.model, sc.theta
    use_exact = uses_exact(sc)
    jac_bytes = jacobian_bytes(sc, kind, steps, use_exact) if flow_by_cost(sc) else None
    budget = block_bytes_of(sc.cfg)
    if jac_bytes is None or not fits_one_draw(jac_bytes, budget):  # static: decided at trace time
        return not_applicable(obs_context(sc, ll0), steps)
    grad_ll = per_draw(sc, jax.grad(partial(loglik_i, sc)), i)[:, sc.bidx]
    log_t = grad_lt = None
    if kind == "var" and model.has_var_target:
        log_t, grad_lt = per_draw(sc, jax.value_and_grad(model.log_var_target), i)
        grad_lt = grad_lt[:, sc.bidx]
    log_a, sign_a, v, C = gradient_direction(kind, sc.logp0, ll0, grad_ll, log_t, grad_lt)
    log_c = step_scale(log_a, v, sc.stats.sd_b)
    c = jnp.exp(log_c)
    delta = (c * sign_a * jnp.exp(log_a))[:, None] * v
    block = draw_block(theta.shape[0], jac_bytes, budget)
    if block == 0:  # every draw at once (the unblocked computation)
        displacement = partial(flow_displacement, sc=sc, kind=kind, i=i, c=c, C=C)
        jac = jax.vmap(jax.jacfwd(displacement), in_axes=(0, 0))(sc.stats.theta_b, theta)  # (S, d_b, d_b)
        if use_exact:
            logdet, ok = logdet_exact(jac, steps)
        else:
            logdet, ok = logdet_first_order(jnp.trace(jac, axis1=1, axis2=2), steps)
        return Proposal(delta, logdet, ok, jnp.asarray(True))
    one = jacobian_draw_fn(sc, kind, steps, use_exact)
    out = map_draws(lambda th_b, th: one(th_b, th, i, c, C), (sc.stats.theta_b, theta), block)
    if use_exact:
        logdet, ok = out[0].T, out[1].T > 0
    else:
        logdet, ok = logdet_first_order(out, steps)
    return Proposal(delta, logdet, ok, jnp.asarray(True))
