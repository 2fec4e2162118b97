"""``ppl_loo.loo_pit``: LOO probability integral transforms (calibration) with the adapted weights.

``PIT_i = P(y_rep_i <= y_i | y_-i) = E_{-i}[F_i(y_i | theta)]``, the LOO expectation of the observation model's CDF
at the observed value, with the weights ``elpd_i`` was computed with (:func:`ppl_loo.loo_expectations`: the adapted
proposal's on its transformed draws where one was used, plain PSIS elsewhere). The CDF is evaluated exactly at
each weighted point (PyMC's ``logcdf`` of the observed distribution, or the user's ``cdf=``), not by counting
posterior predictive draws below ``y_i`` as ``arviz_stats.loo_pit`` does: at transformed draws there are no
predictive draws to count. For a discrete outcome the PIT is randomized (Czado et al. 2009; as
``arviz_stats.loo_pit``): ``P(y_rep < y) + U P(y_rep = y)``, ``U`` uniform from ``random_seed`` (None: a seed
derived from those two probabilities, so that a rerun on the same input reproduces).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import seed_from
from ppl_loo.workflow.downstream.loo_expectations import checked_model, summarized
from ppl_loo.workflow.downstream.points import entry_cache, evaluated, own_function

__all__ = ["loo_pit", "plot_loo_pit"]


@uses_x64
def loo_pit(data, res, *, model=None, cdf=None, random_seed=None):
    """LOO-PIT values of every observation, with the weights of ``res`` (adapted where it adapted).

    Parameters
    ----------
    data : DataTree
        The data the result was computed from (its ``posterior`` group gives the draws).
    res : LooResult
        From :func:`ppl_loo.loo` with a model.
    model : pymc.Model, StanModel or PosteriorModel
        The model the result was computed with.
    cdf : callable, optional
        ``cdf(params) -> array (M, *obs_shape)``: ``P(y_rep_i <= y_i | theta)`` at ``M`` parameter points
        (``params`` as in :func:`ppl_loo.loo_expectations`), or for a discrete outcome the tuple
        ``(P(y_rep_i <= y_i | theta), P(y_rep_i < y_i | theta))``. Default: the model's own (a PyMC model's
        ``logcdf`` of the observed distribution; a Stan program's own ``_lcdf`` of the distribution in its
        ``log_lik`` statements, ``log_lik[i] = D_lpdf(y[i] | ...)``, as derived by
        :func:`ppl_loo.stan_bridge.derived.cdf_program`; a ``JaxModel``'s from its declared ``output``,
        ``"gaussian"`` or ``"bernoulli"``, and ``observed``; ``model.pit_cdf`` of any model that defines it).
    random_seed : int or numpy.random.Generator, optional
        The uniform draws of the randomized PIT (discrete outcomes). None: a seed derived from the LOO
        probabilities ``P(y_rep_i <= y_i)`` and ``P(y_rep_i < y_i)``, so that a rerun on the same input
        reproduces.

    Returns
    -------
    DataArray
        ``loo_pit`` over the observation dims, in [0, 1], with the coordinate ``weights`` (``"psis"``,
        ``"adapted"``, ``"refit"`` or ``"mixture"``, as :func:`ppl_loo.loo_expectations`) and ``pareto_k`` (the
        k-hat of the mean of the CDF under those weights).
    """
    model = checked_model(data, res, model, "loo_pit")
    if cdf is None:
        cdf = model.pit_cdf
        if cdf is None:
            raise ValueError(f"the {model.kind} model has no predictive CDF; pass "
                             "cdf=callable(params) -> P(y_rep_i <= y_i | theta) (a tuple with P(y_rep_i < y_i | theta) "
                             "for a discrete outcome).")
    elif not callable(cdf):
        raise TypeError("`cdf` must be a callable cdf(params) -> array (M, *obs_shape) or a tuple of two.")
    entry = entry_cache(data, res, model)
    outs, discrete = evaluated(entry, cdf, model, own_function(cdf, model), name="cdf")
    if discrete and len(outs) != 2:
        raise ValueError("cdf must return one array for a continuous outcome, or the tuple "
                         "(P(y_rep <= y), P(y_rep < y)) for a discrete one, at every call.")
    for at_draws, at_rows in outs:
        _probability(at_draws)
        _probability(at_rows)
    upper = summarized(res, entry.points, *outs[0])
    if not discrete:
        return _named(upper.clip(0.0, 1.0), upper)
    lower = summarized(res, entry.points, *outs[1], with_khat=False)
    seed = seed_from(random_seed, upper.values, lower.values)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    pit = lower + rng.uniform(size=upper.shape) * (upper - lower)
    return _named(pit.clip(0.0, 1.0), upper)


def plot_loo_pit(data, res, *, model=None, cdf=None, random_seed=None, backend=None, **kwargs):
    """The LOO-PIT plot with the adapted weights: the ECDF of :func:`loo_pit`'s values minus the uniform CDF, with
    its simultaneous confidence band and uniformity test, drawn by ``arviz_plots.plot_ecdf_pit`` (the figure
    ``arviz_plots.plot_loo_pit`` draws from plain PSIS weights).

    Parameters
    ----------
    data, res, model, cdf, random_seed
        As :func:`loo_pit`.
    backend : str, optional
        The ``arviz_plots`` backend (``"matplotlib"``, ``"bokeh"``, ``"plotly"``, ``"none"``; default its
        ``rcParams``).
    **kwargs
        Passed to ``arviz_plots.plot_ecdf_pit`` (``visuals=``, ``stats=``, ``ci_prob=``, ...).

    Returns
    -------
    arviz_plots.PlotCollection
        Its ``data`` holds the LOO-PIT values (group ``loo_pit``, the log-likelihood variable's name).
    """
    import arviz_plots as azp  # drawing only here (import ppl_loo loads no plotting library)

    pit = loo_pit(data, res, model=model, cdf=cdf, random_seed=random_seed)
    tree = xr.DataTree.from_dict({"loo_pit": xr.Dataset({res.var_name or "y": pit})})
    return azp.plot_ecdf_pit(tree, group="loo_pit", sample_dims=list(pit.dims), backend=backend, **kwargs)


def _probability(values):
    v = np.asarray(values, dtype=np.float64)
    if np.any(~np.isfinite(v)) or np.any((v < -1e-12) | (v > 1 + 1e-12)):
        raise ValueError("cdf returned values outside [0, 1] (or non-finite): it must return "
                         "P(y_rep_i <= y_i | theta).")
    return v


def _named(pit, upper):
    out = pit.rename("loo_pit")
    out.attrs = {}
    return out.assign_coords(pareto_k=upper.pareto_k, weights=upper.weights)
