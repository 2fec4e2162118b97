"""What a user waits for on small models: ``pl.loo`` and ``ppl-loo loo``, compilation against computation.

    .venv/bin/python benchmarks/latency.py            # five models, 4 x 1000 draws (eight schools: its 4 x 100)
    .venv/bin/python benchmarks/latency.py --reduced  # the normal-outlier model, 4 x 500 (CI)
    .venv/bin/python benchmarks/latency.py --summarize benchmarks/results/latency.json   # its table again

Prints a table and writes ``benchmarks/results/latency.json`` (``--reduced``: ``latency_reduced.json``; ``--out``
elsewhere). For each model the draws are made once (setup: the model's own sampler, timed: the fit), then
``pl.loo(data, model, progressbar=False, random_seed=SEED)`` (defaults otherwise) runs in fresh Python processes:

- **cold**: XLA's persistent compilation cache (``PPL_LOO_CACHE_DIR``) an empty folder; the Stan model's own
  library compiled (the one the user sampled with: ``PPL_LOO_STAN_CACHE`` is a benchmark-private folder holding
  only that library), the Stan programs ``pl.loo`` derives from it not compiled;
- **compiled**: a second call in the cold process (every program compiled): compilation is estimated as cold
  minus compiled, computation as compiled;
- **warm**: a second fresh process with the same, now filled, cache folders (what the next session pays).

For the Stan programs the command line runs as a subprocess, cold and warm the same way, each with cache
folders of its own: ``python -m ppl_loo.cli loo MODEL.stan --data DATA CSV... --json --quiet --seed SEED`` (its
wall time includes starting Python and the imports). Beside them, on the same draws and in the cold process
after ``pl.loo``: ``arviz_stats.loo`` and ``arviz_stats.loo_moment_match`` (split; the model's log density and
pointwise log-likelihood in the unconstrained space, taken from the model ppl_loo builds, ``pl.as_model``, and
compiled before the timed call). The headline is ``pl.loo / fit``: the LOO's wall time over the sampling's.

Models: (1) a normal model with one gross outlier in PyMC (``pm.sample``); (2) a linear regression on R's
``stackloss`` in Stan; (3) the negative-binomial regression of ``benchmarks/stan_search.py`` in Stan (both
sampled with Stan's NUTS in-process, the sampler of ``ppl-loo sample``); (4) the CmdStan eight-schools output of
``tests/data/cmdstan-eight-schools`` (the non-centred program the files were written by,
``stan_models/eight_schools_noncentered.stan``; its fit time is the sum of the chains' recorded elapsed times);
(5) the ovarian logistic regression (``pl.models.LogisticRegression``, normal priors, NumPyro's NUTS through
``ppl_loo.sampling.sample_nuts``) on the full data of ``$PPL_LOO_DATA/ovarian`` (default
``/work/shared/data/ovarian``) where present, else on the 8-column excerpt in ``tests/data/ovarian``. The exact LOO
of the normal and negative-binomial models (quadrature) is recorded beside their estimates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# this folder holds a pymc.py: it must not shadow PyMC (a script's folder is the first entry of sys.path)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE / "truth"))

from methods import Upars  # noqa: E402 - the truth suite's arviz_stats moment-matching interface


def _stan_search():
    """``benchmarks/stan_search.py`` as a module (by path: this folder is not on ``sys.path``), for its
    negative-binomial program and data."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("stan_search", HERE / "stan_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SEARCH = _stan_search()
NB, nb_data = _SEARCH.NB, _SEARCH.data

