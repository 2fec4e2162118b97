"""The LOO methods scored by the suite, on the same main-fit draws.

Each returns a dict of per-observation arrays: ``elpd_i``, ``mcse`` (the method's own Monte Carlo
SE; for the peers that report none, arviz_stats' moment matching and bayesianquilts, the plain
PSIS one of the same draws), ``doubtful`` (what the method tells its user not to trust: k above its threshold for the
PSIS-based peers, ``res.doubtful`` for ppl_loo), and ``wall_s``; ppl_loo also ``evidence`` (``res.evidence``:
what vouches for each ``elpd_i``, ``""`` where nothing does).
"""

from __future__ import annotations

import time
import warnings

import numpy as np


def _flat(a):
    return np.asarray(a, dtype=float).ravel()


def _adapter(problem, data):
    """The posterior-model adapter ppl_loo builds from the problem's model (unconstrained space)."""
    from ppl_loo.adapters.as_model import as_model

    return as_model(problem.model(data), data=data)


def plain(problem, data):
    import ppl_loo as pl

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, var_name=_var_name(data))
    k = _flat(res.pareto_k)
    return {"elpd_i": _flat(res.elpd_i), "mcse": _flat(res.mcse_elpd_i), "k": k,
            "doubtful": k > float(res.good_k), "wall_s": time.perf_counter() - t0}


def _var_name(data):
    names = list(data["log_likelihood"].data_vars)
    return "y" if "y" in names else names[0]


def ppl_loo(problem, data, **kw):
    import ppl_loo as pl

    model = problem.model(data)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, var_name=_var_name(data), progressbar=False, **kw)
    wall = time.perf_counter() - t0
    out = {"elpd_i": _flat(res.elpd_i), "mcse": _flat(res.mcse_elpd_i), "k": _flat(res.pareto_k),
           "doubtful": np.asarray(res.doubtful.values, bool).ravel(),
           "transform": [str(t) for t in np.asarray(res.transform.values).ravel()], "wall_s": wall}
    if getattr(res, "refit", None) is not None:
        out["refit"] = np.asarray(res.refit.values, bool).ravel()
    if getattr(res, "evidence", None) is not None:  # what vouches for each elpd_i ("" where doubtful)
        out["evidence"] = [str(e) for e in np.asarray(res.evidence.values).astype(str).ravel()]
    return out


#: refit= settings of ``ppl_loo_refit``: half the main fit's draws (4 x 500) and the refit default's warmup (the
#: batched refits: 150 iterations of step-size adaptation from the fit, warm-started; the model's own samplers:
#: the fit's), so that the refits of the larger models cost a fraction of a full fit each; the bridge with the
#: full-data draws and the MCSE from the chains carry the smaller refit
REFIT_OPTIONS = {"draws": 500}


def ppl_loo_refit(problem, data, part=None):
    """``pl.loo(data, model, refit="doubtful", second_opinions={"refit_options": REFIT_OPTIONS})``: the doubtful
    observations refit with the model's own sampler (a seed independent of the suite's refits), each estimated by
    bridge sampling between its refit and the full-data draws.

    ``part=(p, P)`` refits only every P-th doubtful observation from the p-th on (``refit=`` with
    those indices, seed ``20261124 + p``), so that P processes share the refits; :func:`merge_parts`
    puts the parts together (the same as ``refit="doubtful"`` with per-part seeds)."""
    if part is None:
        return ppl_loo(problem, data, refit="doubtful", random_seed=20261124,
                       second_opinions={"refit_options": REFIT_OPTIONS})
    p, P = part
    doubtful = np.flatnonzero(ppl_loo(problem, data)["doubtful"])
    targets = [int(i) for i in doubtful[p::P]]
    out = ppl_loo(problem, data, refit=targets, random_seed=20261124 + p,
                  second_opinions={"refit_options": REFIT_OPTIONS})
    out["targets"] = targets
    return out


def merge_parts(parts):
    """One ``ppl_loo_refit`` result from its parts: each observation from the part that refit it."""
    out = {k: list(v) if isinstance(v, (list, np.ndarray)) else v for k, v in parts[0].items() if k != "targets"}
    for part in parts:
        for i in part["targets"]:
            for key in ("elpd_i", "mcse", "k", "doubtful", "transform", "refit", "evidence"):
                if key in out and key in part:
                    out[key][i] = part[key][i]
    out["wall_s"] = float(sum(float(p["wall_s"]) for p in parts))
    return out


class Upars:
    """Batched log density and pointwise log-likelihood on ``upars`` DataArrays (arviz_stats' interface)."""

    def __init__(self, adapter):
        self.m = adapter

    def log_prob_upars(self, upars):
        import xarray as xr

        u = np.asarray(upars.transpose("chain", "draw", ...).values)
        out = np.asarray(self.m.log_density(u.reshape(-1, u.shape[-1]))).reshape(u.shape[:2])
        return xr.DataArray(out, dims=("chain", "draw"))

    def log_lik_i_upars(self, upars, i):
        import xarray as xr

        u = np.asarray(upars.transpose("chain", "draw", ...).values)
        out = np.asarray(self.m.log_lik(u.reshape(-1, u.shape[-1]), obs=[int(i)]))[:, 0].reshape(u.shape[:2])
        return xr.DataArray(out, dims=("chain", "draw"))


