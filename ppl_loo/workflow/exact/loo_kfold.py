"""``pl.loo_kfold``: exact K-fold cross-validation, every fold fit in one batched NUTS run.

This module owns K-fold CV end to end: the folds (explicit ``folds=``, or built as R ``loo``'s
``kfold_split_random`` / ``kfold_split_stratified`` / ``kfold_split_grouped`` do, :func:`kfold_split`), the
posterior without each fold (one run of :func:`ppl_loo.numerics.nuts.batched_nuts` over folds x chains on
``log p(theta | y_-k) = logp(theta) - sum_j mask[k, j] log p(y_j | theta)`` up to a constant, warm-started from the
full-data draws, resampled with the fold's importance weights, as the batched refits of
:mod:`ppl_loo.workflow.exact.refit` are), the pointwise

    elpd_i = log p(y_i | y_-k) ~= log mean_s p(y_i | theta_s^(-k)),   i in fold k,

(R ``kfold``, ``arviz_stats.loo_kfold``) with its Monte Carlo SE, and the result, :class:`KFoldResult`: an
``arviz_stats`` ``ELPDDataLOOKFold`` (``kind == "loo_kfold"``), so ``pl.compare`` and ``arviz_stats.compare``
take it, with the folds and each fold fit's diagnostics.

Only models whose likelihood factorizes over observations and whose log density is a JAX function (PyMC models,
JAX models) are supported: the model's own ``refit_draws`` drops one observation, not a fold, so Stan programs and
non-factorizing likelihoods are refused with a clear error (see :func:`check_kfold_model`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import xarray as xr
from arviz_stats.base import array_stats
from arviz_stats.utils import ELPDDataLOOKFold
from tqdm.auto import tqdm

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.bridge import log_mean_exp
from ppl_loo.numerics.nuts import BatchedTarget, lanes_per_batch
from ppl_loo.workflow.exact.refit import batched_refit_density, batched_run, batched_warmup, refit_settings, warm_start
from ppl_loo.workflow.loo.draws import loo_draws
from ppl_loo.workflow.loo.inputs import (
    RHAT_VOUCH,
    check_datatree,
    check_posterior_draws,
    check_random_seed,
    posterior_seed,
    rank_rhat,
)
from ppl_loo.workflow.loo.loo import pointwise_factory
from ppl_loo.workflow.loo.plain import stable_se, stable_sum

__all__ = ["loo_kfold", "KFoldResult", "kfold_split", "check_folds", "check_kfold_model", "fold_density"]

#: the sampler settings ``refit_options`` may override (``pl.loo``'s ``checkpoint`` and ``batched`` do not apply)
KFOLD_SETTINGS = ("chains", "draws", "warmup", "target_accept", "max_tree_depth", "adapt")
DEFAULT_K = 10


@dataclass(kw_only=True, repr=False)
class KFoldResult(ELPDDataLOOKFold):
    """K-fold CV result of :func:`loo_kfold`: an ``arviz_stats`` ``ELPDDataLOOKFold`` (``kind == "loo_kfold"``;
    ``elpd``, ``se``, ``p``, ``elpd_i``, ``p_kfold_i``, ``n_folds``; ``n_samples`` is the draws of each fold fit)
    plus

    - ``folds``: the fold (1 to K) of each observation, a DataArray over the observation dims as ``elpd_i``;
    - ``mcse_elpd_i``: the Monte Carlo SE of each ``elpd_i`` (delta method with the fold fit's ESS);
    - ``mcse_elpd``: the Monte Carlo SE of ``elpd`` (the observations of a fold share its draws: their errors are
      correlated and added as such; the folds' fits are independent);
    - ``fold_info``: ``{k: {...}}`` per fold: ``n_test``, ``rhat_max`` (largest rank R-hat of the fold fit's
      unconstrained parameters), ``rhat_loglik`` (largest over its held-out ``log p(y_i | theta)``),
      ``divergences``, ``step_size`` (mean adapted step size), ``seconds`` (its share of the batched run), ``sampler``;
    - ``seconds``: the wall time of the batched fold fits.

    ``warning`` is True when a fold fit did not converge (R-hat above 1.01) or had divergent transitions.
    """

    folds: xr.DataArray = None
    mcse_elpd_i: xr.DataArray = None
    mcse_elpd: float = float("nan")
    fold_info: dict = None
    seconds: float = float("nan")

    def _header(self):
        return (f"Computed from {self.n_folds}-fold cross validation: {self.n_folds} batched NUTS fits of "
                f"{self.n_samples} draws each, {self.n_data_points} observations.")

    def _footer(self):
        text = f"\nMonte Carlo SE of elpd_kfold: {self.mcse_elpd:.2f}"
        bad = [k for k, rec in (self.fold_info or {}).items() if not _fold_ok(rec)]
        if bad:
            text += (f"\n\nFold fit(s) {bad} did not converge (R-hat above {RHAT_VOUCH}) or had divergent "
                     "transitions: see res.fold_info; more draws (refit_options) may settle them.")
        return text


@uses_x64
def loo_kfold(data, model, *, k=DEFAULT_K, folds=None, stratify_by=None, group_by=None, random_seed=None,
              refit_options=None, progressbar=True, var_name=None) -> KFoldResult:
    """Exact K-fold cross-validation: the model refit without each fold, all folds in one batched NUTS run.

    The arguments are ``arviz_stats.loo_kfold``'s (``k``, ``folds``, ``stratify_by``, ``group_by``), with the model
    in place of its sampling wrapper.

    Parameters
    ----------
    data : xarray.DataTree or InferenceData
        The full-data fit, as :func:`ppl_loo.loo` takes it (a ``posterior`` group; a stored ``log_likelihood`` is
        checked against the model). Its sampler settings (chains, draws, warmup, target acceptance, tree depth)
        are the fold fits' (``refit_options`` overrides them); its draws and their variances warm-start them.
    model : pymc.Model, JaxModel or another JAX model
        The model ``data`` was fitted with, as :func:`ppl_loo.loo` accepts it; its likelihood must factorize over
        observations (see Raises).
    k : int
        The number of folds (default 10), built at random with balanced sizes (R ``kfold_split_random``), by
        ``stratify_by`` or by ``group_by``. With ``folds=`` the number comes from the folds (a ``k`` other than
        the default that contradicts them is an error).
    folds : array of int, optional
        The fold of each observation, numbered 1 to k (R ``loo`` and ``arviz_stats.loo_kfold``), every fold
        non-empty; one per observation, flat (as ``res.elpd_i.values.ravel()``) or in the observations' shape.
    stratify_by : array, optional
        A label per observation: each label spread evenly over the folds (its count per fold differs by at
        most 1; R ``kfold_split_stratified``).
    group_by : array, optional
        A group per observation: every group whole in one fold, the groups spread evenly over the folds (R
        ``kfold_split_grouped``; with exactly k groups, group ``j`` in its sorted order is fold ``j``).
    random_seed : int or numpy.random.Generator, optional
        Seeds the folds (when built) and the fold fits. None (default): a seed derived from the posterior draws
        (:func:`~ppl_loo.workflow.loo.inputs.posterior_seed`, as in :func:`ppl_loo.loo`), so a rerun on the same
        draws gives the same folds and numbers.
    refit_options : dict, optional
        Overrides of the fold fits' settings: ``chains``, ``draws``, ``warmup``, ``target_accept``,
        ``max_tree_depth``, ``adapt`` (``"warm"``, the default for MCMC draws: chains at full-data draws resampled
        with the fold's weights, 150 warmup iterations adapting the step size alone; ``"window"``: the windowed
        adaptation over the fit's warmup; see ``refit_options`` of :class:`~ppl_loo.SecondOpinions`).
    progressbar : bool
        A progress bar over the fold fits.
    var_name : str, optional
        The log-likelihood (observed) variable, for models with several.

    Returns
    -------
    KFoldResult
        ``elpd`` = sum of ``elpd_i``, ``se = sqrt(n) sd(elpd_i)`` (R's ``sd``, ``ddof=1``, as ``pl.loo``'s ``se``;
        ``arviz_stats.loo_kfold`` divides by ``n``), ``p = lpd - elpd`` (``lpd`` the in-sample log pointwise
        predictive density of the full-data draws), as R ``kfold``; see :class:`KFoldResult`.

    Raises
    ------
    NotImplementedError
        A Stan program, or a likelihood that does not factorize (``model.factorizes`` False): the model's own
        refits drop one observation, not a fold (:func:`check_kfold_model` says what to use instead).
    ValueError
        Bad folds, labels, groups, ``k`` or ``refit_options``; the message names the argument.
    """
    check_random_seed(random_seed, "pl.loo_kfold")
    data = check_datatree(data)
    if model is None:
        raise ValueError("pl.loo_kfold needs the model (pl.loo_kfold(data, model, ...)): it refits it without each "
                         "fold.")
    model = as_model(model, var_name=var_name, data=data)
    target = check_kfold_model(model)
    check_posterior_draws(data)
    settings = _settings(data, refit_options)
    random_seed = posterior_seed(random_seed, data)
    draws = loo_draws(data, model, var_name, None)
    n = draws.ll.shape[1]
    shape = tuple(model.obs_shape) or (n,)
    if folds is not None:
        fold_ids = check_folds(folds, n, shape, k=k, given=(stratify_by, group_by))
    else:
        fold_ids = kfold_split(n, k, stratify_by=_flat_labels(stratify_by, "stratify_by", n, shape),
                               group_by=_flat_labels(group_by, "group_by", n, shape), random_seed=random_seed)
    fits, seconds = _fit_folds(model, target, draws.theta, fold_ids, settings, random_seed, progressbar,
                               ll=None if draws.approx else draws.ll)
    return _result(data, model, draws, fold_ids, fits, settings, seconds)


def check_kfold_model(model):
    """The :class:`~ppl_loo.numerics.nuts.BatchedTarget` of the batched refits of ``model`` (a
    :class:`~ppl_loo.model.Model`), or ``NotImplementedError`` saying why K-fold CV cannot refit it and what
    to use instead."""
    kind = getattr(model, "kind", "this")
    if kind == "Stan" or not getattr(model, "is_jax", False):
        raise NotImplementedError(
            f"pl.loo_kfold does not support {kind} models: their refits (refit_draws) run the model's own sampler "
            "on the data without one observation, not without a fold, and their log density is not a JAX function "
            "the batched fold fits can sample. Use pl.loo(data, model, refit=...) for exact LOO, or write the model "
            "in PyMC or as a pl.JaxModel for pl.loo_kfold, or use arviz_stats.loo_kfold with a SamplingWrapper that "
            "refits the program on each fold's training data.")
    if not model.factorizes:
        raise NotImplementedError(
            f"pl.loo_kfold needs a likelihood that factorizes over observations, and this {kind} model's does not "
            "(model.factorizes is False: it has a loo_log_density): the posterior without a fold is then not the "
            "posterior minus the fold's log-likelihood terms, and loo_log_density and refit_draws drop one "
            "observation, not a set. Use pl.loo(data, model) (its refits delete one observation exactly), or "
            "arviz_stats.loo_kfold with a SamplingWrapper that refits the model on each fold's training data.")
    target = batched_refit_density(model)
    if target is None:
        raise NotImplementedError(
            f"pl.loo_kfold cannot sample this {kind} model's posterior without a fold: its adapter gives no batched "
            "refit density (batched_refit_density() is None). Use pl.loo(data, model, refit=..., "
            "second_opinions={'refit_options': {'batched': False}}) for exact LOO, or arviz_stats.loo_kfold with a "
            "SamplingWrapper.")
    return target


def fold_density(model, target, mask):
    """The :class:`~ppl_loo.numerics.nuts.BatchedTarget` of the posteriors without each fold:
    ``log_density(u, k) = logp(theta) - sum_j mask[k, j] loglik(theta)[j]`` (``mask`` ``(K, n)``, 1 for the
    observations of fold ``k``), in the coordinates of the model's batched refit ``target``: where that has its own
    (a non-centered horseshoe), ``target.log_density(u, 0) + loglik(theta)[0]`` is the full log density in them
    (the likelihood factorizes), its log-Jacobian included."""
    mask = np.asarray(mask, dtype=np.float64)

    def dropped(ll, k):
        m = jnp.asarray(mask)[k]
        return jnp.sum(jnp.where(m > 0, m * ll, 0.0))  # 0, not NaN, for a -inf term outside the fold

    if target.to_model is None:
        def log_density(theta, k):
            return model.logp(theta) - dropped(model.loglik(theta), k)

        return BatchedTarget(log_density)

    def log_density_u(u, k):
        ll = model.loglik(target.to_model(u))
        return target.log_density(u, 0) + ll[0] - dropped(ll, k)

    return target._replace(log_density=log_density_u)


def kfold_split(n, k=DEFAULT_K, *, stratify_by=None, group_by=None, random_seed=None):
    """Fold ids 1 to k for ``n`` observations (flat), as R ``loo`` builds them.

    Random (default): sizes ``n // k`` or one more, in a random order (``kfold_split_random``); ``stratify_by``
    (labels): the observations of each label, shuffled, dealt to folds 1, 2, ..., k in turn (each label's count per
    fold differs by at most 1; ``kfold_split_stratified``); ``group_by``: whole groups, their number per fold
    differing by at most 1 (``kfold_split_grouped``; exactly k groups: the ``j``-th in sorted order is fold ``j``).
    ``random_seed`` seeds ``numpy.random.default_rng``.
    """
    stratify, groups = stratify_by, group_by
    if stratify is not None and groups is not None:
        raise ValueError("stratify_by= and group_by= cannot be used together: give one (or folds=).")
    K = _check_k(k, n)
    rng = np.random.default_rng(random_seed)
    if stratify is not None:
        labels = np.unique(np.asarray(stratify).reshape(-1), return_inverse=True)[1].reshape(-1)
        order = np.concatenate([rng.permutation(np.flatnonzero(labels == lev)) for lev in range(labels.max() + 1)])
        out = np.empty(n, dtype=np.int64)
        out[order] = np.arange(n) % K + 1
        return out
    if groups is not None:
        level = np.unique(np.asarray(groups).reshape(-1), return_inverse=True)[1].reshape(-1)
        n_groups = int(level.max()) + 1
        if n_groups < K:
            raise ValueError(f"group_by: {n_groups} groups cannot fill k={K} folds (each group stays whole in one "
                             "fold); give k at most the number of groups.")
        per_group = np.arange(1, K + 1) if n_groups == K else _random_folds(n_groups, K, rng)
        return per_group[level].astype(np.int64)
    return _random_folds(n, K, rng)


def _random_folds(n, K, rng):
    sizes = np.full(K, n // K)
    sizes[: n % K] += 1
    return rng.permutation(np.repeat(np.arange(1, K + 1), sizes)).astype(np.int64)


def _check_k(K, n):
    if isinstance(K, (bool, np.bool_)) or not isinstance(K, (int, np.integer)):
        raise ValueError(f"k={K!r}: give the number of folds as a whole number (at least 2).")
    if not 2 <= int(K) <= n:
        raise ValueError(f"k={K}: the number of folds must be at least 2 and at most the number of observations "
                         f"({n}).")
    return int(K)


def _flat_labels(values, name, n, shape):
    """``stratify_by`` / ``group_by`` as a flat array of one label per observation (None stays None)."""
    if values is None:
        return None
    arr = np.asarray(values.values if isinstance(values, xr.DataArray) else values)
    if arr.size != n or (arr.ndim > 1 and arr.shape != tuple(shape)):
        raise ValueError(f"{name} has {arr.size} entries (shape {arr.shape}); give one label per observation: "
                         f"{n}, flat or in the observations' shape {tuple(shape)}.")
    arr = arr.reshape(-1)
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"{name} has NaN labels; give every observation a label.")
    return arr


def check_folds(folds, n, shape=None, *, k=DEFAULT_K, given=(None, None)):
    """Explicit fold ids as a flat int array, or a ValueError naming ``folds``: one per observation (flat or in the
    observations' ``shape``), whole numbers 1 to k, every fold non-empty, at least two folds."""
    K = k
    if any(g is not None for g in given):
        raise ValueError("folds= cannot be combined with stratify_by= or group_by=: give the folds, or how to build "
                         "them.")
    raw = np.asarray(folds.values if isinstance(folds, xr.DataArray) else folds)
    if raw.size != n or (raw.ndim > 1 and shape is not None and raw.shape != tuple(shape)):
        raise ValueError(f"folds has {raw.size} entries (shape {raw.shape}); give one fold id per observation: "
                         f"{n}, flat or in the observations' shape.")
    raw = raw.reshape(-1)
    if raw.dtype.kind == "b" or raw.dtype.kind not in "iuf":
        raise ValueError(f"folds must hold whole numbers 1 to K (fold ids); got dtype {raw.dtype}.")
    if raw.dtype.kind == "f" and not np.all(np.isfinite(raw) & (raw == np.round(raw))):
        bad = raw[~(np.isfinite(raw) & (raw == np.round(raw)))]
        raise ValueError(f"folds must hold whole numbers 1 to K (fold ids); got {bad[:5].tolist()}.")
    ids = raw.astype(np.int64)
    if ids.min() < 1:
        hint = " (0-based ids: add 1)" if ids.min() == 0 else ""
        raise ValueError(f"folds are numbered 1 to K, as in R loo and arviz_stats.loo_kfold; got {int(ids.min())}"
                         f"{hint}.")
    n_folds = int(ids.max())
    empty = sorted(set(range(1, n_folds + 1)) - set(ids.tolist()))
    if empty:
        raise ValueError(f"folds: fold(s) {empty} of 1 to {n_folds} have no observations; number the folds 1 to K "
                         "with every fold non-empty.")
    if n_folds < 2:
        raise ValueError("folds: every observation is in fold 1; K-fold CV needs at least 2 folds.")
    whole = isinstance(K, (int, np.integer)) and not isinstance(K, (bool, np.bool_))
    if K != DEFAULT_K and (not whole or int(K) != n_folds):
        raise ValueError(f"k={K} contradicts folds, which has {n_folds} folds; leave k out when giving folds.")
    return ids


def _settings(data, refit_options):
    """The fold fits' sampler settings (:func:`~ppl_loo.workflow.exact.refit.refit_settings`), ``refit_options``
    limited to :data:`KFOLD_SETTINGS`."""
    extra = sorted(set(dict(refit_options or {})) - set(KFOLD_SETTINGS))
    if extra:
        raise ValueError(f"refit_options: {extra} do not apply to pl.loo_kfold (its fold fits always run in one "
                         f"batched NUTS run, without a checkpoint); allowed: {list(KFOLD_SETTINGS)}.")
    settings = refit_settings(data, refit_options)  # warm-started as the refits (refit_options adapt="window": not)
    settings.pop("batched", None)
    return settings


def _fit_folds(model, target, theta, fold_ids, settings, random_seed, progressbar, ll=None):
    """Each fold's posterior draws, ``{k: (draws (C, D, d) in theta, divergences (C, D), step sizes (C,),
    seconds, folds in its run)}`` for k = 0..K-1, in batched NUTS runs of equal width (one compilation; as many
    folds per run as the memory budget allows, :func:`~ppl_loo.numerics.nuts.lanes_per_batch`), and the
    total wall time. Warm-started (``settings["adapt"] == "warm"``, with ``ll`` ``(S, n)`` the full-data draws'
    log-likelihood), each fold's chains start at full-data draws resampled with the fold's importance weights
    ``1 / prod_{j in fold} p(y_j | theta)``."""
    K = int(fold_ids.max())
    mask = (fold_ids[None, :] == np.arange(1, K + 1)[:, None]).astype(np.float64)
    density = fold_density(model, target, mask)
    u_draws, imm, to_theta = warm_start(density, theta)
    S, C, d = theta.shape[0], settings["chains"], theta.shape[1]
    if C > S:
        raise ValueError(f"refit_options: chains={C} is more than the {S} full-data draws that start them.")
    # the fits' seeds from a child of the seed's sequence: independent of the folds' generator (default_rng(seed))
    ss = np.random.SeedSequence(int(random_seed) if np.ndim(random_seed) == 0 else random_seed).spawn(1)[0]
    seeds = ss.generate_state(K, dtype=np.uint32)
    width = max(1, min(K, lanes_per_batch(C, settings["draws"], d)))
    ll_fold = np.asarray(ll, dtype=np.float64) @ mask.T if ll is not None and settings["adapt"] == "warm" else None
    fits, programs, t0 = {}, {}, time.perf_counter()
    with tqdm(total=K, desc="kfold", disable=not progressbar, unit="fold") as bar:
        for start in range(0, K, width):
            batch = list(range(start, min(K, start + width)))
            padded = batch + [batch[-1]] * (width - len(batch))  # the last run padded with a copy, dropped
            t1 = time.perf_counter()
            draws, div, eps = batched_run(model, density, u_draws, padded, [int(seeds[k]) for k in padded], settings,
                                          imm, ll_cols=None if ll_fold is None else ll_fold[:, padded],
                                          programs=programs)
            seconds = (time.perf_counter() - t1) / len(batch)
            for b, k in enumerate(batch):
                drawn = np.asarray(to_theta(draws[b].reshape(-1, d)), dtype=np.float64).reshape(draws[b].shape)
                fits[k] = (drawn, div[b], eps[b], seconds, len(batch))
            bar.update(len(batch))
    return fits, time.perf_counter() - t0


def _ess(x):
    """Effective sample sizes of the means of ``x`` ``(chains, draws, m)``, ``(m,)`` (``arviz_stats``' "mean"
    ESS, vectorized; the number of draws where it is undefined: constant values, fewer than 4 draws)."""
    C, D, m = x.shape
    N = C * D
    if D < 4:
        return np.full(m, float(N))
    ess = np.asarray(array_stats.ess(x, chain_axis=0, draw_axis=1, method="mean"), dtype=np.float64).reshape(m)
    ess = np.where(np.isfinite(ess), ess, N)
    ess = np.where(np.ptp(x.reshape(N, m), axis=0) == 0, N, ess)
    return np.clip(ess, 1.0, N)


def fold_pointwise(ll):
    """``(elpd_i (m,), mcse_i (m,), var_total)`` from one fold fit's held-out log-likelihoods ``ll``
    ``(chains, draws, m)``: ``elpd_i = log mean_s p(y_i | theta_s)``, its delta-method MCSE with the ESS of
    ``p(y_i | theta)``, and the Monte Carlo variance of the fold's sum of ``elpd_i`` (errors that share draws
    are correlated: ``var_s(sum_i r_is) / ESS``, ``r_is = p(y_i | theta_s) / mean_s p(y_i | theta_s)``)."""
    C, D, m = ll.shape
    elpd = log_mean_exp(ll.reshape(C * D, m), axis=0)
    top = np.max(ll.reshape(C * D, m), axis=0)
    f = np.exp(ll - np.where(np.isfinite(top), top, 0.0))
    r = f / np.mean(f, axis=(0, 1))
    mcse = np.sqrt(np.var(r, axis=(0, 1)) / _ess(r))
    g = np.sum(r, axis=2)[:, :, None]
    return elpd, mcse, float(np.var(g) / _ess(g)[0])


def _fold_ok(rec):
    return bool(rec["rhat_max"] <= RHAT_VOUCH and rec["rhat_loglik"] <= RHAT_VOUCH and rec["divergences"] == 0)


def _fold_records(model, fold_ids, fits, settings):
    """Pointwise ``elpd_i`` and MCSE ``(n,)``, the Monte Carlo variance of the total, and ``{k: record}``
    (folds numbered 1 to K) from the fold fits."""
    n = fold_ids.size
    elpd, mcse, var_total, info = np.empty(n), np.empty(n), 0.0, {}
    for k, (drawn, div, eps, seconds, width) in fits.items():
        test = np.flatnonzero(fold_ids == k + 1)
        C, D, d = drawn.shape
        ll = np.asarray(model.log_lik(drawn.reshape(-1, d), obs=test), dtype=np.float64).reshape(C, D, test.size)
        if np.isnan(ll).any() or np.isposinf(ll).any():
            raise ValueError(f"fold {k + 1}: log p(y_i | theta) is NaN or +inf at some of its fit's draws.")
        elpd[test], mcse[test], var_k = fold_pointwise(ll)
        var_total += var_k
        rhat_d, rhat_l = rank_rhat(drawn), rank_rhat(ll)
        info[k + 1] = {"n_test": int(test.size), "rhat_max": _nanmax(rhat_d), "rhat_loglik": _nanmax(rhat_l),
                       "divergences": int(np.sum(div)), "step_size": float(np.mean(eps)), "seconds": float(seconds),
                       "sampler": f"BlackJAX NUTS, one batched run of {width} fold fit{'s' if width != 1 else ''}",
                       "chains": C, "draws": D, "warmup": batched_warmup(settings), "adapt": settings["adapt"]}
    return elpd, mcse, var_total, info


def _nanmax(a):
    return float(np.nanmax(a)) if np.any(np.isfinite(a)) else float("nan")


def _result(data, model, draws, fold_ids, fits, settings, seconds):
    """The :class:`KFoldResult` over the observation dims of the log-likelihood variable, and a warning naming the
    fold fits that did not converge."""
    elpd, mcse, var_total, info = _fold_records(model, fold_ids, fits, settings)
    n = fold_ids.size
    # the in-sample lpd_i of the full-data draws (self-normalized weights p/q for draws of an approximation)
    lw = np.asarray(draws.logp0, dtype=np.float64) - np.asarray(draws.log_q0, dtype=np.float64)
    lw = lw - log_mean_exp(lw)
    lpd = log_mean_exp(draws.ll + lw[:, None], axis=0)
    da = pointwise_factory(data, draws.var_name, model, n)
    bad = [k for k, rec in info.items() if not _fold_ok(rec)]
    if bad:
        worst = max(max(info[k]["rhat_max"], info[k]["rhat_loglik"]) for k in bad)
        warnings.warn(f"pl.loo_kfold: the fit(s) of fold(s) {bad} did not converge (largest R-hat {worst:.3f}, above "
                      f"{RHAT_VOUCH}) or had divergent transitions "
                      f"({sum(info[k]['divergences'] for k in bad)}); their elpd_i may be off: see "
                      "res.fold_info, and rerun with more draws or warmup (refit_options).", UserWarning, stacklevel=4)
    first = next(iter(fits.values()))[0]
    return KFoldResult(
        elpd=stable_sum(elpd), se=stable_se(elpd), p=stable_sum(lpd - elpd),
        n_samples=int(first.shape[0] * first.shape[1]), n_data_points=n, scale="log", warning=bool(bad),
        good_k=None, elpd_i=da(elpd, "elpd_i"), n_folds=len(fits), p_kfold_i=da(lpd - elpd, "p_kfold_i"),
        folds=da(fold_ids, "folds"), mcse_elpd_i=da(mcse, "mcse_elpd_i"), mcse_elpd=float(np.sqrt(var_total)),
        fold_info=info, seconds=float(seconds))
