"""Quasi-Newton variational Bayes (QNVB, Duersch, Section 4.4, Algorithm 3) as pure JAX functions.

QNVB fits ``q = N(mu, diag(sigma^2))`` by iterating the projective update of Section 4.2,
``mu <- mu - g / h``, ``sigma <- h^{-1/2}``, with ``g = E_q[grad L]`` and ``h = E_q[diag Hess L]``
from :func:`~ppl_loo.numerics.qnvb.approx.quadratic_approx` (Algorithm 2), made robust to noisy
losses by the safeguards of Algorithm 3 (notes section 5):

- running averages with effective counts (eqs. 8-11): ``n <- min(n + 1, tau)``,
  ``beta = (n - 1) / n``, so the first step uses ``g`` itself;
  ``gbar = EMA_{tau1}(g)``, ``sbar = EMA_{tau2}(g^2)`` and the RMS Hessian
  ``hbar = sqrt(EMA_{tau2}(h^2))`` (``hessian="rms"``, the paper's) or the clamped signed average
  ``hbar = max(EMA_{tau2}(h), h_min)`` (``hessian="clamp"``; then ``QNVBState.hbar2`` holds the
  signed average);
- the mean step, the more restrictive of Newton and Adam (eq. 13), in the division form
  ``delta = gbar / max(hbar, (sqrt(sbar) + eps) / lam)`` (notes, resolution 8);
- the clamped standard deviations (eq. 14),
  ``sigma <- max(sigma_min, max(s_min sigma, min(s_max sigma, min(sigma_max, (w hbar)^{-1/2}))))``;
- gradient consistency ``gbar <- gbar - hbar * delta``.

``w`` is the likelihood weight: with the full-batch loss ``L = -log p(D, theta)`` (log-Jacobian
included) use ``w = 1`` (or a tempering ``alpha``); with a minibatch mean loss use
``w = alpha n`` (notes section 7, loss convention).

The loss enters as ``loss_vg(theta, key) -> (L, grad L)``: the loss of this step (a full-batch
loss ignores ``key``, a minibatch loss draws its batch from it). :func:`init`, :func:`step` are
pure; :func:`run` scans :func:`step` under ``jax.jit``. Each step costs ``2 n_pairs`` loss-and-
gradient evaluations, counted in ``QNVBState.n_evals``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ppl_loo.numerics.qnvb.approx import quadratic_approx, stein_approx
from ppl_loo.numerics.qnvb.quadrature import hadamard_period, qmc_standard

__all__ = [
    "QUADRATURES",
    "QNVBConfig",
    "QNVBState",
    "StepInfo",
    "check_config",
    "gaussian_entropy",
    "init",
    "loss_from_logdensity",
    "run",
    "run_from",
    "step",
]

#: quadrature name -> QMC matching (None: the Hadamard sequence); "qmc" is QMC-2
QUADRATURES = {"hadamard": None, "mc": "mc", "qmc1": "mean", "qmc": "mean_var", "qmc2": "mean_var"}
HESSIANS = ("rms", "clamp")


class QNVBConfig(NamedTuple):
    """Hyper-parameters of Algorithm 3 (notes 5.3; defaults are the paper's / its code's).

    ``tau1``, ``tau2``: effective EMA lengths ``1 / (1 - beta)`` (beta 0.9, 0.999); ``eps``: Adam's
    stabilizer; ``lam``: the largest expected mean perturbation (Adam's learning rate);
    ``sigma_min``, ``sigma_max``: absolute bounds on ``sigma`` (``sigma`` starts at ``sigma_min``);
    ``s_min``, ``s_max``: the relative change of ``sigma`` per step; ``w``: the likelihood weight;
    ``n_pairs``: antithetic pairs per step (``2 n_pairs`` evaluations; a power of 2 for
    ``"hadamard"``); ``quadrature``: ``"hadamard"`` (Algorithm 1), ``"qmc"`` (= ``"qmc2"``,
    mean-and-variance matching), ``"qmc1"`` (mean matching) or ``"mc"``, the latter three with
    ``2 n_pairs`` fresh nodes per step and the Stein form of ``h``; ``hessian``: ``"rms"``
    (Algorithm 3) or ``"clamp"`` (signed EMA clamped at ``h_min``, Section 4.2).

    The paper's slow ``sigma`` warm-up (``s_max = 1.01``: at least ``ln(sigma*/sigma_min) /
    ln(s_max)`` steps, 694 for a factor 1000) suits long deep-learning runs; small Bayesian models
    want a larger ``sigma_min`` / ``s_max`` and a smaller ``tau2``.
    """

    tau1: float = 10.0
    tau2: float = 1000.0
    eps: float = 1e-8
    lam: float = 1e-3
    sigma_min: float = 1e-5
    sigma_max: float = 1e-3
    s_min: float = 0.99
    s_max: float = 1.01
    w: float = 1.0
    n_pairs: int = 2
    quadrature: str = "hadamard"
    hessian: str = "rms"
    h_min: float = 1e-12


class QNVBState(NamedTuple):
    """The variational parameters ``(mu, sigma)``, the running averages ``gbar``, ``sbar``,
    ``hbar2`` (``EMA(h^2)``, or the signed ``EMA(h)`` for ``hessian="clamp"``), the effective
    counts ``n1``, ``n2``, the Hadamard counter ``q`` (kept modulo the period), the PRNG key and the
    number of loss-and-gradient evaluations so far."""

    mu: object
    sigma: object
    gbar: object
    sbar: object
    hbar2: object
    n1: object
    n2: object
    q: object
    key: object
    n_evals: object


class StepInfo(NamedTuple):
    """Per-step diagnostics, at the ``q`` the step started from: ``loss``, the projected quadratic's
    value at ``mu`` (Algorithm 2's ``l``); ``elbo``, the estimate
    ``-w (l + h^T sigma^2 / 2) + sum log sigma + d/2 log(2 pi e)`` (notes 7, feature 4; the
    first term is ``-w E_q[L]`` at the nodes); ``grad_norm``, ``||g||``; ``n_evals``, the total
    evaluations after the step."""

    loss: object
    elbo: object
    grad_norm: object
    n_evals: object


def check_config(config: QNVBConfig) -> None:
    """Raise a ``ValueError`` naming the offending field of ``config``."""
    c = config
    if c.quadrature not in QUADRATURES:
        raise ValueError(f"QNVBConfig.quadrature={c.quadrature!r}: choose from {sorted(QUADRATURES)}.")
    if c.hessian not in HESSIANS:
        raise ValueError(f"QNVBConfig.hessian={c.hessian!r}: choose 'rms' (Algorithm 3) or 'clamp'.")
    n = int(c.n_pairs)
    if n < 1 or (c.quadrature == "hadamard" and n & (n - 1)):
        raise ValueError(f"QNVBConfig.n_pairs={c.n_pairs}: need >= 1, and a power of 2 for the Hadamard "
                         "sequence (aligned blocks, Theorem 3.3).")
    if not 0 < c.sigma_min <= c.sigma_max:
        raise ValueError(f"QNVBConfig: need 0 < sigma_min <= sigma_max, got {c.sigma_min}, {c.sigma_max}.")
    if not 0 < c.s_min <= 1.0 <= c.s_max:
        raise ValueError(f"QNVBConfig: need 0 < s_min <= 1 <= s_max, got {c.s_min}, {c.s_max}.")
    if not (c.tau1 >= 1 and c.tau2 >= 1 and c.lam > 0 and c.w > 0 and c.eps >= 0 and c.h_min > 0):
        raise ValueError("QNVBConfig: need tau1, tau2 >= 1 and lam, w, h_min > 0, eps >= 0; got "
                         f"{c.tau1}, {c.tau2}, {c.lam}, {c.w}, {c.h_min}, {c.eps}.")


def gaussian_entropy(sigma):
    """Entropy of ``N(mu, diag(sigma^2))``: ``sum log sigma + d/2 log(2 pi e)``."""
    return jnp.sum(jnp.log(sigma)) + 0.5 * sigma.shape[-1] * math.log(2.0 * math.pi * math.e)


def loss_from_logdensity(logdensity_and_grad):
    """``loss_vg(theta, key) = (-log p, -grad log p)``: the full-batch loss of a log density
    ``theta (d,) -> (log p, grad)`` (the key is ignored)."""

    def loss_vg(theta, key):
        lp, grad = logdensity_and_grad(theta)
        return -lp, -grad

    return loss_vg


def init(mu0, config: QNVBConfig, key) -> QNVBState:
    """Initial state (notes 5.3): ``mu = mu0``, ``sigma = sigma_min``, zero averages and counts."""
    check_config(config)
    mu = jnp.asarray(mu0)
    mu = mu.astype(jnp.result_type(mu.dtype, float))
    zeros = jnp.zeros_like(mu)
    count = jnp.zeros((), mu.dtype)
    return QNVBState(mu, jnp.full_like(mu, config.sigma_min), zeros, zeros, zeros, count, count,
                     jnp.zeros((), jnp.int32), key, jnp.zeros((), jnp.int32))


def _approx(loss_vg, state: QNVBState, config: QNVBConfig):
    """Algorithm 2 (Hadamard) or the Stein form at fresh MC / QMC nodes, for this step's loss."""
    key, k_loss, k_nodes = jax.random.split(state.key, 3)

    def vg(theta):
        return loss_vg(theta, k_loss)

    match = QUADRATURES[config.quadrature]
    if match is None:
        qa = quadratic_approx(vg, state.mu, state.sigma, state.q, config.n_pairs)
    else:
        x = qmc_standard(k_nodes, 2 * config.n_pairs, state.mu.shape[-1], None if match == "mc" else match,
                         state.mu.dtype)
        qa = stein_approx(vg, state.mu, state.sigma, x)
    return qa, key


def _averages(state: QNVBState, g, h, config: QNVBConfig):
    """Effective counts (eq. 11) and the running averages (eqs. 8-10); returns them and ``hbar``."""
    n1 = jnp.minimum(state.n1 + 1, config.tau1)
    n2 = jnp.minimum(state.n2 + 1, config.tau2)
    b1, b2 = (n1 - 1) / n1, (n2 - 1) / n2
    gbar = b1 * state.gbar + (1 - b1) * g
    sbar = b2 * state.sbar + (1 - b2) * g * g
    if config.hessian == "rms":
        hbar2 = b2 * state.hbar2 + (1 - b2) * h * h
        hbar = jnp.sqrt(hbar2)
    else:
        hbar2 = b2 * state.hbar2 + (1 - b2) * h
        hbar = jnp.maximum(hbar2, config.h_min)
    return n1, n2, gbar, sbar, hbar2, hbar


def step(state: QNVBState, loss_vg, config: QNVBConfig):
    """One QNVB step (Algorithm 3 with the safeguards of notes section 5).

    Parameters
    ----------
    state : QNVBState
    loss_vg : callable
        ``(theta (d,), key) -> (L, grad L)``, the loss of this step.
    config : QNVBConfig
        Static (a change recompiles).

    Returns
    -------
    (QNVBState, StepInfo)
    """
    c = config
    qa, key = _approx(loss_vg, state, c)
    n1, n2, gbar, sbar, hbar2, hbar = _averages(state, qa.g, qa.h, c)
    delta = gbar / jnp.maximum(hbar, (jnp.sqrt(sbar) + c.eps) / c.lam)  # eq. 13, division form
    mu = state.mu - delta
    tiny = jnp.finfo(state.mu.dtype).tiny
    target = jnp.minimum(c.sigma_max, (c.w * jnp.maximum(hbar, tiny)) ** -0.5)
    sigma = jnp.maximum(c.sigma_min, jnp.maximum(c.s_min * state.sigma, jnp.minimum(c.s_max * state.sigma, target)))
    gbar = gbar - hbar * delta  # gradient consistency
    q = (state.q + c.n_pairs) % hadamard_period(state.mu.shape[-1])
    n_evals = state.n_evals + qa.n_evals
    elbo = -c.w * (qa.l + 0.5 * jnp.sum(qa.h * state.sigma**2)) + gaussian_entropy(state.sigma)
    info = StepInfo(qa.l, elbo, jnp.linalg.norm(qa.g), n_evals)
    return QNVBState(mu, sigma, gbar, sbar, hbar2, n1, n2, q, key, n_evals), info


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _scan(state, loss_vg, config, steps):
    return jax.lax.scan(lambda s, _: step(s, loss_vg, config), state, None, length=steps)


def run_from(state: QNVBState, loss_vg, config: QNVBConfig, steps: int):
    """``steps`` QNVB steps from ``state`` (one ``lax.scan`` under ``jax.jit``).

    ``loss_vg``, ``config`` and ``steps`` are static: reuse the same function object to reuse the
    compilation. Returns ``(state, trace)`` with ``trace`` a :class:`StepInfo` of arrays ``(steps,)``.
    """
    check_config(config)
    return _scan(state, loss_vg, config, int(steps))


def run(loss_vg, mu0, config: QNVBConfig, steps: int, key):
    """QNVB from ``mu0`` (``sigma = sigma_min``): :func:`init` then ``steps`` steps.

    Parameters
    ----------
    loss_vg : callable
        ``(theta (d,), key) -> (L, grad L)``; see :func:`loss_from_logdensity` for a log density.
    mu0 : array, shape (d,)
    config : QNVBConfig
    steps : int
    key : PRNG key
        Drives the minibatches (through ``loss_vg``) and the MC / QMC nodes.

    Returns
    -------
    state : QNVBState
        ``state.mu``, ``state.sigma`` are the fit; ``state.n_evals`` the evaluations used.
    trace : StepInfo
        Per-step loss, ELBO estimate, gradient norm and cumulative evaluation count.
    """
    return run_from(init(mu0, config, key), loss_vg, config, steps)
