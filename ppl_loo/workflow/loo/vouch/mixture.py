"""Mixture importance sampling, sampled by ppl_loo itself (``pl.loo(..., second_opinions={"mixture": ...})`` and
``pl.loo_mixture``).

One extra MCMC run on ``q_mix(theta) ∝ p(theta | y) sum_j 1 / p(y_j | theta)`` (Silva & Zanella 2023) gives every
``elpd_i`` with finite variance (:mod:`ppl_loo.numerics.mixture`). In R this is vignette code the user adapts, and
``arviz_stats.loo(mixture=True)`` only consumes draws the user sampled; here the model samples it:

- a Stan program through its derived mixture program (``target += log_sum_exp(-log_lik)`` after the model block,
  :func:`ppl_loo.stan_bridge.derived.sampling_program`), sampled by Stan's own NUTS: one gradient evaluation per step;
- a model with its own mixture sampler (``mixture_draws``: closed-form JAX models) with that;
- every other model (PyMC, JAX) with BlackJAX's NUTS on ``logp(theta) + logsumexp(-loglik(theta))``, the batched
  refits' sampler (:func:`~ppl_loo.numerics.nuts.batched_nuts`), each chain started at a posterior draw and
  run on its own CPU core, its compiled program kept with the model's compiled programs for the next run.

The run's settings are the original fit's (chains, draws, warmup, target acceptance, tree depth; as ``refit=``
reads them), with at least 1,000 warmup iterations and draws per chain, so it costs about one fit. Its own
diagnostics decide, per observation, whether its estimate can vouch for anything (:func:`mixture_vouches`): it
does not use the main fit's draws, so the main fit's R-hat does not matter to it.
"""

from __future__ import annotations

import functools
import numbers
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.mixture import mixture_linearization, mixture_log_weights, mixture_loo
from ppl_loo.numerics.nuts import batched_nuts
from ppl_loo.numerics.psis import khat_threshold
from ppl_loo.numerics.random import seed_from
from ppl_loo.workflow.loo.inputs import rank_rhat
from ppl_loo.workflow.loo.interrupt import run_interruptible

__all__ = ["MixtureRun", "MIN_ESS", "MAX_DIVERGENT", "MAX_PARAM_RHAT", "run_mixture",
           "mixture_vouches", "mixture_settings", "check_mixture_values", "mixture_run_ok"]

#: an observation's mixture estimate vouches only with at least this effective sample size of its ratio (MCMC) and
#: of its LOO weights and the posterior's weights (importance sampling)
MIN_ESS = 100.0
#: ... and at most this share of divergent transitions in the run
MAX_DIVERGENT = 0.01
#: ... and neither its own rank-normalized R-hat (of the ratio's linearization ``f_i``) nor that of the posterior's
#: mixture weights ``l_s`` above this. Convergence is judged per estimate: the estimate is a function of the
#: log-likelihood at the mixture draws, and its R-hat and ESS are what say whether it converged; the maximum R-hat
#: over thousands of parameters says more about the local scales of a horseshoe (slow, irrelevant to the
#: predictions) and exceeds the main fit's 1.01 by chance alone (on the leverage regression of
#: tests/test_mixture.py, 4 x 1000 draws: one observation of 40 at 1.015). The parameters' max R-hat is reported.
MAX_PARAM_RHAT = 1.05


class MixtureRun(NamedTuple):
    """The mixture run's estimate per observation (``elpd``, ``mcse``, ``ess``, ``rhat`` of its linearization,
    ``ok``: its diagnostics pass, ``khat``: the Pareto k-hat of the weights it uses) and the run's diagnostics
    (``info``: sampler, chains, draws, warmup, seconds, divergences, max parameter R-hat and where, posterior-weight
    ESS and k-hat, the k-hat threshold)."""

    elpd: np.ndarray
    mcse: np.ndarray
    ess: np.ndarray
    rhat: np.ndarray
    ok: np.ndarray
    info: dict
    theta: Any = None  # (chains, draws, d) unconstrained mixture draws
    ll: Any = None  # (chains * draws, n) the log-likelihood there, chain-major
    khat: Any = None  # (n,) the k-hat of each estimate's weights


#: the integer settings of ``mixture_options``: their least value and an example (the run's own minimum of chains and
#: draws is :func:`mixture_settings`')
_INT_SETTINGS = {"chains": (1, 4), "draws": (1, 1000), "warmup": (0, 1000), "max_tree_depth": (1, 10)}


