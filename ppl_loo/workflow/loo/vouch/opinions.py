"""The second-opinion stages of ``pl.loo`` (``second_opinions=``: ``mixture``, ``smc``): each runs on what the
verdict leaves unsettled (:func:`ppl_loo.workflow.loo.verdict.verdict`) and returns an
:class:`~ppl_loo.workflow.loo.vouch.rule.Opinion`."""

from __future__ import annotations

import warnings

import numpy as np

from ppl_loo.numerics.loo import PLAIN_VOUCH_K
from ppl_loo.numerics.random import seed_from
from ppl_loo.workflow.exact.refit import batched_refit_density, batched_warmup, refit_settings
from ppl_loo.workflow.loo.adapt import search_on_host
from ppl_loo.workflow.loo.vouch.mixture import MAX_DIVERGENT, MIN_ESS, mixture_run_ok, mixture_settings, run_mixture
from ppl_loo.workflow.loo.vouch.rule import Opinion
from ppl_loo.workflow.loo.vouch.smc import run_smc, smc_gradients

__all__ = ["mixture_stage", "smc_stage", "smc_targets", "refit_route", "route_refit_options",
           "ROUTE_DRAWS", "needs_independent", "divergent_share",
           "refits_before_mixture", "refits_before_search",
           "leapfrog_per_draw",
           "check_opinion_args", "mixture_run_settings", "DEFAULT_SETTINGS",
           "SMC_AUTO_MAX_DIM",
           "ALONE_MAX_PARAM_RHAT"]

#: a mixture run whose own checks fail (divergences, its weights' R-hat or ESS) runs once more with twice the draws
#: and at least this target acceptance (smaller steps: fewer divergences and better-mixed weights)
RETRY_TARGET_ACCEPT = 0.95
#: smc "auto" runs tempered SMC only for models of at most this many unconstrained parameters
SMC_AUTO_MAX_DIM = 100
#: a mixture estimate vouches alone only when its run's largest parameter R-hat is at most this: 1.1, the classic
#: threshold for chains that have not mixed (Gelman et al. 2013); over thousands of coordinates 1.01 or 1.05 is
#: exceeded by chance (a horseshoe's local scales), while chains in different modes exceed 1.1
ALONE_MAX_PARAM_RHAT = 1.1
#: the mixture run's settings where the fit has none to reuse (one chain, or too few draws)
DEFAULT_SETTINGS = {"chains": 4, "draws": 1000, "warmup": 1000, "target_accept": 0.8, "max_tree_depth": 10}


def check_opinion_args(mixture, smc, mixture_kwargs):
    """Bad ``mixture`` / ``smc`` / ``mixture_options`` (``second_opinions=``) fail before the search."""
    for name, value in (("mixture", mixture), ("smc", smc)):
        if not (value is True or value is False or value == "auto"):
            raise ValueError(f"second_opinions: {name}={value!r}: use 'auto' (when an observation is doubtful after "
                             "the search), True or False.")
    if mixture_kwargs is not None and not isinstance(mixture_kwargs, dict):
        raise ValueError(f"mixture_options={mixture_kwargs!r}: give a dict of settings, e.g. {{'draws': 500}}.")
    mixture_settings(DEFAULT_SETTINGS, mixture_kwargs)


def mixture_run_settings(data, overrides=None):
    """The mixture run's settings: the fit's (as ``refit=`` reads them; :data:`DEFAULT_SETTINGS` where it has
    none to reuse), with at least :data:`DEFAULT_SETTINGS`' warmup and draws per chain, then ``overrides``.

    The floor (also 4 chains: an estimate's SE includes the spread of the per-chain estimates, which two chains
    resolve too coarsely for an estimate that vouches alone): each estimate must reach an effective sample size of 100
    of its own (MCMC and importance sampling), which a short fit's settings (a few hundred draws) cannot give."""
    try:
        base = refit_settings(data)
    except ValueError:  # one chain or few draws: nothing to reuse
        base = dict(DEFAULT_SETTINGS)
    for key in ("warmup", "draws", "chains"):
        base[key] = max(int(base[key]), DEFAULT_SETTINGS[key])
    return mixture_settings(base, overrides)


