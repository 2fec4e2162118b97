"""``ppl_loo.loo_subsample``: PSIS-LOO-CV from a subsample of the observations (Magnusson et al. 2019,
2020), with the adaptive engine on the flagged observations of the subsample when the model is given.

Every observation gets a cheap approximation of its elpd_loo (``"lpd"``: ``log mean_s p(y_i | theta_s)``;
``"plpd"``: ``log p(y_i | posterior mean)``); only the subsample gets elpd_loo_i itself (plain PSIS, or
with the model, what :func:`ppl_loo.loo` reports: the adapted proposal where k-hat is high); an
estimator (:mod:`ppl_loo.numerics.subsample`) combines the two into elpd_loo of all observations and
its standard errors.
"""

from __future__ import annotations

import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.workflow.loo.distributed import resolve_client
from ppl_loo.workflow.loo.inputs import check_datatree, posterior_seed
from ppl_loo.workflow.loo.options import ComputeOptions, SearchOptions, as_options
from ppl_loo.workflow.loo.plain import check_k_threshold, check_reff
from ppl_loo.workflow.subsample.model import model_subsample
from ppl_loo.workflow.subsample.plain import plain_subsample

__all__ = ["loo_subsample", "APPROXIMATIONS", "ESTIMATORS"]

#: elpd_loo approximations of every observation (``arviz_stats``' ``method``, R ``loo``'s ``loo_approximation``)
APPROXIMATIONS = ("lpd", "plpd")
#: estimators of the total (R ``loo``'s names; ``arviz_stats`` has ``"diff_srs"`` only)
ESTIMATORS = ("diff_srs", "srs", "hh_pps")