def check_mixture_values(mixture_kwargs):
    """The values of ``mixture_options`` fail before anything runs, naming the setting: whole numbers for the counts,
    a probability for ``target_accept`` (unknown keys: :func:`mixture_settings`)."""
    if not isinstance(mixture_kwargs, dict):
        return
    for key, value in mixture_kwargs.items():
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if key in _INT_SETTINGS:
            least, example = _INT_SETTINGS[key]
            if not (number and float(value).is_integer() and value >= least):
                raise ValueError(f"mixture_options: {key}={value!r} must be a whole number of at least {least}, e.g. "
                                 f"{{'{key}': {example}}}.")
        elif key == "target_accept" and not (number and 0.0 < value < 1.0):
            raise ValueError(f"mixture_options: target_accept={value!r} must be a probability strictly between 0 and "
                             "1, e.g. {'target_accept': 0.9}.")


def mixture_settings(settings, overrides=None):
    """The run's settings: the original fit's (``refit_settings``) with ``overrides`` (``mixture_options``)."""
    check_mixture_values(overrides)
    out = dict(settings)
    out.pop("checkpoint", None)
    out.pop("batched", None)  # a refit setting
    for key, value in dict(overrides or {}).items():
        if key not in out:
            raise ValueError(f"mixture_options: unknown setting {key!r}; allowed: {sorted(out)}.")
        out[key] = type(out[key])(value)
    if out["chains"] < 2 or out["draws"] < 50:
        raise ValueError(f"the mixture run needs at least 2 chains of 50 draws; the settings are {out} "
                         "(mixture_options overrides them).")
    return out


def _mixture_programs(model):
    """The mixture target's log density ``(theta, i)`` of ``model`` and where its compiled sampler is kept between
    runs: among the model's compiled programs (``Model.compiled``), as the compiled search
    (:func:`~ppl_loo.workflow.loo.engine.compiled_engine`), so that later runs on the model (``pl.loo`` again, a
    retried run) sample without compiling again."""
    logp, loglik = model.logp, model.loglik

    def build():
        def log_density(theta, i):  # one target, the mixture of every LOO posterior (i unused)
            return logp(theta) + jax.scipy.special.logsumexp(-loglik(theta))

        return {}, log_density

    return build() if model.compiled is None else model.compiled("mixture_nuts", None, build)


@uses_x64
def _blackjax_mixture(model, init, settings, seed, theta):
    """BlackJAX's NUTS (:func:`~ppl_loo.numerics.nuts.batched_nuts`: each chain a lane, the lanes over the
    CPU cores) on ``logp + logsumexp(-loglik)``, from ``init`` ``(chains, d)`` with the posterior draws' variances
    as the starting inverse mass matrix and Stan's window adaptation: ``(chains, draws, d)`` draws and the info."""
    programs, log_density = _mixture_programs(model)
    init = np.atleast_2d(np.asarray(init, dtype=np.float64))
    var = np.var(np.asarray(theta, dtype=np.float64), axis=0)
    imm = np.where(np.isfinite(var) & (var > 0), var, 1.0)
    draws, div, _ = batched_nuts(log_density, init[None], np.zeros(1, int), num_warmup=settings["warmup"],
                                 num_samples=settings["draws"], random_seeds=[seed],
                                 target_accept=settings["target_accept"], max_tree_depth=settings["max_tree_depth"],
                                 inverse_mass_matrix=imm, adaptation="window", programs=programs)
    return draws[0], {"sampler": "BlackJAX NUTS on the mixture target", "divergences": int(np.sum(div))}


def _sample(model, theta, settings, seed):
    """The mixture draws ``(chains, draws, d)`` and the sampler's info, by the backend's sampler."""
    C = settings["chains"]
    rng = np.random.default_rng(seed)
    init = np.asarray(theta)[rng.choice(theta.shape[0], size=C, replace=theta.shape[0] < C)]
    backend = getattr(model, "mixture_draws", None)
    if backend is not None:  # the backend's own sampler: Stan's NUTS on its derived mixture program, a JAX model's
        call = functools.partial(backend, chains=C, warmup=settings["warmup"], draws=settings["draws"],
                                 random_seed=seed, init=init, target_accept=settings["target_accept"],
                                 max_tree_depth=settings["max_tree_depth"])
        # NumPyro in a worker thread (Ctrl-C stops it at once); Stan's sampler in this one (see refit.py)
        return run_interruptible(call, model.cancel) if model.kind == "JAX" else call()
    if not model.is_jax or model.logp is None or model.loglik is None:
        raise ValueError("the mixture run needs the model's log density and pointwise log-likelihood as JAX "
                         "functions (a pymc.Model, pl.StanModel or pl.JaxModel).")
    call = functools.partial(_blackjax_mixture, model, init, settings, seed, theta)
    return run_interruptible(call, model.cancel)


