"""``ppl_loo.loo``: adaptive importance-sampling LOO-CV (workflow layer).

DataTree in, :class:`~ppl_loo.workflow.loo.result.LooResult` out. The schedule of stages, cheapest per settled
observation first, each on what the earlier ones left unsettled: the draws under the model (:mod:`.draws`), plain
PSIS and the observations it does not settle (:mod:`.plain`), mixture importance sampling (:mod:`.vouch.opinions`),
the adaptive search (:mod:`.adapt`), tempered SMC, the refits (:mod:`ppl_loo.workflow.exact.refit`); after each,
the verdict (:mod:`.verdict`) on the evidence so far; then the warnings (:mod:`.messages`) and the result over the
observation dims of the log-likelihood variable. The numerics live in :mod:`ppl_loo.numerics`.
"""

from __future__ import annotations

import time

import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.gaussian import MeanField
from ppl_loo.numerics.loo import EngineConfig, candidate_labels
from ppl_loo.numerics.loo.memory import device_free_bytes
from ppl_loo.numerics.psis import check_conventions, khat_threshold, psislw
from ppl_loo.workflow.arrays.log_lik_array import is_array_input
from ppl_loo.workflow.arrays.log_lik_tree import log_lik_tree
from ppl_loo.workflow.exact.refit import check_refit_args, refit_converged, refit_stage
from ppl_loo.workflow.loo.adapt import (
    ACCELERATOR_MAX_BATCH,
    CPU_MAX_BATCH,
    Candidates,
    check_transforms,
    quick_config,
    run_search,
    search_on_host,
    widen,
)
from ppl_loo.workflow.loo.chunked import SearchedCandidates, chunked_plain, flagged_log_lik, psis_loo, stored_for_chunks
from ppl_loo.workflow.loo.distributed import resolve_client
from ppl_loo.workflow.loo.draws import loo_draws
from ppl_loo.workflow.loo.engine import adapted_weights_array, config_to_plain, draws_array
from ppl_loo.workflow.loo.inputs import (
    SAMPLE_DIMS,
    align_obs_dims,
    check_datatree,
    check_posterior_draws,
    check_random_seed,
    fit_seconds,
    get_log_likelihood,
    identical_chains,
    max_rhat_of,
    obs_labels,
    posterior_seed,
    stan_labelled,
    with_stan_labels,
)
from ppl_loo.workflow.loo.kept import KeptDraws
from ppl_loo.workflow.loo.messages import warn_doubtful, warn_identical_chains, warn_identity, warn_unconverged
from ppl_loo.workflow.loo.options import ComputeOptions, SearchOptions, SecondOpinions, as_options
from ppl_loo.workflow.loo.plain import (
    check_k_threshold,
    check_reff,
    flag_observations,
    logmeanexp,
    plain_psis,
    stable_se,
    stable_sum,
)
from ppl_loo.workflow.loo.result import LooResult
from ppl_loo.workflow.loo.verdict import RHAT_NOT_MIXED, VOUCH_MAX_SE, Evidence, Rules, convergence, verdict
from ppl_loo.workflow.loo.vouch.opinions import (
    check_opinion_args,
    mixture_stage,
    needs_independent,
    refit_route,
    refits_before_mixture,
    refits_before_search,
    route_refit_options,
    smc_stage,
    smc_targets,
)

__all__ = ["loo", "DEFAULT_HBAR", "DEFAULT_TRANSFORMS", "check_hbar", "pointwise_factory"]

#: the search corroborates an estimate the mixture settles alone only where its SE is above this (nats): two SEs
#: either side of a more precise one span at most a fifth of the nat at which one ``elpd_i`` changes a comparison
#: (``VOUCH_MAX_SE``), and a second estimate there would buy little for a search that costs per observation
CORROBORATE_SE = 0.05
DEFAULT_HBAR = tuple(float(x) for x in 4.0 ** -np.arange(11))
#: the papers' seven, iterated moment matching, the Newton-step proposal and the defensive mixtures (not MM3:
#: its full-covariance map, estimated from heavy-tailed weights, is optimistic in the truth suite)
DEFAULT_TRANSFORMS = ("pmm1", "pmm2", "kl", "var", "ll", "mm1", "mm2", "mm_iter", "newton", "newton_mix", "pmm1_mix",
                      "pmm2_mix")


