"""``ppl_loo.loo_score``: LOO CRPS and SCRPS with the adapted weights.

This module owns the weighted predictive draws ``(y_rep_i, log w)`` of every observation under the weights its
``elpd_i`` was computed with, and the scores of those draws:

- an observation that kept plain PSIS uses the ``posterior_predictive`` draws and ``res.log_weights``, exactly
  what ``arviz_stats.loo_score`` uses (so where nothing is adapted the scores and their mean are
  ``arviz_stats.loo_score``'s on the same data; the SE is R ``loo``'s, from the sample SD, see :func:`sample_se`);
- an observation with an adapted proposal uses that proposal's points (:func:`ppl_loo.loo_expectations`'s, rebuilt
  from the posterior draws with the model) and its stored weights, with ``y_rep_i`` simulated at each point
  (PyMC: ``pm.sample_posterior_predictive`` on those points; otherwise the user's ``simulate=``), seeded from
  ``random_seed``;
- an observation whose ``elpd_i`` came from a refit or the mixture run uses the draws the result kept
  (:mod:`ppl_loo.workflow.loo.kept`) and their weights the same way; where they were not kept (a refit read from a
  checkpoint) it falls back to plain PSIS, with :func:`ppl_loo.loo_expectations`'s warning.

The score of each observation is ``arviz_stats``' (``array_stats.loo_score``: the probability-weighted-moment
estimator of Taillardat et al. 2016 for the CRPS, the weighted Gini mean difference for the SCRPS of Bolin & Wallin
2023), both as maximization scores (the CRPS negated), as ``arviz_stats.loo_score``, with its sums in a form without
cancellation (:func:`weighted_scores`), so that the SCRPS of a binary or other discrete outcome is finite wherever
its draws are not all equal. The points, and the ``y_rep_i`` simulated there for a given integer seed, are built once
per result (:mod:`ppl_loo.workflow.downstream.points`).

A Bernoulli outcome (the model's ``predicted_probability``, given with ``model=``) needs no draws of ``y_rep``: its
LOO predictive is Bernoulli with ``p_i = sum_s w_s p(y_i = 1 | theta_s)`` under the observation's own weights, and
both scores are its closed form (:func:`bernoulli_scores`), defined wherever ``0 < p_i < 1``, also where every 0/1
draw is the same. Elsewhere draws that are all equal have no SCRPS: ``E|Y - Y'| = 0`` and ``-A / 0 - log(0) / 2`` is
undefined; ``arviz_stats.loo_score`` returns NaN there (or, where its sums leave a rounding residue instead of 0, a
meaningless finite value), and :func:`loo_score` refuses them, before anything is simulated.
"""

from __future__ import annotations

import warnings
from collections import namedtuple

import arviz_stats
import numpy as np
import xarray as xr

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import seed_from
from ppl_loo.workflow.downstream.loo_expectations import checked_model, expectation, warn_unkept
from ppl_loo.workflow.downstream.points import blocks, entry_cache

__all__ = ["loo_score", "SCORES", "weighted_scores", "bernoulli_scores"]

#: the scores of :func:`loo_score` (``arviz_stats.loo_score``' ``kind``)
SCORES = ("crps", "scrps")

#: at most this many ``y_rep`` values (points x observations) per call of the simulator
_MAX_VALUES = 2**24