def arviz_moment_match(problem, data):
    """``arviz_stats.loo_moment_match`` (split, as its default) in the model's unconstrained space."""
    import arviz_stats as azs
    import xarray as xr

    adapter = _adapter(problem, data)
    theta = np.asarray(adapter.unconstrain(data["posterior"].to_dataset()))
    nc, nd = data["posterior"].sizes["chain"], data["posterior"].sizes["draw"]
    upars = xr.DataArray(theta.reshape(nc, nd, -1), dims=("chain", "draw", "upars"))
    fns = Upars(adapter)
    var_name = _var_name(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo0 = azs.loo(data, pointwise=True, var_name=var_name)
        fns.log_prob_upars(upars)  # compile outside the timed call
        t0 = time.perf_counter()
        res = azs.loo_moment_match(data, loo0, log_prob_upars_fn=fns.log_prob_upars,
                                   log_lik_i_upars_fn=fns.log_lik_i_upars, upars=upars, var_name=var_name,
                                   split=True, cov=theta.shape[0] >= 10 * theta.shape[1])
    wall = time.perf_counter() - t0
    k = _flat(res.pareto_k)
    # arviz_stats reports no pointwise MCSE: the plain-PSIS delta-method MCSE stands in (scoring)
    return {"elpd_i": _flat(res.elpd_i), "mcse": plain(problem, data)["mcse"], "k": k,
            "doubtful": k > float(res.good_k), "wall_s": wall}


def bayesianquilts(problem, data):
    """The gradient-flow papers' authors' library, for the logistic-regression problems only (its
    ``LogisticRegressionLikelihood``); the papers' seven transformations over the hbar grid, its own
    rule (the first candidate below k 0.7, else the lowest k)."""
    m = getattr(problem, "jax_model", None)
    if not hasattr(m, "Xt"):  # before the import: the reason it is not run, installed or not
        raise NotImplementedError("this suite wraps bayesianquilts' LogisticRegressionLikelihood only (logistic "
                                  "regressions); its AutoDiffLikelihoodMixin could wrap this model, not done")
    import jax
    import jax.numpy as jnp
    from bayesianquilts.metrics.ais import AdaptiveImportanceSampler, LogisticRegressionLikelihood

    post = data["posterior"].to_dataset()
    beta = jnp.asarray(np.asarray(post["beta"].values).reshape(-1, m.p))
    beta0 = jnp.asarray(np.asarray(post["beta0"].values).reshape(-1))
    theta = np.asarray(m.unconstrain(post))
    log_prior = np.asarray(jax.vmap(m.log_prior)(jnp.asarray(theta)))
    X, y = jnp.asarray(m.X), jnp.asarray(m.y)

    def f_fn(data_, beta, intercept):
        p = jax.nn.sigmoid(jnp.einsum("df,sf->sd", data_["X"], beta) + intercept[:, None])
        return data_["y"][None] * (1 - p) + (1 - data_["y"][None]) * p

    sampler = AdaptiveImportanceSampler(LogisticRegressionLikelihood(),
                                        prior_log_prob_fn=lambda params: jnp.asarray(log_prior))
    bq_data, bq_params = {"X": X, "y": y}, {"beta": beta, "intercept": beta0}
    hbar = [float(h) for h in 4.0 ** -np.arange(11)]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ident = sampler.adaptive_is_loo(bq_data, bq_params, transformations=["identity"], khat_threshold=0.7)
        best_k = np.asarray(ident["identity"]["khat"], dtype=float)
        best_l = np.asarray(ident["identity"]["ll_loo_psis"], dtype=float)
        for t in ("pmm1", "pmm2", "kl", "var", "ll", "mm1", "mm2"):
            grid = [1.0] if t in ("mm1", "mm2") else [h for h in hbar if not (t.startswith("pmm") and h == 1.0)]
            for h in grid:
                todo = best_k >= 0.7
                if not todo.any():
                    break
                out = sampler.adaptive_is_loo(bq_data, bq_params, rhos=jnp.asarray([h]), transformations=[t],
                                              f_fn=f_fn, khat_threshold=0.7)
                k = np.asarray(out["best"]["khat"], dtype=float)
                k = np.where(np.isfinite(k), k, np.inf)
                better = todo & (k < best_k)
                best_k = np.where(better, k, best_k)
                best_l = np.where(better, np.asarray(out["best"]["ll_loo_psis"], dtype=float), best_l)
                del out
    wall = time.perf_counter() - t0
    return {"elpd_i": np.log(best_l), "mcse": plain(problem, data)["mcse"], "k": best_k,
            "doubtful": best_k >= 0.7, "wall_s": wall}


METHODS = {"plain": plain, "arviz_mm": arviz_moment_match, "bayesianquilts": bayesianquilts, "ppl_loo": ppl_loo,
           "ppl_loo_refit": ppl_loo_refit}
LABELS = {"plain": "plain PSIS (pl.loo without a model = arviz_stats.loo)",
          "arviz_mm": "arviz_stats.loo_moment_match (split)",
          "bayesianquilts": "bayesianquilts (the papers' authors)",
          "ppl_loo": "ppl_loo (pl.loo(data, model), defaults)",
          "ppl_loo_refit": "ppl_loo, refit='doubtful'"}