@uses_x64
def loo(data, model=None, *, var_name=None, k_threshold=None, reff=None, log_q=None, refit=None, random_seed=None,
        progressbar=True, search=None, second_opinions=None, compute=None):
    """Adaptive PSIS-LOO-CV.

    Parameters
    ----------
    data : xarray.DataTree, numpy.ndarray or xarray.DataArray
        With a ``posterior`` group (and ``log_likelihood`` where present). Without a model, also the
        log-likelihood values themselves (R ``loo``'s ``loo.array`` and ``loo.matrix``): an array ``(chain, draw,
        *obs)`` or ``(draw, obs)`` (one chain), or a DataArray with ``chain`` and ``draw`` dims; ``reff`` then
        defaults to 1 (R's default; there are no parameter draws to take an ESS from), or, with
        ``compute={"conventions": "R"}``, to each observation's :func:`ppl_loo.relative_eff`.
    model : pymc.Model, StanModel, PosteriorModel or None
        A ``pymc.Model`` (wrapped in :class:`~ppl_loo.models.PyMCModel`), a :class:`~ppl_loo.StanModel`
        (exact LOO by data deletion, :class:`~ppl_loo.adapters.stan.posterior.StanPosterior`), a
        :class:`~ppl_loo.JaxModel`, a closed-form model (:class:`~ppl_loo.models.LogisticRegression`,
        :class:`~ppl_loo.models.ReluNet`), or None for plain PSIS-LOO from the ``log_likelihood``
        group (as ``arviz_stats.loo``).
    var_name : str, optional
        The log-likelihood variable (needed when there are several).
    k_threshold : float, optional
        At most 1; default ``min(1 - 1/log10(S), 0.7)``. Lower values adapt more observations (``-inf``: all).
    reff : float or array-like, optional
        Relative efficiency ``ESS / S`` of the draws (``arviz_stats.loo``'s ``reff``): it sets the length of the
        Pareto tail and the Monte Carlo errors. None (default) computes it from the posterior's mean ESS (1
        for draws of an approximation; with ``compute={"conventions": "R"}`` and no model, one per observation,
        :func:`ppl_loo.relative_eff`). Without a model it may also be one value per observation (R ``loo``'s
        ``r_eff`` vector, in the order of the flattened observation dims). With ``reff`` given the result does not
        depend on the order of the draws.
    log_q : array-like (chain, draw) or callable, optional
        Log density (up to a constant) of the approximation the draws come from, for draws from a
        variational fit: the weights then use Eq. 13 of the paper instead of Eq. 10. As a JAX
        callable ``log_q(theta)`` of one unconstrained draw, it also enables the mixture
        proposals (``*_mix``), which need ``q`` away from the draws. Default: for a DataTree
        written by :func:`ppl_loo.pvi`, its ``q`` (checked against the stored ``log_q``). Needs the model
        (without one: a ValueError; :func:`ppl_loo.loo_approximate_posterior` takes the posterior's log density).
    refit : None, "doubtful", "flagged", sequence of int, or float
        Exact LOO by refitting the model without the observation (``reloo`` of R ``loo`` and
        ArviZ), with the model's own sampler and the original fit's settings (overridden by
        ``second_opinions={"refit_options": {...}}``), for the observations the engine cannot vouch for:
        ``"doubtful"`` (``res.doubtful``), ``"flagged"`` (every observation the engine adapted), a list of flat
        observation indices, or a time budget in seconds (the doubtful observations, highest k first, until it
        is spent). ``elpd_i`` then comes from bridge sampling between the refit's draws and the full-data draws,
        with its Monte Carlo SE; ``res.refit`` flags those observations.
    random_seed : int, numpy.random.Generator or JAX key, optional
        Seed of the second opinions (mixture IS, SMC) and the refits; the adaptive search itself is
        deterministic. None (default): a seed derived from the posterior draws
        (:func:`~ppl_loo.workflow.loo.inputs.posterior_seed`), so a rerun on the same draws gives the same
        numbers.
    progressbar : bool
        Show a progress bar over the adapted observations (and the refits).
    search : SearchOptions or dict, optional
        The adaptive search's options (:class:`~ppl_loo.SearchOptions`): ``transforms``, ``hbar``, ``adapt``,
        ``influence_threshold``, ``jacobian``, ``min_ess``, ``batch_size``. A dict sets some of them, e.g.
        ``search={"transforms": ["pmm1", "newton"]}``; None: the defaults.
    second_opinions : SecondOpinions or dict, optional
        The independent estimates beside the search's (:class:`~ppl_loo.SecondOpinions`): ``mixture`` (mixture
        importance sampling, :func:`ppl_loo.loo_mixture`; default ``"auto"``), ``mixture_options`` (its run's
        settings), ``smc`` (tempered SMC; default ``"auto"``), ``refit_options`` (the sampler settings of the
        refits that ``refit=`` asks for).
    compute : ComputeOptions or dict, optional
        Where and how the work runs (:class:`~ppl_loo.ComputeOptions`): ``chunk_size`` (out-of-core plain PSIS
        over a dask-backed log-likelihood), ``client`` (a ``dask.distributed`` client for the search),
        ``check_log_lik`` (a stored log-likelihood that is not the model's raises; default True),
        ``conventions`` (``"arviz"``, default, or ``"R"``: whose PSIS ``pl.loo(data)`` without a model reproduces).

    Notes
    -----
    Where the former keywords went: ``transforms``, ``hbar``, ``adapt``, ``influence_threshold``, ``jacobian``,
    ``min_ess`` and ``batch_size`` are fields of ``search=``; ``mixture``, ``smc``, ``mixture_kwargs`` (now
    ``mixture_options``) and ``refit_kwargs`` (now ``refit_options``) of ``second_opinions=``; ``chunk_size``,
    ``client`` and ``check_log_lik`` of ``compute=``; ``pointwise`` is gone (the pointwise results are always
    kept).

    The stages run cheapest per settled observation first, each on what the earlier ones left unsettled: plain
    PSIS, mixture IS, the search, SMC, refits; one pure function, the verdict
    (:func:`ppl_loo.workflow.loo.verdict.verdict`), turns their evidence into the answer (``docs/method.md``,
    section 9). Each ``elpd_i`` says which evidence vouches for it (``res.evidence``,
    :mod:`ppl_loo.workflow.loo.vouch.rule`): estimates from independent draws (the search's, mixture IS, SMC, a
    refit) that agree within 3 combined Monte Carlo SEs, or a mixture estimate that passes its run's checks where
    no other credible estimate exists (``"mixture"``); an estimate settles its observation only with an SE of at
    most 0.25 nats; convergence is judged per observation (the R-hat and ESS of its log-likelihood draws);
    ``doubtful`` where estimates disagree, none is precise enough, or none could run.

    Every observation with k-hat above ``k_threshold``, NaN or ``+inf`` (mostly tied log-likelihood
    draws, a very heavy tail) that no adapted proposal fixed is ``doubtful``, with a ``reason`` and a
    warning; a constant log-likelihood gets its exact LOO density (the constant) and k-hat ``-inf``.

    Returns
    -------
    LooResult
    """
    opts, second, comp = _options(search, second_opinions, compute, random_seed)
    data, reff = _array_input(data, model, var_name, reff, comp, log_q)
    chunk_size, check_log_lik, mixture, smc = comp.chunk_size, comp.check_log_lik, second.mixture, second.smc
    client = resolve_client(comp.client)  # checked first; found once (None: the active client, if any)
    data = check_datatree(data)
    k_threshold = check_k_threshold(k_threshold)
    reff = check_reff(reff, vector=model is None)
    conventions = _conventions(comp, model)
    _check_var_name(var_name)
    if model is None or reff is None:
        check_posterior_draws(data)
    pairs = identical_chains(data)
    if pairs:
        warn_identical_chains(pairs)
    if model is None:
        return _plain_loo(data, var_name, k_threshold, reff, chunk_size, refit, conventions)
    if reff is not None:  # (checked above otherwise)
        check_posterior_draws(data)
    names = _check_transform_names(opts.transforms)
    hbar = check_hbar(opts.hbar)
    random_seed = posterior_seed(random_seed, data)
    model = as_model(model, var_name=var_name, data=data)
    stored = stored_for_chunks(data, var_name, model, chunk_size, refit)  # None: in memory
    draws = loo_draws(data, model, var_name, log_q, log_lik=stored is None, check_log_lik=check_log_lik)
    if reff is not None and not draws.approx:
        draws = draws._replace(r_eff=reff)
    names = names + approximation_transforms(draws, opts.transforms, names)
    S, n = draws.theta.shape[0], (draws.ll.shape[1] if stored is None else int(np.prod(model.obs_shape or (1,))))
    check_refit_args(refit, second.refit_options, data, n)
    if stored is not None and mixture is True:
        raise ValueError("second_opinions={'mixture': True} needs the whole log-likelihood in memory (the mixture run "
                         "evaluates every observation at its own draws); load the log_likelihood group first "
                         "(data.load()), or leave mixture at 'auto', which does not run out of core.")
    check_opinion_args(mixture, smc, second.mixture_options)
    given_k, k_threshold = k_threshold, (khat_threshold(S) if k_threshold is None else k_threshold)
    cfg = EngineConfig(tuple(names), hbar, float(draws.r_eff), opts.jacobian,
                       min_ess=min(100.0, S / 10.0) if opts.min_ess is None else float(opts.min_ess),
                       n_chains=draws.n_chains, k_threshold=float(k_threshold))
    plain, lpd = (plain_psis(draws), None) if stored is None else chunked_plain(stored, draws, chunk_size)
    flagged = flag_observations(plain, S, k_threshold, opts.adapt, opts.influence_threshold)
    if stored is None:  # an imprecise plain estimate does not settle its observation either
        flagged |= ~(plain.mcse <= VOUCH_MAX_SE)
    draws = draws if stored is None else draws._replace(ll=flagged_log_lik(data, model, draws, stored,
                                                                           np.flatnonzero(flagged), check_log_lik))
    max_rhat, rhat_where = (float("nan"), None) if draws.approx else max_rhat_of(data, stan_labelled(data, model))
    conv = _convergence(draws, stored, flagged, max_rhat, rhat_where)
    rules = Rules(float(k_threshold), cfg.min_ess, cfg.r_eff, draws.approx)
    kept = KeptDraws()  # the refits' and the mixture run's draws, for the after-LOO functions
    stages = dict(rules=rules, mixture=mixture, mixture_kwargs=second.mixture_options, smc=smc, refit=refit,
                  refit_kwargs=second.refit_options, adapt=opts.adapt, batch_size=opts.batch_size,
                  progressbar=progressbar, random_seed=random_seed, given_k=given_k,  # None: the mixture run's own S
                  client=False if client is None else client)
    ev, v, info, refit_info = _schedule(Evidence(plain, conv, flagged), rules, model, data, draws, cfg, kept,
                                        stored is None, stages)
    cands = _candidates(ev, cfg, draws, n, S, stored is None)
    _warn(v, cands, conv, k_threshold, len(ev.search),
          _which(data, draws.var_name, model, v.doubtful & ~v.refit, v.reason))
    return _result(data, model, draws, plain, v, cands, cfg, flagged, refit_info, lpd=lpd, **info,
                   **kept.arrays(v.transform), max_rhat=max_rhat, max_rhat_var=rhat_where, good_k=k_threshold,
                   **approx_summary(draws, plain, k_threshold))


