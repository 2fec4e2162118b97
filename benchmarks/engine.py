"""Engine benchmark: logistic regression at ovarian size, every transformation over the full grid.

n = 54 observations, p = 1536 genes + intercept (d = 1537 coefficients), S = 1000 draws from NUTS,
*all* observations flagged (k_threshold = -inf), over hbar = 4^-r, r = 0..10, with two sets of
transformations: the papers' eight (PMM1, PMM2, KL, Var, LL, MM1, MM2, MM3) and ``"all"`` (those plus
this project's iterated moment matching and Newton proposals). Prints a table and writes
``benchmarks/results/engine.json``.

    .venv/bin/python benchmarks/engine.py [--prior normal|horseshoe] [--draws 1000] [--set papers|all]

Wall time is measured for the first call (JIT compilation included: what a user waits for) and
for a second call on the same shapes (compiled). Peak memory is the process's maximum resident
set size (``ru_maxrss``), which includes the Python/JAX runtime and the draws.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)

HERE = Path(__file__).resolve().parent


def _draws(prior, n_draws, seed):
    """NUTS draws of the ovarian logistic regression, cached in benchmarks/.cache."""
    from ppl_loo.datasets import load_ovarian
    from ppl_loo.models import LogisticRegression
    from ppl_loo.sampling import sample_nuts

    X, y = load_ovarian()
    model = LogisticRegression(X, y, prior=prior)
    cache = HERE / ".cache" / f"ovarian_{prior}_{n_draws}_{seed}.npz"
    import xarray as xr

    if cache.exists():
        z = np.load(cache)
        post = xr.Dataset({k: (("chain", "draw", *([f"{k}_dim"] if z[k].ndim == 3 else [])), z[k]) for k in z.files})
        return model, xr.DataTree.from_dict({"posterior": post}), 0.0
    kw = {"numpyro_model": model.numpyro_model()} if prior == "horseshoe" else {}
    t0 = time.perf_counter()
    data = sample_nuts(model, num_chains=2, num_warmup=500, num_samples=n_draws // 2, random_seed=seed, **kw)
    t_fit = time.perf_counter() - t0
    post = data["posterior"].to_dataset()
    cache.parent.mkdir(exist_ok=True)
    np.savez_compressed(cache, **{k: np.asarray(post[k].values) for k in post.data_vars})
    return model, data, t_fit


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--prior", default="normal", choices=["normal", "horseshoe"])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch-size", default="auto", help="observations per vectorized call (int or 'auto')")
    ap.add_argument("--set", default="both", choices=["papers", "all", "both"])
    ap.add_argument("--out", default=str(HERE / "results" / "engine.json"))
    args = ap.parse_args(argv)
    if args.batch_size != "auto":
        args.batch_size = int(args.batch_size)


    import ppl_loo as pl

    model, data, t_fit = _draws(args.prior, args.draws, args.seed)
    sets = {"papers": ["pmm1", "pmm2", "kl", "var", "ll", "mm1", "mm2", "mm3"], "all": list(pl.DEFAULT_TRANSFORMS)}
    names = list(sets) if args.set == "both" else [args.set]
    # the engine alone: pl.loo's second opinions (a mixture MCMC run, SMC; on by default) are not the
    # engine and are timed by benchmarks/second_opinions.py
    results = [run_one(pl, model, data, t_fit, args, name, sets[name],
                       {"second_opinions": {"mixture": False, "smc": False}})
               for name in names]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")
    return 0


def run_one(pl, model, data, t_fit, args, set_name, transforms, loo_kwargs=None):
    """Two ``pl.loo`` calls on the same shapes (the first compiles); ``loo_kwargs``: more arguments of ``pl.loo``
    (``benchmarks/gpu.py`` turns the second opinions off, ``second_opinions={"mixture": False, "smc": False}``, to time
    the engine alone)."""
    import jax

    rows = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label in ("first call (JIT compile included)", "second call (compiled)"):
            t0 = time.perf_counter()
            res = pl.loo(data, model, k_threshold=-np.inf, progressbar=False,
                         search={"transforms": transforms, "batch_size": args.batch_size}, **(loo_kwargs or {}))
            rows[label] = time.perf_counter() - t0
    n_cand = len(res.candidates["labels"])
    n = res.n_data_points
    evals = n * n_cand
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB
    from ppl_loo.numerics.psis import khat_threshold

    thr = khat_threshold(res.n_samples)
    k_psis = res.pareto_k_psis.values
    summary = {
        "transform_set": set_name,
        "prior": args.prior,
        "n": n,
        "d_adapted": int(len(model.adapt_index)) if model.adapt_index is not None else model.dim,
        "d_total": model.dim,
        "S": res.n_samples,
        "transforms": transforms,
        "loo_kwargs": dict(loo_kwargs or {}),
        "candidates_per_observation": n_cand,
        "batch_size": args.batch_size,
        "wall_first_s": rows["first call (JIT compile included)"],
        "wall_second_s": rows["second call (compiled)"],
        "us_per_obs_transform_hbar": rows["second call (compiled)"] / evals * 1e6,
        "peak_rss_gb": peak_gb,
        "nuts_s": t_fit,
        "above_threshold_psis": int(np.sum(k_psis > thr)),
        "above_threshold_adapted": int(np.sum(res.pareto_k.values > thr)),
        "elpd": float(res.elpd),
        "elpd_i": [float(v) for v in np.ravel(res.elpd_i.values)],
        "jax_backend": jax.default_backend(),
        "load_average_1min_at_end": os.getloadavg()[0],
        "cpu_count": os.cpu_count(),
    }
    print(f"\n[{set_name}: {', '.join(transforms)}]")
    print(f"ovarian logistic regression ({args.prior} prior): n={n}, d adapted={summary['d_adapted']} "
          f"(of {model.dim}), S={res.n_samples}, {n_cand} (transform, hbar) candidates per observation, "
          f"all {n} observations adapted")
    print(f"{'measure':<40} {'value':>12}")
    print(f"{'wall, first call (JIT included) [s]':<40} {summary['wall_first_s']:>12.2f}")
    print(f"{'wall, second call (compiled) [s]':<40} {summary['wall_second_s']:>12.2f}")
    print(f"{'per (obs, transform, hbar) [us]':<40} {summary['us_per_obs_transform_hbar']:>12.1f}")
    print(f"{'peak resident memory [GB]':<40} {peak_gb:>12.2f}")
    print(f"{'k > threshold: plain PSIS':<40} {summary['above_threshold_psis']:>12d}")
    print(f"{'k > threshold: adaptive':<40} {summary['above_threshold_adapted']:>12d}")
    return summary


if __name__ == "__main__":
    sys.exit(main())
