"""``ppl_loo.loo_r2`` and ``ppl_loo.loo_metrics``: LOO R² and LOO predictive metrics with the adapted weights.

Both need the LOO predictive mean ``E_{-i}[y_rep_i] = E_{-i}[E[y_rep_i | theta]]`` of every observation, computed
with the weights ``elpd_i`` was computed with (:func:`ppl_loo.loo_expectations`: the adapted proposal's where one was
used). From there the arithmetic is ``arviz_stats``' own (its ``loo_r2`` accessor: Gelman et al. 2019's Bayesian R²
with LOO residuals and a Dirichlet-weighted bootstrap; its ``metrics``: MAE, MSE, RMSE, accuracy, balanced
accuracy with their SEs, R ``loo``'s ``loo_predictive_metric``), so where nothing is adapted the numbers are
``arviz_stats.loo_r2`` / ``loo_metrics``' on the same draws.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import xarray as xr

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import seed_from
from ppl_loo.workflow.downstream.loo_expectations import checked_model, expectation

__all__ = ["loo_r2", "loo_metrics", "LooMetric", "METRICS"]

#: the metrics of :func:`loo_metrics` (``arviz_stats.loo_metrics``' names)
METRICS = ("mae", "mse", "rmse", "acc", "acc_balanced")


class LooMetric(NamedTuple):
    """A LOO predictive metric: its estimate and standard error (``arviz_stats``' ``metrics``)."""

    kind: str
    mean: float
    se: float


def _loo_mean(data, res, model, mean, y, caller):
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


@uses_x64
def loo_r2(data, res, *, model=None, mean=None, y=None, n_simulations=4000, random_seed=None):
    """LOO R² (``arviz_stats.loo_r2``, Gelman et al. 2019) with the LOO predictive means of ``res``' weights.

    Parameters
    ----------
    data, res, model
        As in :func:`ppl_loo.loo_expectations`.
    mean : callable, optional
        ``mean(params) -> array (M, *obs_shape)``: ``E[y_rep_i | theta]``. Default: the model's own (a PyMC
        model's ``moments.mean`` of the observed distribution; ``predicted_probability`` of a Bernoulli model).
    y : array, optional
        The observed values (default: the model's).
    n_simulations : int
        Dirichlet-weighted bootstrap draws.
    random_seed : int or numpy.random.Generator, optional
        Seed of the bootstrap. None: a seed derived from the observed values and their LOO predictive means, so
        that a rerun on the same input reproduces.

    Returns
    -------
    DataArray
        ``loo_r2`` over ``sample`` (``n_simulations`` draws of R², clipped to [-1, 1] as ``arviz_stats``), with the
        LOO predictive means as the attribute ``ypred_loo``; summarize it with ``.mean()`` or
        ``arviz_stats.eti``.
    """
    y, pred = _loo_mean(data, res, model, mean, y, "loo_r2")
    seed = seed_from(random_seed, y, pred)
    random_state = int(seed) % 2**32 if isinstance(seed, (int, np.integer)) else seed  # scipy's int seeds: 32 bits
    samples = xr.DataArray(y, dims=["obs"]).azstats.loo_r2(ypred_loo=xr.DataArray(pred, dims=["obs"]),
                                                            n_simulations=int(n_simulations),
                                                            random_state=random_state)
    return xr.DataArray(np.asarray(samples, dtype=float).reshape(-1), dims=["sample"], name="loo_r2",
                        attrs={"ypred_loo": pred})


@uses_x64
def loo_metrics(data, res, *, model=None, kind="rmse", mean=None, y=None):
    """A LOO predictive metric (``arviz_stats.loo_metrics``; R ``loo``'s ``loo_predictive_metric``) with the LOO
    predictive means of ``res``' weights.

    ``kind``: ``"mae"``, ``"mse"``, ``"rmse"``, ``"acc"`` (accuracy of ``mean > 0.5`` for a binary outcome) or
    ``"acc_balanced"``; ``mean`` and ``y`` as in :func:`loo_r2`. Returns a :class:`LooMetric` (estimate and SE).
    """
    if kind not in METRICS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(map(repr, METRICS))}.")
    y, pred = _loo_mean(data, res, model, mean, y, "loo_metrics")
    from arviz_stats.base import array_stats

    est, se = array_stats.metrics(y, pred, kind=kind)
    return LooMetric(kind, float(est), float(se))
