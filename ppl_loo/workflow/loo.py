"""``ppl_loo.loo``: adaptive importance-sampling LOO-CV (workflow layer).

DataTree in, :class:`~ppl_loo.workflow.result.LooResult` out. The numerics live in
:mod:`ppl_loo.numerics`; this module reads the user's data, runs plain PSIS on every observation,
decides which observations need adaptation, runs the adaptive search on those, and assembles the
pointwise results over the observation dims of the log-likelihood variable.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.numerics.loo import (
    AGREE_Z,
    PLAIN_LIKE_TV,
    PLAIN_VOUCH_K,
    TRANSFORMS,
    EngineConfig,
    EngineData,
    candidate_labels,
    psis_identity,
)
from ppl_loo.model import as_model
from ppl_loo.numerics.psis import khat_threshold
from ppl_loo.workflow.inputs import (
    SAMPLE_DIMS,
    check_datatree,
    check_finite,
    get_log_likelihood,
    RHAT_VOUCH,
    max_rhat_of,
    r_eff_of,
    stack_draws,
)
from ppl_loo.workflow.engine import adapted_weights_array, compiled_engine, config_to_plain, draws_array
from ppl_loo.workflow.result import LooResult
from ppl_loo.jax_settings import uses_x64

__all__ = ["loo", "DEFAULT_HBAR", "DEFAULT_TRANSFORMS"]

#: plain PSIS is adapted from this k-hat on (its variance is infinite above 1/2)
ADAPT_K = 0.5
#: ``adapt="auto"`` examines every observation of data sets up to this size
ADAPT_ALL_N = 100

DEFAULT_HBAR = tuple(float(x) for x in 4.0 ** -np.arange(11))
#: the papers' seven, iterated moment matching, the Newton-step proposal and the defensive mixtures (not MM3:
#: its full-covariance map, estimated from heavy-tailed weights, is optimistic in the truth suite)
DEFAULT_TRANSFORMS = ("pmm1", "pmm2", "kl", "var", "ll", "mm1", "mm2", "mm_iter", "newton", "newton_mix", "pmm1_mix",
                      "pmm2_mix")


@uses_x64
def loo(
    data,
    model=None,
    *,
    var_name=None,
    transforms="all",
    hbar=None,
    k_threshold=None,
    pointwise=True,
    progressbar=True,
    random_seed=None,
    log_q=None,
    influence_threshold=None,
    jacobian="auto",
    batch_size="auto",
    min_ess=None,
    refit=None,
    refit_kwargs=None,
    adapt="auto",
):
    """Adaptive PSIS-LOO-CV.

    Parameters
    ----------
    data : xarray.DataTree
        With a ``posterior`` group (and ``log_likelihood`` where present).
    model : pymc.Model, StanModel, PosteriorModel or None
        A ``pymc.Model`` (wrapped in :class:`~ppl_loo.models.PyMCModel`), a :class:`~ppl_loo.StanModel`
        (exact LOO by data deletion, :class:`~ppl_loo.model.stan.posterior.StanPosterior`), a :class:`~ppl_loo.JaxModel`,
        a closed-form model (:class:`~ppl_loo.models.LogisticRegression`,
        :class:`~ppl_loo.models.ReluNet`), or None for plain PSIS-LOO from the ``log_likelihood``
        group (as ``arviz_stats.loo``).
    var_name : str, optional
        The log-likelihood variable (needed when there are several).
    transforms : "all" or sequence of str
        Names from ``"pmm1", "pmm2", "kl", "var", "ll", "mm1", "mm2", "mm3"`` (the papers) and
        the project's extensions: ``"mm_iter"`` (iterated moment matching, 1-4 iterations),
        ``"newton"`` (Newton-step proposal) and the mixtures ``"newton_mix"``, ``"pmm1_mix"``,
        ``"pmm2_mix"``, ``"mm3_mix"`` (deterministic mixture with the draws' own distribution).
    hbar : sequence of float, optional
        Step grid; default ``4.0 ** -np.arange(11)`` (the papers' grid).
    k_threshold : float, optional
        Default ``min(1 - 1/log10(S), 0.7)``.
    pointwise : bool
        Keep pointwise results (always computed).
    progressbar : bool
        Show a progress bar over the adapted observations.
    random_seed : int, optional
        Seed of the refits (``refit=``); the adaptive search itself is deterministic.
    log_q : array-like (chain, draw) or callable, optional
        Log density (up to a constant) of the approximation the draws come from, for draws from a
        variational fit: the weights then use Eq. 13 of the paper instead of Eq. 10. As a JAX
        callable ``log_q(theta)`` of one unconstrained draw, it also enables the mixture
        proposals (``*_mix``), which need ``q`` away from the draws. Default: for a DataTree
        written by :func:`ppl_loo.pvi`, its ``q`` (checked against the stored ``log_q``).
    influence_threshold : float, optional
        Observations whose log-likelihood has posterior variance above this value are adapted even
        when their plain-PSIS k is low: with such a spread the plain importance weights can miss
        the LOO posterior entirely while k-hat looks fine. Default ``log(S / 100)`` (the variance
        at which log-normal weights would keep an effective sample size of 100).
    jacobian : {"auto", "exact", "first_order"}
        Jacobian determinants of the gradient transforms: closed form where the model declares its
        structure, exact autodiff ``log|det|`` for small blocks, else the first-order Eq. 22.
    batch_size : int or "auto"
        Observations evaluated together in one vectorized call: the draws are read once per batch,
        so larger batches are faster and use more memory. ``"auto"`` picks up to 8 within a
        working-memory budget of about 1 GB per batch.
    min_ess : float, optional
        A candidate proposal counts only if the effective sample size ``1 / sum w^2`` of its
        smoothed weights is at least this; default ``min(100, S / 10)``. k-hat alone misses maps
        that send most draws where the LOO posterior has no mass.

    refit : None, "doubtful", "flagged", sequence of int, or float
        Exact LOO by refitting the model without the observation (``reloo`` of R ``loo`` and
        ArviZ), with the model's own sampler and the original fit's settings, for the observations
        the engine cannot vouch for: ``"doubtful"`` (``res.doubtful``), ``"flagged"`` (every
        observation the engine adapted), a list of flat observation indices, or a time budget in
        seconds (the doubtful observations, highest k first, until it is spent). ``elpd_i`` then
        comes from bridge sampling between the refit's draws and the full-data draws, with its
        Monte Carlo SE; ``res.refit`` flags those observations. Needs ``random_seed``.
    refit_kwargs : dict, optional
        Overrides of the refit sampler settings read from the fit: ``chains``, ``draws``,
        ``warmup``, ``target_accept``, ``max_tree_depth``.
    adapt : {"auto", "all", "flagged"}
        Which observations the adaptive search examines. ``"flagged"``: plain-PSIS k above 0.5, or
        influence above ``influence_threshold``. ``"all"``: every observation (a k-hat below 0.5 is
        no guarantee either: in the ground-truth suite plain PSIS with k = 0.47 was 0.19 nats off on
        a Poisson model with one latent variable per observation). ``"auto"`` (default): all when
        there are at most 100 observations, else the flagged ones.

    Returns
    -------
    LooResult
    """
    data = check_datatree(data)
    if refit is not None and model is None:
        raise ValueError("refit= needs the model (pl.loo(data, model, refit=...)): it refits the model without "
                         "each observation.")
    if model is None:
        return _plain_psis(data, var_name, k_threshold, pointwise)
    model = as_model(model, var_name=var_name, data=data)
    names = _check_transforms(transforms)
    hbar = DEFAULT_HBAR if hbar is None else tuple(float(h) for h in np.atleast_1d(hbar))
    if any((not math.isfinite(h)) or h < 0 for h in hbar):
        raise ValueError(f"hbar must be finite and non-negative; got {hbar}.")

    var_name = var_name or model.var_name
    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()), dtype=np.float64)
    check_finite(theta, "the unconstrained posterior draws", "Check the posterior group for NaN/inf draws.")
    S, d = theta.shape
    if S < 10:
        raise ValueError(f"only {S} posterior draws: PSIS needs at least 10 (use hundreds).")
    k_threshold = khat_threshold(S) if k_threshold is None else float(k_threshold)
    theta_j = jnp.asarray(theta)

    logp0, grad_logp0 = model.log_density_and_grad(theta_j)
    ll = np.asarray(model.log_lik(theta_j))  # (S, n)
    check_finite(np.asarray(logp0), "the model's log density at the posterior draws",
                 "The draws may be outside the model's support or from a different model.")
    check_finite(ll, f"the pointwise log-likelihood {var_name!r} at the posterior draws",
                 "The draws may be outside the model's support or from a different model.")
    _compare_log_lik(data, var_name, ll, joint_ok=not getattr(model, "factorizes", True))
    n = ll.shape[1]
    if refit is not None:  # bad refit arguments fail before the search, not after it
        from ppl_loo.workflow.refit import refit_settings, refit_targets

        refit_targets(refit, doubtful=np.zeros(n, bool), flagged=np.zeros(n, bool), k_final=np.zeros(n), n=n)
        refit_settings(data, refit_kwargs)
        if random_seed is None:
            raise ValueError("refit= runs MCMC: pass random_seed=<int> to pl.loo so that the refits are reproducible.")

    if log_q is None:  # draws written by pl.pvi come with their q (Eq. 13); None for other draws
        from ppl_loo.workflow.pvi import pvi_log_q

        log_q = pvi_log_q(data, theta)
    log_q_fn = None
    if log_q is None:
        log_q0 = logp0
        approx = False
    else:
        if callable(log_q):
            log_q_fn = log_q
            log_q = jax.vmap(log_q)(theta_j)
        log_q0 = jnp.asarray(np.asarray(log_q, dtype=np.float64).reshape(-1))
        if log_q0.shape[0] != S:
            raise ValueError(f"log_q must have one value per draw ({S}); got shape {np.shape(log_q)}.")
        check_finite(np.asarray(log_q0), "log_q", "Pass the log density of the approximation at each draw.")
        approx = True

    r_eff = 1.0 if approx else r_eff_of(data, S)
    n_chains = int(data["posterior"].sizes.get("chain", 1))
    # ---------------------------------------------------------------- plain PSIS on every observation
    log_ratios = (-ll + (np.asarray(logp0) - np.asarray(log_q0))[:, None]).T  # (n, S)
    elpd_psis, k_psis, lw_psis = (np.asarray(a) for a in psis_identity(jnp.asarray(log_ratios), jnp.asarray(ll.T), r_eff))
    influence = np.var(ll, axis=0, ddof=1)
    if influence_threshold is None:
        influence_threshold = math.log(max(S / 100.0, 1.0 + 1e-9))
    # a k-hat below the threshold is necessary, not sufficient: plain PSIS is adapted (and checked)
    # from k = 0.5 on, where its variance is already infinite, and wherever the log-likelihood varies
    # so much over the posterior that the plain weights can miss the LOO posterior
    flagged = (k_psis > min(ADAPT_K, k_threshold)) | (influence > influence_threshold) | ~np.isfinite(k_psis)
    if adapt not in ("auto", "all", "flagged"):
        raise ValueError(f"adapt={adapt!r}: use 'auto', 'all' or 'flagged'.")
    if adapt == "all" or (adapt == "auto" and n <= ADAPT_ALL_N):
        flagged = np.ones(n, bool)
    obs_idx = np.flatnonzero(flagged)

    min_ess = min(100.0, S / 10.0) if min_ess is None else float(min_ess)
    cfg = EngineConfig(tuple(names), hbar, float(r_eff), jacobian, min_ess=min_ess, n_chains=n_chains,
                       k_threshold=float(k_threshold))
    labels = candidate_labels(cfg)
    elpd_i = elpd_psis.copy()
    k_final = k_psis.copy()
    transform = np.full(n, "psis", dtype=object)
    hbar_used = np.full(n, np.nan)
    mcse = np.maximum(np.asarray(_psis_mcse(lw_psis, ll.T, r_eff)), _chain_se_psis(log_ratios, ll, n_chains))
    n_eff = r_eff / np.sum(np.exp(2 * lw_psis), axis=1)
    doubtful = np.zeros(n, bool)
    cand_k = np.full((n, len(labels)), np.nan)
    cand_elpd = np.full((n, len(labels)), np.nan)
    cand_kw = np.full((n, len(labels)), np.nan)
    cand_ratio = np.full((n, len(labels)), np.nan)  # max log p(x | D) / q(x), the change-of-variables check
    cand_extra = {key: np.full((n, len(labels)), np.nan) for key in
                  ("log_mean_ratio", "se_log_mean_ratio", "mcse", "se", "ess", "usable", "checks_ok", "dev", "tv")}
    cand_extra["elpd_chains"] = np.full((n, len(labels), max(n_chains, 1)), np.nan)
    identity_failed = np.zeros(n, int)  # candidates whose weights failed it
    use_adapted = np.zeros(n, bool)
    best_all = np.zeros(len(obs_idx), int)
    lw_adapted = np.zeros((len(obs_idx), 2 * S))

    edata = EngineData(theta_j, logp0, log_q0, grad_logp0, model.line_cache(theta_j))
    batch_size = _auto_batch_size(batch_size, S, d, n, len(obs_idx), structured=model.structure is not None,
                                  n_steps=len(hbar))
    search, points, mapped, prepare = compiled_engine(model, cfg, not approx, batch_size, log_q_fn)
    edata = prepare(edata)  # per-run statistics of the draws, shared by every observation
    if len(obs_idx):
        source = model.source
        source.last_callback_error = None
        try:
            results = _run(mapped, edata, obs_idx, ll, batch_size, progressbar)
        except Exception as exc:  # an error in host code called from JAX (Stan): raise it as itself
            stored, source.last_callback_error = getattr(source, "last_callback_error", None), None
            if stored is not None:
                raise stored from exc
            raise
        for j, i in enumerate(obs_idx):
            r = results[j]
            cand_k[i], cand_elpd[i], cand_kw[i] = r["k"], r["elpd"], r["k_w"]
            for key in cand_extra:
                cand_extra[key][i] = r[key]
            if not approx:
                cand_ratio[i] = r["max_log_ratio"]
                identity_failed[i] = int(np.sum(~r["identity_ok"]))
            best = int(r["best"])
            best_all[j] = best
            lw_adapted[j] = r["lw"]
            good = bool(r["usable"][best] and r["checks_ok"][best] and r["k"][best] <= k_threshold)
            trusted = bool(r["trusted"]) and identity_failed[i] == 0
            if trusted:
                use_adapted[i] = True
                elpd_i[i] = float(r["elpd"][best])
                k_final[i] = float(r["k"][best])
                mcse[i] = float(r["se_best"])
                n_eff[i] = float(r["ess"][best]) * r_eff
                transform[i], hbar_used[i] = labels[best]
            else:  # no corroborated adapted candidate: the plain PSIS values stay
                transform[i] = "psis" if good else "failed"
            # plain PSIS is vouched for only where its own k-hat is at most 0.5 (finite variance of the
            # weights) and the threshold, its ESS is fine, and no candidate that passes every check and
            # moved the weights (total variation >= PLAIN_LIKE_TV) contradicts it
            moved_ok = (r["usable"] & r["checks_ok"] & (r["k"] <= k_threshold) & ~(r["tv"] < PLAIN_LIKE_TV))
            contradicts = np.abs(r["elpd"] - elpd_psis[i]) > AGREE_Z * np.hypot(r["se"], mcse[i])
            plain_ok = bool(k_psis[i] <= min(k_threshold, PLAIN_VOUCH_K) and n_eff[i] >= min_ess and identity_failed[i] == 0
                            and not np.any(moved_ok & contradicts))
            if not trusted and plain_ok:
                transform[i] = "psis"
            doubtful[i] = not (trusted or plain_ok)

    # the draws themselves: where they have not converged, nothing estimated from them is vouched for
    max_rhat, rhat_where = (float("nan"), None) if approx else max_rhat_of(data)
    unconverged = bool(max_rhat > RHAT_VOUCH)
    if unconverged:
        doubtful[:] = True

    refit_flag = np.zeros(n, bool)
    refit_info = {}
    if refit is not None:
        refit_info, refit_skipped = _apply_refits(
            model, data, theta, ll, refit, refit_kwargs, random_seed, progressbar,
            doubtful=doubtful, flagged=flagged, k_final=k_final)
        for i, rec in refit_info.items():
            elpd_i[i], mcse[i] = rec["elpd_i"], rec["mcse"]
            transform[i], hbar_used[i], k_final[i] = "refit", np.nan, 0.0
            refit_flag[i] = True
            doubtful[i] = not _refit_converged(rec)
        if refit_skipped:
            warnings.warn(f"refit: the time budget was spent before {len(refit_skipped)} doubtful observation(s) "
                          f"{refit_skipped[:10]}{' ...' if len(refit_skipped) > 10 else ''} could be refit; they keep "
                          "their importance-sampling estimate (res.doubtful).", UserWarning, stacklevel=2)

    lpd_i = _logmeanexp(ll)
    p_loo_i = lpd_i - elpd_i
    se = float(np.sqrt(n * np.var(elpd_i, ddof=1))) if n > 1 else 0.0
    n_doubtful = int(np.sum(doubtful))
    warn = n_doubtful > 0
    if unconverged and n_doubtful:
        warnings.warn(
            f"The posterior draws have not converged: R-hat {max_rhat:.3f} for {rhat_where} (above "
            f"{RHAT_VOUCH}, Vehtari et al. 2021). Importance sampling from them, plain PSIS and every adapted "
            f"proposal alike, can be off by more than its Monte Carlo error whatever its k-hat, so all "
            f"{n_doubtful} observation(s) not refit are doubtful (res.doubtful); the estimates are unchanged. "
            "Run longer or more chains (or reparameterize) and call pl.loo again, or refit: "
            "pl.loo(data, model, refit='doubtful', random_seed=...).",
            UserWarning,
            stacklevel=2,
        )
    elif warn:
        n_failed = int(np.sum((transform == "failed") & doubtful))
        warnings.warn(
            f"{n_doubtful} observation(s) are doubtful (res.doubtful): the adaptive search found no proposal it "
            f"can vouch for ({n_failed} where no candidate passed every check with Pareto k at most "
            f"{k_threshold:.2f}, the others without an independent confirmation), so they keep their plain PSIS elpd_i, which can be off by more than its "
            f"Monte Carlo error. Together they carry {float(np.sum(elpd_i[doubtful])):.2f} of elpd_loo. Exact LOO: "
            "pl.loo(data, model, refit='doubtful', random_seed=...) refits the model without each of them.",
            UserWarning,
            stacklevel=2,
        )

    n_identity = int(np.sum(identity_failed > 0))
    if n_identity:
        worst = float(np.nanmax(cand_ratio))
        warnings.warn(
            f"The posterior draws fail the change-of-variables check for {n_identity} of {len(obs_idx)} adapted "
            f"observation(s): moving the draws by a candidate map raised the posterior density ratio "
            f"p(T theta)|J|/p(theta) of a draw to exp({worst:.0f}), which has probability below 1e-6 for draws "
            "from this model's posterior (its mean must be 1). The draws do not represent the posterior in "
            "those directions (unconverged or stuck chains, a multimodal posterior, or draws of another "
            "model), so importance sampling from them, plain PSIS included, can be off by more than its "
            "k-hat suggests. Those candidates were not used and the observations are marked doubtful "
            "(res.doubtful). Check R-hat and ESS, run longer or more chains, or refit without them.",
            UserWarning,
            stacklevel=2,
        )

    da = _pointwise_factory(data, var_name, model, n)
    used = use_adapted[obs_idx]  # the plain data loo_expectation needs to rebuild the weighted points
    weights = dict(log_weights=draws_array(data, lw_psis.T, da(k_psis, None), "log_weights"),
                   adapted_log_weights=adapted_weights_array(obs_idx[used], [labels[b] for b in best_all[used]],
                                                             lw_adapted[used]),
                   log_q=draws_array(data, np.asarray(log_q0), None, "log_q") if approx else None,
                   engine_config=config_to_plain(cfg, not approx), searched=da(flagged, "searched"))
    return LooResult(
        elpd=float(np.sum(elpd_i)),
        se=se,
        p=float(np.sum(p_loo_i)),
        n_samples=S,
        n_data_points=n,
        scale="log",
        warning=warn,
        good_k=k_threshold,
        elpd_i=da(elpd_i, "elpd_i"),
        pareto_k=da(k_final, "pareto_k"),
        approx_posterior=approx,
        p_loo_i=da(p_loo_i, "p_loo_i"),
        influence_pareto_k=da(k_psis, "influence_pareto_k"),
        n_eff_i=da(n_eff, "n_eff_i"),
        pareto_k_psis=da(k_psis, "pareto_k_psis"),
        transform=da(transform.astype(str), "transform"),
        hbar_used=da(hbar_used, "hbar_used"),
        mcse_elpd_i=da(mcse, "mcse_elpd_i"),
        influence=da(influence, "influence"),
        doubtful=da(doubtful, "doubtful"),
        refit=da(refit_flag, "refit"),
        refit_info=refit_info,
        candidates={"labels": labels, "k": cand_k, "k_weights": cand_kw, "elpd": cand_elpd,
                    "max_log_ratio": cand_ratio, **cand_extra},
        var_name=var_name,
        max_rhat=max_rhat,
        max_rhat_var=rhat_where,
        **weights,
    )


# ----------------------------------------------------------------------------- helpers
def _apply_refits(model, data, theta, ll, refit, refit_kwargs, random_seed, progressbar, *, doubtful, flagged,
                  k_final):
    """Run the requested refits (:mod:`ppl_loo.workflow.refit`); ``(records, skipped)``."""
    from ppl_loo.workflow.refit import refit_settings, refit_targets, run_refits

    targets, budget = refit_targets(refit, doubtful=doubtful, flagged=flagged, k_final=k_final, n=ll.shape[1])
    if not targets:
        return {}, []
    settings = refit_settings(data, refit_kwargs)
    records, skipped = run_refits(model, theta, ll, targets, settings, random_seed=random_seed, budget_s=budget,
                                  progressbar=progressbar)
    bad = [i for i, r in records.items() if not _refit_converged(r)]
    if bad:
        worst = max(float(np.nan_to_num(records[i][key], nan=np.inf)) for i in bad for key in ("rhat_loglik", "rhat_max"))
        warnings.warn(f"refit: the refits of observation(s) {bad} did not converge (R-hat of a parameter or of "
                      f"log p(y_i | theta) above {RHAT_VOUCH}, up to {worst:.3f}); they stay doubtful. Pass "
                      "refit_kwargs with more draws or warmup.", UserWarning, stacklevel=3)
    return records, skipped


def _refit_converged(rec):
    """A refit is vouched for when its draws converged: R-hat of every unconstrained parameter and of
    ``log p(y_i | theta)`` at most :data:`RHAT_VOUCH`, as the main fit's draws."""
    return bool(rec["rhat_loglik"] <= RHAT_VOUCH and rec.get("rhat_max", 1.0) <= RHAT_VOUCH)


def _auto_batch_size(batch_size, S, d, n, n_flagged, structured=True, n_steps=11):
    """``batch_size="auto"``: up to 8 observations per vectorized call within ~1 GB of temporaries.

    One observation's search holds a few ``(S, d)`` and ``(T, S, n)`` float64 arrays at a time
    when the model evaluates lines through its structure (closed-form models, PyMC GLMs); a model
    evaluated through its full log density at every point of every line holds the intermediates of
    that graph for ``T * S`` points and, for the gradient flows, ``(S, d, d)`` Jacobians (about
    2 GB for a 43-parameter Poisson model with 40 observations and 4,000 draws).
    """
    if batch_size != "auto":
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer or 'auto'; got {batch_size!r}.")
        return int(batch_size)
    if structured:
        per_obs = 8.0 * S * (8 * d + 12 * n)  # bytes, generous
    else:
        per_obs = 8.0 * S * (60 * n_steps * n + 4 * d * d + 8 * d)
    return int(max(1, min(8, n_flagged, (2**30) // per_obs)))


def _check_transforms(transforms):
    if isinstance(transforms, str):
        if transforms != "all":
            transforms = (transforms,)
        else:
            return list(DEFAULT_TRANSFORMS)
    names = list(transforms)
    unknown = [t for t in names if t not in TRANSFORMS]
    if unknown or not names:
        raise ValueError(
            f"unknown transformation(s) {unknown or names}: choose from {sorted(TRANSFORMS)} or 'all'."
        )
    return names


def _run(f, edata, obs_idx, ll, batch_size, progressbar):
    """Run the jit-compiled search over observations in chunks, with a progress bar."""
    import jax

    from tqdm.auto import tqdm

    out = []
    chunk = max(int(batch_size), 1)
    bar = tqdm(total=len(obs_idx), desc="adaptive LOO", disable=not progressbar, unit="obs")
    for start in range(0, len(obs_idx), chunk):
        idx = np.asarray(obs_idx[start:start + chunk])
        if len(idx) < chunk:  # pad to keep one compiled shape
            idx = np.concatenate([idx, np.repeat(idx[-1:], chunk - len(idx))])
        res = f(edata, jnp.asarray(idx), jnp.asarray(ll[:, idx].T))
        res = jax.tree_util.tree_map(np.asarray, res)
        for j in range(min(chunk, len(obs_idx) - start)):
            out.append({k: getattr(res, k)[j] for k in res._fields})
        bar.update(min(chunk, len(obs_idx) - start))
    bar.close()
    return out


def _chain_se_psis(log_ratios, ll, n_chains):
    """Standard error of plain importance sampling from the spread of its per-chain estimates, ``(n,)``.

    The delta-method MCSE sees the weights of these draws only; the spread over chains of the raw
    (unsmoothed) estimates also sees the Monte Carlo error of the draws themselves: a chain that
    visited the tail of ``1 / p(y_i | theta)`` and one that did not. 0 with one chain.
    """
    from scipy.special import logsumexp

    n, S = log_ratios.shape
    if n_chains < 2 or S % n_chains:
        return np.zeros(n)
    lr = log_ratios.reshape(n, n_chains, -1)
    per = logsumexp(lr + ll.T.reshape(n, n_chains, -1), axis=-1) - logsumexp(lr, axis=-1)
    sd = np.std(per, axis=1, ddof=1)
    return np.where(np.isfinite(sd), sd, 0.0) / np.sqrt(n_chains)


def _logmeanexp(ll):
    m = np.max(ll, axis=0)
    return m + np.log(np.mean(np.exp(ll - m), axis=0))


def _psis_mcse(lw, ll, r_eff):
    w = np.exp(lw)
    m = np.max(ll, axis=1, keepdims=True)
    lik = np.exp(ll - m)
    est = np.sum(w * lik, axis=1)
    var = np.sum(w**2 * (lik - est[:, None]) ** 2, axis=1) / r_eff
    return np.sqrt(var) / est


def _compare_log_lik(data, var_name, ll, joint_ok=False):
    """Warn when a stored log_likelihood group disagrees with the model at the same draws.

    ``joint_ok``: the model does not factorize, and a stored group with one joint term per draw
    (what PyMC writes for, e.g., one ``pm.MvNormal`` over all observations) is not compared.
    """
    stored = None
    try:
        stored = get_log_likelihood(data, var_name)
    except ValueError:
        return
    if stored is None:
        return
    arr = stack_draws(stored)
    if joint_ok and arr.shape[1] == 1 and ll.shape[1] != 1:
        return
    if arr.shape != ll.shape:
        raise ValueError(
            f"log_likelihood[{var_name!r}] has {arr.shape[1]} observations x {arr.shape[0]} draws but "
            f"the model gives {ll.shape[1]} x {ll.shape[0]}: the data or the draws do not match the model."
        )
    diff = np.nanmax(np.abs(arr - ll))
    if diff > 1e-6 * (1.0 + np.nanmax(np.abs(ll))):
        warnings.warn(
            f"the stored log_likelihood[{var_name!r}] differs from the model's by up to {diff:.3g} at "
            "the same draws; ppl_loo uses the model's values. Check that the model and its data are "
            "the ones that produced the draws.",
            UserWarning,
            stacklevel=3,
        )


def _pointwise_factory(data, var_name, model, n):
    """Build DataArrays over the observation dims of the log-likelihood variable."""
    ref = None
    try:
        ref = get_log_likelihood(data, var_name)
    except ValueError:
        ref = None
    if ref is not None and int(np.prod([ref.sizes[d] for d in ref.dims if d not in SAMPLE_DIMS])) == n:
        ref0 = ref.isel(chain=0, draw=0, drop=True)
        dims, shape, coords = ref0.dims, ref0.shape, {k: v for k, v in ref0.coords.items()}
    else:
        shape = tuple(model.obs_shape) if getattr(model, "obs_shape", ()) else (n,)
        dims = tuple(model.obs_dims)[: len(shape)] if len(model.obs_dims) >= len(shape) else tuple(
            f"{var_name}_dim_{j}" for j in range(len(shape)))
        # the model's coordinate values of those dims (PyMC coords), where their lengths fit
        mc = getattr(model, "coords", None) or {}
        coords = {d: np.asarray(mc[d]) for d, k in zip(dims, shape) if d in mc and len(mc[d]) == k}

    def make(values, name):
        return xr.DataArray(np.asarray(values).reshape(shape), dims=dims, coords=coords, name=name)

    return make


def _plain_psis(data, var_name, k_threshold, pointwise):
    """``model=None``: plain PSIS-LOO from the log_likelihood group (as ``arviz_stats.loo``)."""
    da = get_log_likelihood(data, var_name)
    if da is None:
        raise ValueError(
            "`data` has no 'log_likelihood' group and no model was given. Either pass model=... "
            "(ppl_loo computes the log-likelihood), or add it with pm.compute_log_likelihood."
        )
    ll = stack_draws(da)
    check_finite(ll, f"log_likelihood[{da.name!r}]", "Recompute the log-likelihood; NaN/inf are not allowed.")
    S, n = ll.shape
    r_eff = r_eff_of(data, S)
    elpd_i, k, lw = (np.asarray(a) for a in psis_identity(jnp.asarray(-ll.T), jnp.asarray(ll.T), r_eff))
    k_threshold = khat_threshold(S) if k_threshold is None else float(k_threshold)
    p_loo_i = _logmeanexp(ll) - elpd_i
    ref0 = da.isel(chain=0, draw=0, drop=True)

    def make(values, name):
        return xr.DataArray(np.asarray(values).reshape(ref0.shape), dims=ref0.dims, coords=ref0.coords, name=name)

    warn = bool(np.any(k > k_threshold))
    tr = np.where(k > k_threshold, "failed", "psis")
    return LooResult(
        elpd=float(elpd_i.sum()),
        se=float(np.sqrt(n * np.var(elpd_i, ddof=1))) if n > 1 else 0.0,
        p=float(p_loo_i.sum()),
        n_samples=S,
        n_data_points=n,
        scale="log",
        warning=warn,
        good_k=k_threshold,
        elpd_i=make(elpd_i, "elpd_i"),
        pareto_k=make(k, "pareto_k"),
        p_loo_i=make(p_loo_i, "p_loo_i"),
        pareto_k_psis=make(k, "pareto_k_psis"),
        transform=make(tr, "transform"),
        hbar_used=make(np.full(n, np.nan), "hbar_used"),
        mcse_elpd_i=make(np.maximum(_psis_mcse(lw, ll.T, r_eff), _chain_se_psis(
            -ll.T, ll, int(data["posterior"].sizes.get("chain", 1)) if "posterior" in data.children else 1)),
            "mcse_elpd_i"),
        doubtful=make(k > k_threshold, "doubtful"),
        var_name=da.name,
    )
