"""ppl_loo on PyMC models against arviz_stats moment matching and brute-force refits.

Real PyMC sampling (small, seeded); no mocks:

- Poisson regression with gross outliers: no more observations left above ``good_k`` than
  ``arviz_stats.loo(..., moment_match=True)``; the adapted elpd_i of the worst observations agrees
  with an exact LOO refit (MCMC on the data without the observation) within Monte Carlo error.
- Non-centered eight schools: the same peer comparison and elpd within 1.0 of the peer.

(``loo_expectations`` and ``loo_roc`` of the Bernoulli-logit GLM are in ``test_pymc.py``.)
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy.special import logsumexp
from scipy.stats import poisson

pm = pytest.importorskip("pymc")
azs = pytest.importorskip("arviz_stats")

import ppl_loo as pl  # noqa: E402

SAMPLE = {
    "draws": 500,
    "tune": 500,
    "chains": 2,
    "cores": 1,
    "progressbar": False,
    "compute_convergence_checks": False,
    "nuts_sampler": "pymc",  # PyMC picks nutpie when it is installed; keep the tests' draws fixed
    "idata_kwargs": {"log_likelihood": True},
}


def _n_bad(res):
    return int((np.asarray(res.pareto_k) > res.good_k).sum())


# ---------------------------------------------------------------------- Poisson with outliers
def _poisson_data():
    rng = np.random.default_rng(7)
    n = 40
    x = rng.normal(size=(n, 2))
    mu = np.exp(1.0 + 0.5 * x[:, 0] - 0.3 * x[:, 1])
    y = rng.poisson(mu)
    outliers = np.array([4, 17, 31])
    y[outliers] = np.round(4 * mu[outliers] + 20).astype(int)  # gross outliers far above the fit
    return x, y, outliers


def _poisson_model(x, y):
    with pm.Model(coords={"obs_id": np.arange(len(y)), "feature": [0, 1]}) as model:
        alpha = pm.Normal("alpha", 0, 2.5)
        beta = pm.Normal("beta", 0, 1, dims="feature")
        pm.Poisson("y", mu=pm.math.exp(alpha + pm.math.dot(x, beta)), observed=y, dims="obs_id")
    return model


@pytest.fixture(scope="module")
def poisson_fit():
    x, y, outliers = _poisson_data()
    model = _poisson_model(x, y)
    with model:
        idata = pm.sample(**SAMPLE, random_seed=21)
    # the flagged ones are refit below; SMC as their second opinion (no refit in its place): the estimates the search
    # and SMC give are checked
    res = pl.loo(idata, model, progressbar=False, search={"adapt": "flagged"}, second_opinions={"smc": True})
    return model, idata, x, y, outliers, res


def test_poisson_outliers_vs_arviz_moment_match(poisson_fit):
    model, idata, x, y, outliers, res = poisson_fit
    peer = azs.loo(idata, pointwise=True, moment_match=True, model=model)
    n_ours, n_peer = _n_bad(res), _n_bad(peer)
    n_psis = int((res.pareto_k_psis.values > res.good_k).sum())
    print(f"\nPoisson: above k threshold {res.good_k:.3f}: plain PSIS {n_psis}, ppl_loo {n_ours}, "
          f"arviz mm {n_peer}; elpd ppl_loo {res.elpd:.3f}, arviz mm {peer.elpd:.3f}")
    print("outlier k (psis / ppl_loo / arviz):", res.pareto_k_psis.values[outliers].round(3),
          res.pareto_k.values[outliers].round(3), np.asarray(peer.pareto_k)[outliers].round(3))
    assert n_psis >= 1  # the outliers do make plain PSIS fail
    assert n_ours <= n_peer
    assert np.isfinite(res.elpd_i.values).all()


def _ess(w):
    """ESS of a (chain, draw) array with arviz_stats."""
    ds = xr.Dataset({"w": (("chain", "draw"), w)})
    return float(azs.ess(ds)["w"])


def test_poisson_adapted_elpd_i_vs_refit(poisson_fit):
    """Every flagged observation (plain-PSIS k above the threshold, or a log-likelihood so variable
    that plain PSIS is not trusted): refit without it by MCMC; the adapted elpd_i lies within three
    Monte Carlo standard errors of the refit's ``log mean_s p(y_i | theta_s)``."""
    model, idata, x, y, outliers, res = poisson_fit
    flagged = np.flatnonzero(res.searched.values)
    k_bad = np.flatnonzero(res.pareto_k_psis.values > res.good_k)
    assert set(k_bad) <= set(flagged) and set(outliers) <= set(flagged)
    n_obs = len(y)
    lw_psis = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(-1, n_obs)
    full = idata["posterior"]
    ll_full = poisson.logpmf(y, np.exp(full["alpha"].values.reshape(-1, 1)
                                       + full["beta"].values.reshape(-1, x.shape[1]) @ x.T))  # (S, n)
    lines = []
    for i in flagged:
        keep = np.arange(len(y)) != i
        with _poisson_model(x[keep], y[keep]):
            refit = pm.sample(draws=1000, tune=1000, chains=4, cores=1, random_seed=100 + int(i),
                              progressbar=False, compute_convergence_checks=False, nuts_sampler="pymc")
        post = refit["posterior"]
        a = post["alpha"].values  # (chain, draw)
        b = post["beta"].values  # (chain, draw, 2)
        ll = poisson.logpmf(y[i], np.exp(a + b @ x[i]))  # (chain, draw)
        elpd_refit = float(logsumexp(ll) - np.log(ll.size))
        w = np.exp(ll - ll.max())
        mcse_refit = float(np.std(w, ddof=1) / np.mean(w) / np.sqrt(_ess(w)))  # delta method, log of a mean
        e_ad = float(res.elpd_i.values[i])
        e_psis = float(logsumexp(lw_psis[:, i] + ll_full[:, i]))
        lines.append(f"obs {i:2d} (y={y[i]:2d}, k_psis={res.pareto_k_psis.values[i]:.3f}, "
                     f"k={res.pareto_k.values[i]:.3f}, "
                     f"{res.transform.values[i]}): ppl_loo {e_ad:.4f} +- {res.mcse_elpd_i.values[i]:.4f}, refit "
                     f"{elpd_refit:.4f} +- {mcse_refit:.4f}, plain PSIS {e_psis:.4f}: "
                     f"|diff| = {abs(e_ad - elpd_refit) / mcse_refit:.2f} refit MCSE")
        print("\n" + lines[-1])
        assert abs(e_ad - elpd_refit) <= 3.0 * mcse_refit, lines[-1]


# ---------------------------------------------------------------------- eight schools
def test_eight_schools_vs_arviz_moment_match():
    y = np.array([28, 8, -3, 7, -1, 1, 18, 12], dtype=float)
    sigma = np.array([15, 10, 16, 11, 9, 11, 10, 18], dtype=float)
    with pm.Model(coords={"school": np.arange(8)}) as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        theta_t = pm.Normal("theta_t", 0, 1, dims="school")
        pm.Normal("y", mu + tau * theta_t, sigma, observed=y, dims="school")
        idata = pm.sample(**SAMPLE, random_seed=8, target_accept=0.95)
    res = pl.loo(idata, model, progressbar=False)
    peer = azs.loo(idata, pointwise=True, moment_match=True, model=model)
    print(f"\neight schools: elpd ppl_loo {res.elpd:.3f} (se {res.se:.3f}), arviz mm {peer.elpd:.3f}; "
          f"above k: ppl_loo {_n_bad(res)}, arviz mm {_n_bad(peer)}; "
          f"transforms {list(res.transform.values)}")
    assert _n_bad(res) <= _n_bad(peer)
    assert abs(res.elpd - peer.elpd) < 1.0
