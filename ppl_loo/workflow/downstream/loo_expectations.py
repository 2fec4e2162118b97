"""``ppl_loo.loo_expectations``: LOO expectations, variances, sds and quantiles of pointwise quantities with the
adapted weights, and each estimate's own Pareto k-hat."""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.weighted import KINDS, function_khat, weighted_summary
from ppl_loo.workflow.downstream.points import entry_cache, evaluated, own_function

__all__ = ["loo_expectations", "expectation", "summarized", "checked_model", "warn_unkept", "observed_and_loo_means"]


@uses_x64
def loo_expectations(data, res, values, *, model=None, kind="mean", probs=None):
    """LOO expectation ``E_{-i}[f_i]`` (or variance, sd, median, quantiles) of a pointwise quantity for every
    observation, with each estimate's own Pareto k-hat (R ``loo``'s ``E_loo``, ``arviz_stats.loo_expectations``).

    Observations that plain PSIS handled use the PSIS weights on the posterior draws; adapted ones
    use the weights of their chosen proposal on its transformed draws (Eq. 10 with ``f`` evaluated
    at ``phi``, not ``theta``), so the expectation is as reliable as the elpd. The result stores
    the weights, not the transformed draws: they are rebuilt from ``data``'s posterior draws with
    ``model``. Where nothing is adapted the numbers are ``arviz_stats.loo_expectations``' on the same draws
    (its formulas: :mod:`ppl_loo.numerics.weighted`).

    Parameters
    ----------
    data : DataTree
        The data the result was computed from (its ``posterior`` group gives the draws).
    res : LooResult
        From :func:`ppl_loo.loo` with a model (also after pickling or
        :meth:`~ppl_loo.LooResult.from_datatree`).
    values : callable
        ``values(params) -> array (M, *obs_shape)``: the quantity at ``M`` parameter points, with
        ``params`` the model's constrained parameters (``model.constrain``), each of shape
        ``(M, ...)``. For example the predicted probability of each observation, for LOO ROC
        curves and AUC (paper Eq. 8).
    model : pymc.Model, StanModel or PosteriorModel
        The model the result was computed with (as passed to :func:`ppl_loo.loo`).
    kind : {"mean", "var", "sd", "median", "quantile"}
        The summary (``"var"``: with the ``ESS / (ESS - 1)`` correction of ``arviz_stats``).
    probs : float or sequence of float
        The quantile levels in [0, 1], for ``kind="quantile"`` (required there).

    Returns
    -------
    DataArray
        Over the observation dims of the result (after ``quantile``, the levels, for ``kind="quantile"``, as
        ``arviz_stats``), named
        ``loo_expectations``, with the coordinates ``pareto_k`` (each estimate's k-hat: the larger of the
        weights' right-tail k-hat and the two-tailed k-hat of ``h`` times the weights, ``h`` the quantity for the
        mean and its square for the variance and sd; the weights' alone for quantiles; computed from the raw
        ratios ``1 / p(y_i | theta)`` for plain PSIS, from the smoothed weights for adapted proposals, which
        makes it slightly optimistic there) and ``weights``: which weights each estimate used, ``"psis"``,
        ``"adapted"``, ``"refit"`` (the refit's draws, equally weighted; ``pareto_k`` NaN: no importance sampling)
        or ``"mixture"`` (the mixture importance-sampling run's draws and weights). The result keeps those draws
        (:mod:`ppl_loo.workflow.loo.kept`); where it could not (a refit read from a checkpoint, more than
        ``KEEP_MAX_VALUES`` numbers) the observation gets the plain PSIS weights, and a warning names it; its
        ``pareto_k`` says whether those can be trusted.
    """
    return expectation(data, res, values, model, kind, probs)


def expectation(data, res, values, model, kind="mean", probs=None, with_khat=True):
    """:func:`loo_expectations` (``model`` not yet checked); ``with_khat=False`` leaves ``pareto_k`` NaN (the
    k-hats cost one tail fit per observation: :func:`ppl_loo.loo_roc` needs only the means)."""
    model = checked_model(data, res, model, "loo_expectations")
    if not callable(values):
        raise TypeError("`values` must be a callable values(params) -> array (M, *obs_shape).")
    probs = _checked_kind(kind, probs)
    entry = entry_cache(data, res, model)
    outs, is_tuple = evaluated(entry, values, model, own_function(values, model))
    if is_tuple:
        raise ValueError("`values` returned a tuple; it must return one array (M, *obs_shape).")
    return summarized(res, entry.points, *outs[0], kind, probs, with_khat)


