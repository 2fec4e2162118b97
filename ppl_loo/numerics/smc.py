"""Tempered SMC from the posterior to each LOO posterior: an independent estimate of ``elpd_i``.

For observation ``i`` the sequence of targets is

.. math::  \\pi_\\lambda(\\theta) \\propto p(\\theta \\mid y)\\, p(y_i \\mid \\theta)^{-\\lambda},
           \\qquad 0 = \\lambda_0 < \\lambda_1 < \\dots < \\lambda_T = 1,            (1)

so ``pi_0`` is the posterior (the particles start as the posterior draws) and ``pi_1`` the LOO
posterior ``p(theta | y_{-i})``. The ratio of normalizing constants is

.. math::  \\log \\frac{Z_1}{Z_0} = \\log E_{post}\\big[1 / p(y_i \\mid \\theta)\\big] = -\\mathrm{elpd}_i
           = \\sum_{t=1}^{T} \\log \\sum_s W_s^{(t-1)}\\, p(y_i \\mid \\theta_s)^{-(\\lambda_t - \\lambda_{t-1})},   (2)

with ``W^(t-1)`` the normalized weights of the particles targeting ``pi_{lambda_{t-1}}``. Each
``lambda_t`` is chosen by bisection so that the ESS of the incremental weights in (2) is
``target_ess`` times the number of particles; then the particles are resampled (systematic) and
moved by ``num_mcmc_steps`` MCMC steps leaving ``pi_{lambda}`` invariant. The moves reach parts of
the LOO posterior that no deterministic map of the posterior draws reaches.

Each target is *wider* than the last, so the incremental weights ``p(y_i|theta)^(-delta)`` are
unbounded and, for too long a step, of infinite variance, which the sample ESS does not see. Hence
the default ``target_ess = 0.8`` rather than the usual 0.5: on a leverage-0.45 outlier (tests,
500 particles per population) the spread of the population estimates was 0.24 nats, with
errors up to 1 nat, at 0.5, and 0.08 nats at 0.8 (0.07 at 0.9), for about twice the steps.

What BlackJAX does and what is written here
-------------------------------------------
One tempering step is BlackJAX's adaptive tempered SMC kernel
(``blackjax.smc.adaptive_tempered.build_kernel``, >= 1.7.1: earlier releases had the sign error of
blackjax#914 in the ESS solver, which stalls exactly this negative-exponent target) with
``logprior_fn = logp`` and ``loglikelihood_fn = -loglik_i``: BlackJAX solves for ``lambda_t``,
resamples, moves and reweights, and its ``info.log_likelihood_increment`` is the ``t``-th term of
(2). The inner kernel is BlackJAX's HMC (``kernel="mala"`` is HMC with one leapfrog step, which is
exactly MALA with a diagonal mass matrix; BlackJAX's own MALA has no mass matrix). Written here:

- the driver loop (``lax.while_loop`` to ``lambda = 1``, capped at ``max_steps``), because the
  inner kernel is retuned after every tempering step from the *previous* step size, which
  ``blackjax.inner_kernel_tuning`` cannot do (its update function never sees the old parameters):
  ``log eps <- log eps + 2 (acc - target_accept)`` with ``acc`` the mean acceptance of the last
  move, and inverse mass matrix = the particles' weighted variance (floored at 1e-8 of the
  posterior's, so that a collapsed coordinate never freezes the moves);
- vectorization over observations and populations (``jax.vmap`` of the while loop: it runs until
  every pair reached ``lambda = 1``; finished pairs are frozen), in batches (``lax.map``);
- the combination of ``K`` independent populations and its Monte Carlo SE (below).

Monte Carlo SE
--------------
The ``S`` draws are split into ``K = populations`` contiguous blocks of ``S // K`` (chain-major
draws: with ``K`` a multiple of the number of chains, each block lies within one chain, and blocks
of different chains are independent; the last ``S mod K`` draws are unused). Each block runs its
own SMC and gives ``log Z_k``. SMC's ``Z_k`` is unbiased for ``Z``, so the estimate is
``elpd = -log mean_k Z_k`` (logmeanexp) and the SE is the delta-method one,
``sd_k(Z_k / Zbar) / sqrt(K)`` (ddof 1). That SE is itself noisy (``K - 1`` degrees of freedom, and
the ``Z_k`` are skewed): with ``K = 4`` it was at times 5-10 times too small (errors of 8-12 SEs on
the 25 observations of the tests, in 3 of 6 keys); with ``K = 8`` (default; same total particles,
so the same accuracy) every error stayed below 2.7 SEs in 6 keys. Read it as an order of
magnitude, and the ``K`` estimates (``population_elpd``) for their agreement.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.mcmc import hmc
from blackjax.smc import adaptive_tempered, resampling
from blackjax.smc.tempered import TemperedSMCState
from jax.scipy.special import logsumexp

from ppl_loo.jax_settings import uses_x64
from ppl_loo.program_cache import exported_jit

__all__ = ["SMCResult", "smc_loo"]

#: (leapfrog steps, target acceptance) of the inner kernels
_KERNELS = {"hmc": (5, 0.8), "mala": (1, 0.6)}


class SMCResult(NamedTuple):
    """Per observation (leading axis ``m = len(obs)``) results of :func:`smc_loo`.

    elpd : (m,) ``-logmeanexp_k log Z_k``, eq. (2) combined over populations.
    mcse : (m,) between-population Monte Carlo SE of ``elpd`` (delta method; noisy for small K).
    population_elpd : (m, K) the estimate of each independent population, ``-log Z_k``.
    n_steps : (m,) tempering steps taken (largest over the populations).
    reached : (m,) bool, every population reached ``lambda = 1`` within ``max_steps``.
    acceptance : (m,) mean acceptance rate of the MCMC moves (over steps and populations).

    The final particles are not returned (``m * S * d`` numbers).
    """

    elpd: np.ndarray
    mcse: np.ndarray
    population_elpd: np.ndarray
    n_steps: np.ndarray
    reached: np.ndarray
    acceptance: np.ndarray


class _Carry(NamedTuple):
    state: TemperedSMCState
    key: jax.Array
    log_eps: jax.Array
    inv_mass: jax.Array
    log_z: jax.Array
    n_steps: jax.Array
    acc_sum: jax.Array


def _weighted_var(x, w):
    mean = w @ x
    return w @ (x - mean) ** 2


def _smc_one(logp, loglik_i, i, key, particles, *, target_ess, num_mcmc_steps, n_leapfrog,
             target_accept, max_steps, step_size):
    """One population's adaptive tempered SMC for observation ``i``: ``(log Z_1/Z_0, steps, lam, acc)``."""
    step_fn = partial(hmc.build_kernel(), num_integration_steps=n_leapfrog)
    neg_ll = lambda th: -loglik_i(th, i)  # noqa: E731
    kernel = adaptive_tempered.build_kernel(logp, neg_ll, step_fn, hmc.init, resampling.systematic, target_ess)
    n, d = particles.shape
    var0 = jnp.var(particles, axis=0)
    floor = 1e-8 * var0 + jnp.finfo(particles.dtype).tiny

    def cond(c):
        return (c.state.tempering_param < 1.0 - 1e-9) & (c.n_steps < max_steps)

    def body(c):
        key, sub = jax.random.split(c.key)
        params = {"step_size": jnp.exp(c.log_eps)[None], "inverse_mass_matrix": c.inv_mass[None]}
        state, info = kernel(sub, c.state, num_mcmc_steps, params)
        acc = jnp.mean(info.update_info.acceptance_rate)
        acc = jnp.where(jnp.isfinite(acc), acc, 0.0)
        return _Carry(state, key, c.log_eps + 2.0 * (acc - target_accept),
                      jnp.maximum(_weighted_var(state.particles, state.weights), floor),
                      c.log_z + info.log_likelihood_increment, c.n_steps + 1, c.acc_sum + acc)

    zero = jnp.zeros((), particles.dtype)
    state0 = TemperedSMCState(particles, jnp.full(n, 1.0 / n, particles.dtype), zero)
    log_eps0 = jnp.log(jnp.asarray(step_size if step_size is not None else d ** -0.25, particles.dtype))
    c = jax.lax.while_loop(cond, body, _Carry(state0, key, log_eps0, var0, zero,
                                              jnp.zeros((), jnp.int32), zero))
    return c.log_z, c.n_steps, c.state.tempering_param, c.acc_sum / jnp.maximum(c.n_steps, 1)


