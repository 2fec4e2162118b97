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
from ppl_loo.workflow.approx.stored_q import pvi_log_q, stored_gaussian, stored_log_q
from ppl_loo.workflow.loo.inputs import (
    align_obs_dims,
    check_finite,
    get_log_likelihood,
    obs_labels,
    r_eff_of,
    stack_draws,
    stan_labelled,
    with_stan_labels,
)

__all__ = ["LooDraws", "loo_draws", "compare_log_lik", "check_stored_log_lik", "warn_if_differs", "LogLikMismatchError",
           "OFF_MODEL"]

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


def loo_draws(data, model, var_name, log_q, log_lik=True, check_log_lik=True) -> LooDraws:
    """:class:`LooDraws` of ``data``'s posterior under ``model`` (a :class:`~ppl_loo.model.Model`).

    ``log_q``: None (MCMC draws, or the ``q`` a ``pl.pvi`` DataTree stores), an array of one value
    per draw, or a JAX function of one unconstrained draw. ``log_lik=False``: ``ll`` is None (the
    out-of-core path, :mod:`ppl_loo.workflow.loo.chunked`, evaluates the model on the flagged observations
    only and compares those with the stored values). ``check_log_lik``: a stored log-likelihood that differs
    from the model's beyond its precision raises :class:`LogLikMismatchError` (False: a warning).
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
        compare_log_lik(data, var_name, ll, joint_ok=not model.factorizes, obs_dims=model.obs_dims,
                        check=check_log_lik, model=model)
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


def compare_log_lik(data, var_name, ll, joint_ok=False, obs_dims=None, check=True, model=None):
    """Check a stored log_likelihood group against the model's values ``ll`` at the same draws.

    ``joint_ok``: the model does not factorize, and a stored group with one joint term per draw
    (what PyMC writes for, e.g., one ``pm.MvNormal`` over all observations) is not compared.
    ``obs_dims``: the model's observation dims; a stored variable with the same dims in another order is
    compared (and reported) in the model's order, one with other names is refused.
    ``check``/``model``: as :func:`check_stored_log_lik`.
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
    check_stored_log_lik(data, var_name, arr, ll, check=check, model=model, stored_da=stored, stacklevel=6)


def warn_if_differs(data, var_name, stored, ll, stacklevel=4):
    """Warn when the stored log-likelihood values ``stored`` differ from the model's ``ll`` (same shape)."""
    check_stored_log_lik(data, var_name, stored, ll, check=False, stacklevel=stacklevel + 1)


class LogLikMismatchError(ValueError):
    """The stored log-likelihood differs from the model's at the same draws beyond the precision it was stored
    with: the draws do not belong to the model, its data, or the variable is not the log-likelihood.

    ``detail``: what differs, without the fix (the command line adds its files and flag); ``var_name``,
    ``label`` (the observation with the largest difference), ``stored_value``, ``model_value``.
    """

    def __init__(self, message, *, detail, var_name, label, stored_value, model_value):
        super().__init__(message)
        self.detail, self.var_name, self.label = detail, var_name, label
        self.stored_value, self.model_value = stored_value, model_value


def stored_precision(data, stored=None):
    """``(r, rounded)``: the relative rounding ``r`` of stored values and whether the draws are rounded too.

    CmdStan CSV (``attrs["sig_figs"]``, 6 by default): ``s`` significant digits, ``r = 0.5 10^(1-s)``;
    float32 values: ``r = 1e-5`` (their own rounding, and float32 arithmetic with cancellation);
    float64 values (PyMC, JAX): ``r = 2e-6``: the same model's log-likelihood computed by another code path (NumPyro's
    at sampling, in the constrained space; PyTensor's) differs by up to about 1e-6 relative (tests/test_mixture.py's
    leverage regression: -4.34251 stored, -4.34251 recomputed, beyond 1e-7), far below what other data or another
    model give.
    """
    sig = getattr(data, "attrs", {}).get("sig_figs")
    try:
        sig = int(sig) if sig is not None else None
    except (TypeError, ValueError):
        sig = None
    if sig is not None and 0 < sig < 17:
        return 0.5 * 10.0 ** (1 - sig), True
    f32 = getattr(stored, "dtype", None) == np.float32
    if not f32 and isinstance(data, xr.DataTree) and "posterior" in data.children:
        f32 = any(v.dtype == np.float32 for v in data["posterior"].to_dataset().data_vars.values())
    return (1e-5, True) if f32 else (2e-6, False)


