"""``ppl_loo.loo_metrics``: LOO predictive metrics (MAE, MSE, RMSE, accuracy) with the adapted weights.

The LOO predictive means come from the weights ``elpd_i`` was computed with (:func:`ppl_loo.loo_expectations`);
from there the arithmetic is ``arviz_stats``' ``metrics`` (R ``loo``'s ``loo_predictive_metric``), so where nothing
is adapted the numbers are ``arviz_stats.loo_metrics``' on the same draws.
"""

from __future__ import annotations

from typing import NamedTuple

from ppl_loo.jax_settings import uses_x64
from ppl_loo.workflow.downstream.loo_expectations import observed_and_loo_means

__all__ = ["loo_metrics", "LooMetric", "METRICS"]

#: the metrics of :func:`loo_metrics` (``arviz_stats.loo_metrics``' names)
METRICS = ("mae", "mse", "rmse", "acc", "acc_balanced")


class LooMetric(NamedTuple):
    """A LOO predictive metric: its estimate and standard error (``arviz_stats``' ``metrics``)."""

    kind: str
    mean: float
    se: float


@uses_x64
def loo_metrics(data, res, *, model=None, kind="rmse", mean=None, y=None):
    """A LOO predictive metric (``arviz_stats.loo_metrics``; R ``loo``'s ``loo_predictive_metric``) with the LOO
    predictive means of ``res``' weights.

    ``kind``: ``"mae"``, ``"mse"``, ``"rmse"``, ``"acc"`` (accuracy of ``mean > 0.5`` for a binary outcome) or
    ``"acc_balanced"``; ``mean`` and ``y`` as in :func:`ppl_loo.loo_r2`. Returns a :class:`LooMetric` (estimate and SE).
    """
    if kind not in METRICS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(map(repr, METRICS))}.")
    y, pred = observed_and_loo_means(data, res, model, mean, y, "loo_metrics")
    from arviz_stats.base import array_stats

    est, se = array_stats.metrics(y, pred, kind=kind)
    return LooMetric(kind, float(est), float(se))
