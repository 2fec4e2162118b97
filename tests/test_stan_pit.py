"""``pl.loo_pit`` of a Stan program without ``cdf=``: the predictive CDF is Stan's own ``_lcdf`` of the
distribution in each ``log_lik`` statement, in a derived program (:func:`ppl_loo.stan_bridge.derived.cdf_program`).

Known answers: identical (1e-12) to the CDF written by hand with scipy at the same points, for a continuous outcome
(``normal_lpdf``) and a discrete one on a link scale (``poisson_log_lpmf`` as ``poisson_lcdf`` of ``exp(eta)``, and
``P(y_rep < y)`` from ``y - 1``); the closed-form LOO-PIT of a normal mean with known sigma and an outlier,
``Phi((y_i - m_-i) / sqrt(sigma^2 + v_-i))``; a statement no CDF can be derived from is refused by name.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import ppl_loo as pl
from ppl_loo.adapters.stan.posterior import loo_adapter
from ppl_loo.stan_bridge.derived import cdf_program
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

ROOT = Path(__file__).resolve().parents[1]
NORMAL = ROOT / "stan_models" / "normal_known_sigma.stan"
POISSON = ROOT / "stan_models" / "poisson_lognormal.stan"
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
SIGMA, MU0, TAU0 = 1.0, 0.0, 10.0


def test_normal_program_pit_against_scipy_and_the_closed_form():
    data = {"N": len(Y), "y": Y, "sigma": SIGMA, "mu0": MU0, "tau0": TAU0}
    sm = pl.StanModel(str(NORMAL), data, sampler=True)
    paths, _ = sample_cmdstan_csv(sm, tempfile.mkdtemp(), chains=4, random_seed=11, num_warmup=300, num_samples=1000)
    tree = pl.from_cmdstan([str(p) for p in paths])
    model = pl.StanModel(str(NORMAL), data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(tree, model, progressbar=False, second_opinions={"mixture": False, "smc": False})
    auto = pl.loo_pit(tree, res, model=model)
    by_hand = pl.loo_pit(tree, res, model=model, cdf=lambda p: stats.norm.cdf(Y, np.asarray(p["mu"])[:, None], SIGMA))
    np.testing.assert_allclose(auto.values, by_hand.values, rtol=0, atol=1e-12)
    assert auto.weights.values[10] == "adapted"  # the outlier: its CDF evaluated at the adapted proposal's points
    exact = np.empty(len(Y))
    for i in range(len(Y)):
        rest = np.delete(Y, i)
        v = 1.0 / (1.0 / TAU0**2 + rest.size / SIGMA**2)
        m = v * (MU0 / TAU0**2 + rest.sum() / SIGMA**2)
        exact[i] = stats.norm.cdf((Y[i] - m) / np.sqrt(SIGMA**2 + v))
    np.testing.assert_allclose(auto.values, exact, atol=0.02)
    assert auto.values[10] > 0.999  # the outlier sits far in the LOO predictive's upper tail


def test_poisson_log_program_cdf_is_poissons_at_exp_eta():
    rng = np.random.default_rng(2)
    y = rng.poisson(3.0, size=8)
    y[0] = 0  # P(y_rep < 0) = 0: Stan's poisson_lcdf(-1 | .) is -inf
    adapter = loo_adapter(pl.StanModel(str(POISSON), {"N": y.size, "y": y.tolist()}))
    theta = rng.normal(scale=0.5, size=(50, adapter.dim))
    params = adapter.constrain(theta)
    upper, lower = adapter.pit_cdf(params)
    rate = np.exp(np.asarray(params["eta"]))
    np.testing.assert_allclose(upper, stats.poisson.cdf(y, rate), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(lower, stats.poisson.cdf(y - 1, rate), rtol=1e-12, atol=1e-300)
    assert np.all(lower[:, 0] == 0.0)


@pytest.mark.parametrize("statement", [
    "log_lik[n] = normal_lpdf(y[n] | mu, 1) + 0.5;",
    "log_lik[n] = log_mix(0.3, normal_lpdf(y[n] | mu, 1), normal_lpdf(y[n] | 0, 1));",
    "log_lik[n] += normal_lpdf(y[n] | mu, 1);"])
def test_a_log_lik_that_is_not_one_density_call_is_refused(statement):
    code = ("data { int N; vector[N] y; } parameters { real mu; } model { y ~ normal(mu, 1); } "
            "generated quantities { vector[N] log_lik; for (n in 1:N) { " + statement + " } }")
    with pytest.raises(ValueError, match=r"no CDF can be derived"):
        cdf_program(code)