@uses_x64
def loo_subsample(data, model=None, *, observations=None, approximation=None, estimator="diff_srs", var_name=None,
                  reff=None, k_threshold=None, random_seed=None, progressbar=True, search=None, compute=None):
    """Subsampled PSIS-LOO-CV (Magnusson et al. 2019, 2020), adaptive on the subsample with a model.

    Parameters
    ----------
    data : xarray.DataTree
        With a ``posterior`` group, and a ``log_likelihood`` group when ``model`` is None.
    model : pymc.Model, StanModel, JaxModel or None
        As in :func:`ppl_loo.loo`. None: plain PSIS on the subsample, the numbers of
        ``arviz_stats.loo_subsample`` (``approximation="lpd"``, the same ``random_seed``). Given: the subsample's
        elpd_loo_i are those of :func:`ppl_loo.loo` (the adaptive search on the observations of the subsample
        whose k-hat or influence flags them); the other observations keep the cheap approximation.
    observations : int or array of int
        An int ``m``: draw ``m`` observations with ``numpy.random.default_rng(random_seed)`` (without replacement,
        as ``arviz_stats``; for ``"hh_pps"`` with replacement, probabilities proportional to
        ``|approximation|``, as R ``loo``). An array: flat indices (C order over the observation dims) of
        the observations to use; repeated indices only for ``"hh_pps"`` (how often each was drawn).
    approximation : {"lpd", "plpd"}, optional
        The cheap elpd_loo approximation of every observation (``arviz_stats``' ``method``, R ``loo``'s
        ``loo_approximation``). Default ``"lpd"`` (``arviz_stats``' default; R ``loo``'s is ``"plpd"``).
        ``"plpd"`` needs the model.
    estimator : {"diff_srs", "srs", "hh_pps"}
        The difference estimator under simple random sampling (default; the only one of
        ``arviz_stats``), the plain SRS estimator, or Hansen-Hurwitz under probability-proportional-to-size
        sampling with replacement (R ``loo``'s names).
    var_name : str, optional
        The log-likelihood variable (needed when there are several).
    reff, k_threshold : float, optional
        As in :func:`ppl_loo.loo`.
    random_seed : int or numpy.random.Generator, optional
        Seed of the subsample. None (default): a seed derived from the posterior draws
        (:func:`~ppl_loo.workflow.loo.inputs.posterior_seed`, as in :func:`ppl_loo.loo`), so a rerun on the same
        draws draws the same subsample. ``random_seed=315`` gives ``arviz_stats.loo_subsample``'s default subsample.
    progressbar : bool
        A progress bar over the searched observations (with a model).
    search : SearchOptions or dict, optional
        The adaptive search's options, as in :func:`ppl_loo.loo` (:class:`~ppl_loo.SearchOptions`; with a model
        only). ``adapt="none"``: no adaptive search (plain PSIS on the subsample, the model only evaluates the
        log-likelihood).
    compute : ComputeOptions or dict, optional
        ``client``: where the adaptive search runs, as in :func:`ppl_loo.loo` (None: the active
        ``dask.distributed`` client if there is one, else this process). ``chunk_size`` and ``check_log_lik``
        do not apply (a stored log-likelihood that differs from the model's is a warning here).

    Returns
    -------
    SubsampleResult
        An ``arviz_stats`` ``ELPDDataLOOSubsample`` (``elpd``, ``se``, ``subsampling_se``, ``p``,
        ``elpd_loo_approx``, ``loo_subsample_observations``, ...) with the extras of
        :class:`~ppl_loo.workflow.subsample.result.SubsampleResult`.

    Notes
    -----
    Where the former keywords went: ``seed`` is ``random_seed`` (default None, no longer 315); ``method``
    (``arviz_stats``' name of ``approximation``) is gone, use ``approximation``; ``transforms``, ``hbar``,
    ``adapt``, ``influence_threshold``, ``jacobian``, ``batch_size`` and ``min_ess`` are fields of ``search=``;
    ``client`` of ``compute=``.
    """
    own = dict(caller="pl.loo_subsample", takes=("search", "compute"),
               top_level=("observations", "approximation", "estimator", "var_name", "reff", "k_threshold",
                          "random_seed", "progressbar"))
    opts = as_options(search, SearchOptions, "search", **own)
    comp = as_options(compute, ComputeOptions, "compute", **own)
    for key, default in (("chunk_size", None), ("check_log_lik", True), ("conventions", "arviz")):
        if getattr(comp, key) != default:
            raise ValueError(f"pl.loo_subsample(compute={{{key!r}: ...}}): {key} does not apply to loo_subsample, "
                             "which evaluates the log-likelihood of the subsample only; of compute= it takes client.")
    client = resolve_client(comp.client)
    data = check_datatree(data)
    if isinstance(model, (int, np.integer, np.ndarray, list, tuple)) and not isinstance(model, bool):
        raise TypeError(f"model={model!r}: the second positional argument is the model; give the subsample as a "
                        f"keyword, pl.loo_subsample(data, observations={model!r}) (arviz_stats takes it positionally).")
    if observations is None:
        raise TypeError("observations is required: the subsample size (an int) or an array of flat observation "
                        "indices, e.g. pl.loo_subsample(data, observations=1000).")
    approximation = _check_choice("lpd" if approximation is None else approximation, APPROXIMATIONS, "approximation")
    estimator = _check_choice(estimator, ESTIMATORS, "estimator")
    k_threshold, reff = check_k_threshold(k_threshold), check_reff(reff)
    if var_name is not None and not isinstance(var_name, str):
        raise TypeError(f"var_name={var_name!r}: give the name of the log-likelihood variable as a string.")
    if isinstance(random_seed, bool) or not isinstance(random_seed, (int, np.integer, np.random.Generator,
                                                                     type(None))):
        raise TypeError(f"random_seed={random_seed!r}: give an int (or a numpy.random.Generator) to draw the "
                        "subsample, or None (a seed derived from the posterior draws).")
    # the seed only draws an int's subsample: an array of indices needs none
    seed = posterior_seed(random_seed, data) if isinstance(observations, (int, np.integer)) else random_seed
    if model is None:
        if approximation == "plpd":
            raise ValueError("approximation='plpd' evaluates the log-likelihood at the posterior mean, which needs "
                             "the model: pass model=..., or use approximation='lpd' (from the log_likelihood group).")
        return plain_subsample(data, observations, approximation, estimator, var_name, seed, reff, k_threshold)
    options = dict(transforms=opts.transforms, hbar=opts.hbar, adapt=opts.adapt,
                   influence_threshold=opts.influence_threshold, jacobian=opts.jacobian, batch_size=opts.batch_size,
                   min_ess=opts.min_ess, progressbar=progressbar, client=False if client is None else client)
    return model_subsample(data, model, observations, approximation, estimator, var_name, seed, reff, k_threshold,
                           options)


def _check_choice(value, choices, name):
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={value!r}: choose one of {', '.join(repr(c) for c in choices)}.")
    return value
