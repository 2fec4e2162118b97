"""``ppl_loo.loo_expectations``: LOO expectations, variances, sds and quantiles of pointwise quantities with the
adapted weights, and each estimate's own Pareto k-hat."""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.psis import check_conventions, psis_tail_length
from ppl_loo.numerics.weighted import KINDS, function_khat, weighted_summary
from ppl_loo.workflow.downstream.points import entry_cache, evaluated, own_function
from ppl_loo.workflow.loo.inputs import SAMPLE_DIMS, get_log_likelihood, stack_draws
from ppl_loo.workflow.loo.plain import (
    plain_log_likelihood,
    plain_loo_checks,
    posterior_chains,
    psis_columns,
    relative_eff_columns,
)

__all__ = ["loo_expectations", "expectation", "draws_matrix", "summarized", "checked_model", "warn_unkept",
           "observed_and_loo_means"]


@uses_x64
def loo_expectations(data=None, res=None, values=None, *, model=None, kind="mean", probs=None, conventions=None,
                     log_weights=None, log_ratios=None, reff=1.0):
    """LOO expectation ``E_{-i}[f_i]`` (or variance, sd, median, quantiles) of a pointwise quantity for every
    observation, with each estimate's own Pareto k-hat (R ``loo``'s ``E_loo``, ``arviz_stats.loo_expectations``).

    ``values`` is either a callable of the parameters (with ``model=``) or the quantity's values at the posterior
    draws (R ``loo``'s ``E_loo(x, psis_object)`` with a matrix ``x``, e.g. ``y_rep``).

    With a callable, observations that plain PSIS handled use the PSIS weights on the posterior draws; adapted ones
    use the weights of their chosen proposal on its transformed draws (Eq. 10 with ``f`` evaluated at ``phi``, not
    ``theta``), so the expectation is as reliable as the elpd. The result stores the weights, not the transformed
    draws: they are rebuilt from ``data``'s posterior draws with ``model``. Where nothing is adapted the numbers are
    ``arviz_stats.loo_expectations``' on the same draws (its formulas: :mod:`ppl_loo.numerics.weighted`).

    With an array of values no model is needed: the weights are the result's plain PSIS weights (recomputed from
    ``data``'s ``log_likelihood`` for a result of ``pl.loo(data)``; ``res.log_weights`` for a result with a model,
    where every observation's ``elpd_i`` must use weights on the posterior draws), or ``log_weights=`` given
    directly (then ``data`` and ``res`` may be None).

    Parameters
    ----------
    data : DataTree, optional
        The data the result was computed from (its ``posterior`` group gives the draws; for a result of
        ``pl.loo(data)`` with array ``values``, its ``log_likelihood`` gives the weights).
    res : LooResult, optional
        From :func:`ppl_loo.loo` (also after pickling or :meth:`~ppl_loo.LooResult.from_datatree`). With a callable
        ``values``: a result with a model. None only with ``log_weights=``.
    values : callable, array or DataArray
        ``values(params) -> array (M, *obs_shape)``: the quantity at ``M`` parameter points, with ``params`` the
        model's constrained parameters (``model.constrain``), each of shape ``(M, ...)`` (for example the predicted
        probability of each observation, for LOO ROC curves and AUC, paper Eq. 8). Or the values at the posterior
        draws: an array ``(chain, draw, *obs_shape)`` or ``(S, n)`` (draws chain-major, as R's ``S x n`` matrix), or
        a DataArray with dims ``chain``, ``draw`` and the observation dims (e.g. ``posterior_predictive["y"]``).
    model : pymc.Model, StanModel or PosteriorModel, optional
        The model the result was computed with (as passed to :func:`ppl_loo.loo`); required with a callable.
    kind : {"mean", "var", "sd", "median", "quantile"}
        The summary (``"var"``: R's ``"variance"``, with the correction ``1 / (1 - sum w^2)``, ``ESS / (ESS - 1)``).
    probs : float or sequence of float
        The quantile levels in [0, 1], for ``kind="quantile"`` (required there).
    conventions : {"arviz", "R"}, optional
        Whose quantile and k-hat: ``"arviz"`` (``arviz_stats.loo_expectations``') or ``"R"`` (R ``loo`` 2.10.1's
        ``E_loo``: its weighted quantile ``.wquant`` and ``posterior::pareto_khat`` with the PSIS tail length of the
        weights; :mod:`ppl_loo.numerics.weighted`). Mean, variance and sd are the same under both. Default: the
        result's own conventions, for a result of ``pl.loo(data)`` those whose PSIS reproduces its ``elpd_i``
        (``compute={"conventions": "R"}`` gives R's), else ``"arviz"``.
    log_weights : array or DataArray, optional
        Log importance weights ``(S, n)`` or ``(chain, draw, *obs_shape)``, normalized or not (R's
        ``weights(psis_object, log = TRUE)``), used instead of a result's; ``values`` must then be an array.
    log_ratios : array or DataArray, optional
        With ``log_weights``: the raw (not smoothed) log ratios, of the same shape (``-log_lik`` for LOO), for the
        k-hat (R's ``log_ratios``); without them the k-hat is computed from ``log_weights`` (slightly optimistic,
        as R).
    reff : float or array, default 1.0
        With ``log_weights`` and ``conventions="R"``: the relative efficiency of the draws (one, or one per
        observation), which sets the tail length of the k-hat (R's ``psis(..., r_eff)``).

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

    Raises
    ------
    ValueError
        Array ``values`` with a result whose adapted observations' weights are on transformed draws (pass a
        callable of the parameters and ``model=``), values of the wrong shape or not finite, a result of
        ``pl.loo(data)`` whose weights cannot be recomputed (pass ``log_weights=``), an unknown ``kind`` or
        ``conventions``.
    """
    if conventions is not None:
        check_conventions(conventions)
    if values is None:
        raise ValueError("loo_expectations needs values=: a callable values(params) -> array (M, *obs_shape) with "
                         "model=, or the values at the posterior draws, an array (chain, draw, *obs) or (S, n).")
    if callable(values):
        if log_weights is not None:
            raise ValueError("log_weights= takes values at the posterior draws (an array), not a callable.")
        return expectation(data, res, values, model, kind, probs, conventions=conventions)
    return _array_expectation(data, res, values, kind, probs, conventions, log_weights, log_ratios, reff)