def _options(search, second_opinions, compute, random_seed):
    """The three groups of options as their dataclasses (:mod:`.options`), and ``random_seed`` checked."""
    check_random_seed(random_seed)
    opts = as_options(search, SearchOptions, "search")
    if opts.adapt not in ("auto", "all", "flagged"):
        raise ValueError(f"search: adapt={opts.adapt!r}: use 'auto', 'all' or 'flagged'.")
    return opts, as_options(second_opinions, SecondOpinions, "second_opinions"), as_options(compute, ComputeOptions,
                                                                                            "compute")


def _array_input(data, model, var_name, reff, comp, log_q):
    """``(data, reff)``: a log-likelihood array as a DataTree (:func:`~ppl_loo.workflow.arrays.log_lik_tree.
    log_lik_tree`) with ``reff`` 1 by default (R's ``loo.array``) unless R's conventions compute it per observation;
    a DataTree as is. A model with an array, or ``log_q`` without a model, raise a ValueError naming the fix."""
    if model is None and log_q is not None:
        raise ValueError("log_q= without a model: plain PSIS-LOO cannot correct for an approximation without the "
                         "posterior's log density. Pass the model (pl.loo(data, model, log_q=...)), or call "
                         "pl.loo_approximate_posterior(log_lik, log_p, log_q) with the log density of the posterior "
                         "at the draws, log_p.")
    if not is_array_input(data):
        return data, reff
    if model is not None:
        raise ValueError(f"data is a {type(data).__name__} of log-likelihood values, and a model was given: the model "
                         "needs the posterior draws. Pass the DataTree of the fit (pl.loo(idata, model)), or leave the "
                         "model out for plain PSIS-LOO of the array (pl.loo(log_lik)).")
    data = log_lik_tree(data, var_name)
    if reff is None and comp.conventions != "R":
        reff = 1.0
    return data, reff


