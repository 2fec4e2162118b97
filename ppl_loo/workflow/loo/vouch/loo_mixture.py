"""``pl.loo_mixture``: LOO-CV by mixture importance sampling alone, the model sampling its own mixture target.

What ``pl.loo(..., second_opinions={"mixture": ...})`` runs as a second opinion (:mod:`.mixture`), as a result of
its own: an ``arviz_stats`` ELPD result (``compare``-ready) whose ``elpd_i`` are the mixture-IS estimates,
``pareto_k`` the Pareto k-hat of the weights each uses (bounded, not Pareto-smoothed, but long-tailed over the draws
there are where one observation dominates the mixture: :mod:`ppl_loo.numerics.mixture`), ``mcse_elpd_i`` their
Monte Carlo SEs, ``doubtful`` where the run's own diagnostics fail for that estimate, and ``mixture_info`` the run's
diagnostics.
"""

from __future__ import annotations

import numpy as np

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.workflow.loo.draws import loo_draws
from ppl_loo.workflow.loo.inputs import check_datatree, check_posterior_draws, check_random_seed, posterior_seed
from ppl_loo.workflow.loo.loo import pointwise_factory
from ppl_loo.workflow.loo.plain import logmeanexp, stable_se, stable_sum
from ppl_loo.workflow.loo.result import LooResult
from ppl_loo.workflow.loo.vouch.mixture import MAX_PARAM_RHAT, MIN_ESS, run_mixture
from ppl_loo.workflow.loo.vouch.opinions import check_opinion_args, mixture_run_settings

__all__ = ["loo_mixture"]


@uses_x64
def loo_mixture(data, model, *, var_name=None, random_seed=None, mixture_options=None):
    """Mixture importance-sampling LOO-CV (Silva & Zanella 2023), sampled with the model.

    Parameters
    ----------
    data : xarray.DataTree
        With a ``posterior`` group: the chains start at posterior draws, and the fit's sampler settings
        (chains, draws, warmup, target acceptance, tree depth) are reused.
    model : pymc.Model, StanModel, JaxModel or a protocol model
        A Stan program samples its derived mixture program with Stan's NUTS; the others BlackJAX's NUTS on
        ``logp(theta) + logsumexp_j(-log p(y_j | theta))``.
    var_name : str, optional
        The log-likelihood variable.
    random_seed : int or numpy.random.Generator, optional
        Seed of the mixture run. None (default): a seed derived from the posterior draws
        (:func:`~ppl_loo.workflow.loo.inputs.posterior_seed`, as in :func:`ppl_loo.loo`), so a rerun on the same
        draws gives the same numbers.
    mixture_options : dict, optional
        Overrides of the run's settings read from the fit: ``chains``, ``draws``, ``warmup``, ``target_accept``,
        ``max_tree_depth`` (``mixture_kwargs`` before; ``pl.loo`` takes the same dict as
        ``second_opinions={"mixture_options": ...}``).

    Returns
    -------
    LooResult
        ``transform`` is ``"mixture"`` everywhere, ``evidence`` ``"mixture"`` where the estimate passes the run's
        diagnostics (its R-hat and ESS, the Pareto k-hat of its weights, ``pareto_k``, at most the engine's
        threshold ``min(1 - 1 / log10(S), 0.7)`` of the run's ``S`` draws, the run's divergences and parameter
        R-hat) and ``""`` where not (then ``doubtful``, with a ``reason``).
    """
    check_random_seed(random_seed, "pl.loo_mixture")
    data = check_datatree(data)
    check_posterior_draws(data)
    check_opinion_args(True, False, mixture_options)
    random_seed = posterior_seed(random_seed, data)
    model = as_model(model, var_name=var_name, data=data)
    draws = loo_draws(data, model, var_name, None)
    run = run_mixture(model, draws.theta, mixture_run_settings(data, mixture_options), random_seed)
    C, D, _ = run.theta.shape
    k = np.asarray(run.khat, dtype=float)  # the k-hat of the weights each estimate uses (not smoothed)
    reason = np.where(run.ok, "", f"the mixture run's diagnostics fail for this estimate (R-hat above {MAX_PARAM_RHAT},"
                      f" ESS below {MIN_ESS:.0f}, the Pareto k-hat of its weights above "
                      f"{run.info['k_threshold']:.2f}, or the run's divergences or parameter R-hat)").astype(str)
    elpd, mcse = run.elpd, run.mcse
    p_loo_i = logmeanexp(draws.ll) - elpd
    da = pointwise_factory(data, draws.var_name, model, draws.ll.shape[1])
    info = {**run.info, "elpd_i": elpd.tolist(), "mcse_i": mcse.tolist(), "ok_i": run.ok.tolist(),
            "khat_i": k.tolist(), "n_ok": int(run.ok.sum())}
    return LooResult(
        elpd=stable_sum(elpd), se=stable_se(elpd), p=stable_sum(p_loo_i), n_samples=C * D,
        n_data_points=elpd.size, scale="log", warning=bool(not run.ok.all()), good_k=run.info["k_threshold"],
        elpd_i=da(elpd, "elpd_i"), pareto_k=da(k, "pareto_k"), p_loo_i=da(p_loo_i, "p_loo_i"),
        mcse_elpd_i=da(mcse, "mcse_elpd_i"), doubtful=da(~run.ok, "doubtful"), reason=da(reason, "reason"),
        transform=da(np.full(elpd.size, "mixture"), "transform"), evidence=da(np.where(run.ok, "mixture", ""),
                                                                             "evidence"),
        refit=da(np.zeros(elpd.size, bool), "refit"), var_name=draws.var_name, mixture_info=info,
        n_params=int(draws.theta.shape[1]), approx_posterior=False)
