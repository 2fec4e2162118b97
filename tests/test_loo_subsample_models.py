"""``pl.loo_subsample(data, model)`` with a compiled Stan program (closed-form LOO) and a PyMC model (the
subsample's elpd_i are pl.loo's at the same observations)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import ppl_loo as pl

pytestmark = pytest.mark.x64

MODELS = Path(__file__).resolve().parents[1] / "stan_models"
TRANSFORMS = ("mm_iter", "mm2", "newton_mix", "pmm1_mix")  # a smaller search compiles faster


def _closed_form_loo(y, tau0=10.0):
    """Normal mean, sigma = 1, prior N(0, tau0^2): log p(y_i | y_-i)."""
    out = []
    for i in range(len(y)):
        rest = np.delete(y, i)
        prec = 1 / tau0**2 + len(rest)
        var = 1 + 1 / prec
        out.append(-0.5 * np.log(2 * np.pi * var) - 0.5 * (y[i] - rest.sum() / prec) ** 2 / var)
    return np.array(out)


def test_stan_outlier_in_the_subsample_matches_closed_form():
    pytest.importorskip("httpstan")
    if shutil.which("g++") is None:  # pragma: no cover
        pytest.skip("no C++ compiler")
    rng = np.random.default_rng(0)
    n = 200
    y = rng.normal(size=n)
    y[5] = 30.0
    stan = pl.StanModel(MODELS / "normal_known_sigma.stan", {"N": n, "y": y, "sigma": 1.0, "mu0": 0.0, "tau0": 10.0})
    prec = 1 / 100 + n
    mu = y.sum() / prec + rng.normal(size=(4, 250)) / np.sqrt(prec)  # exact posterior draws
    data = xr.DataTree.from_dict({"posterior": xr.Dataset({"mu": (("chain", "draw"), mu)})})
    obs = np.r_[5, np.arange(10, n, 5)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing doubtful, nothing to warn about
        res = pl.loo_subsample(data, stan, observations=obs, progressbar=False, search={"transforms": TRANSFORMS})
    exact = _closed_form_loo(y)
    idx = res.loo_subsample_observations
    assert res.pareto_k_psis.values[5] > 1.0 and res.pareto_k.values[5] <= res.good_k
    assert res.transform.values[5] not in ("psis", "failed")
    err = res.elpd_i.values[idx] - exact[idx]
    assert np.all(np.abs(err) <= 4 * res.mcse_elpd_i.values[idx] + 0.02), err
    # no log_likelihood group: "lpd" from the program's log_lik at every draw
    lpd = np.log(np.mean(np.exp(-0.5 * np.log(2 * np.pi) - 0.5 * (y - mu.reshape(-1, 1)) ** 2), axis=0))
    np.testing.assert_allclose(res.elpd_loo_approx.values, lpd, rtol=1e-10)


def test_pymc_subsample_elpd_i_are_pl_loo_values():
    pm = pytest.importorskip("pymc")
    rng = np.random.default_rng(3)
    n = 30
    x = rng.normal(size=n)
    x[0] = 4.0  # a leverage point against the trend
    y = (x + rng.normal(scale=0.5, size=n) > 0).astype(int)
    y[0] = 0
    with pm.Model(coords={"obs_id": np.arange(n)}) as model:
        a = pm.Normal("a", 0, 2.5)
        b = pm.Normal("b", 0, 2.5)
        pm.Bernoulli("y", logit_p=a + b * x, observed=y, dims="obs_id")
        idata = pm.sample(draws=500, tune=500, chains=2, cores=1, progressbar=False, random_seed=5,
                          compute_convergence_checks=False, nuts_sampler="pymc")
        pm.compute_log_likelihood(idata, progressbar=False)
    obs = np.array([0, 3, 8, 15, 22, 29])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # pl.loo_subsample runs the search alone: pl.loo without its second opinions
        full = pl.loo(idata, model, progressbar=False, search={"transforms": TRANSFORMS, "adapt": "flagged"},
                      second_opinions={"mixture": False, "smc": False})
        res = pl.loo_subsample(idata, model, observations=obs,
                               progressbar=False, search={"transforms": TRANSFORMS, "adapt": "flagged"})
    # both search the flagged observations; the same engine gives the same elpd_i, k-hat and proposal
    np.testing.assert_allclose(res.elpd_i.values[obs], full.elpd_i.values[obs], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.pareto_k.values[obs], full.pareto_k.values[obs], rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(res.transform.values[obs], full.transform.values[obs])
    np.testing.assert_array_equal(res.doubtful.values[obs], full.doubtful.values[obs])
    np.testing.assert_array_equal(res.searched.values[obs], full.searched.values[obs])
    assert res.searched.values[0] and res.adapted and res.elpd_i.dims == ("obs_id",)