def _conventions(comp, model):
    """``compute``'s PSIS conventions, checked: R's apply to plain PSIS-LOO without a model only."""
    conventions = check_conventions(comp.conventions)
    if model is not None and conventions != "arviz":
        raise ValueError(f"compute={{'conventions': {conventions!r}}} applies to plain PSIS-LOO without a model "
                         "(pl.loo(data, compute=...)); with a model leave conventions at 'arviz'.")
    return conventions


def _schedule(ev, rules, model, data, draws, cfg, kept, in_memory, o):
    """The stages, cheapest per settled observation first, each on what the verdict on the evidence so far leaves
    unsettled (``docs/method.md``, section 9): ``(evidence, verdict, {mixture_info, smc_info}, refit_info)``."""
    v = verdict(ev, rules)
    info = {"mixture_info": None, "smc_info": None}

    def with_mixture(ev):
        op, info["mixture_info"] = mixture_stage(model, data, draws, o["mixture_kwargs"], o["random_seed"], kept,
                                                 o["given_k"])
        return ev if op is None else ev.with_opinion(op)

    mixture, flagged = o["mixture"], ev.examine
    route = refit_route(data, model, draws, o["smc"], o["refit"], o["refit_kwargs"])
    # a few hard observations whose refits cost less than the mixture run are refit at once (the mixture "auto"),
    # where their draws converged (the mixture alone can vouch for the others)
    todo = flagged & v.unsettled
    if mixture == "auto" and o["adapt"] == "auto" and not (todo & ~ev.conv.ok).any() and refits_before_mixture(
            route, data, o["mixture_kwargs"], int(todo.sum())):
        mixture = False
    # one mixture run, about the cost of one fit, settles every observation it can before the search, which costs
    # per observation
    if in_memory and (mixture is True or (mixture == "auto" and (flagged & v.unsettled).any())):
        ev = with_mixture(ev)
        v = verdict(ev, rules)
    obs_idx = np.flatnonzero(flagged if o["adapt"] == "all" else flagged & v.unsettled)
    if route[0] and o["adapt"] == "auto":  # what the search could not settle alone goes to the refits directly
        obs_idx = np.setdiff1d(obs_idx, needs_independent(ev, obs_idx))
        if refits_before_search(route, model, len(candidate_labels(cfg)), draws.theta.shape[0]):
            obs_idx = obs_idx[~ev.conv.ok[obs_idx]]  # and all of them where a refit costs less than their search
    ev = _search_stage(ev, model, draws, cfg, obs_idx, o, _refit_seconds(data, o["refit"]))
    if o["adapt"] != "all":
        # where the mixture estimate vouches alone, the search's estimate corroborates it where it is imprecise
        # (and is the more precise), least precise first
        v = verdict(ev, rules)
        alone = np.flatnonzero(flagged & (v.evidence == "mixture"))
        alone = alone[np.argsort(-v.mcse[alone], kind="stable")]
        ev = _corroborate(ev, model, draws, cfg, alone, v.mcse, o)
    v = verdict(ev, rules)
    if info["mixture_info"] is None and (mixture is True or (mixture == "auto" and v.unsettled.any())):
        ev = with_mixture(ev)
        v = verdict(ev, rules)
    ev, v, info["smc_info"] = _independent_stage(ev, v, rules, model, data, draws, cfg, kept, o, route)
    refit_info = refit_stage(model, data, draws, o["refit"], o["refit_kwargs"], o["random_seed"], o["progressbar"],
                             doubtful=v.unsettled & ~np.isin(np.arange(v.elpd.shape[0]), list(ev.refits)),
                             flagged=flagged, k_final=v.k, kept=kept)
    if refit_info:
        ev = ev.with_refits(refit_info)
        v = verdict(ev, rules)
    return ev, v, info, dict(ev.refits)