def run_mixture(model, theta, settings, random_seed=None, k_threshold=None) -> MixtureRun:
    """Sample ``q_mix`` (from posterior draws ``theta`` ``(S, d)``) and estimate every ``elpd_i``.

    Parameters
    ----------
    model : Model
        The protocol model (:func:`ppl_loo.adapters.as_model.as_model`).
    theta : array (S, d)
        The posterior draws (starting points of the chains).
    settings : dict
        ``chains``, ``draws``, ``warmup``, ``target_accept``, ``max_tree_depth`` (:func:`mixture_settings`).
    random_seed : int, optional
        None: a seed derived from the draws (:func:`~ppl_loo.numerics.random.seed_from`).
    k_threshold : float, optional
        The largest Pareto k-hat of an estimate's weights that vouches (:func:`mixture_vouches`); None: the
        engine's default for the run's number of draws, ``min(1 - 1 / log10(S), 0.7)``.
    """
    seed = int(np.random.default_rng(seed_from(random_seed, np.asarray(theta, dtype=np.float64))).integers(2**31))
    t0 = time.perf_counter()
    draws, info = _sample(model, np.asarray(theta), settings, seed)
    C, D, d = draws.shape
    ll = np.asarray(model.log_lik(jnp.asarray(draws.reshape(C * D, d))), dtype=np.float64)
    est = mixture_loo(ll, n_chains=C)
    f = mixture_linearization(ll)
    rhat = rank_rhat(f.reshape(C, D, -1))
    rhat_w = float(rank_rhat(mixture_log_weights(ll).reshape(C, D, 1))[0])
    rhat_p = rank_rhat(np.asarray(draws, dtype=float))
    j = int(np.nanargmax(rhat_p)) if np.any(np.isfinite(rhat_p)) else -1
    info = {**info, "chains": C, "draws": D, "warmup": int(settings["warmup"]), "seed": seed,
            "seconds": time.perf_counter() - t0, "max_rhat": float(rhat_p[j]) if j >= 0 else float("nan"),
            "max_rhat_coordinate": j, "rhat_mixture_weights": rhat_w, "ess_posterior_weights": float(est.ess_posterior),
            "khat_posterior_weights": float(est.khat_posterior),
            "k_threshold": float(khat_threshold(C * D) if k_threshold is None else k_threshold)}
    ok = mixture_vouches(np.minimum(est.ess, est.ess_loo), rhat, info, est.khat)
    return MixtureRun(est.elpd, est.mcse, est.ess, rhat, ok, info, draws, ll, est.khat)


def mixture_run_ok(info):
    """The run's own checks, which every estimate shares: divergences at most :data:`MAX_DIVERGENT` of its draws,
    the R-hat of its mixture weights at most :data:`MAX_PARAM_RHAT`, the importance-sampling ESS of the posterior's
    weights at least :data:`MIN_ESS`."""
    n_draws = max(int(info["chains"]) * int(info["draws"]), 1)
    return bool(info["divergences"] <= MAX_DIVERGENT * n_draws and not info["rhat_mixture_weights"] > MAX_PARAM_RHAT
                and info["ess_posterior_weights"] >= MIN_ESS)


def mixture_vouches(ess, rhat, info, khat=None):
    """Per observation: the mixture estimate may vouch (its own R-hat at most :data:`MAX_PARAM_RHAT`, its MCMC
    and importance-sampling ESS at least :data:`MIN_ESS`, the Pareto k-hat of the weights it uses, ``khat``, at
    most ``info["k_threshold"]`` (the engine's threshold: a longer tail leaves the ratio of means off by more than
    its SE says, as for PSIS); the run's divergences at most :data:`MAX_DIVERGENT` of its draws, the R-hat of its
    mixture weights at most :data:`MAX_PARAM_RHAT`, the importance-sampling ESS of the posterior's weights at least
    :data:`MIN_ESS`: the normalizer every estimate shares)."""
    run_ok = mixture_run_ok(info)
    rhat = np.asarray(rhat, dtype=float)
    ok = run_ok & (np.nan_to_num(rhat, nan=1.0) <= MAX_PARAM_RHAT) & (np.asarray(ess) >= MIN_ESS)
    if khat is not None:
        ok &= np.asarray(khat, dtype=float) <= float(info["k_threshold"])  # NaN: no tail fitted, not vouched
    return ok