SEED = 1
#: R's ``stackloss`` (Brownlee 1965; public domain): air flow, water temperature, acid concentration, stack loss
STACKLOSS = (
    (80, 27, 89, 42), (80, 27, 88, 37), (75, 25, 90, 37), (62, 24, 87, 28), (62, 22, 87, 18), (62, 23, 87, 18),
    (62, 24, 93, 19), (62, 24, 93, 20), (58, 23, 87, 15), (58, 18, 80, 14), (58, 18, 89, 14), (58, 17, 88, 13),
    (58, 18, 82, 11), (58, 19, 93, 12), (50, 18, 89, 8), (50, 18, 86, 7), (50, 19, 72, 8), (50, 19, 79, 8),
    (50, 20, 80, 9), (56, 20, 82, 15), (70, 20, 91, 15),
)
STACKLOSS_STAN = """
data { int<lower=0> N; int<lower=0> K; matrix[N, K] x; vector[N] y; }
transformed data {
  matrix[N, K] z;
  for (k in 1:K) z[:, k] = (x[:, k] - mean(x[:, k])) / sd(x[:, k]);
}
parameters { real alpha; vector[K] beta; real<lower=0> sigma; }
model {
  alpha ~ normal(0, 50); beta ~ normal(0, 20); sigma ~ normal(0, 20);
  y ~ normal(alpha + z * beta, sigma);
}
generated quantities {
  vector[N] log_lik;
  for (n in 1:N) log_lik[n] = normal_lpdf(y[n] | alpha + z[n] * beta, sigma);
}
"""
EIGHT_DIR = ROOT / "tests" / "data" / "cmdstan-eight-schools"
EIGHT_STAN = ROOT / "stan_models" / "eight_schools_noncentered.stan"
OVARIAN_FULL = Path(os.environ.get("PPL_LOO_DATA", "/work/shared/data")) / "ovarian"
OVARIAN_EXCERPT = ROOT / "tests" / "data" / "ovarian"

MODELS = ("normal_outlier", "stackloss", "neg_binomial", "eight_schools", "ovarian")
REDUCED_MODELS = ("normal_outlier",)
STAN_MODELS = ("stackloss", "neg_binomial", "eight_schools")


# ----------------------------------------------------------------------------------------------------- the models


def normal_outlier_data(n=30, seed=7):
    """30 observations of N(0, 1) with the first replaced by a gross outlier (12)."""
    y = np.random.default_rng(seed).normal(0.0, 1.0, size=n)
    y[0] = 12.0
    return y


def normal_outlier_model(y):
    """``y_i ~ N(mu, sigma)``, ``mu ~ N(0, 10)``, ``sigma ~ HalfNormal(5)`` in PyMC."""
    import pymc as pm

    with pm.Model(coords={"obs_id": np.arange(len(y))}) as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("y", mu, sigma, observed=y, dims="obs_id")
    return model


def exact_normal_loo(y, points=801):
    """Exact ``elpd_i`` of the normal-outlier model by quadrature over ``(mu, log sigma)``: ``log p(y) - log
    p(y_-i)`` on a grid wide enough for the posterior and every LOO posterior."""
    from scipy.special import logsumexp
    from scipy.stats import halfnorm, norm

    y = np.asarray(y, float)
    mu = np.linspace(-8.0, 12.0, points)
    log_s = np.linspace(np.log(0.1), np.log(30.0), points)
    m, ls = np.meshgrid(mu, log_s, indexing="ij")
    s = np.exp(ls)
    prior = norm.logpdf(m, 0, 10) + halfnorm.logpdf(s, scale=5) + ls  # + log-Jacobian of sigma = exp(log sigma)
    ll = [norm.logpdf(v, m, s) for v in y]
    total = prior + sum(ll)
    lz = logsumexp(total)
    return np.array([lz - logsumexp(total - lli) for lli in ll])


def exact_nb_loo(points=161, width=16.0):
    """Exact ``elpd_i`` of the negative-binomial program on its data by quadrature: ``log p(y) - log p(y_-i)`` on a
    grid of the mode +- ``width`` Laplace sds per axis of ``(alpha, beta, log phi)``."""
    from scipy.optimize import minimize
    from scipy.special import gammaln, logsumexp
    from scipy.stats import gamma, norm

    d = nb_data()
    x, off, y = np.asarray(d["x"]), np.log(np.asarray(d["expo"])), np.asarray(d["y"], float)

    def log_prior(a, b, lphi):  # phi ~ gamma(2, rate 0.5), with the log-Jacobian of phi = exp(log phi)
        return norm.logpdf(a, 0, 5) + norm.logpdf(b, 0, 2) + gamma.logpdf(np.exp(lphi), 2, scale=2.0) + lphi

    def ll(a, b, lphi, i):  # neg_binomial_2_log_lpmf(y_i | a + b x_i + log expo_i, exp(lphi))
        eta = a + b * x[i] + off[i]
        log_sum = np.logaddexp(eta, lphi)
        return (gammaln(y[i] + np.exp(lphi)) - gammaln(np.exp(lphi)) - gammaln(y[i] + 1)
                + np.exp(lphi) * (lphi - log_sum) + y[i] * (eta - log_sum))

    def neg(t):
        a, b, lphi = (np.asarray(v) for v in t)
        return -(log_prior(a, b, lphi) + sum(ll(a, b, lphi, i) for i in range(len(y))))

    fit = minimize(neg, [1.0, 0.5, 1.0], method="BFGS")
    sd = np.sqrt(np.diag(fit.hess_inv))
    grid = np.meshgrid(*(np.linspace(m - width * s, m + width * s, points) for m, s in zip(fit.x, sd)),
                       indexing="ij")
    total = log_prior(*grid)
    for i in range(len(y)):
        total += ll(*grid, i)
    lz = logsumexp(total)
    return np.array([lz - logsumexp(total - ll(*grid, i)) for i in range(len(y))])