def _independent_stage(ev, v, rules, model, data, draws, cfg, kept, o, route):
    """Independent evidence where the verdict asks for it (:func:`~.vouch.opinions.smc_targets`): tempered SMC, or
    batched refits of those observations where ``route`` (:func:`~.vouch.opinions.refit_route`) says a refit costs
    fewer gradient evaluations than SMC's cheapest run: exact, and cheaper. SMC then runs where a refit did not
    converge or has an SE above the precision rule (that refit is left out of the evidence), after the search where
    the observation skipped it for the refits. ``(evidence, verdict, smc_info)``."""
    targets = smc_targets(v, ev.plain, ev, o["smc"]) if o["smc"] is not False else np.zeros(0, int)
    routed = None
    if targets.size and route[0]:
        records = refit_stage(model, data, draws, targets.tolist(), route_refit_options(data, o["refit_kwargs"]),
                              o["random_seed"], o["progressbar"], doubtful=v.unsettled, flagged=ev.examine,
                              k_final=v.k, kept=kept, warn=False)
        # a refit that did not converge, or whose estimate is too imprecise to settle its observation (an outlier far
        # in the tail of the refit's predictive: the bridge's SE above the precision rule), is no evidence here: SMC
        # takes its observation, as it would have
        failed = {i: r for i, r in records.items() if not (refit_converged(r) and r["mcse"] <= rules.max_se)}
        ev = ev.with_refits({i: r for i, r in records.items() if i not in failed})
        v = verdict(ev, rules)
        routed = {"refits_instead": targets.tolist(), "gradients_per_observation": route[1],
                  "refits_not_used": {int(i): {k: r.get(k) for k in ("rhat_loglik", "rhat_max", "mcse")}
                                      for i, r in failed.items()}}
        targets = np.asarray(sorted(failed), dtype=int)
        unsearched = np.asarray([i for i in targets if i not in ev.search], dtype=int)
        if unsearched.size:  # they skipped the search for the refits: its estimate is what SMC may agree with
            ev = _search(ev, model, draws, cfg, unsearched, o)
            v = verdict(ev, rules)
            targets = np.intersect1d(targets, smc_targets(v, ev.plain, ev, o["smc"]))
    op, smc_info = smc_stage(model, draws, targets, o["smc"], o["random_seed"])
    if op is not None:
        ev = ev.with_opinion(op)
        v = verdict(ev, rules)
    if routed is not None:
        smc_info = {**(smc_info or {"observations": [], "particles": 0, "n_ok": 0, "seconds": 0.0}), **routed}
    return ev, v, smc_info


