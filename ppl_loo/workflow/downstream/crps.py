"""``ppl_loo.loo_score``: LOO CRPS and SCRPS with the adapted weights (issue 28).

This module owns the weighted predictive draws ``(y_rep_i, log w)`` of every observation under the weights its
``elpd_i`` was computed with, and the scores of those draws:

- an observation that kept plain PSIS uses the ``posterior_predictive`` draws and ``res.log_weights``, exactly
  what ``arviz_stats.loo_score`` uses (so where nothing is adapted the numbers are ``arviz_stats.loo_score``'s on
  the same data);
- an observation with an adapted proposal uses that proposal's points (:func:`ppl_loo.loo_expectation`'s, rebuilt
  from the posterior draws with the model) and its stored weights, with ``y_rep_i`` simulated at each point
  (PyMC: ``pm.sample_posterior_predictive`` on those points; otherwise the user's ``simulate=``), seeded from
  ``random_seed``;
- an observation whose ``elpd_i`` came from a refit or the mixture run uses the draws the result kept
  (:mod:`ppl_loo.workflow.loo.kept`) and their weights the same way; where they were not kept (a refit read from a
  checkpoint) it falls back to plain PSIS, with :func:`ppl_loo.loo_expectation`'s warning.

The score of each observation is ``arviz_stats``' own array function (``array_stats.loo_score``: the
probability-weighted-moment estimator of Taillardat et al. 2016 for the CRPS, the weighted Gini mean difference for
the SCRPS of Bolin & Wallin 2023), both as maximization scores (the CRPS negated), as ``arviz_stats.loo_score``.
"""

from __future__ import annotations

import warnings
from collections import namedtuple

import arviz_stats
import numpy as np
import xarray as xr
from arviz_stats.base import array_stats

from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.pymc.adapter import PyMCModel
from ppl_loo.workflow.downstream.expectation import adapted_points, checked_model, warn_unkept

__all__ = ["loo_score", "SCORES"]

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
        (its points are rebuilt with it).
    kind : {"crps", "scrps"}
        The continuous ranked probability score or its scale-invariant version (Bolin & Wallin 2023).
    random_seed : int or numpy.random.Generator, optional
        Seed of the ``y_rep_i`` simulated at the adapted proposals' points; required when any observation is
        adapted.
    pointwise : bool
        Also return the per-observation scores and the k-hat of the weights each used.
    simulate : callable, optional
        ``simulate(params, rng) -> array (M, *obs_shape)``: one replicated data set per point, ``params`` the
        model's constrained parameters at ``M`` points (as in :func:`ppl_loo.loo_expectation`), ``rng`` a
        ``numpy.random.Generator``. Default for a PyMC model: ``pm.sample_posterior_predictive`` of the observed
        variable at the points. Required for other models when an observation is adapted.

    Returns
    -------
    namedtuple
        As ``arviz_stats.loo_score``: ``CRPS`` or ``SCRPS`` with ``mean`` (the mean of the pointwise scores,
        larger is better: the CRPS is negated, the SCRPS is so oriented by definition) and ``se``; with
        ``pointwise=True`` also ``pointwise`` (a DataArray over the observation dims, with the coordinate
        ``weights``: ``"psis"``, ``"adapted"``, ``"refit"`` or ``"mixture"``, as :func:`ppl_loo.loo_expectation`) and
        ``pareto_k`` (the k-hat of the weights used; NaN for refit and mixture draws).
    """
    if kind not in SCORES:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(map(repr, SCORES))}.")
    y_pred, y_obs = _predictive(data, res)
    if res.log_weights is None:  # plain PSIS-LOO (pl.loo(data), no model): the weights are arviz_stats' own
        return _plain(data, res, kind, pointwise)
    n = y_obs.size
    lw = np.asarray(res.log_weights.transpose("chain", "draw", ...).values, dtype=float).reshape(-1, n)
    scores = _scores(y_pred.T, y_obs, lw.T, kind)
    used = np.full(n, "psis", dtype=object)
    if getattr(res, "engine_config", None) is not None:  # computed with a model: it may have adapted
        for i, x, lw_i, source in _adapted_samples(data, res, model, random_seed, simulate):
            scores[i], used[i] = _scores(x[None], y_obs[i:i + 1], lw_i[None], kind)[0], source
    return _result(res, scores, used, kind, pointwise)


def _plain(data, res, kind, pointwise):
    """A plain PSIS-LOO result (it keeps no weights): ``arviz_stats.loo_score`` itself, the pointwise scores with
    the coordinate ``weights`` (all ``"psis"``)."""
    out = arviz_stats.loo_score(data, var_name=res.var_name, kind=kind, pointwise=pointwise)
    if not pointwise:
        return out
    return out._replace(pointwise=out.pointwise.rename(kind).assign_coords(
        weights=(out.pointwise.dims, np.full(out.pointwise.shape, "psis"))))


def _scores(y_rep, y_obs, log_weights, kind):
    """Scores ``(n,)`` of draws ``y_rep`` ``(n, M)`` with log weights ``(n, M)`` at ``y_obs`` ``(n,)``:
    ``arviz_stats``' own array function, one observation per row."""
    out = array_stats.loo_score(y_rep, y_obs, log_weights, kind=kind, chain_axis=None, draw_axis=-1)
    return np.asarray(out, dtype=float).reshape(-1)


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


