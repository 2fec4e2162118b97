"""The LOO methods compared on identical draws: ppl_loo, arviz_stats (plain and moment matching),
and the authors' own implementation (``bayesianquilts.metrics.ais``).

Every function takes the DataTree of one resampling and returns a dict with the pointwise k-hat
after the method (``k``), ``elpd_i``, ``elpd``, the wall time and the number of observations the
method worked on (``n_worked``: the ones it tried to adapt).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from ovarian_common import ALL_TRANSFORMS, HBAR, PAPERS_SEVEN


def _flat(a):
    return np.asarray(a, dtype=float).ravel()


def run_ppl_loo(pl, data, model, transforms=ALL_TRANSFORMS, label="ppl_loo"):
    """``pl.loo(data, model, search={"transforms": ...})`` with the project's defaults otherwise (threshold
    ``min(1 - 1/log10 S, 0.7)``, hbar grid 4^-r, r = 0..10), and the search alone (no
    second opinions): this benchmark compares importance-sampling methods on identical draws (the papers' Table 1);
    the second opinions that ``pl.loo`` adds by default are scored against refits on this model in
    ``benchmarks/results/truth`` (row ``ovarian_lr``)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, progressbar=False, search={"transforms": list(transforms), "hbar": HBAR},
                     second_opinions={"mixture": False, "smc": False})
    wall = time.perf_counter() - t0
    cand = res.candidates
    n_worked = int(np.sum(~np.all(np.isnan(cand["k"]), axis=1)))
    return {
        "method": label,
        "k": _flat(res.pareto_k),
        "k_psis": _flat(res.pareto_k_psis),
        "elpd_i": _flat(res.elpd_i),
        "mcse_elpd_i": _flat(res.mcse_elpd_i),
        "elpd": float(res.elpd),
        "se": float(res.se),
        "good_k": float(res.good_k),
        "wall_s": wall,
        "n_worked": n_worked,
        "failed": int(np.sum(np.asarray(res.transform).ravel() == "failed")),
        "doubtful": int(np.sum(np.asarray(res.doubtful).ravel())),
        "doubtful_i": [bool(v) for v in np.asarray(res.doubtful).ravel()],
        "transform": [str(t) for t in np.asarray(res.transform).ravel()],
        "_res": res,
    }


def run_arviz_plain(data):
    import arviz_stats as azs

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = azs.loo(data, pointwise=True, var_name="y")
    wall = time.perf_counter() - t0
    return {"method": "arviz_stats.loo (plain PSIS)", "k": _flat(res.pareto_k), "elpd_i": _flat(res.elpd_i),
            "elpd": float(res.elpd), "se": float(res.se), "good_k": float(res.good_k), "wall_s": wall, "n_worked": 0,
            "_res": res}


class _JaxFunctions:
    """Jitted, draw-batched log posterior and pointwise log-likelihood of a JAX model, in the
    DataArray form ``arviz_stats.loo_moment_match`` asks for."""

    def __init__(self, model):
        import jax

        self.logp = jax.jit(jax.vmap(model.logp))
        self.ll_i = jax.jit(jax.vmap(model.loglik_i, in_axes=(0, None)))
        self.d = model.dim

    def log_prob_upars(self, upars):
        import xarray as xr

        u = np.asarray(upars.transpose("chain", "draw", ...).values)
        out = np.asarray(self.logp(u.reshape(-1, self.d))).reshape(u.shape[:2])
        return xr.DataArray(out, dims=("chain", "draw"))

    def log_lik_i_upars(self, upars, i):
        import xarray as xr

        u = np.asarray(upars.transpose("chain", "draw", ...).values)
        out = np.asarray(self.ll_i(u.reshape(-1, self.d), int(i))).reshape(u.shape[:2])
        return xr.DataArray(out, dims=("chain", "draw"))


def run_arviz_mm(data, loo_plain, model, cov=None):
    """``arviz_stats.loo_moment_match`` with split (its default), on the JAX model's unconstrained
    draws (all parameters, hyperparameters included, as Paananen et al.'s moment matching).

    ``cov=None`` passes ``cov = S >= 10 d``: arviz_stats only tries its covariance transformation
    when ``S >= 10 d``, so with fewer draws ``cov=False`` gives identical results, while its
    default ``cov=True`` still forms and inverts a dense ``d x d`` (identity) mapping in the split
    step of every observation, ``O(d^3)``: minutes per observation for d = 3075 or 4615 on this
    machine. The default is timed once on its own (``stage_peers``).
    """
    import arviz_stats as azs
    import xarray as xr

    fns = _JaxFunctions(model)
    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()))
    if cov is None:
        cov = theta.shape[0] >= 10 * theta.shape[1]
    nc, nd = data["posterior"].sizes["chain"], data["posterior"].sizes["draw"]
    upars = xr.DataArray(theta.reshape(nc, nd, -1), dims=("chain", "draw", "upars"))
    # compile outside the timed call, as ppl_loo's cold/warm timings separate JIT compilation
    fns.log_prob_upars(upars)
    fns.log_lik_i_upars(upars, 0)
    n_worked = int(np.sum(_flat(loo_plain.pareto_k) > loo_plain.good_k))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = azs.loo_moment_match(data, loo_plain, log_prob_upars_fn=fns.log_prob_upars,
                                   log_lik_i_upars_fn=fns.log_lik_i_upars, upars=upars, var_name="y", split=True,
                                   cov=cov)
    wall = time.perf_counter() - t0
    return {"method": f"arviz_stats.loo_moment_match (split, cov={cov})", "k": _flat(res.pareto_k),
            "elpd_i": _flat(res.elpd_i),
            "elpd": float(res.elpd), "se": float(res.se), "good_k": float(res.good_k), "wall_s": wall,
            "n_worked": n_worked}


