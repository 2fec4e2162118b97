"""Predictive variational inference (Lai & Yao 2024) as pure, jit-able JAX functions.

PVI picks ``q_phi`` to maximize a proper score of its posterior predictive on the data, with an
optional KL regularizer (Eq. 4). Following the implementer's notes (erratum 5) the optimizer
maximizes the per-observation average

    J(phi) = (1/n) [ sum_i S(q_phi^Y, y_i) - lam * r(phi) ],

with ``r = KL(q || prior)`` (Eq. 6) or ``r = KL(q || p(theta | y)) = -ELBO + const`` (Eq. 7), so
that the paper's ``lam`` keeps its meaning. Plain VI (the ELBO, ``score=None``) runs through the
same code. Everything is evaluated in the unconstrained space: the predictive score needs no
Jacobian, the prior and the log joint carry the log-Jacobian of the constraining transforms
(notes 2.4, erratum 13).

The model enters as :class:`Terms`, pure functions of a batch of unconstrained draws; the
variational family as a :class:`~ppl_loo.numerics.vi.families.Family`; the optimizer as an
``optax.GradientTransformation`` (:func:`ppl_loo.numerics.vi.optim.get_optimizer` builds one from a
name). In the BlackJAX style, :func:`init` makes a
:class:`PVIState`, :func:`build_step` a pure ``step(state, key, hyper) -> (state, info)`` and
:func:`build_runner` a jit-compiled scan over many steps. ``hyper`` (:class:`Hyper`) holds the
values that may change between runs without recompiling (``lam``, the learning-rate scale and
the rejection-sampling bounds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ppl_loo.numerics.vi.scores import (
    crps_pairs,
    log_score_reparam,
    quadratic_score,
    rejection_weights,
)

__all__ = [
    "ESTIMATORS",
    "REGULARIZERS",
    "Hyper",
    "PVIInfo",
    "PVIState",
    "Settings",
    "Terms",
    "build_objective",
    "build_runner",
    "build_step",
    "final_params",
    "init",
    "run_steps",
]

REGULARIZERS = (None, "prior", "posterior")
ESTIMATORS = ("reparam", "rejection")


class Terms(NamedTuple):
    """The model, as pure JAX functions of a batch of unconstrained draws ``theta`` ``(M, d)``.

    Attributes
    ----------
    n_obs : int
    loglik : callable or None
        ``theta -> (M, n)`` pointwise ``log p(y_i | theta_m)`` (log score, posterior regularizer).
    logp : callable or None
        ``theta -> (M,)`` unnormalized log posterior with the log-Jacobian (ELBO, Eq. 7).
    log_prior : callable or None
        ``theta -> (M,)`` log prior with the log-Jacobian (Eq. 6).
    probs : callable or None
        ``theta -> (M, n, I)`` category probabilities (quadratic score).
    simulate : callable or None
        ``(theta, key) -> (M, n)`` or ``(M, n, k)`` predictive draws, one per draw and observation,
        differentiable in ``theta`` (CRPS).
    y : array or None
        Observed outcomes ``(n,)`` or ``(n, k)`` (CRPS).
    y_index : int array or None
        Category index of each observation (quadratic score).
    vector : bool
        CRPS outcomes are vectors (energy score with the L2 norm).
    """

    n_obs: int
    loglik: Callable | None = None
    logp: Callable | None = None
    log_prior: Callable | None = None
    probs: Callable | None = None
    simulate: Callable | None = None
    y: object = None
    y_index: object = None
    vector: bool = False


class Settings(NamedTuple):
    """Static settings (a change recompiles).

    ``score``: ``"log"``, ``"crps"``, ``"quadratic"`` or ``None`` (plain VI: ``reg="posterior"``
    and ``lam = 1`` give ``J = ELBO / n``); ``reg``: ``None``, ``"prior"``, ``"posterior"``;
    ``estimator``: ``"reparam"`` (Table 1, (a)) or ``"rejection"`` (Appendix B) for the log score;
    ``draws``: ``M`` draws per step (CRPS: ``M / 2`` independent pairs); ``max_rounds``: cap on
    the fresh batches drawn for observations without an acceptance (erratum 7);
    ``quad_unbiased``: U-statistic for ``P(j)^2``.
    """

    score: str | None
    reg: str | None
    estimator: str = "reparam"
    draws: int = 100
    max_rounds: int = 50
    quad_unbiased: bool = True


class Hyper(NamedTuple):
    """Run-time values (traced): regularization weight ``lam``, learning-rate scale, log bounds
    ``log C_i`` of the rejection estimator, and the step from which the iterates are averaged."""

    lam: float = 0.0
    lr_scale: float = 1.0
    log_bound: object = 0.0
    avg_start: int = 2**30


class PVIState(NamedTuple):
    """Parameters, optimizer state, step count, and the running average of the iterates from
    ``hyper.avg_start`` on (Polyak-Ruppert averaging; ``n_avg`` iterates so far)."""

    params: object
    opt_state: object
    step: object
    avg: object
    n_avg: object


class PVIInfo(NamedTuple):
    """Per-step diagnostics: the objective ``J``, its score and regularizer parts (totals, not
    averages), whether the step was finite (a non-finite step leaves the parameters unchanged),
    and for the rejection estimator the observations dropped at the round cap and the number of
    bound violations."""

    objective: object
    score: object
    reg: object
    finite: object
    dropped: object
    violations: object


def init(params, optimizer) -> PVIState:
    """Initial state from a family's parameters and an ``optax.GradientTransformation``."""
    return PVIState(params, optimizer.init(params), jnp.asarray(0, dtype=jnp.int32), params,
                    jnp.asarray(0, dtype=jnp.int32))


