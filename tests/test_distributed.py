"""The adaptive search on a real ``dask.distributed`` cluster (``pl.loo(..., compute={"client": ...})``,
:mod:`ppl_loo.workflow.loo.distributed`): a ``LocalCluster`` of two worker processes on this machine gives the
same numbers as the single-process run, bit for bit, for a closed-form JAX model, a PyMC model and a compiled
Stan program; the work ran on both workers; a Stan error raised on a worker comes back as itself.

The Stan program is ``CHECKED_CODE`` of ``test_stan_loo.py`` (the same text: the same cached library).
"""

from __future__ import annotations

import _thread
import logging
import pickle
import shutil
import threading
import time
import warnings
from pathlib import Path

import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest
import xarray as xr

distributed = pytest.importorskip("distributed")
pm = pytest.importorskip("pymc")

import ppl_loo as pl  # noqa: E402
from ppl_loo.sampling import sample_nuts  # noqa: E402
from ppl_loo.workflow.loo.distributed import worker_cache_keys  # noqa: E402

NORMAL = Path(__file__).resolve().parents[1] / "stan_models" / "normal_known_sigma.stan"
POINTWISE = ("elpd_i", "p_loo_i", "pareto_k", "pareto_k_psis", "transform", "hbar_used", "mcse_elpd_i", "n_eff_i",
             "doubtful", "searched")

CHECKED_CODE = """
data {
  int<lower=1> N;
  vector[N] y;
  int<lower=0> min_n;
}
parameters {
  real mu;
  real<lower=0> sigma;
}
model {
  if (N < min_n) fatal_error("need at least min_n = ", min_n, " observations, got N = ", N);
  mu ~ normal(0, 10);
  sigma ~ lognormal(0, 1);
  y ~ normal(mu, sigma);
}
generated quantities {
  vector[N] log_lik;
  for (i in 1:N) log_lik[i] = normal_lpdf(y[i] | mu, sigma);
}
"""


@pytest.fixture(scope="module")
def client():
    """Two worker processes of one thread each; the session's default client while the module runs."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as c:
        yield c


def _cached(client):
    """Model keys in each worker's engine cache."""
    return {addr: set(keys) for addr, keys in client.run(worker_cache_keys).items()}


def _assert_same(a, b):
    """Every summary number and pointwise array identical (NaN where NaN), candidates included."""
    for name in ("elpd", "se", "p"):
        assert getattr(a, name) == getattr(b, name), name
    for name in POINTWISE:
        np.testing.assert_array_equal(getattr(a, name).values, getattr(b, name).values, err_msg=name)
    for name, value in a.candidates.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(b.candidates[name]), err_msg=name)
    np.testing.assert_array_equal(a.adapted_log_weights.values, b.adapted_log_weights.values)


def _loo(data, model, search=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pl.loo(data, model, progressbar=False, search={"adapt": "all", **(search or {})}, **kw)


def _workers_that_built(client, before, after):
    """The workers whose engine cache gained a model during the run: those that ran some of its tasks."""
    return [addr for addr in after if after[addr] - before.get(addr, set())]


# ----------------------------------------------------------------------------- closed-form JAX model
@pytest.fixture(scope="module")
def logistic():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(24, 2))
    y = (X[:, 0] + 0.8 * rng.normal(size=24) > 0).astype(int)
    model = pl.models.LogisticRegression(X, y)
    return model, sample_nuts(model, num_chains=2, num_warmup=200, num_samples=250, random_seed=3)


def test_logistic_regression_same_numbers_on_the_active_client(client, logistic):
    """pl.models.LogisticRegression, client None: the active client is found and used."""
    model, data = logistic
    kw = {"search": {"transforms": ("mm1", "pmm1", "kl", "newton"), "batch_size": 4}}
    local = _loo(data, model, **kw, compute={"client": False})
    before = _cached(client)
    remote = _loo(data, model, **kw)  # client None: the module's client is the default one
    after = _cached(client)
    _assert_same(local, remote)
    assert local.searched.values.all() and (local.transform.values != "psis").any()  # the search did run
    assert len(_workers_that_built(client, before, after)) == 2  # six tasks on both workers