def summarized(res, pts, at_draws, at_rows, kind="mean", probs=None, with_khat=True):
    """The DataArray of :func:`loo_expectations` from a function's values at the posterior draws ``(S, n)`` and at the
    result's other-than-PSIS points ``(R,)`` (:func:`ppl_loo.workflow.downstream.points.evaluated`)."""
    S, n = pts.ll.shape
    if not np.all(np.isfinite(at_draws)):
        raise ValueError("`values` returned non-finite values at the posterior draws.")
    lw_psis = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(S, n).T
    sets = [(at_draws[:, i], lw_psis[i], -pts.ll[:, i]) for i in range(n)]  # (values, weights, weights for k-hat)
    used = np.full(n, "psis", dtype=object)
    for _, i, rows, source in pts.sets():
        lw = pts.log_weights[rows]
        sets[i], used[i] = (at_rows[rows], lw, None if source == "refit" else lw), source
    warn_unkept(res, used)
    out = np.array([weighted_summary(x, lw, kind, probs) for x, lw, _ in sets])
    # a refit's draws are equally weighted draws of the LOO posterior: no importance sampling, no k-hat (NaN)
    khat = np.array([function_khat(x, raw, kind) if with_khat and raw is not None else np.nan for x, _, raw in sets])
    template = res.elpd_i
    coords = dict(template.coords)
    coords["pareto_k"] = (template.dims, khat.reshape(template.shape))
    coords["weights"] = (template.dims, used.astype(str).reshape(template.shape))
    if kind == "quantile":
        coords["quantile"] = probs
        # the levels first, as arviz_stats.loo_expectations
        return xr.DataArray(np.moveaxis(out, -1, 0).reshape((probs.size,) + template.shape),
                            dims=("quantile",) + template.dims, coords=coords, name="loo_expectation",
                            attrs={"kind": kind})
    return xr.DataArray(out.reshape(template.shape), dims=template.dims, coords=coords, name="loo_expectation",
                        attrs={"kind": kind})


def _checked_kind(kind, probs):
    """The quantile levels as a 1-D array (None unless ``kind="quantile"``), or a ValueError naming the input."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(map(repr, KINDS))}.")
    if kind != "quantile":
        if probs is not None:
            raise ValueError(f"probs= is for kind='quantile'; kind={kind!r} takes none.")
        return None
    if probs is None:
        raise ValueError("kind='quantile' needs probs=, the quantile levels in [0, 1] (e.g. probs=[0.05, 0.95]).")
    p = np.atleast_1d(np.asarray(probs, dtype=float))
    if p.ndim != 1 or p.size == 0 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"probs={probs!r}: quantile levels must be numbers in [0, 1], e.g. probs=[0.05, 0.95].")
    return p


def warn_unkept(res, used):
    """A warning naming the observations whose ``elpd_i`` came from draws the result does not keep (a refit read
    from a checkpoint, draws beyond the kept budget): their expectations use the plain PSIS weights."""
    transform = np.asarray(res.transform.values).astype(str).ravel()
    other = np.flatnonzero(np.isin(transform, ("refit", "mixture", "smc")) & (used == "psis"))
    if other.size:
        names = res.obs_labels(other, limit=10)
        warnings.warn(f"{other.size} observation(s) ({', '.join(names)}{' and more' if other.size > 10 else ''}) have "
                      "an elpd_i from a refit, mixture importance sampling or SMC, whose draws the result does not "
                      "keep: their LOO expectations use the plain PSIS weights (see the coordinate pareto_k: above "
                      "0.7 they are not reliable).", UserWarning, stacklevel=3)


def checked_model(data, res, model, caller):
    """The :class:`~ppl_loo.model.Model` of ``model`` (as ``pl.loo`` builds it), or a ValueError saying what is
    missing."""
    if getattr(res, "engine_config", None) is None or getattr(res, "adapted_log_weights", None) is None:
        raise ValueError(f"`res` has no adaptive weights: {caller} needs a result of ppl_loo.loo(data, model) "
                         "(a LooResult computed with a model, or one rebuilt by LooResult.from_datatree).")
    if model is None:
        raise ValueError(f"{caller} needs model=: the model the result was computed with "
                         f"(pl.{caller}(data, res, ..., model=model)).")
    return as_model(model, var_name=res.var_name, data=data)


def observed_and_loo_means(data, res, model, mean, y, caller):
    """The observed values and their LOO predictive means (flat), and the checked model."""
    model = checked_model(data, res, model, caller)
    if mean is None:
        mean = model.predictive_mean
        if mean is None:
            raise ValueError(f"the {model.kind} model has no predictive mean; pass "
                             "mean=callable(params) -> E[y_rep_i | theta], array (M, *obs_shape).")
    elif not callable(mean):
        raise TypeError("`mean` must be a callable mean(params) -> array (M, *obs_shape).")
    pred = expectation(data, res, mean, model, with_khat=False)
    if y is None:
        observed = getattr(model.obs, "observed", None)
        if observed is None:
            raise ValueError(f"{caller} needs the observed values: pass y= (the model does not carry them).")
        y = observed
    y = np.asarray(y, dtype=float).reshape(-1)
    if y.size != pred.size:
        raise ValueError(f"y has {y.size} values but the LOO result has {pred.size} observations.")
    return y, np.asarray(pred.values, dtype=float).reshape(-1)