def _search_stage(ev, model, draws, cfg, obs_idx, o, refit_seconds):
    """The search on ``obs_idx``. Where the observations it leaves unsettled go to refits (``refit="doubtful"`` or a
    budget) and one refit's cost is known (``refit_seconds``), it first examines one batch, and it stops there when
    its measured cost per observation times those still to examine exceeds their refits' cost: the refits, exact,
    then settle them (:func:`_refit_seconds`)."""
    first = _one_batch(o["batch_size"])
    if refit_seconds is None or obs_idx.size <= first:
        return _search(ev, model, draws, cfg, obs_idx, o)
    t0 = time.perf_counter()
    ev = _search(ev, model, draws, cfg, obs_idx[:first], o)
    per_obs = (time.perf_counter() - t0) / first
    rest = obs_idx[first:]
    refits_cost = rest.size * refit_seconds
    if per_obs * rest.size > refits_cost and refits_cost <= _refit_budget(o["refit"]):
        return ev
    return _search(ev, model, draws, cfg, rest, o)


def _search(ev, model, draws, cfg, idx, o):
    """``ev`` with the search's results on ``idx``. On a model without a declared structure, whose search costs
    seconds per observation, the quick transformations (:func:`~ppl_loo.workflow.loo.adapt.quick_config`) run first,
    and every transformation only on what the verdict then leaves unsettled; not for one observation of a JAX model,
    whose evaluations are cheap next to the quick program's compilation (a Stan program's search pays per
    evaluation, through the bridge's host callbacks, and the quick transformations spare most of them)."""
    labels = candidate_labels(cfg)
    several = len(idx) > 1 or (len(idx) == 1 and search_on_host(model))
    quick = quick_config(cfg) if model.structure is None and several else None
    if quick is not None:
        sub = candidate_labels(quick)
        out = run_search(model, draws, quick, idx, o["batch_size"], o["progressbar"], o["client"])
        ev = ev.with_search({i: widen(r, sub, labels) for i, r in zip(idx.tolist(), out)}, labels)
        idx = idx[verdict(ev, o["rules"]).unsettled[idx]]
        if not idx.size:
            return ev
    out = run_search(model, draws, cfg, idx, o["batch_size"], o["progressbar"], o["client"])
    return ev.with_search(dict(zip(idx.tolist(), out)), labels)


def _corroborate(ev, model, draws, cfg, alone, se, o):
    """The search on the observations of ``alone`` (in order) that the mixture estimate settles by itself with an SE
    ``se`` above :data:`CORROBORATE_SE`: all of them where the model's structure makes the search cheap (a GLM: lines
    through the linear predictor), else one batch. Those estimates are settled already: the search buys a second
    opinion and precision where they are least precise, not an answer."""
    alone = np.asarray([i for i in alone if i not in ev.search and se[i] > CORROBORATE_SE], dtype=int)
    if model.structure is None:
        alone = alone[:_one_batch(o["batch_size"])]
    return _search(ev, model, draws, cfg, alone, o) if alone.size else ev


def _refit_seconds(data, refit):
    """The cost of one refit, as the fit's own recorded wall time (:func:`~ppl_loo.workflow.loo.inputs.fit_seconds`),
    where the observations the search leaves unsettled are refit (``refit="doubtful"`` or a time budget); None
    otherwise or where the fit's time is not recorded. Refits run with the fit's settings, one after the other at
    most: an upper bound of their cost (batched refits cost less). The refits that take SMC's place do not stop the
    search by its measured time: two runs of one call would differ."""
    if (isinstance(refit, str) and refit == "doubtful") or _refit_budget(refit) < np.inf:
        return fit_seconds(data)
    return None


def _refit_budget(refit):
    """``refit=``'s time budget in seconds (``inf``: none)."""
    if isinstance(refit, (int, float, np.integer, np.floating)) and not isinstance(refit, bool):
        return float(refit)
    return np.inf


def _one_batch(batch_size):
    """How many observations one call of the search examines (``batch_size="auto"``: the most it takes here)."""
    if batch_size != "auto":
        return int(batch_size)
    return CPU_MAX_BATCH if device_free_bytes() is None else ACCELERATOR_MAX_BATCH


