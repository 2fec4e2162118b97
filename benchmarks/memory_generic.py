"""Peak memory and time of ``pl.loo(idata, model)`` on a PyMC model without closed-form structure.

The model is a regularized-horseshoe logistic regression (Piironen & Vehtari 2017) whose coefficients are a
deterministic of ``z``, ``lam``, ``tau`` and ``c2`` and whose logit is a ``pm.Deterministic``, so that
``ppl_loo`` detects no GLM structure and evaluates it through its full log density (the generic path of the
adaptive search). With ``n = 126`` observations and ``p = 312`` covariates it has ``d = 2 p + 3 = 627``
free parameters; at 4 x 1000 draws the ``(S, d, d)`` Jacobians of the gradient flows for all draws at once would
not fit in memory, so the search must work in blocks of draws (:mod:`ppl_loo.numerics.loo.memory`).
``p = 1500`` (``d = 3003``) is the "few thousand parameters" case, which must stay under 4 GB.

Draws: nutpie NUTS on the model itself (``--tune`` tuning steps, ``target_accept = 0.9``, seed 1), cached
under ``benchmarks/.cache/``. Each ``pl.loo`` runs in a fresh process (its peak resident memory is that
process's ``ru_maxrss``, read with ``os.wait4``, so a crashed run is measured too)::

    python benchmarks/memory_generic.py              # d = 627 and d = 3003 at 4 x 1000 draws
    python benchmarks/memory_generic.py --reduced    # d = 627 at 4 x 100 draws, fewer transformations
    python benchmarks/memory_generic.py --pythonpath /path/to/other/checkout   # the same runs on other code

Writes ``benchmarks/results/memory_generic.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# this folder holds benchmarks/pymc.py: keep it off the import path, so that ``import pymc`` is PyMC
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
CACHE = HERE / ".cache"
N_OBS, SEED, N_TRUE = 126, 20240607, 5
#: --reduced: the cheap transformations, and the gradient flows (left out at d = 627, with the warning)
REDUCED_TRANSFORMS = "pmm1,pmm2,mm_iter,pmm1_mix,kl,var,ll"


def horseshoe_data(n, p, seed=SEED):
    """``X`` ``(n, p)`` standard normal, ``y`` Bernoulli with 5 nonzero coefficients (fixed seed)."""
    rng = np.random.default_rng([seed, p])
    X = rng.standard_normal((n, p))
    beta = np.zeros(p)
    beta[:N_TRUE] = [2.0, -1.5, 1.0, -1.0, 0.8]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.2 + X @ beta)))).astype(np.int64)
    return X, y


def horseshoe_model(p, n=N_OBS):
    """The regularized-horseshoe logistic regression (``d = 2 p + 3``), without detectable GLM structure."""
    import pymc as pm
    import pytensor.tensor as pt

    X, y = horseshoe_data(n, p)
    tau0 = N_TRUE / (p - N_TRUE) / np.sqrt(n)
    with pm.Model() as model:
        z = pm.Normal("z", 0.0, 1.0, shape=p)
        lam = pm.HalfStudentT("lam", nu=1, sigma=1.0, shape=p)  # half-Cauchy
        tau = pm.HalfStudentT("tau", nu=1, sigma=tau0)
        c2 = pm.InverseGamma("c2", 2.0, 2.0)
        lam_tilde = pt.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
        beta = pm.Deterministic("beta", z * tau * lam_tilde)
        intercept = pm.Normal("intercept", 0.0, 5.0)
        eta = pm.Deterministic("eta", intercept + pt.dot(X, beta))
        pm.Bernoulli("y", logit_p=eta, observed=y)
    return model


def draws_file(p, chains, draws, tune):
    """The posterior draws (NetCDF), sampled with nutpie on first use."""
    path = CACHE / f"memory_generic_p{p}_{chains}x{draws}_t{tune}.nc"
    if not path.exists():
        import pymc as pm

        CACHE.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=2, nuts_sampler="nutpie", random_seed=1,
                          target_accept=0.9, progressbar=False, model=horseshoe_model(p))
        idata.to_netcdf(path)
        print(f"sampled p = {p}, {chains} x {draws} draws in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def child(p, path, transforms="all"):
    """One ``pl.loo`` run in this process; prints a JSON line."""
    import xarray as xr

    import ppl_loo as pl
    import ppl_loo.workflow.loo.loo as loo_module

    model = horseshoe_model(p)
    idata = xr.open_datatree(path)
    search_s = []
    run_search = loo_module.run_search

    def timed_search(*args, **kwargs):  # the adaptive search's share of the wall time
        t = time.perf_counter()
        out = run_search(*args, **kwargs)
        search_s.append(time.perf_counter() - t)
        return out

    loo_module.run_search = timed_search
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = pl.loo(idata, model, progressbar=False, search={"transforms": transforms})
    wall = time.perf_counter() - t0
    left = [str(w.message) for w in caught if "leaves out" in str(w.message)]
    counts = collections.Counter(np.asarray(res.transform).ravel().tolist())
    searched = np.asarray(res.searched).ravel()
    used = collections.Counter(np.asarray(res.transform).ravel()[searched].tolist())
    print("RESULT " + json.dumps({
        "ppl_loo": str(Path(pl.__file__).parent), "wall_s": wall, "search_wall_s": sum(search_s),
        "elpd": float(res.elpd), "se": float(res.se), "searched": int(searched.sum()),
        "doubtful": int(np.asarray(res.doubtful).sum()), "transform_counts": dict(counts),
        "transforms_of_searched": dict(used), "left_out_warning": left,
        "transforms": transforms if isinstance(transforms, str) else ",".join(transforms),
        "peak_rss_gb_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9}), flush=True)


def measure(p, path, pythonpath=None, limit_gb=16.0, transforms="all"):
    """Run :func:`child` in a fresh process; its peak RSS (``os.wait4``, GB of 10^9 bytes), wall time and result."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(p), str(path), "--limit-gb", str(limit_gb),
           "--transforms", transforms]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    row = {"peak_rss_gb": usage.ru_maxrss * 1024 / 1e9, "process_wall_s": wall,
           "exit_status": os.waitstatus_to_exitcode(status)}
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if lines:
        row.update(json.loads(lines[-1][len("RESULT "):]))
    else:
        row["error"] = "\n".join(out.strip().splitlines()[-3:])
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reduced", action="store_true",
                    help="d = 627 at 4 x 100 draws only, transforms=REDUCED_TRANSFORMS (about 2 minutes)")
    ap.add_argument("--p", type=int, nargs="*", help="covariates of the models to run (d = 2 p + 3)")
    ap.add_argument("--draws", type=int, help="draws per chain (4 chains)")
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--pythonpath", help="run pl.loo from this source tree instead (e.g. the code before a change)")
    ap.add_argument("--out", default=str(HERE / "results" / "memory_generic.json"))
    ap.add_argument("--label", default="this tree", help="the code measured (rows of other labels in --out are kept)")
    ap.add_argument("--limit-gb", type=float, default=16.0, help="address-space limit of each pl.loo process")
    ap.add_argument("--transforms", default=None, help="pl.loo's transforms= (comma-separated; default 'all', "
                    f"--reduced: {REDUCED_TRANSFORMS})")
    ap.add_argument("--child", nargs=2, metavar=("P", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        limit = int(args.limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        names = args.transforms or "all"
        return child(int(args.child[0]), args.child[1], names if names == "all" else tuple(names.split(",")))
    ps = args.p or ([312] if args.reduced else [312, 1500])
    draws = args.draws or (100 if args.reduced else 1000)
    tune = min(args.tune, 200) if args.reduced else args.tune
    transforms = args.transforms or (REDUCED_TRANSFORMS if args.reduced else "all")
    rows = []
    print(f"{'model':34s} {'d':>5s} {'S':>5s} {'peak GB':>8s} {'wall s':>7s} {'search s':>8s} {'searched':>8s}  "
          "transforms used")
    for p in ps:
        path = draws_file(p, 4, draws, tune)
        row = {"label": args.label, "model": f"horseshoe logistic (PyMC), p = {p}", "p": p, "d": 2 * p + 3,
               "S": 4 * draws, "chains": 4, "draws": draws, "tune": tune, "pythonpath": args.pythonpath,
               "transforms": transforms,
               **measure(p, path, args.pythonpath, args.limit_gb, transforms)}
        rows.append(row)
        used = row.get("transforms_of_searched", row.get("error", ""))
        print(f"{row['model']:34s} {row['d']:5d} {row['S']:5d} {row['peak_rss_gb']:8.2f} "
              f"{row.get('wall_s', row['process_wall_s']):7.1f} {row.get('search_wall_s', float('nan')):8.1f} "
              f"{row.get('searched', '-')!s:>8s}  {used}", flush=True)
        for text in row.get("left_out_warning", []):
            print(f"    warning: {text}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    key = lambda r: (r.get("label"), r.get("p"), r.get("S"), r.get("transforms"))  # noqa: E731
    new = {key(r) for r in rows}
    kept = json.loads(out.read_text())["rows"] if out.exists() else []
    rows = [r for r in kept if key(r) not in new] + rows
    out.write_text(json.dumps({"rows": rows, "machine": os.uname().machine, "cpus": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