def expectation(data, res, values, model, kind="mean", probs=None, with_khat=True, conventions=None):
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
    return summarized(res, entry.points, *outs[0], kind, probs, with_khat, conventions or "arviz")


def _array_expectation(data, res, values, kind, probs, conventions, log_weights, log_ratios, reff):
    """:func:`loo_expectations` of values at the posterior draws (R ``loo``'s ``E_loo`` with a matrix)."""
    probs = _checked_kind(kind, probs)
    template = None if res is None else res.elpd_i
    x, own = draws_matrix(values, "values", template)
    S, n = x.shape
    if log_weights is not None:
        lw, _ = draws_matrix(log_weights, "log_weights", template)
        raw = lw if log_ratios is None else draws_matrix(log_ratios, "log_ratios", template)[0]
        for name, arr in (("log_weights", lw), ("log_ratios", raw)):
            if arr.shape != x.shape:
                raise ValueError(f"{name} has {arr.shape[0]} draws x {arr.shape[1]} observations and values "
                                 f"{S} x {n}: give both at the same posterior draws.")
        lw, raw = lw.T, raw.T
        weights_conv, summary_conv = "R", conventions or "arviz"
        r_eff = np.broadcast_to(_checked_reff(reff, n), (n,))
        used = "given"
        if template is None:
            template = own
    else:
        if res is None:
            raise ValueError("loo_expectations with values at the draws needs res= (a result of pl.loo) or "
                             "log_weights= (S, n), the log importance weights.")
        if log_ratios is not None:
            raise ValueError("log_ratios= goes with log_weights=; a result's own log ratios are used otherwise.")
        if res.log_weights is None:
            lw, raw, weights_conv, r_eff = _plain_weights(data, res, conventions)
        else:
            lw, raw, r_eff = _result_weights(data, res)
            weights_conv = "arviz"
        summary_conv = conventions or weights_conv
        used = "psis"
    if lw.shape != (n, S):
        raise ValueError(f"values has {S} draws x {n} observations but the weights {lw.shape[1]} x {lw.shape[0]}: "
                         "give the values at the posterior draws the result was computed from, one per observation.")
    if not np.all(np.isfinite(x)):
        raise ValueError("values has NaN or infinite entries: give finite values at every posterior draw.")
    tails = [psis_tail_length(S, float(r), weights_conv) if summary_conv == "R" else None for r in r_eff]
    sets = [(x[:, i], lw[i], raw[i]) for i in range(n)]
    return _labelled(template, sets, np.full(n, used, dtype=object), kind, probs, True, summary_conv, tails)