def _convergence(draws, stored, flagged, max_rhat, rhat_where):
    """:func:`~ppl_loo.workflow.loo.verdict.convergence` of every observation (out of core: of the flagged ones, whose
    log-likelihood is in memory; the others pass unless the parameters have not mixed at all)."""
    if stored is None:
        return convergence(draws.ll, draws.n_chains, max_rhat, rhat_where, draws.approx)
    idx = np.flatnonzero(flagged)
    some = convergence(draws.ll.values, draws.n_chains, max_rhat, rhat_where, draws.approx)
    n = flagged.shape[0]
    rhat, ess, ok = np.full(n, np.nan), np.full(n, np.nan), np.full(n, not max_rhat > RHAT_NOT_MIXED)
    rhat[idx], ess[idx], ok[idx] = some.rhat, some.ess, some.ok
    return some._replace(rhat=rhat, ess=ess, ok=ok)


def _candidates(ev, cfg, draws, n, S, in_memory):
    """``res.candidates`` and the chosen candidates' weights, from the search's results (observations in order)."""
    table = Candidates if in_memory else SearchedCandidates  # out of core: rows of the searched only
    order = sorted(ev.search)
    cands = table.empty(candidate_labels(cfg), n, draws.n_chains, len(order), S)
    for j, i in enumerate(order):
        cands.record(i, j, ev.search[i], draws.approx)
    cands.obs_order = np.asarray(order, dtype=int)
    return cands


def _plain_loo(data, var_name, k_threshold, reff, chunk_size, refit, conventions="arviz"):
    """``pl.loo(data)``: plain PSIS-LOO from the stored log-likelihood (in chunks where it is dask-backed)."""
    if refit is not None:
        raise ValueError("refit= needs the model (pl.loo(data, model, refit=...)): it refits the model without "
                         "each observation.")
    if "variational" in data.children:  # CmdStan method=variational draws: not posterior draws
        raise ValueError("data: its draws come from a variational approximation (group 'variational', CmdStan "
                         "method=variational), and plain PSIS-LOO would weight them as posterior draws; pass "
                         "the model, pl.loo(data, pl.StanModel(stan_file, data_dict)), for the weights of Eq. 13")
    return psis_loo(data, var_name, k_threshold, reff, chunk_size, conventions)


def approximation_transforms(draws, transforms, names):
    """The proposals of the approximation the draws come from, added to ``transforms="all"``: the
    Laplace cavity (any Gaussian ``q``) and the projective LOO update (mean-field ``q``, QNVB)."""
    if draws.gauss is None or not (isinstance(transforms, str) and transforms == "all"):
        return []
    extra = ["cavity"] + (["projective"] if isinstance(draws.gauss, MeanField) else [])
    return [t for t in extra if t not in names]


def approx_summary(draws, plain, k_threshold):
    """``approximation``, ``pareto_k_q`` (k-hat of p/q over the draws) and, per observation,
    ``approx_ok`` (plain Eq. 13 k-hat at most the threshold); empty for MCMC draws."""
    if not draws.approx:
        return {}
    log_r = np.asarray(draws.logp0, dtype=np.float64) - np.asarray(draws.log_q0, dtype=np.float64)
    k_q = float(np.asarray(psislw(log_r, 1.0)[1]).ravel()[0])
    if np.ptp(log_r) <= 1e-8 * (1.0 + np.max(np.abs(log_r))):  # q = p up to a constant: constant weights
        k_q = -np.inf
    elif not np.isfinite(k_q):  # the tail underflows: one draw carries (nearly) all the weight
        k_q = np.inf
    return {"approximation": draws.approx_method, "pareto_k_q": k_q,
            "approx_ok_values": np.asarray(plain.k) <= k_threshold}


def _check_var_name(var_name):
    if var_name is not None and not isinstance(var_name, str):
        raise TypeError(f"var_name={var_name!r}: give the name of the log-likelihood variable as a string "
                        "(e.g. var_name='y'), or None when there is one.")


def _check_transform_names(transforms):
    if not (isinstance(transforms, str) or (np.iterable(transforms) and all(isinstance(t, str) for t in transforms))):
        raise ValueError(f"search: transforms={transforms!r}: give 'all' or a sequence of transformation names, e.g. "
                         "('pmm1', 'kl', 'newton').")
    return check_transforms(transforms, DEFAULT_TRANSFORMS)


def check_hbar(hbar):
    """``hbar`` as a tuple of finite non-negative floats (default :data:`DEFAULT_HBAR`), or a ValueError naming it."""
    try:
        hbar = DEFAULT_HBAR if hbar is None else tuple(float(h) for h in np.atleast_1d(hbar))
    except (TypeError, ValueError) as err:
        raise ValueError(f"search: hbar={hbar!r}: give the step-size grid as a sequence of non-negative numbers "
                         "(default 4.0 ** -np.arange(11)).") from err
    if not hbar or any((not np.isfinite(h)) or h < 0 for h in hbar):
        raise ValueError(f"hbar must be finite and non-negative; got {hbar}.")
    return hbar