def _adapted_samples(data, res, model, random_seed, simulate):
    """``[(i, y_rep_i at the kept points, their log weights, source)]`` of every observation with other weights than
    plain PSIS (``source``: adapted, refit, mixture)."""
    n_adapted = sum(int(w.sizes[dim]) for w, dim in ((res.adapted_log_weights, "adapted"),
                                                    (getattr(res, "kept_log_weights", None), "kept")) if w is not None)
    if not n_adapted:  # nothing to simulate: no model needed (refit/mixture ones without kept draws are still named)
        warn_unkept(res, np.full(res.n_data_points, "psis", dtype=object))
        return []
    if random_seed is None:
        raise ValueError(f"{n_adapted} observation(s) use adapted proposals, refit or mixture draws, whose y_rep_i are "
                         "simulated at those points: pass random_seed=<int> to pl.loo_score.")
    model = checked_model(data, res, model, "loo_score")
    if simulate is not None and not callable(simulate):
        raise TypeError("`simulate` must be a callable simulate(params, rng) -> array (M, *obs_shape).")
    points = _adapted_points(data, res, model)  # also warns where refit/mixture/SMC draws are not kept
    if not points:
        return []
    if simulate is None:
        if not isinstance(model.source, PyMCModel):
            raise ValueError(f"{len(points)} observation(s) use adapted proposals, refit or mixture draws, and the "
                             f"model ({type(model.source).__name__}) cannot simulate y_rep at their points: pass "
                             "simulate=callable(params, rng) -> y_rep (M, *obs_shape) to pl.loo_score.")
        simulate = _pymc_simulator(model.source)
    rng = random_seed if isinstance(random_seed, np.random.Generator) else np.random.default_rng(random_seed)
    return _simulated(simulate, points, rng, res.n_data_points)


def _adapted_points(data, res, model):
    """``[(i, params at the kept points, their log weights, source)]`` of every observation with other weights than
    plain PSIS (the points :func:`ppl_loo.loo_expectation` weights); warns, as it does, where refit or mixture draws are
    not kept."""
    out = list(adapted_points(data, res, model))
    used = np.full(res.n_data_points, "psis", dtype=object)
    for i, _, _, source in out:
        used[i] = source
    warn_unkept(res, used)
    return out


def _simulated(simulate, points, rng, n):
    """``[(i, y_rep_i (M_i,), log weights (M_i,), source)]``: ``simulate`` called once per group of observations (their
    points concatenated, column ``i`` kept from observation ``i``'s block)."""
    out = []
    for group in _groups(points, n):
        sizes = [len(item[2]) for item in group]
        rows = sum(sizes)
        params = {k: np.concatenate([item[1][k] for item in group]) for k in group[0][1]}
        y_rep = np.asarray(simulate(params, rng), dtype=float)
        if y_rep.size != rows * n or not np.all(np.isfinite(y_rep)):
            raise ValueError(f"simulate returned an array of shape {y_rep.shape} (or non-finite values) at {rows} "
                             f"points; expected ({rows}, *obs_shape) with {n} observations, all finite.")
        y_rep = y_rep.reshape(rows, n)
        for (i, _, lw, source), end, size in zip(group, np.cumsum(sizes), sizes):
            out.append((i, y_rep[end - size:end, i], lw, source))
    return out


def _groups(points, n):
    """``points`` in consecutive groups of at most ``_MAX_VALUES`` simulated values (``points x n``) each (one
    observation per group where one alone has more)."""
    groups, rows = [[]], 0
    for item in points:
        m = len(item[2])
        if groups[-1] and (rows + m) * n > _MAX_VALUES:
            groups, rows = groups + [[]], 0
        groups[-1].append(item)
        rows += m
    return groups


def _pymc_simulator(adapter):
    """``simulate(params, rng) -> (M, *obs_shape)`` of a PyMC model: ``pm.sample_posterior_predictive`` of the
    observed variable on a one-chain trace of the points (every free variable given, so only it is drawn)."""
    import pymc as pm  # PyMC only for a PyMC model (``import ppl_loo`` loads no PyMC)

    def simulate(params, rng):
        trace = xr.Dataset({name: (("chain", "draw") + tuple(f"{name}_dim_{k}" for k in range(v.ndim - 1)), v[None])
                            for name, v in params.items()})
        with warnings.catch_warnings():  # e.g. "Potentials are ignored": right here, the points are given
            warnings.simplefilter("ignore", UserWarning)
            pp = pm.sample_posterior_predictive(trace, model=adapter.model, var_names=[adapter.var_name],
                                                random_seed=rng, progressbar=False)
        return np.asarray(pp["posterior_predictive"][adapter.var_name].values, dtype=float)[0]

    return simulate


def _result(res, scores, used, kind, pointwise):
    """``arviz_stats.loo_score``' namedtuple: mean and SE of the pointwise scores (its formulas), and with
    ``pointwise`` the scores and the k-hat of the weights each used."""
    if not np.all(np.isfinite(scores)):
        bad = np.flatnonzero(~np.isfinite(scores))
        raise ValueError(f"the {kind} of observation(s) {', '.join(res.obs_labels(bad, limit=10))} is not finite: "
                         "non-finite posterior_predictive draws or observed values (or, for the SCRPS, constant "
                         "predictive draws: log 0).")
    mean, se = float(np.mean(scores)), float(np.std(scores) / np.sqrt(scores.size))
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