def stackloss_data():
    x = np.asarray(STACKLOSS, float)
    return {"N": len(x), "K": 3, "x": x[:, :3].tolist(), "y": x[:, 3].tolist()}


def ovarian_data():
    """The standardized ovarian data (full where present, else the 8-column excerpt) and where it came from."""
    from ppl_loo.datasets import standardize

    full = OVARIAN_FULL / "ovarian_x.csv"
    if full.exists():
        x_path, y_path = full, OVARIAN_FULL / "ovarian_y.csv"
    else:
        x_path, y_path = OVARIAN_EXCERPT / "ovarian_x_columns_1-8.csv", OVARIAN_EXCERPT / "ovarian_y.csv"
    X = standardize(np.loadtxt(x_path, delimiter=","))
    y = np.loadtxt(y_path, delimiter=",").astype(np.int64).ravel()
    return X, y, str(x_path)


def ovarian_model(X, y):
    from ppl_loo.models import LogisticRegression

    return LogisticRegression(X, y, prior="normal")  # beta0 ~ N(0, 5^2), beta_j ~ N(0, 1)


def _stan_code(name):
    return {"stackloss": STACKLOSS_STAN, "neg_binomial": NB}.get(name) or EIGHT_STAN.read_text()


# ------------------------------------------------------------------------------------------------------ setup


def _sampler_library(code, data, sampler=True):
    """Build (or find) the program's library in the user's Stan cache and return its cache folder."""
    import ppl_loo as pl
    from ppl_loo.stan_bridge.compile import SAMPLER_FLAG, cached_build

    t0 = time.perf_counter()
    sm = pl.StanModel(code, data, sampler=sampler)
    built = time.perf_counter() - t0
    found = cached_build(code, (SAMPLER_FLAG,) if sampler else (), accept_sampler=not sampler)
    return sm, found.directory, built


def _private_stan_cache(library_dir, dest):
    """A Stan cache folder holding the one library (mode 0700, as the bridge asks of its cache)."""
    dest = Path(dest)
    dest.mkdir(parents=True, mode=0o700)
    os.chmod(dest, 0o700)
    shutil.copytree(library_dir, dest / Path(library_dir).name)
    return dest


def csv_elapsed(paths):
    """The chains' recorded total elapsed seconds (CmdStan's ``Elapsed Time: ... (Total)`` comments)."""
    out = []
    for p in paths:
        found = re.findall(r"#\s+([0-9.eE+-]+) seconds \(Total\)", Path(p).read_text())
        out.append(float(found[-1]) if found else float("nan"))
    return out


