"""``ppl_loo.pvi``: predictive variational inference (Lai & Yao 2024), DataTree out.

The numerics (families, score estimators, the optimizer loop) live in :mod:`ppl_loo.numerics`;
what each backend provides in :mod:`ppl_loo.adapters.as_model`. This module runs PVI and the
plain-VI comparison in the same family, draws from ``q``, and writes the user's DataTree:
``posterior`` (constrained draws named like the model's variables), ``log_likelihood``,
``observed_data`` and the ``pvi`` group (variational parameters, objective traces, training
scores, and the heterogeneity table of the notes, section 3).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import warnings
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import prng_key, seed_from
from ppl_loo.numerics.vi import objective as npvi
from ppl_loo.numerics.vi.families import flatten_params, get_family
from ppl_loo.numerics.vi.optim import OPTIMIZERS, get_optimizer, step_decay
from ppl_loo.workflow.approx.approx_tree import log_likelihood_dataset, observed_dataset, posterior_dataset
from ppl_loo.workflow.options import resolve_options
from ppl_loo.workflow.pvi.options import FlowOptions, OptimizerOptions, OutputOptions, ScoreOptions
from ppl_loo.workflow.pvi.predictive_scores import training_scores

__all__ = ["DEFAULT_LEARNING_RATE", "pvi"]

DEFAULT_LEARNING_RATE = {"adam": 1e-2, "rmsprop": 1e-3, "sgd": 1e-3}
_SCORE_NAMES = {"log": "log score", "crps": "CRPS", "quadratic": "quadratic score"}
CAVEAT = ("The heterogeneity flags are a heuristic (Lai & Yao, Sec. 2.5), not a test: a PVI sd well above the VI sd "
          "says the data vary more than the model allows along that parameter (misspecification), but a "
          "non-identified spread inflates it too (binary data without replication; a noise scale traded against "
          "the spread of a coefficient). Regularization (lam > 0) stabilizes the solution.")


def _check_args(score, reg, lam, steps, draws_per_step, draws, average, estimator, heterogeneity_threshold):
    if score not in (None, "log", "crps", "quadratic"):
        raise ValueError(f"score={score!r}: choose 'log', 'crps' or 'quadratic' (None fits plain VI).")
    if reg not in npvi.REGULARIZERS:
        raise ValueError(f"reg={reg!r}: choose None, 'prior' (KL to the prior, Eq. 6) or 'posterior' (Eq. 7).")
    if not (isinstance(lam, (int, float, np.floating, np.integer)) and math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam={lam!r} must be a finite number >= 0.")
    if lam > 0 and reg is None:
        raise ValueError(f"lam={lam} has no effect without a regularizer: pass reg='prior' or reg='posterior'.")
    _check_int("optimizer.steps", steps, 1)
    _check_int("optimizer.draws_per_step", draws_per_step, 1)
    _check_int("draws", draws, 2)
    if isinstance(average, (str, bytes)) or not isinstance(average, (int, float, np.number)) \
            or not 0.0 <= float(average) < 1.0:
        raise ValueError(f"optimizer.average={average} must be in [0, 1): the fraction of final steps whose "
                         "iterates are averaged.")
    if estimator not in npvi.ESTIMATORS:
        raise ValueError(f"optimizer.estimator={estimator!r}: choose 'reparam' (Table 1, (a)) or 'rejection' "
                         "(Appendix B).")
    if not heterogeneity_threshold > 1.0:
        raise ValueError(f"output.heterogeneity_threshold={heterogeneity_threshold} must be > 1 (a ratio of sds).")


def _check_int(name, value, low):
    """An integer argument (a whole float such as 2000.0 is accepted): a ValueError that names it otherwise."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        ok = True
    if not ok or int(value) < low:
        raise ValueError(f"{name}={value!r} must be an integer >= {low}, e.g. "
                         f"{name}={max(low, 1000 if not name.endswith('steps') else 2000)}.")