def _which(data, var_name, model, mask, reason, limit=5):
    """``"y[i=3]: reason; ..."`` for the first ``limit`` observations of ``mask``."""
    idx = np.flatnonzero(mask)
    if not idx.size:
        return ""
    ref0 = with_stan_labels(pointwise_factory(data, var_name, model, mask.size)(np.zeros(mask.size), var_name),
                            stan_labelled(data, model))
    text = "; ".join(f"{obs_labels(ref0, [i])}: {reason[i]}" for i in idx[:limit])
    return text + (f"; and {idx.size - limit} more" if idx.size > limit else "")


def _warn(v, cands, conv, k_threshold, n_searched, which=""):
    n_doubtful = int(np.sum(v.doubtful))
    if n_doubtful and conv.max_rhat > RHAT_NOT_MIXED:
        warn_unconverged(conv.max_rhat, conv.max_rhat_var, n_doubtful, which)
    elif n_doubtful:
        warn_doubtful(v, k_threshold, which)
    n_identity = int(np.sum(v.identity_failed > 0))
    if n_identity:
        warn_identity(n_identity, n_searched, float(np.nanmax(cands.table["max_log_ratio"])))


def _result(data, model, draws, plain, v, cands, cfg, flagged, refit_info, approx_ok_values=None, lpd=None, **extra):
    """The :class:`LooResult`: pointwise DataArrays over the log-likelihood's observation dims, the
    candidate table, and the plain data :func:`ppl_loo.loo_expectations` needs (weights, settings)."""
    S, n = draws.ll.shape
    da = pointwise_factory(data, draws.var_name, model, n)
    p_loo_i = (logmeanexp(draws.ll) if lpd is None else lpd) - v.elpd  # lpd: from the chunks (out of core)
    obs_idx = cands.obs_order
    used = v.use_adapted[obs_idx]
    searched = np.zeros(n, bool)
    searched[obs_idx] = True
    arrays = {"elpd_i": v.elpd, "pareto_k": v.k, "p_loo_i": p_loo_i, "influence_pareto_k": plain.k,
              "n_eff_i": v.n_eff, "pareto_k_psis": plain.k, "transform": v.transform,
              "hbar_used": v.hbar, "mcse_elpd_i": v.mcse, "influence": plain.influence, "doubtful": v.doubtful,
              "refit": v.refit, "searched": searched, "reason": v.reason, "evidence": v.evidence}
    if approx_ok_values is not None:
        arrays["approx_ok"] = approx_ok_values
    return LooResult(
        elpd=stable_sum(v.elpd), se=stable_se(v.elpd),
        p=stable_sum(p_loo_i), n_samples=S, n_data_points=n, scale="log", warning=bool(np.any(v.doubtful)),
        approx_posterior=draws.approx, refit_info=refit_info, candidates=cands.as_dict(), var_name=draws.var_name,
        stan_labels=stan_labelled(data, model), n_params=int(draws.theta.shape[1]),
        log_weights=plain.lw if isinstance(plain.lw, xr.DataArray) else draws_array(data, plain.lw.T, da(plain.k, None),
                                                                                   "log_weights"),
        adapted_log_weights=adapted_weights_array(obs_idx[used], [cands.labels[b] for b in cands.best[used]],
                                                  cands.lw[used]),
        log_q=draws_array(data, np.asarray(draws.log_q0), None, "log_q") if draws.approx else None,
        engine_config=config_to_plain(cfg, not draws.approx), **{k: da(x, k) for k, x in arrays.items()}, **extra,
    )


def pointwise_factory(data, var_name, model, n):
    """``make(values, name)``: a DataArray over the observation dims of the log-likelihood variable
    (the stored group's where it fits, else the model's dims and coordinates)."""
    try:
        ref = get_log_likelihood(data, var_name)
    except ValueError:
        ref = None
    if ref is not None and int(np.prod([ref.sizes[d] for d in ref.dims if d not in SAMPLE_DIMS])) == n:
        ref = align_obs_dims(ref, model.obs_dims, f"log_likelihood[{ref.name!r}]")
        ref0 = ref.isel(chain=0, draw=0, drop=True)
        dims, shape, coords = ref0.dims, ref0.shape, {k: v for k, v in ref0.coords.items()}
    else:
        shape = tuple(model.obs_shape) if model.obs_shape else (n,)
        dims = tuple(model.obs_dims)[: len(shape)] if len(model.obs_dims) >= len(shape) else tuple(
            f"{var_name}_dim_{j}" for j in range(len(shape)))
        # the model's coordinate values of those dims (PyMC coords), where their lengths fit
        mc = model.coords or {}
        coords = {d: np.asarray(mc[d]) for d, k in zip(dims, shape) if d in mc and len(mc[d]) == k}

    def make(values, name):
        return xr.DataArray(np.asarray(values).reshape(shape), dims=dims, coords=coords, name=name)

    return make