def mixture_stage(model, data, draws, mixture_kwargs, random_seed, kept=None, k_threshold=None):
    """Mixture importance sampling (one MCMC run for every observation): the opinion and the run's info (with the
    error where it could not run); the run that counts gives its draws to ``kept`` (a
    :class:`~ppl_loo.workflow.loo.kept.KeptDraws`). ``k_threshold``: the user's ``k_threshold`` of ``pl.loo``, the
    largest k-hat of an estimate's weights that vouches (None: the engine's rule ``min(1 - 1 / log10(S), 0.7)`` at the
    run's own number of draws ``S``)."""
    settings = mixture_run_settings(data, mixture_kwargs)
    try:
        run = run_mixture(model, draws.theta, settings, random_seed, k_threshold)
        if not mixture_run_ok(run.info) and _retry_can_pass(run.info):  # once more, twice as long, more careful steps
            retry = {**settings, "draws": 2 * settings["draws"],
                     "target_accept": max(float(settings["target_accept"]), RETRY_TARGET_ACCEPT)}
            seed = int(seed_from(random_seed, np.asarray(draws.theta, dtype=np.float64))) + 1
            again = run_mixture(model, draws.theta, retry, seed, k_threshold)
            first = {k: run.info[k] for k in ("divergences", "rhat_mixture_weights", "ess_posterior_weights",
                                               "seconds", "draws")}
            if mixture_run_ok(again.info) or again.ok.sum() > run.ok.sum():  # the second run counts
                run = again._replace(info={**again.info, "seconds": again.info["seconds"] + first["seconds"],
                                           "first_run": first})
            else:  # the first counts; the second did no better
                run.info["second_run"] = {k: again.info[k] for k in first}
    except (ValueError, RuntimeError, TypeError) as err:
        warnings.warn(f"pl.loo: the mixture importance-sampling run failed ({err}); the observations it was to "
                      "check are judged without it.", UserWarning, stacklevel=4)
        return None, {"error": str(err)}
    if kept is not None:
        kept.add_mixture(run.theta, run.ll)
    info = {**run.info, "elpd_i": run.elpd.tolist(), "mcse_i": run.mcse.tolist(), "ok_i": run.ok.tolist(),
            "khat_i": run.khat.tolist(), "n_ok": int(run.ok.sum())}
    # vouching alone asks for the whole run to have mixed, its parameters too: a run whose chains sit in different
    # modes can pass every per-observation check and still be off
    alone = bool(np.nan_to_num(run.info.get("max_rhat", np.nan), nan=np.inf) <= ALONE_MAX_PARAM_RHAT)
    return Opinion("mixture", run.elpd, run.mcse, run.ok, alone), info


def _retry_can_pass(info):
    """Whether a second mixture run, twice as long and with more careful steps, can pass the checks the first failed:
    not where the posterior's importance weights alone fail, with an ESS under half the minimum (twice the draws
    about double it)."""
    ess_only = mixture_run_ok({**info, "ess_posterior_weights": MIN_ESS})
    return not ess_only or 2.0 * float(info["ess_posterior_weights"]) >= MIN_ESS


def smc_targets(v, plain, ev, smc):
    """The observations tempered SMC (or, where cheaper, batched refits: :func:`refits_cheaper`) takes: with ``smc``
    True every observation the search examined; with "auto" what the verdict ``v`` leaves unsettled and what only maps
    of the posterior draws vouch for where plain PSIS failed (k-hat above 0.5) and no passing mixture estimate checked
    it (maps of the same draws can miss together), each only where the draws of the observation converged (SMC starts
    from them)."""
    if smc is True:
        return np.asarray(sorted(ev.search), dtype=int)
    checked = ev.opinions[0].ok if ev.opinions else np.zeros(v.elpd.shape[0], bool)
    risky = (v.evidence == "adapted") & (np.asarray(plain.k) > PLAIN_VOUCH_K) & ~checked
    return np.flatnonzero((v.unsettled | risky) & ev.conv.ok)