def test_subsample_and_out_of_core_same_numbers_on_the_cluster(client, logistic):
    """pl.loo_subsample(model, compute={"client": ...}) and pl.loo on a dask-backed log-likelihood (out of core: the
    model is evaluated on the flagged columns only, which reach the workers) give the numbers of the single-process
    runs."""
    model, data = logistic
    kw = {"search": {"transforms": ("pmm1", "newton"), "batch_size": 4, "adapt": "all"}, "progressbar": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = pl.loo_subsample(data, model, observations=12, random_seed=2, **kw, compute={"client": False})
        remote = pl.loo_subsample(data, model, observations=12, random_seed=2, **kw, compute={"client": client})
        for name in ("elpd", "se", "subsampling_se", "p"):
            assert getattr(local, name) == getattr(remote, name), name
        np.testing.assert_array_equal(local.elpd_i.values, remote.elpd_i.values)
        np.testing.assert_array_equal(local.pareto_k.values, remote.pareto_k.values)
        assert (np.asarray(local.transform.values) != "psis").any()  # the search ran and changed something
        lazy = data.copy()
        stored = data["log_likelihood"].to_dataset()
        lazy["log_likelihood"] = stored.chunk({d: 5 for d in stored.dims if d not in ("chain", "draw")})
        assert lazy["log_likelihood"].to_dataset()[model.var_name].chunks is not None
        in_memory = pl.loo(data, model, **kw, compute={"client": False})
        out_of_core = pl.loo(lazy, model, **kw, compute={"client": client})
    assert in_memory.elpd == out_of_core.elpd and in_memory.se == out_of_core.se
    for name in ("elpd_i", "pareto_k", "transform", "doubtful"):
        np.testing.assert_array_equal(getattr(in_memory, name).values, getattr(out_of_core, name).values, err_msg=name)


def test_jax_model_same_numbers(client):
    """A pl.JaxModel of lambdas (cloudpickled by value): linear regression with known noise, exact posterior
    draws (conjugate), one outlier."""
    rng = np.random.default_rng(5)
    n, p, sigma, tau = 16, 2, 0.8, 2.0
    X = rng.normal(size=(n, p))
    y = X @ rng.normal(size=p) + sigma * rng.normal(size=n)
    y[3] += 5.0
    prec = X.T @ X / sigma**2 + np.eye(p) / tau**2
    cov = np.linalg.inv(prec)
    beta = rng.multivariate_normal(cov @ X.T @ y / sigma**2, cov, size=(2, 300))
    data = xr.DataTree.from_dict({"posterior": xr.Dataset(
        {"beta": (("chain", "draw", "coef"), beta)}, coords={"chain": [0, 1], "draw": np.arange(300)})})
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    model = pl.JaxModel({"beta": ((p,), None)}, lambda v: jnp.sum(jst.norm.logpdf(v["beta"], 0.0, tau)),
                        lambda v: jst.norm.logpdf(yj, Xj @ v["beta"], sigma), obs_dims=("obs",), observed=y)
    kw = {"search": {"transforms": ("mm1", "kl"), "batch_size": 4}}
    local = _loo(data, model, **kw, compute={"client": False})
    before = _cached(client)
    remote = _loo(data, model, **kw, compute={"client": client})
    _assert_same(local, remote)
    assert len(_workers_that_built(client, before, _cached(client))) == 2


def _search_tasks(client):
    """The adaptive-search tasks the scheduler still holds."""
    return client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if "ppl_loo-search" in str(k)])


def test_ctrl_c_cancels_the_tasks(client, logistic):
    """Ctrl-C (SIGINT in the main thread) once the first batch came back: KeyboardInterrupt, and the
    scheduler forgets every task of the run (the unfinished ones cancelled, none left queued)."""
    model, data = logistic
    stop = threading.Event()

    def interrupt_after_first_result():
        while not stop.is_set():
            states = client.run_on_scheduler(lambda dask_scheduler: [
                ts.state for k, ts in dask_scheduler.tasks.items() if "ppl_loo-search" in str(k)])
            if "memory" in states:
                _thread.interrupt_main()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt_after_first_result)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _loo(data, model, search={"transforms": ("mm1",), "batch_size": 1}, compute={"client": client})  # 24 tasks
    finally:
        stop.set()
        watcher.join()
    for _ in range(100):
        if not _search_tasks(client):
            break
        time.sleep(0.1)
    assert _search_tasks(client) == []