def final_params(state: PVIState):
    """The averaged iterates when averaging ran, else the last iterate."""
    use_avg = state.n_avg > 0
    return jax.tree_util.tree_map(lambda a, p: jnp.where(use_avg, a, p), state.avg, state.params)


def check_settings(settings: Settings, terms: Terms):
    """Raise a ``ValueError`` naming what is missing for this score / regularizer / estimator."""
    s = settings
    if s.score not in (None, "log", "crps", "quadratic"):
        raise ValueError(f"score={s.score!r}: choose 'log', 'crps' or 'quadratic' (or None for plain VI).")
    if s.reg not in REGULARIZERS:
        raise ValueError(f"reg={s.reg!r}: choose None, 'prior' or 'posterior'.")
    if s.estimator not in ESTIMATORS:
        raise ValueError(f"estimator={s.estimator!r}: choose from {ESTIMATORS}.")
    if s.estimator == "rejection" and s.score != "log":
        raise ValueError("the rejection-sampling estimator (Appendix B) is for the log score only.")
    if int(s.draws) < 1:
        raise ValueError(f"draws_per_step={s.draws}: need at least 1 draw per step.")
    if s.score == "crps" and int(s.draws) % 2:
        raise ValueError(f"draws_per_step={s.draws}: the CRPS estimator pairs draws; use an even number.")
    need = {"log": "loglik", "quadratic": "probs", "crps": "simulate"}.get(s.score)
    if need and getattr(terms, need) is None:
        raise ValueError(f"score={s.score!r} needs the model's {need}, which is not available.")
    if s.reg == "prior" and terms.log_prior is None:
        raise ValueError("reg='prior' needs the model's log prior density, which is not available.")
    if s.reg == "posterior" and terms.logp is None:
        raise ValueError("reg='posterior' needs the model's log joint density, which is not available.")


def _entropy(family, params, log_q_draws):
    if family.entropy is not None:
        return family.entropy(params)
    return -jnp.mean(log_q_draws)


def _regularizer(family, terms, settings, params, theta, log_q_draws):
    """``r(phi)``: ``KL(q || prior)`` or ``-ELBO`` (Eq. 6, 7), reparameterized Monte Carlo."""
    if settings.reg is None:
        return jnp.asarray(0.0)
    ent = _entropy(family, params, log_q_draws)
    if settings.reg == "prior":
        return -ent - jnp.mean(terms.log_prior(theta))
    return -ent - jnp.mean(terms.logp(theta))


