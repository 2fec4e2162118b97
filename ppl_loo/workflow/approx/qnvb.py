"""``ppl_loo.qnvb``: quasi-Newton variational Bayes (Duersch, Algorithm 3), DataTree out.

A mean-field Gaussian ``q = N(mu, diag(sigma^2))`` on the unconstrained parameters, fitted by the
projective integral updates of :mod:`ppl_loo.numerics.qnvb` (Hadamard cross-polytope quadrature,
Algorithm 1; gradient and Hessian-diagonal extraction, Algorithm 2; the safeguarded step,
Algorithm 3, under ``lax.scan``). The loss is the negative log joint (log-Jacobian included), on
all observations or, with ``minibatch=B``, the unbiased estimate ``-(n/B) sum_{c in batch} log p(y_c |
theta) - log p(theta)`` (then ``w = 1`` on this total scale: the notes' per-case mean loss with
``w = n`` gives the same steps). ``pl.loo`` on the result uses ``q`` (Eq. 13) and adds the projective
LOO proposal (notes, section 7, feature 7).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics import gaussian
from ppl_loo.numerics.qnvb import QNVBConfig, run
from ppl_loo.workflow.approx.approx_tree import (
    approximation_tree,
    check_draws,
    check_input_tree,
    fit_key,
    gaussian_draws,
    initial_point,
)
from ppl_loo.workflow.options import resolve_options

__all__ = ["qnvb", "QNVBOptions"]

QUADRATURES = ("hadamard", "qmc", "mc")


@dataclass(frozen=True)
class QNVBOptions:
    """How :func:`ppl_loo.qnvb` runs Algorithm 3: its steps, start, quadrature and safeguards.

    Parameters
    ----------
    steps : int
        Iterations of Algorithm 3.
    init : array, optional
        Starting mean in the unconstrained space (default: small random values).
    n_pairs : int
        Antithetic pairs per step (``2 n_pairs`` gradient evaluations; a power of 2 for Hadamard).
    quadrature : {"hadamard", "qmc", "mc"}
        Hadamard cross-polytope nodes (Algorithm 1), mean-and-variance-matched QMC, or plain Monte Carlo.
    minibatch : int, optional
        Observations per step (default: all).
    sigma_min, sigma_max : float
        Bounds of the standard deviations (eq. 14); ``sigma`` starts at ``sigma_min`` and changes by at
        most the factors ``s_min`` / ``s_max`` per step, so reaching ``sigma`` takes at least
        ``log(sigma / sigma_min) / log(s_max)`` steps (121 from 1e-5 to 1 at ``s_max = 1.1``).
    lam : float
        The largest expected mean step in low-curvature coordinates (eq. 13, Adam's ``lambda``).
    s_min, s_max, tau1, tau2 : float
        The relative change of ``sigma`` allowed per step and the time constants of the running averages
        (eq. 8-11). The paper's values (0.99, 1.01, 10, 1000) are for deep networks trained over many
        epochs; the defaults here (0.9, 1.1, 10, 100) let a Bayesian model's ``sigma`` warm up in a few
        hundred steps (``benchmarks/qnvb.py``).
    hessian : {"rms", "clamp"}
        RMS-averaged Hessian diagonal (the paper's Algorithm 3) or a signed average clamped at ``h_min``.
    """

    steps: int = 3000
    init: Any = None
    n_pairs: int = 2
    quadrature: str = "hadamard"
    minibatch: int | None = None
    sigma_min: float = 1e-5
    sigma_max: float = 10.0
    lam: float = 0.1
    s_min: float = 0.9
    s_max: float = 1.1
    tau1: float = 10
    tau2: float = 100
    hessian: str = "rms"


def _check_args(opt, draws):
    n_pairs, quadrature, steps, minibatch = opt.n_pairs, opt.quadrature, opt.steps, opt.minibatch
    if quadrature not in QUADRATURES:
        raise ValueError(f"optimizer.quadrature={quadrature!r}: choose 'hadamard' (Algorithm 1), 'qmc' or 'mc'.")
    n_pairs = int(n_pairs)
    if n_pairs < 1 or (quadrature == "hadamard" and n_pairs & (n_pairs - 1)):
        raise ValueError(f"optimizer.n_pairs={n_pairs} must be >= 1, and a power of 2 for the Hadamard quadrature "
                         "(its blocks of pairs must stay aligned, Theorem 3.3).")
    if int(steps) < 1:
        raise ValueError(f"optimizer.steps={steps} must be >= 1.")
    if minibatch is not None and int(minibatch) < 1:
        raise ValueError(f"optimizer.minibatch={minibatch} must be a positive number of observations (or None: "
                         "all).")
    if not (0 < float(opt.sigma_min) <= float(opt.sigma_max)):
        raise ValueError("the optimizer's sigma bounds need 0 < sigma_min <= sigma_max; got "
                         f"sigma_min={opt.sigma_min}, sigma_max={opt.sigma_max}.")
    check_draws(draws)


def _loss(model, pm, minibatch, var_name):
    """``loss_vg(theta, key) -> (L, grad)``: the negative log joint, or its minibatch estimate."""
    if minibatch is None or int(minibatch) >= pm.n_obs:
        vg = jax.value_and_grad(lambda th: -pm.logp(th))
        return lambda th, key: vg(th)
    B, n = int(minibatch), pm.n_obs
    terms = as_model(model, pvi=True, var_name=var_name).terms
    if terms.log_prior is None:
        raise ValueError(f"optimizer.minibatch needs the log prior of the model separately from its likelihood, "
                         f"which this {pm.kind} model does not give; use minibatch=None.")

    def loss(th, key):
        idx = jax.random.choice(key, n, (B,), replace=False)
        ll = jax.vmap(pm.loglik_i, in_axes=(None, 0))(th, idx)
        return -(n / B) * jnp.sum(ll) - terms.log_prior(th[None, :])[0]

    return jax.value_and_grad(loss)


@uses_x64
def qnvb(data, model, *, draws=1000, random_seed=None, var_name=None, optimizer=None):
    """Quasi-Newton variational Bayes: a mean-field Gaussian posterior in seconds.

    Parameters
    ----------
    data : xarray.DataTree or None
        Its groups are kept in the returned tree (it must not have a ``posterior`` group). ``None``: a
        new DataTree; the model carries the observed data either way.
    model : pymc.Model, StanModel, JaxModel, pl.models.*
        Any model :func:`ppl_loo.as_model` accepts.
    draws : int
        Draws from ``q`` written as the ``posterior`` group.
    random_seed : int, numpy Generator or JAX key, optional
        Seeds the start, the quadrature (qmc, mc), the minibatches and the draws. None: a seed derived
        from the observed data, so that a rerun on the same input reproduces.
    var_name : str, optional
        The observed variable (models with several).
    optimizer : QNVBOptions, dict or None
        Algorithm 3's steps, start, quadrature, minibatch and safeguards (:class:`~ppl_loo.QNVBOptions`;
        None: its defaults).

    Returns
    -------
    xarray.DataTree
        ``posterior`` (draws from ``q``), ``log_likelihood``, ``observed_data``, and ``qnvb``: ``mu``,
        ``sigma`` (per unconstrained parameter), the ELBO estimate and the loss per step, ``log_q`` per
        draw; attrs: the settings, steps, gradient evaluations, wall time.
    """
    opt = resolve_options(QNVBOptions, optimizer, "optimizer", "qnvb")
    _check_args(opt, draws)
    t0 = time.perf_counter()
    data = check_input_tree(data, "qnvb")
    pm = as_model(model, var_name=var_name, data=data)
    k_init, k_run, k_draw = jax.random.split(fit_key(random_seed, pm), 3)
    mu0 = initial_point(opt.init, pm.dim, k_init, "qnvb")
    cfg = QNVBConfig(lam=float(opt.lam), sigma_min=float(opt.sigma_min), sigma_max=float(opt.sigma_max),
                     s_min=float(opt.s_min), s_max=float(opt.s_max), tau1=float(opt.tau1), tau2=float(opt.tau2),
                     n_pairs=int(opt.n_pairs), quadrature=opt.quadrature, hessian=opt.hessian)
    state, trace = run(_loss(model, pm, opt.minibatch, var_name), mu0, cfg, int(opt.steps), k_run)
    q = gaussian.MeanField(jnp.asarray(state.mu), jnp.asarray(state.sigma))
    if not (bool(jnp.all(jnp.isfinite(q.mean))) and bool(jnp.all(jnp.isfinite(q.sd)))):
        raise ValueError("QNVB diverged (non-finite mu or sigma): lower the optimizer's lam or sigma_max, or pass "
                         "optimizer={'init': ...} nearer the posterior.")
    theta, log_q = gaussian_draws(q, draws, pm.dim, k_draw)
    attrs = dict(n_pairs=int(opt.n_pairs), quadrature=opt.quadrature, steps=int(opt.steps),
                 minibatch=int(opt.minibatch or 0), sigma_min=float(opt.sigma_min), sigma_max=float(opt.sigma_max),
                 lam=float(opt.lam), s_min=float(opt.s_min), s_max=float(opt.s_max), tau1=float(opt.tau1),
                 tau2=float(opt.tau2), hessian=opt.hessian,
                 gradient_evaluations=int(2 * int(opt.n_pairs) * int(opt.steps)),
                 wall_time_s=time.perf_counter() - t0, random_seed=str(random_seed))
    group = _qnvb_group(pm, q, trace, log_q, attrs)
    return approximation_tree(pm, data, theta, "qnvb", group, "qnvb")


def _qnvb_group(pm, q, trace, log_q, attrs):
    S = log_q.shape[0]
    elbo, loss = np.asarray(trace.elbo), np.asarray(trace.loss)
    coords = {"param": list(pm.layout.labels) or [f"theta[{j}]" for j in range(pm.dim)],
              "step": np.arange(elbo.shape[0]), "chain": [0], "draw": np.arange(S)}
    ds = xr.Dataset({"mu": (("param",), np.asarray(q.mean)), "sigma": (("param",), np.asarray(q.sd)),
                     "elbo": (("step",), elbo), "loss": (("step",), loss),
                     "log_q": (("chain", "draw"), log_q.reshape(1, S))}, coords=coords)
    tail = elbo[-max(1, len(elbo) // 10):]
    ds.attrs.update(attrs)
    ds.attrs.update(method="qnvb", posterior_group="posterior", model_kind=pm.kind, var_name=pm.var_name,
                    n_obs=int(pm.n_obs), dim=int(pm.dim), final_elbo=float(np.mean(tail)),
                    elbo_sd_last_10pct=float(np.std(tail)), space="unconstrained")
    return ds
