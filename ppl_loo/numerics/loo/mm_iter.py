"""Iterated moment matching, ``mm_iter`` (this project; cf. Paananen et al. 2021, section 3).

Each iteration re-weights the current images ``phi = a + r * theta`` towards the LOO posterior
(Eq. 10, exact posterior ratio, PSIS-smoothed) and maps the draws once more so that the images'
mean and componentwise spread match the weighted ones (the variance about the unweighted mean, as
PMM2). The composition stays a diagonal affine map with exact constant Jacobian ``prod r``. Every
iterate is scored as the deterministic mixture ``(q + T#q) / 2`` with the draws' distribution
``q`` (see :func:`ppl_loo.numerics.loo.weights.raw_weights`): the images estimate the LOO
normalizer and the draws the elpd numerator.
"""


from functools import partial

import jax
import jax.numpy as jnp

from ppl_loo.numerics.loo.context import SearchContext, embed, line
from ppl_loo.numerics.loo.weights import finite_or_neg_inf
from ppl_loo.numerics.psis import psislw
from ppl_loo.numerics.transforms import DiagAffine, dense

__all__ = ["mm_iter_states", "mm_iter_candidates", "mm_iter_pooled", "mm_iter_step"]


def mm_iter_pooled(sc: SearchContext, i, ll0, a, r):
    """The map ``phi = a + r theta``: its plain log weights ``(S,)`` (Eq. 10/13, for the next
    iteration) and the mixture's pooled log weights and log-likelihoods ``(2S,)``."""
    theta, log_q0 = sc.theta, sc.log_q0
    one = jnp.ones((1,), dtype=theta.dtype)
    delta = DiagAffine(a, r - 1.0)  # phi = a + r * theta
    back = DiagAffine(-a / r, 1.0 / r - 1.0)  # T^-1(theta) - theta
    logdet = jnp.sum(jnp.log(r))
    lp, ll = (z[0] for z in line(sc, delta, one, i))
    lq_phi = lp if sc.posterior_draws else jax.vmap(sc.log_q_fn)(theta + dense(embed(sc, delta), theta))
    lq_inv = line(sc, back, one, i)[0][0] if sc.posterior_draws else jax.vmap(sc.log_q_fn)(
        theta + dense(embed(sc, back), theta))
    log_eta = logdet + lp - ll - log_q0
    log_qmix_phi = jnp.logaddexp(lq_phi, log_q0 - logdet)
    log_qmix_th = jnp.logaddexp(log_q0, lq_inv - logdet)
    log_w = jnp.concatenate([sc.logp0 - ll0 - log_qmix_th, lp - ll - log_qmix_phi])
    return finite_or_neg_inf(log_eta), finite_or_neg_inf(log_w), jnp.concatenate([ll0, ll])


def mm_iter_step(sc: SearchContext, i, ll0, var0, carry, _):
    """One iteration (a ``jax.lax.scan`` body): carry ``(a, r, log_eta)``, output ``(a, r, log_w, ll_pool)``."""
    # moments of the images phi = a + r theta in closed form from those of the draws:
    # mean a + r m, variance r^2 v, weighted mean a + r (m + w.z), weighted variance about
    # the plain mean r^2 (w.z^2), with z = theta - m (never forming phi)
    st = sc.stats
    a, r, log_eta = carry
    lw, _ = psislw(log_eta, sc.cfg.r_eff)
    w = jnp.exp(lw)
    wz, wz2 = w @ st.centred, w @ st.centred_sq
    scale = jnp.where(var0 > 0, jnp.sqrt(wz2 / jnp.where(var0 > 0, var0, 1.0)), 1.0)
    a_new = a + r * (st.mean_b + wz) - scale * r * st.mean_b
    r_new = scale * r
    log_eta_new, log_w, ll_pool = mm_iter_pooled(sc, i, ll0, a_new, r_new)
    return (a_new, r_new, log_eta_new), (a_new, r_new, log_w, ll_pool)


def mm_iter_states(sc: SearchContext, i, ll0, n_iter):
    """The maps ``(a_k, r_k)`` of iterations ``1..n_iter`` and their pooled log weights and
    log-likelihoods ``(n_iter, 2S)``."""
    logp0, log_q0 = sc.logp0, sc.log_q0
    var0 = jnp.mean(sc.stats.centred_sq, axis=0)  # componentwise variance of the draws (ddof 0)
    d_b = sc.stats.theta_b.shape[1]
    a0, r0 = jnp.zeros(d_b), jnp.ones(d_b)
    log_eta0 = jnp.where(jnp.isfinite(logp0 - ll0 - log_q0), -ll0 + logp0 - log_q0, -jnp.inf)
    body = partial(mm_iter_step, sc, i, ll0, var0)
    _, (A, R, log_w, ll_pool) = jax.lax.scan(body, (a0, r0, log_eta0), None, length=n_iter)
    return A, R, log_w, ll_pool


def mm_iter_candidates(sc: SearchContext, i, ll0, steps):
    """``(log_w, ll_pool, ok, n_bad)`` of the ``mm_iter`` candidates (one per iteration count)."""
    T, S = steps.shape[0], sc.theta.shape[0]
    if sc.posterior_draws or sc.log_q_fn is not None:
        _, R, log_w, ll = mm_iter_states(sc, i, ll0, T)
        ok = jnp.all(R > 0, axis=1) & jnp.all(jnp.isfinite(R), axis=1)
    else:  # the mixture needs q away from the draws
        log_w, ll, ok = jnp.full((T, 2 * S), -jnp.inf), jnp.zeros((T, 2 * S)), jnp.zeros((T,), bool)
    return log_w, ll, ok, jnp.zeros((T,), jnp.int64)
