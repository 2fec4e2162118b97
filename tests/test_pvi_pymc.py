"""``pl.pvi`` on PyMC models (real PyMC graphs compiled to JAX), with known answers.

- T4 of the notes (Cor. 2): y_i ~ Poisson(exp theta_i), theta_i ~ N(1, 0.7^2); the model
  y ~ Poisson(exp theta) is misspecified. Log-score PVI recovers the population (m ~ 1.0, s ~ 0.7,
  Gauss-Hermite values of the notes for n = 20000); VI collapses to m = log(mean y), s -> 0.
- The normal toy with the CRPS through PyMC's own JAX sampler of the observed variable: s = 1.88386.
- T5: Bernoulli without covariates, quadratic score: the predictive probability is n_1 / n.
- Held-out scores of the draws against closed forms.
"""

import math

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import ppl_loo as pl
from ppl_loo.numerics.vi.scores import crps_gaussian


def test_t4_poisson_lognormal_population_vs_vi_collapse():
    rng = np.random.default_rng(0)
    n = 1500
    y = rng.poisson(np.exp(rng.normal(1.0, 0.7, n)))
    with pm.Model(coords={"obs": np.arange(n)}) as model:
        theta = pm.Normal("theta", 0.0, 10.0)
        pm.Poisson("y", pm.math.exp(theta), observed=y, dims="obs")
    tree = pl.pvi(None, model, score="log", random_seed=3, draws=500,
                  optimizer={"steps": 1500, "draws_per_step": 200, "init_scale": 0.5})
    g = tree["pvi"]
    assert float(g["pvi_mean"][0]) == pytest.approx(1.0, abs=0.06)
    assert float(g["pvi_sd"][0]) == pytest.approx(0.7, abs=0.06)
    # VI: the posterior of a misspecified Poisson mean, concentrated at log(mean y)
    assert float(g["vi_mean"][0]) == pytest.approx(math.log(y.mean()), abs=0.01)
    assert float(g["vi_sd"][0]) < 0.06
    assert bool(g["flagged"][0]) and g.attrs["flagged"] == '["theta"]'
    # PVI's predictive fits the data better than VI's (the training-score gap)
    assert float(g["train_log_score"]) > float(g["vi_train_log_score"]) + 100
    assert tree.log_likelihood["y"].dims == ("chain", "draw", "obs")
    np.testing.assert_array_equal(tree.observed_data["y"].values, y)
    # CRPS needs a pathwise-differentiable simulator: a Poisson outcome is refused with the reason
    with pytest.raises(ValueError, match="discrete"):
        pl.pvi(None, model, score="crps", random_seed=0, optimizer={"steps": 5})
    # the unbiased rejection estimator with the automatic Poisson bound reaches the same population
    with pytest.warns(UserWarning, match="max_rounds"):  # rare observations may exhaust the rounds
        rs = pl.pvi(None, model, score="log", random_seed=4, draws=100,
                    optimizer={"estimator": "rejection", "steps": 800, "draws_per_step": 100, "init_scale": 0.5},
                    output={"compare_vi": False})["pvi"]
    assert float(rs["loc"][0]) == pytest.approx(1.0, abs=0.1)
    assert float(rs["sd"][0]) == pytest.approx(0.7, abs=0.1)


def test_normal_toy_crps_through_the_pymc_sampler_and_held_out_scores():
    y = np.array([-3.0, -1.0, 0.0, 1.0, 3.0])
    with pm.Model() as model:
        x = pm.Data("x", np.zeros(5))
        y_data = pm.Data("y_data", y)
        theta = pm.Normal("theta", 0.0, 10.0)
        pm.Normal("y", theta + x, 1.0, observed=y_data, shape=x.shape)
    tree = pl.pvi(None, model, score="crps", random_seed=7, draws=4000,
                  optimizer={"steps": 2000, "draws_per_step": 1000, "init_scale": 1.0}, output={"compare_vi": False})
    g = tree["pvi"]
    assert float(g["sd"][0]) == pytest.approx(1.88386, abs=0.012)
    assert abs(float(g["loc"][0])) < 0.02
    # held-out scores on a test split (pm.set_data) against the closed forms of the Gaussian q
    y_test = np.array([0.5, -2.0, 4.0])
    with model:
        pm.set_data({"x": np.zeros(3), "y_data": y_test})
    res = pl.predictive_scores(tree, model, random_seed=1)
    draws = tree.posterior["theta"].values.ravel()
    m, s = draws.mean(), draws.std()
    pred_sd = math.sqrt(1 + s**2)
    dens = stats.norm.pdf(y_test[None, :], draws[:, None], 1.0)
    np.testing.assert_allclose(res["log_score"].values, np.log(dens.mean(0)), rtol=1e-10)  # the mixture
    se = dens.std(0) / dens.mean(0) / math.sqrt(draws.size)
    exact_log = stats.norm.logpdf(y_test, m, pred_sd)  # q Gaussian: predictive N(m, 1 + s^2)
    assert np.all(np.abs(res["log_score"].values - exact_log) < 4 * se + 1e-3)
    exact_crps = np.asarray(crps_gaussian(m, pred_sd, y_test))
    np.testing.assert_allclose(res["crps"].values, exact_crps, atol=0.08)
    assert res.attrs["log_score"] == pytest.approx(float(res["log_score"].sum()))
    assert "quadratic" not in res  # continuous outcome
    with pytest.raises(ValueError, match="quadratic"):
        pl.predictive_scores(tree, model, scores=["quadratic"])


def test_t5_bernoulli_quadratic_predictive_matches_frequency():
    rng = np.random.default_rng(5)
    yb = (rng.uniform(size=300) < 0.3).astype(int)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 3.0)
        pm.Bernoulli("y", logit_p=a, observed=yb)
    tree = pl.pvi(None, model, score="quadratic", reg="prior", lam=0.1, random_seed=3, draws=4000,
                  optimizer={"steps": 1500, "draws_per_step": 200})
    p = 1 / (1 + np.exp(-tree.posterior["a"].values.ravel()))
    assert p.mean() == pytest.approx(yb.mean(), abs=0.01)
    # training quadratic score of the mixture: 2 P(y_i) - P(0)^2 - P(1)^2, from the draws directly
    P1 = p.mean()
    expected = np.sum(np.where(yb == 1, 2 * P1, 2 * (1 - P1)) - P1**2 - (1 - P1) ** 2)
    assert float(tree["pvi"]["train_quadratic"]) == pytest.approx(expected, rel=1e-9)
    res = pl.predictive_scores(tree, model, random_seed=0)
    assert res.attrs["quadratic"] == pytest.approx(expected, rel=1e-9)
    assert res.attrs["quadratic_mean"] == pytest.approx(expected / 300, rel=1e-9)
    # CRPS of a discrete outcome is still evaluated (fair estimator) but not optimized
    assert "crps" in res
    # the quadratic score is for categorical outcomes
    with pm.Model() as cont:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1.0, observed=rng.normal(size=10))
    with pytest.raises(ValueError, match="categorical"):
        pl.pvi(None, cont, score="quadratic", random_seed=0, optimizer={"steps": 5})
