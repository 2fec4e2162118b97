"""Reproduce Table 1 of the gradient-flow LOO paper (001) on the ovarian data, beside every peer (issue 5).

One command regenerates everything (MCMC fits and refits with Stan, ADVI fits, Table 1 over the
resamplings, the peers, the refit comparison, ROC/PR plots, the Markdown report and the JSON)::

    .venv/bin/python benchmarks/ovarian/run.py             # full experiment (hours: see ovarian_common.FULL)
    .venv/bin/python benchmarks/ovarian/run.py --reduced   # CI size (minutes), into .../ovarian_reduced

Stages can be run on their own (``--stage mcmc|table1|peers|refits|roc|report``); each caches its
output under ``benchmarks/.cache/ovarian/<mode>/`` so a later stage or a re-run reuses it.
Results: ``benchmarks/results/ovarian/`` (``ovarian.json``, ``ovarian.md``, ``*.png``).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
import numpy as np  # noqa: E402
import ovarian_common as common  # noqa: E402
from ovarian_common import MODELS, cache_dir, load_data, log, settings  # noqa: E402

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)

STAGES = ("mcmc", "advi", "table1", "peers", "refits", "roc", "report")
SEEDS = {"logistic": 1, "relu": 2}


def fit_path(cdir, name):
    return cdir / f"{name}_mcmc.npz"


def refit_path(cdir, name, i):
    return cdir / "refits" / f"{name}_without_{i:02d}.npz"


def control_path(cdir, name):
    return cdir / "refits" / f"{name}_control_full_data.npz"


def refit_targets(cdir, name, n):
    """The ``n`` observations with the highest plain-PSIS k on all retained draws of the main fit
    (``arviz_stats.loo`` on Stan's ``log_lik``)."""
    import arviz_stats as azs
    import xarray as xr
    from fits import KEEP, load_fit

    arrays, _ = load_fit(fit_path(cdir, name))
    post = xr.Dataset({k: (("chain", "draw") + tuple(f"{k}_dim_{j}" for j in range(arrays[k].ndim - 2)), arrays[k])
                       for k in KEEP[name]})  # for arviz_stats' r_eff
    dt = xr.DataTree.from_dict({"posterior": post,
                                "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs_id"), arrays["log_lik"])})})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = np.asarray(azs.loo(dt, pointwise=True).pareto_k)
    return [int(i) for i in np.argsort(-k)[:n]], k


def stage_mcmc(cfg, cdir, logfile, models=MODELS):
    """Main fits, then refits without each of the top-k observations, model by model."""
    from fits import run_fit

    X, y = load_data()
    out = {}
    for name in models:
        main = run_fit(name, X, y, cfg["mcmc"][name], SEEDS[name], fit_path(cdir, name), logfile=logfile)
        # control: the refit settings on the full data; its in-sample lpd_i must match the main fit's
        # within Monte Carlo error, else a refit's difference from the LOO estimates could come from
        # the shorter refit chains rather than from the deleted observation
        control = (run_fit(name, X, y, cfg["refit"][name], 99, control_path(cdir, name), logfile=logfile)
                   if cfg.get("control_fit", True) else None)
        targets, k_all = refit_targets(cdir, name, cfg["n_refits"])
        log(f"{name}: refit targets (highest plain-PSIS k on all draws): {targets}", logfile)
        refits = {}
        for i in targets:
            refits[i] = run_fit(name, X, y, cfg["refit"][name], 100 + i, refit_path(cdir, name, i), drop=i,
                                logfile=logfile)
        out[name] = {"main": main, "control": control, "refit_targets": targets, "k_psis_all_draws": k_all,
                     "refits": refits}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reduced", action="store_true", help="CI-size run (see ovarian_common.REDUCED)")
    ap.add_argument("--stage", choices=STAGES + ("all",), default="all")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of logistic,relu")
    ap.add_argument("--cache", default=str(common.DEFAULT_CACHE))
    ap.add_argument("--out", default=None, help="results directory (default benchmarks/results/ovarian[_reduced])")
    args = ap.parse_args(argv)
    cfg = settings(args.reduced)
    cdir = cache_dir(args.cache, cfg["mode"])
    out = Path(args.out) if args.out else common.DEFAULT_OUT.with_name("ovarian" + ("_reduced" if args.reduced else ""))
    logfile = cdir / "progress.log"
    models = tuple(m for m in args.models.split(",") if m)
    stages = STAGES if args.stage == "all" else (args.stage,)
    log(f"ovarian benchmark, mode {cfg['mode']}, stages {stages}, models {models}, cache {cdir}, out {out}", logfile)
    for st in stages:
        if st == "mcmc":
            stage_mcmc(cfg, cdir, logfile, models)
        else:
            import importlib

            mod = importlib.import_module(f"stage_{st}")
            mod.run(cfg, cdir, out, logfile, models)
    log("done", logfile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