def setup(name, work, draws):
    """The draws of one model (its own sampler, timed) in ``work``; returns the model's row of facts."""
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    work.mkdir(parents=True, exist_ok=True)
    row = {"model": name, "draws_per_chain": draws, "chains": 4}
    if name == "normal_outlier":
        import pymc as pm

        y = normal_outlier_data()
        with normal_outlier_model(y):
            t0 = time.perf_counter()
            tree = pm.sample(draws=draws, tune=draws, chains=4, random_seed=SEED, progressbar=False,
                             idata_kwargs={"log_likelihood": True}, compute_convergence_checks=False)
            row["fit_s"] = time.perf_counter() - t0
        attrs = tree["posterior"].attrs
        row["fit"] = (f"pm.sample wall (its default sampler, here {attrs.get('inference_library', 'PyMC')}; model "
                      f"compilation included), 4 chains x ({draws} tune + {draws} draws)")
        if "sampling_time" in attrs:
            row["sampler_recorded_s"] = float(attrs["sampling_time"])
        tree.to_netcdf(work / "draws.nc")
        row.update(n=len(y), dim=2)
    elif name in ("stackloss", "neg_binomial"):
        d = stackloss_data() if name == "stackloss" else nb_data()
        code = _stan_code(name)
        (work / f"{name}.stan").write_text(code)
        (work / "data.json").write_text(json.dumps(d))
        sm, lib, row["library_build_s"] = _sampler_library(code, d)
        _private_stan_cache(lib, work / "stan_pristine")
        t0 = time.perf_counter()
        sample_cmdstan_csv(sm, str(work / "csv"), chains=4, random_seed=SEED, num_warmup=draws, num_samples=draws,
                           data_file=str(work / "data.json"))
        row["fit_s"] = time.perf_counter() - t0
        row["fit"] = f"Stan's NUTS in-process (ppl-loo sample's sampler), 4 chains x ({draws} warmup + {draws} draws)"
        row.update(n=d["N"], dim=sm.dim, stan_file=str(work / f"{name}.stan"), data_file=str(work / "data.json"),
                   csv=sorted(str(p) for p in (work / "csv").glob("*.csv")))
    elif name == "eight_schools":
        from ppl_loo.io import read_rdump

        d = read_rdump(EIGHT_DIR / "eight_schools.data.R")
        # the user ran CmdStan; the bridge's library of the program is taken as compiled, as for the others
        sm, lib, row["library_build_s"] = _sampler_library(EIGHT_STAN.read_text(), d, sampler=False)
        _private_stan_cache(lib, work / "stan_pristine")
        csv = [str(EIGHT_DIR / f"output_{c}.csv") for c in range(1, 5)]
        elapsed = csv_elapsed(csv)
        row["fit_s"] = float(np.sum(elapsed))
        row["fit"] = (f"CmdStan 2.18, 4 chains x (1000 warmup + 100 draws): the sum of the chains' recorded elapsed "
                      f"times ({', '.join(f'{e:.3f}' for e in elapsed)} s); one chain at a time")
        row.update(draws_per_chain=100, n=int(d["J"]), dim=sm.dim, stan_file=str(EIGHT_STAN),
                   data_file=str(EIGHT_DIR / "eight_schools.data.R"), csv=csv)
    elif name == "ovarian":
        from ppl_loo.sampling import sample_nuts

        X, y, source = ovarian_data()
        lr = ovarian_model(X, y)
        t0 = time.perf_counter()
        tree = sample_nuts(lr, num_chains=4, num_warmup=draws, num_samples=draws, random_seed=SEED)
        row["fit_s"] = time.perf_counter() - t0
        row["fit"] = (f"ppl_loo.sampling.sample_nuts (NumPyro's NUTS), 4 chains x ({draws} warmup + {draws} draws), "
                      "compilation included")
        tree.to_netcdf(work / "draws.nc")
        row.update(n=int(len(y)), dim=int(X.shape[1] + 1), data=source)
    else:
        raise ValueError(f"unknown model {name!r}; choose from {MODELS}")
    return row


# ------------------------------------------------------------------------------------------------------ worker


def _load(name, row):
    """The draws (DataTree) and the model object of ``name``, as the user has them."""
    import xarray as xr

    import ppl_loo as pl

    if name == "normal_outlier":
        tree = xr.open_datatree(Path(row["work"]) / "draws.nc").load()
        return tree, normal_outlier_model(normal_outlier_data())
    if name == "ovarian":
        tree = xr.open_datatree(Path(row["work"]) / "draws.nc").load()
        X, y, _ = ovarian_data()
        return tree, ovarian_model(X, y)
    if name == "eight_schools":
        from ppl_loo.io import read_rdump

        data = read_rdump(row["data_file"])
    else:
        data = json.loads(Path(row["data_file"]).read_text())
    tree = pl.from_cmdstan(row["csv"], log_likelihood="log_lik")
    return tree, pl.StanModel(row["stan_file"], data)


