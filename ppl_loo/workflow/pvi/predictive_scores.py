"""Held-out evaluation of predictive draws: log score, CRPS (fair estimator) and quadratic score.

:func:`predictive_scores` evaluates the draws of a DataTree (for example a ``pl.pvi`` result, or
any posterior) under a model built on a *test split* (PyMC: the same model after
``pm.set_data``; Stan and JAX: the same program / functions on the test data). The predictive
is the mixture over the draws:

- log score ``log mean_s p(y_i | theta_s)`` (higher is better);
- CRPS with one predictive draw per posterior draw and the fair estimator (lower is better; the
  energy score with the L2 norm for vector outcomes);
- quadratic score ``2 P_i(y_i) - sum_j P_i(j)^2`` with ``P_i(j) = mean_s Pr(y_i = j | theta_s)``
  (higher is better; a forecast of 1/2 on a binary outcome scores 1/2).
"""

from __future__ import annotations

import jax
import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import prng_key, seed_from
from ppl_loo.numerics.vi.scores import (
    crps_fair,
    energy_score_fair,
    log_score_eval,
    quadratic_score_eval,
)
from ppl_loo.workflow.options import resolve_options
from ppl_loo.workflow.pvi.options import ScoreOptions

__all__ = ["predictive_scores", "training_scores"]


def _pointwise(pm, theta, key, which):
    """Pointwise scores ``name -> (n,)`` of the draws ``theta`` ``(S, d)`` (unconstrained)."""
    out = {}
    ll = None
    if pm.eval_loglik is not None and ("log_score" in which or "_ll" in which):
        ll = np.asarray(pm.eval_loglik(jax.numpy.asarray(theta)))
        out["_ll"] = ll
        out["log_score"] = np.asarray(log_score_eval(ll))
    if "crps" in which and pm.eval_predict is not None and pm.terms.y is not None:
        sim = np.asarray(pm.eval_predict(jax.numpy.asarray(theta), key))
        y = np.asarray(pm.terms.y)
        if sim.ndim == 3:
            out["crps"] = np.asarray(energy_score_fair(sim, y))
        else:
            out["crps"] = np.asarray(crps_fair(sim, y))
    if "quadratic" in which and pm.eval_probs is not None and pm.terms.y_index is not None:
        probs = np.asarray(pm.eval_probs(jax.numpy.asarray(theta)))
        out["quadratic"] = np.asarray(quadratic_score_eval(probs, pm.terms.y_index))
    return out


def training_scores(pm, theta, key) -> dict:
    """Totals of every available score of the draws on the data the model holds (``_ll``: the
    pointwise log-likelihood, reused for the ``log_likelihood`` group)."""
    pw = _pointwise(pm, theta, key, ("log_score", "crps", "quadratic", "_ll"))
    out = {k: float(np.sum(v)) for k, v in pw.items() if k != "_ll"}
    if "_ll" in pw:
        out["_ll"] = pw["_ll"]
    return out


@uses_x64
def predictive_scores(data, model, *, scores="auto", group="posterior", random_seed=None, score_options=None):
    """Score the predictive of the draws in ``data[group]`` on the data ``model`` holds (a test split).

    Parameters
    ----------
    data : xarray.DataTree
        With the draws in ``group`` (named like the model's variables).
    model
        The model on the *evaluation* data (any model :func:`ppl_loo.pvi` accepts).
    scores : "auto" or sequence of {"log", "crps", "quadratic"}
        ``"auto"``: every score the model supports (CRPS needs a simulator, the quadratic score a
        categorical outcome).
    group : str
        The group of ``data`` with the draws.
    random_seed : int, numpy.random.Generator or JAX key, optional
        Seed of the predictive draws (CRPS). None: a seed derived from the draws and the observed
        data, so that a rerun on the same input reproduces.
    score_options : ScoreOptions, dict or None
        What the score reads from the model (``var_name``, ``simulator``, ``probs``, ``observed``,
        ``categories``), as for :func:`ppl_loo.pvi`.

    Returns
    -------
    xarray.Dataset
        Pointwise ``log_score``, ``crps`` and ``quadratic`` over the observation dims, with their
        sums in ``attrs`` (``"log_score"``, ``"crps"``, ``"quadratic"``) and the mean quadratic
        score (``"quadratic_mean"``).
    """
    sco = resolve_options(ScoreOptions, score_options, "score_options", "predictive_scores")
    pm = as_model(model, pvi=True, var_name=sco.var_name, simulator=sco.simulator, probs=sco.probs,
                  observed=sco.observed, categories=sco.categories)
    if not isinstance(data, xr.DataTree) or group not in data.children:
        raise ValueError(f"data must be a DataTree with a {group!r} group of draws.")
    theta = np.asarray(pm.unconstrain(data[group].to_dataset()), dtype=np.float64)
    if theta.ndim != 2 or theta.shape[1] != pm.dim:
        raise ValueError(f"the draws have shape {theta.shape}; the model has dim={pm.dim}.")
    if not np.all(np.isfinite(theta)):
        raise ValueError("the draws have non-finite values in the model's unconstrained space.")
    names = {"log": "log_score", "crps": "crps", "quadratic": "quadratic"}
    if scores == "auto":
        which = tuple(names.values())
    else:
        which = tuple(names.get(s, s) for s in ([scores] if isinstance(scores, str) else scores))
        bad = [s for s in which if s not in names.values()]
        if bad:
            raise ValueError(f"unknown score(s) {bad}; choose from 'log', 'crps', 'quadratic'.")
    observed = [] if pm.obs.observed is None else [pm.obs.observed]
    pw = _pointwise(pm, theta, prng_key(seed_from(random_seed, theta, *observed)), which)
    pw.pop("_ll", None)
    if scores != "auto":
        missing = [s for s in which if s not in pw]
        if missing:
            key = {v: k for k, v in names.items()}
            reasons = "; ".join(f"{m}: {pm.notes.get(key[m], 'not available for this model')}" for m in missing)
            raise ValueError(f"cannot compute {missing} for this {pm.kind} model ({reasons}).")
    dims = tuple(pm.obs_dims)
    shape = tuple(pm.obs_shape)
    ds = xr.Dataset({k: (dims, np.asarray(v).reshape(shape)) for k, v in pw.items()})
    for k, v in pw.items():
        ds.attrs[k] = float(np.sum(v))
    if "quadratic" in pw:
        ds.attrs["quadratic_mean"] = float(np.mean(pw["quadratic"]))
    ds.attrs["n_draws"] = int(theta.shape[0])
    return ds