def _check_learning_rate(learning_rate):
    if learning_rate is None or callable(learning_rate):
        return
    ok = isinstance(learning_rate, (int, float, np.number)) and not isinstance(learning_rate, bool)
    if not ok or not (math.isfinite(float(learning_rate)) and float(learning_rate) > 0):
        raise ValueError(f"optimizer.learning_rate={learning_rate!r} must be a positive number (e.g. 0.01) or an optax "
                         "schedule (a callable of the step).")


def _check_available(pm, settings):
    """Raise with the backend's reason when the score / regularizer needs a missing term."""
    t = pm.terms
    need = {"log": t.loglik, "crps": t.simulate, "quadratic": t.probs}
    if settings.score is not None and need[settings.score] is None:
        reason = pm.notes.get(settings.score, "the model does not provide it")
        raise ValueError(f"score={settings.score!r} ({_SCORE_NAMES[settings.score]}) is not available for this "
                         f"{pm.kind} model: {reason}.")
    if settings.score in ("crps", "quadratic") and getattr(t, "y", None) is None:
        raise ValueError(f"score={settings.score!r} compares the model's predictions with the observed outcomes, but "
                         f"this {pm.kind} model has none: pass score_options=pl.ScoreOptions(observed=y) (the observed "
                         f"outcomes, one per observation, shape {tuple(getattr(pm, 'obs_shape', ()) or ())}) to "
                         "pl.pvi, or pl.JaxModel(..., observed=y).")
    if settings.reg == "prior" and t.log_prior is None:
        raise ValueError(f"reg='prior' needs the log prior density, which this {pm.kind} model does not give; "
                         "pass log_prior= to the SimulatorModel, or use reg=None.")
    if settings.reg == "posterior" and t.logp is None:
        raise ValueError(f"reg='posterior' needs the likelihood, which this {pm.kind} model does not have.")


def _log_bound(pm, log_lik_bound):
    """``log C_i`` of the rejection estimator: given, or 0 for a discrete outcome (a pmf is <= 1)."""
    if log_lik_bound is not None:
        b = np.asarray(log_lik_bound, dtype=np.float64)
        if b.ndim not in (0, 1) or (b.ndim == 1 and b.shape[0] != pm.n_obs) or not np.all(np.isfinite(b)):
            raise ValueError("optimizer.log_lik_bound must be a finite scalar or one value per observation "
                             f"({pm.n_obs}).")
        return jnp.broadcast_to(jnp.asarray(b), (pm.n_obs,))
    if pm.log_lik_bound is not None:  # the model's own (a PyMC discrete outcome: 0, or Poisson's supremum)
        return jnp.asarray(pm.log_lik_bound)
    raise ValueError(
        "estimator='rejection' needs an upper bound C_i >= p(y_i | theta) for every theta (Appendix B): pass "
        "optimizer={'log_lik_bound': log C_i} (a scalar or one per observation), e.g. 0 for a discrete outcome or "
        "-log(sqrt(2 pi) sigma) for a normal likelihood with known sigma."
    )


class _Fit:
    def __init__(self, family, params, info, wall, settings):
        self.family, self.params, self.info, self.wall, self.settings = family, params, info, wall, settings


