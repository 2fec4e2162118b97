"""MCMC fits of the ovarian models with Stan (PyStan 3 / httpstan, compiled from ``stan_models/``).

Both models are the project's Stan programs (``logistic_horseshoe.stan`` with Paananen et al.'s
hyperparameters from :func:`ppl_loo.stan_bridge.horseshoe_data`, ``relu_net.stan`` with 3 hidden units
and N(0, 1) weights), sampled with Stan's NUTS (diagonal metric, windowed adaptation). Their
parameter names and layout are those of the closed-form JAX models, so the draws are fed to
``LogisticRegression(prior="horseshoe").unconstrain`` / ``ReluNet.unconstrain`` for the engine.

Refits without observation ``i`` use the same program and settings on the data without row ``i``;
the horseshoe's ``scale_global`` is passed as data with its full-data value, so the prior is the
same (exact LOO by data deletion).

A fit is stored as ``.npz`` with the constrained variables the JAX model needs (``(chain, draw,
...)``), ``log_lik`` and the sampler diagnostics, plus a ``.json`` with the settings, timings and
the convergence summary (R-hat, ESS from ``arviz_stats``, divergences, tree-depth saturation).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from ovarian_common import STAN_DIR, load_json, log, save_json

#: constrained variables of the JAX models, per Stan program
KEEP = {"logistic": ("beta0", "beta", "lam", "tau", "caux"), "relu": ("W1", "W2", "b2")}
PROGRAM = {"logistic": "logistic_horseshoe.stan", "relu": "relu_net.stan"}
SAMPLER_COLUMNS = {"lp__": "lp", "accept_stat__": "acceptance_rate", "stepsize__": "step_size",
                   "treedepth__": "tree_depth", "n_leapfrog__": "n_steps", "divergent__": "diverging",
                   "energy__": "energy"}


def stan_data(name, X, y, drop=None):
    """The Stan data block, optionally without observation ``drop`` (same prior as the full data)."""
    from ppl_loo.stan_bridge import horseshoe_data, relu_data

    keep = np.ones(len(y), bool)
    if drop is not None:
        keep[drop] = False
    if name == "logistic":
        sg = horseshoe_data(X, y)["scale_global"]  # full-data value, kept for the refits
        d = horseshoe_data(X[keep], y[keep], scale_global=sg)
    else:
        d = relu_data(X[keep], y[keep], hidden=3)
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def _extract(fit, names):
    """``name -> (chain, draw, *dims)`` arrays from a PyStan 3 ``Fit`` (Stan's column-major flattening)."""
    draws = fit._draws  # (n_columns, n_draws, n_chains): sampler columns first, then constrained ones
    n_sampler = len(fit.sample_and_sampler_param_names)
    out, offset = {}, n_sampler
    for pname, dims in zip(fit.param_names, fit.dims):
        size = int(np.prod(dims)) if dims else 1
        if pname in names:
            block = draws[offset:offset + size]  # (size, D, C)
            block = np.moveaxis(block, 0, -1)  # (D, C, size)
            block = block.reshape(block.shape[:2] + tuple(dims), order="F") if dims else block[..., 0]
            out[pname] = np.ascontiguousarray(np.swapaxes(block, 0, 1))  # (C, D, *dims)
        offset += size
    for j, col in enumerate(fit.sample_and_sampler_param_names):
        if col in SAMPLER_COLUMNS and col in names:
            out[SAMPLER_COLUMNS[col]] = np.ascontiguousarray(draws[j].T)
    return out


def _stan_model(name, data, seed):
    import stan

    code = (STAN_DIR / PROGRAM[name]).read_text()
    return stan.build(code, data=data, random_seed=int(seed))


def run_fit(name, X, y, cfg, seed, path, *, drop=None, logfile=None):
    """Sample with Stan and store the draws at ``path`` (``.npz``) and a summary (``.json``).

    Returns the summary dict. Cached: an existing ``path`` is not recomputed.
    """
    path = Path(path)
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        return load_json(meta)
    what = f"{name} fit" + ("" if drop is None else f" without observation {drop}")
    log(f"{what}: compiling/building the Stan program (PyStan, cached by httpstan)", logfile)
    t0 = time.perf_counter()
    sm = _stan_model(name, stan_data(name, X, y, drop), seed)
    t_build = time.perf_counter() - t0
    log(f"{what}: {cfg['chains']} chains x ({cfg['warmup']} warmup + {cfg['draws']} draws), adapt_delta "
        f"{cfg['adapt_delta']}, max_treedepth {cfg['max_depth']}", logfile)
    t0 = time.perf_counter()
    fit = sm.sample(num_chains=cfg["chains"], num_warmup=cfg["warmup"], num_samples=cfg["draws"],
                    delta=cfg["adapt_delta"], max_depth=cfg["max_depth"])
    t_sample = time.perf_counter() - t0
    arrays = _extract(fit, set(KEEP[name]) | {"log_lik"} | set(SAMPLER_COLUMNS))
    cross_check = _check_from_cmdstan(arrays, fit, name) if drop is None else "main fits only"
    summary = {
        "model": name,
        "drop": drop,
        "seed": int(seed),
        "settings": dict(cfg),
        "sampler": "Stan NUTS (diag_e, windowed adaptation) via PyStan 3.14 / httpstan",
        "build_s": t_build,
        "sampling_wall_s": t_sample,
        "elapsed_per_chain_s": _elapsed(fit),
        "from_cmdstan_check": cross_check,
        **diagnostics(arrays, name, cfg),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    save_json(meta, summary)
    log(f"{what}: done in {t_sample:.0f} s; max R-hat {summary['max_rhat']:.3f}, min ESS bulk "
        f"{summary['min_ess_bulk']:.0f}, divergences {summary['divergences']}", logfile)
    return summary


def _check_from_cmdstan(arrays, fit, name):
    """Read the same fit with the project's reader (``pl.from_cmdstan``) and compare the draws."""
    try:
        import ppl_loo as pl

        dt = pl.from_cmdstan(fit)
        post, ll = dt["posterior"], dt["log_likelihood"]
        diffs = {k: float(np.max(np.abs(post[k].values - arrays[k]))) for k in KEEP[name]}
        diffs["log_lik"] = float(np.max(np.abs(ll["log_lik"].values - arrays["log_lik"])))
        return {"max_abs_diff": max(diffs.values()), "per_variable": diffs}
    except Exception as exc:  # reported, not hidden: the draws above come from PyStan's own arrays
        return {"error": f"{type(exc).__name__}: {exc}"}


def _elapsed(fit):
    """Per-chain 'Elapsed Time' reported by Stan, where PyStan kept it."""
    import re

    out = []
    for s in fit.stan_outputs:
        text = s.decode(errors="ignore") if isinstance(s, bytes) else str(s)
        m = re.findall(r"([0-9.]+) seconds \(Total\)", text)
        out.append(float(m[-1]) if m else None)
    return out


def diagnostics(arrays, name, cfg):
    """R-hat (rank-normalized split), bulk/tail ESS (``arviz_stats``), divergences, tree depth."""
    import xarray as xr
    from arviz_stats import ess, rhat

    post = xr.Dataset({k: (("chain", "draw") + tuple(f"{k}_dim_{j}" for j in range(arrays[k].ndim - 2)), arrays[k])
                       for k in KEEP[name]})
    r = rhat(post)
    eb = ess(post, method="bulk")
    et = ess(post, method="tail")
    per_var = {v: {"max_rhat": float(r[v].max()), "min_ess_bulk": float(eb[v].min()),
                   "min_ess_tail": float(et[v].min())} for v in KEEP[name]}
    depth = arrays["tree_depth"]
    out = {
        "max_rhat": max(d["max_rhat"] for d in per_var.values()),
        "min_ess_bulk": min(d["min_ess_bulk"] for d in per_var.values()),
        "min_ess_tail": min(d["min_ess_tail"] for d in per_var.values()),
        "per_variable": per_var,
        "divergences": int(np.sum(arrays["diverging"])),
        "divergences_per_chain": [int(v) for v in np.sum(arrays["diverging"], axis=1)],
        "mean_tree_depth": float(np.mean(depth)),
        "treedepth_saturated_fraction": float(np.mean(depth >= cfg["max_depth"])),
        "mean_leapfrog_per_iteration": float(np.mean(arrays["n_steps"])),
        "step_size_per_chain": [float(v) for v in arrays["step_size"][:, 0]],
        "n_retained_draws": int(depth.size),
    }
    if name == "logistic":
        # the quantities the LOO depends on: the linear predictor (via beta) and the global scale
        out["rhat_tau"] = per_var["tau"]["max_rhat"]
    ll = arrays["log_lik"]
    xll = xr.Dataset({"log_lik": (("chain", "draw", "obs"), ll)})
    out["max_rhat_log_lik"] = float(rhat(xll)["log_lik"].max())
    out["min_ess_bulk_log_lik"] = float(ess(xll, method="bulk")["log_lik"].min())
    return out


def load_fit(path):
    """``(arrays dict, summary dict)`` of a stored fit."""
    path = Path(path)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, load_json(path.with_suffix(".json"))


def pooled_posterior(arrays, name):
    """Constrained variables with chains pooled: ``name -> (S, *dims)``, chain-major."""
    return {k: arrays[k].reshape((-1,) + arrays[k].shape[2:]) for k in KEEP[name]}
