"""LOO predictive classification metrics: LOO predicted probabilities, ROC and PR curves, AUC.

``pl.loo_roc(data, res, model=model)`` turns an adaptive LOO result of a binary model into the LOO predicted
probability of every observation, ``E_{-i}[p(y_i = 1 | theta)]`` (a LOO expectation with each
observation's adapted weights, :func:`ppl_loo.loo_expectations`; paper Eq. 8), and scores those
out-of-sample probabilities against the labels: the ROC curve and its area (AUC), the
precision-recall curve and the average precision.

The array functions follow scikit-learn's conventions, so their outputs can be compared with
``sklearn.metrics`` directly: thresholds are the distinct scores; a tie between a positive and a
negative counts 1/2 in the AUC (Mann-Whitney); ``roc_curve`` starts at ``(0, 0)`` with threshold
``inf`` (``drop_intermediate=False``); ``precision_recall_curve`` has increasing thresholds and ends
at ``(recall 0, precision 1)``; ``average_precision = sum_k (R_k - R_{k-1}) P_k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr
from scipy.stats import rankdata

from ppl_loo.jax_settings import uses_x64
from ppl_loo.workflow.downstream.loo_expectations import checked_model, expectation

__all__ = ["loo_roc", "LooROC", "roc_curve", "roc_auc", "precision_recall_curve", "average_precision"]


# ----------------------------------------------------------------------------- array level
def _check(y, score):
    y = np.asarray(y).reshape(-1)
    score = np.asarray(score, dtype=np.float64).reshape(-1)
    if y.shape != score.shape:
        raise ValueError(f"labels ({y.size}) and scores ({score.size}) must have the same number of entries.")
    yf = y.astype(np.float64)
    if not np.isin(yf, (0.0, 1.0)).all():
        raise ValueError(f"labels must be 0 or 1; got values {np.unique(yf)[:10]}.")
    if not np.isfinite(score).all():
        raise ValueError("scores must be finite.")
    n_pos = int(yf.sum())
    if n_pos == 0 or n_pos == yf.size:
        raise ValueError("ROC and PR curves need both classes among the labels; got only one.")
    return yf, score


def _binary_curve(y, score):
    """Cumulative true and false positives at each distinct score, scores in decreasing order."""
    order = np.argsort(-score, kind="mergesort")
    s, yy = score[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # last index of each run of equal scores
    tps = np.cumsum(yy)[last]
    fps = (last + 1) - tps
    return fps, tps, s[last]


def roc_curve(y, score):
    """``(fpr, tpr, thresholds)`` at every distinct score, highest threshold first.

    As ``sklearn.metrics.roc_curve(y, score, drop_intermediate=False)``: the first point is
    ``(0, 0)`` with threshold ``inf``; ``tpr = TP / P`` and ``fpr = FP / N`` for ``score >= threshold``.
    """
    y, score = _check(y, score)
    fps, tps, thr = _binary_curve(y, score)
    fps, tps = np.r_[0, fps], np.r_[0, tps]
    return fps / fps[-1], tps / tps[-1], np.r_[np.inf, thr]


def roc_auc(y, score):
    """Area under the ROC curve: ``P(score_pos > score_neg) + P(score_pos == score_neg) / 2``.

    The Mann-Whitney statistic from average ranks; equal to the trapezoidal area under
    :func:`roc_curve` and to ``sklearn.metrics.roc_auc_score``.
    """
    y, score = _check(y, score)
    ranks = rankdata(score)  # ties get their average rank: counts 1/2
    n_pos = y.sum()
    n_neg = y.size - n_pos
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def precision_recall_curve(y, score):
    """``(precision, recall, thresholds)`` as ``sklearn.metrics.precision_recall_curve``.

    Thresholds increase; ``precision[k]`` and ``recall[k]`` are those of ``score >= thresholds[k]``,
    and a last point ``(precision 1, recall 0)`` without a threshold closes the curve.
    """
    y, score = _check(y, score)
    fps, tps, thr = _binary_curve(y, score)
    precision = tps / (tps + fps)
    recall = tps / tps[-1]
    return np.r_[precision[::-1], 1.0], np.r_[recall[::-1], 0.0], thr[::-1]


def average_precision(y, score):
    """``sum_k (R_k - R_{k+1}) P_k`` over the PR curve (``sklearn.metrics.average_precision_score``)."""
    precision, recall, _ = precision_recall_curve(y, score)
    return float(-np.sum(np.diff(recall) * precision[:-1]))


# ----------------------------------------------------------------------------- workflow level
@dataclass
class LooROC:
    """LOO predicted probabilities of a binary model and their ROC / PR summaries.

    Attributes
    ----------
    probability : xarray.DataArray
        ``E_{-i}[p(y_i = 1 | theta)]`` over the observation dims of the LOO result.
    y : numpy.ndarray
        The labels (0/1), flattened like ``probability``.
    auc : float
        Area under the LOO ROC curve (ties count 1/2).
    fpr, tpr, roc_thresholds : numpy.ndarray
        The ROC curve (:func:`roc_curve`).
    precision, recall, pr_thresholds : numpy.ndarray
        The precision-recall curve (:func:`precision_recall_curve`).
    average_precision : float
        Area under the PR curve as step function (:func:`average_precision`).
    """

    probability: xr.DataArray
    y: np.ndarray
    auc: float
    fpr: np.ndarray
    tpr: np.ndarray
    roc_thresholds: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    pr_thresholds: np.ndarray
    average_precision: float

    def __repr__(self):
        return (f"LooROC(n={self.y.size}, positives={int(self.y.sum())}, LOO AUC={self.auc:.4f}, "
                f"LOO average precision={self.average_precision:.4f})")


@uses_x64
def loo_roc(data, res, *, model=None, probability=None, y=None) -> LooROC:
    """LOO predicted probabilities, ROC and PR curves and AUC of a binary-outcome model.

    Parameters
    ----------
    data : xarray.DataTree
        The data ``res`` was computed from (its ``observed_data`` group gives the labels).
    res : LooResult
        From :func:`ppl_loo.loo` with a model.
    model : pymc.Model, StanModel or PosteriorModel
        The model the result was computed with (as passed to :func:`ppl_loo.loo`).
    probability : callable, optional
        ``probability(params) -> array (M, *obs_shape)``: ``p(y_i = 1 | theta)`` at ``M`` points, with
        ``params`` the model's constrained parameters (as in :func:`ppl_loo.loo_expectations`).
        Default: the model's own ``predicted_probability`` (the PyMC adapter has it for a Bernoulli
        observed variable).
    y : array, optional
        The labels; default ``observed_data[var_name]`` of ``data``, else the model's observed data.

    Returns
    -------
    LooROC

    Raises
    ------
    ValueError
        ``model`` is missing, no probability function is available, the labels are missing, not binary, of the wrong
        size or of one class only, or the probabilities leave [0, 1].
    """
    model = checked_model(data, res, model, "loo_roc")
    if probability is None:
        probability = model.predicted_probability
        if probability is None:
            raise ValueError(
                f"the {model.kind} model has no predicted probability; pass "
                "probability=callable(params) -> array (M, *obs_shape) of p(y_i = 1 | theta)."
            )
    prob = expectation(data, res, probability, model, with_khat=False)
    p = np.asarray(prob.values, dtype=np.float64).reshape(-1)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("the LOO expectations of `probability` are not in [0, 1]: is it a probability?")
    labels = _labels(data, res, model, y)
    if labels.size != p.size:
        raise ValueError(f"y has {labels.size} labels but the LOO result has {p.size} observations.")
    fpr, tpr, thr = roc_curve(labels, p)
    precision, recall, pthr = precision_recall_curve(labels, p)
    return LooROC(prob.rename("loo_probability"), labels.astype(np.int64), roc_auc(labels, p), fpr, tpr, thr,
                  precision, recall, pthr, average_precision(labels, p))


def _labels(data, res, model, y):
    if y is not None:
        return np.asarray(y).reshape(-1)
    name = getattr(res, "var_name", None)
    if "observed_data" in getattr(data, "children", {}):
        obs = data["observed_data"].to_dataset()
        if name in obs.data_vars:
            return np.asarray(obs[name].values).reshape(-1)
    observed = model.obs.observed
    if observed is not None:
        return np.asarray(observed).reshape(-1)
    raise ValueError(
        f"no labels: `data` has no observed_data[{name!r}] and the model none; pass y=... (0/1 per observation)."
    )