def _runner(pm, family_spec, family_options, settings, optimizer, learning_rate, steps):
    """The family and the compiled scan for this configuration, kept among the PVI model's compiled programs."""
    opt_key = optimizer if isinstance(optimizer, str) else id(optimizer)
    lr_key = learning_rate if not callable(learning_rate) else id(learning_rate)
    fam_key = family_spec if isinstance(family_spec, str) else id(family_spec)
    key = (fam_key, tuple(sorted((family_options or {}).items())), settings, opt_key, lr_key, int(steps))

    def build():
        family = get_family(family_spec, **(family_options or {}))
        if isinstance(optimizer, optax.GradientTransformation):
            opt = optimizer
        else:
            lr = DEFAULT_LEARNING_RATE.get(optimizer, 1e-3) if learning_rate is None else learning_rate
            if not callable(lr):
                if not (float(lr) > 0 and math.isfinite(float(lr))):
                    raise ValueError(f"optimizer.learning_rate={learning_rate!r} must be a positive number or a "
                                     "schedule.")
                lr = step_decay(float(lr), max(int(steps) // 2, 1), 0.1)
            opt = get_optimizer(optimizer, lr)
        step = npvi.build_step(family, pm.terms, settings, opt)
        return family, opt, npvi.build_runner(step)

    return pm.compiled("pvi_runners", key, build)


def _fit(pm, family_spec, family_options, settings, optimizer, learning_rate, steps, hyper, key, init, init_scale,
         progressbar, desc):
    family, opt, runner = _runner(pm, family_spec, family_options, settings, optimizer, learning_rate, steps)
    params0 = _initial_params(family, pm, init, init_scale)
    state = npvi.init(params0, opt)
    bar = None
    if progressbar:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(steps), desc=desc, unit="step")
    t0 = time.perf_counter()
    state, info = npvi.run_steps(runner, state, key, hyper, int(steps),
                                 progress=None if bar is None else (lambda k: bar.update(k - bar.n)))
    params = jax.tree_util.tree_map(np.asarray, npvi.final_params(state))
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    n_bad = int(np.sum(~info.finite))
    leaves_ok = all(np.all(np.isfinite(v)) for v in jax.tree_util.tree_leaves(params))
    if n_bad == len(info.finite) or not leaves_ok:
        raise ValueError(
            f"{desc}: the objective or its gradient was not finite at {n_bad} of {len(info.finite)} steps and no "
            "usable solution was found. The model's log density may be -inf or NaN at draws from q: pass optimizer="
            "{'init': ...} (a starting point inside the support), a smaller learning_rate, or check the model."
        )
    if n_bad:
        warnings.warn(f"{desc}: {n_bad} of {len(info.finite)} steps had a non-finite objective or gradient and were "
                      "skipped.", UserWarning, stacklevel=3)
    return _Fit(family, params, info, wall, settings)


def _initial_params(family, pm, init, init_scale):
    loc = None
    scale = 0.1 if init_scale is None else init_scale
    if init is not None:
        if isinstance(init, xr.DataTree) and "pvi" in init.children:
            a = init["pvi"].to_dataset()
            loc = np.asarray(a["loc"].values)
            if init_scale is None:  # warm start: the marginal sds of the previous fit
                scale = np.asarray(a["sd"].values)
                if scale.shape != (pm.dim,) or not np.all(scale > 0):
                    raise ValueError("optimizer.init: the pvi group's sd does not fit this model (or is not positive).")
        elif isinstance(init, (dict, xr.Dataset, xr.DataTree)):
            theta = np.asarray(pm.unconstrain(init), dtype=np.float64)
            loc = theta.mean(axis=0)
        else:
            loc = np.asarray(init, dtype=np.float64).reshape(-1)
        if loc.shape != (pm.dim,) or not np.all(np.isfinite(loc)):
            raise ValueError(f"optimizer.init gives {loc.shape} unconstrained values; the model has dim={pm.dim} "
                             "(finite).")
    return family.init(pm.dim, loc=loc, scale=scale)


@uses_x64
def pvi(
    data,
    model,
    *,
    score="log",
    family="meanfield",
    reg=None,
    lam=0.0,
    draws=1000,
    random_seed=None,
    progressbar=True,
    optimizer=None,
    score_options=None,
    output=None,
):
    """Predictive variational inference: fit ``q`` to maximize a proper score of its predictive.

    Maximizes ``(1/n) [sum_i S(q^Y, y_i) - lam r(q)]`` (Eq. 4; notes erratum 5) by stochastic
    gradient ascent on the reparameterized estimators of Table 1, in the model's unconstrained
    space (Jacobian only in the prior and log joint, notes 2.4), then runs plain VI (the ELBO)
    in the same family for the heterogeneity table (notes, section 3).

    Parameters
    ----------
    data : xarray.DataTree or None
        The user's DataTree: its groups are kept and PVI's are added (it must not already have the
        group PVI writes, ``output.group``, default ``"posterior"``). ``None``: a new DataTree; the
        model carries the observed data either way.
    model
        A ``pymc.Model``, a ``pl.StanModel`` (or ``StanPosterior``), a :class:`~ppl_loo.JaxModel`,
        another JAX posterior model, or a :class:`~ppl_loo.SimulatorModel` (likelihood-free, CRPS).
    score : {"log", "crps", "quadratic"} or None
        The scoring rule (Table 1): log predictive density (Eq. 5), CRPS (continuous outcomes;
        needs a pathwise-differentiable simulator) or quadratic / Brier (categorical outcomes).
        ``None`` fits plain VI (ADVI) instead.
    family : {"meanfield", "fullrank", "flow"}, FlowOptions or Family
        Diagonal Gaussian, full-rank Gaussian, or a neural spline flow (``"flow"``: its default
        options; :class:`~ppl_loo.FlowOptions`: the flow with those), or a
        :class:`~ppl_loo.numerics.vi.families.Family`.
    reg : {None, "prior", "posterior"}
        ``KL(q || prior)`` (Eq. 6) or ``KL(q || posterior)`` (Eq. 7, i.e. ``lam * ELBO``).
    lam : float
        The regularization weight of Eq. (4); ``lam -> inf`` with ``reg="posterior"`` gives VI.
    draws : int
        Draws from ``q`` written to the posterior group (one chain).
    random_seed : int, numpy.random.Generator or JAX key, optional
        The source of all randomness of the optimization and the draws. None: a seed derived from
        the observed data, so that a rerun on the same input reproduces.
    progressbar : bool
        Show the optimizer's progress.
    optimizer : OptimizerOptions, dict or None
        The optimizer, its steps, learning rate, draws per step, iterate averaging, the log-score
        gradient estimator and the start (:class:`~ppl_loo.OptimizerOptions`; None: its defaults).
    score_options : ScoreOptions, dict or None
        What the score reads from the model: the observed variable (``var_name``) and the
        backend-specific ``simulator``, ``probs``, ``observed``, ``categories``
        (:class:`~ppl_loo.ScoreOptions`).
    output : OutputOptions, dict or None
        The group of the draws, the plain-VI comparison and its threshold
        (:class:`~ppl_loo.OutputOptions`).

    Returns
    -------
    xarray.DataTree
        ``posterior`` (or ``output.group``): draws from ``q``; ``log_likelihood`` (when the model
        has one and the group is ``"posterior"``); ``observed_data``; ``pvi``: ``loc`` / ``sd``
        (marginals of ``q`` in the unconstrained space, dim ``param``), ``phi`` (all variational
        parameters, flattened; ``attrs["phi_leaves"]`` says how), ``objective`` per step, ``log_q``
        per draw, the training scores of PVI and VI (``train_log_score``, ``train_crps`` (lower is
        better), ``train_quadratic``, and ``vi_`` versions; ``final_score`` is the fitted one), and
        the heterogeneity table ``pvi_mean``, ``pvi_sd``, ``vi_mean``, ``vi_sd``, ``sd_ratio``,
        ``flagged``.

    Examples
    --------
    >>> tree = pl.pvi(None, model, score="crps", optimizer={"steps": 1000},
    ...               score_options={"simulator": "y_rep", "observed": "y"})  # doctest: +SKIP
    """
    opt = resolve_options(OptimizerOptions, optimizer, "optimizer", "pvi")
    sco = resolve_options(ScoreOptions, score_options, "score_options", "pvi")
    out = resolve_options(OutputOptions, output, "output", "pvi")
    family, family_options = _family_spec(family)
    steps, draws_per_step, average, estimator = opt.steps, opt.draws_per_step, opt.average, opt.estimator
    _check_args(score, reg, lam, steps, draws_per_step, draws, average, estimator, out.heterogeneity_threshold)
    _check_learning_rate(opt.learning_rate)
    if isinstance(opt.method, str) and opt.method not in OPTIMIZERS:
        raise ValueError(f"optimizer.method={opt.method!r} is not known; choose from {sorted(OPTIMIZERS)} or pass an "
                         "optax.GradientTransformation.")
    _check_int("max_rounds", opt.max_rounds, 1)
    _check_data(data, out.group)
    pm = as_model(model, pvi=True, var_name=sco.var_name, simulator=sco.simulator, probs=sco.probs,
                  observed=sco.observed, categories=sco.categories)
    key = prng_key(seed_from(random_seed, *([] if pm.obs.observed is None else [pm.obs.observed])))
    if score is None and reg not in (None, "posterior"):
        raise ValueError("score=None fits plain VI (the ELBO, i.e. reg='posterior'); reg='prior' needs a score.")
    settings = npvi.Settings(score, reg if score is not None else "posterior", estimator, int(draws_per_step),
                             int(opt.max_rounds))
    _check_available(pm, settings)
    log_bound = _log_bound(pm, opt.log_lik_bound) if estimator == "rejection" else jnp.zeros(pm.n_obs)
    avg_start = int(int(steps) * (1.0 - float(average))) if average > 0 else 2**30
    k_pvi, k_vi, k_draw, k_eval, k_draw_vi, k_eval_vi, k_het = jax.random.split(key, 7)

    def fit_with(settings_, hyper, key_, desc):
        return _fit(pm, family, family_options, settings_, opt.method, opt.learning_rate, steps, hyper, key_,
                    opt.init, opt.init_scale, progressbar, desc)

    fit = fit_with(settings, npvi.Hyper(float(lam), 1.0, log_bound, avg_start), k_pvi,
                   "PVI" if score is not None else "VI")
    if estimator == "rejection":
        _check_rejection(fit.info, opt.max_rounds)
    vi_fit = None
    if out.compare_vi and score is not None:
        if pm.terms.logp is None:
            warnings.warn("output.compare_vi: the model has no likelihood, so plain VI cannot be fitted; the "
                          "heterogeneity table has PVI values only.", UserWarning, stacklevel=2)
        else:
            vi_settings = npvi.Settings(None, "posterior", "reparam", int(draws_per_step), int(opt.max_rounds))
            vi_fit = fit_with(vi_settings, npvi.Hyper(1.0, 1.0, jnp.zeros(pm.n_obs), avg_start), k_vi, "VI")

    theta, log_q, scores = _draws_and_scores(pm, fit, int(draws), k_draw, k_eval)
    vi_scores = {}
    if vi_fit is not None:
        vi_scores = _draws_and_scores(pm, vi_fit, int(draws), k_draw_vi, k_eval_vi, log_q=False)[2]
    method, learning_rate, init, init_scale = opt.method, opt.learning_rate, opt.init, opt.init_scale
    attrs = dict(score=score, family=fit.family.name, family_options=json.dumps(family_options or {}),
                 reg=str(reg), lam=float(lam), estimator=estimator, draws_per_step=int(draws_per_step),
                 steps=int(steps), optimizer=method if isinstance(method, str) else "custom",
                 learning_rate=str(learning_rate if learning_rate is not None else
                                   DEFAULT_LEARNING_RATE.get(method, "custom")),
                 average=float(average), random_seed=str(random_seed), draws=int(draws),
                 init_scale=str(init_scale), init=type(init).__name__ if init is not None else "zeros")
    return _assemble(pm, data, out.group, fit, vi_fit, theta, log_q, scores, vi_scores, k_het,
                     out.heterogeneity_threshold, attrs)


def _family_spec(family):
    """``(family, options)`` for :func:`ppl_loo.numerics.vi.families.get_family`: a name, a Family, or the flow
    of a :class:`FlowOptions` with its options."""
    if isinstance(family, FlowOptions):
        return "flow", dataclasses.asdict(family)
    if isinstance(family, Mapping):
        raise TypeError("family: pass the flow's options as family=pl.FlowOptions(...) (a dict is not a family).")
    return family, None


def _check_data(data, group):
    """``data`` is ``None`` or a DataTree without the group PVI writes."""
    if data is None:
        return
    if not isinstance(data, xr.DataTree):
        raise TypeError(f"data must be an xarray.DataTree or None, got {type(data).__name__}.")
    if group in data.children:
        raise ValueError(
            f"data already has a {group!r} group (from another fit). pl.pvi writes its draws there: pass "
            f"output={{'group': '{group}_pvi'}} (then pl.loo on this DataTree uses the other draws), or data "
            "without it."
        )


def _check_rejection(info, max_rounds):
    """Raise if the bound ``log C_i`` was exceeded (Appendix B); warn about dropped observations."""
    viol = int(np.sum(info.violations))
    if viol:
        raise ValueError("optimizer.log_lik_bound is not an upper bound of log p(y_i | theta): it was exceeded "
                         f"{viol} times during the optimization, so the rejection estimator was invalid. Pass a "
                         "larger bound.")
    dropped = int(np.sum(info.dropped))
    if dropped:
        warnings.warn(f"rejection estimator: {dropped} observation-steps had no acceptance within max_rounds="
                      f"{max_rounds} batches and were left out of those steps' gradients (biased); raise the "
                      "optimizer's max_rounds or draws_per_step.", UserWarning, stacklevel=3)


def _draws_and_scores(pm, fit, draws, k_draw, k_eval, log_q=True):
    """Draws from the fitted ``q`` (unconstrained), their ``log q`` and the training scores."""
    eps = jax.random.normal(k_draw, (draws, pm.dim))
    if not log_q:
        theta = np.asarray(fit.family.sample(fit.params, eps))
        return theta, None, training_scores(pm, theta, k_eval)
    theta, lq = fit.family.sample_and_log_q(fit.params, eps)
    theta, lq = np.asarray(theta), np.asarray(lq)
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(lq))):
        raise ValueError("the draws from the fitted q are not finite; the optimization diverged (lower learning_rate).")
    return theta, lq, training_scores(pm, theta, k_eval)