def _summary(res, wall):
    from ppl_loo.workflow.loo.categories import category_counts, observation_categories

    k_psis = np.asarray(res.pareto_k_psis).ravel()
    return {"wall_s": wall, "elpd": float(res.elpd), "se": float(res.se), "p": float(res.p),
            "elpd_i": [float(v) for v in np.asarray(res.elpd_i).ravel()],
            "max_k_psis": float(np.max(k_psis)), "n_flagged_psis": int(np.sum(k_psis > float(res.good_k))),
            "categories": {k: int(v) for k, v in category_counts(observation_categories(res)).items()},
            "transform": [str(t) for t in np.asarray(res.transform).ravel()]}


def _arviz(tree, model_obj):
    """``arviz_stats.loo`` and ``arviz_stats.loo_moment_match`` on the draws; ``mm`` says why where it cannot run."""
    import arviz_stats as azs
    import xarray as xr

    import ppl_loo as pl

    var = next(iter(tree["log_likelihood"].data_vars))
    out = {}
    t0 = time.perf_counter()
    plain = azs.loo(tree, pointwise=True, var_name=var)
    out["loo"] = {"wall_s": time.perf_counter() - t0, "elpd": float(plain.elpd), "se": float(plain.se),
                  "elpd_i": [float(v) for v in np.asarray(plain.elpd_i).ravel()]}
    try:
        m = pl.as_model(model_obj, data=tree)
        theta = np.asarray(m.unconstrain(tree["posterior"].to_dataset()))
        nc, nd = tree["posterior"].sizes["chain"], tree["posterior"].sizes["draw"]
        upars = xr.DataArray(theta.reshape(nc, nd, -1), dims=("chain", "draw", "upars"))
        fns = Upars(m)
        fns.log_prob_upars(upars)  # compiled before the timed call
        fns.log_lik_i_upars(upars, 0)
        cov = theta.shape[0] >= 10 * theta.shape[1]
        t0 = time.perf_counter()
        mm = azs.loo_moment_match(tree, plain, log_prob_upars_fn=fns.log_prob_upars,
                                  log_lik_i_upars_fn=fns.log_lik_i_upars, upars=upars, var_name=var, split=True,
                                  cov=cov)
        wall = time.perf_counter() - t0
        k = np.asarray(mm.pareto_k).ravel()
        out["moment_match"] = {"wall_s": wall, "elpd": float(mm.elpd), "se": float(mm.se), "cov": bool(cov),
                               "elpd_i": [float(v) for v in np.asarray(mm.elpd_i).ravel()],
                               "n_above_k_threshold": int(np.sum(k > float(mm.good_k))),
                               "n_worked": int(np.sum(np.asarray(plain.pareto_k).ravel() > float(plain.good_k)))}
    except Exception as err:  # noqa: BLE001 - recorded in the row: why moment matching did not run on this model
        out["moment_match"] = {"error": f"{type(err).__name__}: {err}"}
    return out


def worker(args):
    """One fresh process: ``pl.loo`` once (warm) or twice (cold, then compiled) and, cold, the arviz_stats peers."""
    t0 = time.perf_counter()
    import ppl_loo as pl

    if args.model == "normal_outlier":
        import pymc  # noqa: F401  (the user's own import, outside ppl_loo's time)
    row = json.loads(Path(args.row).read_text())
    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tree, model_obj = _load(args.model, row)
    load_s = time.perf_counter() - t0
    out = {"import_s": import_s, "load_s": load_s, "calls": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2 if args.mode == "cold" else 1):
            t0 = time.perf_counter()
            res = pl.loo(tree, model_obj, progressbar=False, random_seed=SEED)
            out["calls"].append(_summary(res, time.perf_counter() - t0))
        if args.mode == "cold" and args.arviz:
            out["arviz"] = _arviz(tree, model_obj)
    Path(args.result).write_text(json.dumps(out))
    return 0


# ------------------------------------------------------------------------------------------------ orchestration


def _folders(work, label):
    """Fresh cache folders for one interface: an empty XLA cache and a copy of the pristine Stan cache."""
    base = work / label
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    (base / "xla").mkdir()
    if (work / "stan_pristine").exists():
        shutil.copytree(work / "stan_pristine", base / "stan")
        os.chmod(base / "stan", 0o700)
    else:
        (base / "stan").mkdir(mode=0o700)
    return {"PPL_LOO_CACHE_DIR": str(base / "xla"), "PPL_LOO_STAN_CACHE": str(base / "stan")}


