"""The draws ``pl.loo`` works on: the model's unconstrained draws, log density, gradient and pointwise
log-likelihood at them, and the density ``q`` they come from (the posterior, or an approximation)."""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.numerics.gaussian import log_q as gaussian_log_q
from ppl_loo.workflow.inputs import align_obs_dims, check_finite, get_log_likelihood, r_eff_of, stack_draws
from ppl_loo.workflow.stored_q import pvi_log_q, stored_gaussian, stored_log_q

__all__ = ["LooDraws", "loo_draws", "compare_log_lik", "warn_if_differs", "OFF_MODEL"]

OFF_MODEL = "The draws may be outside the model's support or from a different model."


class LooDraws(NamedTuple):
    """Everything the search reads about the draws (``S`` draws, ``d`` parameters, ``n`` observations)."""

    theta: np.ndarray  # (S, d) unconstrained draws, chain-major
    logp0: Any  # (S,) log posterior at the draws (JAX)
    grad_logp0: Any  # (S, d) its gradient (JAX)
    ll: np.ndarray  # (S, n) pointwise log-likelihood
    log_q0: Any  # (S,) log density of the draws' distribution (``logp0`` for MCMC; Eq. 13 otherwise)
    log_q_fn: Any  # ``log q(theta)`` of one draw (JAX), or None
    approx: bool  # draws from an approximation
    r_eff: float
    n_chains: int
    var_name: str
    gauss: Any = None  # the Gaussian q of a pl.laplace / pl.qnvb fit (numerics.gaussian), or None
    approx_method: str | None = None  # "laplace", "qnvb", "pvi" or "log_q" for draws of an approximation


def loo_draws(data, model, var_name, log_q, log_lik=True) -> LooDraws:
    """:class:`LooDraws` of ``data``'s posterior under ``model`` (a :class:`~ppl_loo.model.Model`).

    ``log_q``: None (MCMC draws, or the ``q`` a ``pl.pvi`` DataTree stores), an array of one value
    per draw, or a JAX function of one unconstrained draw. ``log_lik=False``: ``ll`` is None (the
    out-of-core path, :mod:`ppl_loo.workflow.chunked`, evaluates the model on the flagged observations
    only and compares those with the stored values).
    """
    var_name = var_name or model.var_name
    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()), dtype=np.float64)
    check_finite(theta, "the unconstrained posterior draws", "Check the posterior group for NaN/inf draws.")
    S = theta.shape[0]
    if S < 10:
        raise ValueError(f"only {S} posterior draws: PSIS needs at least 10 (use hundreds).")
    theta_j = jnp.asarray(theta)
    logp0, grad_logp0 = model.log_density_and_grad(theta_j)
    check_finite(np.asarray(logp0), "the model's log density at the posterior draws", OFF_MODEL)
    ll = None
    if log_lik:
        ll = np.asarray(model.log_lik(theta_j))  # (S, n)
        check_finite(ll, f"the pointwise log-likelihood {var_name!r} at the posterior draws", OFF_MODEL)
        compare_log_lik(data, var_name, ll, joint_ok=not model.factorizes, obs_dims=model.obs_dims)
    stored = stored_gaussian(data, theta) if log_q is None else None
    if stored is not None:  # draws of pl.laplace / pl.qnvb: their Gaussian q (Eq. 13), traced into the search
        method, gauss = stored
        log_q0, log_q_fn, approx = _draws_density(data, theta, logp0, _gaussian_values(gauss, theta))
    else:
        method, gauss = None, None
        stored_q = stored_log_q(data) if log_q is None else None  # CmdStan method=variational draws
        if stored_q is not None:
            method, log_q = stored_q
        log_q0, log_q_fn, approx = _draws_density(data, theta, logp0, log_q)
        if approx and method is None:
            method = "pvi" if log_q is None else "log_q"
    r_eff = 1.0 if approx else r_eff_of(data, S)
    n_chains = int(data["posterior"].sizes.get("chain", 1))
    return LooDraws(theta, logp0, grad_logp0, ll, log_q0, log_q_fn, approx, r_eff, n_chains, var_name, gauss, method)