def _marginals(fit, key, d):
    eps = jax.random.normal(key, (4000, d))
    m, s = fit.family.marginals(fit.params, eps)
    return np.asarray(m), np.asarray(s)


def _assemble(pm, data, group, fit, vi_fit, theta, log_q, scores, vi_scores, k_het, threshold, attrs):
    """The DataTree ``pl.pvi`` returns: ``data``'s groups, the draws of ``q`` (``group``), their
    log-likelihood and the observed data where missing, and the ``pvi`` summary group."""
    children = {} if data is None else {name: node.to_dataset() for name, node in data.children.items()}
    post = posterior_dataset(pm, theta)
    post.attrs.update(inference_library="ppl_loo.pvi", method="pvi" if attrs["score"] is not None else "vi")
    children[group] = post
    ll = scores.pop("_ll", None)
    vi_scores.pop("_ll", None)
    if group == "posterior" and pm.eval_loglik is not None and "log_likelihood" not in children:
        children["log_likelihood"] = log_likelihood_dataset(pm, np.asarray(ll))
    if "observed_data" not in children and pm.obs.observed is not None:
        observed = observed_dataset(pm)
        if observed is not None:
            children["observed_data"] = observed
    children["pvi"] = _pvi_group(pm, group, fit, vi_fit, log_q, scores, vi_scores, k_het, threshold, attrs)
    return xr.DataTree.from_dict(children)