def draws_matrix(arr, name, template):
    """``(S, n)`` float64 of ``arr`` (a DataArray with ``chain`` and ``draw`` dims, an array ``(chain, draw, *obs)``
    or ``(S, n)``) and a template DataArray over its observation dims."""
    if isinstance(arr, xr.DataArray):
        if not all(d in arr.dims for d in SAMPLE_DIMS):
            raise ValueError(f"{name} is a DataArray with dims {arr.dims}: give one with dims 'chain', 'draw' and the "
                             "observation dims (e.g. data.posterior_predictive['y']).")
        obs = [d for d in arr.dims if d not in SAMPLE_DIMS]
        if template is not None and set(obs) == set(template.dims):
            arr = arr.transpose(*SAMPLE_DIMS, *template.dims)
        ref0 = arr.transpose(*SAMPLE_DIMS, ...).isel(chain=0, draw=0, drop=True)
        return stack_draws(arr), xr.zeros_like(ref0, dtype=float)
    try:
        a = np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a numeric array (chain, draw, *obs) or (S, n), or a DataArray; got "
                        f"{type(arr).__name__}.") from err
    if a.ndim < 2:
        raise ValueError(f"{name} has shape {a.shape}: give the values at the posterior draws as an array (S, n) "
                         "(draws chain-major, one column per observation) or (chain, draw, *obs).")
    obs_shape = a.shape[2:] if a.ndim > 2 else a.shape[1:]
    S = a.shape[0] * a.shape[1] if a.ndim > 2 else a.shape[0]
    dims = tuple(f"obs_dim_{j}" for j in range(len(obs_shape)))
    return a.reshape(S, -1), xr.DataArray(np.zeros(obs_shape), dims=dims)


def _checked_reff(reff, n):
    r = np.asarray(getattr(reff, "values", reff), dtype=np.float64).ravel()
    if r.size not in (1, n) or not np.all(np.isfinite(r) & (r > 0)):
        raise ValueError(f"reff={reff!r}: give the relative efficiency of the draws, one positive number or one per "
                         f"observation ({n}).")
    return r


def _plain_weights(data, res, conventions):
    """The PSIS log weights ``(n, S)``, log ratios, conventions and ``r_eff`` ``(n,)`` of a result of
    ``pl.loo(data)``, recomputed from ``data``'s log-likelihood: those of the conventions whose PSIS reproduces its
    ``elpd_i`` (``conventions`` and the result's own first)."""
    if data is None or "log_likelihood" not in getattr(data, "children", {}):
        raise ValueError("`res` is a result of pl.loo(data) without a model and keeps no weights: pass the data it was "
                         "computed from (with its log_likelihood group), or log_weights=.")
    da = plain_log_likelihood(data, res.var_name)
    ll = stack_draws(da)
    if ll.shape != (res.n_samples, res.n_data_points):
        raise ValueError(f"data's log_likelihood[{da.name!r}] has {ll.shape[0]} draws x {ll.shape[1]} observations, "
                         f"the result {res.n_samples} x {res.n_data_points}: pass the data it was computed from.")
    chains = posterior_chains(data)
    first = [c for c in (conventions, getattr(res, "conventions", None)) if c is not None]
    target = np.asarray(res.elpd_i.values, dtype=np.float64).ravel()
    for conv in dict.fromkeys(first + ["arviz", "R"]):
        r_eff = plain_loo_checks(data, da, None, conv)
        if r_eff is None:
            with np.errstate(invalid="ignore", divide="ignore"):
                r_eff = relative_eff_columns(ll, chains)
            r_eff = np.where(np.isfinite(r_eff) & (r_eff > 0), r_eff, 1.0)
        elpd, _, lw, _, _ = psis_columns(ll, -ll.T, r_eff, chains, conv)
        if np.allclose(elpd, target, rtol=0, atol=1e-9, equal_nan=True):
            return np.asarray(lw), -ll.T, conv, np.broadcast_to(np.asarray(r_eff, dtype=float), (ll.shape[1],))
    raise ValueError("`res`: plain PSIS of data's log_likelihood does not reproduce its elpd_i under either "
                     "conventions (computed with reff= or from other data?): pass the data it was computed from, or "
                     "the weights themselves, log_weights= (S, n).")