def _count(env):
    """Files in the XLA cache and programs in the Stan cache."""
    xla = len(os.listdir(env["PPL_LOO_CACHE_DIR"]))
    stan = len([p for p in os.listdir(env["PPL_LOO_STAN_CACHE"]) if not p.startswith(".")])
    return {"xla_cache_files": xla, "stan_programs": stan}


def run_python(name, row, env, mode, arviz):
    rpath = Path(row["work"]) / f"python_{mode}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--model", name, "--mode", mode,
           "--row", str(Path(row["work"]) / "row.json"), "--result", str(rpath)] + (["--arviz"] if arviz else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{name} {mode}: the worker failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    out = json.loads(rpath.read_text())
    out["process_wall_s"] = wall
    out.update(_count(env))
    return out


def run_cli(name, row, env):
    cmd = [sys.executable, "-m", "ppl_loo.cli", "loo", row["stan_file"], "--data", row["data_file"], *row["csv"],
           "--json", "--quiet", "--seed", str(SEED)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: some observations doubtful, results computed
        raise RuntimeError(f"{name}: ppl-loo loo exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    doc = json.loads(proc.stdout)
    return {"wall_s": wall, "exit_status": proc.returncode, "elpd": doc["elpd_loo"], "se": doc["se"],
            "elpd_i": doc["elpd_i"], **_count(env)}


def measure(name, row, cli):
    work = Path(row["work"])
    (work / "row.json").write_text(json.dumps(row))
    env = _folders(work, "python")
    before = _count(env)
    row["python"] = {"cold": run_python(name, row, env, "cold", arviz=True)}
    row["python"]["warm"] = run_python(name, row, env, "warm", arviz=False)
    row["python"]["stan_programs_before"] = before["stan_programs"]
    if cli and name in STAN_MODELS:
        env = _folders(work, "cli")
        row["cli"] = {"cold": run_cli(name, row, env)}
        row["cli"]["warm"] = run_cli(name, row, env)
    derive(row)
    return row


def derive(row):
    """The figures of the table from the measurements, and the identities they must satisfy."""
    cold, warm = row["python"]["cold"], row["python"]["warm"]
    first, second, again = cold["calls"][0], cold["calls"][1], warm["calls"][0]
    s = {"fit_s": row["fit_s"], "cold_s": first["wall_s"], "compiled_s": second["wall_s"], "warm_s": again["wall_s"],
         "compile_s": first["wall_s"] - second["wall_s"], "cache_saves_s": first["wall_s"] - again["wall_s"],
         "cold_over_fit": first["wall_s"] / row["fit_s"], "warm_over_fit": again["wall_s"] / row["fit_s"],
         "compiled_over_fit": second["wall_s"] / row["fit_s"]}
    elpd = [first["elpd"], second["elpd"], again["elpd"]]
    elpd_i = np.array([first["elpd_i"], second["elpd_i"], again["elpd_i"]])
    s["max_abs_diff_elpd_across_modes"] = float(np.max(elpd) - np.min(elpd))
    s["max_abs_diff_elpd_i_across_modes"] = float(np.max(np.ptp(elpd_i, axis=0)))
    if "cli" in row:
        s["cli_cold_s"], s["cli_warm_s"] = row["cli"]["cold"]["wall_s"], row["cli"]["warm"]["wall_s"]
        s["max_abs_diff_elpd_cli"] = float(max(abs(row["cli"][m]["elpd"] - first["elpd"]) for m in ("cold", "warm")))
    peers = cold.get("arviz", {})
    if "loo" in peers:
        s["arviz_loo_s"] = peers["loo"]["wall_s"]
        s["elpd_minus_arviz_loo"] = first["elpd"] - peers["loo"]["elpd"]
    mm = peers.get("moment_match", {})
    if "wall_s" in mm:
        s["arviz_mm_s"] = mm["wall_s"]
        s["elpd_minus_arviz_mm"] = first["elpd"] - mm["elpd"]
    exact = {"normal_outlier": lambda: exact_normal_loo(normal_outlier_data()), "neg_binomial": exact_nb_loo}
    if row["model"] in exact:  # the exact LOO by quadrature
        e = exact[row["model"]]()
        row["exact_elpd_i"] = e.tolist()
        s["exact_elpd"] = float(e.sum())
        s["elpd_minus_exact"] = first["elpd"] - float(e.sum())
        for key, peer in (("arviz_loo", "loo"), ("arviz_mm", "moment_match")):
            if "elpd" in peers.get(peer, {}):
                s[f"{key}_minus_exact"] = peers[peer]["elpd"] - float(e.sum())
    row["summary"] = s


def _f(v, fmt="{:.1f}"):
    return "—" if v is None else fmt.format(v)


def print_table(rows):
    head = (f"{'model':<15}{'n':>4}{'d':>6}{'S':>6}{'fit s':>8}{'cold':>8}{'warm':>8}{'compiled':>9}{'compile':>9}"
            f"{'CLI cold':>9}{'CLI warm':>9}{'az loo':>8}{'az mm':>8}{'cold/fit':>9}{'warm/fit':>9}{'elpd':>10}")
    print(head)
    for r in rows:
        s = r["summary"]
        print(f"{r['model']:<15}{r['n']:>4}{r['dim']:>6}{4 * r['draws_per_chain']:>6}{s['fit_s']:>8.1f}"
              f"{s['cold_s']:>8.1f}{s['warm_s']:>8.1f}{s['compiled_s']:>9.1f}{s['compile_s']:>9.1f}"
              f"{_f(s.get('cli_cold_s')):>9}{_f(s.get('cli_warm_s')):>9}{_f(s.get('arviz_loo_s'), '{:.2f}'):>8}"
              f"{_f(s.get('arviz_mm_s'), '{:.2f}'):>8}{s['cold_over_fit']:>9.2f}{s['warm_over_fit']:>9.2f}"
              f"{r['python']['cold']['calls'][0]['elpd']:>10.3f}", flush=True)


def machine():
    import importlib.metadata as md

    versions = {}
    for pkg in ("jax", "jaxlib", "numpyro", "pymc", "arviz_stats", "httpstan"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "load_average_at_start": os.getloadavg()[0], "versions": versions}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reduced", action="store_true", help="model 1, 4 x 500 draws, no command line (CI)")
    ap.add_argument("--models", help=f"comma-separated subset of {', '.join(MODELS)}")
    ap.add_argument("--out", help="the JSON file (default benchmarks/results/latency.json or latency_reduced.json)")
    ap.add_argument("--append", action="store_true", help="replace the rows of --models in an existing --out file "
                                                          "and keep the others")
    ap.add_argument("--work", help="folder for the draws and cache folders (default: a temporary one, removed)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("cold", "warm"), help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--arviz", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--summarize", metavar="JSON", help="recompute the summaries of a results file from its "
                                                         "measurements, write it back and print its table")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.summarize:
        doc = json.loads(Path(args.summarize).read_text())
        for row in doc["models"]:
            derive(row)
        Path(args.summarize).write_text(json.dumps(doc, indent=1))
        print_table(doc["models"])
        return 0
    names = REDUCED_MODELS if args.reduced else MODELS
    if args.models:
        names = tuple(m.strip() for m in args.models.split(","))
        unknown = [m for m in names if m not in MODELS]
        if unknown:
            ap.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    draws = 500 if args.reduced else 1000
    out = Path(args.out or HERE / "results" / ("latency_reduced.json" if args.reduced else "latency.json"))
    work_root = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="latency_"))
    command = "benchmarks/latency.py" + (" --reduced" if args.reduced else "") + (
        f" --models {','.join(names)}" if args.models else "")
    doc = {"what": __doc__.split("\n")[0], "mode": "reduced" if args.reduced else "full", "seed": SEED,
           "command": command, "machine": machine(), "models": []}
    if args.append and out.exists():  # the rows of other models kept, each with the run that measured it
        doc = json.loads(out.read_text())
        doc["models"] = [r for r in doc["models"] if r["model"] not in names]
        doc.setdefault("runs", [{"command": doc["command"], "machine": doc["machine"]}])
        doc["runs"].append({"command": command, "machine": machine(), "models": list(names)})
    try:
        for name in names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row = setup(name, work_root / name, draws)
            row["work"] = str(work_root / name)
            measure(name, row, cli=not args.reduced)
            doc["models"].append(row)
            doc["models"].sort(key=lambda r: MODELS.index(r["model"]))
            (doc["runs"][-1] if "runs" in doc else doc)["machine"]["load_average_at_end"] = os.getloadavg()[0]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1))
            print_table([row])
        print()
        print_table(doc["models"])
    finally:
        if not args.work:
            shutil.rmtree(work_root, ignore_errors=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