def _pvi_group(pm, group, fit, vi_fit, log_q, scores, vi_scores, k_het, threshold, attrs):
    """The ``pvi`` group: q's marginals and parameters, the optimization trace, training scores, and
    the PVI vs VI heterogeneity table (Lai & Yao, section 5)."""
    d, S = pm.dim, log_q.shape[0]
    k1, k2 = jax.random.split(k_het)
    pm_mean, pm_sd = _marginals(fit, k1, d)
    labels = list(pm.layout.labels)
    coords = {"param": labels, "step": np.arange(len(fit.info.objective))}
    phi, leaves = flatten_params(fit.params)
    ds = {"loc": (("param",), pm_mean), "sd": (("param",), pm_sd),
          "objective": (("step",), np.asarray(fit.info.objective)),
          "score_term": (("step",), np.asarray(fit.info.score)),
          "finite": (("step",), np.asarray(fit.info.finite)), "log_q": (("chain", "draw"), log_q.reshape(1, S)),
          "phi": (("phi_dim",), phi)}
    ds.update({f"train_{k}": ((), float(v)) for k, v in scores.items()})
    final = {"log": "log_score", "crps": "crps", "quadratic": "quadratic"}.get(attrs["score"])
    if final in scores:  # the fitted score on the training data, from the draws
        ds["final_score"] = ((), float(scores[final]))
    het, flagged_names, vi_attrs = _heterogeneity(vi_fit, k2, pm_mean, pm_sd, labels, threshold, ds, coords, vi_scores)
    ds.update({k: (("param",), np.asarray(v)) for k, v in het.items()})
    group_ds = xr.Dataset(ds, coords={**coords, "chain": [0], "draw": np.arange(S)})
    group_ds.attrs.update(attrs)
    group_ds.attrs.update(
        method="pvi" if attrs["score"] is not None else "vi", score=str(attrs["score"]), model_kind=pm.kind,
        var_name=pm.var_name, n_obs=int(pm.n_obs), dim=int(d), posterior_group=group,
        phi_leaves=json.dumps(leaves), wall_time_pvi_s=float(fit.wall), nonfinite_steps=int(np.sum(~fit.info.finite)),
        heterogeneity_threshold=float(threshold), flagged=json.dumps(flagged_names), caveat=CAVEAT,
        space="unconstrained", **vi_attrs,
    )
    return group_ds


