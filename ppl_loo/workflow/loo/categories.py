"""What happened to each observation of a LOO result: one category per observation, the one source of every
count ``ppl_loo`` prints about a result (``pl.compare``'s count columns, the HTML report's tables, prose and
legends, ``ppl-loo loo --json``).

The categories, in order of precedence: ``"doubtful"`` (nothing vouches for ``elpd_i``), ``"refit"`` (exact
LOO by refitting), ``"adapted"`` (the ``elpd_i`` shown came from an adapted proposal of the search: ``evidence``
``"adapted"``, ``"adapted+mixture"`` or ``"adapted+smc"``, whether or not a second opinion confirmed it),
``"second_opinion"`` (vouched for by mixture importance sampling or tempered SMC, without an adapted proposal:
``"psis+mixture"``, ``"mixture"``, ``"mixture+smc"``, ``"psis+smc"``), ``"psis"`` (plain PSIS alone). Each
observation is in exactly one, so the counts add up to the number of observations.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CATEGORIES", "SHORT", "NOT_ADAPTED", "UNKEPT", "observation_categories", "category_counts", "transforms",
           "evidence", "after_loo_weights"]

#: what happened to an observation (key: its text), in the order of the report's legends
CATEGORIES = {"psis": "not adapted (plain PSIS)", "adapted": "adapted (search)",
              "second_opinion": "vouched by a second opinion (mixture, SMC)", "refit": "refit (exact LOO)",
              "doubtful": "doubtful"}
#: the categories' names in table headers and cells
SHORT = {"psis": "not adapted", "adapted": "adapted", "second_opinion": "second opinion", "refit": "refit",
         "doubtful": "doubtful"}
#: ``transform`` values that are no adapted proposal
NOT_ADAPTED = ("psis", "failed", "refit", "mixture", "smc")
#: ``transform`` values whose draws a result keeps only in ``kept_draws`` (refit, mixture; never SMC's particles):
#: where they are not there, the after-LOO functions fall back to plain PSIS weights
UNKEPT = ("refit", "mixture", "smc")


def observation_categories(res):
    """One key of :data:`CATEGORIES` per observation of ``res`` (flat, in the order of
    ``res.elpd_i.values.ravel()``).

    ``"doubtful"``: ``res.doubtful`` (a refit that did not converge included; for a result without that field, a
    ``"failed"`` transform); ``"refit"``: ``res.refit`` or a ``"refit"`` transform; ``"adapted"``: ``elpd_i``
    came from an adapted proposal (any other transform than :data:`NOT_ADAPTED`; for a vouched observation, its
    ``res.evidence`` names ``"adapted"``); ``"second_opinion"``: ``res.evidence`` names mixture importance sampling
    or tempered SMC, or the transform is one of them; else ``"psis"``. A plain ``arviz_stats`` ``ELPDData`` is all
    ``"psis"``. ``LooResult.categories`` and ``LooResult.counts`` are this function and :func:`category_counts` of
    the result.
    """
    n = int(np.asarray(res.elpd_i.values).size)
    tr, ev = transforms(res), evidence(res)
    doubtful = (tr == "failed") if getattr(res, "doubtful", None) is None else _bools(res.doubtful, n)
    refit = _bools(getattr(res, "refit", None), n) | (tr == "refit")
    second = (np.char.find(ev, "mixture") >= 0) | (np.char.find(ev, "smc") >= 0) | np.isin(tr, ("mixture", "smc"))
    out = np.where(second, "second_opinion", "psis").astype("<U16")
    out[~np.isin(tr, NOT_ADAPTED)] = "adapted"
    out[refit] = "refit"
    out[doubtful] = "doubtful"
    return out


def category_counts(categories):
    """``{category: number of observations}`` over every key of :data:`CATEGORIES` (zeros included)."""
    categories = np.asarray(categories)
    return {key: int(np.sum(categories == key)) for key in CATEGORIES}


def transforms(res):
    """``res.transform`` flat as strings (``"psis"`` for a result without it)."""
    return _strings(getattr(res, "transform", None), np.asarray(res.elpd_i.values).size, "psis")


def evidence(res):
    """``res.evidence`` flat as strings (``""`` for a result without it)."""
    return _strings(getattr(res, "evidence", None), np.asarray(res.elpd_i.values).size, "")


def _strings(da, n, default):
    return np.full(n, default, dtype="<U32") if da is None else np.asarray(da.values).astype(str).reshape(-1)


def _bools(da, n):
    return np.zeros(n, bool) if da is None else np.asarray(da.values).astype(bool).reshape(-1)


def after_loo_weights(res):
    """Which weights the after-LOO functions (``pl.loo_expectations``, ``loo_pit``, ``loo_score``, ``loo_r2``,
    ``loo_metrics``, ``loo_roc``) use per observation (flat): ``"adapted"`` where ``elpd_i`` used an adapted proposal
    or came from a refit or mixture importance sampling whose draws the result kept (``res.kept_log_weights``:
    the weights of the draws ``elpd_i`` came from), ``"fallback"`` where ``elpd_i`` came from draws the result does
    not keep (a refit read from a checkpoint, draws beyond the kept budget: plain PSIS weights there, with a
    warning), ``"psis"`` elsewhere."""
    tr = transforms(res)
    out = np.where(np.isin(tr, NOT_ADAPTED), "psis", "adapted").astype("<U8")
    kept = getattr(res, "kept_log_weights", None)
    is_kept = np.zeros(tr.size, bool)
    if kept is not None:
        is_kept[np.asarray(kept["kept"].values, dtype=int)] = True
    out[np.isin(tr, UNKEPT) & is_kept] = "adapted"
    out[np.isin(tr, UNKEPT) & ~is_kept] = "fallback"
    return out