def _score_total(terms, settings, theta, key):
    """``sum_i S_i`` estimated at the draws (differentiable through ``theta``)."""
    if settings.score is None:
        return jnp.asarray(0.0)
    if settings.score == "log":
        return jnp.sum(log_score_reparam(terms.loglik(theta)))
    if settings.score == "quadratic":
        return jnp.sum(quadratic_score(terms.probs(theta), terms.y_index, settings.quad_unbiased))
    y_sim = terms.simulate(theta, key)
    return jnp.sum(crps_pairs(y_sim, jnp.asarray(terms.y), vector=terms.vector))


def build_objective(family, terms: Terms, settings: Settings) -> Callable:
    """``objective(params, key, hyper) -> (J, (score_total, reg))``, differentiable in ``params``.

    One call draws ``M`` base points ``eps``, maps them through the family (reparameterization)
    and evaluates the score estimator and the regularizer at the same draws.
    """
    check_settings(settings, terms)
    n = int(terms.n_obs)
    M = int(settings.draws)

    def objective(params, key, hyper):
        k_eps, k_sim = jax.random.split(key)
        d = params["loc"].shape[-1]
        eps = jax.random.normal(k_eps, (M, d))
        theta, log_q_draws = family.sample_and_log_q(params, eps)
        score = _score_total(terms, settings, theta, k_sim)
        reg = _regularizer(family, terms, settings, params, theta, log_q_draws)
        lam = hyper.lam if settings.score is not None else 1.0
        return (score - lam * reg) / n, (score, reg)

    return objective


def _rejection_value_and_grad(family, terms, settings):
    """Value of ``J`` (estimator (a)) and its gradient with the rejection-sampling score part."""
    n = int(terms.n_obs)
    M = int(settings.draws)
    max_rounds = int(settings.max_rounds)
    reg_only = settings._replace(score=None)

    def reg_objective(params, key, hyper):
        d = params["loc"].shape[-1]
        eps = jax.random.normal(jax.random.fold_in(key, 7), (M, d))
        theta, lq = family.sample_and_log_q(params, eps)
        return _regularizer(family, terms, reg_only, params, theta, lq)

    def one_round(params, key, need, log_bound):
        k1, k2 = jax.random.split(key)
        d = params["loc"].shape[-1]
        theta = jax.lax.stop_gradient(family.sample(params, jax.random.normal(k1, (M, d))))
        ll = terms.loglik(theta)
        log_u = jnp.log(jax.random.uniform(k2, (M,), minval=1e-300, maxval=1.0))
        ll_need = jnp.where(need[None, :], ll, -jnp.inf)
        w, acc, _ = rejection_weights(ll_need, log_u, log_bound)
        viol = jnp.sum(ll - jnp.broadcast_to(log_bound, ll.shape[1:])[None, :] > 1e-10)
        grad = jax.grad(lambda p: jnp.sum(w * jax.vmap(lambda t: family.log_q(p, t))(theta)))(params)
        return grad, acc & need, viol, ll

    def value_and_grad(params, key, hyper):
        log_bound = jnp.broadcast_to(jnp.asarray(hyper.log_bound, dtype=jnp.float64), (n,))
        k0, k_loop, k_reg = jax.random.split(key, 3)
        need0 = jnp.ones(n, bool)
        g0, acc0, viol0, ll0 = one_round(params, k0, need0, log_bound)
        score_value = jnp.sum(log_score_reparam(ll0))

        def cond(carry):
            _, need, r, _, _ = carry
            return jnp.any(need) & (r < max_rounds)

        def body(carry):
            g, need, r, viol, k = carry
            k, sub = jax.random.split(k)
            gr, acc, v, _ = one_round(params, sub, need, log_bound)
            g = jax.tree_util.tree_map(jnp.add, g, gr)
            return g, need & ~acc, r + 1, viol + v, k

        g, need, _, viol, _ = jax.lax.while_loop(cond, body, (g0, need0 & ~acc0, 1, viol0, k_loop))
        reg, g_reg = jax.value_and_grad(reg_objective)(params, k_reg, hyper)
        lam = hyper.lam
        grad = jax.tree_util.tree_map(lambda a, b: (a - lam * b) / n, g, g_reg)
        value = (score_value - lam * reg) / n
        return value, grad, (score_value, reg, jnp.sum(need), viol)

    return value_and_grad