@uses_x64
def loo_score(data, res, *, model=None, kind="crps", random_seed=None, pointwise=False, simulate=None):
    """LOO CRPS or SCRPS (``arviz_stats.loo_score``; R ``loo``'s ``loo_crps`` / ``loo_scrps``) with the weights of
    ``res``: the adapted proposal's where ``elpd_i`` used one, plain PSIS elsewhere.

    Parameters
    ----------
    data : DataTree
        The data the result was computed from, with the groups ``posterior``, ``posterior_predictive`` (one
        replicated ``y_rep`` per posterior draw, the variable named as the log-likelihood's) and
        ``observed_data``, as ``arviz_stats.loo_score`` needs them.
    res : LooResult
        From :func:`ppl_loo.loo` (also plain PSIS-LOO, ``model=None``: then the numbers are
        ``arviz_stats.loo_score``'s).
    model : pymc.Model, StanModel or PosteriorModel, optional
        The model the result was computed with; required when an observation of ``res`` uses an adapted proposal
        (its points are rebuilt with it). With a Bernoulli outcome (``pm.Bernoulli``: the model's
        ``predicted_probability``) the scores of every observation are then the closed form at the LOO predictive
        probability, without ``posterior_predictive`` draws or simulation (they agree with
        ``arviz_stats.loo_score``' to the Monte Carlo error of its draws, and are defined where its are not).
    kind : {"crps", "scrps"}
        The continuous ranked probability score or its scale-invariant version (Bolin & Wallin 2023).
    random_seed : int or numpy.random.Generator, optional
        Seed of the ``y_rep_i`` simulated at the adapted proposals' points. None: a seed derived from those points
        and their weights, so that a rerun on the same input reproduces.
    pointwise : bool
        Also return the per-observation scores and the k-hat of the weights each used.
    simulate : callable, optional
        ``simulate(params, rng) -> array (M, *obs_shape)``: one replicated data set per point, ``params`` the
        model's constrained parameters at ``M`` points (as in :func:`ppl_loo.loo_expectations`), ``rng`` a
        ``numpy.random.Generator``. Default: the model's own simulator (``Model.simulate``; a PyMC model's: its
        JAX sampler of the observed distribution, else ``pm.sample_posterior_predictive`` of the observed variable
        at the points). Required for other models when an observation is adapted.

    Returns
    -------
    namedtuple
        As ``arviz_stats.loo_score``: ``CRPS`` or ``SCRPS`` with ``mean`` (the mean of the pointwise scores,
        larger is better: the CRPS is negated, the SCRPS is so oriented by definition) and ``se`` (``sd / sqrt(n)``
        of the pointwise scores with the sample SD, as R ``loo``'s ``loo_crps``; ``arviz_stats`` uses the population
        SD, ``sqrt((n - 1) / n)`` times it); with
        ``pointwise=True`` also ``pointwise`` (a DataArray over the observation dims, with the coordinate
        ``weights``: ``"psis"``, ``"adapted"``, ``"refit"`` or ``"mixture"``, as :func:`ppl_loo.loo_expectations`) and
        ``pareto_k`` (the k-hat of the weights used; NaN for refit and mixture draws).

    Raises
    ------
    ValueError
        ``kind`` unknown; a group or variable missing; or a SCRPS that is not defined: an observation without a closed
        form whose weighted draws are all equal (``arviz_stats.loo_score`` gives NaN there), refused before anything
        is simulated, or a Bernoulli LOO probability of exactly 0 or 1.
    """
    if kind not in SCORES:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(map(repr, SCORES))}.")
    if model is not None and _has_weights(res):
        model = checked_model(data, res, model, "loo_score")
        if model.predicted_probability is not None:  # a Bernoulli outcome: the closed form, nothing simulated
            return _bernoulli(data, res, model, kind, pointwise)
    y_pred, y_obs = _predictive(data, res)
    if res.log_weights is None:  # plain PSIS-LOO (pl.loo(data), no model): the weights are arviz_stats' own
        return _plain(data, res, kind, pointwise)
    n = y_obs.size
    lw = np.asarray(res.log_weights.transpose("chain", "draw", ...).values, dtype=float).reshape(-1, n)
    scores = weighted_scores(y_pred.T, y_obs, lw.T, kind)
    used = np.full(n, "psis", dtype=object)
    other = _other_weights(res)
    # refused before any simulation: a score that stays plain PSIS's and is not finite
    _check_finite(res, scores, np.setdiff1d(np.arange(n), other), kind, y_pred.T)
    if other.size:
        y_rep, lws, obs, origins = _adapted_samples(data, res, model, random_seed, simulate, other.size)
        if obs.size:
            scores[obs] = weighted_scores(y_rep, y_obs[obs], lws, kind)
            used[obs] = origins
            _check_finite(res, scores, obs, kind, y_rep)
    else:
        warn_unkept(res, used)
    return _result(res, scores, used, kind, pointwise)