def _precision_words(data, r):
    sig = getattr(data, "attrs", {}).get("sig_figs")
    if sig is not None and np.isclose(r, 0.5 * 10.0 ** (1 - float(sig))):
        return f"the {int(sig)} significant digits of the CmdStan output"
    return f"float rounding (relative {2 * r:.0e})"


def _tolerance(stored, ll, r):
    """Per value: both values' rounding (``r`` of each magnitude, doubled for the draws' rounding and the
    arithmetic) plus ``2 r`` absolute (values near 0 computed from larger terms)."""
    return 2.0 * r * (1.0 + np.abs(stored) + np.abs(ll)) + 8.0 * np.finfo(np.float64).eps * np.abs(ll)


def rounding_effect(data, model, ll, r, obs=None, seed=0):
    """``|ll(rounded) - ll|``: the model's log-likelihood at the posterior draws perturbed by their relative
    rounding ``r`` (random sign per entry), minus ``ll``; None where the model cannot evaluate it (a
    perturbed draw outside the support, say). The differences a rounding of the draws can cause."""
    try:
        post = data["posterior"].to_dataset()
        rng = np.random.default_rng(seed)
        pert = post.copy()
        for k, v in post.data_vars.items():
            if np.issubdtype(v.dtype, np.floating):
                pert[k] = v * (1.0 + r * rng.choice(np.array([-1.0, 1.0]), size=v.shape))
        theta = jnp.asarray(np.asarray(model.unconstrain(pert), dtype=np.float64))
        llp = model.log_lik(theta) if obs is None else model.log_lik(theta, obs=np.asarray(obs))
        out = np.abs(np.asarray(llp, dtype=np.float64) - ll)
    except Exception:  # noqa: BLE001 - an explanation that cannot be computed explains nothing
        return None
    return out if out.shape == ll.shape and np.all(np.isfinite(out)) else None


def check_stored_log_lik(data, var_name, stored, ll, *, check=True, model=None, stored_da=None, obs_idx=None,
                         stacklevel=4):
    """Refuse stored log-likelihood values ``stored`` that differ from the model's ``ll`` (both ``(S, m)``,
    the observations ``obs_idx``, all when None) beyond the precision they were stored with.

    The tolerance of each value is relative to its magnitude (:func:`stored_precision`: a CmdStan CSV's
    ``sig_figs``, else float rounding); where the draws are rounded too (CSV, float32), values beyond it are
    compared again with the effect of that rounding (:func:`rounding_effect`). Beyond both: a
    :class:`LogLikMismatchError` naming the observation with the largest difference and the likely cause;
    ``check=False``: a warning instead (the model's values are used either way).
    """
    r, rounded = stored_precision(data, stored_da if stored_da is not None else stored)
    stored = np.asarray(stored, dtype=np.float64)
    ll = np.asarray(ll, dtype=np.float64)
    if not ll.size:
        return
    diff = np.abs(stored - ll)
    diff = np.where(np.isnan(diff), 0.0, diff)  # NaN stored: not compared (as np.nanmax did)
    bad = diff > _tolerance(stored, ll, r)
    if not bad.any():
        return
    if rounded and model is not None:  # the draws' own rounding, propagated through the model
        eff = rounding_effect(data, model, ll, r, obs=obs_idx)
        if eff is not None:
            tol = _tolerance(stored, ll, r) + 4.0 * eff + 4.0 * np.sqrt(np.mean(eff ** 2, axis=0))[None, :]
            bad = diff > tol
            if not bad.any():
                return
    err = _mismatch(data, var_name, stored, ll, diff, bad, r, model, stored_da, obs_idx)
    if check:
        raise err
    warnings.warn(f"{err.detail}; ppl_loo uses the model's values (compute={{'check_log_lik': False}}).", UserWarning,
                  stacklevel=stacklevel)