@uses_x64
def smc_loo(logp: Callable, loglik_i: Callable, theta0, obs, key, *, populations: int = 8,
            target_ess: float = 0.8, num_mcmc_steps: int = 10, kernel: str = "hmc",
            max_steps: int = 100, step_size: float | None = None, num_integration_steps: int | None = None,
            target_accept: float | None = None, batch_size: int = 8, program_key=None,
            store=None) -> SMCResult:
    """Adaptive tempered SMC estimate of ``elpd_i`` (eq. 2) for each observation in ``obs``.

    Parameters
    ----------
    logp : callable
        ``logp(theta (d,)) -> scalar``, the unnormalized log posterior (JAX-differentiable).
    loglik_i : callable
        ``loglik_i(theta (d,), i) -> scalar``, the log-likelihood of observation ``i`` (a traced int).
    theta0 : array_like, shape (S, d)
        Posterior draws, chain-major; split into ``populations`` contiguous blocks.
    obs : array_like of int, shape (m,)
        Observation indices.
    key : jax.random key
        Every observation's randomness is ``fold_in(key, obs[j])``: results do not depend on batching.
    populations : int
        ``K >= 2`` independent SMC runs per observation (contiguous blocks of ``theta0``), for the SE.
    target_ess : float
        Fraction of the particles kept as the ESS of each step's incremental weights, in (0, 1);
        higher is safer and slower (module docstring).
    num_mcmc_steps : int
        MCMC steps per tempering step.
    kernel : {"hmc", "mala"}
        HMC (5 leapfrog steps, target acceptance 0.8) or MALA (one leapfrog step, 0.6); both with a
        diagonal mass matrix from the particles.
    max_steps : int
        Cap on the tempering steps; ``reached`` says whether ``lambda = 1`` was reached.
    step_size, num_integration_steps, target_accept : optional
        Initial step size (default ``d ** -0.25``, in units of the mass matrix) and overrides of
        the kernel's defaults.
    batch_size : int
        Observations vmapped together (memory ~ ``batch_size * S * d``).
    program_key : str, optional
        A digest that determines ``logp`` and ``loglik_i`` (:func:`ppl_loo.model.fingerprint.model_fingerprint`):
        the traced program is then kept on disk for later processes (:func:`ppl_loo.program_cache.exported_jit`).
    store : callable, optional
        Where that program is kept in this process: ``store(name, key, build)`` (``Model.compiled``; by default,
        for this call only).

    Returns
    -------
    SMCResult
    """
    if kernel not in _KERNELS:
        raise ValueError(f"kernel={kernel!r}: expected one of {sorted(_KERNELS)}")
    theta0 = jnp.asarray(theta0, jnp.float64)
    obs = jnp.atleast_1d(jnp.asarray(obs))
    if theta0.ndim != 2:
        raise ValueError(f"theta0 must have shape (S, d) (draws, parameters); got {theta0.shape}")
    if not bool(jnp.all(jnp.isfinite(theta0))):
        raise ValueError("theta0 has non-finite values: pass finite posterior draws")
    if not jnp.issubdtype(obs.dtype, jnp.integer) or obs.ndim != 1:
        raise ValueError(f"obs must be a 1-d array of integer indices; got dtype {obs.dtype}, shape {obs.shape}")
    K = int(populations)
    n_part = theta0.shape[0] // max(K, 1)
    if K < 2 or n_part < 2:
        raise ValueError(f"populations={populations} with S={theta0.shape[0]} draws: need K >= 2 and S // K >= 2")
    if not 0.0 < target_ess < 1.0:
        raise ValueError(f"target_ess={target_ess}: must lie in (0, 1)")
    if obs.shape[0] == 0:
        empty = np.zeros(0)
        return SMCResult(empty, empty, np.zeros((0, K)), np.zeros(0, int), np.zeros(0, bool), empty)
    n_leap, acc_default = _KERNELS[kernel]
    cfg = (("target_ess", float(target_ess)), ("num_mcmc_steps", int(num_mcmc_steps)),
           ("n_leapfrog", int(num_integration_steps or n_leap)), ("target_accept", float(target_accept or acc_default)),
           ("max_steps", int(max_steps)), ("step_size", None if step_size is None else float(step_size)))
    pops = theta0[: K * n_part].reshape(K, n_part, theta0.shape[1])
    if program_key is not None:
        build = partial(exported_jit, partial(_run_body, logp, loglik_i, cfg, batch_size=int(batch_size)), "smc",
                        (program_key, cfg, int(batch_size)))
        program = build() if store is None else store("smc", (program_key, cfg, int(batch_size)), build)
        out = program(pops, obs, key)
    else:
        fns = tuple(f if _hashable(f) else (lambda *a, f=f: f(*a)) for f in (logp, loglik_i))  # jit static arguments
        out = _run(*fns, cfg, pops, obs, key, int(batch_size))
    log_z, n_steps, lam, acc = (np.asarray(a) for a in out)  # each (m, K)
    log_zbar = logsumexp(log_z, axis=1) - np.log(K)
    rel = np.exp(log_z - log_zbar[:, None])
    return SMCResult(elpd=-np.asarray(log_zbar), mcse=rel.std(axis=1, ddof=1) / np.sqrt(K),
                     population_elpd=-log_z, n_steps=n_steps.max(axis=1),
                     reached=(lam >= 1.0 - 1e-9).all(axis=1) & np.isfinite(log_z).all(axis=1),
                     acceptance=acc.mean(axis=1))