def smc_stage(model, draws, targets, smc, random_seed):
    """Tempered SMC (``smc`` of ``second_opinions=``) on ``targets`` (:func:`smc_targets`). Returns
    ``(opinion or None, info or None)``."""
    if smc is False or draws.approx or not len(targets):
        return None, None
    d = int(np.asarray(draws.theta).shape[1])
    if smc == "auto" and d > SMC_AUTO_MAX_DIM:
        return None, {"skipped": f"{d} parameters, above smc='auto''s limit of {SMC_AUTO_MAX_DIM} (the cost of "
                                 "tempered SMC's moves grows with the dimension); second_opinions={'smc': True} "
                                 "runs it",
                      "observations": [], "particles": 0, "n_ok": 0, "seconds": 0.0}
    return run_smc(model, draws, targets, random_seed)


def divergent_share(data):
    """The share of the fit's transitions that diverged (``sample_stats.diverging``; 0 where it is not recorded)."""
    stats = data.get("sample_stats") if hasattr(data, "get") else None
    if stats is None or "diverging" not in stats:
        return 0.0
    div = np.asarray(stats["diverging"].values)
    return float(div.astype(bool).mean()) if div.size else 0.0


def leapfrog_per_draw(data):
    """The mean number of leapfrog steps per draw of the fit (``sample_stats.n_steps``, as PyMC and arviz_base's
    CmdStan reader name it), or None where it is not recorded."""
    stats = data.get("sample_stats") if hasattr(data, "get") else None
    if stats is None or "n_steps" not in stats:
        return None
    steps = float(np.nanmean(np.asarray(stats["n_steps"].values, dtype=np.float64)))
    return steps if np.isfinite(steps) and steps >= 1 else None


#: draws per chain of the refits that take SMC's place (unless ``refit_options`` sets ``draws``): SEs far below
#: ``VOUCH_MAX_SE`` (a refit's bridge estimate has SEs of 0.01-0.06 nats from 1,000 per chain), and enough for the
#: refit's R-hat (at most 1.01) to pass where the chains mixed (at 250 it exceeded 1.01 by chance)
ROUTE_DRAWS = 500


def route_refit_options(data, refit_kwargs):
    """``refit_options`` of the refits that take SMC's place: the user's (without ``checkpoint``, which keeps the
    refits ``refit=`` asks for), with at most :data:`ROUTE_DRAWS` draws per chain unless they set ``draws``."""
    options = {k: v for k, v in dict(refit_kwargs or {}).items() if k != "checkpoint"}  # the user's refits' file
    if "draws" not in options:
        options["draws"] = min(int(data["posterior"].sizes["draw"]), ROUTE_DRAWS)
    return options