def _mismatch(data, var_name, stored, ll, diff, bad, r, model, stored_da, obs_idx):
    """The :class:`LogLikMismatchError` of the values ``bad``: the largest difference, named, and the cause."""
    S, m = ll.shape
    n = int(np.prod(getattr(model, "obs_shape", None) or (m,))) if obs_idx is not None else m
    s, j = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), bad.shape)
    i = int(j if obs_idx is None else np.asarray(obs_idx)[j])
    label = _label(data, var_name, model, stored_da, i)
    n_bad = int(np.sum(bad.any(axis=0)))
    name = f"log_likelihood[{var_name!r}]" if var_name is not None else "the stored log_likelihood"
    where = f"draw {s + 1} of {S}"
    if isinstance(data, xr.DataTree) and "posterior" in data.children:
        chains = int(data["posterior"].sizes.get("chain", 1))
        if chains > 1 and S % chains == 0:
            where = f"chain {s // (S // chains) + 1}, draw {s % (S // chains) + 1}"
    detail = (f"{name} differs from the model's at the same draws beyond {_precision_words(data, r)} in "
              f"{n_bad} of {m if obs_idx is None else f'{m} compared (of {n})'} observations; the largest "
              f"difference is at {label} ({where}): stored {stored[s, j]:.6g}, the model's {ll[s, j]:.6g}")
    cause = _cause(stored, ll, bad, model, i, n_bad, m)
    if cause:
        detail += f"; {cause}"
    message = (f"{detail}. The stored values are not this model's with these data: pass the model and the data the "
               "draws were made with (and var_name= the variable with the pointwise log-likelihood), or "
               "compute={'check_log_lik': False} to use the model's values anyway.")
    return LogLikMismatchError(message, detail=detail, var_name=var_name, label=label,
                               stored_value=float(stored[s, j]), model_value=float(ll[s, j]))


def _label(data, var_name, model, stored_da, i):
    if stored_da is None:
        try:
            stored_da = get_log_likelihood(data, var_name)
        except ValueError:
            stored_da = None
    if stored_da is None:
        return f"{var_name or 'observation'}[{i}]"
    try:
        ref0 = stored_da.isel(chain=0, draw=0, drop=True)
        if getattr(model, "obs_dims", None) is not None and set(ref0.dims) == set(model.obs_dims):
            ref0 = ref0.transpose(*model.obs_dims)
        return obs_labels(with_stan_labels(ref0, stan_labelled(data, model)), [i])
    except Exception:  # noqa: BLE001 - a label is a courtesy
        return f"{var_name or 'observation'}[{i}]"


def _discrete_observations(model):
    """Names of the model's observed data declared discrete (a PyMC observed variable of integer dtype, a Stan
    data entry indexed by observation and declared ``int``): an outcome with a probability mass?"""
    obs = getattr(model, "obs", None)
    return list(getattr(obs, "discrete", ()))


def _obs_data_words(model, i):
    """``"y[8] = 3.5, x[8] = 1"``: the model's data entries of observation ``i`` (a Stan program's), or ``""``."""
    entries = getattr(getattr(model, "obs", None), "entries", None) or {}
    parts = []
    for k in list(entries)[:3]:
        v = np.asarray(entries[k])
        if v.ndim == 1 and i < v.shape[0]:
            parts.append(f"{k}[{i + 1}] = {v[i].item():.6g}")
    return ", ".join(parts)


def _cause(stored, ll, bad, model, i, n_bad, m):
    """The likely cause, in words: a variable that is no log-likelihood, the data of some observations, or
    draws of another model (or other data)."""
    positive = float(np.nanmax(stored)) if stored.size else 0.0
    if positive > 1e-6:
        discrete = _discrete_observations(model)
        if discrete:
            names = ", ".join(discrete)
            return (f"the stored values are positive (up to {positive:.4g}) and {names} "
                    f"{'is' if len(discrete) == 1 else 'are'} declared discrete: the log probability mass of a "
                    "discrete outcome cannot exceed 0, so the stored variable is not the pointwise log-likelihood "
                    "(replicated data?)")
        whole = np.all(np.isfinite(stored) & (stored == np.round(stored)))
        if whole and np.all(ll <= 0):
            return (f"the stored values are whole numbers up to {positive:.4g} while the model's are all at "
                    "most 0: the stored variable is not the pointwise log-likelihood (replicated data?)")
    if n_bad <= m // 2:
        here = _obs_data_words(model, i)
        which = "that observation" if n_bad == 1 else f"those {n_bad}"
        return (f"the other {m - n_bad} observations agree, so the data of {which} likely differ from the data the "
                f"draws were made with" + (f" (in the model's data: {here})" if here else ""))
    return ("the draws come from another model, from other data, or the stored variable is not the pointwise "
            "log-likelihood")