def _has_weights(res):
    """Whether ``res`` keeps the weights of every observation's ``elpd_i`` (a result of ``pl.loo`` with a model)."""
    return res.log_weights is not None and all(getattr(res, name, None) is not None
                                               for name in ("engine_config", "adapted_log_weights"))


def _bernoulli(data, res, model, kind, pointwise):
    """The scores of a Bernoulli outcome in closed form (:func:`bernoulli_scores`) at the LOO predictive probability
    ``p_i = sum_s w_s p(y_i = 1 | theta_s)`` under each observation's own weights (:func:`ppl_loo.loo_expectations`
    of the model's ``predicted_probability``)."""
    prob = expectation(data, res, model.predicted_probability, model, with_khat=False)
    p = np.asarray(prob.values, dtype=float).reshape(-1)
    used = np.asarray(prob["weights"].values).astype(object).reshape(-1)
    y_obs = _observed(data, res, model, p.size)
    if np.any((y_obs != 0) & (y_obs != 1)):
        raise ValueError(f"the observed {res.var_name!r} of a Bernoulli model must be 0 or 1; found "
                         f"{np.unique(y_obs[(y_obs != 0) & (y_obs != 1)])[:5]}.")
    if np.any(~np.isfinite(p) | (p < 0) | (p > 1)):
        raise ValueError("the model's predicted_probability gave LOO probabilities outside [0, 1].")
    scores = bernoulli_scores(p, y_obs, kind)
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        names = ", ".join(res.obs_labels(bad, limit=10)) + (" and more" if bad.size > 10 else "")
        raise ValueError(f"the {kind} of {bad.size} observation(s) ({names}) is not finite: their LOO predictive "
                         "probability p(y_i = 1) is 0 or 1 to double precision, so the predictive is a point mass "
                         "and SCRPS = -E|Y - y| / E|Y - Y'| - log(E|Y - Y'|) / 2 diverges (E|Y - Y'| = 0). Use "
                         "kind='crps', which is defined there.")
    return _result(res, scores, used, kind, pointwise)