def _where(cond, new, old):
    """``new`` where ``cond`` else ``old``, leaf by leaf (a pytree such as an optax state)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(cond, a, b), new, old)


def _average(state: PVIState, params, take):
    """Running (Polyak-Ruppert) average of the iterates: ``avg += (params - avg) / n_avg`` when
    ``take``; the average is the iterate itself until the first one is taken."""
    n_avg = state.n_avg + take.astype(state.n_avg.dtype)
    avg = jax.tree_util.tree_map(
        lambda a, p: jnp.where(take, a + (p - a) / jnp.maximum(n_avg, 1), a), state.avg, params)
    return _where(n_avg > 0, avg, params), n_avg


def build_step(family, terms: Terms, settings: Settings, optimizer) -> Callable:
    """Pure ``step(state, key, hyper) -> (state, PVIInfo)``: one stochastic-gradient ascent step.

    ``optimizer`` is an ``optax.GradientTransformation``; it is given the gradient of ``-J`` and
    its updates are multiplied by ``hyper.lr_scale``. A step whose objective or gradient is not
    finite leaves the parameters and the optimizer state (its step count included) unchanged
    (``info.finite`` is ``False``).
    """
    check_settings(settings, terms)
    if settings.estimator == "rejection":
        vg = _rejection_value_and_grad(family, terms, settings)
    else:
        objective = build_objective(family, terms, settings)
        _vg = jax.value_and_grad(objective, has_aux=True)

        def vg(params, key, hyper):
            (value, (score, reg)), grad = _vg(params, key, hyper)
            return value, grad, (score, reg, jnp.asarray(0), jnp.asarray(0))

    def step(state: PVIState, key, hyper: Hyper):
        value, grad, (score, reg, dropped, viol) = vg(state.params, key, hyper)
        finite = jnp.isfinite(value) & jnp.all(
            jnp.asarray([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grad)]))
        # optax minimizes: it gets the gradient of -J (zero at a non-finite step)
        loss_grad = jax.tree_util.tree_map(lambda g: jnp.where(finite, -g, 0.0), grad)
        updates, opt_state = optimizer.update(loss_grad, state.opt_state, state.params)
        updates = jax.tree_util.tree_map(lambda u: hyper.lr_scale * u, updates)
        params = _where(finite, optax.apply_updates(state.params, updates), state.params)
        opt_state = _where(finite, opt_state, state.opt_state)
        info = PVIInfo(value, score, reg, finite, dropped, viol)
        avg, n_avg = _average(state, params, finite & (state.step >= hyper.avg_start))
        return PVIState(params, opt_state, state.step + 1, avg, n_avg), info

    return step


def build_runner(step: Callable) -> Callable:
    """``run(state, keys, hyper) -> (state, PVIInfo of arrays)``: jit-compiled ``lax.scan`` of ``step``
    over the rows of ``keys`` (one key per step)."""

    @jax.jit
    def run(state, keys, hyper):
        return jax.lax.scan(lambda s, k: step(s, k, hyper), state, keys)

    return run


def run_steps(runner: Callable, state: PVIState, key, hyper: Hyper, num_steps: int, chunk: int = 500,
              progress: Callable | None = None):
    """Run ``num_steps`` steps in chunks of at most ``chunk`` steps (one compiled scan per length).

    Returns the final state and the per-step :class:`PVIInfo` as NumPy arrays. ``progress(k)``
    is called after every chunk with the number of steps done. The keys of the steps depend on
    ``key`` and ``num_steps`` only, not on the chunking.
    """
    num_steps = int(num_steps)
    keys = jax.random.split(key, num_steps)
    n_chunks = -(-num_steps // max(1, int(chunk)))
    size = -(-num_steps // n_chunks)
    infos = []
    done = 0
    while done < num_steps:
        stop = min(done + size, num_steps)
        state, info = runner(state, keys[done:stop], hyper)
        infos.append(jax.tree_util.tree_map(np.asarray, info))
        done = stop
        if progress is not None:
            progress(done)
    info = PVIInfo(*(np.concatenate([getattr(i, f) for i in infos]) for f in PVIInfo._fields))
    return state, info