def refit_route(data, model, draws, smc, refit, refit_kwargs):
    """Whether the observations that ask for independent evidence (:func:`smc_targets`) are refit instead of going
    to tempered SMC, and the costs compared: ``(bool, {"refit": ..., "smc": ..., "leapfrog_per_draw": ...} or
    None)``. Only with ``smc="auto"``
    where SMC would run (at most :data:`SMC_AUTO_MAX_DIM` parameters) and a refit costs fewer gradient evaluations
    than SMC's cheapest run on one observation.

    A refit runs the fit's sampler settings (:func:`~ppl_loo.workflow.exact.refit.refit_settings`; at most
    :data:`ROUTE_DRAWS` draws per chain, :func:`route_refit_options`): chains x (its warmup + draws) x the fit's mean
    leapfrog steps per draw (where the fit does not record them, the most a draw can take,
    ``2 ** max_tree_depth - 1``). SMC's cheapest run is one tempering step: particles x
    :data:`~ppl_loo.workflow.loo.vouch.smc.MOVES` x :data:`~ppl_loo.workflow.loo.vouch.smc.LEAPFROG`; it takes more
    steps the further the LOO posterior is from the posterior. Both counts are per observation (batched refits run
    their observations side by side, as SMC does). Never for draws of an approximation, where the fit's settings
    cannot be reused (one chain), where the user chose the refits (``refit=`` indices, ``"flagged"`` or a time
    budget; ``"doubtful"`` refits what the route leaves doubtful), or where
    more than :data:`~ppl_loo.workflow.loo.vouch.mixture.MAX_DIVERGENT` of the fit's transitions diverged (its sampler
    struggles with the geometry, as refits with its settings would: a funnel)."""
    d = int(np.asarray(draws.theta).shape[1])
    own = refit is not None and not (isinstance(refit, str) and refit == "doubtful")
    if smc != "auto" or draws.approx or d > SMC_AUTO_MAX_DIM or own or divergent_share(data) > MAX_DIVERGENT:
        return False, None
    try:
        settings = refit_settings(data, route_refit_options(data, refit_kwargs))
    except ValueError:
        return False, None
    steps = leapfrog_per_draw(data) or float(2 ** settings["max_tree_depth"] - 1)
    warmup = batched_warmup(settings) if batched_refit_density(model) is not None else settings["warmup"]
    refit = settings["chains"] * (warmup + settings["draws"]) * steps
    smc_cost = smc_gradients(int(np.asarray(draws.theta).shape[0]))
    return bool(refit < smc_cost), {"refit": float(refit), "smc": float(smc_cost), "leapfrog_per_draw": float(steps)}


def refits_before_mixture(route, data, mixture_kwargs, n_unsettled):
    """Whether refitting the ``n_unsettled`` observations plain PSIS leaves unsettled costs fewer gradient evaluations
    than the mixture run alone (chains x (warmup + draws) of :func:`mixture_run_settings` x the fit's leapfrog steps
    per draw): a few hard observations of a model whose refits take SMC's place (``route``, :func:`refit_route`) are
    then refit at once, exact, with neither the mixture run nor the search."""
    if not route[0] or n_unsettled < 1:
        return False
    settings = mixture_run_settings(data, mixture_kwargs)
    mixture = settings["chains"] * (settings["warmup"] + settings["draws"]) * route[1]["leapfrog_per_draw"]
    return bool(n_unsettled * route[1]["refit"] < mixture)


def refits_before_search(route, model, n_candidates, n_draws):
    """Whether the observations the search would examine are refit first (those a refit cannot settle are searched
    after): where refits take SMC's place (``route``, :func:`refit_route`) and the model is a Stan program without a
    declared structure, whose search evaluates the program through the bridge's host callbacks at the same cost per
    gradient as Stan's own NUTS, and one refit costs fewer gradient evaluations than the search spends on one
    observation: at least one log density per candidate and draw (``n_candidates`` x ``n_draws``; with the gradient
    steps of the maps, several times that). A JAX model's search evaluates its candidates vectorized, and a
    structured model's along lines of its linear predictor, far below NUTS's cost per gradient."""
    if not route[0] or not search_on_host(model) or getattr(model, "structure", None) is not None:
        return False
    return bool(route[1]["refit"] < n_candidates * n_draws)


def needs_independent(ev, idx):
    """Of the observations ``idx``, those whose search estimate alone could not settle them where independent
    evidence is at hand (:func:`smc_targets`): plain PSIS failed (k-hat above 0.5), no passing mixture estimate, and
    draws that converged."""
    idx = np.asarray(idx, dtype=int)
    checked = ev.opinions[0].ok if ev.opinions else np.zeros(np.asarray(ev.plain.k).shape[0], bool)
    keep = (np.asarray(ev.plain.k)[idx] > PLAIN_VOUCH_K) & ~checked[idx] & np.asarray(ev.conv.ok)[idx]
    return idx[keep]