def bernoulli_scores(p, y_obs, kind):
    """CRPS or SCRPS ``(n,)`` of the Bernoulli predictives ``P(Y = 1) = p`` at ``y_obs`` in ``{0, 1}`` (larger is
    better, as :func:`weighted_scores`).

    For ``X, X'`` independent draws of the predictive, ``A = E|X - y| = 1 - P(Y = y)`` and ``G = E|X - X'| = 2 p (1 -
    p)``: ``CRPS = -(A - G / 2) = -(y - p)^2`` (the Brier score) and ``SCRPS = -A / G - log(G) / 2 = -1 / (2 P(Y =
    y)) - log(2 p (1 - p)) / 2``, written without the cancellation of ``A / G`` (``1 - P(Y = y)`` cancels). Of a
    mixture of Bernoulli draws (the LOO predictive, weights ``w_s``), ``p = sum_s w_s p_s``: the mixture is itself
    Bernoulli (the weighted mean of the per-draw ``2 p_s (1 - p_s)`` is not its ``G``). Not finite (SCRPS) where ``p``
    is 0 or 1.
    """
    p = np.asarray(p, dtype=float)
    y = np.asarray(y_obs, dtype=float)
    p_y = np.where(y == 1, p, 1.0 - p)
    if kind == "crps":
        return -((1.0 - p_y) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -0.5 / p_y - 0.5 * np.log(2.0 * p * (1.0 - p))


def _other_weights(res):
    """The flat indices of the observations whose ``elpd_i`` has other weights than plain PSIS (adapted, or kept
    refit or mixture draws), from the result alone."""
    if getattr(res, "engine_config", None) is None:
        return np.zeros(0, dtype=np.int64)
    parts = [np.asarray(w[dim].values, dtype=np.int64) for w, dim in
             ((getattr(res, "adapted_log_weights", None), "adapted"), (getattr(res, "kept_log_weights", None), "kept"))
             if w is not None]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def weighted_scores(y_rep, y_obs, log_weights, kind):
    """CRPS or SCRPS ``(n,)`` of weighted draws, as ``arviz_stats`` defines them (larger is better): draws ``y_rep``
    ``(n, M)`` with log weights ``(n, M)`` (``-inf``: no weight) at ``y_obs`` ``(n,)``, one observation per row.

    With the normalized weights ``w``, ``A = sum_s w_s |y_s - y|`` and the weighted Gini mean difference
    ``G = sum_s sum_t w_s w_t |y_s - y_t|``, ``CRPS = -(A - G / 2)`` and ``SCRPS = -A / G - log(G) / 2`` (Bolin &
    Wallin 2023), ``arviz_stats``' probability-weighted-moment forms of the same sums. ``G`` is computed as
    ``2 sum_k (y_(k+1) - y_(k)) F_k (1 - F_k)`` over the sorted draws (``F_k`` the weight up to the ``k``-th, ``1 -
    F_k`` summed from above): a sum of non-negative terms, exact for tied draws (a discrete or binary outcome: ``G =
    2 p (1 - p)`` for 0/1 draws with weight ``p`` on 1) where ``2 F^- + w - 1`` cancels, and positive whenever two
    draws of positive weight differ. Draws of zero weight change nothing (padding).
    """
    y_rep = np.asarray(y_rep, dtype=float)
    lw = np.asarray(log_weights, dtype=float)
    y_obs = np.asarray(y_obs, dtype=float).reshape(-1, 1)
    w = np.exp(lw - np.max(lw, axis=1, keepdims=True))
    w /= np.sum(w, axis=1, keepdims=True)
    a = np.sum(np.where(w > 0, w * np.abs(y_rep - y_obs), 0.0), axis=1)
    order = np.argsort(y_rep, axis=1, kind="mergesort")
    x = np.take_along_axis(y_rep, order, axis=1)
    ws = np.take_along_axis(w, order, axis=1)
    below = np.cumsum(ws, axis=1)[:, :-1]
    above = np.cumsum(ws[:, ::-1], axis=1)[:, ::-1][:, 1:]
    g = 2.0 * np.sum(np.diff(x, axis=1) * below * above, axis=1)
    if kind == "crps":
        return -(a - g / 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -(a / g) - 0.5 * np.log(g)


def _check_finite(res, scores, index, kind, draws):
    """A ValueError naming the observations ``index`` whose score is not finite, and why."""
    index = np.asarray(index, dtype=np.int64)
    bad = index[~np.isfinite(scores[index])]
    if not bad.size:
        return
    names = ", ".join(res.obs_labels(bad, limit=10)) + (" and more" if bad.size > 10 else "")
    if kind == "scrps":
        raise ValueError(f"the scrps of {bad.size} observation(s) ({names}) is not defined by their draws: every "
                         "draw of positive weight has the same value y_rep_i (or a value is not finite), so the mean "
                         "difference E|Y - Y'| of the predictive is 0 and SCRPS = -E|Y - y| / E|Y - Y'| - log(E|Y - "
                         "Y'|) / 2 is 0 / 0 (arviz_stats.loo_score gives NaN there, or a value of its rounding error). "
                         "For a Bernoulli outcome pass model= with a result of pl.loo(data, model): the SCRPS is "
                         "then computed in closed form from the predicted probabilities. Otherwise more posterior "
                         "predictive draws may vary, or use kind='crps', which is defined for a constant "
                         "predictive.")
    raise ValueError(f"the {kind} of {bad.size} observation(s) ({names}) is not finite: non-finite "
                     "posterior_predictive draws or observed values.")


def _plain(data, res, kind, pointwise):
    """A plain PSIS-LOO result (it keeps no weights): ``arviz_stats.loo_score`` itself, the pointwise scores with
    the coordinate ``weights`` (all ``"psis"``)."""
    out = arviz_stats.loo_score(data, var_name=res.var_name, kind=kind, pointwise=True)
    values = np.asarray(out.pointwise.values, dtype=float).reshape(-1)
    _check_finite(res, values, np.arange(values.size), kind, None)
    out = out._replace(se=sample_se(values))  # arviz_stats' SE uses the population SD
    if not pointwise:
        return namedtuple(kind.upper(), ["mean", "se"])(out.mean, out.se)
    return out._replace(pointwise=out.pointwise.rename(kind).assign_coords(
        weights=(out.pointwise.dims, np.full(out.pointwise.shape, "psis"))))


def sample_se(scores):
    """The standard error of the mean of the pointwise ``scores``, ``sd(scores) / sqrt(n)`` with the sample SD (R
    ``loo``'s ``loo_crps``/``loo_scrps``; ``arviz_stats.loo_score`` uses the population SD, ``sqrt((n - 1) / n)``
    times it); 0 for one score."""
    scores = np.asarray(scores, dtype=float).ravel()
    if scores.size < 2:
        return 0.0
    return float(np.std(scores, ddof=1) / np.sqrt(scores.size))


def _predictive(data, res):
    """The ``posterior_predictive`` draws ``(S, n)`` (chain-major, as ``arviz_stats`` flattens them) and the
    observed values ``(n,)`` of the result's variable, or a ValueError naming the missing input."""
    var, dims = res.var_name, tuple(res.elpd_i.dims)
    groups = getattr(data, "children", {})
    for group in ("posterior_predictive", "observed_data"):
        if group not in groups or var not in data[group].data_vars:
            what = "one replicated y_rep per posterior draw" if group == "posterior_predictive" else "the observed y"
            raise ValueError(f"`data` has no {group} group with the variable {var!r}: loo_score needs {what}, "
                             "as arviz_stats.loo_score (PyMC: pm.sample_posterior_predictive(idata, "
                             "extend_inferencedata=True)).")
    pp = data["posterior_predictive"][var]
    if set(pp.dims) != {"chain", "draw", *dims}:
        raise ValueError(f"posterior_predictive {var!r} has dims {pp.dims}; expected ('chain', 'draw', *{dims}) "
                         "(the log-likelihood's).")
    y_pred = np.asarray(pp.transpose("chain", "draw", *dims).values, dtype=float)
    y_pred = y_pred.reshape(-1, int(np.prod(res.elpd_i.shape)))
    if y_pred.shape[0] != res.n_samples:
        raise ValueError(f"posterior_predictive {var!r} has {y_pred.shape[0]} draws but the result was computed "
                         f"from {res.n_samples}: pass the data the result was computed from.")
    y_obs = np.asarray(data["observed_data"][var].transpose(*dims).values, dtype=float).reshape(-1)
    if y_obs.size != y_pred.shape[1]:
        raise ValueError(f"observed_data {var!r} has {y_obs.size} values but the result has {y_pred.shape[1]} "
                         "observations.")
    return y_pred, y_obs


def _observed(data, res, model, n):
    """The observed values ``(n,)``: ``observed_data[var_name]`` of ``data``, else the model's own."""
    var, dims = res.var_name, tuple(res.elpd_i.dims)
    if "observed_data" in getattr(data, "children", {}) and var in data["observed_data"].data_vars:
        y_obs = np.asarray(data["observed_data"][var].transpose(*dims).values, dtype=float).reshape(-1)
    elif model.obs.observed is not None:
        y_obs = np.asarray(model.obs.observed, dtype=float).reshape(-1)
    else:
        raise ValueError(f"`data` has no observed_data group with the variable {var!r} and the model does not carry "
                         "the observed values: loo_score needs the observed y.")
    if y_obs.size != n:
        raise ValueError(f"observed_data {var!r} has {y_obs.size} values but the result has {n} observations.")
    return y_obs


def _adapted_samples(data, res, model, random_seed, simulate, n_other):
    """``(y_rep (a, M), log weights (a, M), observations (a,), origins (a,))``: the draws of every observation with
    other weights than plain PSIS (``origin``: adapted, refit, mixture), ``y_rep_i`` simulated at its points, rows
    padded with weight 0. Every input is checked before the points are built or anything is simulated."""
    model = checked_model(data, res, model, "loo_score")
    if simulate is not None and not callable(simulate):
        raise TypeError("`simulate` must be a callable simulate(params, rng) -> array (M, *obs_shape).")
    if simulate is None and model.simulate is None:
        raise ValueError(f"{n_other} observation(s) use adapted proposals, refit or mixture draws, and the "
                         f"{model.kind} model cannot simulate y_rep at their points: pass "
                         "simulate=callable(params, rng) -> y_rep (M, *obs_shape) to pl.loo_score.")
    entry = entry_cache(data, res, model)
    pts = entry.points
    used = np.full(res.n_data_points, "psis", dtype=object)
    used[pts.obs] = pts.origin
    warn_unkept(res, used)  # refit/mixture/SMC draws the result did not keep
    if not pts.obs.size:
        empty = np.zeros((0, 1))
        return empty, empty, pts.obs, pts.origin
    random_seed = seed_from(random_seed, pts.rows, pts.log_weights)
    seed = _seed_key(random_seed)
    key = None if seed is None else (seed, "model" if simulate is None else simulate)
    y_rep = entry.simulated.get(key) if key is not None else None
    if y_rep is None:
        rng = random_seed if isinstance(random_seed, np.random.Generator) else np.random.default_rng(random_seed)
        if simulate is None:
            y_rep = _model_simulated(model, pts, rng)
        else:
            y_rep = _simulated(simulate, pts, constrained_rows(pts, model), rng, res.n_data_points)
        if key is not None:
            entry.simulated[key] = y_rep
    sizes = np.diff(pts.bounds)
    m = int(sizes.max())
    y_pad = np.zeros((pts.obs.size, m))
    lw_pad = np.full((pts.obs.size, m), -np.inf)
    for j, _, rows, _ in pts.sets():
        y_pad[j, :sizes[j]] = y_rep[rows]
        lw_pad[j, :sizes[j]] = pts.log_weights[rows]
    return y_pad, lw_pad, pts.obs, pts.origin


def _seed_key(random_seed):
    """The seed as a cache key (an int), or None for a ``Generator`` (its draws depend on its state)."""
    if isinstance(random_seed, (int, np.integer)) and not isinstance(random_seed, bool):
        return int(random_seed)
    return None


def constrained_rows(pts, model):
    """The result's other-than-PSIS points as constrained parameters ``name -> (R, ...)``, converted in blocks of
    ``S`` rows (the shape of the posterior draws: one compilation)."""
    S = pts.theta.shape[0]
    parts = []
    for start, stop, block in blocks(pts.rows, S):
        parts.append({k: np.asarray(v)[:stop - start] for k, v in model.constrain(block).items()})
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _model_simulated(model, pts, rng):
    """``y_rep`` ``(R,)``: one draw of each row's own observation at the row, from the model's own simulator
    (``Model.simulate``: a PyMC model's JAX sampler of its observed distribution, ``pm.sample_posterior_predictive``
    where there is none), in blocks of ``S`` rows (the shape of the posterior draws: one compilation)."""
    S = pts.theta.shape[0]
    out = np.empty(pts.rows.shape[0])
    for start, stop, block in blocks(pts.rows, S):
        y_rep = np.asarray(model.simulate(block, rng), dtype=np.float64).reshape(S, -1)
        out[start:stop] = y_rep[np.arange(stop - start), pts.row_obs[start:stop]]
    if not np.all(np.isfinite(out)):
        raise ValueError("the model's simulator returned non-finite y_rep at the adapted points.")
    return out


def _simulated(simulate, pts, params, rng, n):
    """``y_rep`` ``(R,)`` of each row's own observation: ``simulate`` called once per group of observations (their
    points consecutive rows, column ``i`` kept from observation ``i``'s block)."""
    out = np.empty(pts.rows.shape[0])
    for first, last in _groups(np.diff(pts.bounds), n):
        lo, hi = int(pts.bounds[first]), int(pts.bounds[last])
        rows = hi - lo
        y_rep = np.asarray(simulate({k: v[lo:hi] for k, v in params.items()}, rng), dtype=float)
        if y_rep.size != rows * n or not np.all(np.isfinite(y_rep)):
            raise ValueError(f"simulate returned an array of shape {y_rep.shape} (or non-finite values) at {rows} "
                             f"points; expected ({rows}, *obs_shape) with {n} observations, all finite.")
        out[lo:hi] = y_rep.reshape(rows, n)[np.arange(rows), pts.row_obs[lo:hi]]
    return out


def _groups(sizes, n):
    """``(first, last)`` set indices of consecutive groups of observations' points with at most ``_MAX_VALUES``
    simulated values (``points x n``) each (one observation per group where one alone has more)."""
    groups, first, rows = [], 0, 0
    for j, m in enumerate(sizes):
        if j > first and (rows + m) * n > _MAX_VALUES:
            groups.append((first, j))
            first, rows = j, 0
        rows += int(m)
    groups.append((first, len(sizes)))
    return groups


def _result(res, scores, used, kind, pointwise):
    """``arviz_stats.loo_score``' namedtuple: mean and SE of the pointwise scores (its formulas), and with
    ``pointwise`` the scores and the k-hat of the weights each used."""
    if not np.all(np.isfinite(scores)):
        bad = np.flatnonzero(~np.isfinite(scores))
        raise ValueError(f"the {kind} of observation(s) {', '.join(res.obs_labels(bad, limit=10))} is not finite: "
                         "non-finite posterior_predictive draws or observed values (or, for the SCRPS, constant "
                         "predictive draws: log 0).")
    mean, se = float(np.mean(scores)), sample_se(scores)
    template = res.elpd_i
    k_psis = res.pareto_k_psis if getattr(res, "pareto_k_psis", None) is not None else res.pareto_k
    # the k-hat of the weights used: the adapted proposal's (NaN for refit and mixture draws), plain PSIS's elsewhere
    k = np.where(used != "psis", np.asarray(res.pareto_k.values).ravel(), np.asarray(k_psis.values).ravel())
    k = xr.DataArray(k.reshape(template.shape), dims=template.dims, coords=template.coords, name="pareto_k")
    good_k = getattr(res, "good_k", None) or min(1 - 1 / np.log10(res.n_samples), 0.7)
    if np.any(k.values > good_k):
        warnings.warn(f"{int(np.sum(k.values > good_k))} observation(s) have a Pareto k-hat above {good_k:.2f} for "
                      f"the weights of their {kind}: those scores are not reliable (pointwise=True gives pareto_k).",
                      UserWarning, stacklevel=3)
    name = kind.upper()
    if not pointwise:
        return namedtuple(name, ["mean", "se"])(mean, se)
    values = xr.DataArray(scores.reshape(template.shape), dims=template.dims, coords=template.coords, name=kind)
    values = values.assign_coords(weights=(template.dims, used.astype(str).reshape(template.shape)))
    return namedtuple(name, ["mean", "se", "pointwise", "pareto_k"])(mean, se, values, k)