def _hashable(f):
    try:
        hash(f)
    except TypeError:  # a bound method of an unhashable object: wrapped (compiled anew on every call)
        return False
    return True


@partial(jax.jit, static_argnums=(0, 1, 2, 6))
def _run(logp, loglik_i, cfg, pops, obs, key, batch_size):
    """:func:`_run_body` jit-compiled for these functions and settings."""
    return _run_body(logp, loglik_i, cfg, pops, obs, key, batch_size)


def _run_body(logp, loglik_i, cfg, pops, obs, key, batch_size):
    """:func:`_smc_one` (settings ``cfg``) on every (observation, population) pair: one ``vmap`` over
    ``batch_size`` observations times ``K`` populations, the batches in ``lax.map`` (``obs`` padded to
    a multiple of ``batch_size``: one compiled body, reused for the same functions and settings).
    Outputs have shape ``(m, K)``."""
    run = partial(_smc_one, logp, loglik_i, **dict(cfg))
    m, K = obs.shape[0], pops.shape[0]
    b = min(batch_size, m)
    padded = jnp.concatenate([obs, jnp.full(-m % b, obs[-1], obs.dtype)])
    keys = jax.vmap(lambda i: jax.random.split(jax.random.fold_in(key, i), K))(padded)
    pairs = (jnp.repeat(padded, K), jnp.tile(jnp.arange(K), padded.shape[0]), keys.reshape(-1, *keys.shape[2:]))
    batches = jax.tree.map(lambda a: a.reshape(-1, b * K, *a.shape[1:]), pairs)
    out = jax.lax.map(jax.vmap(lambda t: run(t[0], t[2], pops[t[1]])), batches)
    return jax.tree.map(lambda a: a.reshape(-1, K)[:m], out)