def _heterogeneity(vi_fit, key, pm_mean, pm_sd, labels, threshold, ds, coords, vi_scores):
    """PVI's marginal sds against plain VI's (flagged where the ratio exceeds ``threshold``); adds the VI
    fit's trace and scores to ``ds``/``coords``. Returns ``(table, flagged names, attrs)``."""
    het = {"pvi_mean": pm_mean, "pvi_sd": pm_sd}
    d = np.shape(pm_mean)[0]
    if vi_fit is None:
        nan = np.full(d, np.nan)
        het.update(vi_mean=nan, vi_sd=nan, sd_ratio=nan, flagged=np.zeros(d, bool))
        return het, [], {}
    vm, vs = _marginals(vi_fit, key, d)
    ratio = pm_sd / vs
    flagged = ratio > threshold
    het.update(vi_mean=vm, vi_sd=vs, sd_ratio=ratio, flagged=flagged)
    coords["vi_step"] = np.arange(len(vi_fit.info.objective))
    ds["vi_objective"] = (("vi_step",), np.asarray(vi_fit.info.objective))
    ds["vi_phi"] = (("vi_phi_dim",), flatten_params(vi_fit.params)[0])
    ds.update({f"vi_train_{k}": ((), float(v)) for k, v in vi_scores.items()})
    return het, [lab for lab, f in zip(labels, flagged) if f], {"wall_time_vi_s": float(vi_fit.wall)}