def _result_weights(data, res):
    """The plain PSIS log weights ``(n, S)`` of a result with a model, the raw log ratios (``-log_lik`` from
    ``data``'s log_likelihood group, else the weights) and ``r_eff``; a ValueError where an observation's weights
    are not on the posterior draws."""
    cfg = res.engine_config or {}
    other = [np.asarray(w[dim].values, dtype=np.int64) for w, dim in
             ((getattr(res, "adapted_log_weights", None), "adapted"), (getattr(res, "kept_log_weights", None), "kept"))
             if w is not None and w.sizes[dim]]
    if other:
        idx = np.unique(np.concatenate(other))
        names = ", ".join(res.obs_labels(idx, limit=10)) + (" and more" if idx.size > 10 else "")
        raise ValueError(f"{idx.size} observation(s) ({names}) of `res` use adapted proposals, refit or mixture draws: "
                         "their weights are on transformed or other draws, where values at the posterior draws do not "
                         "apply. Pass values as a callable of the parameters, values(params) -> array (M, *obs), with "
                         "model= (or use a result of pl.loo(data) without a model).")
    S, n = res.n_samples, res.n_data_points
    lw = np.asarray(res.log_weights.transpose(*SAMPLE_DIMS, ...).values, dtype=np.float64).reshape(S, n).T
    warn_unkept(res, np.full(n, "psis", dtype=object))
    raw = lw
    da = get_log_likelihood(data, res.var_name) if data is not None and "log_likelihood" in data.children else None
    if da is not None:
        ll = stack_draws(da)
        if ll.shape == (S, n):
            raw = -ll.T
    return lw, raw, np.full(n, float(cfg.get("r_eff", 1.0)))


def summarized(res, pts, at_draws, at_rows, kind="mean", probs=None, with_khat=True, conventions="arviz"):
    """The DataArray of :func:`loo_expectations` from a function's values at the posterior draws ``(S, n)`` and at the
    result's other-than-PSIS points ``(R,)`` (:func:`ppl_loo.workflow.downstream.points.evaluated`). Under R's
    conventions the k-hat's tail length is that of the weights' PSIS (``arviz_stats``' rounding, the engine's
    ``r_eff``)."""
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
    r_eff = float((res.engine_config or {}).get("r_eff", 1.0))
    tails = [psis_tail_length(len(lw), r_eff) if conventions == "R" else None for _, lw, _ in sets]
    return _labelled(res.elpd_i, sets, used, kind, probs, with_khat, conventions, tails)


def _labelled(template, sets, used, kind, probs, with_khat, conventions, tails):
    """The DataArray of :func:`loo_expectations` over ``template``'s dims from ``sets``, one ``(values, log weights,
    raw log ratios for the k-hat or None)`` per observation, ``used`` their weights' names and ``tails`` their PSIS
    tail lengths (for R's k-hat)."""
    out = np.array([weighted_summary(x, lw, kind, probs, conventions) for x, lw, _ in sets])
    # a refit's draws are equally weighted draws of the LOO posterior: no importance sampling, no k-hat (NaN)
    khat = np.array([function_khat(x, raw, kind, conventions, tail) if with_khat and raw is not None else np.nan
                     for (x, _, raw), tail in zip(sets, tails)])
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