# ----------------------------------------------------------------------------- PyMC
def test_pymc_model_same_numbers(client):
    """A small pymc.Model reaches the workers by cloudpickle and is rebuilt there."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=12)
    yv = 0.4 + 0.9 * x + rng.normal(scale=0.6, size=12)
    yv[3] += 4.0  # an outlier: something to adapt
    with pm.Model() as m:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a + b * x, s, observed=yv)
        idata = pm.sample(draws=300, tune=300, chains=2, cores=1, random_seed=7, progressbar=False,
                          compute_convergence_checks=False, nuts_sampler="pymc")
    kw = {"search": {"transforms": ("mm1", "pmm1", "kl"), "batch_size": 3}}
    local = _loo(idata, m, **kw, compute={"client": False})
    before = _cached(client)
    remote = _loo(idata, m, **kw, compute={"client": client})
    after = _cached(client)
    _assert_same(local, remote)
    assert len(_workers_that_built(client, before, after)) == 2


# ----------------------------------------------------------------------------- Stan
def _stan_draws():
    """Draws near the posterior of CHECKED_CODE's data (any draws do for comparing two runs)."""
    rng = np.random.default_rng(0)
    y = np.array([0.3, -1.2, 0.8, 2.9, 0.1, -0.4, 1.1, 0.6])
    mu = rng.normal(y.mean(), 0.4, size=(2, 200))
    sigma = np.exp(rng.normal(np.log(y.std()), 0.2, size=(2, 200)))
    dt = xr.DataTree.from_dict({"posterior": xr.Dataset(
        {"mu": (("chain", "draw"), mu), "sigma": (("chain", "draw"), sigma)},
        coords={"chain": np.arange(2), "draw": np.arange(200)})})
    return y, dt


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_stan_program_same_numbers_and_worker_errors(client):
    """A pl.StanModel pickles as program + data and loads the cached library on the worker; an error
    that Stan raises inside the search on a worker is raised in the caller with the same type and message."""
    y, dt = _stan_draws()
    ok = pl.StanModel(CHECKED_CODE, {"N": 8, "y": y, "min_n": 4}, n_obs="N")
    back = pickle.loads(pickle.dumps(ok))  # program, data and library key; the library from the cache
    assert not back.compiled and back.build.key == ok.build.key and back.data_json == ok.data_json
    local = _loo(dt, ok, search={"transforms": ("mm1", "pmm1"), "batch_size": 2}, compute={"client": False})
    before = _cached(client)
    remote = _loo(dt, ok, search={"transforms": ("mm1", "pmm1"), "batch_size": 2}, compute={"client": client})
    after = _cached(client)
    _assert_same(local, remote)
    assert len(_workers_that_built(client, before, after)) == 2
    # deleting an observation leaves N = 7 < min_n = 8: Stan's fatal_error in the host callback
    bad = pl.StanModel(CHECKED_CODE, {"N": 8, "y": y, "min_n": 8}, n_obs="N")
    errors = []
    for where in (False, client):
        with pytest.raises(Exception, match="need at least min_n = 8 observations, got N = 7") as info:
            _loo(dt, bad, search={"transforms": ("mm1",), "batch_size": 2}, compute={"client": where})
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1]) and isinstance(errors[0], pl.stan_bridge.StanEvaluationError)
    assert str(errors[0]) == str(errors[1])


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_stan_sampler_on_a_worker_thread(client, tmp_path):
    """Stan's NUTS in the library, run on a dask worker (a task thread of another process, not the thread
    that loaded the library: it needs an autodiff stack of its own), writes the same draws as here."""
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    data = {"N": 12, "y": [0.3, -0.5, 1.1, 0.2, -0.9, 0.4, 0.0, 0.7, -0.2, 0.5, -0.4, 6.0], "sigma": 1.0,
            "mu0": 0.0, "tau0": 2.0}  # test_cli.py's program and data: the same cached library
    sm = pl.StanModel(NORMAL, data, sampler=True)

    def draws(model, out):
        paths, _ = sample_cmdstan_csv(model, out, chains=1, random_seed=9, num_warmup=100, num_samples=100)
        rows = [line for line in paths[0].read_text().splitlines() if line and not line.startswith("#")]
        return np.loadtxt(rows[1:], delimiter=",")  # lp__, ..., mu, log_lik (rows[0]: the names)

    here = draws(sm, tmp_path / "here")
    there = client.submit(draws, sm, tmp_path / "worker", pure=False).result()
    assert here.shape == (100, 20)
    np.testing.assert_array_equal(here, there)


def test_client_argument_is_checked():
    with pytest.raises(TypeError,
                       match=r"client='local' is not a dask.distributed Client.*compute=\{'client': False\}"):
        pl.loo(xr.DataTree(), pl.models.LogisticRegression([[0.0], [1.0]], [0, 1]), compute={"client": "local"})