def _gaussian_values(gauss, theta):
    return np.asarray(jax.jit(jax.vmap(lambda th: gaussian_log_q(gauss, th)))(jnp.asarray(theta)))


def _draws_density(data, theta, logp0, log_q):
    """``(log_q0, log_q_fn, approx)``: the density of the draws at the draws (Eq. 13 for an approximation)."""
    if log_q is None:  # draws written by pl.pvi come with their q (Eq. 13); None for other draws
        log_q = pvi_log_q(data, theta)
    if log_q is None:
        return logp0, None, False
    log_q_fn = None
    if callable(log_q):
        log_q_fn = log_q
        log_q = jax.vmap(log_q)(jnp.asarray(theta))
    log_q0 = jnp.asarray(np.asarray(log_q, dtype=np.float64).reshape(-1))
    if log_q0.shape[0] != theta.shape[0]:
        raise ValueError(f"log_q must have one value per draw ({theta.shape[0]}); got shape {np.shape(log_q)}.")
    check_finite(np.asarray(log_q0), "log_q", "Pass the log density of the approximation at each draw.")
    return log_q0, log_q_fn, True


def compare_log_lik(data, var_name, ll, joint_ok=False, obs_dims=None):
    """Warn when a stored log_likelihood group disagrees with the model at the same draws.

    ``joint_ok``: the model does not factorize, and a stored group with one joint term per draw
    (what PyMC writes for, e.g., one ``pm.MvNormal`` over all observations) is not compared.
    ``obs_dims``: the model's observation dims; a stored variable with the same dims in another order is
    compared (and reported) in the model's order, one with other names is refused.
    """
    try:
        stored = get_log_likelihood(data, var_name)
    except ValueError:
        group = data["log_likelihood"] if isinstance(data, xr.DataTree) and "log_likelihood" in data.children else None
        found = [] if group is None else list(group.to_dataset().data_vars)
        if var_name is not None and found and var_name not in found:  # the model names another variable
            raise ValueError(
                f"var_name={var_name!r}, the model's log-likelihood variable, is not in the data's log_likelihood "
                f"group, which has {found}: pass the name the draws use (JaxModel(..., var_name=...) or "
                "pl.loo(..., var_name=...))") from None
        return
    if stored is None:
        return
    if obs_dims is not None:
        stored = align_obs_dims(stored, obs_dims, f"log_likelihood[{stored.name!r}]")
    arr = stack_draws(stored)
    if joint_ok and arr.shape[1] == 1 and ll.shape[1] != 1:
        return
    if arr.shape != ll.shape:
        raise ValueError(
            f"log_likelihood[{var_name!r}] has {arr.shape[1]} observations x {arr.shape[0]} draws but "
            f"the model gives {ll.shape[1]} x {ll.shape[0]}: the data or the draws do not match the model."
        )
    warn_if_differs(data, var_name, arr, ll, stacklevel=5)


def warn_if_differs(data, var_name, stored, ll, stacklevel=4):
    """Warn when the stored log-likelihood values ``stored`` differ from the model's ``ll`` (same shape)."""
    # values written with s significant digits (CmdStan CSV: attrs["sig_figs"], 6 by default) are off by
    # up to 0.5 10^(1-s) relative, and the model's values at the rounded draws by the propagated rounding
    # of the draws: compare at 10^(2-s) relative; full-precision draws at 1e-6
    if not np.size(ll):
        return
    sig = getattr(data, "attrs", {}).get("sig_figs")
    rtol = 10.0 ** (2 - int(sig)) if sig is not None and 0 < int(sig) < 15 else 1e-6
    diff = np.nanmax(np.abs(stored - ll))
    if diff > rtol * (1.0 + np.nanmax(np.abs(ll))):
        warnings.warn(
            f"the stored log_likelihood[{var_name!r}] differs from the model's by up to {diff:.3g} at "
            "the same draws; ppl_loo uses the model's values. Check that the model and its data are "
            "the ones that produced the draws.",
            UserWarning,
            stacklevel=stacklevel,
        )