def run_bayesianquilts(data, model, name):
    """The authors' library (``bayesianquilts.metrics.ais.AdaptiveImportanceSampler``) with its
    logistic-regression likelihood, the papers' seven transformations over the hbar grid, and its
    own rule: candidates are tried in its order (identity, then each transformation over the grid)
    and an observation keeps the first candidate that brings its k-hat below 0.7 (else the lowest).

    ``adaptive_is_loo`` keeps the transformed draws of every (transformation, hbar) in its result,
    ``(S, n, d)`` float64 each: 0.66 GB for the horseshoe LR's (beta0, beta) at S = 1000, so ~40 GB
    for the 60 candidates of one call. It is therefore called once per candidate (one
    transformation, one hbar) and the per-candidate results are merged with its own rule; the
    gradients and Hessian diagonals it precomputes are recomputed by every call (counted in the
    wall time). Only for the logistic model: for the ReLU net (d = 4615) each such array is 2.0 GB.
    """
    import jax
    import jax.numpy as jnp
    from bayesianquilts.metrics.ais import AdaptiveImportanceSampler, LogisticRegressionLikelihood

    if name != "logistic":
        raise NotImplementedError("bayesianquilts run only on the logistic model (memory, see docstring)")
    post = data["posterior"].to_dataset()
    beta = jnp.asarray(np.asarray(post["beta"].values).reshape(-1, model.p))
    beta0 = jnp.asarray(np.asarray(post["beta0"].values).reshape(-1))
    theta = np.asarray(model.unconstrain(post))
    log_prior = np.asarray(jax.vmap(model.log_prior)(jnp.asarray(theta)))
    X, y = jnp.asarray(model.X), jnp.asarray(model.y)

    def f_fn(data_, beta, intercept):  # complement probability (paper S.9), the Var target
        p = jax.nn.sigmoid(jnp.einsum("df,sf->sd", data_["X"], beta) + intercept[:, None])
        return data_["y"][None] * (1 - p) + (1 - data_["y"][None]) * p

    sampler = AdaptiveImportanceSampler(LogisticRegressionLikelihood(),
                                        prior_log_prob_fn=lambda params: jnp.asarray(log_prior))
    bq_data, bq_params = {"X": X, "y": y}, {"beta": beta, "intercept": beta0}
    timings = {}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ident = sampler.adaptive_is_loo(bq_data, bq_params, transformations=["identity"], khat_threshold=0.7)
    timings["identity"] = time.perf_counter() - t0
    k_psis = np.asarray(ident["identity"]["khat"], dtype=float)
    best_k = k_psis.copy()
    best_l = np.asarray(ident["identity"]["ll_loo_psis"], dtype=float)
    for t in PAPERS_SEVEN:
        # its own grids: MM at hbar = 1 only; PMM without hbar = 1 (where it is MM)
        grid = [1.0] if t in ("mm1", "mm2") else [h for h in HBAR if not (t.startswith("pmm") and h == 1.0)]
        t1 = time.perf_counter()
        for h in grid:
            adapted = best_k < 0.7
            if adapted.all():
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = sampler.adaptive_is_loo(bq_data, bq_params, rhos=jnp.asarray([h]), transformations=[t], f_fn=f_fn,
                                              khat_threshold=0.7)
            k = np.asarray(out["best"]["khat"], dtype=float)
            k = np.where(np.isfinite(k), k, np.inf)
            better = ~adapted & (k < best_k)
            best_k = np.where(better, k, best_k)
            best_l = np.where(better, np.asarray(out["best"]["ll_loo_psis"], dtype=float), best_l)
            del out
        timings[t] = time.perf_counter() - t1
    wall = time.perf_counter() - t0
    elpd_i = np.log(best_l)
    return {"method": "bayesianquilts.metrics.ais (authors)", "k": best_k, "elpd_i": elpd_i,
            "elpd": float(np.sum(elpd_i)), "wall_s": wall, "good_k": 0.7, "n_worked": int(np.sum(k_psis > 0.7)),
            "k_psis": k_psis, "timings": timings}
